"""The benchmark's file handling (the measuring itself runs on a GPU, outside the tests)."""

import json

import torch

from benchmarks import bench


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
    assert bench.main(["--merge", str(a), str(b), "--out", str(out), "--plot", str(png)]) == 0
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
    for shapes in ("8x", "8x2048,abc", "0x2048", "8x2048x16"):
        with pytest.raises(SystemExit):
            bench.main(["--shapes", shapes, "--sections", "fwd"])
        assert "--shapes: expected comma-separated BxT" in capsys.readouterr().err


def test_cpu_run_times_the_ops_api_and_the_kernels_alone(tmp_path):
    # On a CPU the table runs at toy sizes through the interpreter: it shows the rows are filled, not speed.
    out = tmp_path / "cpu.json"
    assert bench.main(["--sections", "fwd,fwd+bwd,decode", "--kinds", "gated_delta_rule", "--out", str(out)]) == 0
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


def test_cpu_model_decode_rows_leave_the_device_and_graph_times_to_a_gpu():
    # The profiler's device time and the CUDA-graph replay need a GPU: on a CPU the keys are there, as None.
    results = {"meta": {}}
    bench.bench_model_decode([16], 2, 1, 16, "cpu", results, lambda: None)
    (row,) = results["model_decode"]["rows"]
    for key in ("k3_device_ms_per_step", "gpt2_device_ms_per_step", "k3_graph_ms_per_step", "gpt2_graph_ms_per_step",
                "k3_over_gpt2_device", "k3_over_gpt2_graph"):
        assert key in row and row[key] is None, key
    assert not [key for key in row if key.endswith("_error")]
    note = results["model_decode"]["note"]
    assert "CUDAGraph" in note and "torch.profiler" in note and "not what eager generate gets" in note


def _cpu_decode_models():
    from k3lite.models.gpt2 import GPT2, GPT2Config
    from k3lite.models.k3 import K3

    k3_config, gpt2_config = bench.decode_model_configs(False, 64)
    torch.manual_seed(0)
    return K3(k3_config).eval(), GPT2(GPT2Config(**{**gpt2_config.__dict__, "n_ctx": 64})).eval()


def _fake_gpu(monkeypatch, capture=None):
    """bench's GPU measurements with the CUDA parts faked: the capture runs the warm-up steps and the captured
    one eagerly (what they do to the caches), the timings return fixed numbers."""
    def fake_capture(step, token, warmup=bench.GRAPH_WARMUP_STEPS):
        for _ in range(warmup):
            step(token)
        return "graph", step(token)

    def fake_device_ms(step, tokens):
        for token in tokens:
            step(token)
        return 2.0

    monkeypatch.setattr(bench, "device_ms_per_step", fake_device_ms)
    monkeypatch.setattr(bench, "capture_step", capture or fake_capture)
    monkeypatch.setattr(bench, "graph_ms_per_step", lambda graph: 1.0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


def test_the_second_pass_fills_the_rows_when_the_caches_have_room(monkeypatch, capsys):
    # bench_model_decode's GPU pass, on a CPU with the CUDA parts faked: fresh caches with room for the profiled,
    # warm-up and captured steps, every measure and ratio in the row, nothing grown (no *_graph_error).
    _fake_gpu(monkeypatch)
    k3, gpt2 = _cpu_decode_models()
    rows = [{"context": 8, "cache_fill": "prefill"}, {"context": 24, "cache_fill": "random"}]
    inputs = {8: (torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (4, 2, 1))),
              24: (torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (4, 2, 1)))}
    room = bench.PROFILED_STEPS + bench.GRAPH_WARMUP_STEPS + 1      # what bench_model_decode passes
    bench.device_and_graph_pass(k3, gpt2, rows, inputs, torch.Generator().manual_seed(0), room, lambda: None)
    for row in rows:
        assert {key: row[key] for key in row if "device" in key or "graph" in key} == {
            "k3_device_ms_per_step": 2.0, "k3_graph_ms_per_step": 1.0, "gpt2_device_ms_per_step": 2.0,
            "gpt2_graph_ms_per_step": 1.0, "k3_over_gpt2_device": 1.0, "k3_over_gpt2_graph": 1.0}
    assert not any(mixer.update_state_in_place for mixer in (layer.mixer for layer in k3.layers)
                   if hasattr(mixer, "update_state_in_place"))
    printed = capsys.readouterr().out
    assert "graph replay ms per step" in printed and "_error" not in printed


def test_device_and_graph_times_refuse_a_cache_that_grew_and_record_a_failed_capture(monkeypatch):
    _fake_gpu(monkeypatch)
    k3, gpt2 = _cpu_decode_models()
    prompt, tokens = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (4, 2, 1))
    with torch.no_grad():
        k3_step, k3_current = bench.k3_decode_step(k3, bench.fill_k3_cache(k3, prompt, 8, "prefill", None, 2))
        gpt2_step, gpt2_current = bench.gpt2_decode_step(gpt2, bench.fill_gpt2_cache(gpt2, prompt, 8, "prefill",
                                                                                      None, 2))
        row = {}
        bench._k3_in_place(k3, True)     # as in the bench: the KDA states stay where they are
        try:
            bench.device_and_graph_times("k3", k3_step, tokens, k3_current, row)
        finally:
            bench._k3_in_place(k3, False)
        bench.device_and_graph_times("gpt2", gpt2_step, tokens, gpt2_current, row)
        for name in ("k3", "gpt2"):   # too little room: a buffer grew, and the replay would time a copy
            assert row[f"{name}_graph_ms_per_step"] is None and row[f"{name}_device_ms_per_step"] == 2.0
            assert "a cache buffer grew or moved" in row[f"{name}_graph_error"]

        def no_capture(step, token, warmup=0):
            raise RuntimeError("operation not permitted when stream is capturing")

        _fake_gpu(monkeypatch, no_capture)
        row = {}
        bench.device_and_graph_times("gpt2", gpt2_step, tokens, gpt2_current, row)
    assert row["gpt2_graph_ms_per_step"] is None and "not permitted" in row["gpt2_graph_error"]


def test_host_issue_time_is_the_median_of_the_calls():
    # host_issue_ms times each call alone; a call that sleeps 2 ms every other time has a median of one of the two.
    import time

    calls = []

    def fn():
        calls.append(None)
        time.sleep(0.002 if len(calls) % 2 else 0.0)

    ms = bench.host_issue_ms(fn, calls=5)
    assert len(calls) == 5 and ms >= 2.0


def test_paired_ratios_alternate_which_path_goes_first_and_take_the_median():
    # A machine that slows down 10 % at every timing: separate timings would show the drift as API cost. Pairs that
    # alternate their order see it once each way (1.1, then 1 / 1.1), and the median of an even count sits between.
    import pytest

    order, clock = [], [1.0]

    def measure(fn):
        order.append(fn.__name__)
        clock[0] *= 1.1
        return clock[0]

    def kernels():
        pass

    def ops():
        pass

    ratios, median = bench.paired_ratios(measure, kernels, ops)
    assert order == ["kernels", "ops", "ops", "kernels"] * 2
    assert ratios == pytest.approx([1.1, 1 / 1.1] * 2)
    assert median == pytest.approx((1.1 + 1 / 1.1) / 2) and abs(median - 1) < 0.005
    # A real cost shows through: the API 5 % slower at every timing, no drift.
    ratios, median = bench.paired_ratios(lambda fn: 1.05 if fn is ops else 1.0, kernels, ops)
    assert median == pytest.approx(1.05)


def test_api_cost_times_both_paths_through_the_real_calls():
    # The GPU rows' extra fields, filled on the CPU through the interpreter (one token, a few calls): both paths run.
    import time

    t = bench.mixer_inputs("gated_delta_rule", 1, 1, 1, 16, torch.float32, "cpu", grad=False)
    calls = {"k3lite_triton": lambda: bench.kernel_call("gated_delta_rule", t),
             "k3lite_ops_triton": lambda: bench.k3lite_call("gated_delta_rule", t, "triton")}

    def measure(fn):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    row = {}
    bench.api_cost(row, measure, calls, host_calls=1, rounds=2)
    assert row["k3lite_triton_host_ms"] > 0 and row["k3lite_ops_triton_host_ms"] > 0
    assert len(row["ops_over_kernels_rounds"]) == 2 and all(r > 0 for r in row["ops_over_kernels_rounds"])
    assert row["ops_over_kernels_paired"] == sum(row["ops_over_kernels_rounds"]) / 2
