"""benchmarks/decode_processes.py: the decode rows' rule (per process the median of four pairs, per row the median over
processes of one launch mode), checked on synthetic runs and on the sixteenth run's stored processes."""

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import decode_processes as dp  # noqa: E402

CACHED, DISPATCH = dp.LAUNCHES["cached"], dp.LAUNCHES["dispatch"]


def run(launches, **ratios):
    return {"meta": {"launches": launches},
            "decode": [{"B": int(B[1:]), "ops_over_kernels_paired": x} for B, x in ratios.items()]}


def test_modes_alternate_abba():
    assert dp.mode_order(4) == ["cached", "dispatch", "dispatch", "cached"] * 2
    assert dp.mode_order(1) == ["cached", "dispatch"]


def test_the_figure_is_the_median_over_processes_and_only_the_cached_one_decides():
    runs = [run(CACHED, B64=1.30, B256=1.00), run(DISPATCH, B64=1.40, B256=1.00), run(DISPATCH, B64=1.50, B256=1.0),
            run(CACHED, B64=1.01, B256=1.02), run(CACHED, B64=1.00, B256=1.00)]
    summary = dp.summarize(runs)
    assert summary["rows"][64]["cached"] == {"median": 1.01, "min": 1.00, "max": 1.30, "ratios": [1.30, 1.01, 1.00]}
    assert summary["rows"][64]["dispatch"]["median"] == pytest.approx(1.45)
    assert summary["rows"][256]["cached"]["median"] == 1.00
    assert summary["met"] is True   # the dispatch processes are over 5 %, the cached medians are not
    summary = dp.summarize(runs + [run(CACHED, B64=1.2, B256=1.0), run(CACHED, B64=1.2, B256=1.0)])
    assert summary["rows"][64]["cached"]["median"] == pytest.approx(1.2) and summary["met"] is False


def test_bad_runs_are_refused_by_name():
    with pytest.raises(ValueError, match="no ops_over_kernels_paired"):
        dp.summarize([{"meta": {"launches": CACHED}, "decode": [{"B": 64}]}])
    with pytest.raises(ValueError, match="meta.launches"):
        dp.summarize([run("", B64=1.0)])
    with pytest.raises(ValueError, match="cached launch timed B"):
        dp.summarize([run(DISPATCH, B64=1.0)])
    with pytest.raises(ValueError, match="no decode rows"):
        dp.summarize([{"meta": {"launches": CACHED}, "decode": []}])


def test_the_sixteenth_runs_processes_give_the_medians_of_their_stored_ratios():
    stored = json.loads((ROOT / "benchmarks" / "results" / "bench_h200_latest.json").read_text())["runs"]
    runs = [stored["cached"], stored["triton_dispatch"], *stored["decode_processes"]]
    summary = dp.summarize(runs)
    cached_64 = [next(r for r in p["decode"] if r["B"] == 64)["ops_over_kernels_paired"]
                 for p in runs if dp.mode_of(p) == "cached"]
    assert len(cached_64) == 3 and summary["rows"][64]["cached"]["max"] == max(cached_64) > dp.BOUND
    assert summary["rows"][64]["cached"]["median"] == sorted(cached_64)[1]
    assert len(summary["rows"][256]["dispatch"]["ratios"]) == 3


def test_command_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    for i, r in enumerate([run(CACHED, B64=1.02, B256=1.0), run(DISPATCH, B64=1.3, B256=1.0)]):
        (runs / f"decode_{i}.json").write_text(json.dumps(r))
    dp.main(["--summarize", str(runs), "--summary", str(tmp_path / "s.json")])
    assert "(cached medians): True" in capsys.readouterr().out
    written = json.loads((tmp_path / "s.json").read_text())
    assert written["met"] is True and written["rows"]["64"]["dispatch"]["median"] == 1.3
    with pytest.raises(SystemExit):
        dp.main(["--summarize", str(tmp_path / "empty")])
    with pytest.raises(SystemExit):
        dp.main(["--processes", "0"])
    assert "--processes" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            dp.main(["--processes", "1", "--out-dir", str(tmp_path / "out")])
        assert "needs a CUDA GPU" in capsys.readouterr().err
        assert not (tmp_path / "out").exists()
