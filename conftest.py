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

if not TRITON_MISSING:
    # Triton fixes at import time whether @triton.jit compiles or interprets. Test modules that define kernels
    # (tests/test_exercises_ch11.py) must see the interpreter on a CPU, whatever another module imported first
    # (torch.utils.flop_counter imports triton): set it up once here, before any test module is collected.
    from k3lite import kernels as _kernels

    _kernels._ensure_backend()


def _execute_cells_as_jupyter_does():
    """nbval sends each cell with ``store_history=False``; IPython then cannot see a cell's trailing ``;``
    (it reads the cell back from the history) and shows the value that Jupyter, and the stored notebook,
    hide: the exercise checkers' True/False. Send cells as Jupyter does."""
    try:
        from nbval.kernel import RunningKernel
    except ImportError:   # the unit tests run without nbval installed too
        return

    def execute_cell_input(self, cell_input, allow_stdin=None):
        return self.kc.execute(cell_input, store_history=True, allow_stdin=allow_stdin, stop_on_error=False)

    RunningKernel.execute_cell_input = execute_cell_input


_execute_cells_as_jupyter_does()


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
