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


def test_cpu_model_decode_section_reports_rates_ratios_and_cache_sizes(tmp_path):
    # Toy sizes on a CPU: the rows are filled and the cache sizes follow the models' shapes; no speed is asserted.
    import math

    out = tmp_path / "decode.json"
    bench.main(["--sections", "model_decode", "--quick", "--decode-prefill-max", "64", "--out", str(out)])
    section = json.loads(out.read_text())["model_decode"]
    assert section["k3_params"] > 0 and section["gpt2_params"] > section["gpt2_position_table_params"] > 0
    assert section["k3_layers"] == ["kda", "kda", "kda", "mla"] and "random" in section["note"]
    assert json.loads(out.read_text())["meta"]["model_decode"] == section["note"]
    k3, gpt2 = section["k3_config"], section["gpt2_config"]
    assert k3["hidden_size"] == gpt2["n_embd"] and k3["num_layers"] == gpt2["n_layer"]
    rows = section["rows"]
    assert [(r["context"], r["cache_fill"]) for r in rows] == [(64, "prefill"), (256, "random")]
    for r in rows:
        for key in ("k3_tokens_per_s", "gpt2_tokens_per_s", "k3_over_gpt2", "k3_ms_per_step", "gpt2_ms_per_step",
                    "k3_host_ms_per_step", "gpt2_host_ms_per_step"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        # On a CPU there is no queue: issuing a step is running it.
        assert r["k3_host_ms_per_step"] == r["k3_ms_per_step"] and r["gpt2_host_ms_per_step"] == r["gpt2_ms_per_step"]
        assert r["k3_over_gpt2"] == r["k3_tokens_per_s"] / r["gpt2_tokens_per_s"]
        bytes_per_number = 4   # float32 on a CPU
        assert r["gpt2_cache_bytes_per_seq"] == 2 * gpt2["n_layer"] * r["context"] * gpt2["n_embd"] * bytes_per_number
        mla_per_token = k3["kv_lora_rank"] + k3["rope_dim"]
        assert r["k3_mla_bytes_per_seq"] == r["context"] * mla_per_token * bytes_per_number   # one MLA layer
        assert r["k3_cache_bytes_per_seq"] == r["k3_mla_bytes_per_seq"] + r["k3_kda_state_bytes_per_seq"]
    # A KDA state does not grow with the context; attention caches do.
    assert rows[0]["k3_kda_state_bytes_per_seq"] == rows[1]["k3_kda_state_bytes_per_seq"] > 0
    assert rows[1]["gpt2_over_k3_cache_bytes"] > rows[0]["gpt2_over_k3_cache_bytes"] > 1
