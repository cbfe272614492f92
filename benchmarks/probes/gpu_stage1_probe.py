"""Stage 1 of the chunked forward (the chunk-local gate sums, kernels/chunk_fwd.py: _chunk_cumsum) in four forms,
GPU ms and exactness, on the H200 (GPU only for times; on a CPU it checks the forms under the interpreter).

    python3 benchmarks/probes/gpu_stage1_probe.py      # writes $OUT/probe_cumsum.json when OUT is set

Forms: "module" = the package's kernel; "f64" = the kernel before b366cd8 (a float64 tl.cumsum in tiles of BS
rows); "df_masked" = b366cd8's (float32 pairs scanned with _two_sum, the carry picked out of the scan's last row
by masked sums, which Triton 3.6.0 could not compile for bf16 gates); "f32floor" = a plain float32 scan of the
chunk writing two float32 tensors, not exact: the memory floor of a two-tensor stage 1. KDA's gates
-5 sigmoid(randn - 2) with a -1e4, a -1e6 and a -inf gate; max_abs_err_vs_f64 = largest |hi + lo - float64 sum|.
Results of 2026-12-02: benchmarks/archive/bench_h200_2026-12-02g.json, stage1_probe (measured with this script before it
was tidied: the same kernels and settings, their shared tile load since moved into one helper). Not part of any test;
exits 1 if an exact form is not equal to the float64 sums.
"""
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository root
# k3lite.kernels first: on a CPU it switches on Triton's interpreter, which must happen before triton is imported.
from k3lite import kernels  # noqa: F401
from k3lite.kernels import chunk_fwd as cf

# isort: split
import triton
import triton.language as tl

CHUNK = 64           # rows per chunk, as in the package (chunk_fwd.CHUNK)
FLOOR = -1024.0      # the package's GATE_FLOOR, for the float64 reference


@triton.jit
def _checked_tile(g_ptr, base, row0, col0, T, H: tl.constexpr, K: tl.constexpr, BS: tl.constexpr,
                  BK: tl.constexpr, bad, CHECK: tl.constexpr):
    # One [BS, BK] tile of gates, and the count of gates that are not <= 0, as every form of stage 1 reads them.
    p, m = cf._tile(g_ptr + base, row0, col0, T, K, H * K, BS, BK)
    gate = tl.load(p, mask=m, other=0.0)
    if CHECK:
        bad += (~(gate <= 0)).to(tl.int32)
    return gate, bad


@triton.jit
def _cumsum_pairs_masked_carry(g_ptr, hi_ptr, lo_ptr, ok_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr,
                               BT: tl.constexpr, BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # b366cd8's form: the carry picked out of the scan's last row by masked sums (Triton 3.6.0 could not compile
    # this for bf16 gates; the package now reduces each tile to one pair instead).
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = cf._head_base(i_bh // H, i_bh % H, T, H, K)
    carry_hi = tl.zeros([BK], dtype=tl.float32)
    carry_lo = tl.zeros([BK], dtype=tl.float32)
    bad = tl.zeros([BS, BK], dtype=tl.int32)
    for i_s in tl.static_range(BT // BS):
        row0 = i_t * BT + i_s * BS
        gate, bad = _checked_tile(g_ptr, base, row0, i_k * BK, T, H, K, BS, BK, bad, CHECK)
        floored = tl.maximum(gate.to(tl.float32), cf.GATE_FLOOR)
        hi, lo = tl.associative_scan((floored, tl.zeros_like(floored)), 0, cf._two_sum)
        hi, lo = cf._two_sum(carry_hi[None, :], carry_lo[None, :], hi, lo)
        last = tl.arange(0, BS)[:, None] == BS - 1
        carry_hi = tl.sum(tl.where(last, hi, 0.0), 0)
        carry_lo = tl.sum(tl.where(last, lo, 0.0), 0)
        cf._store(hi_ptr + base, hi, row0, i_k * BK, T, K, H * K, BS, BK)
        cf._store(lo_ptr + base, lo, row0, i_k * BK, T, K, H * K, BS, BK)
    if CHECK:
        if tl.sum(bad) > 0:
            tl.store(ok_ptr, 0)


@triton.jit
def _cumsum_float64(g_ptr, hi_ptr, lo_ptr, ok_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                    BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # The form before b366cd8: a float64 running sum in tiles of BS rows, split into two float32 parts at the store.
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = cf._head_base(i_bh // H, i_bh % H, T, H, K)
    carry = tl.zeros([BK], dtype=tl.float64)
    bad = tl.zeros([BS, BK], dtype=tl.int32)
    for i_s in tl.static_range(BT // BS):
        row0 = i_t * BT + i_s * BS
        gate, bad = _checked_tile(g_ptr, base, row0, i_k * BK, T, H, K, BS, BK, bad, CHECK)
        floored = tl.maximum(gate.to(tl.float64), cf.GATE_FLOOR)
        total = tl.cumsum(floored, axis=0) + carry[None, :]
        carry += tl.sum(floored, axis=0)
        hi = total.to(tl.float32)
        cf._store(hi_ptr + base, hi, row0, i_k * BK, T, K, H * K, BS, BK)
        cf._store(lo_ptr + base, (total - hi.to(tl.float64)).to(tl.float32), row0, i_k * BK, T, K, H * K, BS, BK)
    if CHECK:
        if tl.sum(bad) > 0:
            tl.store(ok_ptr, 0)


@triton.jit
def _cumsum_float32_floor(g_ptr, hi_ptr, lo_ptr, ok_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                          BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # Not exact: one float32 scan of the whole chunk (fla's way), writing two float32 tensors like the others, so
    # its time is the memory floor of a two-tensor stage 1. BS, CHECK, ok_ptr and lo_from only keep the launch the same.
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = cf._head_base(i_bh // H, i_bh % H, T, H, K)
    p, m = cf._tile(g_ptr + base, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    floored = tl.maximum(tl.load(p, mask=m, other=0.0), cf.GATE_FLOOR)
    cf._store(hi_ptr + base, tl.cumsum(floored, axis=0), i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    cf._store(lo_ptr + base, floored, i_t * BT, i_k * BK, T, K, H * K, BT, BK)


@triton.jit
def _cumsum_pairs_rows(g_ptr, hi_ptr, lo_ptr, ok_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                       BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # The same float32 pairs (_two_sum), summed by walking the chunk's rows in order: one TwoSum per gate, no scan
    # and no reduction across rows or threads. BS only keeps the launch the same.
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = cf._head_base(i_bh // H, i_bh % H, T, H, K) + i_k * BK
    hi = tl.zeros([BK], dtype=tl.float32)
    lo = tl.zeros([BK], dtype=tl.float32)
    worst = tl.full([BK], -1.0, dtype=tl.float32)
    for r in tl.static_range(BT):
        p, m = cf._row(g_ptr + base, i_t * BT + r, T, K - i_k * BK, H * K, BK)
        gate = tl.load(p, mask=m, other=0.0).to(tl.float32)
        if CHECK:
            worst = tl.maximum(worst, gate, propagate_nan=tl.PropagateNan.ALL)
        hi, lo = cf._two_sum(hi, lo, tl.maximum(gate, cf.GATE_FLOOR), 0.0)
        offset = (i_t * BT + r) * H * K + tl.arange(0, BK)
        tl.store(hi_ptr + base + offset, hi, mask=m)
        tl.store(lo_ptr + base + offset, lo, mask=m & cf._lo_kept(hi, lo_from))
    if CHECK:
        if tl.sum((~(worst <= 0)).to(tl.int32)) > 0:
            tl.store(ok_ptr, 0)


# Every form takes the package's stage 1 arguments, so one launch runs each; lo_from is used by the package's alone.
FORMS = {"module": cf._chunk_cumsum, "f64": _cumsum_float64, "df_masked": _cumsum_pairs_masked_carry,
         "f32floor": _cumsum_float32_floor, "rows": _cumsum_pairs_rows}
# (form, key tile, rows per step, warps, lo_from): the package's setting, its neighbours, float64 at its best tiles,
# and (2026-12-05) the row walk of pairs against the package's form where G_lo is written only from 256 (KDA in bf16)
SETTINGS = ([("module", 128, 8, 1, 0.0), ("module", 64, 8, 1, 0.0), ("module", 128, 4, 1, 0.0),
             ("module", 128, 16, 2, 0.0)]
            + [(form, bk, bs, 1, 0.0) for bk, bs in ((128, 8), (32, 16)) for form in ("f64", "df_masked")]
            + [("f32floor", bk, CHUNK, 1, 0.0) for bk in (128, 64)]
            + [("module", 128, 8, 1, cf.LO_FROM_HALF), ("rows", 128, 1, 1, 0.0)]
            + [("rows", bk, 1, warps, cf.LO_FROM_HALF)
               for bk, warps in ((128, 1), (64, 1), (32, 1), (128, 2), (128, 4))])


def launcher(form, g, block_k, rows, warps, ok, lo_from):
    """A call that runs one form of stage 1 on g [B, T, H, K], and the two tensors it writes."""
    B, T, H, K = g.shape
    hi, lo = torch.empty_like(g), torch.empty_like(g)
    grid = (triton.cdiv(K, block_k), triton.cdiv(T, CHUNK), B * H)
    # lo_from = 0.0: G_lo written everywhere (float32 inputs, chunk_fwd.gate_lo_from), as the other forms do; 256: only
    # where |G| >= 256 (KDA's bf16 and fp16 inputs), the rest of lo left as allocated.
    return (lambda: FORMS[form][grid](g, hi, lo, ok, lo_from, T, H, K, CHUNK, block_k, rows, True,
                                      num_warps=warps)), (hi, lo)


def error_vs_float64(g, hi, lo, lo_from=0.0):
    """Largest |hi + lo - the float64 chunk-local cumsum of the floored gates|; with lo_from > 0, over the entries
    where lo was written (|hi| >= lo_from), and infinite unless hi is the sum's float32 rounding everywhere."""
    B, T, H, K = g.shape
    chunks = triton.cdiv(T, CHUNK)
    padded = torch.nn.functional.pad(g.double().clamp_min(FLOOR), (0, 0, 0, 0, 0, chunks * CHUNK - T))
    reference = padded.view(B, chunks, CHUNK, H, K).cumsum(2).view(B, chunks * CHUNK, H, K)[:, :T]
    error = (hi.double() + lo.double()) - reference
    if lo_from > 0:
        if not torch.equal(hi, reference.float()):
            return float("inf")
        error = torch.where(hi.abs() >= lo_from, error, torch.zeros_like(error))
    return error.abs().max().item()


def probe_gates(B, T, H, K, device):
    """KDA's benchmark gates, -5 sigmoid(randn - 2), with a -1e4, a -1e6 and a -inf gate among them."""
    gen = torch.Generator(device=device).manual_seed(0)
    g = -5.0 * torch.sigmoid(torch.randn(B, T, H, K, device=device, generator=gen) - 2.0)
    g[:, 3, :, :5] = -1e4
    g[:, 70, :, 5:9] = -1e6
    g[:, 130, :, 9] = -float("inf")
    return g


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = [(2, 8192, 16), (1, 32768, 16)] if device == "cuda" else [(1, 200, 2)]
    settings = SETTINGS * 2 if device == "cuda" else [s for s in SETTINGS if s[1] == 128 and s[3] == 1]
    results = {}
    for B, T, H in shapes:
        g = probe_gates(B, T, H, 128, device)
        ok = torch.ones((), dtype=torch.int32, device=device)
        by_name = results.setdefault(str((B, T, H)), {})
        for form, block_k, rows, warps, lo_from in settings:       # on the GPU each twice: the spread is the noise
            # (the floor's name as stored in bench_h200_2026-12-02g.json)
            rows_label = {"f32floor": "twoTrue", "rows": "walk"}.get(form, f"BS{rows}")
            name = f"{form} BK{block_k} {rows_label} w{warps}" + (f" lo_from{lo_from:g}" if lo_from else "")
            run, (hi, lo) = launcher(form, g, block_k, rows, warps, ok, lo_from)
            run()
            error = None if form == "f32floor" else error_vs_float64(g, hi, lo, lo_from)
            ms = triton.testing.do_bench(run, warmup=10, rep=50) if device == "cuda" else None
            by_name.setdefault(name, []).append({"ms": ms, "max_abs_err_vs_f64": error})
            print(f"{(B, T, H)} {name:<26} ms {ms} error {error}", flush=True)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "probe_cumsum.json").write_text(json.dumps(results, indent=1))
    exact = all(r["max_abs_err_vs_f64"] == 0.0 for shape in results.values() for runs in shape.values()
                for r in runs if r["max_abs_err_vs_f64"] is not None)
    print("every exact form equal to the float64 sums:", exact)
    return 0 if exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
