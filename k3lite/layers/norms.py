"""Normalisation layers: the one RMSNorm of k3lite's models, and the gated one of the KDA layer.

RMSNorm is computed in (at least) float32 and cast back, so a bfloat16 model normalises with the same
accuracy as the float32 reference (the square of a bfloat16 activation loses too many bits). The MQAR
and bake-off models use it with ``upcast=False, eps=None`` instead: ``torch.nn.RMSNorm``'s numerics.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def upcast(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32, or in its own dtype when that is wider (float64 stays float64)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension."""
    wide = upcast(x)
    normed = wide * torch.rsqrt(wide.pow(2).mean(dim=-1, keepdim=True) + eps)
    if weight is not None:
        normed = normed * weight.to(wide.dtype)
    return normed.to(x.dtype)


class RMSNorm(nn.Module):
    """Root-mean-square normalisation with a learned per-channel scale (initialised to one).

    ``upcast=True`` (the K3 layers): :func:`rms_norm`, in at least float32. ``upcast=False``:
    ``F.rms_norm`` in the input's dtype, with ``eps=None`` meaning that dtype's machine epsilon; with
    ``eps=None`` this is ``torch.nn.RMSNorm`` to the bit. The MQAR and bake-off models
    (``k3lite.models.mixers``, ``k3lite.bakeoff``) use that form: they were trained, and their stored
    results produced, with ``torch.nn.RMSNorm``, and under bfloat16 autocast the upcast would change them.
    """

    def __init__(self, size: int, eps: float | None = 1e-6, *, upcast: bool = True):
        super().__init__()
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if eps is None and upcast:
            raise ValueError("eps=None (the input dtype's machine epsilon) needs upcast=False")
        self.eps, self.upcast = eps, upcast
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(f"x must end in {self.weight.shape[0]} channels, got shape {tuple(x.shape)}")
        if not self.upcast:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}" + ("" if self.upcast else ", upcast=False")


class GatedRMSNorm(RMSNorm):
    """``RMSNorm(x) * sigmoid(gate)``: the output normalisation of a KDA layer (per head)."""

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if gate.shape != x.shape:
            raise ValueError(f"gate must have the shape of x {tuple(x.shape)}, got {tuple(gate.shape)}")
        return super().forward(x) * torch.sigmoid(gate)
