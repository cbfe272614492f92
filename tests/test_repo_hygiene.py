"""What a maintainer expects of the repository itself: a licence that matches pyproject.toml, no paths of the machine
a file was written on, a clean lint, and a package whose top level stays small (the rest lives in sub-packages)."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# An absolute path into a machine's work, scratch or home folders (a URL's path, e.g. https://host/home/, is not one).
MACHINE_PATH = re.compile(rb"(?<![\w.:-])/(work|tmp|root|home)/")
# Tracked files that may name such a path: tests that make their own temporary folders there. None does today
# (pytest's tmp_path names no folder in the source).
MACHINE_PATH_ALLOWED: frozenset[str] = frozenset()
LINTED = ["k3lite", "tests", "scripts", "benchmarks", "conftest.py", "book"]
MAX_TOP_LEVEL_MODULES = 8


def test_license_is_the_one_pyproject_names():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]
    assert declared == "MIT"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n"), "LICENSE should be the MIT licence that pyproject.toml declares"
    assert re.search(r"^Copyright \(c\) \d{4} \S", text, re.MULTILINE)
    assert "Permission is hereby granted, free of charge" in text


def _tracked_files() -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (or git is missing)")
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_machine_path():
    found = []
    for name in _tracked_files():
        path = ROOT / name
        if name in MACHINE_PATH_ALLOWED or not path.is_file():   # a file deleted but not yet unstaged
            continue
        data = path.read_bytes()
        for match in MACHINE_PATH.finditer(data):
            line = data.count(b"\n", 0, match.start()) + 1
            context = data[max(0, match.start() - 30):match.end() + 30].decode(errors="replace")
            found.append(f"{name}:{line}: ...{context!r}...")
            break
    assert not found, ("absolute machine paths (use repository-relative paths, $OUT, or a temporary folder made at "
                       "run time):\n" + "\n".join(found))


def _ruff() -> list[str] | None:
    if importlib.util.find_spec("ruff") is not None:
        return [sys.executable, "-m", "ruff"]
    executable = shutil.which("ruff")
    return [executable] if executable else None


def test_ruff_passes():
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    result = subprocess.run([*ruff, "check", "--no-cache", "--output-format", "concise", *LINTED], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_package_top_level_stays_small():
    modules = sorted(path.name for path in (ROOT / "k3lite").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(modules)} modules directly under k3lite/ ({', '.join(modules)}): at most {MAX_TOP_LEVEL_MODULES}; "
        "group the others into sub-packages")


def test_no_control_characters_in_sources():
    """A LaTeX command written into a normal string leaves a control character or a tab ("\\alpha" as "\a", "\\times"
    as "\t"): the page then shows "lpha" or "imes". Tabs are refused too."""
    sources = [*ROOT.glob("chapters/*.py"), *ROOT.glob("k3lite/**/*.py"), *ROOT.glob("book/*.md"), ROOT / "README.md"]
    bad = [f"{path.relative_to(ROOT)}:{number}" for path in sources
           for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
           if re.search(r"[\x00-\x09\x0b-\x1f\x7f]", line)]
    assert not bad, f"control characters in: {bad}"
