"""Attention Residuals (AttnRes, Kimi team 2026): each sub-layer reads a learned mix of earlier depths.

A plain pre-norm residual stream hands sub-layer ``l`` the equal-weight sum ``v_0 + v_1 + ... + v_{l-1}``
of the embedding ``v_0`` and every earlier sub-layer output. AttnRes replaces that sum by a softmax
over depth,

    h_l = sum_i alpha_{i->l} v_i,    alpha_{i->l} = softmax_i( w_l . RMSNorm(v_i) ),

with one learned pseudo-query ``w_l`` per mixing point. ``w_l`` starts at zero, so at initialisation
every source gets the same weight ``1/S``; the values ``v_i`` themselves are not normalised and there is
no temperature.

Full AttnRes keeps every sub-layer output (memory grows with depth, O(L d) per token). Block AttnRes
sums the outputs of a block of consecutive sub-layers into one source, so a sub-layer attends over
``[embedding, completed blocks..., partial sum of the current block]`` (O(N d) for N blocks). With one
sub-layer per block the two variants coincide.

Usage inside a model (one mixer per sub-layer plus one before the final norm)::

    sources = AttnResSources(embedding, sublayers_per_block=24)   # K3: 12 decoder layers = 24 sub-layers
    for mixer, sublayer in zip(mixers, sublayers):
        h, _ = mixer(sources.sources())
        sources.add(sublayer(h))
    out, _ = final_mixer(sources.sources())
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def stack_sources(sources, d_model: int | None = None) -> torch.Tensor:
    """Return the sources stacked as ``[S, ..., d]`` (from a list of equal-shape tensors or a stacked tensor)."""
    if isinstance(sources, torch.Tensor):
        stacked = sources
        if stacked.dim() < 2:
            raise ValueError(f"sources must be stacked as [S, ..., d] (at least 2-D), got shape {tuple(stacked.shape)}")
    else:
        sources = list(sources)
        if not sources:
            raise ValueError("sources must hold at least one tensor [..., d], got an empty list")
        first = tuple(sources[0].shape)
        for index, source in enumerate(sources):
            if tuple(source.shape) != first:
                raise ValueError(f"sources[{index}] has shape {tuple(source.shape)}; every source must match "
                                 f"sources[0] {first}")
        stacked = torch.stack(sources)
    if stacked.shape[0] < 1:
        raise ValueError("sources must hold at least one tensor, got S = 0")
    if d_model is not None and stacked.shape[-1] != d_model:
        raise ValueError(f"sources must end in d_model={d_model}, got shape {tuple(stacked.shape)}")
    return stacked


def attnres_mix(sources, query: torch.Tensor, *, eps: float = 1e-6):
    """The AttnRes read in one function: ``(sum_i alpha_i v_i, alpha)``,
    ``alpha = softmax_i(query . RMSNorm(v_i))``.

    ``sources``: list of ``[..., d]`` tensors or stacked ``[S, ..., d]``; ``query``: ``[d]``.
    Returns the mix ``[..., d]`` (dtype of the sources) and the weights ``[S, ...]`` (float32).
    """
    if query.dim() != 1:
        raise ValueError(f"query must be a vector [d], got shape {tuple(query.shape)}")
    values = stack_sources(sources, query.shape[0])
    # Logits in float32: in bf16 a softmax over a few dozen sources loses its small weights.
    keys = F.rms_norm(values.float(), (values.shape[-1],), eps=eps)
    weights = torch.softmax(keys @ query.float(), dim=0)
    # A broadcast multiply and a sum: several times faster than einsum's generic path on a CPU.
    mixed = (weights.to(values.dtype).unsqueeze(-1) * values).sum(dim=0)
    return mixed, weights


class AttnResMixer(nn.Module):
    """One mixing point: a learned pseudo-query (zero at initialisation, so mixing starts uniform).

    The key norm has no gain of its own: a gain ``g`` would enter the logit only as ``(w * g) . norm(v)``,
    which the query already expresses.
    """

    def __init__(self, d_model: int, *, eps: float = 1e-6):
        super().__init__()
        if d_model < 1:
            raise ValueError(f"d_model must be >= 1, got {d_model}")
        self.d_model = d_model
        self.eps = eps
        self.query = nn.Parameter(torch.zeros(d_model))

    def forward(self, sources):
        """``sources``: list of ``[B, T, d]`` (or any ``[..., d]``) or stacked ``[S, B, T, d]``.

        Returns ``(mixed [B, T, d], weights [S, B, T])``; the weights sum to 1 over the sources.
        """
        return attnres_mix(sources, self.query, eps=self.eps)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}"


class AttnResSources:
    """The sources AttnRes reads, kept up to date as the forward pass walks down the stack.

    ``sublayers_per_block=None`` is full AttnRes (every sub-layer output is its own source);
    an integer ``n`` groups ``n`` consecutive sub-layer outputs (attention and MLP each count as one)
    into a block whose sum is one source. ``n = 1`` is the full variant again.
    """

    def __init__(self, embedding: torch.Tensor, sublayers_per_block: int | None = None):
        if sublayers_per_block is not None and sublayers_per_block < 1:
            raise ValueError(f"sublayers_per_block must be None (full AttnRes) or >= 1, got {sublayers_per_block}")
        if embedding.dim() < 1:
            raise ValueError(f"embedding must be [..., d], got shape {tuple(embedding.shape)}")
        self.sublayers_per_block = sublayers_per_block
        self.completed: list[torch.Tensor] = [embedding]  # v_0, then one entry per finished block
        self.partial: torch.Tensor | None = None          # running sum of the unfinished block
        self.in_partial = 0                                # sub-layer outputs summed into `partial`

    def add(self, output: torch.Tensor) -> None:
        """Record one sub-layer output ``[..., d]`` (same shape as the embedding)."""
        if output.shape != self.completed[0].shape:
            raise ValueError(f"output must have the embedding's shape {tuple(self.completed[0].shape)}, "
                             f"got {tuple(output.shape)}")
        self.partial = output if self.partial is None else self.partial + output
        self.in_partial += 1
        if self.sublayers_per_block is None or self.in_partial == self.sublayers_per_block:
            self.completed.append(self.partial)
            self.partial, self.in_partial = None, 0

    def sources(self) -> list[torch.Tensor]:
        """``[embedding, completed blocks..., partial block]`` (the partial one only once it is non-empty)."""
        return self.completed + ([self.partial] if self.partial is not None else [])

    @property
    def num_stored(self) -> int:
        """Sources held apart from the running partial block (embedding + completed blocks)."""
        return len(self.completed)


def num_block_sources(num_sublayers: int, sublayers_per_block: int | None) -> tuple[int, int]:
    """After ``num_sublayers`` sub-layers: ``(stored sources, sub-layers in the partial block)``.

    K3: 93 layers = 186 sub-layers in blocks of 24 -> ``(8, 18)``: the embedding, 7 full blocks, and a
    partial block of 9 layers.
    """
    if num_sublayers < 0:
        raise ValueError(f"num_sublayers must be >= 0, got {num_sublayers}")
    if sublayers_per_block is None:
        return 1 + num_sublayers, 0
    if sublayers_per_block < 1:
        raise ValueError(f"sublayers_per_block must be None or >= 1, got {sublayers_per_block}")
    full_blocks, remainder = divmod(num_sublayers, sublayers_per_block)
    return 1 + full_blocks, remainder
