"""Chunked forward pass of the delta family (and linear attention) as a pipeline of Triton kernels.

One chunk is BT = 64 tokens; per-channel decays work on sub-chunks of BC = 16. Gate kinds (the GATE
constexpr): GATE_NONE (no decay), GATE_SCALAR (one log-gate per head and step), GATE_CHANNEL (one log-gate
per key channel). DELTA selects the delta rule (WY/UT form) over plain linear attention.

Stages, each a kernel (G is the chunk-local cumulative sum of the log-gates):
  1. _chunk_cumsum        G_r = sum_{s <= r in chunk} g_s, stored as two float32 parts G + G_lo
  2. _intra_chunk_dense   Aqk = scale * tril(Q K^T * exp(G_r - G_i)),
                          Akk = diag(beta) strict_tril(K K^T * exp(G_r - G_i))
  3. _solve_unit_lower    Ai = (I + Akk)^-1: 16x16 diagonal blocks as finite series, then block merging
     For per-channel gates (KDA) stages 2-3 are two other kernels, since exp(G_r - G_i) then differs
     per channel and cannot be pulled out of the product:
     _diagonal_blocks     the 16x16 diagonal blocks, one sub-chunk per program, as tensor-core products through
                          the sub-chunk's middle row (or, for strong gates, by walking its rows: _diagonal_walk)
     _offdiagonal_solve   the six blocks below them as tensor-core products through an anchor row,
                          then the same block merge as _solve_unit_lower, one program per chunk
  4. _wy_factors          W = Ai diag(beta) (exp(G) * K),  U = Ai diag(beta) V  (and for KDA K_dec = exp(G_C - G) * K)
  5. _state_pass          per chunk: h = S;  V' = U - W S;  S = diag(exp(G_C)) S + (exp(G_C - G) * K)^T V'
                          (a gate per head: the same product as K^T (exp(G_C - G) * V'), one factor per token)
  6. _chunk_output        O = scale * (exp(G) * Q) h + Aqk V'
Linear attention skips 3 and 4 and uses V' = V.

Numerics of the decays: every exponent below is a span G_r - G_i with i <= r (so <= 0), or is factored
through an anchor row a with i <= a <= r: exp(G_r - G_i) = exp(G_r - G_a) exp(G_a - G_i), both factors <= 1.
(The diagonal blocks' anchor sits inside the block, so there a factor may exceed 1, by at most e^30: see below.)
exp(G_r) * exp(-G_i) is never formed, so log-gates of -20 per step cannot overflow. A span must not be
taken as the difference of two float32 running sums: after a gate of -1e4, float32 steps are 1e-3 apart,
so the gates of -0.001 after it would vanish. Two ways keep every digit:
  * Stage 1 sums with compensation (each addition's float32 rounding error is kept, _two_sum) and keeps G as
    two float32 parts, G (the sum rounded) and G_lo (what the rounding dropped), and every difference is taken
    part by part (_span): (G_r - G_i) + (G_lo_r - G_lo_i).
    Where both sums hold the same large gates the first difference is exact; the second restores the small
    gates. For KDA in bf16/fp16 stage 1 writes G_lo only where |G| >= 256 and readers take it through _load_lo:
    below that its absence moves a decay by at most 1.5e-5 relative, far under the inputs' rounding (gate_lo_from).
    Chunks (sub-chunks for the diagonal blocks) whose last row of G stays below 256 hold no G_lo at all, and their
    readers run code without it (_chunk_has_lo, _slice_has_lo).
  * KDA's diagonal blocks (_diagonal_blocks) take exponents through an anchor row inside the block, G_r - G_a, a
    two-part span of at most half a sub-chunk's gates; one factor of a pair may then be > 1, so the program keeps
    its products only where every such span of its sub-chunk is at most DIAGONAL_SPAN_LIMIT (30: factors below e^30)
    and otherwise walks the rows (_diagonal_walk), carrying sum_{j < m <= t} g_m of the raw gates, a sum of one sign.
    Of the forms tried this one is the fastest: one program per token walking its row (the kernel before,
    _diagonal_rows), pairs of two-part differences and the backward's form (four levels of pairs through anchors)
    were all slower. Summing raw gates by tl.cumsum inside the other stages as well (no G, G_lo at all) made the
    forward slower: the scans cost the off-diagonal, WY and output stages more than stage 1 costs.
Gates below GATE_FLOOR (-1024, -inf included) are raised to it: their decay is exactly 0 either way, and no
inf - inf can appear. The plain prefix decays exp(G_r), exp(G_C) need no G_lo: a rounding of G far below 0
changes nothing that survives. In the two-part form exponents are clamped with minimum(x, 0): that is
exact where the value is used and keeps padded rows and masked entries finite.

Every tl.dot takes its input precision from the DOT_PRECISION constexpr (see dot_precision below):
"ieee" for float32 inputs, "tf32" otherwise; the triangular solve "ieee" unless the inputs are bf16
(solve_precision: TF32 there loses digits that fp16 inputs carry and an ill-conditioned I + Akk needs).
"""

from __future__ import annotations

import torch

from . import _ensure_backend

_ensure_backend()  # on CPU Triton's interpreter must be on before triton is imported (see k3lite.kernels)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._launch import cached_launch  # noqa: E402

# Tokens per chunk: a 64-row tile fills the tensor cores' M dimension for every product of a chunk, and
# the sequential state pass then takes T / 64 steps.
CHUNK = 64
# Rows of a sub-chunk (KDA's diagonal blocks, the 4x4 block inverse): 16 is the smallest tl.dot tile.
SUB = 16
# Widest slice of the key (and value) axis one [64, width] tile holds: 64 x 64 float32 accumulators are
# 32 registers per thread at 4 warps, which leaves room for the operands; wider heads loop over slices.
KEY_TILE = 64
VALUE_TILE = 64

# Gate kinds, a constexpr argument GATE of the kernels: no decay (linear attention, DeltaNet), one log-gate
# per head and token (Gated DeltaNet), one per key channel (KDA). Host code compares plain ints (GATE_OF_KIND and
# .value): from Python, each comparison with a tl.constexpr builds and unwraps constexpr objects, about a
# microsecond, and the launchers make several per forward.
GATE_NONE = tl.constexpr(0)
GATE_SCALAR = tl.constexpr(1)
GATE_CHANNEL = tl.constexpr(2)
# Gates are raised to this before they are summed: exp(-1024) is 0 in float32 and float64, so every decay
# through such a gate is still exactly 0, and the sums stay finite (-inf gates would give inf - inf = NaN).
GATE_FLOOR = tl.constexpr(-1024.0)


@triton.jit
def _head_base(i_b, i_h, T, H: tl.constexpr, D):
    # Offset of token 0 of head i_h, batch i_b, in a contiguous [B, T, H, D] tensor; its tokens are H * D apart.
    return (i_b * T * H + i_h) * D


@triton.jit
def _tile(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BC: tl.constexpr):
    # Pointers and bounds mask of the [BR, BC] tile at (row0, col0) of a row-major view with row stride.
    r = row0 + tl.arange(0, BR)
    c = col0 + tl.arange(0, BC)
    return base + r[:, None] * stride + c[None, :], (r[:, None] < n_rows) & (c[None, :] < n_cols)


@triton.jit
def _chunk_state_base(i_b, i_t, i_h, NT, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr):
    # Offset of chunk i_t's state h_c of head i_h, batch i_b, in a contiguous [B, NT, H, K, V] tensor. In int64:
    # such a tensor reaches 2^31 elements at B = 16, T = 32768, H = 16, K = V = 128.
    return ((i_b * NT + i_t) * H + i_h).to(tl.int64) * K * V


@triton.jit
def _state_base(i_bh, K: tl.constexpr, V: tl.constexpr):
    # Offset of the state of head i_bh = i_b * H + i_h in a contiguous [B, H, K, V] tensor.
    return i_bh.to(tl.int64) * K * V


@triton.jit
def _vec(base, row0, n_rows, stride, BR: tl.constexpr):
    r = row0 + tl.arange(0, BR)
    return base + r * stride, r < n_rows


@triton.jit
def _load_f32(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BC: tl.constexpr):
    p, m = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BC)
    return tl.load(p, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _store(base, x, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BC: tl.constexpr):
    p, m = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BC)
    tl.store(p, x, mask=m)


@triton.jit
def _load_vec_f32(base, row0, n_rows, stride, BR: tl.constexpr):
    p, m = _vec(base, row0, n_rows, stride, BR)
    return tl.load(p, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _row(base, t, T, n_cols, stride, BC: tl.constexpr):
    # Pointers and mask of row t of a [T, n_cols] view; all masked when t is past the end.
    c = tl.arange(0, BC)
    return base + t * stride + c, c < tl.where(t < T, n_cols, 0)


@triton.jit
def _load_row(base, t, T, n_cols, stride, BC: tl.constexpr):
    # Row t of a [T, n_cols] view as a float32 vector; zeros when t is past the end.
    p, m = _row(base, t, T, n_cols, stride, BC)
    return tl.load(p, mask=m, other=0.0).to(tl.float32)


@triton.jit
def _lo_kept(hi, lo_from):
    # Where stage 1 writes G_lo and its readers take it: |G| >= lo_from (see gate_lo_from). Elsewhere G_lo's memory
    # is left as allocated and read as 0.
    return tl.abs(hi) >= lo_from


@triton.jit
def _chunk_has_lo(g_base, t_last, T, K: tl.constexpr, stride, lo_from, BKF: tl.constexpr):
    # Whether stage 1 may have written G_lo in a chunk (any channel), from its last row of G (t_last): gates are <= 0,
    # so G falls monotonically down the chunk and its last row holds every channel's largest |G|. _offdiagonal_solve
    # and _wy_factors launch twice, once (USE_LO) for the chunks with G_lo and once, in code that never touches it,
    # for the others: a program without G_lo code needs fewer registers (no spills) and most chunks have no G_lo. The
    # same choice as a branch inside each program cost more than it saved, and masking the G_lo loads off alone saved
    # nothing. A rounding could put a row one float32 step past the last one, at |G| ~ lo_from: its G_lo would be
    # skipped, which is what gate_lo_from allows below lo_from anyway.
    # BKF: K rounded up to a power of two.
    return _slice_has_lo(_load_row(g_base, t_last, T, K, stride, BKF), lo_from)


@triton.jit
def _slice_has_lo(g_last, lo_from, AXIS: tl.constexpr = 0):
    # Whether stage 1 may have written G_lo in the channels whose last row of G is g_last (see _chunk_has_lo). Inside
    # _diagonal_blocks, per sub-chunk, the choice is a branch: its programs are small, and there a branch costs less
    # than a second launch.
    # (AXIS = 1: one answer per row of g_last, each row one chunk's last row; see _chunks_with_lo.)
    return tl.max(tl.abs(g_last), axis=AXIS) >= lo_from


@triton.jit
def _chunks_with_lo(g_base, i_group, T, K: tl.constexpr, stride, lo_from, BT: tl.constexpr, GROUP: tl.constexpr,
                    BKF: tl.constexpr):
    # _chunk_has_lo for the GROUP chunks i_group * GROUP .. i_group * GROUP + GROUP - 1 of one head at once (one
    # [GROUP, BKF] load of their last rows of G), as an int32 vector: 1 where the chunk may have G_lo, 0 elsewhere and
    # past the last chunk. The USE_LO launch of a reader of G_lo has one program per such group (lo_group_grid).
    chunks = i_group * GROUP + tl.arange(0, GROUP)
    t_last = tl.minimum(chunks * BT + BT, T) - 1
    cols = tl.arange(0, BKF)
    m = (chunks * BT < T)[:, None] & (cols < K)[None, :]
    g_last = tl.load(g_base + t_last[:, None] * stride + cols[None, :], mask=m, other=0.0)
    return _slice_has_lo(g_last, lo_from, 1).to(tl.int32)


@triton.jit
def _group_member(flags, j, GROUP: tl.constexpr):
    # Entry j of a [GROUP] int32 vector, as a scalar.
    return tl.sum(tl.where(tl.arange(0, GROUP) == j, flags, 0))


@triton.jit
def _load_lo(base, hi, row0, col0, n_rows, n_cols, stride, lo_from, BR: tl.constexpr, BC: tl.constexpr):
    # The G_lo tile beside the G tile hi, for the forward's stages: the load is masked by _lo_kept, so an entry stage 1
    # did not write is never fetched (with ordinary gates, none is). In the forward's stages the bytes saved are worth
    # more than wide loads (the backward's stages take _load_lo_whole, for the opposite reason).
    p, m = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BC)
    return tl.load(p, mask=m & _lo_kept(hi, lo_from), other=0.0)


@triton.jit
def _load_lo_row(base, hi, t, T, n_cols, stride, lo_from, BC: tl.constexpr):
    # Row t of G_lo beside row t of G (hi), as _load_lo.
    p, m = _row(base, t, T, n_cols, stride, BC)
    return tl.load(p, mask=m & _lo_kept(hi, lo_from), other=0.0)


@triton.jit
def _load_lo_whole(base, hi, row0, col0, n_rows, n_cols, stride, lo_from, BR: tl.constexpr, BC: tl.constexpr):
    # As _load_lo, for the backward's stages: the tile loaded whole, then the entries stage 1 did not write
    # replaced by 0. A mask that differs per element keeps the compiler from merging neighbouring loads into wide
    # ones; in the backward's stages that costs more than the bytes the mask saves.
    p, m = _tile(base, row0, col0, n_rows, n_cols, stride, BR, BC)
    return tl.where(_lo_kept(hi, lo_from), tl.load(p, mask=m, other=0.0), 0.0)


@triton.jit
def _load_lo_row_whole(base, hi, t, T, n_cols, stride, lo_from, BC: tl.constexpr):
    # Row t of G_lo beside row t of G (hi), as _load_lo_whole.
    return tl.where(_lo_kept(hi, lo_from), _load_row(base, t, T, n_cols, stride, BC), 0.0)


@triton.jit
def _chunk_decay(g_ptr, i_b, i_h, i_t, col0, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                 WIDTH: tl.constexpr, GATE: tl.constexpr):
    # exp(G_C) of chunk i_t (G at its last row) for key channels col0 .. col0 + WIDTH: one value per head
    # (GATE_SCALAR, g_ptr is G [B, T, H]) repeated, or one per channel (GATE_CHANNEL); ones without a gate.
    t_last = tl.minimum(i_t * BT + BT, T) - 1
    ones = tl.full([WIDTH], 1.0, tl.float32)
    if GATE == GATE_SCALAR:
        return ones * tl.exp(tl.load(g_ptr + (i_b * T + t_last) * H + i_h))
    elif GATE == GATE_CHANNEL:
        return tl.exp(_load_row(g_ptr + _head_base(i_b, i_h, T, H, K) + col0, t_last, T, K - col0, H * K, WIDTH))
    else:
        return ones


@triton.jit
def _span(hi_r, lo_r, hi_c, lo_c):
    # G_r - G_c for G = hi + lo. Where both sums hold the same large gate, hi_r - hi_c is exact (the two are
    # within a factor 2 of each other) and lo_r - lo_c brings back the small gates the float32 sums rounded
    # away; where they differ a lot, the difference is large and its rounding relative, so harmless.
    return (hi_r - hi_c) + (lo_r - lo_c)


@triton.jit
def _two_sum(a_hi, a_lo, b_hi, b_lo):
    # (a_hi + a_lo) + (b_hi + b_lo) as a float32 pair (hi, lo), hi the float32 rounding of hi + lo. Knuth's TwoSum
    # gives the rounding error of a_hi + b_hi exactly, in float32; the low parts join it, and a last exact
    # step puts the pair back in that form. A running sum of such pairs carries about 48 bits, so it keeps
    # the gentle gates after a gate of -1e4 as a float64 sum would. Associative up to those last bits, so
    # it can combine a tl.associative_scan. No multiplications: nothing a compiler could fuse into an FMA.
    s = a_hi + b_hi
    b_virtual = s - a_hi
    err = (a_hi - (s - b_virtual)) + (b_hi - b_virtual)
    lo = err + (a_lo + b_lo)
    hi = s + lo
    return hi, lo - (hi - s)


@triton.jit
def _max_keeping_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _clear_flag_where(ok_ptr, bad):
    # The value checks' flag (values_ok, see chunk_forward) set to 0 by every entry of bad that holds: a masked store
    # of one address, so a program whose values are all good stores nothing and needs no reduction of bad first.
    zero = tl.zeros_like(bad).to(tl.int32)
    tl.store(ok_ptr + zero, zero, mask=bad)


@cached_launch
@triton.jit
def _chunk_cumsum(g_ptr, hi_ptr, lo_ptr, ok_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                  BK: tl.constexpr, BS: tl.constexpr, CHECK: tl.constexpr):
    # G = cumsum of g within each chunk of BT tokens, as two float32 tensors hi + lo: a compensated running sum
    # (_two_sum: gates of every size keep their digits), whose float32 rounding is hi and whose remainder is lo.
    # Each gate is first raised to GATE_FLOOR: exp of any span holding it is then still exactly 0, and -inf gives no
    # inf - inf. One program per (key block, chunk, head) takes the chunk BS rows at a time: one [BS, BK] tile load,
    # a scan of pairs down the tile, joined to the pair carried from the tiles before it. A gate per head is K = 1.
    # This form is faster than the float64 running sum it replaced (on any tiling) and close to a plain float32 scan
    # writing the same two tensors without compensation, which is the floor. Tiles of 4 or 16 rows and 64 channels
    # were slower.
    # lo is written only where _lo_kept(hi, lo_from) (gate_lo_from; 0 for float32 inputs: everywhere); the readers
    # (_load_lo) read 0 for the rest.
    # With CHECK, this kernel is also the value check of g (it reads every gate once): a gate that is not
    # <= 0 (NaN included) clears the flag at ok_ptr, which the launcher asserts on (see chunk_forward).
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    base = _head_base(i_b, i_h, T, H, K)
    carry_hi = tl.zeros([BK], dtype=tl.float32)
    carry_lo = tl.zeros([BK], dtype=tl.float32)
    # The check keeps the largest gate seen in each channel, NaN kept (max.NaN), and at the end clears the flag by a
    # masked store (_clear_flag_where): a [BK] vector costs no measurable time. A [BS, BK] tile of largest gates,
    # summed into one count at the end, needs more registers per thread and is slower, and a count of bad gates kept
    # per gate (a compare, a convert and an add per gate) slower still.
    worst = tl.full([BK], -1.0, dtype=tl.float32)
    for i_s in tl.static_range(BT // BS):
        row0 = i_t * BT + i_s * BS
        p, m = _tile(g_ptr + base, row0, i_k * BK, T, K, H * K, BS, BK)
        gate = tl.load(p, mask=m, other=0.0).to(tl.float32)
        if CHECK:
            worst = tl.maximum(worst, tl.reduce(gate, 0, _max_keeping_nan), propagate_nan=tl.PropagateNan.ALL)
        floored = tl.maximum(gate, GATE_FLOOR)
        hi, lo = tl.associative_scan((floored, tl.zeros_like(floored)), 0, _two_sum)
        hi, lo = _two_sum(carry_hi[None, :], carry_lo[None, :], hi, lo)
        # The tile's total joins the carry. (Picking the scan's last row out with masked sums instead made
        # Triton 3.6.0 fail to compile this kernel for bf16 gates: "operand does not dominate this use".)
        tile_hi, tile_lo = tl.reduce((floored, tl.zeros_like(floored)), 0, _two_sum)
        carry_hi, carry_lo = _two_sum(carry_hi, carry_lo, tile_hi, tile_lo)
        _store(hi_ptr + base, hi, row0, i_k * BK, T, K, H * K, BS, BK)
        p_lo, m_lo = _tile(lo_ptr + base, row0, i_k * BK, T, K, H * K, BS, BK)
        tl.store(p_lo, lo, mask=m_lo & _lo_kept(hi, lo_from))
    if CHECK:
        _clear_flag_where(ok_ptr, ~(worst <= 0))


@cached_launch
@triton.jit
def _intra_chunk_dense(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, T,
                       H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                       GATE: tl.constexpr, DELTA: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # GATE_NONE and GATE_SCALAR: the decay exp(G_r - G_i) is a scalar per (r, i), so one [BT, BT] product
    # Q K^T (and K K^T) per chunk, then decay, causal mask, beta rows, scale.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    base = _head_base(i_b, i_h, T, H, K)
    acc_qk = tl.zeros([BT, BT], dtype=tl.float32)
    acc_kk = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        p_q, m_q = _tile(q_ptr + base, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        p_k, m_k = _tile(k_ptr + base, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_q = tl.load(p_q, mask=m_q, other=0.0)
        b_k = tl.load(p_k, mask=m_k, other=0.0)
        acc_qk += tl.dot(b_q, tl.trans(b_k), input_precision=DOT_PRECISION)
        if DELTA:
            acc_kk += tl.dot(b_k, tl.trans(b_k), input_precision=DOT_PRECISION)
    rows = tl.arange(0, BT)
    if GATE == GATE_SCALAR:
        b_g = _load_vec_f32(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        b_gl = _load_vec_f32(gl_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        decay = tl.exp(tl.minimum(_span(b_g[:, None], b_gl[:, None], b_g[None, :], b_gl[None, :]), 0.0))
        acc_qk = acc_qk * decay
        acc_kk = acc_kk * decay
    causal = rows[:, None] >= rows[None, :]
    a_base = _head_base(i_b, i_h, T, H, BT)
    p_aqk, m_aqk = _tile(aqk_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT)
    tl.store(p_aqk, tl.where(causal, acc_qk * scale, 0.0), mask=m_aqk)
    if DELTA:
        b_beta = _load_vec_f32(beta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        strict = rows[:, None] > rows[None, :]
        p_akk, m_akk = _tile(akk_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT)
        tl.store(p_akk, tl.where(strict, acc_kk * b_beta[:, None], 0.0), mask=m_akk)


@cached_launch
@triton.jit
def _diagonal_blocks(q_ptr, k_ptr, g_ptr, gs_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, lo_from, T,
                     H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                     SPAN_LIMIT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # GATE_CHANNEL (KDA), the 16x16 diagonal block of one sub-chunk, one program per (sub-chunk, head), as a
    # tensor-core product through one anchor row a, the sub-chunk's middle row:
    #   A[r, c] = sum_d (k_rd exp(G_rd - G_ad)) (k_cd exp(G_ad - G_cd))   (q_rd for Aqk)
    # Unlike the off-diagonal blocks' anchors, a sits inside the block, so one factor of a pair may be > 1: exp(x) with
    # x = G_r - G_a, at most the gates summed over half a sub-chunk. While every |x| of the sub-chunk stays
    # <= SPAN_LIMIT (gates of -3.75 per step on average still do), the factors lie in [e^-30, e^30], their product is
    # the pair's decay (<= 1 for a kept pair) and each entry an ordinary dot product. Beyond it (a gate of -1e4, -inf,
    # strong gates) the program takes _diagonal_walk, which never forms a factor > 1.
    i_s, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    base = _head_base(i_b, i_h, T, H, K)
    S = H * K
    r0 = i_s * BC
    anchor = tl.minimum(r0 + BC // 2, T - 1)
    rows = tl.arange(0, BC)
    valid = r0 + rows < T
    acc_qk = tl.zeros([BC, BC], dtype=tl.float32)
    acc_kk = tl.zeros([BC, BC], dtype=tl.float32)
    widest = tl.zeros([BC, BK], dtype=tl.float32)
    row_last = tl.minimum(r0 + BC, T) - 1
    for i_k in range(0, tl.cdiv(K, BK)):
        c0 = i_k * BK
        b_g = _load_f32(gs_ptr + base, r0, c0, T, K, S, BC, BK)
        b_ga = _load_row(gs_ptr + base + c0, anchor, T, K - c0, S, BK)
        if _slice_has_lo(_load_row(gs_ptr + base + c0, row_last, T, K - c0, S, BK), lo_from):
            b_l = _load_lo(gl_ptr + base, b_g, r0, c0, T, K, S, lo_from, BC, BK)
            b_la = _load_lo_row(gl_ptr + base + c0, b_ga, anchor, T, K - c0, S, lo_from, BK)
            x = _span(b_g, b_l, b_ga[None, :], b_la[None, :])
        else:
            x = b_g - b_ga[None, :]
        x = tl.where(valid[:, None], x, 0.0)
        widest = tl.maximum(widest, tl.abs(x))
        up = tl.exp(tl.minimum(x, SPAN_LIMIT))      # exp(G_r - G_a): the row factor
        down = tl.exp(tl.minimum(-x, SPAN_LIMIT))   # exp(G_a - G_c): the column factor
        b_k = _load_f32(k_ptr + base, r0, c0, T, K, S, BC, BK)
        b_kc = b_k * down
        acc_qk = tl.dot(_load_f32(q_ptr + base, r0, c0, T, K, S, BC, BK) * up, tl.trans(b_kc), acc_qk,
                        input_precision=DOT_PRECISION)
        acc_kk = tl.dot(b_k * up, tl.trans(b_kc), acc_kk, input_precision=DOT_PRECISION)
    if tl.max(tl.max(widest, axis=1), axis=0) <= SPAN_LIMIT:
        A = H * BT
        a_base = _head_base(i_b, i_h, T, H, BT)
        b_beta = _load_vec_f32(beta_ptr + _head_base(i_b, i_h, T, H, 1), r0, T, H, BC)
        _store(aqk_ptr + a_base, tl.where(rows[:, None] >= rows[None, :], acc_qk * scale, 0.0), r0, r0 % BT, T, BT,
               A, BC, BC)
        _store(akk_ptr + a_base, tl.where(rows[:, None] > rows[None, :], acc_kk * b_beta[:, None], 0.0), r0, r0 % BT,
               T, BT, A, BC, BC)
    else:
        _diagonal_walk(q_ptr, k_ptr, g_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, i_b, i_h, r0, T, H, K, BT, BC, BK)


@triton.jit
def _diagonal_walk(q_ptr, k_ptr, g_ptr, beta_ptr, aqk_ptr, akk_ptr, scale, i_b, i_h, r0, T,
                   H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr):
    # The diagonal block of the sub-chunk at r0 without a factor > 1, for gates too strong for _diagonal_blocks'
    # anchor. Its rows walk together: at step i row t meets j = t - i (while j stays in the sub-chunk) and carries
    # span = sum_{j < m <= t} g_m of the raw gates, a sum of one sign, never a difference:
    #   Aqk[t, j] = scale * sum_d q_td k_jd exp(span_d),  Akk[t, j] = beta_t * (same with k_t), j < t
    # acc[t, i] holds the pair (t, t - i); the rows j come from L1 (the program loaded them a moment before).
    base = _head_base(i_b, i_h, T, H, K)
    S = H * K
    pos = tl.arange(0, BC)   # t - r0
    steps = tl.arange(0, BC)
    t = r0 + pos
    valid = t < T
    acc_qk = tl.zeros([BC, BC], dtype=tl.float32)
    acc_kk = tl.zeros([BC, BC], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        c0 = i_k * BK
        cols = c0 + tl.arange(0, BK)
        b_q = _load_f32(q_ptr + base, r0, c0, T, K, S, BC, BK)
        b_k = _load_f32(k_ptr + base, r0, c0, T, K, S, BC, BK)
        span = tl.zeros([BC, BK], dtype=tl.float32)
        for i in range(0, BC):
            m = (valid & (pos >= i))[:, None] & (cols[None, :] < K)
            row_j = base + (t - i)[:, None] * S + cols[None, :]
            b_kj = tl.load(k_ptr + row_j, mask=m, other=0.0).to(tl.float32) * tl.exp(span)
            acc_qk += tl.where(steps[None, :] == i, tl.sum(b_q * b_kj, axis=1)[:, None], 0.0)
            acc_kk += tl.where(steps[None, :] == i, tl.sum(b_k * b_kj, axis=1)[:, None], 0.0)
            span += tl.maximum(tl.load(g_ptr + row_j, mask=m, other=0.0).to(tl.float32), GATE_FLOOR)
    b_beta = _load_vec_f32(beta_ptr + _head_base(i_b, i_h, T, H, 1), r0, T, H, BC)
    row_ptr = _head_base(i_b, i_h, T, H, BT) + t[:, None] * (H * BT) + r0 % BT   # column 0 of the block, row t
    reach = valid[:, None] & (pos[:, None] >= steps[None, :])
    tl.store(aqk_ptr + row_ptr + pos[:, None] - steps[None, :], acc_qk * scale, mask=reach)
    tl.store(akk_ptr + row_ptr + pos[:, None] - steps[None, :], tl.where(steps[None, :] > 0, acc_kk * b_beta[:, None],
                                                                         0.0), mask=reach)
    above = valid[:, None] & (steps[None, :] > pos[:, None])
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    tl.store(aqk_ptr + row_ptr + steps[None, :], zero, mask=above)
    tl.store(akk_ptr + row_ptr + steps[None, :], zero, mask=above)


@triton.jit
def _offdiagonal_pair(b_qr, b_kr, b_kc, b_gc, b_lc, b_ga, b_la, acc_qk, acc_kk, DOT_PRECISION: tl.constexpr):
    # Block (i, j < i) for one slice of channels: rows already carry exp(G_r - G_a); the columns get
    # exp(G_a - G_c). Both factors are <= 1.
    b_kc = b_kc * tl.exp(tl.minimum(_span(b_ga[None, :], b_la[None, :], b_gc, b_lc), 0.0))
    acc_qk = tl.dot(b_qr, tl.trans(b_kc), acc_qk, input_precision=DOT_PRECISION)
    acc_kk = tl.dot(b_kr, tl.trans(b_kc), acc_kk, input_precision=DOT_PRECISION)
    return acc_qk, acc_kk


@triton.jit
def _lo_tile(base, hi, row0, col0, n_rows, n_cols, stride, lo_from, USE_LO: tl.constexpr, BR: tl.constexpr,
             BC: tl.constexpr):
    # The G_lo tile beside hi (_load_lo), or 0 in a chunk without any (_chunk_has_lo).
    if USE_LO:
        return _load_lo(base, hi, row0, col0, n_rows, n_cols, stride, lo_from, BR, BC)
    else:
        return tl.zeros([BR, BC], dtype=tl.float32)


@triton.jit
def _lo_row(base, hi, t, T, n_cols, stride, lo_from, USE_LO: tl.constexpr, BC: tl.constexpr):
    # Row t of G_lo beside row hi (_load_lo_row), or 0 in a chunk without any.
    if USE_LO:
        return _load_lo_row(base, hi, t, T, n_cols, stride, lo_from, BC)
    else:
        return tl.zeros([BC], dtype=tl.float32)


@cached_launch
@triton.jit
def _offdiagonal_solve(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, ai_ptr, scale, lo_from, T,
                       H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                       BKF: tl.constexpr, USE_LO: tl.constexpr, DOT_PRECISION: tl.constexpr,
                       SOLVE_PRECISION: tl.constexpr, LO_GROUP: tl.constexpr):
    # GATE_CHANNEL (KDA): the six blocks (i, j < i) of Aqk and Akk of a chunk, then Ai = (I + Akk)^-1.
    # Launched twice, once per USE_LO (chunk_prepare), so the chunks without G_lo run code that never touches it:
    # without USE_LO one program per chunk, working only if the chunk has no G_lo (_chunk_has_lo); with it one program
    # per LO_GROUP chunks (lo_group_grid), working on those of its chunks that have G_lo (_chunks_with_lo).
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    base = _head_base(i_bh // H, i_bh % H, T, H, K)
    if USE_LO:
        flags = _chunks_with_lo(g_ptr + base, i_t, T, K, H * K, lo_from, BT, LO_GROUP, BKF)
        if tl.max(flags) > 0:
            for j in range(LO_GROUP):
                if _group_member(flags, j, LO_GROUP) > 0:
                    _offdiagonal_chunk(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, ai_ptr, scale,
                                       lo_from, T, i_t * LO_GROUP + j, i_bh, H, K, BT, BC, BK, True, DOT_PRECISION,
                                       SOLVE_PRECISION)
    elif not _chunk_has_lo(g_ptr + base, tl.minimum(i_t * BT + BT, T) - 1, T, K, H * K, lo_from, BKF):
        _offdiagonal_chunk(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, ai_ptr, scale, lo_from, T, i_t,
                           i_bh, H, K, BT, BC, BK, False, DOT_PRECISION, SOLVE_PRECISION)


@triton.jit
def _offdiagonal_chunk(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, aqk_ptr, akk_ptr, ai_ptr, scale, lo_from, T, i_t, i_bh,
                       H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                       USE_LO: tl.constexpr, DOT_PRECISION: tl.constexpr, SOLVE_PRECISION: tl.constexpr):
    # The work of one _offdiagonal_solve program:
    #   block (i, j): anchor a = i*BC - 1 (the last row before block i), for each slice of BK channels
    #       A[r, c] += sum_d (k_rd exp(G_rd - G_ad)) (k_cd exp(G_ad - G_cd))  -> tl.dot
    #   Aqk blocks go to memory; Akk blocks stay in registers and meet the diagonal blocks that
    #   _diagonal_blocks wrote, in the same block merge as _solve_unit_lower.
    i_b, i_h = i_bh // H, i_bh % H
    base = _head_base(i_b, i_h, T, H, K)
    S = H * K
    r0 = i_t * BT
    r1, r2, r3 = r0 + BC, r0 + 2 * BC, r0 + 3 * BC
    z = tl.zeros([BC, BC], dtype=tl.float32)
    q10, k10, q20, k20, q21, k21, q30, k30, q31, k31, q32, k32 = z, z, z, z, z, z, z, z, z, z, z, z
    for i_k in range(0, tl.cdiv(K, BK)):
        c0 = i_k * BK
        k0 = _load_f32(k_ptr + base, r0, c0, T, K, S, BC, BK)
        g0 = _load_f32(g_ptr + base, r0, c0, T, K, S, BC, BK)
        l0 = _lo_tile(gl_ptr + base, g0, r0, c0, T, K, S, lo_from, USE_LO, BC, BK)
        k1 = _load_f32(k_ptr + base, r1, c0, T, K, S, BC, BK)
        g1 = _load_f32(g_ptr + base, r1, c0, T, K, S, BC, BK)
        l1 = _lo_tile(gl_ptr + base, g1, r1, c0, T, K, S, lo_from, USE_LO, BC, BK)
        k2 = _load_f32(k_ptr + base, r2, c0, T, K, S, BC, BK)
        g2 = _load_f32(g_ptr + base, r2, c0, T, K, S, BC, BK)
        l2 = _lo_tile(gl_ptr + base, g2, r2, c0, T, K, S, lo_from, USE_LO, BC, BK)
        ga = _load_row(g_ptr + base + c0, r1 - 1, T, K - c0, S, BK)
        la = _lo_row(gl_ptr + base + c0, ga, r1 - 1, T, K - c0, S, lo_from, USE_LO, BK)
        d = tl.exp(tl.minimum(_span(g1, l1, ga[None, :], la[None, :]), 0.0))
        qd = _load_f32(q_ptr + base, r1, c0, T, K, S, BC, BK) * d
        q10, k10 = _offdiagonal_pair(qd, k1 * d, k0, g0, l0, ga, la, q10, k10, DOT_PRECISION)
        ga = _load_row(g_ptr + base + c0, r2 - 1, T, K - c0, S, BK)
        la = _lo_row(gl_ptr + base + c0, ga, r2 - 1, T, K - c0, S, lo_from, USE_LO, BK)
        d = tl.exp(tl.minimum(_span(g2, l2, ga[None, :], la[None, :]), 0.0))
        qd = _load_f32(q_ptr + base, r2, c0, T, K, S, BC, BK) * d
        kd = k2 * d
        q20, k20 = _offdiagonal_pair(qd, kd, k0, g0, l0, ga, la, q20, k20, DOT_PRECISION)
        q21, k21 = _offdiagonal_pair(qd, kd, k1, g1, l1, ga, la, q21, k21, DOT_PRECISION)
        ga = _load_row(g_ptr + base + c0, r3 - 1, T, K - c0, S, BK)
        la = _lo_row(gl_ptr + base + c0, ga, r3 - 1, T, K - c0, S, lo_from, USE_LO, BK)
        g3 = _load_f32(g_ptr + base, r3, c0, T, K, S, BC, BK)
        l3 = _lo_tile(gl_ptr + base, g3, r3, c0, T, K, S, lo_from, USE_LO, BC, BK)
        d = tl.exp(tl.minimum(_span(g3, l3, ga[None, :], la[None, :]), 0.0))
        qd = _load_f32(q_ptr + base, r3, c0, T, K, S, BC, BK) * d
        kd = _load_f32(k_ptr + base, r3, c0, T, K, S, BC, BK) * d
        q30, k30 = _offdiagonal_pair(qd, kd, k0, g0, l0, ga, la, q30, k30, DOT_PRECISION)
        q31, k31 = _offdiagonal_pair(qd, kd, k1, g1, l1, ga, la, q31, k31, DOT_PRECISION)
        q32, k32 = _offdiagonal_pair(qd, kd, k2, g2, l2, ga, la, q32, k32, DOT_PRECISION)
    A = H * BT
    a_base = _head_base(i_b, i_h, T, H, BT)
    _store(aqk_ptr + a_base, q10 * scale, r1, 0, T, A, A, BC, BC)
    _store(aqk_ptr + a_base, q20 * scale, r2, 0, T, A, A, BC, BC)
    _store(aqk_ptr + a_base, q21 * scale, r2, BC, T, A, A, BC, BC)
    _store(aqk_ptr + a_base, q30 * scale, r3, 0, T, A, A, BC, BC)
    _store(aqk_ptr + a_base, q31 * scale, r3, BC, T, A, A, BC, BC)
    _store(aqk_ptr + a_base, q32 * scale, r3, 2 * BC, T, A, A, BC, BC)
    beta_base = beta_ptr + _head_base(i_b, i_h, T, H, 1)
    beta1 = _load_vec_f32(beta_base, r1, T, H, BC)
    beta2 = _load_vec_f32(beta_base, r2, T, H, BC)
    beta3 = _load_vec_f32(beta_base, r3, T, H, BC)
    _merge_inverse(akk_ptr + a_base, ai_ptr + a_base, r0, T, A, k10 * beta1[:, None], k20 * beta2[:, None],
                   k21 * beta2[:, None], k30 * beta3[:, None], k31 * beta3[:, None], k32 * beta3[:, None],
                   BC, SOLVE_PRECISION)


@triton.jit
def _invert_diag_block(a_ptr, row0, col0, T, stride, BC: tl.constexpr, PRECISION: tl.constexpr):
    # (I + L)^-1 for a strictly lower 16x16 block L. L is nilpotent (L^16 = 0), so the inverse is the finite
    # series sum_k (-L)^k = (I - L)(I + L^2)(I + L^4)(I + L^8): six small products, no row-by-row loop.
    rows = tl.arange(0, BC)
    l1 = tl.where(rows[:, None] > rows[None, :], _load_f32(a_ptr, row0, col0, T, stride, stride, BC, BC), 0.0)
    l2 = tl.dot(l1, l1, input_precision=PRECISION)
    l4 = tl.dot(l2, l2, input_precision=PRECISION)
    l8 = tl.dot(l4, l4, input_precision=PRECISION)
    x = (rows[:, None] == rows[None, :]).to(tl.float32) - l1
    x += tl.dot(x, l2, input_precision=PRECISION)
    x += tl.dot(x, l4, input_precision=PRECISION)
    x += tl.dot(x, l8, input_precision=PRECISION)
    return x


@triton.jit
def _mm(a, b, DOT_PRECISION: tl.constexpr):
    return tl.dot(a, b, input_precision=DOT_PRECISION)


@triton.jit
def _merge_inverse(a, o, r0, T, S, a10, a20, a21, a30, a31, a32, BC: tl.constexpr, PRECISION: tl.constexpr):
    # Ai = (I + A)^-1 of one 64x64 unit lower-triangular chunk in 4x4 blocks of 16, given its six strictly
    # lower blocks a_ij; the diagonal blocks are read from a. Writes the whole 64x64 Ai (zeros above).
    #   Ai_ii = (I + A_ii)^-1 (a finite series, _invert_diag_block),  Ai_ij = -Ai_ii sum_{j <= m < i} A_im Ai_mj
    t00 = _invert_diag_block(a, r0, 0, T, S, BC, PRECISION)
    t11 = _invert_diag_block(a, r0 + BC, BC, T, S, BC, PRECISION)
    t22 = _invert_diag_block(a, r0 + 2 * BC, 2 * BC, T, S, BC, PRECISION)
    t33 = _invert_diag_block(a, r0 + 3 * BC, 3 * BC, T, S, BC, PRECISION)
    t10 = -_mm(t11, _mm(a10, t00, PRECISION), PRECISION)
    t21 = -_mm(t22, _mm(a21, t11, PRECISION), PRECISION)
    t32 = -_mm(t33, _mm(a32, t22, PRECISION), PRECISION)
    t20 = -_mm(t22, _mm(a20, t00, PRECISION) + _mm(a21, t10, PRECISION), PRECISION)
    t31 = -_mm(t33, _mm(a31, t11, PRECISION) + _mm(a32, t21, PRECISION), PRECISION)
    t30 = -_mm(t33, _mm(a30, t00, PRECISION) + _mm(a31, t10, PRECISION) + _mm(a32, t20, PRECISION), PRECISION)
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    _store(o, t00, r0, 0, T, S, S, BC, BC)
    _store(o, zero, r0, BC, T, S, S, BC, BC)
    _store(o, zero, r0, 2 * BC, T, S, S, BC, BC)
    _store(o, zero, r0, 3 * BC, T, S, S, BC, BC)
    _store(o, t10, r0 + BC, 0, T, S, S, BC, BC)
    _store(o, t11, r0 + BC, BC, T, S, S, BC, BC)
    _store(o, zero, r0 + BC, 2 * BC, T, S, S, BC, BC)
    _store(o, zero, r0 + BC, 3 * BC, T, S, S, BC, BC)
    _store(o, t20, r0 + 2 * BC, 0, T, S, S, BC, BC)
    _store(o, t21, r0 + 2 * BC, BC, T, S, S, BC, BC)
    _store(o, t22, r0 + 2 * BC, 2 * BC, T, S, S, BC, BC)
    _store(o, zero, r0 + 2 * BC, 3 * BC, T, S, S, BC, BC)
    _store(o, t30, r0 + 3 * BC, 0, T, S, S, BC, BC)
    _store(o, t31, r0 + 3 * BC, BC, T, S, S, BC, BC)
    _store(o, t32, r0 + 3 * BC, 2 * BC, T, S, S, BC, BC)
    _store(o, t33, r0 + 3 * BC, 3 * BC, T, S, S, BC, BC)


@cached_launch
@triton.jit
def _solve_unit_lower(akk_ptr, ai_ptr, T, H: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                      DOT_PRECISION: tl.constexpr):
    # GATE_NONE and GATE_SCALAR: Ai = (I + Akk)^-1 per chunk, every block of Akk read from memory.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    a = akk_ptr + _head_base(i_b, i_h, T, H, BT)
    S = H * BT
    r0 = i_t * BT
    _merge_inverse(a, ai_ptr + _head_base(i_b, i_h, T, H, BT), r0, T, S,
                   _load_f32(a, r0 + BC, 0, T, S, S, BC, BC), _load_f32(a, r0 + 2 * BC, 0, T, S, S, BC, BC),
                   _load_f32(a, r0 + 2 * BC, BC, T, S, S, BC, BC), _load_f32(a, r0 + 3 * BC, 0, T, S, S, BC, BC),
                   _load_f32(a, r0 + 3 * BC, BC, T, S, S, BC, BC), _load_f32(a, r0 + 3 * BC, 2 * BC, T, S, S, BC, BC),
                   BC, DOT_PRECISION)


@triton.jit
def _token_decay_to_chunk_end(g_ptr, gl_ptr, i_b, i_h, i_t, t_last, T, H: tl.constexpr, BT: tl.constexpr):
    # exp(G_C - G_r) for the rows r of chunk i_t, a gate per head (G, G_lo [B, T, H]): the decay from each token to
    # the chunk's end, a two-part span (_span), <= 1.
    b_gh = _load_vec_f32(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    b_gl = _load_vec_f32(gl_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    last = (i_b * T + t_last) * H + i_h
    return tl.exp(tl.minimum(_span(tl.load(g_ptr + last), tl.load(gl_ptr + last), b_gh, b_gl), 0.0))


@cached_launch
@triton.jit
def _wy_factors(k_ptr, v_ptr, g_ptr, gl_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, kd_ptr, ok_ptr, lo_from, T,
                H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr, BV: tl.constexpr, BKF: tl.constexpr, GATE: tl.constexpr, USE_LO: tl.constexpr,
                WRITE_KD: tl.constexpr, DOT_PRECISION: tl.constexpr, CHECK: tl.constexpr, LO_GROUP: tl.constexpr):
    # W = Ai @ (beta * exp(G) * K),  U = Ai @ (beta * V); exp(G) <= 1 (decay from the chunk start).
    # With WRITE_KD also K_dec = exp(G_C - G) * K (<= 1 factors), so the sequential state pass does no exp of its own
    # (KDA's forward, and every backward). The forward of a gate per head does not write it: its state pass scales
    # the rows of V' by the same factors instead (one per token), which saves writing K_dec and reading it back.
    # With CHECK, the value check of beta (read here once per token): outside [0, 2] or NaN clears ok_ptr.
    # For KDA launched twice, once per USE_LO, as _offdiagonal_solve (see there); a gate per head reads G_lo always
    # (one value per token: nothing to save), one program per chunk.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    if GATE == GATE_CHANNEL:
        base = _head_base(i_bh // H, i_bh % H, T, H, K)
        if USE_LO:
            flags = _chunks_with_lo(g_ptr + base, i_t, T, K, H * K, lo_from, BT, LO_GROUP, BKF)
            if tl.max(flags) > 0:
                for j in range(LO_GROUP):
                    if _group_member(flags, j, LO_GROUP) > 0:
                        i_c = i_t * LO_GROUP + j
                        _wy_chunk(k_ptr, v_ptr, g_ptr, gl_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, kd_ptr, ok_ptr, lo_from,
                                  T, i_c, i_bh, tl.minimum(i_c * BT + BT, T) - 1, H, K, V, BT, BK, BV, GATE, True,
                                  WRITE_KD, DOT_PRECISION, CHECK)
        else:
            t_last = tl.minimum(i_t * BT + BT, T) - 1
            if not _chunk_has_lo(g_ptr + base, t_last, T, K, H * K, lo_from, BKF):
                _wy_chunk(k_ptr, v_ptr, g_ptr, gl_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, kd_ptr, ok_ptr, lo_from, T,
                          i_t, i_bh, t_last, H, K, V, BT, BK, BV, GATE, False, WRITE_KD, DOT_PRECISION, CHECK)
    else:
        t_last = tl.minimum(i_t * BT + BT, T) - 1
        _wy_chunk(k_ptr, v_ptr, g_ptr, gl_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, kd_ptr, ok_ptr, lo_from, T, i_t, i_bh,
                  t_last, H, K, V, BT, BK, BV, GATE, True, WRITE_KD, DOT_PRECISION, CHECK)


@triton.jit
def _wy_chunk(k_ptr, v_ptr, g_ptr, gl_ptr, beta_ptr, ai_ptr, w_ptr, u_ptr, kd_ptr, ok_ptr, lo_from, T, i_t, i_bh,
              t_last, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
              BV: tl.constexpr, GATE: tl.constexpr, USE_LO: tl.constexpr, WRITE_KD: tl.constexpr,
              DOT_PRECISION: tl.constexpr, CHECK: tl.constexpr):
    # The work of one _wy_factors program. KDA's computes U first, then W: for KDA that order is the faster one.
    # The other kinds keep W first, the order their benchmark rows were measured in.
    i_b, i_h = i_bh // H, i_bh % H
    p_ai, m_ai = _tile(ai_ptr + _head_base(i_b, i_h, T, H, BT), i_t * BT, 0, T, BT, H * BT, BT, BT)
    b_ai = tl.load(p_ai, mask=m_ai, other=0.0)
    b_beta = _load_vec_f32(beta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    if CHECK:
        _clear_flag_where(ok_ptr, ~((b_beta >= 0) & (b_beta <= 2)))
    if GATE == GATE_CHANNEL:
        _wy_values(v_ptr, u_ptr, b_ai, b_beta, i_b, i_h, i_t, T, H, V, BT, BV, DOT_PRECISION)
    if GATE == GATE_SCALAR:
        b_gs = tl.exp(tl.minimum(_load_vec_f32(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT), 0.0))
        if WRITE_KD:
            b_kdec = _token_decay_to_chunk_end(g_ptr, gl_ptr, i_b, i_h, i_t, t_last, T, H, BT)
    kbase = _head_base(i_b, i_h, T, H, K)
    for i_k in range(0, tl.cdiv(K, BK)):
        p_k, m_k = _tile(k_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_k = tl.load(p_k, mask=m_k, other=0.0)
        b_x = b_k.to(tl.float32) * b_beta[:, None]
        p_kd, m_kd = _tile(kd_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        if GATE == GATE_SCALAR:
            b_x = b_x * b_gs[:, None]
            if WRITE_KD:
                tl.store(p_kd, (b_k.to(tl.float32) * b_kdec[:, None]).to(kd_ptr.dtype.element_ty), mask=m_kd)
        if GATE == GATE_CHANNEL:
            p_g, m_g = _tile(g_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
            b_g = tl.load(p_g, mask=m_g, other=0.0)
            b_x = b_x * tl.exp(tl.minimum(b_g, 0.0))
            g_last = _load_row(g_ptr + kbase + i_k * BK, t_last, T, K - i_k * BK, H * K, BK)
            b_gl = _lo_tile(gl_ptr + kbase, b_g, i_t * BT, i_k * BK, T, K, H * K, lo_from, USE_LO, BT, BK)
            l_last = _lo_row(gl_ptr + kbase + i_k * BK, g_last, t_last, T, K - i_k * BK, H * K, lo_from, USE_LO, BK)
            b_kd = b_k.to(tl.float32) * tl.exp(tl.minimum(_span(g_last[None, :], l_last[None, :], b_g, b_gl), 0.0))
            tl.store(p_kd, b_kd.to(kd_ptr.dtype.element_ty), mask=m_kd)
        b_w = tl.dot(b_ai.to(b_k.dtype), b_x.to(b_k.dtype), input_precision=DOT_PRECISION)
        p_w, m_w = _tile(w_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        tl.store(p_w, b_w.to(w_ptr.dtype.element_ty), mask=m_w)
    if GATE != GATE_CHANNEL:
        _wy_values(v_ptr, u_ptr, b_ai, b_beta, i_b, i_h, i_t, T, H, V, BT, BV, DOT_PRECISION)


@triton.jit
def _wy_values(v_ptr, u_ptr, b_ai, b_beta, i_b, i_h, i_t, T, H: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
               BV: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # U = Ai @ (beta * V) of one chunk, BV values at a time.
    vbase = _head_base(i_b, i_h, T, H, V)
    for i_v in range(0, tl.cdiv(V, BV)):
        p_v, m_v = _tile(v_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_v = tl.load(p_v, mask=m_v, other=0.0)
        b_xv = (b_v.to(tl.float32) * b_beta[:, None]).to(b_v.dtype)
        b_u = tl.dot(b_ai.to(b_v.dtype), b_xv, input_precision=DOT_PRECISION)
        p_u, m_u = _tile(u_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        tl.store(p_u, b_u.to(u_ptr.dtype.element_ty), mask=m_u)


@cached_launch
@triton.jit
def _state_pass(k_ptr, u_ptr, w_ptr, g_ptr, gl_ptr, h0_ptr, h_ptr, vn_ptr, ht_ptr, T, NT,
                H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                BK: tl.constexpr, BV: tl.constexpr, GATE: tl.constexpr, DELTA: tl.constexpr,
                HAS_H0: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Sequential over chunks; one program owns the float32 state block S[:, v-block] of one head.
    #   h_c = S;  V' = U - W S (delta) or V (linear);  S = diag(exp(G_C)) S + K_dec^T V'
    # For KDA k_ptr holds K_dec = exp(G_C - G) * K, written by _wy_factors. For a gate per head k_ptr is K itself
    # and the factor, one per token, scales the rows of V' instead: K_dec^T V' = K^T (exp(G_C - G) * V').
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mask_kv = (rk[:, None] < K) & (rv[None, :] < V)
    state_off = rk[:, None] * V + rv[None, :]
    if HAS_H0:
        b_s = tl.load(h0_ptr + _state_base(i_bh, K, V) + state_off, mask=mask_kv, other=0.0).to(tl.float32)
    else:
        b_s = tl.zeros([BK, BV], dtype=tl.float32)
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    for i_t in range(0, NT):
        h_c = h_ptr + _chunk_state_base(i_b, i_t, i_h, NT, H, K, V)
        tl.store(h_c + state_off, b_s.to(h_ptr.dtype.element_ty), mask=mask_kv)
        p_u, m_u = _tile(u_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_v = tl.load(p_u, mask=m_u, other=0.0)
        dtype = b_v.dtype
        b_vn = b_v
        if DELTA:
            p_w, m_w = _tile(w_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, BK)
            b_w = tl.load(p_w, mask=m_w, other=0.0)
            b_v = b_v.to(tl.float32) - tl.dot(b_w, b_s.to(dtype), input_precision=DOT_PRECISION)   # V', float32
            b_vn = b_v.to(dtype)
            p_vn, m_vn = _tile(vn_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
            tl.store(p_vn, b_vn, mask=m_vn)
        p_k, m_k = _tile(k_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, BK)
        b_k = tl.load(p_k, mask=m_k, other=0.0)
        if GATE != GATE_NONE:
            b_s = b_s * _chunk_decay(g_ptr, i_b, i_h, i_t, 0, T, H, K, BT, BK, GATE)[:, None]
        if GATE == GATE_SCALAR:
            t_last = tl.minimum(i_t * BT + BT, T) - 1
            b_decay = _token_decay_to_chunk_end(g_ptr, gl_ptr, i_b, i_h, i_t, t_last, T, H, BT)
            b_vn = (b_v.to(tl.float32) * b_decay[:, None]).to(dtype)
        b_s += tl.dot(tl.trans(b_k.to(dtype)), b_vn, input_precision=DOT_PRECISION)
    tl.store(ht_ptr + _state_base(i_bh, K, V) + state_off, b_s, mask=mask_kv)


@cached_launch
@triton.jit
def _chunk_output(q_ptr, g_ptr, h_ptr, aqk_ptr, vn_ptr, o_ptr, scale, T, NT,
                  H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                  BK: tl.constexpr, BV: tl.constexpr, GATE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # O = scale * (exp(G) * Q) h + Aqk V'   (Aqk already carries the scale and the causal mask)
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    h_base = _chunk_state_base(i_b, i_t, i_h, NT, H, K, V)
    acc = tl.zeros([BT, BV], dtype=tl.float32)
    if GATE == GATE_SCALAR:
        p_g, m_g = _vec(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        b_gs = tl.exp(tl.minimum(tl.load(p_g, mask=m_g, other=0.0), 0.0))
    for i_k in range(0, tl.cdiv(K, BK)):
        p_q, m_q = _tile(q_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        p_h, m_h = _tile(h_ptr + h_base, i_k * BK, i_v * BV, K, V, V, BK, BV)
        b_q = tl.load(p_q, mask=m_q, other=0.0)
        b_h = tl.load(p_h, mask=m_h, other=0.0)
        if GATE == GATE_SCALAR:
            b_q = (b_q.to(tl.float32) * b_gs[:, None]).to(b_h.dtype)
        if GATE == GATE_CHANNEL:
            p_g, m_g = _tile(g_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
            b_eg = tl.exp(tl.minimum(tl.load(p_g, mask=m_g, other=0.0), 0.0))
            b_q = (b_q.to(tl.float32) * b_eg).to(b_h.dtype)
        acc += tl.dot(b_q.to(b_h.dtype), b_h, input_precision=DOT_PRECISION)
    acc = acc * scale
    p_a, m_a = _tile(aqk_ptr + _head_base(i_b, i_h, T, H, BT), i_t * BT, 0, T, BT, H * BT, BT, BT)
    p_vn, m_vn = _tile(vn_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
    b_vn = tl.load(p_vn, mask=m_vn, other=0.0)
    rows = tl.arange(0, BT)
    b_a = tl.where(rows[:, None] >= rows[None, :], tl.load(p_a, mask=m_a, other=0.0), 0.0)
    acc += tl.dot(b_a.to(b_vn.dtype), b_vn, input_precision=DOT_PRECISION)
    p_o, m_o = _tile(o_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
    tl.store(p_o, acc.to(o_ptr.dtype.element_ty), mask=m_o)


GATE_OF_KIND = {"linear_attention": GATE_NONE.value, "delta_rule": GATE_NONE.value,
                "gated_delta_rule": GATE_SCALAR.value, "kda": GATE_CHANNEL.value}
DELTA_OF_KIND = {"linear_attention": False, "delta_rule": True, "gated_delta_rule": True, "kda": True}


def cdiv(a: int, b: int) -> int:
    """ceil(a / b), for grids and chunk counts on the host. triton.cdiv and triton.next_power_of_2 are constexpr
    functions, and each call of one from Python unwraps its arguments first: host time, paid several times per
    forward, and at small shapes the forward is host-bound."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1), on the host; see cdiv."""
    return 1 << max(n - 1, 0).bit_length()


def _block(n: int) -> int:
    """Tile width for an axis of n: a power of two (tl.arange), at least 16 (the smallest tl.dot operand)."""
    return max(16, next_power_of_2(n))


def dot_precision(dtype) -> str:
    """tl.dot input precision: exact float32 ("ieee") for float32 inputs, TF32 tensor cores otherwise.

    On Hopper a float32 tl.dot defaults to TF32 (10-bit mantissa); that made a float32 model drift, so
    float32 runs ask for IEEE products. In bf16/fp16 runs the setting only touches the float32
    intermediates (decayed keys, the A matrices' gradients), where TF32 keeps the tensor cores busy; the
    triangular solve takes its own (solve_precision).
    """
    return "ieee" if dtype == torch.float32 else "tf32"


# The triangular inverse (_merge_inverse) amplifies rounding in its inputs. Akk is float32 for every input dtype;
# TF32 products round it and each partial inverse to a 10-bit mantissa. That is below what bf16 inputs carry (7 bits),
# so bf16 keeps the faster TF32 solve, as flash-linear-attention does. It is exactly what fp16 inputs carry: where keys
# point alike and the decay is weak, I + Akk is ill-conditioned, its inverse magnifies the rounding, and fp16 outputs
# and gradients missed the reference's tolerances by 2-4x. fp16 and float32 inputs therefore get IEEE products.
SOLVE_PRECISION = "ieee"
BF16_SOLVE_PRECISION = "tf32"
# Where Aqk and Ai are stored for bf16/fp16 inputs: "input" (their own dtype) or "float32". The forward rounds
# both to the input dtype anyway where it uses them (tl.dot operands beside V' and K), so its output is the
# same; stored so, each is half the bytes to write and to read back, which the forward and the backward both gain
# from. The backward reads them rounded: the error of dv and dbeta against the float32 pipeline grows a little
# (KDA; still of the order of bf16's rounding), the others' stays. flash-linear-attention stores them so too.
# Akk, the solve's input, stays float32.
A_STORAGE = "input"


def solve_precision(dtype) -> str:
    """Input precision of the triangular solve's products for inputs of ``dtype`` (see SOLVE_PRECISION)."""
    return BF16_SOLVE_PRECISION if dtype == torch.bfloat16 else SOLVE_PRECISION


def a_dtype(dtype):
    """Storage dtype of Aqk and Ai for inputs of ``dtype``."""
    return dtype if A_STORAGE == "input" and dtype != torch.float32 else torch.float32

# Launch settings of each stage: a few explicit numbers, no autotuner. They were picked on an H200
# with benchmarks/probes/gpu_profile.py, which times each stage under other settings (it edits this dict).
LAUNCH = {
    "cumsum": dict(num_warps=1),
    "intra": dict(num_warps=4),
    "solve": dict(num_warps=2),
    "diagonal": dict(num_warps=1),
    "offdiagonal_solve": dict(num_warps=1, num_stages=2),
    "wy": dict(num_warps=4),
    "wy_channel": dict(num_warps=4, num_stages=1),  # _wy_factors for KDA
    "state": dict(num_warps=4),
    "output": dict(num_warps=4),
}
# KDA's intra-chunk stage: channel-slice width of _offdiagonal_solve. 16-wide slices at 1 warp and 2 stages are
# faster than 32-wide slices at 2 warps (a likely reason, not checked in the compiled code: the twelve 16x16
# accumulators live through the whole loop, and a narrower slice leaves them more of the registers).
# KDA's _wy_factors is faster at 1 pipeline stage than at 3; Gated DeltaNet's and DeltaNet's are as fast or a
# little faster at 3, so they keep "wy".
# _diagonal_blocks: channels per slice, and the largest |G_r - G_a| its anchored factors may carry. A kept pair's
# product is its decay, <= 1; a masked pair's stays below e^60 = 1.1e26 times q.k, so no sum overflows either.
# Full width (all channels in one slice) at 1 warp is the fastest setting found, although the compiler spills
# registers there; slices of 32 or 64 channels, and 2 or 4 warps, were slower.
DIAGONAL_BK = 128
DIAGONAL_SPAN_LIMIT = 30.0
OFFDIAGONAL_BK = 16
# Channels per program of _chunk_cumsum: a 128-wide row is 512 contiguous bytes, 4 per thread of one warp.
CUMSUM_KEY_TILE = 128
# Rows per tile of _chunk_cumsum (see there for the measurements).
CUMSUM_ROWS = 8
# Chunks per program in the USE_LO launch of KDA's readers of G_lo (_offdiagonal_solve, _wy_factors; see there).
# Where no chunk has G_lo (bf16 inputs with gates of ordinary strength) each of those programs only reads its chunks'
# last rows of G and ends, and at 1 to 3 resident programs per multiprocessor (their registers) one program per chunk
# took several waves to do that. Four chunks per program cut those programs fourfold; where every chunk has G_lo the
# fewer programs each work on four chunks in turn, about as many waves as before at the benchmark's shapes.
LO_GROUP = 4
# Value-block widths: the output stage's (KDA's apart: it reads a [64, BK] float32 tile of G per value block, so a
# block of all 128 values reads it once, which is faster than reading it per 64-wide block);
# the state pass's (None: state_block_v picks it from the grid size).
BLOCK_V = {"output": 64, "output_channel": 128, "state": None}


# For bf16/fp16 inputs stage 1 keeps G_lo only where |G| >= this (see gate_lo_from for the bound).
LO_FROM_HALF = 256.0


# Streaming multiprocessors of the H200, the machine the launch settings were chosen on.
SM_COUNT = 132


def state_block_v(heads, V, widest):
    """Value-block width of a sequential state pass (forward or reverse) over ``heads`` = B*H heads.

    Such a pass is latency bound: one program per (value block, head) walks all chunks in order, so with few
    heads the grid must be cut finer to keep the GPU busy. Start at ``widest`` and halve, down to 16, while
    the grid holds fewer programs than half the SMs: with one long sequence, the forward and reverse passes both run
    faster on 16-wide blocks than on 32-wide ones."""
    width = widest
    while width > 16 and heads * cdiv(V, width) < SM_COUNT // 2:
        width //= 2
    return width


def gate_lo_from(kind, dtype) -> float:
    """Stage 1 writes G_lo only where |G| >= this, for gates of ``kind`` beside inputs of ``dtype``.

    Without G_lo a span G_r - G_c is the difference of two float32 roundings, off by at most one float32 step
    of the larger |G|: for |G| < 256 that is 2^-16, so exp(span) is off by 1.5e-5 relative, 256 times below
    bf16's rounding (2^-8) and 32 times below fp16's (2^-11) in the outputs it feeds. Where a sum reaches 256
    (a gate of -1e4, -inf floored to -1024, strong gates over a chunk) G_lo is written and the span stays exact.
    So for KDA in bf16/fp16 stage 1 writes half the bytes (G only, where sums stay below 256), and the stages
    that read G_lo take it only where it was written (_load_lo). Float32 inputs keep it everywhere (0.0), and so
    does a gate per head (Gated DeltaNet): its G_lo is one value per head and token, nothing worth saving."""
    if GATE_OF_KIND[kind] != GATE_CHANNEL.value or dtype == torch.float32:
        return 0.0
    return LO_FROM_HALF


# Where G_lo lives; its entries below lo_from are never written (a test fills them with NaN to prove no stage reads
# them).
_allocate_lo = torch.empty_like


def gate_sums(g, kind, values_ok=None, lo_from=0.0):
    """Stage 1 alone: G = the chunk-local cumulative sum of g as two float32 parts (G, G_lo), see _chunk_cumsum.
    Returns (None, None) without a gate. With ``values_ok`` (a 0-d int32 tensor) the kernel sets it to 0
    if a gate is not <= 0. G_lo is written only where |G| >= ``lo_from`` (gate_lo_from); read it with _load_lo."""
    gate = GATE_OF_KIND[kind]
    if gate == GATE_NONE.value:
        return None, None
    B, T, H = g.shape[:3]
    G = torch.empty(g.shape, device=g.device, dtype=torch.float32)
    G_lo = _allocate_lo(G)
    gate_width = g.shape[3] if gate == GATE_CHANNEL.value else 1   # a gate per head: one "channel"
    bk_sum = min(_block(gate_width), CUMSUM_KEY_TILE)
    grid = (cdiv(gate_width, bk_sum), cdiv(T, CHUNK), B * H)
    _chunk_cumsum[grid](g, G, G_lo, values_ok if values_ok is not None else G, lo_from, T, H, gate_width, CHUNK, bk_sum,
                        CUMSUM_ROWS, values_ok is not None, **LAUNCH["cumsum"])
    return G, G_lo


def chunk_prepare(kind, q, k, v, g, beta, scale, values_ok=None):
    """Stages 1-4 (chunk-parallel): G (as G + G_lo, see _chunk_cumsum), Aqk, and for the delta kinds
    Akk, Ai, W, U, K_dec. Returns a dict; absent entries are None. ``values_ok``: see chunk_forward."""
    gate, delta = GATE_OF_KIND[kind], DELTA_OF_KIND[kind]
    B, T, H, K = q.shape
    BT, BC = CHUNK, SUB
    BK = _block(K)
    NT = cdiv(T, BT)
    dev, prec = q.device, dot_precision(q.dtype)

    lo_from = gate_lo_from(kind, q.dtype)
    G, G_lo = gate_sums(g, kind, values_ok, lo_from)
    beta_arg = beta if beta is not None else q  # unused placeholder pointer (linear attention)

    aqk = torch.empty(B, T, H, BT, device=dev, dtype=a_dtype(q.dtype))
    akk = torch.empty(B, T, H, BT, device=dev, dtype=torch.float32) if delta else aqk
    g_arg = G if G is not None else q
    gl_arg = G_lo if G_lo is not None else q
    ai = torch.empty(B, T, H, BT, device=dev, dtype=a_dtype(q.dtype)) if delta else None
    if gate == GATE_CHANNEL.value:  # always a delta kind (KDA); the diagonal blocks' walk sums the raw gates itself
        _diagonal_blocks[(cdiv(T, BC), B * H)](q, k, g, G, G_lo, beta, aqk, akk, scale, lo_from, T, H, K, BT,
                                               BC, min(BK, DIAGONAL_BK), DIAGONAL_SPAN_LIMIT, prec,
                                               **LAUNCH["diagonal"])
        for use_lo in lo_launches(lo_from):
            _offdiagonal_solve[lo_group_grid(use_lo, NT, B * H)](q, k, G, G_lo, beta, aqk, akk, ai, scale, lo_from, T,
                                                                 H, K, BT, BC, min(BK, OFFDIAGONAL_BK), BK, use_lo,
                                                                 prec, solve_precision(q.dtype), LO_GROUP,
                                                                 **LAUNCH["offdiagonal_solve"])
    else:
        _intra_chunk_dense[(NT, B * H)](q, k, g_arg, gl_arg, beta_arg, aqk, akk, scale, T, H, K, BT, min(BK, KEY_TILE),
                                        gate, delta, prec, **LAUNCH["intra"])
        if delta:
            _solve_unit_lower[(NT, B * H)](akk, ai, T, H, BT, BC, solve_precision(q.dtype), **LAUNCH["solve"])
    parts = {"G": G, "G_lo": G_lo, "lo_from": lo_from, "aqk": aqk, "ai": ai, "w": None, "u": None, "kd": k}
    if delta:
        # A gate per head decays the values in the state pass (see _state_pass): no K_dec to write.
        parts["w"], parts["u"], parts["kd"] = wy_factors(kind, k, v, G, G_lo, beta, ai, values_ok, lo_from,
                                                         need_kd=gate != GATE_SCALAR.value)
    return parts


def lo_group_grid(use_lo, NT, heads):
    """Grid of a reader of KDA's G_lo: one program per chunk without USE_LO, one per LO_GROUP chunks with it."""
    return (cdiv(NT, LO_GROUP) if use_lo else NT, heads)


def lo_launches(lo_from):
    """The USE_LO values a reader of KDA's G_lo is launched with (see _chunk_has_lo): both where stage 1 wrote G_lo
    only from lo_from up, only True where it wrote it everywhere (lo_from = 0: float32 inputs)."""
    return (False, True) if lo_from > 0 else (True,)


def wy_factors(kind, k, v, G, G_lo, beta, ai, values_ok=None, lo_from=0.0, need_kd=True):
    """Stage 4 alone: W, U and K_dec from Ai = (I + Akk)^-1 (the backward reuses the forward's Ai).
    With ``values_ok`` the kernel sets it to 0 if a beta is outside [0, 2]. ``lo_from``: the one stage 1 wrote
    G_lo with (gate_sums). ``need_kd=False`` returns K in place of K_dec and writes none; only the forward of a
    gate per head asks for that, because its state pass decays the values instead (_state_pass)."""
    gate = GATE_OF_KIND[kind]
    B, T, H, K = k.shape
    V = v.shape[-1]
    BK, BV = _block(K), min(VALUE_TILE, _block(V))
    NT = cdiv(T, CHUNK)
    w = torch.empty_like(k)
    u = torch.empty_like(v)
    write_kd = gate != GATE_NONE.value and need_kd
    kd = torch.empty_like(k) if write_kd else k
    for use_lo in lo_launches(lo_from) if gate == GATE_CHANNEL.value else (False,):
        grid = lo_group_grid(use_lo, NT, B * H)   # a gate per head: one program per chunk
        _wy_factors[grid](k, v, G if G is not None else k, G_lo if G_lo is not None else k, beta, ai, w, u, kd,
                          values_ok if values_ok is not None else w, lo_from, T, H, K, V, CHUNK,
                          min(BK, KEY_TILE), BV, BK, gate, use_lo, write_kd, dot_precision(k.dtype),
                          values_ok is not None, LO_GROUP,
                          **LAUNCH["wy_channel" if gate == GATE_CHANNEL.value else "wy"])
    return w, u, kd


def chunk_forward(kind, q, k, v, g, beta, scale, initial_state, *, keep_intermediates=False, values_ok=None):
    """Run the pipeline. q, k [B,T,H,K], v [B,T,H,V] contiguous, one dtype. Returns o, final state
    (float32) and, when asked, the intermediates the backward pass reuses (G, G_lo, h, V', Aqk, Ai; and lo_from,
    where stage 1 wrote G_lo, see gate_lo_from).

    ``values_ok``: a 0-d int32 tensor, or None. When given, the kernels that read every gate and every
    beta once anyway (stage 1 and stage 4) also check them, and set it to 0 when a gate is not <= 0 or a
    beta lies outside [0, 2] (NaN fails both): the value checks then cost no extra pass over the inputs
    and no host synchronisation (the caller queues one assert on the flag)."""
    gate, delta = GATE_OF_KIND[kind], DELTA_OF_KIND[kind]
    B, T, H, K = q.shape
    V = v.shape[-1]
    BT = CHUNK
    BK, BV = _block(K), min(VALUE_TILE, _block(V))
    NT = cdiv(T, BT)
    dev, dt, prec = q.device, q.dtype, dot_precision(q.dtype)

    parts = chunk_prepare(kind, q, k, v, g, beta, scale, values_ok)
    G, aqk = parts["G"], parts["aqk"]
    g_arg = G if G is not None else q
    if delta:
        w, u, kd = parts["w"], parts["u"], parts["kd"]
        vn = torch.empty_like(v)
    else:
        w, u, vn, kd = k, v, v, k
    h = torch.empty(B, NT, H, K, V, device=dev, dtype=dt)
    ht = torch.empty(B, H, K, V, device=dev, dtype=torch.float32)
    h0 = initial_state if initial_state is not None else ht
    BV_state = min(BLOCK_V["state"] or state_block_v(B * H, V, BV), _block(V))
    gl_arg = parts["G_lo"] if parts["G_lo"] is not None else q
    _state_pass[(cdiv(V, BV_state), B * H)](kd, u, w, g_arg, gl_arg, h0, h, vn, ht, T, NT, H, K, V, BT, BK,
                                            BV_state,
                                            gate, delta, initial_state is not None, prec, **LAUNCH["state"])
    o = torch.empty_like(v)
    BV_out = min(BLOCK_V["output_channel" if gate == GATE_CHANNEL.value else "output"], _block(V))
    _chunk_output[(cdiv(V, BV_out), NT, B * H)](q, g_arg, h, aqk, vn, o, scale, T, NT, H, K, V, BT,
                                                min(BK, KEY_TILE), BV_out, gate, prec, **LAUNCH["output"])
    if keep_intermediates:
        return o, ht, {"G": G, "G_lo": parts["G_lo"], "lo_from": parts["lo_from"], "h": h, "vn": vn, "aqk": aqk,
                       "ai": parts["ai"]}
    return o, ht
