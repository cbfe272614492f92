r"""Linear attention: softmax removed, so attention becomes a running sum of outer products.

Per head, with a memory ``S`` of shape ``[K, V]``, every token does

.. math::

    S_t = S_{t-1} + k_t v_t^\top, \qquad o_t = S_t^\top (\text{scale}\cdot q_t).

Optionally keys and queries go through the feature map ``phi(x) = ELU(x) + 1`` (positive
features, as in Katharopoulos et al. 2020) and the output is divided by ``z_t^T phi(q_t)`` with
``z_t = sum_{i<=t} phi(k_i)``, so every output is a weighted average of values like softmax
attention's (``normalize=True``; the scale then cancels).

Four forms, side by side:

* :func:`recurrent` - the token loop, the definition (O(T d^2));
* :func:`parallel`  - the masked quadratic form ``(Q K^T ⊙ M) V``, attention without softmax (O(T^2 d));
* :func:`chunked`   - quadratic inside chunks of C tokens, recurrent across them: ``O = Q S + (Q K^T ⊙ M) V``;
* :func:`step`      - one decode token.

The feature map and the normaliser live in :func:`recurrent` and :func:`parallel` only (torch);
:func:`chunked` and :func:`step` are the plain form that the delta-rule family builds on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite import _validate
from k3lite.ops._common import heads_first, start_state, tokens_first, triton_call

KIND = "linear_attention"
FEATURE_MAPS = (None, "elu1")


def _check_normalize(feature_map, normalize) -> None:
    # Raw q . k scores can be negative, so their row sum can be zero and the division blow up.
    if normalize and feature_map is None:
        raise ValueError("normalize=True needs feature_map='elu1' (positive features), got feature_map=None")


def _features(x, feature_map):
    """``phi(x) = ELU(x) + 1`` keeps every feature positive, so every score is positive."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map must be one of {FEATURE_MAPS}, got {feature_map!r}")
    return x if feature_map is None else F.elu(x) + 1.0


def recurrent(q, k, v, *, scale=None, initial_state=None, feature_map=None, normalize=False):
    """Token-by-token reference. Returns ``(o [B, T, H, V], final_state [B, H, K, V])``.

    With ``normalize=True`` the returned state is the numerator memory ``S`` (the running sum
    ``z`` is not returned), so ``initial_state`` cannot be combined with it.
    """
    dims = _validate.check_inputs(q, k, v, state=initial_state)
    _check_normalize(feature_map, normalize)
    if normalize and initial_state is not None:
        raise ValueError("initial_state cannot be combined with normalize=True (the normaliser z has no start value)")
    scale = _validate.resolve_scale(scale, dims.K)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))          # [B, H, T, *]
    q, k = _features(q, feature_map), _features(k, feature_map)
    S = start_state(initial_state, dims, dtype, q.device)           # [B, H, K, V]
    z = torch.zeros(dims.B, dims.H, dims.K, dtype=dtype, device=q.device)
    outputs = []
    for t in range(dims.T):
        # Write: add the association k_t -> v_t on top of everything stored so far.
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], v[:, :, t])
        # Read: q_t against every stored key at once, i.e. sum_i (q_t . k_i) v_i.
        o_t = torch.einsum("bhk,bhkv->bhv", scale * q[:, :, t], S)
        if normalize:
            z = z + k[:, :, t]      # sum_i k_i, so that z . q_t = sum_i (q_t . k_i): the total weight
            o_t = o_t / torch.einsum("bhk,bhk->bh", scale * q[:, :, t], z)[..., None]
        outputs.append(o_t)
    return tokens_first(torch.stack(outputs, dim=2), out_dtype), S


def parallel(q, k, v, *, scale=None, feature_map=None, normalize=False):
    """Masked quadratic form: softmax attention with the softmax removed. Returns ``(o, final_state)``."""
    dims = _validate.check_inputs(q, k, v)
    _check_normalize(feature_map, normalize)
    scale = _validate.resolve_scale(scale, dims.K)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))
    q, k = _features(q, feature_map), _features(k, feature_map)
    causal = torch.ones(dims.T, dims.T, dtype=torch.bool, device=q.device).tril()
    scores = (scale * q @ k.transpose(-1, -2)) * causal     # [B, H, T, T]; no softmax, just the mask
    o = scores @ v
    if normalize:
        o = o / scores.sum(dim=-1, keepdim=True)            # each row of weights now sums to 1
    S = k.transpose(-1, -2) @ v                             # the memory the recurrent form ends with
    return tokens_first(o, out_dtype), S


def chunked(q, k, v, *, chunk_size=64, scale=None, initial_state=None, backend="auto"):
    """Chunk-parallel form; same result as :func:`recurrent` for any T and any ``chunk_size >= 1``."""
    dims = _validate.check_inputs(q, k, v, state=initial_state)
    chunk_size = _validate.check_chunk_size(chunk_size)
    scale = _validate.resolve_scale(scale, dims.K)
    if _validate.resolve_backend(backend, q) == "triton":
        return triton_call("chunked", KIND, q, k, v, None, None, scale=scale,
                           initial_state=initial_state, chunk_size=chunk_size)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (heads_first(x, dtype) for x in (q, k, v))
    S = start_state(initial_state, dims, dtype, q.device)
    outputs = []
    for start in range(0, dims.T, chunk_size):
        span = slice(start, start + chunk_size)   # the last chunk may be shorter
        o_chunk, S = _chunk(scale * q[:, :, span], k[:, :, span], v[:, :, span], S)
        outputs.append(o_chunk)
    return tokens_first(torch.cat(outputs, dim=2), out_dtype), S


def _chunk(q, k, v, S):
    """One chunk of C tokens (q already scaled): ``O = Q S + (Q K^T ⊙ M) V``, then ``S += K^T V``.

    Earlier chunks are folded into S and read with one product (state first, cost ``C d^2``);
    the chunk's own tokens are handled like attention (scores first, cost ``C^2 d``).
    """
    C = q.shape[-2]
    causal = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    o = q @ S + ((q @ k.transpose(-1, -2)) * causal) @ v
    S = S + k.transpose(-1, -2) @ v
    return o, S


def step(q, k, v, *, state=None, scale=None, backend="auto"):
    """One decode token: q, k ``[B, H, K]``, v ``[B, H, V]``. Returns ``(o [B, H, V], new_state)``."""
    dims = _validate.check_inputs(q, k, v, state=state, state_name="state", time_axis=False)
    scale = _validate.resolve_scale(scale, dims.K)
    # The fused kernel has no backward: with an input that requires grad, the PyTorch step runs.
    if _validate.resolve_backend(backend, q) == "triton" and not _validate.needs_grad(q, k, v, state):
        return triton_call("step", KIND, q, k, v, None, None, state=state, scale=scale)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    q, k, v = (x.to(dtype) for x in (q, k, v))
    S = start_state(state, dims, dtype, q.device) + torch.einsum("bhk,bhv->bhkv", k, v)
    o = torch.einsum("bhk,bhkv->bhv", scale * q, S)
    return o.to(out_dtype), S
