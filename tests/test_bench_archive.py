"""The archived measurements the chapters read: every name in the index resolves to a stored file."""

import json

import pytest

from k3lite.course import viz


def test_every_indexed_measurement_loads():
    index = json.loads((viz.BENCH_ARCHIVE_DIR / "index.json").read_text())
    names = [key for key in index if key != "about"]
    assert names
    for name in names:
        assert (viz.BENCH_ARCHIVE_DIR / index[name]["file"]).is_file(), name
        assert isinstance(viz.archived_measurement(name), dict)


def test_unknown_measurement_names_the_argument():
    with pytest.raises(ValueError, match="name must be one of"):
        viz.archived_measurement("no_such_measurement")
