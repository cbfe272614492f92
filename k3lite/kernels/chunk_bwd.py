"""Backward of the chunked pipeline: the sequential half in Triton, the chunk-parallel half in PyTorch.

The forward splits into a chunk-parallel part P (q_dec, k_dec, keep, w, u, a_qk from q, k, v, g, beta;
see torch_chunked.chunk_parts) and a sequential part over chunks c:
    V'_c = u_c - w_c h_c,   o_c = scale q_dec_c h_c + a_qk_c V'_c,   h_{c+1} = keep_c * h_c + k_dec_c^T V'_c.
Backward:
  1. batched matmuls (PyTorch): d a_qk = dO V'^T, d q_dec = scale dO h^T, and the parts of dV', dh that
     come straight from the output: dV'_o = a_qk^T dO, dh_o = scale q_dec^T dO;
  2. _state_grad_pass (Triton), in reverse over chunks with D = dL/dh_{c+1}:
        dV'_c = dV'_o + k_dec_c D,   then   D <- keep_c * D + dh_o - w_c^T dV'_c   (D after chunk 0: dL/dh_0);
  3. batched (PyTorch): d k_dec = V' D^T, d keep = sum_v h * D, d w = -dV' h^T, d u = dV';
  4. autograd through P (PyTorch, float32) turns those into gradients of q, k, v, g, beta.
Steps 1, 3 and 4 are PyTorch, not Triton kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .chunk_fwd import dot_precision
from .torch_chunked import _to_chunks, chunk_parts, from_chunks


@triton.jit
def _state_grad_pass(dvo_ptr, dho_ptr, kd_ptr, w_ptr, keep_ptr, dht_ptr, dv_ptr, dnext_ptr, dh0_ptr, NT,
                     K: tl.constexpr, V: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                     DELTA: tl.constexpr, HAS_KEEP: tl.constexpr, HAS_DHT: tl.constexpr,
                     DOT_PRECISION: tl.constexpr):
    # Inputs in chunk layout [B*H, NT, C, *] (float32, zero-padded rows). One program owns D[:, v-block].
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rc = tl.arange(0, C)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    m_kv = mk[:, None] & mv[None, :]
    s_off = rk[:, None] * V + rv[None, :]
    if HAS_DHT:
        d = tl.load(dht_ptr + i_bh.to(tl.int64) * K * V + s_off, mask=m_kv, other=0.0)
    else:
        d = tl.zeros([BK, BV], dtype=tl.float32)
    for i in range(0, NT):
        c = NT - 1 - i
        chunk = (i_bh * NT + c).to(tl.int64)
        tl.store(dnext_ptr + chunk * K * V + s_off, d, mask=m_kv)
        row_k = chunk * C * K + rc[:, None] * K + rk[None, :]
        row_v = chunk * C * V + rc[:, None] * V + rv[None, :]
        b_kd = tl.load(kd_ptr + row_k, mask=mk[None, :], other=0.0)
        b_dv = tl.load(dvo_ptr + row_v, mask=mv[None, :], other=0.0) + tl.dot(b_kd, d, input_precision=DOT_PRECISION)
        tl.store(dv_ptr + row_v, b_dv, mask=mv[None, :])
        if HAS_KEEP:
            b_keep = tl.load(keep_ptr + chunk * K + rk, mask=mk, other=0.0)
            d = d * b_keep[:, None]
        d += tl.load(dho_ptr + chunk * K * V + s_off, mask=m_kv, other=0.0)
        if DELTA:
            b_w = tl.load(w_ptr + row_k, mask=mk[None, :], other=0.0)
            d -= tl.dot(tl.trans(b_w), b_dv, input_precision=DOT_PRECISION)
    tl.store(dh0_ptr + i_bh.to(tl.int64) * K * V + s_off, d, mask=m_kv)


def state_grad_pass(dvo, dho, k_dec, w, keep, d_state, precision):
    """Reverse sequential pass; all tensors float32 in chunk layout. Returns dV', D per chunk, dL/dh_0."""
    B, H, NT, C, V = dvo.shape
    K = k_dec.shape[-1]
    BK = max(16, triton.next_power_of_2(K))
    BV = 64 if B * H >= 64 else 32
    BV = min(BV, max(16, triton.next_power_of_2(V)))
    dv = torch.empty_like(dvo)
    dnext = torch.empty_like(dho)
    dh0 = torch.empty(B, H, K, V, device=dvo.device, dtype=torch.float32)
    if keep is not None:
        keep = keep.expand(B, H, NT, K).contiguous()
    c = lambda x: x.contiguous() if x is not None else dvo  # noqa: E731  (placeholder pointer when absent)
    _state_grad_pass[(triton.cdiv(V, BV), B * H)](
        c(dvo), c(dho), c(k_dec), c(w), c(keep), c(d_state), dv, dnext, dh0, NT, K, V, C, BK, BV,
        w is not None, keep is not None, d_state is not None, precision, num_warps=4)
    return dv, dnext, dh0


def chunk_backward(kind, scale, inputs, h, v_new, d_o, d_state, chunk=64):
    """Gradients of (q, k, v, g, beta, initial_state) given the forward's per-chunk states h
    [B, NT, H, K, V] and V' [B, T, H, V] (both as the Triton forward stored them)."""
    q, k, v, g, beta, h0 = inputs
    T = q.shape[1]
    with torch.enable_grad():
        leaves = [x.detach().requires_grad_(True) if x is not None and x.requires_grad else
                  (x.detach() if x is not None else None) for x in (q, k, v, g, beta)]
        parts = chunk_parts(kind, *leaves, scale, chunk)
    NT = parts["u"].shape[2]
    with torch.no_grad():
        hc = h.float().permute(0, 2, 1, 3, 4)                      # [B, H, NT, K, V]
        vn = _to_chunks(v_new.float(), NT, chunk)                   # [B, H, NT, C, V]
        do = _to_chunks(d_o.float(), NT, chunk)
        a_qk, q_dec = parts["a_qk"].detach(), parts["q_dec"].detach()
        d_aqk = do @ vn.transpose(-1, -2)
        d_qdec = scale * (do @ hc.transpose(-1, -2))
        dvo = a_qk.transpose(-1, -2) @ do
        dho = scale * (q_dec.transpose(-1, -2) @ do)
        w = parts["w"].detach() if parts["w"] is not None else None
        keep = parts["keep"].detach() if parts["keep"] is not None else None
        d_state = d_state.float().contiguous() if d_state is not None else None
        dv_new, dnext, dh0 = state_grad_pass(dvo, dho, parts["k_dec"].detach(), w, keep, d_state,
                                                 dot_precision(q.dtype))
        grads = {"q_dec": d_qdec, "a_qk": d_aqk, "u": dv_new, "k_dec": vn @ dnext.transpose(-1, -2)}
        if keep is not None:
            d_keep = (hc * dnext).sum(-1)                           # [B, H, NT, K]
            grads["keep"] = d_keep if kind == "kda" else d_keep.sum(-1, keepdim=True)
        if w is not None:
            grads["w"] = -(dv_new @ hc.transpose(-1, -2))
    names = list(grads)
    torch.autograd.backward([parts[n] for n in names], [grads[n] for n in names])
    out = [x.grad if x is not None and x.requires_grad else None for x in leaves]
    return out + [dh0 if h0 is not None else None]
