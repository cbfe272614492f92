r"""Kimi Delta Attention (KDA): the delta rule with one decay per key channel.

Per head, with a memory ``S`` of shape ``[K, V]``, every token does

.. math::

    S_t = (I - \beta_t k_t k_t^\top)\,\mathrm{Diag}(\alpha_t)\,S_{t-1} + \beta_t k_t v_t^\top,
    \qquad o_t = S_t^\top (\text{scale}\cdot q_t),

with ``alpha_t = exp(g_t)`` in (0, 1]^K. Gated DeltaNet is the case where all K channels of
``g_t`` are equal; DeltaNet is ``g = 0``. The decay is applied first and the delta correction is
computed against the decayed memory.

Three forms, side by side:

* :func:`recurrent` - the token loop, the definition;
* :func:`chunked`   - the same numbers from matrix products over chunks of C tokens (WY/UT form);
* :func:`step`      - one decode token.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite import _validate
from k3lite.ops._common import heads_first, start_state, tokens_first, triton_call

KIND = "kda"
SEGMENT_TOKENS = 512   # chunked() prepares this many tokens at a time


def recurrent(q, k, v, g, beta, *, scale=None, initial_state=None):
    """Token-by-token reference. Returns ``(o [B, T, H, V], final_state [B, H, K, V])``."""
    dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=True, state=initial_state)
    scale = _validate.resolve_scale(scale, dims.K)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v, g = (heads_first(x, dtype) for x in (q, k, v, g))   # [B, H, T, *]
    beta = beta.transpose(1, 2).to(dtype)                          # [B, H, T]
    S = start_state(initial_state, dims, dtype, q.device)          # [B, H, K, V]
    outputs = []
    for t in range(dims.T):
        # Forget first: channel d of every stored association shrinks by exp(g_t[d]).
        S = torch.exp(g[:, :, t])[..., None] * S
        # What the decayed memory returns for k_t, and how far that is from v_t.
        error = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        # Move the answer stored under k_t a fraction beta_t of the way towards v_t.
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * error)
        outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, :, t], S))
    o = torch.stack(outputs, dim=2)
    return tokens_first(o, out_dtype), S


def chunked(q, k, v, g, beta, *, chunk_size=64, scale=None, initial_state=None, backend="auto"):
    """Chunk-parallel form; same result as :func:`recurrent` for any T and any ``chunk_size >= 1``.

    Everything inside a chunk is computed for all chunks at once (:func:`_prepare_chunks`); only
    the hand-over of the memory from one chunk to the next is a loop (:func:`_carry`).
    """
    dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=True, state=initial_state)
    _validate.check_chunk_size(chunk_size)
    scale = _validate.resolve_scale(scale, dims.K)
    if _validate.resolve_backend(backend, q) == "triton":
        return triton_call("chunked", KIND, q, k, v, g, beta, scale=scale,
                           initial_state=initial_state, chunk_size=chunk_size)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v, g = (_into_chunks(heads_first(x, dtype), chunk_size) for x in (scale * q, k, v, g))
    beta = _into_chunks(beta.transpose(1, 2).to(dtype)[..., None], chunk_size)[..., 0]
    S = start_state(initial_state, dims, dtype, q.device)
    # A few hundred tokens at a time: the intermediates then stay in the CPU cache (1.5x faster
    # at T = 4096 than all chunks at once) and memory stays bounded for long sequences.
    # Splitting the sequence and carrying S gives exactly the same result.
    chunks_per_segment = max(1, SEGMENT_TOKENS // chunk_size)
    outputs = []
    for first in range(0, q.shape[2], chunks_per_segment):
        part = slice(first, first + chunks_per_segment)
        prepared = _prepare_chunks(*(t[:, :, part] for t in (q, k, v, g, beta)))
        o_part, S = _carry(*prepared, S)
        outputs.append(o_part)
    o = torch.cat(outputs, dim=2)[:, :, :, :chunk_size].flatten(2, 3)[:, :, :dims.T]   # drop padding
    return tokens_first(o, out_dtype), S


def _into_chunks(x, chunk_size):
    """``[B, H, T, D]`` -> ``[B, H, n, P, D]``: n chunks of C tokens, each padded to a power of two P.

    Padding tokens have k = v = q = 0, beta = 0 and g = 0: they write nothing, decay nothing, and
    their outputs are dropped, so the result is unchanged. P is a power of two so that a chunk can
    be halved down to single tokens (:func:`_pairwise_decayed`).
    """
    B, H, T, D = x.shape
    n = -(-T // chunk_size)
    P = 1 << (chunk_size - 1).bit_length()
    if n * chunk_size > T:
        x = F.pad(x, (0, 0, 0, n * chunk_size - T))
    x = x.reshape(B, H, n, chunk_size, D)
    return F.pad(x, (0, 0, 0, P - chunk_size)) if P > chunk_size else x


def _prepare_chunks(q, k, v, g, beta):
    """Everything that does not need the incoming memory, for all chunks at once.

    Writing ``u_r = beta_r (v_r - (Diag(exp g_r) S_{r-1})^T k_r)`` for what token r actually adds,
    the memory after token r of a chunk is ``Diag(exp G_r) S_0 + sum_{i<=r} Diag(exp(G_r - G_i)) k_i u_i^T``
    (G: log-decay summed from the chunk start). Putting that into the definition of u gives one unit
    lower-triangular system for the whole chunk,
    ``(I + A) U = Diag(beta) (V - (exp(G) * K) S_0)``, ``A[r, i] = beta_r sum_d k_rd k_id exp(G_rd - G_id)``,
    whose solution splits into ``U - W S_0`` (the WY form): U and W need no memory.
    Shapes: ``[B, H, n, P, *]``; returns the tensors :func:`_carry` consumes.
    """
    P, K = q.shape[-2], q.shape[-1]
    G = g.to(torch.float64).cumsum(dim=-2)                  # log-decay from chunk start through token r
    kk, qk = _pairwise_decayed(k, q, G)                     # [B, H, n, P, P] each, zero above the diagonal
    A = beta[..., :, None] * kk.tril(-1)                    # strictly lower: earlier tokens only
    decay_from_start = torch.exp(G.to(q.dtype))             # exp(G_r) <= 1
    # Forward substitution for (I + A)^-1 Diag(beta) (the UT transform), both right-hand sides at once:
    # W says how the incoming memory enters u, U how the chunk's values do.
    eye = torch.eye(P, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * torch.cat((decay_from_start * k, v), dim=-1)
    W, U = _solve_unit_lower(eye + A, rhs).split((K, v.shape[-1]), dim=-1)
    q_decayed = q * decay_from_start                        # q_r reads S_0 decayed up to token r
    k_to_end = k * torch.exp((G[..., -1:, :] - G).to(k.dtype))  # k_i decayed from token i to the chunk end
    chunk_decay = decay_from_start[..., -1, :, None]        # [B, H, n, K, 1]: S_0 decayed over the chunk
    # Both reads of the incoming memory (W S_0 and q S_0) as one product per chunk.
    reads_memory = torch.cat((W, q_decayed), dim=-2)        # [B, H, n, 2P, K]
    return reads_memory, U, qk, k_to_end.transpose(-1, -2), chunk_decay


def _carry(reads_memory, U, qk, k_to_end_T, chunk_decay, S):
    """Walk through the chunks in order, passing the memory S ``[B, H, K, V]`` along."""
    P = U.shape[-2]
    # Chunk axis first, so that each chunk's slice is one contiguous block for the matrix products.
    per_chunk = zip(*(t.movedim(2, 0).contiguous() for t in (reads_memory, U, qk, k_to_end_T, chunk_decay)))
    outputs = []
    for reads_c, U_c, qk_c, k_to_end_T_c, decay_c in per_chunk:
        W_S, q_S = (reads_c @ S).split(P, dim=-2)
        new_values = U_c - W_S                              # u_r for every token of the chunk
        # Output: the decayed incoming memory read by q, plus the chunk's own writes seen by q.
        outputs.append(q_S + qk_c @ new_values)
        # Memory at the end: incoming memory decayed over the chunk, plus each write decayed to the end.
        S = decay_c * S + k_to_end_T_c @ new_values
    return torch.stack(outputs, dim=2), S


def _pairwise_decayed(k, q, G):
    """Decayed key-key and query-key scores of one block, 0 above the diagonal: two ``[..., b, b]``.

    ``kk[r, i] = sum_d k_rd k_id exp(G_rd - G_id)`` and ``qk[r, i]`` the same with ``q_r``, for i <= r.
    ``exp(G_r - G_i)`` is how much of channel d of token i's write survives until token r. Forming
    it as ``exp(G_r) * exp(-G_i)`` overflows once a span decays by more than e^88 (g = -20 per step
    does that in 5 tokens), and a ``[b, b, K]`` table of pairwise factors costs b*K work per token.
    Instead, split the block in halves at the boundary token m:

    * a pair across the boundary (i <= m < r) factors through m,
      ``exp(G_r - G_i) = exp(G_r - G_m) * exp(G_m - G_i)``: both exponents are <= 0, so both
      factors are <= 1, nothing overflows, and the whole cross block is one matrix product;
    * pairs inside a half are the same problem at half the size (both halves at once, batched);
    * a single token pairs only with itself, with decay exp(0) = 1.

    The block above the diagonal (i > r, the future) is never computed: it is filled with zeros.
    ``G`` comes in float64: at G = -2560 a float32 step (ulp) is 2.4e-4, so a difference of two
    such sums would be wrong in the fourth digit. The block size b must be a power of two.
    """
    b = k.shape[-2]
    if b == 1:
        return (k * k).sum(dim=-1, keepdim=True), (q * k).sum(dim=-1, keepdim=True)   # [..., 1, 1]
    half = b // 2
    G_m = G[..., half - 1:half, :]                              # log-decay at the boundary token m
    to_right = torch.exp((G[..., half:, :] - G_m).to(k.dtype))  # from m to each r of the right half
    k_left_T = (k[..., :half, :] * torch.exp((G_m - G[..., :half, :]).to(k.dtype))).transpose(-1, -2)
    cross_k = (k[..., half:, :] * to_right) @ k_left_T         # [..., half, half]
    cross_q = (q[..., half:, :] * to_right) @ k_left_T
    inside_k, inside_q = _pairwise_decayed(*(t.unflatten(-2, (2, half)) for t in (k, q, G)))
    return _assemble(inside_k, cross_k), _assemble(inside_q, cross_q)


def _assemble(inside, cross):
    """``[[inside_0, 0], [cross, inside_1]]``: the block lower-triangular matrix of a split block."""
    top = torch.cat((inside[..., 0, :, :], torch.zeros_like(cross)), dim=-1)
    bottom = torch.cat((cross, inside[..., 1, :, :]), dim=-1)
    return torch.cat((top, bottom), dim=-2)


def _solve_unit_lower(L, rhs):
    """Solve ``L X = rhs`` for unit lower-triangular L (forward substitution, differentiable)."""
    return torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)


def step(q, k, v, g, beta, *, state, scale=None, backend="auto"):
    """One decode token: q, k ``[B, H, K]``, v ``[B, H, V]``, g ``[B, H, K]``, beta ``[B, H]``.

    Returns ``(o [B, H, V], new_state [B, H, K, V])``.
    """
    dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=True, state=state,
                                  state_name="state", time_axis=False)
    scale = _validate.resolve_scale(scale, dims.K)
    if _validate.resolve_backend(backend, q) == "triton":
        return triton_call("step", KIND, q, k, v, g, beta, state=state, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    S = torch.exp(g)[..., None] * state.to(dtype)
    error = v - torch.einsum("bhk,bhkv->bhv", k, S)
    S = S + torch.einsum("bhk,bhv->bhkv", k, beta[..., None] * error)
    o = torch.einsum("bhk,bhkv->bhv", scale * q, S)
    return o.to(out_dtype), S
