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

What is new compared with Gated DeltaNet is inside a chunk: the decay between two tokens is a
K-vector, so it no longer factors out of the key dot product. :func:`_pairwise_decayed_table`
computes those scores straight from the definition; :func:`_pairwise_decayed` gets the same
numbers by halving the chunk, with matrix products and every decay factor <= 1.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

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

KIND = "kda"
SEGMENT_TOKENS = 512   # chunked() prepares this many tokens at a time


def recurrent(q, k, v, g, beta, *, scale=None, initial_state=None, cu_seqlens=None):
    """Token-by-token reference. Returns ``(o [B, T, H, V], final_state [B, H, K, V])``.

    ``cu_seqlens`` ``[N + 1]``: N sequences packed along T (B = 1), each run alone from its own memory
    (``initial_state`` ``[N, H, K, V]``); the final state is then ``[N, H, K, V]``."""
    dims, offsets = _validate.check_packed_inputs(q, k, v, g, beta, per_channel_gate=True, state=initial_state,
                                                  cu_seqlens=cu_seqlens)
    scale = _validate.resolve_scale(scale, dims.K)
    if offsets is not None:
        return each_sequence(recurrent, offsets, (q, k, v, g, beta), initial_state, dims, scale=scale)
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


def chunked(q, k, v, g, beta, *, chunk_size=64, scale=None, initial_state=None, backend="auto",
            cu_seqlens=None):
    """Chunk-parallel form; same result as :func:`recurrent` for any T and any ``chunk_size >= 1``.

    Everything inside a chunk is computed for all chunks at once (:func:`_prepare_chunks`); only
    the hand-over of the memory from one chunk to the next is a loop (:func:`_carry`).

    ``cu_seqlens`` ``[N + 1]`` (B = 1, N sequences packed along T, ``initial_state`` and the final state
    ``[N, H, K, V]``): the sequences run as one batch padded with zero tokens, which change no memory
    (``_common.through_padded_batch``), on either backend; chunks never straddle two sequences.
    """
    dims, offsets = _validate.check_packed_inputs(q, k, v, g, beta, per_channel_gate=True, state=initial_state,
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
    # A sequence shorter than a chunk is one chunk of its own length: padded to chunk_size it would only gain zero
    # tokens, and the [P, P] intermediates would grow with chunk_size^2 (T = 8 at chunk_size = 64: 64 x 64 instead
    # of 8 x 8). The same numbers up to float32 rounding (the products sum over fewer zeros); T >= chunk_size keeps
    # chunk_size, bit for bit.
    chunk_size = min(chunk_size, dims.T)
    q, k, v, g = (_into_chunks(x.to(dtype), chunk_size) for x in (q, k, v, g))
    beta = _into_chunks(beta.to(dtype)[..., None], chunk_size)[..., 0]
    S = start_state(initial_state, dims, dtype, q.device)
    # A few hundred tokens at a time: the intermediates then stay in the CPU cache (faster than all chunks
    # at once on long sequences) and memory stays bounded for long sequences.
    # Splitting the sequence and carrying S gives exactly the same result.
    chunks_per_segment = max(1, SEGMENT_TOKENS // chunk_size)
    outputs = []
    for first in range(0, q.shape[0], chunks_per_segment):
        part = slice(first, first + chunks_per_segment)
        o_part, S = _carry(*_prepare_chunks(scale * q[part], k[part], v[part], g[part], beta[part]), S)
        outputs.append(o_part)
    return _from_chunks(torch.cat(outputs), chunk_size, dims.T).to(out_dtype), S


def _into_chunks(x, chunk_size):
    """``[B, T, H, D]`` -> ``[n, B, H, P, D]``: n chunks of C tokens, each padded to a power of two P.

    Padding tokens have k = v = q = 0, beta = 0 and g = 0: they write nothing, decay nothing, and
    their outputs are dropped, so the result is unchanged. P is a power of two so that a chunk can
    be halved down to single tokens (:func:`_pairwise_decayed`). The chunk axis comes first so
    that every chunk is one contiguous block when :func:`_carry` walks through them.
    """
    B, T, H, D = x.shape
    n = -(-T // chunk_size)
    P = 1 << (chunk_size - 1).bit_length()
    if n * chunk_size > T:
        x = F.pad(x, (0, 0, 0, 0, 0, n * chunk_size - T))
    x = x.reshape(B, n, chunk_size, H, D).permute(1, 0, 3, 2, 4)
    if P > chunk_size:
        x = F.pad(x, (0, 0, 0, P - chunk_size))
    return x.contiguous()


def _from_chunks(o, chunk_size, T):
    """``[n, B, H, P, V]`` -> ``[B, T, H, V]``, dropping the padding tokens."""
    n, B, H, _, V = o.shape
    return o[..., :chunk_size, :].permute(1, 0, 3, 2, 4).reshape(B, n * chunk_size, H, V)[:, :T]


def _prepare_chunks(q, k, v, g, beta):
    """Everything that does not need the incoming memory, for all chunks at once.

    Writing ``u_r = beta_r (v_r - (Diag(exp g_r) S_{r-1})^T k_r)`` for what token r actually adds,
    the memory after token r of a chunk is ``Diag(exp G_r) S_0 + sum_{i<=r} Diag(exp(G_r - G_i)) k_i u_i^T``
    (G: log-decay summed from the chunk start). Putting that into the definition of u gives one unit
    lower-triangular system for the whole chunk,
    ``(I + A) U = Diag(beta) (V - (exp(G) * K) S_0)``, ``A[r, i] = beta_r sum_d k_rd k_id exp(G_rd - G_id)``,
    whose solution splits into ``U - W S_0`` (the WY form): U and W need no memory.
    Shapes: ``[n, B, H, P, *]``; returns the tensors :func:`_carry` consumes.
    """
    P, K = q.shape[-2], q.shape[-1]
    # Scores between tokens of a chunk, and the log-decays G_r (from the chunk start through r) and
    # G_last - G_i (from i to the chunk end), all from one pass of halving (_pairwise_decayed).
    kk, qk, G, G_to_end = _pairwise_decayed(k, q, g)       # kk, qk [n, B, H, P, P]
    A = beta[..., :, None] * kk                             # strictly lower: earlier tokens only
    decay_from_start = torch.exp(G)                         # exp(G_r) <= 1
    # Forward substitution for (I + A)^-1 Diag(beta) (the UT transform), both right-hand sides at once:
    # W says how the incoming memory enters u, U how the chunk's values do.
    eye = torch.eye(P, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * torch.cat((decay_from_start * k, v), dim=-1)
    W, U = solve_unit_lower(eye + A, rhs).split((K, v.shape[-1]), dim=-1)
    q_decayed = q * decay_from_start                        # q_r reads S_0 decayed up to token r
    k_to_end = k * torch.exp(G_to_end)                     # k_i decayed from token i to the chunk end
    chunk_decay = decay_from_start[..., -1, :, None]        # [n, B, H, K, 1]: S_0 decayed over the chunk
    # Both reads of the incoming memory (W S_0 and q S_0) as one product per chunk.
    reads_memory = torch.cat((W, q_decayed), dim=-2)        # [n, B, H, 2P, K]
    return reads_memory, U, qk, k_to_end.transpose(-1, -2), chunk_decay


def _carry(reads_memory, U, qk, k_to_end_T, chunk_decay, S):
    """Walk through the chunks in order, passing the memory S ``[B, H, K, V]`` along."""
    P = U.shape[-2]
    per_chunk = zip(reads_memory, U, qk, k_to_end_T, chunk_decay)      # along the chunk axis
    outputs = []
    for reads_c, U_c, qk_c, k_to_end_T_c, decay_c in per_chunk:
        W_S, q_S = (reads_c @ S).split(P, dim=-2)
        new_values = U_c - W_S                              # u_r for every token of the chunk
        # Output: the decayed incoming memory read by q, plus the chunk's own writes seen by q.
        outputs.append(q_S + qk_c @ new_values)
        # Memory at the end: incoming memory decayed over the chunk, plus each write decayed to the end.
        S = decay_c * S + k_to_end_T_c @ new_values
    return torch.stack(outputs), S


def _pairwise_decayed(k, q, g):
    """Decayed scores between the tokens of a block, and the block's own log-decay sums.

    Returns, for a block of b tokens (b a power of two):

    * ``kk[r, i] = sum_d k_rd k_id exp(G_rd - G_id)`` for i < r, else 0 (the delta rule's A);
    * ``qk[r, i]``, the same with ``q_r`` and for i <= r (what q_r sees of token i's write);
    * ``before[r] = sum_{j<=r} g_j`` and ``after[i] = sum_{j>i} g_j``, summed within the block.

    ``exp(G_r - G_i)`` is how much of channel d of token i's write survives until token r. Forming
    it as ``exp(G_r) * exp(-G_i)`` overflows once a span decays by more than e^88 (g = -20 per step
    does that in 5 tokens); taking ``G_r - G_i`` as a difference of two running sums loses digits
    (at G = -2560 a float32 step is 2.4e-4); and a ``[b, b, K]`` table of pairwise factors costs
    b*K work per token. Instead, split the block in halves at the boundary token m:

    * pairs inside a half are the same problem at half the size (both halves at once, batched),
      and each half reports its own ``before`` and ``after``;
    * a pair across the boundary (i <= m < r) factors through m,
      ``exp(G_r - G_i) = exp(before_right[r]) * exp(after_left[i])``: both exponents are sums of
      gates <= 0, so both factors are <= 1, nothing overflows, and the cross block is one matrix
      product;
    * a single token pairs only with itself, with decay exp(0) = 1.

    Every sum is built by adding sums of the same sign, so no digits cancel. The block above the
    diagonal (the future) is never computed: it is filled with zeros.
    """
    b = k.shape[-2]
    if b == 1:
        qk = (q * k).sum(dim=-1, keepdim=True)                 # [..., 1, 1]
        return torch.zeros_like(qk), qk, g, torch.zeros_like(g)
    half = b // 2
    kk_in, qk_in, before, after = _pairwise_decayed(*(t.unflatten(-2, (2, half)) for t in (k, q, g)))
    to_right = torch.exp(before[..., 1, :, :])                 # decay from m to each r of the right half
    k_left_T = (k[..., :half, :] * torch.exp(after[..., 0, :, :])).transpose(-1, -2)   # from each i to m
    cross_k = (k[..., half:, :] * to_right) @ k_left_T         # [..., half, half]
    cross_q = (q[..., half:, :] * to_right) @ k_left_T
    # Extend the halves' sums to the whole block: the right half's prefixes also run over the
    # whole left half, the left half's suffixes over the whole right half.
    left_total, right_total = before[..., 0, -1:, :], before[..., 1, -1:, :]
    before = torch.cat((before[..., 0, :, :], before[..., 1, :, :] + left_total), dim=-2)
    after = torch.cat((after[..., 0, :, :] + right_total, after[..., 1, :, :]), dim=-2)
    return _assemble(kk_in, cross_k), _assemble(qk_in, cross_q), before, after


def _pairwise_decayed_table(k, q, g):
    """The definition behind :func:`_pairwise_decayed`, for reading and testing (any block size).

    Builds the full ``[b, b, K]`` table of ``G_r - G_i = sum_{i<j<=r} g_j`` (each span summed
    directly, a "segment sum"), sets the future (i > r, where the sum would be a growth) to -inf
    *before* exp so it becomes exactly 0, and contracts over the channels. Same numbers as the
    halving, with b*K work per token instead of about log2(b)*K.
    """
    b = k.shape[-2]
    later = torch.ones(b, b, dtype=torch.bool, device=k.device).triu(1)[:, :, None]   # [r, i, 1]: i > r
    # steps[j, i] = g_j where j > i, else 0; a running sum down j up to r is sum_{i<j<=r} g_j.
    steps = g[..., :, None, :].expand(*g.shape[:-1], b, g.shape[-1]).masked_fill(~later.transpose(0, 1), 0.0)
    log_decay = steps.cumsum(dim=-3).masked_fill(later, float("-inf"))
    k_decayed = torch.exp(log_decay) * k[..., None, :, :]                 # [..., r, i, K]
    kk = (k_decayed @ k[..., :, :, None]).squeeze(-1).tril(-1)
    qk = (k_decayed @ q[..., :, :, None]).squeeze(-1)
    return kk, qk


def _assemble(inside, cross):
    """``[[inside_0, 0], [cross, inside_1]]``: the block lower-triangular matrix of a split block."""
    top = torch.cat((inside[..., 0, :, :], torch.zeros_like(cross)), dim=-1)
    bottom = torch.cat((cross, inside[..., 1, :, :]), dim=-1)
    return torch.cat((top, bottom), dim=-2)


def step(q, k, v, g, beta, *, state=None, scale=None, backend="auto", inplace=False):
    """One decode token: q, k ``[B, H, K]``, v ``[B, H, V]``, g ``[B, H, K]``, beta ``[B, H]``.

    Returns ``(o [B, H, V], new_state [B, H, K, V])``. ``inplace=True`` writes the new state into
    ``state`` (contiguous, in the compute dtype: float32, or float64 for float64 inputs) and returns it,
    so a decode loop allocates no state.
    """
    dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=True, state=state,
                                  state_name="state", time_axis=False, values=False)
    scale = _validate.resolve_scale(scale, dims.K)
    # The fused kernel has no backward: with an input that requires grad, the PyTorch step runs.
    fused = _validate.resolve_backend(backend, q) == "triton" and not _validate.needs_grad(q, k, v, g, beta, state)
    _validate.check_values(g, beta, in_kernel=fused)
    if fused:
        return triton_call("step", KIND, q, k, v, g, beta, state=state, scale=scale, inplace=inplace)
    out_dtype, dtype = q.dtype, _validate.compute_dtype(q)
    if inplace:
        _check_writable(state, dtype)
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    S = start_state(state, dims, dtype, q.device)
    S = S.mul_(torch.exp(g)[..., None]) if inplace else torch.exp(g)[..., None] * S
    error = v - torch.einsum("bhk,bhkv->bhv", k, S)
    update = torch.einsum("bhk,bhv->bhkv", k, beta[..., None] * error)
    S = S.add_(update) if inplace else S + update
    o = torch.einsum("bhk,bhkv->bhv", scale * q, S)
    return o.to(out_dtype), S


def _check_writable(state, dtype):
    if state is None or state.dtype != dtype or not state.is_contiguous():
        got = "None" if state is None else f"{state.dtype}, contiguous={state.is_contiguous()}"
        raise ValueError(f"inplace=True needs a contiguous {dtype} state [B, H, K, V] to write into, got {got}")
