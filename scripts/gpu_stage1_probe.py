"""Stage 1 of the chunked forward (the chunk-local gate sums, kernels/chunk_fwd.py: _chunk_cumsum) in four forms,
GPU ms and exactness, on the H200 (GPU only for times; on a CPU it checks the forms under the interpreter).

    python3 scripts/gpu_stage1_probe.py      # writes $OUT/probe_cumsum.json when OUT is set

Forms: "module" = the package's kernel; "f64" = the kernel before b366cd8 (a float64 tl.cumsum in tiles of BS
rows); "df_masked" = b366cd8's (float32 pairs scanned with _two_sum, the carry picked out of the scan's last row
by masked sums, which Triton 3.6.0 could not compile for bf16 gates); "f32floor" = a plain float32 scan of the
chunk writing two float32 tensors, not exact: the memory floor of a two-tensor stage 1. KDA's gates
-5 sigmoid(randn - 2) with a -1e4, a -1e6 and a -inf gate; max_abs_err_vs_f64 = largest |hi + lo - float64 sum|.
Results of 2026-12-02: figures/bench_h200_2026-12-02g.json, stage1_probe. Not part of any test.
"""
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from k3lite import kernels  # noqa: E402,F401  (first: it sets up Triton)
from k3lite.kernels import chunk_fwd as cf  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _cumsum_df(g_ptr, hi_ptr, lo_ptr, ok_ptr, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
               BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    base = cf._head_base(i_b, i_h, T, H, K)
    c_hi = tl.zeros([BK], dtype=tl.float32)
    c_lo = tl.zeros([BK], dtype=tl.float32)
    bad = tl.zeros([BS, BK], dtype=tl.int32)
    for i_s in tl.static_range(BT // BS):
        row0 = i_t * BT + i_s * BS
        p, m = cf._tile(g_ptr + base, row0, i_k * BK, T, K, H * K, BS, BK)
        gate = tl.load(p, mask=m, other=0.0)
        if CHECK:
            bad += (~(gate <= 0)).to(tl.int32)
        x = tl.maximum(gate.to(tl.float32), cf.GATE_FLOOR)
        hi, lo = tl.associative_scan((x, tl.zeros_like(x)), 0, cf._two_sum)
        hi, lo = cf._two_sum(c_hi[None, :], c_lo[None, :], hi, lo)
        last = tl.arange(0, BS)[:, None] == BS - 1
        c_hi = tl.sum(tl.where(last, hi, 0.0), 0)
        c_lo = tl.sum(tl.where(last, lo, 0.0), 0)
        cf._store(hi_ptr + base, hi, row0, i_k * BK, T, K, H * K, BS, BK)
        cf._store(lo_ptr + base, lo, row0, i_k * BK, T, K, H * K, BS, BK)
    if CHECK:
        if tl.sum(bad) > 0:
            tl.store(ok_ptr, 0)

@triton.jit
def _cumsum_f64(g_ptr, hi_ptr, lo_ptr, ok_ptr, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # the kernel before b366cd8: float64 running sum in tiles of BS rows
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    base = cf._head_base(i_b, i_h, T, H, K)
    carry = tl.zeros([BK], dtype=tl.float64)
    bad = tl.zeros([BS, BK], dtype=tl.int32)
    for i_s in tl.static_range(BT // BS):
        row0 = i_t * BT + i_s * BS
        p, m = cf._tile(g_ptr + base, row0, i_k * BK, T, K, H * K, BS, BK)
        gate = tl.load(p, mask=m, other=0.0)
        if CHECK:
            bad += (~(gate <= 0)).to(tl.int32)
        floored = tl.maximum(gate.to(tl.float64), cf.GATE_FLOOR)
        acc = tl.cumsum(floored, axis=0) + carry[None, :]
        carry += tl.sum(floored, axis=0)
        hi = acc.to(tl.float32)
        cf._store(hi_ptr + base, hi, row0, i_k * BK, T, K, H * K, BS, BK)
        cf._store(lo_ptr + base, (acc - hi.to(tl.float64)).to(tl.float32), row0, i_k * BK, T, K, H * K, BS, BK)
    if CHECK:
        if tl.sum(bad) > 0:
            tl.store(ok_ptr, 0)

@triton.jit
def _cumsum_f32(g_ptr, hi_ptr, lo_ptr, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr, TWO: tl.constexpr):
    # floor: fla-like single float32 scan of the whole chunk
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    base = cf._head_base(i_b, i_h, T, H, K)
    p, m = cf._tile(g_ptr + base, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    x = tl.maximum(tl.load(p, mask=m, other=0.0), cf.GATE_FLOOR)
    acc = tl.cumsum(x, axis=0)
    cf._store(hi_ptr + base, acc, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    if TWO:
        cf._store(lo_ptr + base, x, i_t * BT, i_k * BK, T, K, H * K, BT, BK)

def run_f64(g, BK, BS, w, s, ok):
    B, T, H, K = g.shape
    G = torch.empty_like(g); L = torch.empty_like(g)
    grid = (triton.cdiv(K, BK), triton.cdiv(T, 64), B * H)
    kw = dict(num_warps=w) if s is None else dict(num_warps=w, num_stages=s)
    return lambda: _cumsum_f64[grid](g, G, L, ok, T, H, K, 64, BK, BS, True, **kw), (G, L)

def run_module(g, BK, BS, w, s, ok):
    B, T, H, K = g.shape
    G = torch.empty_like(g); L = torch.empty_like(g)
    grid = (triton.cdiv(K, BK), triton.cdiv(T, 64), B * H)
    kw = dict(num_warps=w) if s is None else dict(num_warps=w, num_stages=s)
    return lambda: cf._chunk_cumsum[grid](g, G, L, ok, T, H, K, 64, BK, BS, True, **kw), (G, L)

def run_df(g, BK, BS, w, s, ok):
    B, T, H, K = g.shape
    G = torch.empty_like(g); L = torch.empty_like(g)
    grid = (triton.cdiv(K, BK), triton.cdiv(T, 64), B * H)
    kw = dict(num_warps=w) if s is None else dict(num_warps=w, num_stages=s)
    return lambda: _cumsum_df[grid](g, G, L, ok, T, H, K, 64, BK, BS, True, **kw), (G, L)

def run_f32(g, BK, two, w):
    B, T, H, K = g.shape
    G = torch.empty_like(g); L = torch.empty_like(g)
    grid = (triton.cdiv(K, BK), triton.cdiv(T, 64), B * H)
    return lambda: _cumsum_f32[grid](g, G, L, T, H, K, 64, BK, two, num_warps=w), (G, L)

def exact_err(g, G, L):
    B, T, H, K = g.shape
    NT = triton.cdiv(T, 64)
    gp = torch.nn.functional.pad(g.double().clamp_min(-1024), (0, 0, 0, 0, 0, NT * 64 - T)).view(B, NT, 64, H, K)
    ref = gp.cumsum(2).view(B, NT * 64, H, K)[:, :T]
    return ((G.double() + L.double()) - ref).abs().max().item()

def main():
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = [(2, 8192, 16), (1, 32768, 16)] if dev == "cuda" else [(1, 200, 2)]
    out = {}
    for (B, T, H) in shapes:
        K = 128
        gen = torch.Generator(device=dev).manual_seed(0)
        g = (-5.0 * torch.sigmoid(torch.randn(B, T, H, K, device=dev, generator=gen) - 2.0)).float()
        # extreme gates too
        g[:, 3, :, :5] = -1e4; g[:, 70, :, 5:9] = -1e6; g[:, 130, :, 9] = float("-inf")
        ok = torch.ones((), dtype=torch.int32, device=dev)
        cands = []
        for BK, BS, w in ((128, 8, 1), (64, 8, 1), (128, 4, 1), (128, 16, 2)):
            cands.append((f"module BK{BK} BS{BS} w{w}", run_module, (BK, BS, w, None, ok)))
        for BK, BS, w in ((128, 8, 1), (32, 16, 1)):
            cands.append((f"f64 BK{BK} BS{BS} w{w}", run_f64, (BK, BS, w, None, ok)))
            cands.append((f"df_masked BK{BK} BS{BS} w{w}", run_df, (BK, BS, w, None, ok)))
        for BK in (128, 64):
            cands.append((f"f32floor BK{BK} twoTrue w1", run_f32, (BK, True, 1)))
        cands = cands * (2 if dev == "cuda" else 1)   # each twice: the spread is the noise
        if dev == "cpu":
            cands = [c for c in cands if "BK128 BS8" in c[0]]
        res = {}
        for name, fn, args in cands:
            try:
                f, (G, L) = fn(g, *args)
                f()
                err = exact_err(g, G, L) if not name.startswith("f32") else None
                ms = triton.testing.do_bench(f, warmup=10, rep=50) if dev == "cuda" else None
                res.setdefault(name, []).append({"ms": ms, "max_abs_err_vs_f64": err})
                print(f"{(B, T, H)} {name:28s} {ms if ms is None else round(ms, 4)} err {err}", flush=True)
            except Exception as e:  # noqa
                print(name, "FAILED", repr(e)[:200], flush=True)
        out[str((B, T, H))] = res
    if os.environ.get("OUT"):
        json.dump(out, open(os.path.join(os.environ["OUT"], "probe_cumsum.json"), "w"), indent=1)

main()
