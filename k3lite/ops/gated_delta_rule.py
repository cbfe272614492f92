r"""Gated DeltaNet: the delta rule with one scalar decay per head and token.

Per head, with a memory ``S`` of shape ``[K, V]``, every token does

.. math::

    S_t = (I - \beta_t k_t k_t^\top)\,\alpha_t S_{t-1} + \beta_t k_t v_t^\top,
    \qquad o_t = S_t^\top (\text{scale}\cdot q_t),

with ``alpha_t = exp(g_t)`` in (0, 1]: ``g = 0`` is DeltaNet, a very negative ``g`` wipes the
memory. The decay is applied first and the delta correction is computed against the decayed memory.
The math is KDA's (``kda.py``) with one difference: ``g`` has no channel axis. Diffing the code shows
that for :func:`recurrent` and :func:`step` only, which match KDA's up to that axis. The chunked forms
differ in structure: here one scalar decay per token gives a single ``[C, C]`` table
(``_decay_between``) that multiplies the scores, while :func:`k3lite.ops.kda.chunked` must decay each
key channel separately inside the products and builds them by recursive halving (``_pairwise_decayed``).

Three forms, side by side:

* :func:`recurrent` - the token loop, the definition;
* :func:`chunked`   - the same numbers from matrix products over chunks of C tokens (WY/UT form);
* :func:`step`      - one decode token.
"""

from __future__ import annotations

import functools

import torch

from k3lite import _validate
from k3lite.ops._common import (
    each_sequence,
    heads_first,
    solve_unit_lower,
    start_state,
    through_padded_batch,
    tokens_first,
    triton_call,
)

KIND = "gated_delta_rule"


def recurrent(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Token-by-token reference. Returns ``(o [B, T, H, V], final_state [B, H, K, V])``.

    ``cu_seqlens`` ``[N + 1]``: N sequences packed along T (B = 1), each run alone from its own memory
    (``initial_state`` ``[N, H, K, V]``); the final state is then ``[N, H, K, V]``."""
    dims, offsets = _validate.check_packed_inputs(q, k, v, g, beta, per_channel_gate=False, state=initial_state,
                                                  cu_seqlens=cu_seqlens)
    scale = _validate.resolve_scale(scale, dims.K)
    if offsets is not None:
        return each_sequence(recurrent, offsets, (q, k, v, g, beta), initial_state, dims, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))         # [B, H, T, *]
    g, beta = (x.transpose(1, 2).to(dtype) for x in (g, beta))   # [B, H, T]
    S = start_state(initial_state, dims, dtype, q.device)          # [B, H, K, V]
    outputs = []
    for t in range(dims.T):
        # Forget first: the whole memory of the head shrinks by exp(g_t).
        S = torch.exp(g[:, :, t])[..., None, None] * S
        # What the decayed memory returns for k_t, and how far that is from v_t.
        error = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        # Move the answer stored under k_t a fraction beta_t of the way towards v_t.
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * error)
        outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, :, t], S))
    o = torch.stack(outputs, dim=2)
    return tokens_first(o, out_dtype), S


def chunked(q, k, v, g, beta, *, chunk_size=64, scale=None, initial_state=None, backend="auto",
            cu_seqlens=None):
    """Chunk-parallel form; same result as :func:`recurrent` for any T and any ``chunk_size >= 1``.

    ``cu_seqlens`` ``[N + 1]`` (B = 1, N sequences packed along T, ``initial_state`` and the final state
    ``[N, H, K, V]``): the sequences run as one batch padded with zero tokens, which change no memory
    (``_common.through_padded_batch``), on either backend; chunks never straddle two sequences.
    """
    dims, offsets = _validate.check_packed_inputs(q, k, v, g, beta, per_channel_gate=False, state=initial_state,
                                                  cu_seqlens=cu_seqlens, values=False)
    chunk_size = _validate.check_chunk_size(chunk_size)
    scale = _validate.resolve_scale(scale, dims.K)
    if offsets is not None:
        form = functools.partial(chunked, chunk_size=chunk_size, scale=scale, backend=backend)
        return through_padded_batch(form, offsets, (q, k, v, g, beta), initial_state)
    fused = _validate.resolve_backend(backend, q) == "triton"
    _validate.check_values(g, beta, in_kernel=fused)
    if fused:
        return triton_call("chunked", KIND, q, k, v, g, beta, scale=scale,
                           initial_state=initial_state, chunk_size=chunk_size)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))
    g, beta = (x.transpose(1, 2).to(dtype) for x in (g, beta))
    S = start_state(initial_state, dims, dtype, q.device)
    outputs = []
    for start in range(0, dims.T, chunk_size):
        span = slice(start, start + chunk_size)   # the last chunk may be shorter
        o_chunk, S = _chunk(scale * q[:, :, span], k[:, :, span], v[:, :, span],
                            g[:, :, span], beta[:, :, span], S)
        outputs.append(o_chunk)
    return tokens_first(torch.cat(outputs, dim=2), out_dtype), S


def _decay_between(g):
    """``exp(G_r - G_i)`` for every pair i <= r of a chunk, 0 above the diagonal: ``[B, H, C, C]``.

    The log ratio ``G_r - G_i = sum_{i<j<=r} g_j`` is summed directly over each span (a "segment
    sum"): as a difference of two cumulative sums it would lose digits once G is large (float32
    ulp at G = -2560 is 2.4e-4), and ``exp(G_r) * exp(-G_i)`` would overflow. The upper triangle
    (i > r, a growth) is set to -inf *before* exp so those entries are exactly 0.
    """
    C = g.shape[-1]
    later = torch.ones(C, C, dtype=torch.bool, device=g.device).triu(1)       # i > r
    # [.., j, i] = g_j where j > i, else 0; summing down j up to r gives sum_{i<j<=r} g_j.
    steps = g[..., :, None].expand(*g.shape, C)
    log_ratio = steps.masked_fill(~later.T, 0.0).cumsum(dim=-2)               # [.., r, i]
    return torch.exp(log_ratio.masked_fill(later, float("-inf")))


def _chunk(q, k, v, g, beta, S):
    """One chunk of C tokens (q already scaled). q, k, v ``[B, H, C, *]``, g, beta ``[B, H, C]``.

    Write ``u_r = beta_r (v_r - (exp(g_r) S_{r-1})^T k_r)`` for what token r actually adds; then
    ``S_r = exp(G_r) S_0 + sum_{i<=r} exp(G_r - G_i) k_i u_i^T`` (G: log-decay summed from the
    chunk start). Putting that into the definition of u gives one unit lower-triangular system,
    ``(I + A) U = Diag(beta) (V - exp(G) K S_0)`` with ``A[r, i] = beta_r exp(G_r - G_i) k_r . k_i``,
    solved as ``U - W S_0`` (the WY form). The decay is one number per head, so it factors out of
    the key dot product: the pairwise terms are plain matrix products scaled by ``exp(G_r - G_i)``.
    """
    C = q.shape[-2]
    G = g.cumsum(dim=-1)                                    # log-decay from chunk start through token r
    decay = _decay_between(g)                               # [B, H, C, C]
    kk = (k @ k.transpose(-1, -2)) * decay                  # k_r . k_i exp(G_r - G_i)
    qk = (q @ k.transpose(-1, -2)) * decay                  # the intra-chunk scores
    A = beta[..., :, None] * kk.tril(-1)                    # strictly lower: earlier tokens only
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    # Forward substitution for (I + A)^-1 Diag(beta) (the UT transform), on two right-hand sides:
    W = solve_unit_lower(eye + A, (beta * torch.exp(G))[..., None] * k)  # how S_0 enters u
    U = solve_unit_lower(eye + A, beta[..., None] * v)                    # how the values enter u
    new_values = U - W @ S                                  # u_r for every token of the chunk
    # Output: the decayed incoming memory read by q, plus the chunk's own writes seen by q.
    o = torch.exp(G)[..., None] * (q @ S) + qk @ new_values
    # Memory at the end: incoming memory decayed over the chunk, plus each write decayed to the
    # end (the last row of the decay table, every factor <= 1).
    to_end = decay[..., -1, :]                              # [B, H, C] = exp(G_last - G_i)
    S = torch.exp(G[..., -1])[..., None, None] * S + (to_end[..., None] * k).transpose(-1, -2) @ new_values
    return o, S


def step(q, k, v, g, beta, *, state=None, scale=None, backend="auto"):
    """One decode token: q, k ``[B, H, K]``, v ``[B, H, V]``, g and beta ``[B, H]``.

    Returns ``(o [B, H, V], new_state [B, H, K, V])``.
    """
    dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=False, state=state,
                                  state_name="state", time_axis=False, values=False)
    scale = _validate.resolve_scale(scale, dims.K)
    # The fused kernel has no backward: with an input that requires grad, the PyTorch step runs.
    fused = _validate.resolve_backend(backend, q) == "triton" and not _validate.needs_grad(q, k, v, g, beta, state)
    _validate.check_values(g, beta, in_kernel=fused)
    if fused:
        return triton_call("step", KIND, q, k, v, g, beta, state=state, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    S = torch.exp(g)[..., None, None] * start_state(state, dims, dtype, q.device)
    error = v - torch.einsum("bhk,bhkv->bhv", k, S)
    S = S + torch.einsum("bhk,bhv->bhkv", k, beta[..., None] * error)
    o = torch.einsum("bhk,bhkv->bhv", scale * q, S)
    return o.to(out_dtype), S
