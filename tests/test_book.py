"""book.yml is the single source of truth: check the chapters it lists and the environment files."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import jupytext
import nbformat
import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bookinfo import CHAPTERS_DIR, load_book  # noqa: E402
from build_slides import glued_values  # noqa: E402

BOOK = load_book()
STEMS = [chapter["file"] for chapter in BOOK["chapters"]]


def test_book_has_title_authors_and_chapters():
    assert BOOK["title"].strip()
    assert BOOK["authors"]
    assert STEMS, "book.yml lists no chapter"
    assert len(set(STEMS)) == len(STEMS), "a chapter is listed twice"


@pytest.mark.parametrize("chapter", BOOK["chapters"], ids=STEMS)
def test_every_chapter_has_a_title_and_a_budget(chapter):
    assert chapter.get("title", "").strip(), f"{chapter['file']}: no title"
    budget = chapter.get("budget_s")
    assert isinstance(budget, int) and 0 < budget <= 120, f"{chapter['file']}: budget_s={budget!r}"


def test_no_unlisted_chapter_files():
    on_disk = {p.stem for p in CHAPTERS_DIR.glob("*.py")} | {p.stem for p in CHAPTERS_DIR.glob("*.ipynb")}
    assert on_disk - set(STEMS) == set(), "chapter files not listed in book.yml"


def _cells(notebook):
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


@pytest.mark.parametrize("stem", STEMS)
def test_chapter_pair_exists_in_sync_and_executed(stem):
    source, executed = CHAPTERS_DIR / f"{stem}.py", CHAPTERS_DIR / f"{stem}.ipynb"
    assert source.exists() and executed.exists(), f"{stem}: needs both .py and .ipynb"
    from_py = jupytext.read(source)
    from_ipynb = nbformat.read(executed, as_version=4)
    assert _cells(from_py) == _cells(from_ipynb), f"{stem}: .py and .ipynb differ; run `make execute CH={stem}`"
    code_cells = [cell for cell in from_ipynb.cells if cell.cell_type == "code"]
    never_run = [i for i, cell in enumerate(code_cells) if cell.execution_count is None]
    assert not never_run, f"{stem}: code cells {never_run} were never executed in the stored notebook"


@pytest.mark.parametrize("stem", STEMS)
def test_stored_notebook_shows_no_font_warnings(stem):
    # A stale matplotlib font cache (one built by a virtual environment since deleted) makes every figure print
    # a screen of "findfont" warnings into the stored outputs the student reads; re-execute with a fresh cache.
    executed = nbformat.read(CHAPTERS_DIR / f"{stem}.ipynb", as_version=4)
    warned = [i for i, cell in enumerate(executed.cells) for output in cell.get("outputs", [])
              if output.get("name") == "stderr" and "findfont" in output.get("text", "")]
    assert not warned, f"{stem}: cells {sorted(set(warned))} carry matplotlib font warnings; rm -rf ~/.cache/matplotlib"


def _requirement_names(requirements):
    names = set()
    for requirement in requirements:
        match = re.match(r"\s*([A-Za-z0-9_.\-]+)", requirement)
        if match and not requirement.strip().startswith("-"):
            names.add(match.group(1).lower().replace("_", "-"))
    return names


def test_environment_yml_agrees_with_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    in_pyproject = _requirement_names(project["dependencies"])
    for requirements in project["optional-dependencies"].values():
        in_pyproject |= {n for n in _requirement_names(requirements) if n != "k3lite"}
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))
    in_environment = _requirement_names(pip_section)
    assert in_pyproject == in_environment, (
        f"only in pyproject: {sorted(in_pyproject - in_environment)}; "
        f"only in environment.yml: {sorted(in_environment - in_pyproject)}")


@pytest.mark.parametrize("stem", STEMS)
def test_chapter_source_has_no_control_characters(stem):
    # A LaTeX command written in a non-raw Python string (\beta, \approx, \to) turns into a control
    # character that MathJax then fails on; catch it before the browser test does.
    text = (CHAPTERS_DIR / f"{stem}.py").read_text(encoding="utf-8")
    bad = sorted({f"line {n}: {ch!r}" for n, line in enumerate(text.splitlines(), 1)
                  for ch in line if ord(ch) < 32 and ch != "\t"})
    assert not bad, f"{stem}: control characters in the source: {bad[:5]}"


def _source_windows():
    """Every Python file a listing can come from (the package and the chapters), as lists of lines."""
    files = sorted((ROOT / "k3lite").rglob("*.py")) + sorted(CHAPTERS_DIR.glob("*.py"))
    return [path.read_text(encoding="utf-8").splitlines() for path in files]


def _occurs_in(listing, sources):
    # A listing is a dedented run of consecutive source lines (k3lite.course.listing.source).
    wanted = listing.splitlines()
    first = wanted[0].strip()
    for lines in sources:
        for start, line in enumerate(lines):
            if line.strip() == first and textwrap.dedent("\n".join(lines[start:start + len(wanted)])) == listing:
                return True
    return False


@pytest.mark.parametrize("stem", STEMS)
def test_stored_listings_show_the_current_source(stem):
    # A kernel changed without its chapter re-executed leaves the stored listing showing the old code; nbval
    # finds that only at the end of a long run. Here it takes a second: every output of a show(...) cell must
    # still be a run of lines of the package's (or the chapter's) source.
    notebook = nbformat.read(CHAPTERS_DIR / f"{stem}.ipynb", as_version=4)
    sources = _source_windows()
    stale = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or not re.search(r"^show\(", cell.source, re.MULTILINE):
            continue
        for output in cell.get("outputs", []):
            markdown = output.get("data", {}).get("text/markdown", "")
            match = re.fullmatch(r"(`{3,})python\n(.*)\n\1", markdown, re.DOTALL)
            if match and not _occurs_in(match.group(2), sources):
                stale.append(f"cell {index}: {cell.source.strip().splitlines()[-1]}")
    assert not stale, f"{stem}: stored listings differ from the source; run `make execute CH={stem}`: {stale}"


GLUE_REFERENCE = re.compile(r"\{glue(?::[a-z]+)?\}`([^`:]+)")


@pytest.mark.parametrize("stem", STEMS)
def test_every_glue_key_a_chapter_reads_is_glued_in_its_outputs(stem):
    """The book and the slides fail on a {glue:text} key no cell glued; `make test` should fail first."""
    notebook = nbformat.read(CHAPTERS_DIR / f"{stem}.ipynb", as_version=4)
    read = {key for cell in notebook.cells if cell.cell_type == "markdown"
            for key in GLUE_REFERENCE.findall(cell.source)}
    missing = read - set(glued_values(notebook))
    assert not missing, f"{stem}: markdown reads glue keys that no stored output glues: {sorted(missing)}"
