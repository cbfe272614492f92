r"""DeltaNet: linear attention whose write corrects what the memory already returns.

Per head, with a memory ``S`` of shape ``[K, V]``, every token does

.. math::

    S_t = S_{t-1} + \beta_t k_t (v_t - S_{t-1}^\top k_t)^\top
        = (I - \beta_t k_t k_t^\top) S_{t-1} + \beta_t k_t v_t^\top,
    \qquad o_t = S_t^\top (\text{scale}\cdot q_t).

With unit keys and ``beta = 1`` the memory afterwards returns exactly ``v_t`` for ``k_t``: the old
answer is replaced instead of piled upon. Diff this file against ``gated_delta_rule.py``: the only
change is that there is no decay.

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

KIND = "delta_rule"


def recurrent(q, k, v, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Token-by-token reference. Returns ``(o [B, T, H, V], final_state [B, H, K, V])``.

    ``cu_seqlens`` ``[N + 1]``: N sequences packed along T (B = 1), each run alone from its own memory
    (``initial_state`` ``[N, H, K, V]``); the final state is then ``[N, H, K, V]``."""
    dims, offsets = _validate.check_packed_inputs(q, k, v, beta=beta, state=initial_state,
                                                  cu_seqlens=cu_seqlens)
    scale = _validate.resolve_scale(scale, dims.K)
    if offsets is not None:
        return each_sequence(recurrent, offsets, (q, k, v, beta), initial_state, dims, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))         # [B, H, T, *]
    beta = beta.transpose(1, 2).to(dtype)                          # [B, H, T]
    S = start_state(initial_state, dims, dtype, q.device)          # [B, H, K, V]
    outputs = []
    for t in range(dims.T):
        # What the memory returns for k_t, and how far that is from v_t.
        error = v[:, :, t] - torch.einsum("bhk,bhkv->bhv", k[:, :, t], S)
        # Move the answer stored under k_t a fraction beta_t of the way towards v_t.
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], beta[:, :, t, None] * error)
        outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, :, t], S))
    o = torch.stack(outputs, dim=2)
    return tokens_first(o, out_dtype), S


def chunked(q, k, v, beta, *, chunk_size=64, scale=None, initial_state=None, backend="auto",
            cu_seqlens=None):
    """Chunk-parallel form; same result as :func:`recurrent` for any T and any ``chunk_size >= 1``.

    ``cu_seqlens`` ``[N + 1]`` (B = 1, N sequences packed along T, ``initial_state`` and the final state
    ``[N, H, K, V]``): the sequences run as one batch padded with zero tokens, which change no memory
    (``_common.through_padded_batch``), on either backend; chunks never straddle two sequences.
    """
    dims, offsets = _validate.check_packed_inputs(q, k, v, beta=beta, state=initial_state,
                                                  cu_seqlens=cu_seqlens, values=False)
    chunk_size = _validate.check_chunk_size(chunk_size)
    scale = _validate.resolve_scale(scale, dims.K)
    if offsets is not None:
        form = functools.partial(chunked, chunk_size=chunk_size, scale=scale, backend=backend)
        return through_padded_batch(form, offsets, (q, k, v, beta), initial_state)
    fused = _validate.resolve_backend(backend, q) == "triton"
    _validate.check_values(beta=beta, in_kernel=fused)
    if fused:
        return triton_call("chunked", KIND, q, k, v, None, beta, scale=scale,
                           initial_state=initial_state, chunk_size=chunk_size)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))
    beta = beta.transpose(1, 2).to(dtype)
    S = start_state(initial_state, dims, dtype, q.device)
    outputs = []
    for start in range(0, dims.T, chunk_size):
        span = slice(start, start + chunk_size)   # the last chunk may be shorter
        o_chunk, S = _chunk(scale * q[:, :, span], k[:, :, span], v[:, :, span], beta[:, :, span], S)
        outputs.append(o_chunk)
    return tokens_first(torch.cat(outputs, dim=2), out_dtype), S


def _chunk(q, k, v, beta, S):
    """One chunk of C tokens (q already scaled). q, k, v ``[B, H, C, *]``, beta ``[B, H, C]``.

    Write ``u_r = beta_r (v_r - S_{r-1}^T k_r)`` for what token r actually adds; then
    ``S_r = S_0 + sum_{i<=r} k_i u_i^T``. Putting that into the definition of u gives one unit
    lower-triangular system for the whole chunk, ``(I + A) U = Diag(beta) (V - K S_0)`` with
    ``A = StrictTril(Diag(beta) K K^T)``. Its solution is split as ``U - W S_0`` (the WY form) so
    that everything except ``W S_0`` can be computed before the incoming memory is known.
    """
    C = q.shape[-2]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    A = beta[..., :, None] * (k @ k.transpose(-1, -2)).tril(-1)   # strictly lower: earlier tokens only
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    # Forward substitution for (I + A)^-1 Diag(beta) (the UT transform), on two right-hand sides:
    W = solve_unit_lower(eye + A, beta[..., None] * k)     # how S_0 enters u
    U = solve_unit_lower(eye + A, beta[..., None] * v)     # how the values enter u
    new_values = U - W @ S                                  # u_r for every token of the chunk
    # Output: the incoming memory read by q, plus the chunk's own writes seen causally by q.
    o = q @ S + ((q @ k.transpose(-1, -2)) * causal) @ new_values
    S = S + k.transpose(-1, -2) @ new_values
    return o, S


def step(q, k, v, beta, *, state=None, scale=None, backend="auto"):
    """One decode token: q, k ``[B, H, K]``, v ``[B, H, V]``, beta ``[B, H]``.

    Returns ``(o [B, H, V], new_state [B, H, K, V])``.
    """
    dims = _validate.check_inputs(q, k, v, beta=beta, state=state, state_name="state", time_axis=False,
                                  values=False)
    scale = _validate.resolve_scale(scale, dims.K)
    # The fused kernel has no backward: with an input that requires grad, the PyTorch step runs.
    fused = _validate.resolve_backend(backend, q) == "triton" and not _validate.needs_grad(q, k, v, beta, state)
    _validate.check_values(beta=beta, in_kernel=fused)
    if fused:
        return triton_call("step", KIND, q, k, v, None, beta, state=state, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v, beta = (x.to(dtype) for x in (q, k, v, beta))
    S = start_state(state, dims, dtype, q.device)
    error = v - torch.einsum("bhk,bhkv->bhv", k, S)
    S = S + torch.einsum("bhk,bhv->bhkv", k, beta[..., None] * error)
    o = torch.einsum("bhk,bhkv->bhv", scale * q, S)
    return o.to(out_dtype), S
