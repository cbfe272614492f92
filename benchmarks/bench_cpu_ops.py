"""CPU timing of the chunked forms against the token loop, for the four ops of ``k3lite.ops``.

    .venv/bin/python benchmarks/bench_cpu_ops.py [--T 4096] [--repeats 3] [--threads 1]

Prints a table and writes ``benchmarks/results/bench_cpu_ops.json``. Shapes follow the course's running
example (B=1, H=4, K=V=64, T=4096). Each form runs ``--repeats`` times, alternating, and medians
are reported, in wall-clock and in CPU time of this process (steadier when others share the
machine); the chunked result is also compared with the recurrent one, so a fast wrong answer
shows. One thread by default: on a shared machine, intra-op threads wait on each other and the
token loop (thousands of tiny operations) suffers most, which would flatter the chunked form. The
committed JSON is a run on a quiet 2-core machine with ``--threads 2`` (both cores, as a learner's
laptop would use them); the one-thread run is the conservative number.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

OUTPUT = Path(__file__).resolve().parent / "results" / "bench_cpu_ops.json"
MODULES = {"linear_attention": linear_attention, "delta_rule": delta_rule,
           "gated_delta_rule": gated_delta_rule, "kda": kda}


def make_inputs(kind, B, T, H, K, V, seed=0):
    """Unit-norm q and k, log-gates in [-1, 0] (so memory lasts a few tokens to a few hundred)."""
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    args = [q, k, v]
    if kind == "gated_delta_rule":
        args.append(-torch.rand(B, T, H, generator=gen))
    if kind == "kda":
        args.append(-torch.rand(B, T, H, K, generator=gen))
    if kind != "linear_attention":
        args.append(torch.rand(B, T, H, generator=gen))
    return args


def timed(function):
    """Wall-clock and CPU (this process only) seconds of one call, and its result."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def bench(kind, args, chunk_sizes, repeats):
    """Alternate the token loop and each chunked variant, ``repeats`` rounds; medians per form.

    On a shared machine the load drifts between rounds, so the speed-up is also taken per round
    (recurrent and chunked measured back to back) and its median reported.
    """
    module = MODULES[kind]
    runs = {"recurrent": []} | {chunk_size: [] for chunk_size in chunk_sizes}
    for _ in range(repeats):
        *times, (o_ref, s_ref) = timed(lambda: module.recurrent(*args))
        runs["recurrent"].append(times)
        for chunk_size in chunk_sizes:
            *times, (o, s) = timed(functools.partial(module.chunked, *args, chunk_size=chunk_size, backend="torch"))
            runs[chunk_size].append(times)
    error = max((o - o_ref).abs().max().item(), (s - s_ref).abs().max().item())   # last variant
    rows = []
    for chunk_size in chunk_sizes:
        if len(chunk_sizes) > 1:   # the error of every variant, not only the last
            o, s = module.chunked(*args, chunk_size=chunk_size, backend="torch")
            error = max((o - o_ref).abs().max().item(), (s - s_ref).abs().max().item())
        pairs = list(zip(runs["recurrent"], runs[chunk_size]))
        rows.append({
            "op": kind, "chunk_size": chunk_size,
            "recurrent_ms": 1e3 * statistics.median(r[0] for r in runs["recurrent"]),
            "chunked_ms": 1e3 * statistics.median(c[0] for c in runs[chunk_size]),
            "speedup_wall": statistics.median(r[0] / c[0] for r, c in pairs),
            "recurrent_cpu_ms": 1e3 * statistics.median(r[1] for r in runs["recurrent"]),
            "chunked_cpu_ms": 1e3 * statistics.median(c[1] for c in runs[chunk_size]),
            "speedup_cpu": statistics.median(r[1] / c[1] for r, c in pairs),
            "max_abs_diff": error,
        })
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--B", type=int, default=1)
    parser.add_argument("--T", type=int, default=4096)
    parser.add_argument("--H", type=int, default=4)
    parser.add_argument("--K", type=int, default=64)
    parser.add_argument("--V", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kda-chunk-sizes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--out", type=Path, default=OUTPUT)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)

    rows = []
    with torch.inference_mode():
        for kind in MODULES:
            args = make_inputs(kind, opts.B, opts.T, opts.H, opts.K, opts.V)
            chunk_sizes = opts.kda_chunk_sizes if kind == "kda" else [64]
            rows += bench(kind, args, chunk_sizes, opts.repeats)

    print(f"B={opts.B} T={opts.T} H={opts.H} K={opts.K} V={opts.V}, float32, {opts.threads} thread(s), "
          f"median of {opts.repeats}")
    print(f"{'op':<18}{'C':>5}{'recurrent ms':>14}{'chunked ms':>12}{'speed-up':>10}"
          f"{'cpu speed-up':>14}{'max |diff|':>12}")
    for row in rows:
        print(f"{row['op']:<18}{row['chunk_size']:>5}{row['recurrent_ms']:>14.1f}{row['chunked_ms']:>12.1f}"
              f"{row['speedup_wall']:>9.1f}x{row['speedup_cpu']:>13.1f}x{row['max_abs_diff']:>12.2e}")
    print("times: median wall clock; speed-up: median over rounds of recurrent/chunked measured back to back;"
          " cpu: the same with this process's CPU time")

    report = {
        "shape": {"B": opts.B, "T": opts.T, "H": opts.H, "K": opts.K, "V": opts.V},
        "dtype": "float32", "threads": opts.threads, "repeats": opts.repeats,
        "torch": torch.__version__, "machine": platform.machine(), "processor": platform.processor(),
        "rows": rows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
