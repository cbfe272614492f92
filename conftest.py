"""pytest hooks shared by the unit tests and nbval."""

import importlib.util
import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent
# Triton publishes Linux wheels only (pyproject.toml installs it there). Elsewhere (macOS) nbval skips the
# chapters that book.yml marks `requires: [triton]` and the cells tagged `requires-triton`.
# K3LITE_NO_TRITON=1 pretends Triton is missing, to check that skip on Linux.
TRITON_MISSING = importlib.util.find_spec("triton") is None or os.environ.get("K3LITE_NO_TRITON") == "1"


def pytest_collectstart(collector):
    # Warnings printed by libraries (stderr) differ between versions; the lesson's content is stdout.
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)


def _chapters_needing_triton() -> set[str]:
    book = yaml.safe_load((ROOT / "book.yml").read_text(encoding="utf-8"))
    return {chapter["file"] for chapter in book["chapters"] if "triton" in chapter.get("requires", [])}


def pytest_collection_modifyitems(config, items):
    if not TRITON_MISSING:
        return
    chapters = _chapters_needing_triton()
    skip = pytest.mark.skip(reason="needs Triton, which publishes no wheels for this platform")
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        if Path(str(item.fspath)).stem in chapters or "requires-triton" in cell.metadata.get("tags", []):
            item.add_marker(skip)
