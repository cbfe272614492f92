"""The same chunked algorithm as chunk_fwd.py, written with PyTorch tensor ops (float32).

It exists for the backward pass: ``chunked`` gradients are computed by re-running this form under
autograd and differentiating it (a recompute backward through PyTorch, NOT a Triton backward).
It follows the Triton pipeline stage by stage, including the numerically safe per-channel decay
(sub-chunk anchors off the diagonal, exact pairwise differences on it), so its gradients stay finite
for log-gates down to -20 per step.
"""

from __future__ import annotations

import torch

SUB = 16


def _to_chunks(x, n_chunks, chunk):
    """[B, T, H, ...] -> [B, H, NT, C, ...], zero-padded to NT * C tokens."""
    B, T, H = x.shape[:3]
    pad = n_chunks * chunk - T
    if pad:
        x = torch.cat([x, x.new_zeros((B, pad, H) + x.shape[3:])], dim=1)
    x = x.reshape((B, n_chunks, chunk, H) + x.shape[3:])
    return x.transpose(2, 3).transpose(1, 2)


def _channel_decay_products(q, k, G, chunk):
    """Q K^T and K K^T weighted by exp(G_r - G_i) per channel, lower triangle only, [.., C, C]."""
    rows_qk, rows_kk = [], []
    n_sub = chunk // SUB
    for i in range(n_sub):
        qi, ki, gi = (x[..., i * SUB:(i + 1) * SUB, :] for x in (q, k, G))
        blocks_qk, blocks_kk = [], []
        if i > 0:
            anchor = G[..., i * SUB - 1:i * SUB, :]
            row_decay = torch.exp(torch.clamp(gi - anchor, max=0.0))
            kc = k[..., :i * SUB, :] * torch.exp(torch.clamp(anchor - G[..., :i * SUB, :], max=0.0))
            blocks_qk.append((qi * row_decay) @ kc.transpose(-1, -2))
            blocks_kk.append((ki * row_decay) @ kc.transpose(-1, -2))
        pair = torch.exp(torch.clamp(gi.unsqueeze(-2) - gi.unsqueeze(-3), max=0.0))  # [.., r, c, K]
        blocks_qk.append(torch.einsum("...rd,...cd,...rcd->...rc", qi, ki, pair))
        blocks_kk.append(torch.einsum("...rd,...cd,...rcd->...rc", ki, ki, pair))
        right = (chunk - (i + 1) * SUB)
        if right:
            zeros = qi.new_zeros(qi.shape[:-1] + (right,))
            blocks_qk.append(zeros)
            blocks_kk.append(zeros)
        rows_qk.append(torch.cat(blocks_qk, dim=-1))
        rows_kk.append(torch.cat(blocks_kk, dim=-1))
    return torch.cat(rows_qk, dim=-2), torch.cat(rows_kk, dim=-2)


def chunk_parts(kind, q, k, v, g, beta, scale, chunk=64):
    """The chunk-parallel half of the algorithm, differentiable, in chunk layout [B, H, NT, C, *].

    Returns a dict: q_dec = exp(G) * q, k_dec = exp(G_C - G) * k, keep = exp(G_C) (None without a gate),
    w and u (the WY factors; w is None for linear attention, where u = v), a_qk (scale and causal mask
    included). The sequential half is then, per chunk c:
        V' = u - w h_c,   o = scale * q_dec h_c + a_qk V',   h_{c+1} = keep * h_c + k_dec^T V'.
    """
    B, T, H, K = q.shape
    NT = -(-T // chunk)
    q, k, v = (_to_chunks(x.float(), NT, chunk) for x in (q, k, v))
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    strict = causal.tril(-1)
    keep = None
    if kind == "kda":
        G = _to_chunks(g.float(), NT, chunk).cumsum(-2)
        a_qk, a_kk = _channel_decay_products(q, k, G, chunk)
        g_last = G[..., -1, :]
        q_dec, keep = q * torch.exp(G), torch.exp(g_last)
        k_dec = k * torch.exp(g_last.unsqueeze(-2) - G)
        w_in = k * torch.exp(G)
    else:
        a_qk = q @ k.transpose(-1, -2)
        a_kk = k @ k.transpose(-1, -2)
        q_dec, k_dec, w_in = q, k, k
        if kind == "gated_delta_rule":
            G = _to_chunks(g.float(), NT, chunk).cumsum(-1)
            decay = torch.exp(torch.clamp(G.unsqueeze(-1) - G.unsqueeze(-2), max=0.0))
            a_qk, a_kk = a_qk * decay, a_kk * decay
            g_last = G[..., -1:]
            keep = torch.exp(g_last)
            q_dec = q * torch.exp(G).unsqueeze(-1)
            k_dec = k * torch.exp(g_last - G).unsqueeze(-1)
            w_in = k * torch.exp(G).unsqueeze(-1)
    a_qk = torch.where(causal, a_qk, 0.0) * scale
    w, u = None, v
    if kind != "linear_attention":
        b = _to_chunks(beta.float(), NT, chunk).unsqueeze(-1)
        a_kk = torch.where(strict, a_kk, 0.0) * b
        eye = torch.eye(chunk, device=q.device, dtype=q.dtype)
        # (I + A) X = Diag(beta) Y, solved by forward substitution (unit lower-triangular).
        w = torch.linalg.solve_triangular(eye + a_kk, b * w_in, upper=False, unitriangular=True)
        u = torch.linalg.solve_triangular(eye + a_kk, b * v, upper=False, unitriangular=True)
    return {"q_dec": q_dec, "k_dec": k_dec, "keep": keep, "w": w, "u": u, "a_qk": a_qk}


def chunked_forward(kind, q, k, v, g, beta, scale, initial_state, chunk=64):
    """Differentiable float32 chunked forward; returns (o [B,T,H,V], final state [B,H,K,V])."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    p = chunk_parts(kind, q, k, v, g, beta, scale, chunk)
    NT = p["u"].shape[2]
    S = initial_state.float() if initial_state is not None else q.new_zeros(B, H, K, V).float()
    outs = []
    for c in range(NT):
        v_new = p["u"][:, :, c] - p["w"][:, :, c] @ S if p["w"] is not None else p["u"][:, :, c]
        outs.append((p["q_dec"][:, :, c] @ S) * scale + p["a_qk"][:, :, c] @ v_new)
        if p["keep"] is not None:
            S = S * p["keep"][:, :, c].reshape(B, H, -1, 1)
        S = S + p["k_dec"][:, :, c].transpose(-1, -2) @ v_new
    o = torch.stack(outs, dim=2)  # [B, H, NT, C, V]
    return from_chunks(o, T), S


def from_chunks(x, T):
    """[B, H, NT, C, *] -> [B, T, H, *]."""
    B, H, NT, C = x.shape[:4]
    return x.transpose(1, 2).transpose(2, 3).reshape((B, NT * C, H) + x.shape[4:])[:, :T]
