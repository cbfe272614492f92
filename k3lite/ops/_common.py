"""Small helpers the four op modules share (layout changes, the starting state, the Triton hand-off)."""

from __future__ import annotations

import torch

from k3lite._validate import Dims


def heads_first(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, T, H, D]`` -> ``[B, H, T, D]``: each head becomes an independent batch of sequences."""
    return x.transpose(1, 2).to(dtype)


def tokens_first(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, H, T, D]`` -> ``[B, T, H, D]``, back to the layout of the field."""
    return x.transpose(1, 2).to(dtype)


def start_state(initial_state, dims: Dims, dtype: torch.dtype, device) -> torch.Tensor:
    """The memory before the first token: the given one, or empty."""
    if initial_state is None:
        return torch.zeros(dims.B, dims.H, dims.K, dims.V, dtype=dtype, device=device)
    return initial_state.to(dtype)


def solve_unit_lower(L: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve ``L X = rhs`` for unit lower-triangular L: the UT transform's forward substitution, differentiable."""
    return torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)


def triton_call(function: str, kind: str, *args, **kwargs):
    """Call ``k3lite.kernels.chunked`` or ``.step`` (``function``) without repeating the checks the op ran.

    Imported here so the torch path never needs Triton."""
    try:
        from k3lite import kernels
    except ImportError as err:
        raise RuntimeError(
            f"backend='triton' needs the k3lite.kernels package, which could not be imported ({err}). "
            "Use backend='torch' for the PyTorch reference."
        ) from err
    entry = getattr(kernels, f"run_{function}", None)
    if entry is None:
        raise RuntimeError(
            f"k3lite.kernels has no function {function!r} yet; use backend='torch' for the PyTorch reference."
        )
    return entry(kind, *args, **kwargs)
