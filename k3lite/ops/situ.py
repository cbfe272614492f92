r"""SiTU: the soft-capped SiLU that Kimi K3 uses in its gated MLPs.

.. math::

    \mathrm{SiTU}_\beta(x) = \beta \tanh(x/\beta)\,\sigma(x), \qquad
    h = \mathrm{SiTU}_{\beta_1}(\text{gate}) \cdot \beta_2 \tanh(\text{up}/\beta_2),

with fixed constants beta1 = 4 and beta2 = 25. As beta grows, tanh(x/beta) * beta -> x and SiTU becomes
SiLU; a finite beta caps the activation, so |h| <= beta1 * beta2.

:func:`situ` and the ``backend="torch"`` path of :func:`situ_glu` are the eager references (one PyTorch
kernel per operation). ``backend="triton"`` runs one fused Triton kernel for the forward and one for the
backward (``k3lite.kernels.situ``).
"""

from __future__ import annotations

import math

import torch

BACKENDS = ("auto", "torch", "triton")


def _check_beta(name: str, beta) -> float:
    try:
        value = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive finite number, got {beta!r}") from None
    # beta = inf gives inf * tanh(x / inf) = inf * 0 = NaN everywhere; beta <= 0 flips or removes the cap.
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value}")
    return value


def situ(x: torch.Tensor, beta: float) -> torch.Tensor:
    """SiTU_beta(x) = beta * tanh(x / beta) * sigmoid(x), elementwise."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ValueError(f"x must be a floating-point tensor, got {type(x).__name__}")
    beta = _check_beta("beta", beta)
    return beta * torch.tanh(x / beta) * torch.sigmoid(x)


def situ_glu(gate: torch.Tensor, up: torch.Tensor, beta1: float = 4.0, beta2: float = 25.0,
             backend: str = "auto") -> torch.Tensor:
    """Gated SiTU: situ(gate, beta1) * beta2 * tanh(up / beta2); gate and up of one shape."""
    for name, x in (("gate", gate), ("up", up)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {type(x).__name__}")
    if gate.shape != up.shape:
        raise ValueError(f"up must have the shape of gate {tuple(gate.shape)}, got {tuple(up.shape)}")
    beta1, beta2 = _check_beta("beta1", beta1), _check_beta("beta2", beta2)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "triton" or (backend == "auto" and gate.is_cuda):
        from k3lite import kernels

        return kernels.situ_glu(gate, up, beta1, beta2)
    return situ(gate, beta1) * (beta2 * torch.tanh(up / beta2))
