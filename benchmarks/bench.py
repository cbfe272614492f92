"""Benchmark of the k3lite kernels: ``python -m benchmarks.bench [--out PATH] [--plot PATH] [--quick]``.

On a GPU: the chunked mixers (k3lite Triton, k3lite PyTorch chunked, flash-linear-attention when it
can be imported, causal scaled_dot_product_attention) at (B, T, H) = (8, 2048, 16), (2, 8192, 16),
(1, 32768, 16), D = 128, bf16, forward and forward+backward; the fused decode step at B = 64 and 256;
fused SiTU against eager PyTorch SiTU and a fused SiLU-and-mul; the GPU's copy bandwidth and bf16 matmul rate, the
roofs the chapters read the kernels against. Every ratio is taken between
numbers measured in the same run. Each chunked and decode row is timed twice for k3lite: through the
public ops API (``k3lite.ops.<kind>.chunked(..., backend="triton")``, ``k3lite.ops.kda.step``), which is
what a model calls, and through the kernels alone (``k3lite.kernels.run_chunked`` / ``run_step``, no
argument checks); the reference library is timed before and after them, and its two times are kept.
On a GPU each chunked row also records the host time to issue one call of each k3lite path (``host_issue_ms``)
and ops over kernels from four pairs timed back to back in alternating order (``ops_over_kernels_paired``):
the two paths launch the same kernels, so what separates them is the API's own cost, which separate timings
can confuse with the machine's drift.
On a CPU the same table runs at toy sizes (the Triton kernels go through the interpreter), which only
shows that the code runs, not how fast anything is.

``--sections model_decode`` (only when named) times whole-model decoding instead: a K3-shaped model
(KDA:MLA 3:1) against a GPT-2-shaped one of the same width and depth, each continuing its own cache of
L tokens (4096, 32768, 131072 on a GPU), tokens/s and the K3/GPT-2 ratio per L, and the cache bytes per
sequence; on a GPU also each model's device time per step, measured twice, as the profiler's sum of its kernels
and as the replay of one step captured in a CUDA graph (see ``bench_model_decode``).

Results are printed as a table and written as JSON (with the command, date, device and versions), atomically, never
as an empty table and never over a file with more rows unless ``--overwrite`` is given (:class:`ResultsFile`). Every
option is checked before anything is measured: an unknown section or kind, a count below its least value, or a flag
that no chosen section uses exits with status 2 and one error line.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from k3lite import kernels  # before anything imports triton: on CPU it switches on the interpreter
from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention
from k3lite.ops.situ import situ_glu

STARTED = time.perf_counter()
KINDS = ("kda", "gated_delta_rule", "delta_rule", "linear_attention")
OPS = {"linear_attention": linear_attention, "delta_rule": delta_rule,
       "gated_delta_rule": gated_delta_rule, "kda": kda}
FLA_NAMES = {"kda": ("fla.ops.kda", "chunk_kda"),
             "gated_delta_rule": ("fla.ops.gated_delta_rule", "chunk_gated_delta_rule"),
             "delta_rule": ("fla.ops.delta_rule", "chunk_delta_rule"),
             "linear_attention": ("fla.ops.linear_attn", "chunk_linear_attn")}


def timer(gpu: bool):
    """Median milliseconds of fn(); on a GPU through triton.testing.do_bench (CUDA events, L2 flushed)."""
    if gpu:
        import triton.testing

        def once(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)

        def measure(fn, rep=100):
            fn()  # compile / autotune outside the timing
            first = once(fn)
            if first > 200:  # slow baselines (PyTorch loops): the median of a few runs is plenty
                return statistics.median([first, once(fn), once(fn)])
            return float(triton.testing.do_bench(fn, warmup=25, rep=rep, return_mode="median"))
    else:
        def measure(fn, rep=None):
            fn()
            times = []
            for _ in range(2):
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
            return statistics.median(times)
    return measure


def load_fla():
    fns = {}
    try:
        import importlib

        import fla

        for kind, (module, name) in FLA_NAMES.items():
            fns[kind] = getattr(importlib.import_module(module), name)
        fns["version"] = getattr(fla, "__version__", "?")
        from fla.ops.kda import fused_recurrent_kda

        fns["decode_kda"] = fused_recurrent_kda
    except Exception as err:  # reference library absent or broken: report and go on without it
        print(f"flash-linear-attention not used: {err!r}")
        return {}
    return fns


def mixer_inputs(kind, B, T, H, D, dtype, device, grad):
    gen = torch.Generator(device=device).manual_seed(0)
    rnd = lambda *s: torch.randn(*s, device=device, generator=gen)  # noqa: E731
    q = rnd(B, T, H, D).to(dtype)
    k = torch.nn.functional.normalize(rnd(B, T, H, D), dim=-1).to(dtype)
    v = rnd(B, T, H, D).to(dtype)
    beta = torch.sigmoid(rnd(B, T, H)).to(dtype)
    g = None
    if kind == "gated_delta_rule":
        g = torch.nn.functional.logsigmoid(rnd(B, T, H) + 4.0).float()
    if kind == "kda":
        g = (-5.0 * torch.sigmoid(rnd(B, T, H, D) - 2.0)).float()
    tensors = {"q": q, "k": k, "v": v, "g": g, "beta": beta if kind != "linear_attention" else None}
    return {n: (x.requires_grad_(grad) if x is not None else None) for n, x in tensors.items()}


def k3lite_call(kind, t, backend):
    """Through the ops API: shape checks, value checks (g <= 0, beta in [0, 2]), then the kernels."""
    args = [t["q"], t["k"], t["v"]] + [t[n] for n in ("g", "beta") if t[n] is not None]
    return OPS[kind].chunked(*args, backend=backend)[0]


def kernel_call(kind, t):
    """The Triton pipeline alone (k3lite.kernels.run_chunked): no argument checks in front of it."""
    return kernels.run_chunked(kind, t["q"], t["k"], t["v"], t["g"], t["beta"], scale=t["q"].shape[-1] ** -0.5)[0]


# How a run's kernels were launched, as its JSON's meta.launches says it (benchmarks/decode_processes.py reads it back).
LAUNCHES = {"cached": "cached (k3lite.kernels._launch: a call like an earlier one skips Triton's dispatch)",
            "dispatch": "through Triton's dispatch every call"}


def cached_launches_on() -> bool:
    """Whether this run's kernel launches take k3lite.kernels._launch's shortcut (not under the interpreter, nor with
    K3LITE_TRITON_DISPATCH=1)."""
    from k3lite.kernels import _launch

    return _launch.ENABLED and not kernels.interpreting()


def host_issue_ms(fn, calls=20):
    """Median host milliseconds of one call of fn, the device idle before each (synchronised first, not after): on a
    GPU the time Python takes to issue the call's work. A row whose host time reaches its timed ms was set by the host,
    not the GPU (benchmarks/README.md, thirteenth run, asks this of Gated DeltaNet's and DeltaNet's rows at
    (8, 2048))."""
    times = []
    for _ in range(calls):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return statistics.median(times)


def paired_ratios(measure, kernels_fn, ops_fn, rounds=4):
    """ops / kernels from ``rounds`` pairs, each timed right after the other, alternating which goes first: what the API
    adds over the kernels, with a steady drift of the machine seen once each way (an even count of rounds puts the
    median between the two). Returns (ratios, median)."""
    ratios = []
    for i in range(rounds):
        if i % 2 == 0:
            kernels_ms = measure(kernels_fn)
            ops_ms = measure(ops_fn)
        else:
            ops_ms = measure(ops_fn)
            kernels_ms = measure(kernels_fn)
        ratios.append(ops_ms / kernels_ms)
    return ratios, statistics.median(ratios)


def api_cost(row, measure, calls, host_calls=20, rounds=4):
    """What the public API adds over the kernels, into ``row``: the host time to issue each path (a row whose host time
    reaches its timed ms was set by the host, see host_issue_ms) and ops over kernels from alternating pairs
    (paired_ratios). ``calls``: {"k3lite_triton": fn, "k3lite_ops_triton": fn}."""
    for name, call in calls.items():
        row[f"{name}_host_ms"] = host_issue_ms(call, host_calls)
    row["ops_over_kernels_rounds"], row["ops_over_kernels_paired"] = paired_ratios(
        measure, calls["k3lite_triton"], calls["k3lite_ops_triton"], rounds)


def kernel_times(fn, iters=10):
    """GPU time per call of every kernel fn launches, {name: ms} (torch.profiler; no launch gaps counted)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    times = {}
    for ev in prof.key_averages():
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0)
        if total > 0:
            times[ev.key[:90]] = total / iters / 1e3
    return times


def gpu_kernel_ms(fn, iters=10):
    """GPU time per call summed over the kernels fn launches."""
    return sum(kernel_times(fn, iters).values())


def fla_call(fn, kind, t):
    if kind == "linear_attention":
        return fn(t["q"], t["k"], t["v"], normalize=False, output_final_state=True)[0]
    if kind == "delta_rule":
        return fn(t["q"], t["k"], t["v"], t["beta"], output_final_state=True)[0]
    return fn(t["q"], t["k"], t["v"], t["g"], t["beta"], output_final_state=True)[0]


def with_backward(forward, tensors):
    leaves = [x for x in tensors.values() if x is not None and x.requires_grad]

    def run():
        out = forward()
        torch.autograd.grad(out, leaves, torch.ones_like(out))
    return run


def bench_chunked(shapes, D, dtype, device, measure, fla, modes, results, save, kinds=KINDS):
    """Kind by kind over the first two shapes, then every kind at the remaining shapes: the rows that the
    acceptance targets need come first, and each library compiles (and autotunes) its kernels once per kind."""
    sdpa = {}

    def sdpa_ms(B, T, H, mode):
        if (B, T, H, mode) not in sdpa:
            grad = mode == "fwd+bwd"
            q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=grad) for _ in range(3))
            fwd = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            sdpa[(B, T, H, mode)] = measure(with_backward(fwd, {"q": q, "k": k, "v": v}) if grad else fwd)
        return sdpa[(B, T, H, mode)]

    order = [(kind, shape) for kind in kinds for shape in shapes[:2]] + \
            [(kind, shape) for shape in shapes[2:] for kind in kinds]
    for kind, (B, T, H) in order:
        for mode in modes:
            row = chunked_row(kind, (B, T, H, D), mode, dtype, device, measure, fla, sdpa_ms)
            results["chunked"].append(row)
            print_row(row)
            save()


def chunked_row(kind, shape, mode, dtype, device, measure, fla, sdpa_ms):
    """One row of bench_chunked: ``kind`` at ``shape`` = (B, T, H, D) in ``mode``, every method timed. The inputs
    live in this call only, so they are freed before the next row's are made."""
    B, T, H, D = shape
    grad = mode == "fwd+bwd"
    t = mixer_inputs(kind, B, T, H, D, dtype, device, grad)
    # The reference first and last, k3lite in between: a drift of the machine shows as two fla times.
    methods = {}
    if kind in fla:
        methods["fla_before"] = lambda: fla_call(fla[kind], kind, t)
    methods["k3lite_triton"] = lambda: kernel_call(kind, t)
    methods["k3lite_ops_triton"] = lambda: k3lite_call(kind, t, "triton")
    if mode == "fwd" or device != "cuda":  # on the GPU the PyTorch backward is timed in no row
        methods["k3lite_torch"] = lambda: k3lite_call(kind, t, "torch")
    if kind in fla:
        methods["fla_after"] = lambda: fla_call(fla[kind], kind, t)
    row = {"kind": kind, "B": B, "T": T, "H": H, "D": D, "mode": mode, "sdpa_ms": sdpa_ms(B, T, H, mode)}
    for name, fwd in methods.items():
        try:
            row[f"{name}_ms"] = measure(with_backward(fwd, t) if grad else fwd)
        except Exception as err:  # e.g. out of memory: record and continue
            row[f"{name}_ms"] = None
            row[f"{name}_error"] = repr(err)[:200]
        torch.cuda.empty_cache() if device == "cuda" else None
    if device == "cuda":
        api_cost(row, measure, {name: with_backward(methods[name], t) if grad else methods[name]
                                for name in ("k3lite_triton", "k3lite_ops_triton")})
    add_ratios(row)
    return row


def add_ratios(row):
    """fla_ms = the mean of the reference's two times; ratios of the kernels alone and of the ops API to it."""
    before, after = row.get("fla_before_ms"), row.get("fla_after_ms")
    if before and after:
        row["fla_ms"] = (before + after) / 2
        row["fla_drift"] = abs(after - before) / row["fla_ms"]
    kernel_ms, ops_ms = row.get("k3lite_triton_ms"), row.get("k3lite_ops_triton_ms")
    if row.get("fla_ms") and kernel_ms:
        row["ratio_vs_fla"] = kernel_ms / row["fla_ms"]
    if row.get("fla_ms") and ops_ms:
        row["ratio_ops_vs_fla"] = ops_ms / row["fla_ms"]
    if kernel_ms and ops_ms:
        row["ops_over_kernels"] = ops_ms / kernel_ms
    if kernel_ms and row.get("sdpa_ms"):
        row["ratio_vs_sdpa"] = kernel_ms / row["sdpa_ms"]


def measure_ceilings(device, measure, results, save):
    """The two roofs of this GPU that a kernel is read against: a device-to-device copy of 1 GiB (read once and
    written once, so twice its size moved) and a bf16 matmul of two 8192 x 8192 matrices (2 * 8192^3 FLOPs)."""
    src = torch.empty(2**30 // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    copy_ms = measure(functools.partial(dst.copy_, src))
    copy_bytes = 2 * src.numel() * src.element_size()
    del src, dst
    n = 8192
    a, b = (torch.randn(n, n, dtype=torch.bfloat16, device=device) for _ in range(2))
    matmul_ms = measure(functools.partial(torch.matmul, a, b))
    results["ceilings"] = {"copy_bytes": copy_bytes, "copy_ms": copy_ms,
                           "copy_tb_per_s": copy_bytes / (copy_ms * 1e-3) / 1e12,
                           "matmul_n": n, "matmul_ms": matmul_ms,
                           "matmul_bf16_tflops": 2 * n**3 / (matmul_ms * 1e-3) / 1e12}
    print(f"ceilings: copy {results['ceilings']['copy_tb_per_s']:.2f} TB/s, "
          f"bf16 matmul {results['ceilings']['matmul_bf16_tflops']:.0f} TFLOP/s", flush=True)
    save()


def profile_stages(device, results, save):
    """GPU time per kernel of one k3lite KDA call at (2, 8192, 16, 128), forward and forward+backward."""
    for mode in ("fwd", "fwd+bwd"):
        t = mixer_inputs("kda", 2, 8192, 16, 128, torch.bfloat16, device, mode == "fwd+bwd")
        fwd = functools.partial(kernel_call, "kda", t)
        times = kernel_times(with_backward(fwd, t) if mode == "fwd+bwd" else fwd, iters=3)
        del t, fwd  # before the next mode's inputs are made
        rows = sorted(({"name": name, "ms_per_call": ms} for name, ms in times.items()),
                      key=lambda r: -r["ms_per_call"])
        results.setdefault("kda_profile_2x8192x16", {})[mode] = rows[:25]
        print(f"kda 2x8192x16 {mode}: GPU time by kernel (ms per call)")
        for r in rows[:10]:
            print(f"   {r['ms_per_call']:8.3f}  {r['name']}")
        save()


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def print_row(row):
    row["elapsed_s"] = round(time.perf_counter() - STARTED, 1)
    print(f"{row['kind']:>17} {row['B']:>2}x{row['T']:>5}x{row['H']:>2} {row['mode']:>7} | ops API "
          f"{fmt(row.get('k3lite_ops_triton_ms'))} kernels {fmt(row.get('k3lite_triton_ms'))}"
          f" | torch {fmt(row.get('k3lite_torch_ms'))}"
          f" | fla {fmt(row.get('fla_before_ms'))}/{fmt(row.get('fla_after_ms'))}"
          f" | sdpa {fmt(row['sdpa_ms'])} | host ops {fmt(row.get('k3lite_ops_triton_host_ms'))}"
          f" | ops/kernels paired {fmt(row.get('ops_over_kernels_paired'))}"
          f" | vs fla: ops {fmt(row.get('ratio_ops_vs_fla'), '.2f')}x kernels "
          f"{fmt(row.get('ratio_vs_fla'), '.2f')}x | at {row['elapsed_s']:.0f} s", flush=True)


def bench_decode(batches, H, D, device, measure, fla, results, save):
    configs = [(16, 2), (32, 4), (64, 4), (32, 2), (64, 8)] if device == "cuda" else [(32, 4)]
    for B in batches:
        row = decode_row(B, H, D, device, measure, fla, configs)
        results["decode"].append(row)
        print(f"decode kda B={B:>3}: ops.kda.step {row['ops_step_triton_ms']:.4f} ms ({row['ops_tb_per_s']:.2f} TB/s), "
              f"in place {row['ops_step_triton_inplace_ms']:.4f} ms ({row['ops_inplace_tb_per_s']:.2f} TB/s), "
              f"kernel alone {row['k3lite_default_ms']:.4f} ms ({row['tb_per_s']:.2f} TB/s), "
              f"best config {row['best_config']} "
              f"{row['k3lite_triton_ms']:.4f} ms, torch {row['k3lite_torch_ms']:.4f} ms, "
              f"fla {fmt(row.get('fla_before_ms'), '.4f')}/{fmt(row.get('fla_after_ms'), '.4f')} ms, "
              f"host ops {fmt(row.get('k3lite_ops_triton_host_ms'), '.4f')} ms, "
              f"ops/kernel paired {fmt(row.get('ops_over_kernels_paired'))}", flush=True)
        save()


def decode_row(B, H, D, device, measure, fla, configs):
    """One row of bench_decode: the KDA decode step at batch ``B``, each config, the API and the reference
    library timed. Its inputs live in this call only."""
    from k3lite.kernels import recurrent_step

    gen = torch.Generator(device=device).manual_seed(1)
    q, k = torch.randn(B, H, D, device=device, generator=gen), torch.randn(B, H, D, device=device, generator=gen)
    k = torch.nn.functional.normalize(k, dim=-1)
    v = torch.randn(B, H, D, device=device, generator=gen)
    g = -torch.rand(B, H, D, device=device, generator=gen)
    beta = torch.rand(B, H, device=device, generator=gen)
    state = torch.randn(B, H, D, D, device=device, generator=gen)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    state_bytes = 2 * state.numel() * 4
    row = {"B": B, "H": H, "K": D, "V": D, "kind": "kda", "state_bytes_moved": state_bytes, "configs": {}}
    fla_step = None
    if "decode_kda" in fla:
        args = [x.unsqueeze(1) for x in (q, k, v, g, beta)]
        fla_step = lambda: fla["decode_kda"](*args, initial_state=state, output_final_state=True)  # noqa: E731
        row["fla_before_ms"] = measure_or_error(measure, fla_step, row, "fla_error")
    for block_v, warps in configs:
        ms = measure(functools.partial(recurrent_step.decode_step, "kda", q, k, v, g, beta, state, D ** -0.5,
                                       block_v=block_v, num_warps=warps))
        row["configs"][f"BV{block_v}_w{warps}"] = ms
    best = min(row["configs"], key=row["configs"].get)
    row["k3lite_triton_ms"] = row["configs"][best]
    row["best_config"] = best
    scale = D ** -0.5
    kernel_step = lambda: kernels.run_step("kda", q, k, v, g, beta, state=state, scale=scale)  # noqa: E731
    ops_step = lambda: kda.step(q, k, v, g, beta, state=state, backend="triton")  # noqa: E731
    row["k3lite_default_ms"] = measure(kernel_step)
    row["ops_step_triton_ms"] = measure(ops_step)
    if device == "cuda":   # host time and paired ratio, as for the chunked rows (run_step as the kernels)
        api_cost(row, measure, {"k3lite_triton": kernel_step, "k3lite_ops_triton": ops_step})
    scratch = state.clone()   # the in-place step overwrites its state on every call
    row["ops_step_triton_inplace_ms"] = measure(
        lambda: kda.step(q, k, v, g, beta, state=scratch, backend="triton", inplace=True))
    row["k3lite_torch_ms"] = measure(lambda: kda.step(q, k, v, g, beta, state=state, backend="torch"))
    row["tb_per_s"] = state_bytes / (row["k3lite_default_ms"] * 1e-3) / 1e12
    row["ops_tb_per_s"] = state_bytes / (row["ops_step_triton_ms"] * 1e-3) / 1e12
    row["ops_inplace_tb_per_s"] = state_bytes / (row["ops_step_triton_inplace_ms"] * 1e-3) / 1e12
    if fla_step is not None and row.get("fla_before_ms"):
        row["fla_after_ms"] = measure_or_error(measure, fla_step, row, "fla_error")
        if row["fla_after_ms"]:
            row["fla_ms"] = (row["fla_before_ms"] + row["fla_after_ms"]) / 2
            row["fla_tb_per_s"] = state_bytes / (row["fla_ms"] * 1e-3) / 1e12
    return row


def measure_or_error(measure, fn, row, error_key):
    """measure(fn), or None with the error kept in row[error_key] (the reference library may refuse)."""
    try:
        return measure(fn)
    except Exception as err:
        row[error_key] = repr(err)[:200]
        return None


def eager_situ(gate, up):
    return situ_glu(gate, up, backend="torch")


def eager_silu_mul(gate, up):
    return torch.nn.functional.silu(gate) * up


def bench_situ(rows, cols, device, measure, results, save):
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(2)
    out = {"shape": [rows, cols], "dtype": str(dtype)}
    for mode in ("fwd", "fwd+bwd"):
        grad = mode == "fwd+bwd"
        gate = (3 * torch.randn(rows, cols, device=device, generator=gen)).to(dtype).requires_grad_(grad)
        up = (3 * torch.randn(rows, cols, device=device, generator=gen)).to(dtype).requires_grad_(grad)
        for name, fn in (("situ_fused", functools.partial(situ_glu, gate, up, backend="triton")),
                         ("situ_eager", functools.partial(eager_situ, gate, up)),
                         ("silu_mul_fused", functools.partial(kernels.silu_and_mul, gate, up)),
                         ("silu_mul_eager", functools.partial(eager_silu_mul, gate, up))):
            run = with_backward(fn, {"g": gate, "u": up}) if grad else fn
            out[f"{name}_{mode}_ms"] = measure(run)
            if device == "cuda":
                out[f"{name}_{mode}_gpu_ms"] = gpu_kernel_ms(run)
        out[f"eager_over_fused_{mode}"] = out[f"situ_eager_{mode}_ms"] / out[f"situ_fused_{mode}_ms"]
        out[f"fused_over_silu_mul_{mode}"] = out[f"situ_fused_{mode}_ms"] / out[f"silu_mul_fused_{mode}_ms"]
        print(f"situ {mode:>7}: fused {out[f'situ_fused_{mode}_ms']:.4f} ms, "
              f"eager {out[f'situ_eager_{mode}_ms']:.4f} ms "
              f"({out[f'eager_over_fused_{mode}']:.2f}x), fused SiLU-and-mul {out[f'silu_mul_fused_{mode}_ms']:.4f} ms "
              f"(SiTU/SiLU {out[f'fused_over_silu_mul_{mode}']:.2f}x)", flush=True)
        if device == "cuda":
            gpu = {name: out[f"{name}_{mode}_gpu_ms"] for name in ("situ_fused", "situ_eager", "silu_mul_fused")}
            out[f"eager_over_fused_{mode}_gpu"] = gpu["situ_eager"] / gpu["situ_fused"]
            out[f"fused_over_silu_mul_{mode}_gpu"] = gpu["situ_fused"] / gpu["silu_mul_fused"]
            print(f"situ {mode:>7} (GPU kernel time only): fused {gpu['situ_fused']:.4f} ms, eager "
                  f"{gpu['situ_eager']:.4f} ms ({out[f'eager_over_fused_{mode}_gpu']:.2f}x), SiLU-and-mul "
                  f"{gpu['silu_mul_fused']:.4f} ms (SiTU/SiLU {out[f'fused_over_silu_mul_{mode}_gpu']:.2f}x)",
                  flush=True)
    bytes_fwd = 3 * rows * cols * torch.finfo(dtype).bits // 8
    out["situ_fused_fwd_tb_per_s"] = bytes_fwd / (out["situ_fused_fwd_ms"] * 1e-3) / 1e12
    results["situ"] = out
    save()


# ----- model decode: a K3-shaped model against a GPT-2-shaped one, both with their caches -------------

# The second pass of bench_model_decode (GPU only), on a fresh cache per model and context: steps profiled for
# the device time, then run on a side stream before the capture, then captured; replays timed.
PROFILED_STEPS = 3
GRAPH_WARMUP_STEPS = 3
GRAPH_REPLAYS = 20

MODEL_DECODE_NOTE = (
    "tokens/s = batch x timed steps / wall time of the steps (CUDA events around the loop on a GPU); each "
    "step is one call of the model's own cached decode path, the one generate uses (K3.run(token, cache) "
    "with every KDA layer updating its state in place, through the Triton step on CUDA; GPT2(token, "
    "cache)), fed fixed token ids (no sampling, no .item() in the loop). Neither path copies its cache in a "
    "step: both caches are preallocated buffers that a step writes its own token into and then reads once "
    "(GPT-2's KVCache a [B, capacity, H, D] buffer per layer for keys and one for values, MLA one "
    "[B, capacity, 512 + 64] buffer of [latent; rope key] rows per layer, both doubling when full); GPT-2 "
    "attends through scaled_dot_product_attention on transposed views of its buffers on CUDA, and MLA's "
    "absorbed path is one matmul per sequence with the heads folded into the query rows (scores, then "
    "probabilities x latents), reading the cached rows in place and in the cache's dtype, with only the "
    "scores softmaxed in float32. Every cache is built with room for its context plus all warmup and timed "
    "steps, so no buffer grows inside the timing. cache_fill 'prefill': the cache of context L comes from "
    "a forward pass over L random tokens; 'random': random keys/values (GPT-2) and MLA latents (K3) of the "
    "shapes and dtypes a prefill gives, and a K3 cache whose KDA states come from a short prefill (a "
    "state's size does not grow with L) -- decode time depends on the cache's size, not its values, and a "
    "full prefill at long L is too slow or too big. GPT-2's position table is widened to the longest "
    "context. Cache bytes are per sequence at context L (the cached tokens, not the spare room). "
    "*_host_ms_per_step: the host's time to issue the timed steps (before the final synchronisation); "
    "close to *_ms_per_step, the GPU waited for the host (launch-bound), far below it, the GPU work set the pace. "
    "*_ms_per_step and the tokens/s are what eager PyTorch delivers, Python's launch overhead included. Two more "
    "measures, on a GPU only (None on a CPU), leave the host out: *_device_ms_per_step = the device time of "
    f"every kernel, copy and memset of {PROFILED_STEPS} steps, summed from torch.profiler's CUDA events and "
    "divided by the steps (time in which the GPU waited for the host is not counted; kernels are summed, not "
    "overlapped); *_graph_ms_per_step = one decode step captured in a torch.cuda.CUDAGraph (after "
    f"{GRAPH_WARMUP_STEPS} warm-up steps on a side stream) and replayed {GRAPH_REPLAYS} times between CUDA "
    "events, per replay (the median of 3 such runs). A replay re-runs the captured step at the "
    "same cache position: it writes the same cache slot again (GPT-2's keys and values, MLA's latent row) and "
    f"reads the same cached tokens (L + {PROFILED_STEPS + GRAPH_WARMUP_STEPS}, the profiled and warm-up steps "
    "before it, plus its own), while every KDA state keeps being updated in place, so it is a step at a fixed "
    "context with no host overhead: what a decode engine replaying CUDA graphs of these same kernels would "
    "reach (one that also fused kernels could go lower), not what eager generate gets. Both are measured in a "
    "second pass, after every wall-time row, on caches built again for them (same context and fill, room for "
    "their steps: no buffer grows or moves, checked), so that neither the profiler (which may stay attached to "
    "the process once used) nor a graph's memory pool is around while a wall time is taken. A model whose step "
    "cannot be captured gets *_graph_error instead of a time, a failed profile *_device_error. "
    "k3_over_gpt2_device and k3_over_gpt2_graph are the tokens/s ratios, GPT-2's ms over K3's. GPT-2's SDPA "
    "leaves out cuDNN's backend (flash, memory-efficient or math attention): cuDNN built a new plan for every "
    "key length, about 6.7 ms of host time per call on an H200 (k3lite.models.gpt2.SDPA_BACKENDS).")


def decode_model_configs(gpu: bool, vocab_size: int):
    """A K3 and a GPT-2 of one width and depth: on a GPU width 1024 and 8 layers (K3: 6 KDA + 2 MLA,
    3:1 as in K3, MLA caching K3's 512 + 64 numbers per token), on a CPU width 64 and 4 layers."""
    from k3lite.models.gpt2 import GPT2Config
    from k3lite.models.k3 import K3Config

    if gpu:
        width, depth, heads = 1024, 8, 16
        k3 = K3Config(vocab_size=vocab_size, hidden_size=width, num_layers=depth, layers_per_cycle=4,
                      num_heads=8, head_dim=128, mla_num_heads=16, q_lora_rank=512, kv_lora_rank=512,
                      nope_dim=128, rope_dim=64, v_dim=128, dense_width=4 * width, num_experts=16, top_k=2,
                      num_shared_experts=1, expert_width=1024, latent_size=512, attnres_block_size=2,
                      tie_embeddings=True, chunk_size=64, backend="triton")
    else:
        width, depth, heads = 64, 4, 4
        k3 = K3Config(vocab_size=vocab_size, hidden_size=width, num_layers=depth, layers_per_cycle=4,
                      tie_embeddings=True, backend="torch")
    gpt2 = GPT2Config(vocab_size=vocab_size, n_layer=depth, n_head=heads, n_embd=width)
    return k3, gpt2


def _k3_in_place(model, on: bool):
    """Let every KDA layer overwrite its cached state (as K3.generate does): no state allocated per step."""
    from k3lite.layers.kda_layer import KDALayer

    for layer in model.layers:
        if isinstance(layer.mixer, KDALayer):
            layer.mixer.update_state_in_place = on


def _random_like(template: torch.Tensor, length: int, batch: int, gen) -> torch.Tensor:
    """Random values of ``template``'s dtype with its time axis (dim 1) stretched to ``length``."""
    shape = (batch, length, *template.shape[2:])
    return torch.randn(shape, device=template.device, generator=gen, dtype=template.dtype)


def fill_k3_cache(model, prompt, length, fill, gen, headroom):
    """A K3Cache of ``length`` tokens whose MLA buffers have room for ``headroom`` more tokens."""
    from k3lite.layers.mla import MLACache
    from k3lite.models.k3 import K3Cache

    # 'random': shapes, dtypes and real KDA states from a short prefill, the MLA rows then made up
    source = model.run(prompt[:, :length] if fill == "prefill" else prompt[:, :8]).cache
    batch, layers = prompt.shape[0], []
    for layer_cache in source.layers:
        if isinstance(layer_cache, MLACache):
            tensors = (layer_cache.latent, layer_cache.rope_key)
            if fill == "random":
                tensors = [_random_like(t, length, batch, gen) for t in tensors]
            layer_cache = MLACache.from_tensors(*tensors, capacity=length + headroom)
        layers.append(layer_cache)
    return K3Cache(layers, length)


def fill_gpt2_cache(model, prompt, length, fill, gen, headroom):
    """A KVCache of ``length`` tokens with room for ``headroom`` more tokens."""
    cache = model.new_cache(capacity=length + headroom)
    if fill == "prefill":
        model(prompt[:, :length], cache)
        return cache
    probe = model.new_cache()
    model(prompt[:, :1], probe)              # shapes and dtypes of one layer's keys and values
    for layer, (keys, values) in enumerate(zip(probe.keys, probe.values)):   # one layer at a time: peak memory
        cache.append(layer, _random_like(keys, length, prompt.shape[0], gen),
                     _random_like(values, length, prompt.shape[0], gen))
    return cache


def k3_decode_step(model, cache):
    """``(step, current_cache)``: ``step(token)`` continues the K3 cache by one token (``K3.run``, what
    ``generate`` calls) and keeps the new cache; ``current_cache()`` returns it. ``step`` returns the logits,
    the new cache and the cache it read: a step captured in a CUDA graph reads that cache's tensors (the
    convolution tails) at every replay, so they must stay alive as long as the graph (see :func:`capture_step`)."""
    holder = [cache]

    def step(token):
        before = holder[0]
        result = model.run(token, before)
        holder[0] = result.cache
        return result.logits, result.cache, before

    return step, lambda: holder[0]


def gpt2_decode_step(model, cache):
    """``(step, current_cache)`` for GPT-2: ``step(token)`` is ``model(token, cache)``, which writes the token
    into the KVCache in place and returns ``(logits, cache)``."""
    return (lambda token: model(token, cache)), (lambda: cache)


def time_decode(step, tokens, gpu: bool, warmup: int, repeats: int) -> tuple[float, float]:
    """Median seconds of the decode steps over ``tokens[warmup:]``, after ``tokens[:warmup]`` untimed
    (compilation, the allocator's first requests), and the median seconds the host took to issue them.
    Only the region is synchronised: nothing in the loop reads a number back to the host. On a GPU the
    two times tell the bound apart: when issuing the steps takes as long as running them, the GPU waited
    for the host (launch overhead); when it takes much less, the GPU work (the cache traffic) sets the pace."""
    for token in tokens[:warmup]:
        step(token)
    timed = tokens[warmup:]
    times, host_times = [], []
    for _ in range(repeats):
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            host_start = time.perf_counter()
            for token in timed:
                step(token)
            host_times.append(time.perf_counter() - host_start)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start_s = time.perf_counter()
            for token in timed:
                step(token)
            times.append(time.perf_counter() - start_s)
            host_times.append(times[-1])
    return statistics.median(times), statistics.median(host_times)


def device_ms_per_step(step, tokens) -> float:
    """Milliseconds of device work per step: ``step(token)`` for each of ``tokens`` under torch.profiler, the
    durations of every CUDA event (kernels, copies, memsets) summed and divided by the steps. Time in which
    the device sat idle, waiting for the host to launch the next kernel, is not counted."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    # Profiles and CUDA graphs alternate in bench_model_decode. Kineto versions that tear CUPTI down after each
    # profile can crash re-initialising it once graphs exist; PyTorch's own workaround (torch.profiler, for
    # inductor's CUDA graphs) is to keep CUPTI attached. Recent Kineto tears down only when asked to (=1).
    os.environ.setdefault("TEARDOWN_CUPTI", "0")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for token in tokens:
            step(token)
        torch.cuda.synchronize()
    # The events on the device itself, each once: a CPU-side op's device time is the sum of its kernels', which
    # are events of their own; user annotations on the GPU timeline span kernels and would count them twice.
    busy_us = sum(event.device_time_total for event in prof.events()
                  if event.device_type == DeviceType.CUDA and not getattr(event, "is_user_annotation", False))
    if not busy_us > 0:
        raise RuntimeError("the profiler recorded no device time (CUPTI unavailable?)")
    return busy_us / len(tokens) / 1e3


def capture_step(step, token, warmup: int = GRAPH_WARMUP_STEPS):
    """``(graph, output)``: one call of ``step(token)`` captured in a ``torch.cuda.CUDAGraph``.

    As the PyTorch documentation asks, ``warmup`` calls run first on a side stream (kernels compiled and
    chosen, workspaces allocated outside the graph). Each call, the captured one too, continues the caches
    ``step`` owns; the capture itself runs no kernel, it records them. ``output``, ``step``'s return value
    of the captured call, lives as long as the caller keeps it: ``step`` should return every tensor the graph
    reads that nothing else keeps alive (K3's previous cache, whose convolution tails the step reads), and
    replaying then recomputes it in place. A replay repeats exactly the captured step: same input tensors,
    same cache position."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step(token)
    current = torch.cuda.current_stream()
    current.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            output = step(token)
    finally:
        torch.cuda.set_stream(current)   # torch.cuda.graph leaves its capture stream current when capture_end fails
    return graph, output


def graph_ms_per_step(graph, replays: int = GRAPH_REPLAYS, repeats: int = 3) -> float:
    """Median over ``repeats`` of the milliseconds per replay of ``graph``, ``replays`` replays between two CUDA
    events (one replay first, untimed: the first launch uploads the graph)."""
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / replays)
    return statistics.median(times)


def _cache_buffers(cache) -> tuple:
    """Where each buffer of a GPT-2 KVCache or a K3Cache starts (its views start at row 0), and how much room it
    has (GPT-2: bytes of all buffers, MLA: tokens): a step that grew or copied a buffer changes this. K3's KDA
    states are in it too: with ``update_state_in_place`` a step keeps them where they are."""
    from k3lite.layers.kda_layer import KDACache
    from k3lite.layers.mla import MLACache
    from k3lite.models.k3 import K3Cache

    if isinstance(cache, K3Cache):
        found = []
        for layer_cache in cache.layers:
            if isinstance(layer_cache, MLACache):
                found.append((layer_cache.entries.data_ptr(), layer_cache.capacity))
            elif isinstance(layer_cache, KDACache):
                found.append((layer_cache.recurrent_state.data_ptr(), None))
        return tuple(found)
    return tuple(t.data_ptr() for t in cache.keys + cache.values), cache.capacity_nbytes()


def device_and_graph_times(name, step, tokens, cache_of, row):
    """On a GPU: ``row[name + "_device_ms_per_step"]`` (:func:`device_ms_per_step` over ``PROFILED_STEPS``
    steps), then ``row[name + "_graph_ms_per_step"]`` (:func:`capture_step`, then :func:`graph_ms_per_step`),
    each None with ``row[name + "_device_error"]`` / ``_graph_error`` when it fails. ``step`` continues a cache
    with room for ``PROFILED_STEPS + GRAPH_WARMUP_STEPS + 1`` more tokens, which ``cache_of()`` returns; no
    buffer of it may grow or move (checked), and the cache is spent afterwards (the graph's steps leave it at a
    position no other measurement should continue from)."""
    row[f"{name}_device_ms_per_step"] = row[f"{name}_graph_ms_per_step"] = None
    buffers = _cache_buffers(cache_of())
    try:
        row[f"{name}_device_ms_per_step"] = device_ms_per_step(step, tokens[:PROFILED_STEPS])
    except Exception as err:  # e.g. no CUPTI: the other numbers stand
        row[f"{name}_device_error"] = repr(err)[:200]
    graph = output = None
    try:
        graph, output = capture_step(step, tokens[0])
        if _cache_buffers(cache_of()) != buffers:
            raise RuntimeError("a cache buffer grew or moved in the profiled, warm-up or captured steps (too little "
                               "room): the replay would time a copy")
        row[f"{name}_graph_ms_per_step"] = graph_ms_per_step(graph)
    except Exception as err:  # an op that synchronises the host or cannot be captured: record it and go on
        row[f"{name}_graph_error"] = repr(err)[:200]
    finally:
        del graph, output
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _times(ratio):
    return "-" if ratio is None else f"{ratio:.2f}x"


def _ratio(gpt2_ms, k3_ms):
    """K3's tokens/s over GPT-2's at one batch size: GPT-2's ms per step over K3's (None without both)."""
    return gpt2_ms / k3_ms if gpt2_ms and k3_ms else None


def bench_model_decode(contexts, batch, steps, prefill_max, device, results, save, *, vocab_size=8192,
                       warmup=2, repeats=3):
    """Tokens/s of single-token decode, K3-shaped against GPT-2-shaped, at each context length.

    Two passes. The first times eager steps (wall time, :func:`time_decode`) at every context; on a GPU the second
    then rebuilds each cache and measures the device time (:func:`device_ms_per_step`) and a CUDA-graph replay
    (:func:`capture_step`, :func:`graph_ms_per_step`) of each model: neither the profiler, which may stay attached
    to the process once used, nor a graph's memory pool is around while a wall time is taken."""
    from k3lite.models.gpt2 import GPT2, GPT2Config
    from k3lite.models.k3 import K3

    gpu = device == "cuda"
    dtype = torch.bfloat16 if gpu else torch.float32
    k3_config, gpt2_config = decode_model_configs(gpu, vocab_size)
    headroom = warmup + repeats * steps                      # tokens the caches gain while timed
    graph_room = PROFILED_STEPS + GRAPH_WARMUP_STEPS + 1     # the second pass's: profiled, warm-up, captured
    longest = max(contexts) + (max(headroom, graph_room) if gpu else headroom) + 8
    gpt2_config = GPT2Config(**{**gpt2_config.__dict__, "n_ctx": longest})
    torch.manual_seed(3)
    k3 = K3(k3_config).to(device=device, dtype=dtype).eval()
    gpt2 = GPT2(gpt2_config).to(device=device, dtype=dtype).eval()
    count = lambda model: sum(p.numel() for p in model.parameters())  # noqa: E731  (tied weights once)
    out = {"batch": batch, "timed_steps": steps, "warmup_steps": warmup, "repeats": repeats, "dtype": str(dtype),
           "k3_params": count(k3), "gpt2_params": count(gpt2), "gpt2_position_table_params": gpt2.wpe.weight.numel(),
           "k3_layers": list(k3_config.layer_types), "width": k3_config.hidden_size,
           "depth": k3_config.num_layers, "vocab_size": vocab_size, "prefill_max": prefill_max,
           "k3_config": dict(k3_config.__dict__), "gpt2_config": dict(gpt2_config.__dict__),
           "note": MODEL_DECODE_NOTE, "rows": []}
    results["model_decode"] = out
    results["meta"]["model_decode"] = MODEL_DECODE_NOTE
    print(f"model decode: K3 {out['k3_params']:,} parameters ({' '.join(out['k3_layers'])}), GPT-2 "
          f"{out['gpt2_params']:,} ({out['gpt2_position_table_params']:,} of them the position table for "
          f"{longest} positions); width {out['width']}, depth {out['depth']}, batch {batch}, {dtype}", flush=True)
    print(f"{'context':>8} {'fill':>7} | {'K3 tok/s':>10} {'GPT-2 tok/s':>11} {'K3/GPT-2':>8} | "
          f"{'K3 cache/seq':>12} {'GPT-2 cache/seq':>15} | ms per step (of it, host issuing): K3, GPT-2", flush=True)
    gen = torch.Generator(device=device).manual_seed(4)
    inputs = {}
    for length in contexts:
        fill = "prefill" if length <= prefill_max else "random"
        prompt = torch.randint(0, vocab_size, (batch, length if fill == "prefill" else 8), device=device, generator=gen)
        tokens = torch.randint(0, vocab_size, (warmup + steps, batch, 1), device=device, generator=gen)
        inputs[length] = prompt, tokens
        row = {"context": length, "cache_fill": fill}
        with torch.no_grad():
            cache = fill_k3_cache(k3, prompt, length, fill, gen, headroom)
            row["k3_cache_bytes_per_seq"] = cache.nbytes() / batch
            row["k3_kda_state_bytes_per_seq"] = cache.nbytes("kda") / batch
            row["k3_mla_bytes_per_seq"] = cache.nbytes("mla") / batch
            k3_step, _ = k3_decode_step(k3, cache)
            del cache
            _k3_in_place(k3, True)
            try:
                k3_s, k3_host_s = time_decode(k3_step, tokens, gpu, warmup, repeats)
            finally:
                _k3_in_place(k3, False)
            del k3_step
            if gpu:
                torch.cuda.empty_cache()
            kv = fill_gpt2_cache(gpt2, prompt, length, fill, gen, headroom)
            row["gpt2_cache_bytes_per_seq"] = kv.nbytes() / batch
            gpt2_step, _ = gpt2_decode_step(gpt2, kv)
            del kv
            gpt2_s, gpt2_host_s = time_decode(gpt2_step, tokens, gpu, warmup, repeats)
            del gpt2_step
            if gpu:
                torch.cuda.empty_cache()
        row["k3_ms_per_step"] = k3_s / steps * 1e3
        row["gpt2_ms_per_step"] = gpt2_s / steps * 1e3
        row["k3_host_ms_per_step"] = k3_host_s / steps * 1e3      # issuing the steps; see time_decode
        row["gpt2_host_ms_per_step"] = gpt2_host_s / steps * 1e3
        row["k3_tokens_per_s"] = batch * steps / k3_s
        row["gpt2_tokens_per_s"] = batch * steps / gpt2_s
        row["k3_over_gpt2"] = row["k3_tokens_per_s"] / row["gpt2_tokens_per_s"]
        row["gpt2_over_k3_cache_bytes"] = row["gpt2_cache_bytes_per_seq"] / row["k3_cache_bytes_per_seq"]
        for kind in ("device", "graph"):   # measured in the second pass, on a GPU; None on a CPU
            row[f"k3_{kind}_ms_per_step"] = row[f"gpt2_{kind}_ms_per_step"] = row[f"k3_over_gpt2_{kind}"] = None
        row["elapsed_s"] = round(time.perf_counter() - STARTED, 1)
        out["rows"].append(row)
        print(f"{length:>8} {fill:>7} | {row['k3_tokens_per_s']:>10.1f} {row['gpt2_tokens_per_s']:>11.1f} "
              f"{row['k3_over_gpt2']:>7.2f}x | {row['k3_cache_bytes_per_seq'] / 2**20:>9.2f} MiB "
              f"{row['gpt2_cache_bytes_per_seq'] / 2**20:>12.2f} MiB | {row['k3_ms_per_step']:.2f} "
              f"({row['k3_host_ms_per_step']:.2f}), {row['gpt2_ms_per_step']:.2f} ({row['gpt2_host_ms_per_step']:.2f})",
              flush=True)
        save()
    if any(r["cache_fill"] == "random" for r in out["rows"]):
        print("fill 'random': the caches hold random keys/values (GPT-2) and MLA latents (K3) of a prefill's shapes "
              "and dtypes, no prefill run (decode time depends on the cache's size, not its values)", flush=True)
    if not gpu:
        print("device time and graph replay per step: measured on a GPU only (None in the rows)", flush=True)
        return
    device_and_graph_pass(k3, gpt2, out["rows"], inputs, gen, graph_room, save)


def device_and_graph_pass(k3, gpt2, rows, inputs, gen, room, save):
    """bench_model_decode's second pass (GPU): for each row, a fresh cache of each model (its context and fill,
    ``room`` tokens to spare, ``inputs[context] = (prompt, tokens)``), then :func:`device_and_graph_times`."""
    print(f"{'context':>8} | device ms per step: K3, GPT-2 (K3/GPT-2) | graph replay ms per step: K3, GPT-2 "
          f"(K3/GPT-2)   [fresh caches; see the note]", flush=True)
    for row in rows:
        length, fill = row["context"], row["cache_fill"]
        prompt, tokens = inputs[length]
        with torch.no_grad():
            k3_step, k3_current = k3_decode_step(k3, fill_k3_cache(k3, prompt, length, fill, gen, room))
            _k3_in_place(k3, True)
            try:
                device_and_graph_times("k3", k3_step, tokens, k3_current, row)
            finally:
                _k3_in_place(k3, False)
            del k3_step, k3_current
            torch.cuda.empty_cache()
            gpt2_step, gpt2_current = gpt2_decode_step(gpt2, fill_gpt2_cache(gpt2, prompt, length, fill, gen, room))
            device_and_graph_times("gpt2", gpt2_step, tokens, gpt2_current, row)
            del gpt2_step, gpt2_current
            torch.cuda.empty_cache()
        for kind in ("device", "graph"):
            row[f"k3_over_gpt2_{kind}"] = _ratio(row[f"gpt2_{kind}_ms_per_step"], row[f"k3_{kind}_ms_per_step"])
        row["elapsed_s"] = round(time.perf_counter() - STARTED, 1)
        print(f"{length:>8} | {fmt(row['k3_device_ms_per_step'])}, {fmt(row['gpt2_device_ms_per_step'])} "
              f"({_times(row['k3_over_gpt2_device'])}) | {fmt(row['k3_graph_ms_per_step'])}, "
              f"{fmt(row['gpt2_graph_ms_per_step'])} ({_times(row['k3_over_gpt2_graph'])})", flush=True)
        for key in ("k3_device_error", "gpt2_device_error", "k3_graph_error", "gpt2_graph_error"):
            if key in row:
                print(f"{'':>8} {key}: {row[key]}", flush=True)
        save()


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from k3lite.course import viz

    viz.use_style()
    key = "ratio_ops_vs_fla" if any(r.get("ratio_ops_vs_fla") for r in results["chunked"]) else "ratio_vs_fla"
    rows = [r for r in results["chunked"] if r.get(key)]
    if not rows:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    top = max(max(r[key] for r in rows), 1.5) * 1.12
    bars = {}
    for ax, mode, target in zip(axes, ("fwd", "fwd+bwd"), (1.25, 1.5)):
        measured = [r for r in results["chunked"] if r["mode"] == mode and r.get("k3lite_triton_ms")]
        shapes = sorted({(r["B"], r["T"], r["H"]) for r in measured}, key=lambda s: s[1])
        width = 0.8 / len(KINDS)
        for i, kind in enumerate(KINDS):
            for j, shape in enumerate(shapes):
                match = [r for r in measured if (r["B"], r["T"], r["H"]) == shape and r["kind"] == kind]
                if not match:
                    continue
                x, y = j + (i - (len(KINDS) - 1) / 2) * width, match[0].get(key)
                if y is None:  # k3lite measured, the reference library not (it refused or failed)
                    ax.text(x, 0.04, "no fla time", rotation=90, ha="center", va="bottom", fontsize=8)
                    continue
                bars[kind] = ax.bar(x, y, width=width, color=viz.MECHANISM_COLORS[kind])
                ax.text(x, y, f"{y:.2f}", ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color=viz.PALETTE["black"], linewidth=1)
        line = ax.axhline(target, color=viz.PALETTE["red"], linewidth=1, linestyle="--")
        ax.legend([line], [f"target {target}x"], loc="upper left", fontsize=8)
        ax.set_xticks(range(len(shapes)), [f"B={b}\nT={t}" for b, t, _ in shapes])
        ax.set_xlim(-0.5, len(shapes) - 0.5)
        ax.set_ylim(0, top)
        ax.set_title(f"{mode}: k3lite {'ops API' if key == 'ratio_ops_vs_fla' else 'kernel'} time / fla time")
        ax.set_xlabel("shape (H = 16, D = 128, bf16)")
    axes[0].set_ylabel("time ratio (1 = as fast as fla)")
    fig.legend(list(bars.values()), [kind.replace("_", " ") for kind in bars], loc="lower center", ncols=len(bars),
               fontsize=9, frameon=False)
    fig.subplots_adjust(bottom=0.27, wspace=0.18)
    fig.savefig(path)
    plt.close(fig)


# A row's identity, for --merge: two rows with the same key measured the same thing.
ROW_KEYS = {"chunked": ("kind", "B", "T", "H", "D", "mode"), "decode": ("kind", "B", "H", "K", "V")}
# What differs between two copies of one measurement without making them different measurements.
VOLATILE = ("elapsed_s",)


def count_rows(results: dict) -> int:
    """The measurements a results dict holds: its chunked, decode and model_decode rows, one for a SiTU section and
    one per profiled mode, one for the ceilings. What the file guard (:class:`ResultsFile`) compares."""
    return (len(results.get("chunked") or []) + len(results.get("decode") or [])
            + len((results.get("model_decode") or {}).get("rows") or []) + (1 if results.get("situ") else 0)
            + len(results.get("kda_profile_2x8192x16") or {}) + (1 if results.get("ceilings") else 0))


def existing_rows(path: Path) -> int | None:
    """:func:`count_rows` of the results file at ``path``: 0 when there is none (or it is empty), None when it is
    not a results file this runner can read (then only ``--overwrite`` replaces it)."""
    if not path.exists() or (path.is_file() and path.stat().st_size == 0):
        return 0
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return count_rows(data) if isinstance(data, dict) else None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then move it over ``path`` (os.replace): a reader, or a run
    killed halfway, sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class ResultsFile:
    """Where a run's results go. Every save is atomic (:func:`write_atomic`) and none writes an empty table. An
    existing file is replaced only by results with at least as many rows (:func:`count_rows`), or with
    ``overwrite``; until then the results go to ``<name>.new.json`` beside it, which a save that may replace the file
    removes again. So a run killed halfway, a run of fewer sections, or a typo never costs a file its rows."""

    def __init__(self, path: Path, overwrite: bool = False):
        self.path, self.overwrite = path, overwrite
        self.existing = existing_rows(path)
        self.aside = path.with_name(f"{path.stem}.new{path.suffix or '.json'}")
        self.target: Path | None = None   # where the last save went

    def may_replace(self, rows: int) -> bool:
        return self.overwrite or self.existing == 0 or (self.existing is not None and rows >= self.existing)

    def save(self, results: dict) -> Path | None:
        rows = count_rows(results)
        if rows == 0:
            return None
        target = self.path if self.may_replace(rows) else self.aside
        write_atomic(target, json.dumps(results, indent=1))
        if target == self.path and self.target == self.aside:
            self.aside.unlink(missing_ok=True)
        self.target = target
        return target

    def report(self, results: dict) -> int:
        """The closing line of a run (or a merge) and its exit status: 0 when the results are in the file named."""
        rows = count_rows(results)
        if self.target == self.path:
            print(f"wrote {self.path} ({rows} rows)")
            return 0
        if self.target is None:
            print(f"measured nothing: no file written ({self.path} left as it was)", file=sys.stderr)
            return 1
        held = "rows it cannot count" if self.existing is None else f"{self.existing} rows"
        print(f"kept {self.path} ({held}): this run has {rows}, so its results are in {self.aside}; pass --overwrite "
              f"to replace the file", file=sys.stderr)
        return 1


def load_run(path: Path) -> dict:
    """One run's JSON for --merge; a ValueError naming the file when it is missing or not a results file."""
    try:
        run = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"--merge: cannot read {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise ValueError(f"--merge: {path} is not JSON ({err})") from None
    if not isinstance(run, dict) or not isinstance(run.get("meta"), dict):
        raise ValueError(f"--merge: {path} is not a benchmark results file (no meta)")
    return run


def _same_row(a: dict, b: dict) -> bool:
    strip = lambda row: {key: value for key, value in row.items() if key not in VOLATILE}  # noqa: E731
    return strip(a) == strip(b)


def _describe(section: str, key: tuple) -> str:
    return f"{section} " + " ".join(f"{name}={value}" for name, value in zip(ROW_KEYS[section], key))


def merge(paths, out, plot_path, overwrite=False):
    """One results file from several runs: rows joined (each row's ratios come from its own run), each measurement
    once. Rows with one key (:data:`ROW_KEYS`: kind, B, T, H, D, mode for chunked rows; kind, B, H, K, V for
    decode rows) are one measurement: an identical copy (the same file twice) is dropped, a different one is a
    conflict, reported, and the first file's row kept. Sections (situ, model_decode, the profile) come from the
    first run that has them, a different one in a later run again a conflict. Each run's command is kept once.
    Returns the exit status (see :class:`ResultsFile`)."""
    runs = [(path, load_run(path)) for path in paths]
    merged = {"meta": dict(runs[0][1]["meta"]), "chunked": [], "decode": [], "situ": {}}
    merged["meta"]["runs"] = []
    kept, conflicts, duplicates = {}, [], 0
    sources = {}
    for path, run in runs:
        entry = {key: run["meta"].get(key) for key in ("command", "date_utc")}
        if entry not in merged["meta"]["runs"]:
            merged["meta"]["runs"].append(entry)
        for section, fields in ROW_KEYS.items():
            for row in run.get(section) or []:
                key = (section, tuple(row.get(name) for name in fields))
                if key not in kept:
                    kept[key] = (path, row)
                    merged[section].append(row)
                elif _same_row(kept[key][1], row):
                    duplicates += 1
                else:
                    conflicts.append({"what": _describe(*key), "kept": str(kept[key][0]), "dropped": str(path)})
        for name, value in run.items():
            if name in ("meta", *ROW_KEYS) or not value:
                continue
            if not merged.get(name):
                merged[name], sources[name] = value, path
            elif merged[name] == value:
                duplicates += 1
            else:
                conflicts.append({"what": f"section {name}", "kept": str(sources[name]), "dropped": str(path)})
    order = {kind: i for i, kind in enumerate(KINDS)}
    merged["chunked"].sort(key=lambda r: (order.get(r.get("kind"), len(order)), r.get("T") or 0, r.get("mode") or ""))
    if conflicts:
        merged["meta"]["merge_conflicts"] = conflicts
    for conflict in conflicts:
        print(f"merge conflict: {conflict['what']} differs between {conflict['kept']} and {conflict['dropped']}; "
              f"kept {conflict['kept']}'s", file=sys.stderr)
    print(f"merged {len(runs)} files: {count_rows(merged)} rows, {duplicates} duplicates dropped, "
          f"{len(conflicts)} conflicts")
    results_file = ResultsFile(out, overwrite)
    results_file.save(merged)
    if plot_path and results_file.target == out:
        plot(merged, plot_path)
    return results_file.report(merged)


def versions(fla):
    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        pass
    if fla:
        info["fla"] = fla.get("version")
    return info


SECTIONS = ("ceilings", "situ", "decode", "profile", "fwd", "fwd+bwd", "model_decode")
DEFAULT_SECTIONS = ("ceilings", "situ", "decode", "profile", "fwd", "fwd+bwd")
GPU_ONLY_SECTIONS = ("ceilings", "profile")
EXAMPLES = """examples:
  python -m benchmarks.bench
  python -m benchmarks.bench --quick --out runs/quick.json
  python -m benchmarks.bench --kinds kda,delta_rule --sections fwd,fwd+bwd --out runs/mine.json
  python -m benchmarks.bench --sections fwd --shapes 8x2048,2x8192 --out runs/fwd.json
  python -m benchmarks.bench --sections model_decode --decode-contexts 4096,32768 --decode-batch 8 --decode-steps 32
  python -m benchmarks.bench --merge runs/a.json runs/b.json --out runs/merged.json --plot runs/merged.png

Results are written atomically, never as an empty table, and never over a file that holds more rows
unless --overwrite is given (they then go to <out>.new.json beside it, and the exit status is 1)."""


def _int_at_least(least: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected an integer >= {least}, got {value}")
        return value
    return parse


def _names(parser, flag: str, text: str, allowed) -> list[str]:
    """A comma-separated list of names from ``allowed``, each once; parser.error naming the unknown ones."""
    names = [name.strip() for name in text.split(",")]
    if unknown := [name or "''" for name in names if name not in allowed]:
        parser.error(f"{flag}: unknown {', '.join(unknown)}; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Benchmark of the k3lite kernels (benchmarks/bench.py's docstring says what each section times).")
    add = parser.add_argument
    add("--out", type=Path, metavar="PATH",
        help="JSON path (default: runs/bench_<device>.json, runs/ being git-ignored scratch: bench_gpu.json, "
             "bench_h200.json or bench_cpu.json)")
    add("--overwrite", action="store_true",
        help="replace --out even when it holds more rows than this run (default: off)")
    add("--plot", type=Path, metavar="PATH",
        help="PNG path for the ratio plot of the chunked rows against fla (default: no plot; GPU runs with fla only)")
    add("--quick", action="store_true", help="one shape per section (default: off)")
    add("--sections", metavar="LIST",
        help=f"comma-separated subset of {', '.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)}; "
             "model_decode, a K3-shaped against a GPT-2-shaped model, only when named; "
             "ceilings and profile on a GPU only)")
    add("--kinds", metavar="LIST", help=f"comma-separated mechanisms for fwd, fwd+bwd (default: {','.join(KINDS)})")
    add("--shapes", metavar="LIST",
        help="fwd, fwd+bwd on a GPU: comma-separated BxT (H = 16), e.g. 8x2048,2x8192 "
             "(default: 2x8192,1x32768,8x2048; --quick: 2x8192)")
    add("--decode-contexts", metavar="LIST",
        help="model_decode: comma-separated context lengths >= 1 "
             "(default: 4096,32768,131072 on a GPU, 64,256,1024 on a CPU; --quick: 4096 / 64,256)")
    add("--decode-batch", type=_int_at_least(1), metavar="N",
        help="model_decode: sequences per step, >= 1 (default: 8 on a GPU, 2 on a CPU)")
    add("--decode-steps", type=_int_at_least(1), metavar="N",
        help="model_decode: timed steps, >= 1 (default: 32 on a GPU, 4 on a CPU)")
    add("--decode-prefill-max", type=_int_at_least(0), metavar="L",
        help="model_decode: longest context filled by a prefill, longer ones with random keys/values "
             "(default: 4096 on a GPU, every context on a CPU)")
    add("--merge", type=Path, nargs="+", metavar="JSON",
        help="join the JSON files of runs that split the work (e.g. one per GPU of a machine) into --out, each row "
             "once, and plot with --plot; measures nothing (default: off)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    gpu = torch.cuda.is_available()
    measuring = {"--sections": args.sections, "--kinds": args.kinds, "--shapes": args.shapes,
                 "--decode-contexts": args.decode_contexts, "--decode-batch": args.decode_batch,
                 "--decode-steps": args.decode_steps, "--decode-prefill-max": args.decode_prefill_max,
                 "--quick": args.quick or None}
    if args.merge:
        if given := [flag for flag, value in measuring.items() if value is not None]:
            parser.error(f"--merge measures nothing: drop {', '.join(given)}")
        if args.out is None:
            parser.error("--merge needs --out, the file to write")
        try:
            return merge(args.merge, args.out, args.plot, args.overwrite)
        except ValueError as err:
            parser.error(str(err))
    sections = _names(parser, "--sections", args.sections, SECTIONS) if args.sections is not None \
        else list(DEFAULT_SECTIONS)
    kinds = _names(parser, "--kinds", args.kinds, KINDS) if args.kinds is not None else list(KINDS)
    modes = [m for m in ("fwd", "fwd+bwd") if m in sections]
    if args.kinds is not None and not modes:
        parser.error("--kinds: applies to the fwd and fwd+bwd sections, and --sections names neither")
    runnable = [name for name in sections if gpu or name not in GPU_ONLY_SECTIONS]
    if not runnable:
        parser.error(f"--sections: {', '.join(sections)} {'runs' if len(sections) == 1 else 'run'} on a GPU only; "
                     "this machine has none, so nothing would be measured")
    chosen_shapes = None
    if args.shapes:
        try:
            chosen_shapes = [(int(b), int(t), 16) for b, t in (item.split("x") for item in args.shapes.split(","))]
        except ValueError:
            chosen_shapes = []
        if not chosen_shapes or min(min(b, t) for b, t, _ in chosen_shapes) < 1:
            parser.error(f"--shapes: expected comma-separated BxT with B, T ≥ 1 (e.g. 8x2048,2x8192), "
                         f"got {args.shapes!r}")
        if not modes:
            parser.error("--shapes: applies to the fwd and fwd+bwd sections, and --sections names neither")
        if not gpu:
            parser.error("--shapes: GPU runs only (on a CPU the table runs at one toy shape through the interpreter)")
    contexts = None
    if args.decode_contexts is not None:
        try:
            contexts = [int(c) for c in args.decode_contexts.split(",")]
        except ValueError:
            contexts = []
        if not contexts or min(contexts) < 1:
            parser.error(f"--decode-contexts: expected comma-separated context lengths >= 1 (e.g. 4096,32768), "
                         f"got {args.decode_contexts!r}")
    decode_flags = [flag for flag in ("--decode-contexts", "--decode-batch", "--decode-steps", "--decode-prefill-max")
                    if measuring[flag] is not None]
    if decode_flags and "model_decode" not in sections:
        parser.error(f"{', '.join(decode_flags)}: {'applies' if len(decode_flags) == 1 else 'apply'} to the "
                     "model_decode section, which --sections does not name")
    device = "cuda" if gpu else "cpu"
    name = torch.cuda.get_device_name() if gpu else platform.processor() or "cpu"
    default = "bench_h200.json" if "H200" in name else ("bench_cpu.json" if not gpu else "bench_gpu.json")
    # runs/ is scratch: committed results are named with --out
    out = args.out or Path(__file__).resolve().parents[1] / "runs" / default
    fla = load_fla() if gpu else {}
    measure = timer(gpu)
    results = {"meta": {"command": "python -m benchmarks.bench " + " ".join(argv if argv is not None else sys.argv[1:]),
                        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        "device": name, "versions": versions(fla),
                        "timing": "median ms; triton.testing.do_bench (CUDA events, L2 flushed)" if gpu
                        else "median of 2 wall-clock runs after one warm-up (CPU, Triton interpreter)",
                        "inputs": "L2-normalized keys, beta = sigmoid(randn), GDN g = logsigmoid(randn + 4), "
                                  "KDA g = -5 sigmoid(randn - 2); fwd+bwd = forward + autograd.grad of all inputs",
                        "backward_note": "k3lite chunked backward: all stages Triton (kernels/chunk_bwd_triton.py)",
                        "launches": LAUNCHES["cached" if cached_launches_on() else "dispatch"],
                        "rows": "k3lite_ops_triton_ms: the public ops API, k3lite.ops.<kind>.chunked(backend='triton') "
                                "(argument checks, asynchronous on CUDA, then the kernels); k3lite_triton_ms: "
                                "k3lite.kernels.run_chunked, the kernels alone; fla_before_ms / fla_after_ms: the "
                                "reference timed before and after them, fla_ms their mean; ratio_ops_vs_fla and "
                                "ratio_vs_fla: ops API and kernels over fla_ms; k3lite_torch_ms: the same chunked "
                                "algorithm in PyTorch operations (forward only on the GPU); on a GPU "
                                "k3lite_ops_triton_host_ms / k3lite_triton_host_ms: host ms to issue one call (the "
                                "device idle first), which a row set by the host reaches; ops_over_kernels_paired: "
                                "the median of ops_over_kernels_rounds, four pairs of the two timed back to back in "
                                "alternating order. decode: ops_step_triton_ms "
                                "= k3lite.ops.kda.step(backend='triton'), _inplace_ms with inplace=True, "
                                "k3lite_default_ms = kernels.run_step alone; on a GPU the host times and the paired "
                                "ratio as above, with run_step as the kernels"},
               "chunked": [], "decode": [], "situ": {}}
    results_file = ResultsFile(out, args.overwrite)

    def save():
        results_file.save(results)

    if gpu:
        shapes = [(2, 8192, 16)] if args.quick else [(2, 8192, 16), (1, 32768, 16), (8, 2048, 16)]
        shapes = chosen_shapes or shapes
        D, dtype, batches, situ_shape = 128, torch.bfloat16, [64, 256], (8192, 3072)
    else:
        shapes, D, dtype, batches, situ_shape = [(1, 64, 1)], 16, torch.float32, [4], (64, 256)
    print(f"device {name}; {results['meta']['versions']}", flush=True)
    if gpu and "ceilings" in sections:
        measure_ceilings(device, measure, results, save)
    if "situ" in sections:
        bench_situ(*situ_shape, device, measure, results, save)
    if "decode" in sections:
        bench_decode(batches[-1:] if args.quick else batches, 16 if gpu else 2, D, device, measure, fla, results, save)
    if modes:
        bench_chunked(shapes, D, dtype, device, measure, fla, modes, results, save, kinds)
    if gpu and "profile" in sections:
        try:
            profile_stages(device, results, save)
        except Exception as err:  # the profiler is optional
            print(f"profile skipped: {err!r}")
    if "model_decode" in sections:   # last: on a shared GPU run it must not take time from the kernel rows
        if contexts is None:
            if gpu:
                contexts = [4096] if args.quick else [4096, 32768, 131072]
            else:
                contexts = [64, 256] if args.quick else [64, 256, 1024]
        prefill_max = args.decode_prefill_max
        if prefill_max is None:
            prefill_max = 4096 if gpu else max(contexts)
        try:
            batch = args.decode_batch if args.decode_batch is not None else (8 if gpu else 2)
            steps = args.decode_steps if args.decode_steps is not None else (32 if gpu else 4)
            bench_model_decode(contexts, batch, steps, prefill_max, device, results, save)
        except Exception as err:  # e.g. out of memory at the longest context: keep the rows measured so far
            results.setdefault("model_decode", {})["error"] = repr(err)[:300]
            print(f"model_decode stopped: {err!r}", flush=True)
            if not gpu:
                raise
    save()
    if args.plot:
        plot(results, args.plot)
    return results_file.report(results)


if __name__ == "__main__":
    raise SystemExit(main())
