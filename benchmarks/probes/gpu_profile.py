"""Where the time goes, kernel by kernel, and which launch settings each stage likes (GPU only).

    python benchmarks/probes/gpu_profile.py --out DIR [--kinds kda,gated_delta_rule] [--shape 2,8192,16] [--sweep]

1. GPU time per kernel (torch.profiler) of one call of k3lite's Triton pipeline and of the reference
   library (flash-linear-attention, when importable), forward and forward+backward, bf16, D = 128.
2. Section variants: the forward under other design settings of kernels/chunk_fwd.py (VARIANTS), per-kernel
   times, and each setting's bf16 error against the float32 pipeline.
3. With --sweep: every stage of the forward and backward under a few (num_warps, num_stages) settings
   and value-block widths (the LAUNCH and BLOCK_V dicts of kernels/chunk_fwd.py and chunk_bwd_triton.py),
   each kernel's time read off the profiler, and the best setting per stage.
4. Fused SiTU: the fast and the exact arithmetic path, a few block sizes and warp counts.
Prints tables and writes DIR/profile.json. Used to choose the numbers in LAUNCH; not part of any test.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository root: benchmarks.bench

from benchmarks import bench  # imports k3lite.kernels first, which sets up Triton
from k3lite import kernels
from k3lite.kernels import chunk_bwd_triton, chunk_fwd, situ

ITERS = 5
SETTINGS = [(4, 1), (4, 2), (4, 3), (8, 1), (8, 2), (8, 3)]


def show(title, times, top=14):
    total = sum(times.values())
    print(f"\n{title}: total {total:.3f} ms")
    for name, ms in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print(f"   {ms:8.3f} ms  {100 * ms / total:5.1f}%  {name}")


def call(kind, shape, mode, impl, fla):
    B, T, H = shape
    t = bench.mixer_inputs(kind, B, T, H, 128, torch.bfloat16, "cuda", mode == "fwd+bwd")
    if impl == "fla":
        fwd = lambda: bench.fla_call(fla[kind], kind, t)  # noqa: E731
    else:
        fwd = lambda: bench.kernel_call(kind, t)  # noqa: E731
    return bench.with_backward(fwd, t) if mode == "fwd+bwd" else fwd


def set_all(num_warps, num_stages, stages=None):
    """Give every stage (or those named in stages, as 'fwd.intra' / 'bwd.wy') one launch setting."""
    for prefix, table in (("fwd", chunk_fwd.LAUNCH), ("bwd", chunk_bwd_triton.LAUNCH)):
        for name in table:
            if stages is None or f"{prefix}.{name}" in stages:
                table[name] = dict(num_warps=num_warps, num_stages=num_stages)


STAGE_KERNELS = {
    "fwd.cumsum": ("_chunk_cumsum",), "fwd.intra": ("_intra_chunk_dense",),
    "fwd.diagonal": ("_diagonal_blocks",), "fwd.offdiagonal_solve": ("_offdiagonal_solve",),
    # KDA's _wy_factors launches with "wy_channel", the other kinds' with "wy": sweep the one of the kind.
    "fwd.solve": ("_solve_unit_lower",), "fwd.wy": ("_wy_factors",), "fwd.wy_channel": ("_wy_factors",),
    "fwd.state": ("_state_pass",),
    "fwd.output": ("_chunk_output",), "bwd.local_output": ("_bwd_local_output",),
    "bwd.state_pass_halves": ("_bwd_state_pass_halves",),
    "bwd.state_grads": ("_bwd_state_grads",),
    "bwd.wy": ("_bwd_wy",), "bwd.intra": ("_bwd_intra",), "bwd.intra_dense": ("_bwd_intra_dense",),
    "bwd.gate_cumsum": ("_bwd_gate_cumsum",),
}


def sweep(kind, shape, results, stages=None, widths=True):
    """One stage at a time: its kernel under each setting while every other stage keeps its default, so a
    setting that does not fit (shared memory) costs only that one measurement."""
    saved = ({k: dict(v) for k, v in chunk_fwd.LAUNCH.items()},
             {k: dict(v) for k, v in chunk_bwd_triton.LAUNCH.items()})
    per_kernel = {}
    for stage in sorted(stages or STAGE_KERNELS):
        for warps, n_stages in SETTINGS:
            set_all(warps, n_stages, {stage})
            try:
                # A forward stage is timed in a forward-only call: the backward launches _wy_factors again.
                mode = "fwd" if stage.startswith("fwd.") else "fwd+bwd"
                times = bench.kernel_times(call(kind, shape, mode, "k3lite", None), iters=3)
            except Exception as err:  # e.g. out of shared memory for this setting
                print(f"  {stage} w{warps} s{n_stages}: failed {repr(err)[:100]}", flush=True)
                times = {}
            finally:
                chunk_fwd.LAUNCH.update({k: dict(v) for k, v in saved[0].items()})
                chunk_bwd_triton.LAUNCH.update({k: dict(v) for k, v in saved[1].items()})
            for name, ms in times.items():
                if name in STAGE_KERNELS.get(stage, ()):
                    per_kernel.setdefault(name, {})[f"w{warps}s{n_stages}"] = ms
            print(f"  {stage} w{warps} s{n_stages}: total {sum(times.values()):.3f} ms", flush=True)
    width_cases = ((chunk_fwd.BLOCK_V, "output", (64, 128)), (chunk_fwd.BLOCK_V, "state", (16, 32, 64)),
                   (chunk_bwd_triton.BLOCK_V, "state_halves", (16, 32, 64))) if widths else ()
    for table, key, widths in width_cases:
        old = table[key]
        for width in widths:
            table[key] = width
            times = bench.kernel_times(call(kind, shape, "fwd+bwd", "k3lite", None), iters=3)
            tag = f"{'bwd_' if table is chunk_bwd_triton.BLOCK_V else ''}{key}_BV{width}"
            for name, ms in times.items():
                per_kernel.setdefault(name, {})[tag] = ms
        table[key] = old
    print(f"\nsweep {kind} {shape}: best setting per kernel (default w4, num_stages 3)")
    best = {}
    for name, by_setting in sorted(per_kernel.items(), key=lambda kv: -max(kv[1].values())):
        choice = min(by_setting, key=by_setting.get)
        best[name] = choice
        cells = " ".join(f"{s}={ms:.3f}" for s, ms in by_setting.items())
        print(f"  {name[:40]:40} best {choice:>12} {by_setting[choice]:.3f} | {cells}")
    results.setdefault("sweep", {})[f"{kind} {shape}"] = {"per_kernel": per_kernel, "best": best}


# Forward design variants: module settings of kernels/chunk_fwd.py, each measured against the defaults.
VARIANTS = {
    "defaults": {},
    "cumsum_rows16": {"CUMSUM_ROWS": 16},
    "cumsum_key_tile64": {"CUMSUM_KEY_TILE": 64},
    "cumsum_key_tile32": {"CUMSUM_KEY_TILE": 32},
    "solve_ieee": {"BF16_SOLVE_PRECISION": "ieee"},
    "a_in_float32": {"A_STORAGE": "float32"},
    "diagonal_slices64": {"DIAGONAL_BK": 64},
    "diagonal_slices32": {"DIAGONAL_BK": 32},
    "offdiagonal_bk64": {"OFFDIAGONAL_BK": 64},
    "offdiagonal_bk32": {"OFFDIAGONAL_BK": 32},
    # What the second launch of KDA's G_lo readers costs (see chunk_fwd.lo_launches): valid only where no chunk holds
    # G_lo, as in the benchmark's gates (their accuracy row shows it).
    "single_lo_launch": {"lo_launches": lambda lo_from: (False,)},
}


def rel_rms(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def accuracy(kind, shape):
    """Relative RMS error of the bf16 pipeline's output, final state and input gradients against the float32
    pipeline on the same (bf16-rounded) inputs; the float32 pipeline is itself tested against the recurrence."""
    B, T, H = shape
    t = bench.mixer_inputs(kind, B, T, H, 128, torch.bfloat16, "cuda", True)
    names = [n for n, x in t.items() if x is not None]
    results = {}
    for label, tensors in (("bf16", t), ("f32", {n: (x.detach().float().requires_grad_() if x is not None else None)
                                                   for n, x in t.items()})):
        o, state = kernels.run_chunked(kind, tensors["q"], tensors["k"], tensors["v"], tensors["g"], tensors["beta"],
                                       scale=128 ** -0.5)
        d_o = torch.randn(o.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
        grads = torch.autograd.grad((o.float() * d_o).sum(), [tensors[n] for n in names])
        results[label] = {"o": o, "state": state, **{f"d{n}": g for n, g in zip(names, grads)}}
    return {name: rel_rms(results["bf16"][name], ref) for name, ref in results["f32"].items()}


def variants(kinds, shape, results, names):
    saved = {attr: getattr(chunk_fwd, attr) for v in VARIANTS.values() for attr in v}
    for kind in kinds:
        for name in names:
            chunk_fwd.__dict__.update(saved)
            chunk_fwd.__dict__.update(VARIANTS[name])
            row = {}
            try:
                row["fwd"] = bench.kernel_times(call(kind, shape, "fwd", "k3lite", None), ITERS)
                row["fwd_total_ms"] = sum(row["fwd"].values())
                row["fwd+bwd_total_ms"] = sum(bench.kernel_times(call(kind, shape, "fwd+bwd", "k3lite", None),
                                                                 3).values())
                row["rel_rms_vs_float32_pipeline"] = accuracy(kind, shape)
            except Exception as err:
                row["error"] = repr(err)[:300]
            results.setdefault("variants", {}).setdefault(f"{kind} {shape}", {})[name] = row
            errors = " ".join(f"{n}={e:.1e}" for n, e in row.get("rel_rms_vs_float32_pipeline", {}).items())
            by_time = sorted(row.get("fwd", {}).items(), key=lambda kv: -kv[1])
            kernels_ms = " ".join(f"{n}={ms:.3f}" for n, ms in by_time)
            print(f"{kind} {name:18} fwd {row.get('fwd_total_ms', float('nan')):.3f} ms, fwd+bwd "
                  f"{row.get('fwd+bwd_total_ms', float('nan')):.3f} ms | {kernels_ms} | {errors} "
                  f"{row.get('error', '')}", flush=True)
    chunk_fwd.__dict__.update(saved)


def situ_variants(results):
    import triton.testing

    rows, cols = 8192, 3072
    gen = torch.Generator(device="cuda").manual_seed(2)
    out = {}
    for mode in ("fwd", "fwd+bwd"):
        grad = mode == "fwd+bwd"
        gate = (3 * torch.randn(rows, cols, device="cuda", generator=gen)).bfloat16().requires_grad_(grad)
        up = (3 * torch.randn(rows, cols, device="cuda", generator=gen)).bfloat16().requires_grad_(grad)
        fns = {}
        for fast in (True, False):
            for block, warps in ((1024, 4), (2048, 8), (4096, 8), (2048, 4), (4096, 16)):
                def fn(fast=fast, block=block, warps=warps, gate=gate, up=up):
                    situ.FAST_MATH, situ.BLOCK, situ.WARPS = fast, block, warps
                    return situ.situ_glu(gate, up)
                fns[f"situ fast={int(fast)} B{block} w{warps}"] = fn
        for block, warps in ((1024, 4), (2048, 8), (4096, 8)):
            def fn(block=block, warps=warps, gate=gate, up=up):
                situ.BLOCK, situ.WARPS = block, warps
                return situ.silu_and_mul(gate, up)
            fns[f"silu_mul B{block} w{warps}"] = fn
        fns["situ eager"] = functools.partial(bench.eager_situ, gate, up)
        for name, fn in fns.items():
            run = bench.with_backward(fn, {"g": gate, "u": up}) if grad else fn
            out[f"{mode} {name}"] = triton.testing.do_bench(run, warmup=25, rep=100, return_mode="median")
            print(f"  {mode:>7} {name:28} {out[f'{mode} {name}']:.4f} ms", flush=True)
    situ.FAST_MATH, situ.BLOCK, situ.WARPS = True, 2048, 8
    results["situ"] = out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kinds", default="kda,gated_delta_rule,delta_rule,linear_attention")
    parser.add_argument("--shape", default="2,8192,16")
    parser.add_argument("--sweep", default="kda", help="kinds to sweep launch settings for ('' for none)")
    parser.add_argument("--sections", default="situ,profile,sweep")
    parser.add_argument("--impls", default="k3lite,fla")
    parser.add_argument("--sweep-stages", default="", help="e.g. fwd.intra,bwd.wy (default: every stage)")
    parser.add_argument("--settings", default="", help="e.g. 4x2,8x1 (num_warps x num_stages)")
    parser.add_argument("--no-widths", action="store_true", help="sweep no value-block widths")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="section variants: which of VARIANTS")
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.settings:
        SETTINGS[:] = [tuple(int(n) for n in item.split("x")) for item in args.settings.split(",")]
    fla = bench.load_fla()
    results = {"shape": shape, "profile": {}}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "profile.json"
    sections = args.sections.split(",")
    if "situ" in sections:
        situ_variants(results)
        path.write_text(json.dumps(results, indent=1))
    if "profile" in sections:
        for kind in args.kinds.split(","):
            for mode in ("fwd", "fwd+bwd"):
                for impl in args.impls.split(","):
                    if impl == "fla" and kind not in fla:
                        continue
                    try:
                        times = bench.kernel_times(call(kind, shape, mode, impl, fla), ITERS)
                    except Exception as err:  # report and go on with the next case
                        print(f"\n{kind} {mode} {impl}: FAILED {repr(err)[:300]}", flush=True)
                        continue
                    results["profile"][f"{kind} {mode} {impl}"] = times
                    show(f"{kind} {shape} {mode} {impl}", times)
                    path.write_text(json.dumps(results, indent=1))
    if "variants" in sections:
        variants(args.kinds.split(","), shape, results, args.variants.split(","))
        path.write_text(json.dumps(results, indent=1))
    if "sweep" in sections:
        for kind in filter(None, args.sweep.split(",")):
            stages = set(args.sweep_stages.split(",")) if args.sweep_stages else None
            sweep(kind, shape, results, stages, widths=not args.no_widths)
            path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
