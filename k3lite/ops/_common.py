"""Small helpers the four op modules share (layout changes, the starting state, variable-length batches, the Triton
hand-off)."""

from __future__ import annotations

import torch

from k3lite import _validate
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


def each_sequence(form, offsets, tensors, initial_state, dims: Dims, **options):
    """A variable-length batch the way it is defined: ``form`` called on each packed sequence alone.

    ``tensors`` are ``[1, T, ...]`` with the sequences packed along T at ``offsets`` (from ``cu_seqlens``);
    sequence n starts from ``initial_state[n]`` (zeros when None). Returns the outputs concatenated along T,
    ``[1, T, H, V]``, and the final states stacked, ``[N, H, K, V]``. An empty sequence writes nothing: its final
    state is its initial state.
    """
    dtype = _validate.compute_dtype(tensors[0])
    one = dims._replace(B=1)
    outputs, finals = [], []
    for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        state = None if initial_state is None else initial_state[n:n + 1]
        if end == start:
            finals.append(start_state(state, one, dtype, tensors[0].device))
            continue
        o, state = form(*(x[:, start:end] for x in tensors), initial_state=state, **options)
        outputs.append(o)
        finals.append(state)
    return torch.cat(outputs, dim=1), torch.cat(finals)


def through_padded_batch(form, offsets, tensors, initial_state):
    """A variable-length batch run as an ordinary batch: ``form`` on the sequences padded to one length.

    Sequence n of the packed ``[1, T, ...]`` tensors becomes row n of ``[N, T_max, ...]``, followed by zero tokens.
    A zero token (k = v = q = 0, beta = 0, g = 0) decays nothing and writes nothing, so every row ends with the
    memory its own sequence leaves, and the zero tokens' outputs are dropped again: the result is each sequence's
    alone, up to rounding. Backwards, a zero token hands the memory's gradient on unchanged and its own gradients
    are dropped; autograd carries the rest back through the gather. ``form(*padded, initial_state=...)`` is any
    batched form (the PyTorch chunks, the Triton pipeline); chunks never straddle two sequences. The cost is that
    of N x T_max tokens, so sequences of very unequal lengths waste the difference.
    """
    lengths = [end - start for start, end in zip(offsets[:-1], offsets[1:])]
    device = tensors[0].device
    longest = max(lengths)
    position = torch.arange(longest, device=device)
    starts = torch.tensor(offsets[:-1], device=device)
    real = position < torch.tensor(lengths, device=device)[:, None]                    # [N, T_max]
    token = (starts[:, None] + position).clamp(max=offsets[-1] - 1)                   # where row n reads from
    padded = []
    for x in tensors:
        mask = real.reshape(*real.shape, *(1,) * (x.dim() - 2))
        padded.append(torch.where(mask, x[0][token], 0.0))
    o, final_state = form(*padded, initial_state=initial_state)
    return o[real][None], final_state


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
