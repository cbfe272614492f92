"""Backward of the chunked pipeline, every stage a Triton kernel (the default backward of ``chunked``).

Forward recap (chunk_fwd.py), per chunk of BT tokens, G the chunk-local cumulative log-gate:
    X_w = diag(beta) exp(G) K,  X_u = diag(beta) V,  Ai = (I + Akk)^-1,  W = Ai X_w,  U = Ai X_u
    V'  = U - W h_c,   O = scale (exp(G) Q) h_c + Aqk V',   h_{c+1} = diag(exp(G_C)) h_c + K_dec^T V'
    K_dec = exp(G_C - G) K,  Aqk = scale tril(Q K^T (.) decay),  Akk = diag(beta) strict_tril(K K^T (.) decay)
The forward keeps G, Aqk, Ai, h_c and V'; W and K_dec are recomputed from Ai (forward stage 4).
Backward stages, one kernel each (dX is the float32 gradient of X):
  1. _bwd_local_output   dV'_o = Aqk^T dO,   dAqk = scale causal(dO V'^T)   (scale folded in for stage 5)
  2. _bwd_state_pass_halves  reverse over chunks, D = dh_{c+1}:  dV' = dV'_o + K_dec D,
                         D <- exp(G_C) D + scale (exp(G) Q)^T dO - W^T dV'   (D after chunk 0 is d h_0);
                         D in float32 as two halves of key rows, products in the inputs' dtype
                         (with a gate, Q arrives as exp(G) Q, from _gated_queries)
  3. _bwd_state_grads    dQ = scale exp(G) dO h^T,  dK = exp(G_C - G) V' D^T,  dW = -dV' h^T,
                         dG = Q dQ - K dK on every row, plus sum_r K dK + exp(G_C) sum_v h D on the row of G_C
  4. _bwd_wy             dX_u = Ai^T dV' -> dv = beta dX_u;  dX_w = Ai^T dW -> dk, dG, dbeta;
                         dAi = dV' X_u^T + dW X_w^T;  dAkk = -Ai^T dAi Ai^T on the strict lower triangle
  5. _bwd_intra          dAqk, dAkk through the decayed products into dq, dk, dG, dbeta (per-channel gate:
                         16-row sub-blocks, anchored decays; the diagonal block in anchored levels);
                         _bwd_intra_dense for no gate or one per head
  6. _bwd_gate_cumsum    dg = reverse chunk-local cumulative sum of dG (summed over channels for one gate per head)
A gate per head is read as one value per row in every stage (never broadcast to K channels in memory), and
its gradient is summed over the channels inside the kernels; without a gate G = 0.
Every exponent is a difference G_r - G_i with i <= r, or is split through an anchor row a (i <= a <= r)
into two factors <= 1, exactly as in the forward; exp(G_r) exp(-G_i) is never formed, and every difference
is taken on both parts of G (_span, with the forward's G_lo), so small gates after a large one keep their digits.
G_lo is read through _load_lo_whole (see there why not _load_lo, the forward's form): for KDA in bf16/fp16 stage 1
wrote it only where |G| >= 256 (chunk_fwd.gate_lo_from).
"""

from __future__ import annotations

import torch

from . import _ensure_backend

_ensure_backend()  # on CPU Triton's interpreter must be on before triton is imported (see k3lite.kernels)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._launch import cached_launch  # noqa: E402
from .chunk_fwd import (  # noqa: E402
    CHUNK,
    DELTA_OF_KIND,
    GATE_CHANNEL,
    GATE_NONE,
    GATE_OF_KIND,
    GATE_SCALAR,
    KEY_TILE,
    SUB,
    VALUE_TILE,
    _block,
    _chunk_decay,
    _chunk_state_base,
    _head_base,
    _lo_kept,
    _load_f32,
    _load_lo_row_whole,
    _load_lo_whole,
    _load_row,
    _load_vec_f32,
    _span,
    _state_base,
    _store,
    _tile,
    _vec,
    cdiv,
    dot_precision,
    state_block_v,
    wy_factors,
)


@cached_launch
@triton.jit
def _bwd_local_output(aqk_ptr, vn_ptr, do_ptr, dv_ptr, daqk_ptr, scale, T, H: tl.constexpr, V: tl.constexpr,
                      BT: tl.constexpr, BV: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Stage 1, one program per chunk: over value blocks, dV'_o = Aqk^T dO (into dv_ptr) and
    # dAqk = dO V'^T; stored as scale * causal(dAqk), the gradient of the unscaled decayed Q K^T.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    a_base = _head_base(i_b, i_h, T, H, BT)
    vbase = _head_base(i_b, i_h, T, H, V)
    rows = tl.arange(0, BT)
    causal = rows[:, None] >= rows[None, :]
    b_a = tl.where(causal, _load_f32(aqk_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT), 0.0)
    d_a = tl.zeros([BT, BT], dtype=tl.float32)
    for i_v in range(0, tl.cdiv(V, BV)):
        b_do = _load_f32(do_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_vn = _load_f32(vn_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_dv = tl.dot(tl.trans(b_a), b_do, input_precision=DOT_PRECISION)
        _store(dv_ptr + vbase, b_dv, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        d_a += tl.dot(b_do, tl.trans(b_vn), input_precision=DOT_PRECISION)
    _store(daqk_ptr + a_base, tl.where(causal, d_a * scale, 0.0), i_t * BT, 0, T, BT, H * BT, BT, BT)


@triton.jit
def _load_t(base, row0, col0, n_rows, n_cols, stride, BR: tl.constexpr, BC: tl.constexpr):
    # The [BR, BC] tile at (row0, col0), read as its transpose [BC, BR] (the products then need no
    # transpose in registers); the inputs' dtype.
    r = row0 + tl.arange(0, BR)
    c = col0 + tl.arange(0, BC)
    return tl.load(base + r[None, :] * stride + c[:, None], mask=(r[None, :] < n_rows) & (c[:, None] < n_cols),
                   other=0.0)


@cached_launch
@triton.jit
def _bwd_state_pass_halves(q_ptr, g_ptr, kd_ptr, w_ptr, do_ptr, dv_ptr, dht_ptr, dh_ptr, dh0_ptr, scale, T, NT,
                           H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                           BV: tl.constexpr, GATE: tl.constexpr, DELTA: tl.constexpr, HAS_DHT: tl.constexpr,
                           DOT_PRECISION: tl.constexpr):
    # Stage 2, sequential in reverse; one program owns D[:, v-block] of one head (D = dL/dh_{c+1}):
    #   dh[c] = D;  dV' = dV'_o + K_dec D (in place in dv_ptr);  D = exp(G_C) D + scale (exp(G) Q)^T dO - W^T dV'
    # D is kept in float32 as two halves of BK/2 key rows, D1 and D2, and every product takes the inputs' dtype
    # (bf16 tensor cores in a bf16 run). The pass is sequential, so its time is the latency of one chunk's
    # step, and half tiles in the inputs' dtype make that step several times shorter than whole float32 [BK, BV]
    # tiles do. With a gate, q_ptr holds exp(G) Q already (_gated_queries):
    # gating Q inside the loop made Triton 3.6 and 3.7.1 compile this kernel into out-of-range shared-memory
    # accesses (compute-sanitizer, GPU tests at T = 1).
    HALF: tl.constexpr = BK // 2
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    r1 = tl.arange(0, HALF)
    r2 = HALF + r1
    rv = i_v * BV + tl.arange(0, BV)
    m1 = (r1[:, None] < K) & (rv[None, :] < V)
    m2 = (r2[:, None] < K) & (rv[None, :] < V)
    off1 = r1[:, None] * V + rv[None, :]
    off2 = r2[:, None] * V + rv[None, :]
    if HAS_DHT:
        d1 = tl.load(dht_ptr + _state_base(i_bh, K, V) + off1, mask=m1, other=0.0)
        d2 = tl.load(dht_ptr + _state_base(i_bh, K, V) + off2, mask=m2, other=0.0)
    else:
        d1 = tl.zeros([HALF, BV], dtype=tl.float32)
        d2 = tl.zeros([HALF, BV], dtype=tl.float32)
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    # The two loads of a chunk that are no tl.dot operand, dV'_o and the chunk's decay, are not pipelined by
    # Triton: issued in the chunk that uses them, their latency sat on the sequential chain. They are issued one
    # chunk ahead instead (the last iteration re-reads chunk 0, unused), which with num_stages=3 takes their
    # latency off the chain: the pass gets markedly faster for every kind.
    b_dv_next = _load_f32(dv_ptr + vbase, (NT - 1) * BT, i_v * BV, T, V, H * V, BT, BV)
    dec1_next = _chunk_decay(g_ptr, i_b, i_h, NT - 1, 0, T, H, K, BT, HALF, GATE)
    dec2_next = _chunk_decay(g_ptr, i_b, i_h, NT - 1, HALF, T, H, K, BT, HALF, GATE)
    for i in range(0, NT):
        i_t = NT - 1 - i
        b_dv, dec1, dec2 = b_dv_next, dec1_next, dec2_next
        i_next = tl.maximum(i_t - 1, 0)
        b_dv_next = _load_f32(dv_ptr + vbase, i_next * BT, i_v * BV, T, V, H * V, BT, BV)
        dec1_next = _chunk_decay(g_ptr, i_b, i_h, i_next, 0, T, H, K, BT, HALF, GATE)
        dec2_next = _chunk_decay(g_ptr, i_b, i_h, i_next, HALF, T, H, K, BT, HALF, GATE)
        h_off = _chunk_state_base(i_b, i_t, i_h, NT, H, K, V)
        tl.store(dh_ptr + h_off + off1, d1.to(dh_ptr.dtype.element_ty), mask=m1)
        tl.store(dh_ptr + h_off + off2, d2.to(dh_ptr.dtype.element_ty), mask=m2)
        p_k1, m_k1 = _tile(kd_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, HALF)
        p_k2, m_k2 = _tile(kd_ptr + kbase, i_t * BT, HALF, T, K, H * K, BT, HALF)
        b_k1 = tl.load(p_k1, mask=m_k1, other=0.0)
        dtype = b_k1.dtype
        b_dv += tl.dot(b_k1, d1.to(dtype), input_precision=DOT_PRECISION)
        b_dv += tl.dot(tl.load(p_k2, mask=m_k2, other=0.0), d2.to(dtype), input_precision=DOT_PRECISION)
        _store(dv_ptr + vbase, b_dv, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        if GATE != GATE_NONE:
            d1 = d1 * dec1[:, None]
            d2 = d2 * dec2[:, None]
        b_q1 = _load_t(q_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, HALF)
        b_q2 = _load_t(q_ptr + kbase, i_t * BT, HALF, T, K, H * K, BT, HALF)
        p_do, m_do = _tile(do_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_do = tl.load(p_do, mask=m_do, other=0.0).to(dtype)
        d1 += scale * tl.dot(b_q1, b_do, input_precision=DOT_PRECISION)
        d2 += scale * tl.dot(b_q2, b_do, input_precision=DOT_PRECISION)
        if DELTA:
            b_dvn = b_dv.to(dtype)
            d1 -= tl.dot(_load_t(w_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, HALF), b_dvn,
                         input_precision=DOT_PRECISION)
            d2 -= tl.dot(_load_t(w_ptr + kbase, i_t * BT, HALF, T, K, H * K, BT, HALF), b_dvn,
                         input_precision=DOT_PRECISION)
    tl.store(dh0_ptr + _state_base(i_bh, K, V) + off1, d1, mask=m1)
    tl.store(dh0_ptr + _state_base(i_bh, K, V) + off2, d2, mask=m2)


@cached_launch
@triton.jit
def _bwd_state_pass_whole(q_ptr, g_ptr, kd_ptr, w_ptr, do_ptr, dv_ptr, dht_ptr, dh_ptr, dh0_ptr, scale, T, NT,
                          H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                          BV: tl.constexpr, GATE: tl.constexpr, DELTA: tl.constexpr, HAS_DHT: tl.constexpr,
                          DOT_PRECISION: tl.constexpr):
    # Stage 2 as _bwd_state_pass_halves computes it, in its plainest form: D = dL/dh_{c+1} is one float32
    # [BK, BV] tile, every operand is float32 (exact products for float32 inputs, TF32 otherwise), and nothing
    # is loaded ahead. Slower than the halves on long sequences, and correct wherever the halves are not
    # (see use_state_pass_halves).
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mask_kv = (rk[:, None] < K) & (rv[None, :] < V)
    state_off = rk[:, None] * V + rv[None, :]
    if HAS_DHT:
        d = tl.load(dht_ptr + _state_base(i_bh, K, V) + state_off, mask=mask_kv, other=0.0)
    else:
        d = tl.zeros([BK, BV], dtype=tl.float32)
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    for i in range(0, NT):
        i_t = NT - 1 - i
        h_off = _chunk_state_base(i_b, i_t, i_h, NT, H, K, V)
        tl.store(dh_ptr + h_off + state_off, d.to(dh_ptr.dtype.element_ty), mask=mask_kv)
        b_kd = _load_f32(kd_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, BK)
        b_dv = _load_f32(dv_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_dv += tl.dot(b_kd, d, input_precision=DOT_PRECISION)
        _store(dv_ptr + vbase, b_dv, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        if GATE != GATE_NONE:
            d = d * _chunk_decay(g_ptr, i_b, i_h, i_t, 0, T, H, K, BT, BK, GATE)[:, None]
        b_q = _load_f32(q_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, BK)
        b_do = _load_f32(do_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        d += scale * tl.dot(tl.trans(b_q), b_do, input_precision=DOT_PRECISION)
        if DELTA:
            b_w = _load_f32(w_ptr + kbase, i_t * BT, 0, T, K, H * K, BT, BK)
            d -= tl.dot(tl.trans(b_w), b_dv, input_precision=DOT_PRECISION)
    tl.store(dh0_ptr + _state_base(i_bh, K, V) + state_off, d, mask=mask_kv)


@cached_launch
@triton.jit
def _gated_queries(q_ptr, g_ptr, out_ptr, n, PER_GATE: tl.constexpr, BLOCK: tl.constexpr):
    # exp(G) Q in the inputs' dtype, element by element (G <= 0, so every factor is <= 1): the reverse state
    # pass of the gated kinds reads it as the ungated pass reads Q. PER_GATE elements of Q share one G: 1 for
    # a gate per channel, K for a gate per head.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    b_q = tl.load(q_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b_g = tl.load(g_ptr + offs // PER_GATE, mask=mask, other=0.0)
    tl.store(out_ptr + offs, (b_q * tl.exp(tl.minimum(b_g, 0.0))).to(out_ptr.dtype.element_ty), mask=mask)


@cached_launch
@triton.jit
def _bwd_state_grads(q_ptr, k_ptr, g_ptr, gl_ptr, h_ptr, dh_ptr, vn_ptr, do_ptr, dv_ptr, dq_ptr, dk_ptr, dw_ptr, dg_ptr,
                     scale, lo_from, T, NT, H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, BV: tl.constexpr, GATE: tl.constexpr, DELTA: tl.constexpr,
                     DOT_PRECISION: tl.constexpr):
    # Stage 3, one program per (key block, chunk): over value blocks accumulate
    #   P = dO h^T,  R = V' D^T,  dW = -dV' h^T,  dkeep = sum_v h * D   (h = h_c, D = dh_{c+1})
    # then dQ = scale exp(G) P,  dK = exp(G_C - G) R,  dG = Q dQ - K dK (+ sum_r K dK + exp(G_C) dkeep on row G_C).
    # A gate per head (g_ptr, gl_ptr: G, G_lo [B, T, H]) is read as one value per row, and its dG is summed over
    # this program's channels: dg_ptr is then [B, T, H, cdiv(K, BK)], one partial sum per key block.
    GATED: tl.constexpr = GATE != GATE_NONE
    i_k, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_h = i_bh // H, i_bh % H
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    h_base = _chunk_state_base(i_b, i_t, i_h, NT, H, K, V)
    p_acc = tl.zeros([BT, BK], dtype=tl.float32)
    r_acc = tl.zeros([BT, BK], dtype=tl.float32)
    dw = tl.zeros([BT, BK], dtype=tl.float32)
    dkeep = tl.zeros([BK], dtype=tl.float32)
    for i_v in range(0, tl.cdiv(V, BV)):
        # h, D, dO and V' arrive in the inputs' dtype and go into the products as they are.
        p_h, m_h = _tile(h_ptr + h_base, i_k * BK, i_v * BV, K, V, V, BK, BV)
        b_h = tl.load(p_h, mask=m_h, other=0.0)
        dtype = b_h.dtype
        p_d, m_d = _tile(dh_ptr + h_base, i_k * BK, i_v * BV, K, V, V, BK, BV)
        b_d = tl.load(p_d, mask=m_d, other=0.0)
        p_do, m_do = _tile(do_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_do = tl.load(p_do, mask=m_do, other=0.0).to(dtype)
        p_vn, m_vn = _tile(vn_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_vn = tl.load(p_vn, mask=m_vn, other=0.0)
        p_acc += tl.dot(b_do, tl.trans(b_h), input_precision=DOT_PRECISION)
        r_acc += tl.dot(b_vn, tl.trans(b_d), input_precision=DOT_PRECISION)
        if DELTA:
            b_dv = _load_f32(dv_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
            dw -= tl.dot(b_dv.to(dtype), tl.trans(b_h), input_precision=DOT_PRECISION)
        if GATED:
            dkeep += tl.sum(b_h.to(tl.float32) * b_d.to(tl.float32), axis=1)
    b_q = _load_f32(q_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    b_k = _load_f32(k_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    dq = scale * p_acc
    dk = r_acc
    if GATED:
        t_last = tl.minimum(i_t * BT + BT, T) - 1
        if GATE == GATE_SCALAR:   # [BT, 1] columns and scalars, broadcast over the channels
            gbase = _head_base(i_b, i_h, T, H, 1)
            b_g = _load_vec_f32(g_ptr + gbase, i_t * BT, T, H, BT)[:, None]
            b_gl = _load_vec_f32(gl_ptr + gbase, i_t * BT, T, H, BT)[:, None]
            g_last = tl.load(g_ptr + gbase + t_last * H)
            l_last = tl.load(gl_ptr + gbase + t_last * H)
        else:
            b_g = _load_f32(g_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
            b_gl = _load_lo_whole(gl_ptr + kbase, b_g, i_t * BT, i_k * BK, T, K, H * K, lo_from, BT, BK)
            g_row = _load_row(g_ptr + kbase + i_k * BK, t_last, T, K - i_k * BK, H * K, BK)
            l_last = _load_lo_row_whole(gl_ptr + kbase + i_k * BK, g_row, t_last, T, K - i_k * BK, H * K, lo_from, BK)
            g_last, l_last = g_row[None, :], l_last[None, :]
        dq = dq * tl.exp(tl.minimum(b_g, 0.0))
        dk = dk * tl.exp(tl.minimum(_span(g_last, l_last, b_g, b_gl), 0.0))
        kdk = b_k * dk
        rows = tl.arange(0, BT)
        on_last = (i_t * BT + rows) == t_last
        last_row = tl.sum(kdk, axis=0)[None, :] + tl.exp(g_last) * dkeep[None, :]
        dg = b_q * dq - kdk + tl.where(on_last[:, None], last_row, 0.0)
        if GATE == GATE_SCALAR:
            NK: tl.constexpr = (K + BK - 1) // BK
            p_dg, m_dg = _vec(dg_ptr + _head_base(i_b, i_h, T, H, NK) + i_k, i_t * BT, T, H * NK, BT)
            tl.store(p_dg, tl.sum(dg, axis=1), mask=m_dg)
        else:
            _store(dg_ptr + kbase, dg, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    _store(dq_ptr + kbase, dq, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    _store(dk_ptr + kbase, dk, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
    if DELTA:
        _store(dw_ptr + kbase, dw, i_t * BT, i_k * BK, T, K, H * K, BT, BK)


@cached_launch
@triton.jit
def _bwd_wy(k_ptr, v_ptr, g_ptr, beta_ptr, ai_ptr, dw_ptr, dv_ptr, dv_out_ptr, dk_ptr, dg_ptr, dbeta_ptr, dakk_ptr, T,
            H: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
            BV: tl.constexpr, GATE: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Stage 4, one program per chunk. U = Ai X_u, W = Ai X_w with X_u = beta V, X_w = beta exp(G) K:
    #   dX_u = Ai^T dU (dU = dV'):  dv = beta dX_u,  dbeta += sum_v dX_u V,  dAi += dU X_u^T
    #   dX_w = Ai^T dW:  dk += beta exp(G) dX_w,  dG += dX_w X_w,  dbeta += sum_d dX_w exp(G) K,  dAi += dW X_w^T
    #   Ai = (I + Akk)^-1  =>  dAkk = -Ai^T dAi Ai^T, kept on the strict lower triangle (where Akk lives).
    # The products take the inputs' dtype (Ai, dV', dW rounded to it, as the reference library does; TF32 for
    # dAkk); float32 inputs keep exact float32 products.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    a_base = _head_base(i_b, i_h, T, H, BT)
    kbase = _head_base(i_b, i_h, T, H, K)
    vbase = _head_base(i_b, i_h, T, H, V)
    dtype = k_ptr.dtype.element_ty
    b_ai = _load_f32(ai_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT)
    b_ait = tl.trans(b_ai).to(dtype)
    b_beta = _load_vec_f32(beta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    d_ai = tl.zeros([BT, BT], dtype=tl.float32)
    d_beta = tl.zeros([BT], dtype=tl.float32)
    d_g_row = tl.zeros([BT], dtype=tl.float32)
    if GATE == GATE_SCALAR:  # g_ptr, dg_ptr: [B, T, H] rows (one gate per head); dG summed over channels here
        e_g_row = tl.exp(tl.minimum(_load_vec_f32(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT), 0.0))
    for i_v in range(0, tl.cdiv(V, BV)):
        b_du = _load_f32(dv_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV).to(dtype)
        b_v = _load_f32(v_ptr + vbase, i_t * BT, i_v * BV, T, V, H * V, BT, BV)
        b_dxu = tl.dot(b_ait, b_du, input_precision=DOT_PRECISION)
        _store(dv_out_ptr + vbase, b_dxu * b_beta[:, None], i_t * BT, i_v * BV, T, V, H * V, BT, BV)  # final dv
        d_beta += tl.sum(b_dxu * b_v, axis=1)
        d_ai += tl.dot(b_du, tl.trans((b_v * b_beta[:, None]).to(dtype)), input_precision=DOT_PRECISION)
    for i_k in range(0, tl.cdiv(K, BK)):
        b_dw = _load_f32(dw_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK).to(dtype)
        b_k = _load_f32(k_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_eg = tl.full([BT, BK], 1.0, dtype=tl.float32)
        if GATE == GATE_SCALAR:
            b_eg = b_eg * e_g_row[:, None]
        if GATE == GATE_CHANNEL:
            b_eg = tl.exp(tl.minimum(_load_f32(g_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK), 0.0))
        b_kg = b_k * b_eg
        b_dxw = tl.dot(b_ait, b_dw, input_precision=DOT_PRECISION)
        d_ai += tl.dot(b_dw, tl.trans((b_kg * b_beta[:, None]).to(dtype)), input_precision=DOT_PRECISION)
        dxw_kg = tl.sum(b_dxw * b_kg, axis=1)
        d_beta += dxw_kg
        p_dk, m_dk = _tile(dk_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        tl.store(p_dk, tl.load(p_dk, mask=m_dk, other=0.0) + b_beta[:, None] * b_eg * b_dxw, mask=m_dk)
        if GATE == GATE_SCALAR:
            d_g_row += b_beta * dxw_kg
        if GATE == GATE_CHANNEL:
            p_dg, m_dg = _tile(dg_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
            tl.store(p_dg, tl.load(p_dg, mask=m_dg, other=0.0) + b_dxw * b_kg * b_beta[:, None], mask=m_dg)
    if GATE == GATE_SCALAR:
        p_dgr, m_dgr = _vec(dg_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        tl.store(p_dgr, tl.load(p_dgr, mask=m_dgr, other=0.0) + d_g_row, mask=m_dgr)
    d_akk = -tl.dot(tl.dot(tl.trans(b_ai), d_ai, input_precision=DOT_PRECISION), tl.trans(b_ai),
                    input_precision=DOT_PRECISION)
    rows = tl.arange(0, BT)
    _store(dakk_ptr + a_base, tl.where(rows[:, None] > rows[None, :], d_akk, 0.0), i_t * BT, 0, T, BT, H * BT, BT, BT)
    p_db, m_db = _vec(dbeta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    tl.store(p_db, d_beta, mask=m_db)


@triton.jit
def _diagonal_level_bwd(b_q, b_k, b_g, b_gl, b_beta, d_a, d_b, g_rows, gl_rows, n_rows, stride, n_cols, lo_from,
                        HALF: tl.constexpr,
                        BC: tl.constexpr, BK: tl.constexpr, DELTA: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # One level of the diagonal block's gradient: the pairs (r, c) of one group of 2*HALF rows with c in the
    # group's first half and r in its second. Their common anchor a = the last row of the first half lies
    # between them (c <= a < r), so e[r, c] = exp(G_r - G_a) exp(G_a - G_c) = decay[r] decay[c], both <= 1
    # (G falls along the chunk, so either factor is exp(-|G - G_a|)), and tensor-core products cover every
    # such pair at once. HALF = 8, 4, 2, 1 covers each c < r of the block once:
    #   dq[r]  = decay[r] sum_c dA[r, c] (k_c decay[c]),   dkr[r] = decay[r] sum_c dB[r, c] (k_c decay[c])
    #   dkc[c] = decay[c] sum_r (dA[r, c] q_r + beta_r dB[r, c] k_r) decay[r]
    rows = tl.arange(0, BC)
    group = rows // (2 * HALF)
    anchor = group * (2 * HALF) + HALF - 1
    second_half = (rows % (2 * HALF)) >= HALF
    cols = tl.arange(0, BK)
    m_a = (anchor[:, None] < n_rows) & (cols[None, :] < n_cols)
    g_a = tl.load(g_rows + anchor[:, None] * stride + cols[None, :], mask=m_a, other=0.0)
    l_a = tl.load(gl_rows + anchor[:, None] * stride + cols[None, :], mask=m_a, other=0.0)
    l_a = tl.where(_lo_kept(g_a, lo_from), l_a, 0.0)   # as _load_lo_whole, for one anchor row per group
    decay = tl.exp(-tl.abs(_span(b_g, b_gl, g_a, l_a)))
    row_side = second_half[:, None]
    same_group = group[:, None] == group[None, :]
    d_a = tl.where(same_group, d_a, 0.0)
    k_c = tl.where(row_side, 0.0, b_k * decay)
    dq = tl.where(row_side, decay * tl.dot(d_a, k_c, input_precision=DOT_PRECISION), 0.0)
    col_sum = tl.dot(tl.trans(d_a), tl.where(row_side, b_q * decay, 0.0), input_precision=DOT_PRECISION)
    dkr = tl.zeros([BC, BK], dtype=tl.float32)
    if DELTA:
        d_b = tl.where(same_group, d_b, 0.0)
        dkr = tl.where(row_side, decay * tl.dot(d_b, k_c, input_precision=DOT_PRECISION), 0.0)
        col_sum += tl.dot(tl.trans(d_b * b_beta[:, None]), tl.where(row_side, b_k * decay, 0.0),
                          input_precision=DOT_PRECISION)
    dkc = tl.where(row_side, 0.0, decay * col_sum)
    return dq, dkr, dkc


@cached_launch
@triton.jit
def _bwd_intra(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, daqk_ptr, dakk_ptr, dq_ptr, dk_ptr, dg_ptr, dbeta_ptr,
               dq_out_ptr, dk_out_ptr, dbeta_out_ptr, lo_from, T, H: tl.constexpr, K: tl.constexpr,
               BT: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr, GATED: tl.constexpr, DELTA: tl.constexpr,
               DOT_PRECISION: tl.constexpr):
    # Stage 5, one program per (chunk, sub-block i of BC rows). With e[r, c, d] = exp(G_rd - G_cd), c <= r,
    # dA = scale dAqk (query side) and dB = dAkk (key side, rows scaled by beta in the forward):
    #   rows of block i:     dq_r  = sum_c dA[r, c] k_c e[r, c],   dkr_r = sum_c dB[r, c] k_c e[r, c]
    #   columns of block i:  dkc_c = sum_r (dA[r, c] q_r + beta_r dB[r, c] k_r) e[r, c]
    # then dk += beta dkr + dkc,  dbeta += sum_d k dkr,  dG += q dq + beta k dkr - k dkc.
    # Blocks j < i (rows) use the anchor a = first row of block i - 1; blocks j > i (columns) the anchor
    # a = last row of block i; every factor exp(G_r - G_a), exp(G_a - G_c) is <= 1, as in the forward.
    # The diagonal block splits into levels of anchored pairs (_diagonal_level_bwd).
    i_tc, i_bh = tl.program_id(0), tl.program_id(1)
    n_sub: tl.constexpr = BT // BC
    i_t, i_i = i_tc // n_sub, i_tc % n_sub
    i_b, i_h = i_bh // H, i_bh % H
    row0 = i_t * BT + i_i * BC
    if row0 >= T:
        return
    kbase = _head_base(i_b, i_h, T, H, K)
    a_base = _head_base(i_b, i_h, T, H, BT)
    b_base = _head_base(i_b, i_h, T, H, 1)
    b_q = _load_f32(q_ptr + kbase, row0, 0, T, K, H * K, BC, BK)
    b_k = _load_f32(k_ptr + kbase, row0, 0, T, K, H * K, BC, BK)
    b_g = tl.zeros([BC, BK], dtype=tl.float32)
    b_gl = tl.zeros([BC, BK], dtype=tl.float32)
    if GATED:
        b_g = _load_f32(g_ptr + kbase, row0, 0, T, K, H * K, BC, BK)
        b_gl = _load_lo_whole(gl_ptr + kbase, b_g, row0, 0, T, K, H * K, lo_from, BC, BK)
    b_beta = tl.zeros([BC], dtype=tl.float32)
    if DELTA:
        b_beta = _load_vec_f32(beta_ptr + b_base, row0, T, H, BC)
    dq = tl.zeros([BC, BK], dtype=tl.float32)
    dkr = tl.zeros([BC, BK], dtype=tl.float32)
    dkc = tl.zeros([BC, BK], dtype=tl.float32)

    if i_i > 0:
        g_a = tl.zeros([BK], dtype=tl.float32)
        l_a = tl.zeros([BK], dtype=tl.float32)
        if GATED:
            g_a = _load_row(g_ptr + kbase, row0 - 1, T, K, H * K, BK)
            l_a = _load_lo_row_whole(gl_ptr + kbase, g_a, row0 - 1, T, K, H * K, lo_from, BK)
        for i_j in range(0, i_i):
            col0 = i_t * BT + i_j * BC
            b_kc = _load_f32(k_ptr + kbase, col0, 0, T, K, H * K, BC, BK)
            if GATED:
                g_c = _load_f32(g_ptr + kbase, col0, 0, T, K, H * K, BC, BK)
                l_c = _load_lo_whole(gl_ptr + kbase, g_c, col0, 0, T, K, H * K, lo_from, BC, BK)
                to_anchor = _span(g_a[None, :], l_a[None, :], g_c, l_c)
                b_kc = b_kc * tl.exp(tl.minimum(to_anchor, 0.0))
            d_a = _load_f32(daqk_ptr + a_base, row0, i_j * BC, T, BT, H * BT, BC, BC)
            dq += tl.dot(d_a, b_kc, input_precision=DOT_PRECISION)
            if DELTA:
                d_b = _load_f32(dakk_ptr + a_base, row0, i_j * BC, T, BT, H * BT, BC, BC)
                dkr += tl.dot(d_b, b_kc, input_precision=DOT_PRECISION)
        if GATED:
            row_decay = tl.exp(tl.minimum(_span(b_g, b_gl, g_a[None, :], l_a[None, :]), 0.0))
            dq = dq * row_decay
            dkr = dkr * row_decay

    n_valid = tl.cdiv(tl.minimum(T - i_t * BT, BT), BC)
    if i_i + 1 < n_valid:
        g_z = tl.zeros([BK], dtype=tl.float32)
        l_z = tl.zeros([BK], dtype=tl.float32)
        if GATED:
            g_z = _load_row(g_ptr + kbase, row0 + BC - 1, T, K, H * K, BK)
            l_z = _load_lo_row_whole(gl_ptr + kbase, g_z, row0 + BC - 1, T, K, H * K, lo_from, BK)
        for i_j in range(i_i + 1, n_valid):
            r0 = i_t * BT + i_j * BC
            b_qr = _load_f32(q_ptr + kbase, r0, 0, T, K, H * K, BC, BK)
            b_kr = _load_f32(k_ptr + kbase, r0, 0, T, K, H * K, BC, BK)
            if GATED:
                g_r = _load_f32(g_ptr + kbase, r0, 0, T, K, H * K, BC, BK)
                l_r = _load_lo_whole(gl_ptr + kbase, g_r, r0, 0, T, K, H * K, lo_from, BC, BK)
                from_anchor = _span(g_r, l_r, g_z[None, :], l_z[None, :])
                decay = tl.exp(tl.minimum(from_anchor, 0.0))
                b_qr = b_qr * decay
                b_kr = b_kr * decay
            d_a = _load_f32(daqk_ptr + a_base, r0, i_i * BC, T, BT, H * BT, BC, BC)
            dkc += tl.dot(tl.trans(d_a), b_qr, input_precision=DOT_PRECISION)
            if DELTA:
                p_br, m_br = _vec(beta_ptr + b_base, r0, T, H, BC)
                beta_r = tl.load(p_br, mask=m_br, other=0.0).to(tl.float32)
                d_b = _load_f32(dakk_ptr + a_base, r0, i_i * BC, T, BT, H * BT, BC, BC) * beta_r[:, None]
                dkc += tl.dot(tl.trans(d_b), b_kr, input_precision=DOT_PRECISION)
        if GATED:
            dkc = dkc * tl.exp(tl.minimum(_span(g_z[None, :], l_z[None, :], b_g, b_gl), 0.0))

    rows = tl.arange(0, BC)
    d_a = tl.where(rows[:, None] >= rows[None, :],
                   _load_f32(daqk_ptr + a_base, row0, i_i * BC, T, BT, H * BT, BC, BC), 0.0)
    d_b = tl.zeros([BC, BC], dtype=tl.float32)
    if DELTA:
        d_b = tl.where(rows[:, None] > rows[None, :],
                       _load_f32(dakk_ptr + a_base, row0, i_i * BC, T, BT, H * BT, BC, BC), 0.0)
    # Pairs r = c (decay 1), then the pairs c < r level by level (_diagonal_level_bwd).
    diag_a = tl.sum(tl.where(rows[:, None] == rows[None, :], d_a, 0.0), axis=1)
    dq += diag_a[:, None] * b_k
    dkc += diag_a[:, None] * b_q
    g_rows = g_ptr + kbase + row0 * H * K
    gl_rows = gl_ptr + kbase + row0 * H * K
    n_rows = T - row0
    l_dq, l_dkr, l_dkc = _diagonal_level_bwd(b_q, b_k, b_g, b_gl, b_beta, d_a, d_b, g_rows, gl_rows, n_rows, H * K,
                                             K, lo_from, 8, BC, BK, DELTA, DOT_PRECISION)
    dq, dkr, dkc = dq + l_dq, dkr + l_dkr, dkc + l_dkc
    l_dq, l_dkr, l_dkc = _diagonal_level_bwd(b_q, b_k, b_g, b_gl, b_beta, d_a, d_b, g_rows, gl_rows, n_rows, H * K,
                                             K, lo_from, 4, BC, BK, DELTA, DOT_PRECISION)
    dq, dkr, dkc = dq + l_dq, dkr + l_dkr, dkc + l_dkc
    l_dq, l_dkr, l_dkc = _diagonal_level_bwd(b_q, b_k, b_g, b_gl, b_beta, d_a, d_b, g_rows, gl_rows, n_rows, H * K,
                                             K, lo_from, 2, BC, BK, DELTA, DOT_PRECISION)
    dq, dkr, dkc = dq + l_dq, dkr + l_dkr, dkc + l_dkc
    l_dq, l_dkr, l_dkc = _diagonal_level_bwd(b_q, b_k, b_g, b_gl, b_beta, d_a, d_b, g_rows, gl_rows, n_rows, H * K,
                                             K, lo_from, 1, BC, BK, DELTA, DOT_PRECISION)
    dq, dkr, dkc = dq + l_dq, dkr + l_dkr, dkc + l_dkc

    # The last stage to touch dq, dk and dbeta: the sums go to the *_out tensors, in the inputs' dtypes.
    _store(dq_out_ptr + kbase, dq + _load_f32(dq_ptr + kbase, row0, 0, T, K, H * K, BC, BK), row0, 0, T, K, H * K,
           BC, BK)
    dk = dkc + b_beta[:, None] * dkr + _load_f32(dk_ptr + kbase, row0, 0, T, K, H * K, BC, BK)
    _store(dk_out_ptr + kbase, dk, row0, 0, T, K, H * K, BC, BK)
    if DELTA:
        p_db, m_db = _vec(dbeta_ptr + b_base, row0, T, H, BC)
        p_dbo, _ = _vec(dbeta_out_ptr + b_base, row0, T, H, BC)
        tl.store(p_dbo, tl.load(p_db, mask=m_db, other=0.0) + tl.sum(b_k * dkr, axis=1), mask=m_db)
    if GATED:
        p_dg, m_dg = _tile(dg_ptr + kbase, row0, 0, T, K, H * K, BC, BK)
        dg = b_q * dq + b_k * (b_beta[:, None] * dkr - dkc)
        tl.store(p_dg, tl.load(p_dg, mask=m_dg, other=0.0) + dg, mask=m_dg)


@cached_launch
@triton.jit
def _bwd_intra_dense(q_ptr, k_ptr, g_ptr, gl_ptr, beta_ptr, daqk_ptr, dakk_ptr, dq_ptr, dk_ptr, dg_ptr, dbeta_ptr,
                     dq_out_ptr, dk_out_ptr, dbeta_out_ptr, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr,
                     BK: tl.constexpr, GATE: tl.constexpr, DELTA: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # Stage 5 for GATE_NONE and GATE_SCALAR (no gate, one gate per head): the decay exp(G_r - G_c) is a scalar
    # per (r, c), so it goes onto the [BT, BT] gradients once, dA = scale dAqk (.) decay, dB = dAkk (.) decay,
    # and per key block:  dq = dA K,  dkr = dB K,  dkc = dA^T Q + (diag(beta) dB)^T K,
    # then dk += beta dkr + dkc,  dbeta += sum_d k dkr,  dG += q dq + beta k dkr - k dkc (as in _bwd_intra).
    # The products take the inputs' dtype (dA, dB rounded to it); float32 inputs keep exact products.
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    kbase = _head_base(i_b, i_h, T, H, K)
    a_base = _head_base(i_b, i_h, T, H, BT)
    rows = tl.arange(0, BT)
    d_a = tl.where(rows[:, None] >= rows[None, :], _load_f32(daqk_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT),
                   0.0)
    d_b = tl.zeros([BT, BT], dtype=tl.float32)
    b_beta = tl.zeros([BT], dtype=tl.float32)
    p_b, m_b = _vec(beta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
    if DELTA:
        d_b = tl.where(rows[:, None] > rows[None, :], _load_f32(dakk_ptr + a_base, i_t * BT, 0, T, BT, H * BT, BT, BT),
                       0.0)
        b_beta = tl.load(p_b, mask=m_b, other=0.0).to(tl.float32)
    if GATE == GATE_SCALAR:
        b_g = _load_vec_f32(g_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        b_gl = _load_vec_f32(gl_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        decay = tl.exp(tl.minimum(_span(b_g[:, None], b_gl[:, None], b_g[None, :], b_gl[None, :]), 0.0))
        d_a = d_a * decay
        d_b = d_b * decay
    dtype = q_ptr.dtype.element_ty
    d_bb = (d_b * b_beta[:, None]).to(dtype)
    d_a = d_a.to(dtype)
    d_b = d_b.to(dtype)
    d_beta = tl.zeros([BT], dtype=tl.float32)
    d_g_row = tl.zeros([BT], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        p_q, m_q = _tile(q_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_qn = tl.load(p_q, mask=m_q, other=0.0)
        p_k, m_k = _tile(k_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_kn = tl.load(p_k, mask=m_k, other=0.0)
        dq = tl.dot(d_a, b_kn, input_precision=DOT_PRECISION)
        dkr = tl.dot(d_b, b_kn, input_precision=DOT_PRECISION)
        dkc = tl.dot(tl.trans(d_a), b_qn, input_precision=DOT_PRECISION)
        dkc += tl.dot(tl.trans(d_bb), b_kn, input_precision=DOT_PRECISION)
        b_q = b_qn.to(tl.float32)
        b_k = b_kn.to(tl.float32)
        # The last stage to touch dq and dk: the sums go to the *_out tensors, in the inputs' dtype.
        _store(dq_out_ptr + kbase, dq + _load_f32(dq_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK),
               i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        dk = dkc + b_beta[:, None] * dkr + _load_f32(dk_ptr + kbase, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        _store(dk_out_ptr + kbase, dk, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        d_beta += tl.sum(b_k * dkr, axis=1)
        if GATE == GATE_SCALAR:
            d_g_row += tl.sum(b_q * dq + b_k * (b_beta[:, None] * dkr - dkc), axis=1)
    if GATE == GATE_SCALAR:  # dg_ptr: [B, T, H] rows, the gradient of the one gate per head (summed over channels)
        p_dgr, m_dgr = _vec(dg_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        tl.store(p_dgr, tl.load(p_dgr, mask=m_dgr, other=0.0) + d_g_row, mask=m_dgr)
    if DELTA:
        p_db, m_db = _vec(dbeta_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        p_dbo, _ = _vec(dbeta_out_ptr + _head_base(i_b, i_h, T, H, 1), i_t * BT, T, H, BT)
        tl.store(p_dbo, tl.load(p_db, mask=m_db, other=0.0) + d_beta, mask=m_db)


@cached_launch
@triton.jit
def _bwd_gate_cumsum(dG_ptr, dg_ptr, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    # Stage 6: G_r = sum_{s <= r} g_s within the chunk, so dg_s = sum_{r >= s} dG_r (reverse cumulative sum),
    # channel by channel. (A gate shared by the head's channels arrives here with its dG summed over them, K = 1;
    # summing inside this kernel, in a loop, crashed Triton 3.6's compiler on the GPU.)
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_h = i_bh // H, i_bh % H
    base = _head_base(i_b, i_h, T, H, K)
    for i_k in range(0, tl.cdiv(K, BK)):
        b_dG = _load_f32(dG_ptr + base, i_t * BT, i_k * BK, T, K, H * K, BT, BK)
        b_dg = tl.sum(b_dG, axis=0)[None, :] - tl.cumsum(b_dG, axis=0) + b_dG
        _store(dg_ptr + base, b_dg, i_t * BT, i_k * BK, T, K, H * K, BT, BK)


# Launch settings of each backward stage (see LAUNCH in chunk_fwd.py; benchmarks/probes/gpu_profile.py edits them).
LAUNCH = {name: dict(num_warps=4) for name in
          ("local_output", "state_grads", "wy", "intra", "intra_dense", "gate_cumsum")}
# The reverse state pass: with its loads one chunk ahead, num_stages=3. On long sequences that is much faster than
# 2 stages for every kind; at shorter ones as fast for the gated kinds and faster for DeltaNet.
LAUNCH["state_pass_halves"] = dict(num_warps=4, num_stages=3)
LAUNCH["state_pass_whole"] = dict(num_warps=4, num_stages=1)
LAUNCH["wy_other_shapes"] = dict(num_warps=8)   # see verified_fast_shape
# Elements per program of the elementwise _gated_queries: 1024 = 8 per thread at 4 warps, wide vector loads.
ELEMENTWISE_BLOCK = 1024
# Value-block width of the reverse state pass (None: state_block_v from 32 down; 64 is slower: fewer programs for a
# latency-bound pass).
BLOCK_V = {"state_halves": None}



def verified_fast_shape(dtype, K: int, V: int) -> bool:
    """Whether the backward runs its tuned launch settings: half precision at head widths 64 and 128.

    Those are the shapes the speed targets are measured at and the reference grids check. Elsewhere Triton 3.6
    compiled two stages wrongly on an H100 while the interpreter computes the same kernels exactly (each case
    reproduced launch by launch with benchmarks/probes/launch_replay.py): _bwd_wy at 4 warps gave dv off by 0.4
    relative for float32 Gated DeltaNet at width 64 and by 0.8 for bf16 at width 32 (every kind), and fine at 8
    warps; the reverse state pass in halves faulted in bf16 at width 100 (compute-sanitizer: out-of-range
    shared-memory reads). Other shapes therefore take 8 warps for _bwd_wy and the plain whole-tile state pass.
    """
    return dtype in (torch.bfloat16, torch.float16) and K in (64, 128) and V in (64, 128)


def use_state_pass_halves(dtype, K: int, V: int, block_v: int) -> bool:
    """Whether the reverse state pass runs as _bwd_state_pass_halves (else _bwd_state_pass_whole)."""
    return verified_fast_shape(dtype, K, V) and V % block_v == 0


def chunk_backward(kind, scale, q, k, v, g, beta, initial_state, kept, d_o, d_state):
    """Gradients (dq, dk, dv, dg, dbeta, d initial_state), each in its input's dtype (d initial_state float32),
    None where an input is absent. Every sum is accumulated in float32; only the finished gradient is rounded.

    q, k [B,T,H,K], v [B,T,H,V] contiguous in one dtype; kept: the forward's intermediates (chunk_forward
    with keep_intermediates): G and G_lo (with lo_from), h [B,NT,H,K,V], vn = V' [B,T,H,V], aqk, ai; d_o like v;
    d_state or None.
    """
    gate, delta = GATE_OF_KIND[kind], DELTA_OF_KIND[kind]
    B, T, H, K = q.shape
    V = v.shape[-1]
    BT, BC = CHUNK, SUB
    NT = cdiv(T, BT)
    BK = _block(K)
    BKb, BV = min(KEY_TILE, BK), min(VALUE_TILE, _block(V))
    dev, prec = q.device, dot_precision(q.dtype)
    f32 = dict(device=dev, dtype=torch.float32)

    G, G_lo, h, v_new = kept["G"], kept["G_lo"], kept["h"], kept["vn"]
    lo_from = kept["lo_from"]   # where the forward's stage 1 wrote G_lo (chunk_fwd.gate_lo_from)
    parts = {"aqk": kept["aqk"], "ai": kept["ai"], "kd": k}
    if delta:
        parts["w"], _, parts["kd"] = wy_factors(kind, k, v, G, G_lo, beta, kept["ai"], lo_from=lo_from)
    g_arg = G if G is not None else q
    gl_arg = G_lo if G_lo is not None else q
    beta_arg = beta if beta is not None else q
    w = parts["w"] if delta else q
    d_o = d_o.contiguous()
    gated = gate != GATE_NONE.value

    dv = torch.empty(B, T, H, V, **f32)
    daqk = torch.empty(B, T, H, BT, **f32)
    _bwd_local_output[(NT, B * H)](parts["aqk"], v_new, d_o, dv, daqk, scale, T, H, V, BT, BV, prec,
                                   **LAUNCH["local_output"])

    dh = torch.empty(B, NT, H, K, V, device=dev, dtype=q.dtype)  # like h: the inputs' dtype
    dh0 = torch.empty(B, H, K, V, **f32)
    d_state = d_state.float().contiguous() if d_state is not None else None
    BV_state = min(BLOCK_V["state_halves"] or state_block_v(B * H, V, 32), BV)
    launch = dict(LAUNCH["state_pass_halves"])
    if q.dtype == torch.float32:
        # float32 inputs: pipelined [64, 128] float32 tiles asked the H200 for 312 KiB of shared memory.
        launch["num_stages"] = 1
    q_state = q
    if gated:
        q_state = torch.empty_like(q)
        _gated_queries[(cdiv(q.numel(), ELEMENTWISE_BLOCK),)](q, g_arg, q_state, q.numel(),
                                                              K if gate == GATE_SCALAR.value else 1, ELEMENTWISE_BLOCK)
    state_args = (q_state, g_arg, parts["kd"], w, d_o, dv, d_state if d_state is not None else dh0, dh, dh0, scale,
                  T, NT, H, K, V, BT)
    if use_state_pass_halves(q.dtype, K, V, BV_state):
        # The key rows split in two halves, each at least 16 wide for the tensor cores.
        _bwd_state_pass_halves[(cdiv(V, BV_state), B * H)](*state_args, max(BK, 2 * SUB), BV_state, gate, delta,
                                                           d_state is not None, prec, **launch)
    else:
        _bwd_state_pass_whole[(cdiv(V, BV_state), B * H)](*state_args, BK, BV_state, gate, delta,
                                                          d_state is not None, prec, **LAUNCH["state_pass_whole"])

    dq = torch.empty(B, T, H, K, **f32)
    dk = torch.empty(B, T, H, K, **f32)
    dG = dq   # no gate: an unused placeholder
    if gate == GATE_CHANNEL.value:
        dG = torch.empty(B, T, H, K, **f32)
    if gate == GATE_SCALAR.value:   # one partial sum over the channels per key block of stage 3
        dG = torch.empty(B, T, H, cdiv(K, BKb), **f32)
    dw = torch.empty(B, T, H, K, **f32) if delta else dq
    _bwd_state_grads[(cdiv(K, BKb), NT, B * H)](
        q, k, g_arg, gl_arg, h, dh, v_new, d_o, dv, dq, dk, dw, dG, scale, lo_from, T, NT, H, K, V, BT, BKb, BV, gate,
        delta, prec, **LAUNCH["state_grads"])

    dbeta = torch.empty(B, T, H, **f32) if delta else None
    dakk = torch.empty(B, T, H, BT, **f32) if delta else daqk
    # The stage that finishes a gradient writes it in its input's dtype (a bf16 run then needs no casting pass
    # over dq, dk, dv afterwards); float32 gradients are written in place.
    def out(acc, x):
        return acc if x.dtype == torch.float32 else torch.empty(acc.shape, device=dev, dtype=x.dtype)

    dq_out, dk_out = out(dq, q), out(dk, k)
    dv_out = out(dv, v) if delta else dv   # linear attention: dv is final after the state pass
    dbeta_out = out(dbeta, beta) if delta else dq
    # One gate per head: stages 4 and 5 read it as a row and add its gradient, summed over channels, to dG_row.
    dG_row = torch.zeros(B, T, H, **f32) if gate == GATE_SCALAR.value else dG
    if delta:
        _bwd_wy[(NT, B * H)](k, v, g_arg, beta_arg, parts["ai"], dw, dv, dv_out, dk, dG_row, dbeta, dakk, T, H, K, V,
                             BT, BKb, BV, gate, prec,
                             **LAUNCH["wy" if verified_fast_shape(q.dtype, K, V) else "wy_other_shapes"])
    if gate == GATE_CHANNEL.value:
        _bwd_intra[(NT * (BT // BC), B * H)](q, k, g_arg, gl_arg, beta_arg, daqk, dakk, dq, dk, dG,
                                             dbeta if delta else dq, dq_out, dk_out, dbeta_out, lo_from, T, H, K, BT,
                                             BC, BK, gated, delta, prec, **LAUNCH["intra"])
    else:
        _bwd_intra_dense[(NT, B * H)](q, k, g_arg, gl_arg, beta_arg, daqk, dakk, dq, dk, dG_row,
                                      dbeta if delta else dq, dq_out, dk_out, dbeta_out, T, H, K, BT, BKb, gate,
                                      delta, prec, **LAUNCH["intra_dense"])
    dg = None
    if gated:
        dg = torch.empty(g.shape, device=dev, dtype=g.dtype)
        if gate == GATE_SCALAR.value:  # one gate per head: stage 3's partial sums, plus the rows, reverse cumsum
            _bwd_gate_cumsum[(NT, B * H)](dG.sum(-1) + dG_row, dg, T, H, 1, BT, SUB, **LAUNCH["gate_cumsum"])
        else:
            _bwd_gate_cumsum[(NT, B * H)](dG, dg, T, H, K, BT, BKb, **LAUNCH["gate_cumsum"])
    return (dq_out, dk_out, dv_out, dg, dbeta_out if delta else None,
            (dh0 if initial_state is not None else None))
