"""The benchmark's file handling (the measuring itself runs on a GPU, outside the tests)."""

import json

from k3lite import bench


def run_file(path, command, rows, **sections):
    data = {"meta": {"command": command, "date_utc": "2026-11-29T00:00:00+00:00", "device": "test"},
            "chunked": rows, "decode": [], "situ": {}, **sections}
    path.write_text(json.dumps(data))
    return path


def row(kind, T, mode, ratio):
    return {"kind": kind, "B": 2, "T": T, "H": 16, "D": 128, "mode": mode, "sdpa_ms": 1.0, "k3lite_triton_ms": ratio,
            "fla_ms": 1.0 if ratio else None, "ratio_vs_fla": ratio}


def test_merge_keeps_every_row_and_each_run(tmp_path):
    a = run_file(tmp_path / "a.json", "bench --kinds kda", [row("kda", 8192, "fwd", 1.1), row("kda", 2048, "fwd", 0.9)],
                 situ={"situ_fused_fwd_ms": 0.04})
    b = run_file(tmp_path / "b.json", "bench --kinds delta_rule",
                 [row("delta_rule", 8192, "fwd+bwd", 1.3), row("delta_rule", 8192, "fwd", None)])
    out, png = tmp_path / "merged.json", tmp_path / "merged.png"
    bench.main(["--merge", str(a), str(b), "--out", str(out), "--plot", str(png)])
    merged = json.loads(out.read_text())
    assert [(r["kind"], r["T"], r["mode"]) for r in merged["chunked"]] == [
        ("kda", 2048, "fwd"), ("kda", 8192, "fwd"), ("delta_rule", 8192, "fwd"), ("delta_rule", 8192, "fwd+bwd")]
    assert [run["command"] for run in merged["meta"]["runs"]] == ["bench --kinds kda", "bench --kinds delta_rule"]
    assert merged["situ"] == {"situ_fused_fwd_ms": 0.04}
    assert png.stat().st_size > 10_000  # a row without a reference time is drawn as a note, not a crash


def test_bad_options_are_refused(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--kinds", "kda,softmax", "--sections", "fwd"])
    assert "--kinds: unknown softmax" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--merge", str(tmp_path / "a.json")])
    assert "--merge needs --out" in capsys.readouterr().err


def test_cpu_run_times_the_ops_api_and_the_kernels_alone(tmp_path):
    # On a CPU the table runs at toy sizes through the interpreter: it shows the rows are filled, not speed.
    out = tmp_path / "cpu.json"
    bench.main(["--sections", "fwd,fwd+bwd,decode", "--kinds", "gated_delta_rule", "--out", str(out)])
    data = json.loads(out.read_text())
    assert [r["mode"] for r in data["chunked"]] == ["fwd", "fwd+bwd"]
    for r in data["chunked"]:
        assert r["k3lite_ops_triton_ms"] > 0 and r["k3lite_triton_ms"] > 0, r
        assert r["ops_over_kernels"] == r["k3lite_ops_triton_ms"] / r["k3lite_triton_ms"]
    (decode,) = data["decode"]
    assert decode["ops_step_triton_ms"] > 0 and decode["ops_step_triton_inplace_ms"] > 0
    assert "k3lite.kernels.run_chunked" in data["meta"]["rows"]
