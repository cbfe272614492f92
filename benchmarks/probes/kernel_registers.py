"""Registers per thread of the KDA kernels on Hopper, counted without a GPU.

    PYTHONPATH=$TT371 python3 benchmarks/probes/kernel_registers.py       # ptxas -v, sm90 (no GPU)
    python3 benchmarks/probes/kernel_registers.py --check                 # the candidate, under the interpreter
    PYTHONPATH=$TT371 python3 benchmarks/probes/kernel_registers.py --ptx-digest [--kernels DIR]   # same instructions?

($TT371: a folder holding Triton 3.7.1's wheel for this Python, unzipped; see benchmarks/probes/compile_sm90.py.)

The ninth run (benchmarks/archive/bench_h200_2026-12-04b.json) timed a candidate for the diagonal 16x16 blocks of Aqk
and Akk that works as the backward does (chunk_bwd_triton._diagonal_level_bwd): four levels of pairs, each through an
anchor row, the sums as tensor-core products. It needs about half the exponentials of _diagonal_rows (one token's row
per program, walking the row; the package's kernel then, kept below), yet it was two to three times slower at every
launch setting tried. (The tenth run replaced _diagonal_rows with chunk_fwd._diagonal_blocks: one anchor per sub-chunk,
one tensor-core product, and a row walk where the gates are too strong for it.) This script keeps the candidate
(_diagonal_blocks_by_levels, below; channel slices of BK, BK = 128 being the full-width form) and asks ptxas how many
registers each form needs. Default: compile both for sm90 with Triton's compiler and the ptxas it ships (no GPU needed,
as benchmarks/probes/compile_sm90.py) for bf16 inputs at H = 16, K = 128, and print registers per thread, spill bytes,
and the warps that fit on one multiprocessor by registers alone (65536 registers, at most 32 blocks and 64 warps).
--check runs the candidate under Triton's interpreter in float32 and compares its blocks with _diagonal_rows's and the
package's _diagonal_blocks; exits 1 if they differ by more than 1e-6. The same table follows for every stage of the KDA
forward and the backward's _bwd_intra at the launch settings the package uses (LAUNCH). --out FILE writes the counts as
JSON. Not part of any test.

--ptx-digest prints one digest per stage of the PTX's instructions: the debug sections, the .loc / .file lines and the
$L__tmp labels that only mark source lines are left out, so a change that moves no instruction (a helper shared, a
comment, a line shifted) gives the same digest. --kernels DIR digests the kernels in DIR instead (e.g. the
k3lite/kernels of a `git archive <commit> | tar -x -C $BASE` copy); diff the two outputs to see which stages a change
recompiled. The JSON names DIR as given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository root
REGISTERS_PER_SM, MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM = 65536, 32, 64   # Hopper (sm90)
KERNELS_LABEL = "k3lite/kernels"   # the kernels compiled, as the JSON names them (--kernels DIR as given)

sys.path.insert(0, str(ROOT))
if "--check" in sys.argv:
    from k3lite.kernels import chunk_fwd as cf  # first: on a CPU it switches on Triton's interpreter
else:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import compile_sm90  # stands in for torch: the kernels' modules load without the package

    if "--kernels" in sys.argv:
        KERNELS_LABEL = sys.argv[sys.argv.index("--kernels") + 1]
        compile_sm90.KERNELS = Path(KERNELS_LABEL).resolve()
    cf = compile_sm90.load_chunk_fwd()
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _level(b_q, b_k, b_g, b_gl, g_rows, gl_rows, n_rows, stride, n_cols, lo_from, HALF: tl.constexpr,
           BC: tl.constexpr, BK: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # The pairs (r, c) of each group of 2*HALF rows with c in its first half and r in its second, through the anchor
    # a = the last row of the first half: exp(G_r - G_c) = exp(G_r - G_a) exp(G_a - G_c), both factors <= 1.
    rows = tl.arange(0, BC)
    group = rows // (2 * HALF)
    anchor = group * (2 * HALF) + HALF - 1
    row_side = ((rows % (2 * HALF)) >= HALF)[:, None]
    cols = tl.arange(0, BK)
    m_a = (anchor[:, None] < n_rows) & (cols[None, :] < n_cols)
    g_a = tl.load(g_rows + anchor[:, None] * stride + cols[None, :], mask=m_a, other=0.0)
    l_a = tl.load(gl_rows + anchor[:, None] * stride + cols[None, :], mask=m_a & cf._lo_kept(g_a, lo_from), other=0.0)
    decay = tl.exp(-tl.abs(cf._span(b_g, b_gl, g_a, l_a)))
    k_c = tl.where(row_side, 0.0, b_k * decay)
    same_group = group[:, None] == group[None, :]
    a_qk = tl.dot(tl.where(row_side, b_q * decay, 0.0), tl.trans(k_c), input_precision=DOT_PRECISION)
    a_kk = tl.dot(tl.where(row_side, b_k * decay, 0.0), tl.trans(k_c), input_precision=DOT_PRECISION)
    return tl.where(same_group, a_qk, 0.0), tl.where(same_group, a_kk, 0.0)


@triton.jit
def _diagonal_blocks_by_levels(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, lo_from, T,
                               H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                               DOT_PRECISION: tl.constexpr):
    # The candidate: one program per (16-row sub-chunk, head), the channels in slices of BK; writes the same blocks as
    # the package's _diagonal_rows (zeros above the diagonal), from G and G_lo instead of the raw gates.
    tl.static_assert(BC == 16, "four levels of halves cover a 16-row block")
    i_s, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    base = cf._head_base(i_b, i_h, T, H, K)
    S = H * K
    row0 = i_s * BC
    rows = tl.arange(0, BC)
    a_qk = tl.zeros([BC, BC], dtype=tl.float32)
    a_kk = tl.zeros([BC, BC], dtype=tl.float32)
    same_token = tl.zeros([BC], dtype=tl.float32)
    n_rows = T - row0
    for i_k in range(0, tl.cdiv(K, BK)):
        c0 = i_k * BK
        b_q = cf._load_f32(q_ptr + base, row0, c0, T, K, S, BC, BK)
        b_k = cf._load_f32(k_ptr + base, row0, c0, T, K, S, BC, BK)
        b_g = cf._load_f32(g_ptr + base, row0, c0, T, K, S, BC, BK)
        b_gl = cf._load_lo(gl_ptr + base, b_g, row0, c0, T, K, S, lo_from, BC, BK)
        same_token += tl.sum(b_q * b_k, axis=1)
        g_rows = g_ptr + base + row0 * S + c0
        gl_rows = gl_ptr + base + row0 * S + c0
        for level in tl.static_range(4):
            l_qk, l_kk = _level(b_q, b_k, b_g, b_gl, g_rows, gl_rows, n_rows, S, K - c0, lo_from, 8 >> level, BC, BK,
                                DOT_PRECISION)
            a_qk += l_qk
            a_kk += l_kk
    a_qk += tl.where(rows[:, None] == rows[None, :], same_token[:, None], 0.0)
    b_beta = cf._load_vec_f32(beta_ptr + cf._head_base(i_b, i_h, T, H, 1), row0, T, H, BC)
    a_base = cf._head_base(i_b, i_h, T, H, BT)
    cf._store(aqk_ptr + a_base, a_qk * scale, row0, row0 % BT, T, BT, H * BT, BC, BC)
    cf._store(akk_ptr + a_base, a_kk * b_beta[:, None], row0, row0 % BT, T, BT, H * BT, BC, BC)


@triton.jit
def _diagonal_rows(q_ptr, k_ptr, g_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, T,
                   H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                   BH: tl.constexpr, BK: tl.constexpr):
    # The package's kernel for KDA's diagonal 16x16 blocks until the tenth run
    # (benchmarks/archive/bench_h200_2026-12-04c.json), kept here for the ninth run's counts; chunk_fwd._diagonal_blocks
    # replaced it. One program per (token t, group of BH heads) writes row t of its sub-chunk's block. It walks j from t
    # down to the sub-chunk's first token and carries the span sum_{j < m <= t} g_m of the raw gates, so every exponent
    # is a sum of gates <= 0, never a difference:
    #   Aqk[t, j] = scale * sum_d q_td k_jd exp(span_d),  Akk[t, j] = beta_t * (same with k_t), j < t
    # Only the pairs j <= t are computed (half the block); the rest of the row is written as zeros.
    i_bt, i_hg = tl.program_id(0), tl.program_id(1)
    i_b, t = i_bt // T, i_bt % T
    j0 = t - t % BC
    heads = i_hg * BH + tl.arange(0, BH)
    cols = tl.arange(0, BK)
    m_h = heads < H
    m = m_h[:, None] & (cols[None, :] < K)
    off = heads[:, None] * K + cols[None, :]
    row = (i_b * T + t) * H
    b_q = tl.load(q_ptr + row * K + off, mask=m, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + row * K + off, mask=m, other=0.0).to(tl.float32)
    b_beta = tl.load(beta_ptr + row + heads, mask=m_h, other=0.0).to(tl.float32)
    p_aqk = aqk_ptr + (row + heads) * BT + j0 % BT
    p_akk = akk_ptr + (row + heads) * BT + j0 % BT
    span = tl.zeros([BH, BK], dtype=tl.float32)
    for i in range(0, t - j0 + 1):
        j = t - i
        row_j = (i_b * T + j) * H * K
        b_kj = tl.load(k_ptr + row_j + off, mask=m, other=0.0).to(tl.float32) * tl.exp(span)
        tl.store(p_aqk + (j - j0), tl.sum(b_q * b_kj, axis=1) * scale, mask=m_h)
        tl.store(p_akk + (j - j0), tl.sum(b_k * b_kj, axis=1) * tl.where(j < t, b_beta, 0.0), mask=m_h)
        span += tl.maximum(tl.load(g_ptr + row_j + off, mask=m, other=0.0).to(tl.float32), cf.GATE_FLOOR)
    c = tl.arange(0, BC)
    above = m_h[:, None] & (c[None, :] > t - j0)
    zero = tl.zeros([BH, BC], dtype=tl.float32)
    tl.store(p_aqk[:, None] + c[None, :], zero, mask=above)
    tl.store(p_akk[:, None] + c[None, :], zero, mask=above)


def usage(fn, pointer_types, constants, num_warps, num_stages=None):
    """(registers per thread, spill-store bytes, spill-load bytes) of fn for sm90, from ptxas -v."""
    options = {"num_warps": num_warps, **({"num_stages": num_stages} if num_stages else {})}
    compiled = compile_sm90.compile_sm90(fn, pointer_types, constants, **options)
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    with tempfile.TemporaryDirectory() as scratch:
        ptx = Path(scratch) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        report = subprocess.run([str(ptxas), "-v", "-arch=sm_90a", str(ptx), "-o", str(Path(scratch) / "kernel.cubin")],
                                capture_output=True, text=True, check=True).stderr
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    stores, loads = (int(x) for x in re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report).groups())
    return regs, stores, loads


def resident_warps(regs, num_warps):
    """Warps of one multiprocessor by registers alone (ptxas allocates per warp in units of 256 registers)."""
    per_warp = -(-regs * 32 // 256) * 256
    blocks = min(REGISTERS_PER_SM // (per_warp * num_warps), MAX_BLOCKS_PER_SM, MAX_WARPS_PER_SM // num_warps)
    return blocks * num_warps


def stage_cases():
    """Each stage of the KDA forward, and the backward's _bwd_intra, at the package's launch settings (bf16,
    K = 128)."""
    bwd = compile_sm90.load_kernel_module("chunk_bwd_triton")
    half, f32 = "*bf16", "*fp32"
    return [
        ("_chunk_cumsum", cf._chunk_cumsum, dict(g_ptr=f32, hi_ptr=f32, lo_ptr=f32, ok_ptr="*i32", lo_from="fp32"),
         dict(H=16, K=128, BT=cf.CHUNK, BK=cf.CUMSUM_KEY_TILE, BS=cf.CUMSUM_ROWS, CHECK=True), cf.LAUNCH["cumsum"]),
        ("_diagonal_blocks", cf._diagonal_blocks, dict(q_ptr=half, k_ptr=half, g_ptr=f32, gs_ptr=f32, gl_ptr=f32,
                                                       beta_ptr=half, aqk_ptr=half, akk_ptr=f32, scale="fp32",
                                                       lo_from="fp32"),
         dict(H=16, K=128, BT=cf.CHUNK, BC=cf.SUB, BK=cf.DIAGONAL_BK, SPAN_LIMIT=cf.DIAGONAL_SPAN_LIMIT,
              DOT_PRECISION="tf32"), cf.LAUNCH["diagonal"]),
        *[(f"_offdiagonal_solve, USE_LO={use_lo}", cf._offdiagonal_solve,
           dict(q_ptr=half, k_ptr=half, g_ptr=f32, gl_ptr=f32, beta_ptr=half, aqk_ptr=half, akk_ptr=f32, ai_ptr=half,
                scale="fp32", lo_from="fp32"),
         dict(H=16, K=128, BT=cf.CHUNK, BC=cf.SUB, BK=cf.OFFDIAGONAL_BK, BKF=128, USE_LO=use_lo,
              DOT_PRECISION="tf32", SOLVE_PRECISION="tf32", LO_GROUP=cf.LO_GROUP), cf.LAUNCH["offdiagonal_solve"])
          for use_lo in (False, True)],
        *[(f"_wy_factors, USE_LO={use_lo}", cf._wy_factors,
           dict(k_ptr=half, v_ptr=half, g_ptr=f32, gl_ptr=f32, beta_ptr=half, ai_ptr=half, w_ptr=half, u_ptr=half,
                kd_ptr=half, ok_ptr="*i32", lo_from="fp32"),
         dict(H=16, K=128, V=128, BT=cf.CHUNK, BK=cf.KEY_TILE, BV=cf.VALUE_TILE, BKF=128, GATE=2, USE_LO=use_lo,
              WRITE_KD=True, DOT_PRECISION="tf32", CHECK=True, LO_GROUP=cf.LO_GROUP), cf.LAUNCH["wy_channel"])
          for use_lo in (False, True)],
        ("_state_pass (B*H = 32: 32 wide)", cf._state_pass,
         dict(k_ptr=half, u_ptr=half, w_ptr=half, g_ptr=f32, gl_ptr=f32, h0_ptr=f32, h_ptr=half, vn_ptr=half,
              ht_ptr=f32),
         dict(H=16, K=128, V=128, BT=cf.CHUNK, BK=128, BV=cf.state_block_v(32, 128, cf.VALUE_TILE), GATE=2, DELTA=True,
              HAS_H0=False, DOT_PRECISION="tf32"), cf.LAUNCH["state"]),
        ("_chunk_output", cf._chunk_output, dict(q_ptr=half, g_ptr=f32, h_ptr=half, aqk_ptr=half, vn_ptr=half,
                                                 o_ptr=half, scale="fp32"),
         dict(H=16, K=128, V=128, BT=cf.CHUNK, BK=cf.KEY_TILE, BV=cf.BLOCK_V["output_channel"], GATE=2,
              DOT_PRECISION="tf32"),
         cf.LAUNCH["output"]),
        ("_bwd_intra (backward)", bwd._bwd_intra, dict(q_ptr=half, k_ptr=half, g_ptr=f32, gl_ptr=f32, beta_ptr=half,
                                                       daqk_ptr=f32, dakk_ptr=f32, dq_ptr=f32, dk_ptr=f32, dg_ptr=f32,
                                                       dbeta_ptr=f32, dq_out_ptr=half, dk_out_ptr=half,
                                                       dbeta_out_ptr=half, lo_from="fp32"),
         dict(H=16, K=128, BT=cf.CHUNK, BC=cf.SUB, BK=128, GATED=True, DELTA=True, DOT_PRECISION="tf32"),
         bwd.LAUNCH["intra"]),
    ]


def registers(out):
    rows_ptrs = {"q_ptr": "*bf16", "k_ptr": "*bf16", "g_ptr": "*fp32", "beta_ptr": "*bf16", "aqk_ptr": "*bf16",
                 "akk_ptr": "*fp32", "scale": "fp32"}
    level_ptrs = dict(rows_ptrs, gl_ptr="*fp32", lo_from="fp32")
    cases = [(f"_diagonal_rows, {heads} heads per program", _diagonal_rows, rows_ptrs,
              dict(H=16, K=128, BT=cf.CHUNK, BC=cf.SUB, BH=heads, BK=128), warps)
             for heads in (1, 2, 4) for warps in (1, 2)]
    cases += [(f"by levels, slices of {bk}", _diagonal_blocks_by_levels, level_ptrs,
               dict(H=16, K=128, BT=cf.CHUNK, BC=cf.SUB, BK=bk, DOT_PRECISION="tf32"), warps)
              for bk in (16, 32, 64, 128) for warps in (1, 2, 4)]
    print(f"triton {triton.__version__}, sm90, bf16 inputs, H = 16, K = 128")
    print(f"{'kernel':<40}{'warps':>6}{'registers':>11}{'spill st/ld, B':>16}{'warps per SM':>14}")
    results = []
    for label, fn, ptrs, constants, warps in cases:
        regs, stores, loads = usage(fn, ptrs, constants, warps)
        row = {"kernel": label, "num_warps": warps, "registers": regs, "spill_store_bytes": stores,
               "spill_load_bytes": loads, "resident_warps_by_registers": resident_warps(regs, warps)}
        results.append(row)
        print(f"{label:<40}{warps:>6}{regs:>11}{f'{stores}/{loads}':>16}{row['resident_warps_by_registers']:>14}")
    print(f"\nthe package's stages at their launch settings\n{'kernel':<40}{'warps':>6}{'registers':>11}"
          f"{'spill st/ld, B':>16}{'warps per SM':>14}")
    stages = []
    for label, fn, ptrs, constants, launch in stage_cases():
        warps = launch["num_warps"]
        regs, stores, loads = usage(fn, ptrs, constants, warps, launch.get("num_stages"))
        row = {"kernel": label, "num_warps": warps, "num_stages": launch.get("num_stages"), "registers": regs,
               "spill_store_bytes": stores, "spill_load_bytes": loads,
               "resident_warps_by_registers": resident_warps(regs, warps)}
        stages.append(row)
        print(f"{label:<40}{warps:>6}{regs:>11}{f'{stores}/{loads}':>16}{row['resident_warps_by_registers']:>14}")
    if out:
        Path(out).write_text(json.dumps({"triton": triton.__version__, "target": "sm90", "rows": results,
                                         "stages": stages}, indent=1))


def ptx_digest(out):
    """One line per stage: an md5 of its sm90 PTX without what only marks source positions, and its line count."""
    print(f"triton {triton.__version__}, sm90, kernels from {compile_sm90.KERNELS}")
    digests = {}
    for label, fn, ptrs, constants, launch in stage_cases():
        ptx = compile_sm90.compile_sm90(fn, ptrs, constants, **launch).asm["ptx"]
        ptx = ptx.split(".section\t.debug", 1)[0]
        lines = [line.strip() for line in ptx.splitlines()]
        kept = [re.sub(r"\$L__tmp\d+", "$L__tmp", line) for line in lines
                if line and not line.startswith((".loc", ".file")) and not re.fullmatch(r"\$L__tmp\d+:", line)]
        digest = hashlib.md5("\n".join(kept).encode()).hexdigest()[:12]
        digests[label] = {"md5_12": digest, "lines": len(kept)}
        print(f"{label:<40}{digest:>14}{len(kept):>8} lines")
    if out:
        Path(out).write_text(json.dumps({"triton": triton.__version__, "target": "sm90",
                                         "kernels": KERNELS_LABEL, "stages": digests}, indent=1))


def check():
    import torch

    gen = torch.Generator().manual_seed(0)
    B, T, H, K = 1, 70, 3, 40
    q, k = torch.randn(B, T, H, K, generator=gen), torch.randn(B, T, H, K, generator=gen)
    g = -3 * torch.rand(B, T, H, K, generator=gen)
    g[0, 20] = -1e4
    beta = torch.rand(B, T, H, generator=gen)
    G, G_lo = cf.gate_sums(g, "kda")
    worst = 0.0
    for bk in (16, 32, 64):
        ours = [torch.zeros(B, T, H, cf.CHUNK) for _ in range(2)]
        theirs = [torch.zeros(B, T, H, cf.CHUNK) for _ in range(2)]
        package = [torch.zeros(B, T, H, cf.CHUNK) for _ in range(2)]
        _diagonal_rows[(B * T, triton.cdiv(H, 2))](q, k, g, beta, *ours, K ** -0.5, T, H, K, cf.CHUNK, cf.SUB, 2,
                                                   cf._block(K))
        _diagonal_blocks_by_levels[(triton.cdiv(T, cf.SUB), B * H)](q, k, G, G_lo, beta, *theirs, K ** -0.5, 0.0, T,
                                                                    H, K, cf.CHUNK, cf.SUB, bk, "ieee")
        cf._diagonal_blocks[(triton.cdiv(T, cf.SUB), B * H)](q, k, g, G, G_lo, beta, *package, K ** -0.5, 0.0, T, H, K,
                                                             cf.CHUNK, cf.SUB, bk, cf.DIAGONAL_SPAN_LIMIT, "ieee")
        for name, other in (("by levels", theirs), ("_diagonal_blocks", package)):
            errors = [(a - b).abs().max().item() / a.abs().max().item() for a, b in zip(ours, other)]
            worst = max(worst, *errors)
            print(f"slices of {bk}, {name}: largest difference from _diagonal_rows, relative to the largest entry: "
                  f"Aqk {errors[0]:.1e}, Akk {errors[1]:.1e}")
    sys.exit(0 if worst < 1e-6 else 1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out")
    parser.add_argument("--ptx-digest", action="store_true")
    parser.add_argument("--kernels", help="the k3lite/kernels folder to compile (read before the arguments are parsed)")
    args = parser.parse_args()
    if args.check:
        check()
    elif args.ptx_digest:
        ptx_digest(args.out)
    else:
        registers(args.out)
