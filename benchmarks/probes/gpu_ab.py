"""Two forms of the package on one GPU, in one call: the A/B behind benchmarks/archive/bench_h200_2026-12-04b.json.

Calls on two freshly started machines differ by a few hundredths of a millisecond per kernel; two forms timed on one
machine, one after the other, do not. Put a copy of the package to compare against beside this one (any folder
outside the package, e.g. `git archive 887e6db k3lite | tar -x -C scratch/base`; `scratch/` is git-ignored, so carry
it to the device) and run this script once per form, the form's folder first on PYTHONPATH:

    PYTHONPATH=scratch/base:$PYTHONPATH python3 benchmarks/probes/gpu_ab.py base  $OUT/base.json
    PYTHONPATH=$PWD:$PYTHONPATH         python3 benchmarks/probes/gpu_ab.py new   $OUT/new.json --fla --stage1
    PYTHONPATH=scratch/base:$PYTHONPATH python3 benchmarks/probes/gpu_ab.py base2 $OUT/base2.json   # base again: drift

(The script's own folder, not the current one, heads sys.path, so PYTHONPATH decides which package is imported; the
file each run imported is written beside its numbers.) Per form: KDA, bf16, H = 16, D = 128 at (2, 8192), (1, 32768)
and (8, 2048), forward and forward+backward through the public API (k3lite.ops.kda.chunked(backend="triton"),
triton.testing.do_bench median, ms) and per kernel (torch.profiler, 5 calls), and the bf16 error against the float32
pipeline (benchmarks/probes/gpu_profile.py: accuracy). --fla times the reference's forward before and after;
--stage1 times stage 1 (chunk_fwd.gate_sums) alone with and without its value check; --diagonal-sweep times KDA's
_diagonal_blocks under other slice widths and warp counts. GPU only; not part of any test.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import torch

import k3lite
from benchmarks import bench
from k3lite.kernels import chunk_fwd

SHAPES = [(2, 8192, 16), (1, 32768, 16), (8, 2048, 16)]


median_ms = bench.timer(gpu=True)   # the benchmark's own timing: do_bench median after a first call


def fla_forward(fla, results, tag):
    for B, T, H in SHAPES:
        t = bench.mixer_inputs("kda", B, T, H, 128, torch.bfloat16, "cuda", False)
        ms = median_ms(functools.partial(bench.fla_call, fla["kda"], "kda", t))
        results.setdefault("fla_fwd", {}).setdefault(str((B, T, H)), {})[tag] = ms
        print(f"fla {tag} {(B, T, H)}: {ms:.4f} ms", flush=True)


def package_rows(label, results, save):
    for B, T, H in SHAPES:
        for mode in ("fwd", "fwd+bwd"):
            t = bench.mixer_inputs("kda", B, T, H, 128, torch.bfloat16, "cuda", mode == "fwd+bwd")
            forward = functools.partial(bench.k3lite_call, "kda", t, "triton")
            fn = bench.with_backward(forward, t) if mode == "fwd+bwd" else forward
            api_ms, kernels = median_ms(fn), bench.kernel_times(fn, iters=5)
            results.setdefault("rows", {})[f"{(B, T, H)} {mode}"] = {"api_ms": api_ms, "kernels": kernels}
            largest = sorted(kernels.items(), key=lambda kv: -kv[1])
            print(f"{label} {(B, T, H)} {mode}: API {api_ms:.4f} ms | "
                  + " ".join(f"{name[:20]}={ms:.3f}" for name, ms in largest), flush=True)
            save()


def stage1_alone(results):
    g = (-5.0 * torch.sigmoid(torch.randn(2, 8192, 16, 128, device="cuda") - 2.0)).float()
    flag = torch.ones((), dtype=torch.int32, device="cuda")
    for check in (False, True):
        for lo_from in (chunk_fwd.LO_FROM_HALF, 0.0):
            ms = median_ms(functools.partial(chunk_fwd.gate_sums, g, "kda", flag if check else None, lo_from=lo_from))
            results.setdefault("stage1", {})[f"check={check} lo_from={lo_from}"] = ms
            print(f"stage 1 alone, check={check}, lo_from={lo_from}: {ms:.4f} ms", flush=True)


DIAGONAL_SETTINGS = [(width, warps) for width in (32, 64, 128) for warps in (1, 2, 4)]


def diagonal_sweep(results):
    # _diagonal_blocks (one program per sub-chunk) under other channel-slice widths and warp counts, from the forward's
    # kernel profile. The tenth run's call 2 also had programs of 32 and 64 rows: a form of the kernel since dropped
    # (benchmarks/archive/bench_h200_2026-12-04c.json, diagonal_forms).
    for B, T, H in SHAPES[:1]:
        t = bench.mixer_inputs("kda", B, T, H, 128, torch.bfloat16, "cuda", False)
        for width, warps in DIAGONAL_SETTINGS:
            chunk_fwd.DIAGONAL_BK, chunk_fwd.LAUNCH["diagonal"] = width, dict(num_warps=warps)
            call = functools.partial(bench.k3lite_call, "kda", t, "triton")
            ms = bench.kernel_times(call, iters=5)["_diagonal_blocks"]
            results.setdefault("diagonal_sweep", {})[f"{(B, T, H)} BK={width} warps={warps}"] = ms
            print(f"_diagonal_blocks {(B, T, H)} BK={width} warps={warps}: {ms:.4f} ms", flush=True)


def main():
    label, out = sys.argv[1], Path(sys.argv[2])
    # Relative to the current folder (the repository root): which copy was imported, without this machine's paths.
    results = {"label": label, "file": os.path.relpath(k3lite.__file__)}

    def save():
        out.write_text(json.dumps(results, indent=1))

    print(label, k3lite.__file__, flush=True)
    fla = bench.load_fla() if "--fla" in sys.argv else {}
    if fla:
        fla_forward(fla, results, "before")
    package_rows(label, results, save)
    if fla:
        fla_forward(fla, results, "after")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_profile

    results["accuracy"] = gpu_profile.accuracy("kda", (2, 2048, 16))
    print("bf16 against the float32 pipeline (rel. RMS):", results["accuracy"], flush=True)
    if "--stage1" in sys.argv:
        stage1_alone(results)
    if "--diagonal-sweep" in sys.argv:
        save()
        diagonal_sweep(results)
    save()


if __name__ == "__main__":
    main()
