"""conftest.py skips Triton chapters and cells where Triton is missing, and nothing where it is installed."""

from types import SimpleNamespace

import nbformat
import pytest

import conftest


def _cell_item(path, tags=()):
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata["tags"] = list(tags)
    return SimpleNamespace(fspath=path, cell=cell, markers=[], add_marker=lambda m, self=None: None)


def _items():
    items = [_cell_item("chapters/11_triton_kernels.ipynb"), _cell_item("chapters/04_chunked_deltanet.ipynb"),
             _cell_item("chapters/04_chunked_deltanet.ipynb", ["requires-triton"])]
    for item in items:
        item.add_marker = item.markers.append
    return items


def test_book_marks_the_triton_chapter():
    assert "11_triton_kernels" in conftest._chapters_needing_triton()


@pytest.mark.parametrize("missing, skipped", [(True, [True, False, True]), (False, [False, False, False])])
def test_cells_needing_triton_are_skipped_only_without_it(monkeypatch, missing, skipped):
    monkeypatch.setattr(conftest, "TRITON_MISSING", missing)
    items = _items()
    conftest.pytest_collection_modifyitems(None, items)
    assert [bool(item.markers) for item in items] == skipped
