"""Fused one-token decode step for the four kinds: the float32 state is read once and written once.

Per head and value block (state block S [K, BV]):
    S = Diag(exp g) S                       (g scalar per head, per channel, or absent)
    S = S + k (beta * (v - S^T k))^T        (delta rule)   |   S = S + k v^T   (linear attention)
    o = S^T (scale * q)
Decode is bound by the state traffic (2 * 4 * K * V bytes per head), so the kernel keeps the whole
update in registers and touches the state exactly twice.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .chunk_fwd import DELTA_OF_KIND, GATE_CHANNEL, GATE_OF_KIND, GATE_SCALAR


@triton.jit
def _decode_step(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                 K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                 GATE: tl.constexpr, DELTA: tl.constexpr):
    # One program: state block S [K, BV] of one head. Load S once; S *= exp(g); for the delta rule
    # v <- beta (v - S^T k); S += k v^T; o = S^T (scale q); store S once.
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh.to(tl.int64) * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0).to(tl.float32)
    if GATE == GATE_SCALAR:
        b_s = b_s * tl.exp(tl.load(g_ptr + i_bh).to(tl.float32))
    if GATE == GATE_CHANNEL:
        b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
        b_s = b_s * tl.exp(b_g)[:, None]
    if DELTA:
        b_beta = tl.load(beta_ptr + i_bh).to(tl.float32)
        b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o.to(o_ptr.dtype.element_ty), mask=mv)


def decode_step(kind, q, k, v, g, beta, state, scale, *, inplace=False, block_v=64, num_warps=4):
    """q, k [B,H,K]; v [B,H,V]; g [B,H] or [B,H,K]; beta [B,H]; state [B,H,K,V] float32.

    ``inplace``: write the new state over ``state`` (contiguous float32). Each program reads its state
    block completely before it writes the same block, so reading and writing one buffer is safe."""
    B, H, K = q.shape
    V = v.shape[-1]
    BK = max(16, triton.next_power_of_2(K))
    BV = min(block_v, max(16, triton.next_power_of_2(V)))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    state = state if inplace else state.contiguous()
    g = g.contiguous() if g is not None else q
    beta = beta.contiguous() if beta is not None else q
    o = torch.empty_like(v)
    new_state = state if inplace else torch.empty_like(state)
    _decode_step[(triton.cdiv(V, BV), B * H)](q, k, v, g, beta, state, o, new_state, scale, K, V, BK, BV,
                                              GATE_OF_KIND[kind], DELTA_OF_KIND[kind], num_warps=num_warps)
    return o, new_state
