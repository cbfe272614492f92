"""The docs' generated tables match their sources, and the README stays a short page for the learner.

README.md's chapter table comes from book.yml, benchmarks/README.md's results tables from the JSON files in
benchmarks/results/; `python scripts/gen_docs.py` rewrites both, `--check` finds a stale or hand-edited one.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import gen_docs  # noqa: E402
from bookinfo import load_book  # noqa: E402

README = (ROOT / "README.md").read_text(encoding="utf-8")
ORDINALS = ("second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
            "fourteenth|fifteenth|sixteenth|seventeenth")
SOURCES = ["README.md", "benchmarks/README.md", "book.yml", *(rel for _, rel in gen_docs.RESULTS)]


@pytest.mark.parametrize("rel, name, render", gen_docs.BLOCKS, ids=[rel for rel, _, _ in gen_docs.BLOCKS])
def test_committed_block_equals_the_regenerated_one(rel, name, render):
    text = (ROOT / rel).read_text(encoding="utf-8")
    block = re.search(rf"<!-- {name}:start -->\n(.*)\n<!-- {name}:end -->", text, re.DOTALL)
    assert block, f"{rel}: no {name} block"
    assert block.group(1) == render(ROOT), f"{rel}: stale; run `python scripts/gen_docs.py`"


def test_every_chapter_has_a_summary_and_its_title_is_in_the_readme():
    for chapter in load_book()["chapters"]:
        assert "→" in chapter.get("summary", ""), f"{chapter['file']}: summary must read 'failure → fix'"
        assert chapter["title"] in README, f"{chapter['file']}: title missing from README.md"


def test_readme_is_short_and_has_no_run_ordinals():
    assert len(README.splitlines()) <= 130
    for rel in ("README.md", "benchmarks/README.md", "CONTRIBUTING.md"):
        text = (ROOT / rel).read_text(encoding="utf-8")
        found = re.findall(rf"\b(?:{ORDINALS})\s+runs?\b", text, re.IGNORECASE)
        assert not found, f"{rel}: run ordinals {found}"


def copy_sources(tmp_path: Path) -> Path:
    for rel in SOURCES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_check_passes_on_a_faithful_copy(tmp_path):
    assert gen_docs.main(["--check", "--root", str(copy_sources(tmp_path))]) == 0


@pytest.mark.parametrize("rel, cell", [("README.md", "| 120 s |"), ("benchmarks/README.md", "| KDA | forward |")])
def test_check_finds_a_hand_edited_cell(tmp_path, capsys, rel, cell):
    root = copy_sources(tmp_path)
    path = root / rel
    text = path.read_text(encoding="utf-8")
    row_start = text.index(cell)
    row_end = text.index("\n", row_start)
    edited = text[:row_start] + re.sub(r"\d", "9", text[row_start:row_end], count=1) + text[row_end:]
    assert edited != text
    path.write_text(edited, encoding="utf-8")
    assert gen_docs.main(["--check", "--root", str(root)]) == 1
    assert rel in capsys.readouterr().err
    assert gen_docs.main(["--root", str(root)]) == 0  # regenerating repairs it
    assert path.read_text(encoding="utf-8") == text
