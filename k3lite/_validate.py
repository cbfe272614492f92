"""Argument checks shared by ``k3lite.ops`` and ``k3lite.kernels``.

Every op of the course takes the same tensors in the same layout (q, k ``[B, T, H, K]``, v
``[B, T, H, V]``, gates in log space, beta per head, state ``[B, H, K, V]``). Checking them in one
place means a wrong call fails the same way everywhere: with a ``ValueError`` that names the argument
and says which shape or range was expected. The kernels package may import this module (and nothing
else from k3lite), so it depends on torch only.

``step`` functions have no time axis: q, k ``[B, H, K]``, v ``[B, H, V]``; pass ``time_axis=False``.

Value checks (g <= 0, beta in [0, 2]) never stop the host on CUDA: reading a GPU number with ``.item()``
waits for every queued kernel, which can take as long as a whole decode step. On CUDA they
become device-side asserts (``torch._assert_async``) that fail, naming the argument, when the stream is
next synchronised; on CPU they raise a ``ValueError`` at once. The Triton kernels on CUDA go one step
further: the fused decode step, and stages 1 and 4 of the chunked pipeline, check g and beta as they read them
and clear one flag, so a call adds one assert and no reductions (the ops pass ``values=False`` here, then call
:func:`check_values` with ``in_kernel`` saying whether such a kernel follows).

Variable-length batches follow flash-linear-attention's convention: batch size 1, N sequences packed along T, and
``cu_seqlens`` the ``[N + 1]`` cumulative offsets (int32 or int64, from 0 to T, non-decreasing; an empty sequence is
two equal offsets). :func:`check_packed_inputs` checks them and returns them as Python ints: the forms need the
lengths on the host to slice or pad the sequences, so on CUDA this reads ``N + 1`` numbers back: one synchronisation
per call (flash-linear-attention's varlen path reads its sequence lengths back too, in ``fla/ops/utils/index.py``).

Shape checks are remembered: :func:`check_inputs` keeps each layout (shapes and dtypes) that passed and only looks it
up the next time, because a decode or training loop repeats one layout and on a slow host the checks' Python can
take longer than the GPU's work for a small call. A layout that fails is never kept.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import NamedTuple

import torch

BACKENDS = ("auto", "torch", "triton")


class Dims(NamedTuple):
    """Sizes read off q, k, v. ``T`` is None for a single decode step."""

    B: int
    T: int | None
    H: int
    K: int
    V: int


def _layout(time_axis: bool, last: str) -> str:
    return f"[B, T, H, {last}]" if time_axis else f"[B, H, {last}]"


def check_float(name: str, x) -> None:
    """``x`` must be a floating-point tensor (integer keys or boolean gates are a bug upstream)."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must have a floating-point dtype, got {x.dtype}")


def check_qkv(q, k, v, *, time_axis: bool = True) -> Dims:
    """Check q, k, v against each other and return their sizes."""
    rank = 4 if time_axis else 3
    for name, x, last in (("q", q, "K"), ("k", k, "K"), ("v", v, "V")):
        check_float(name, x)
        if x.dim() != rank:
            raise ValueError(f"{name} must have shape {_layout(time_axis, last)}, got {tuple(x.shape)}")
    if q.shape != k.shape:
        raise ValueError(
            f"k must have the same shape as q {_layout(time_axis, 'K')} = {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if v.shape[:-1] != q.shape[:-1]:
        expected = (*q.shape[:-1], "V")
        raise ValueError(f"v must have shape {expected} (B, T, H as q), got {tuple(v.shape)}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k, v must share one dtype, got q {q.dtype}, k {k.dtype}, v {v.dtype}")
    if time_axis:
        B, T, H, K = q.shape
        if T == 0:
            raise ValueError(f"q, k, v need at least one token (T >= 1), got shape {tuple(q.shape)}")
    else:
        (B, H, K), T = q.shape, None
    if K == 0 or v.shape[-1] == 0:
        raise ValueError(f"q, k, v need a head size of at least 1 (K >= 1, V >= 1), got q, k {tuple(q.shape)} "
                         f"and v {tuple(v.shape)}")
    return Dims(B, T, H, K, v.shape[-1])


def _values_readable(x: torch.Tensor) -> bool:
    """Whether the value checks can look at ``x``'s numbers.

    A meta tensor has none, and while ``torch.compile`` traces, ``.item()`` would break the graph;
    shape checks still run in both cases.
    """
    return not x.is_meta and not torch.compiler.is_compiling()


def _assert_on_device(condition: torch.Tensor, message: str) -> bool:
    """On CUDA, queue an assert of the 0-d bool ``condition`` and return True; on CPU return False.

    The assert needs no host synchronisation: a failure surfaces as a device-side assertion error
    carrying ``message`` at the next synchronisation (``.item()``, ``.cpu()``, ``torch.cuda.synchronize``).
    """
    if not condition.is_cuda:
        return False
    torch._assert_async(condition, f"k3lite: {message} (ValueError on CPU)")
    return True


def token_id_tensor(idx) -> torch.Tensor:
    """``idx`` as the models take it: a ``[B, T]`` tensor (T >= 1) of any integer dtype, returned as torch.long (the
    same tensor when it is long already). GPT-2 and K3 both check their input here, so both accept the same dtypes and
    refuse the others (floats, booleans, complex) with the same ValueError naming ``idx``."""
    if not isinstance(idx, torch.Tensor):
        raise ValueError(f"idx must be a torch.Tensor of token ids [B, T], got {type(idx).__name__}")
    if idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise ValueError(f"idx must hold integer token ids (any integer dtype, used as torch.long), got dtype "
                         f"{idx.dtype}")
    if idx.dim() != 2 or idx.shape[1] == 0:
        raise ValueError(f"idx must be [B, T] with T >= 1, got shape {tuple(idx.shape)}")
    return idx.long()


def check_token_ids(idx: torch.Tensor, vocab_size: int) -> None:
    """Token ids must lie in ``[0, vocab_size)``: an immediate ValueError on CPU, an asynchronous
    device-side assert on CUDA (no host synchronisation in a generate loop or a training step)."""
    if not idx.numel() or not _values_readable(idx):
        return
    low, high = torch.aminmax(idx)
    message = f"idx must hold token ids in [0, {vocab_size})"
    if _assert_on_device((low >= 0) & (high < vocab_size), message):
        return
    if int(low) < 0 or int(high) >= vocab_size:
        raise ValueError(f"{message}, got values in [{int(low)}, {int(high)}]")


def _expected(dims: Dims, *tail: int) -> tuple[int, ...]:
    lead = (dims.B, dims.H) if dims.T is None else (dims.B, dims.T, dims.H)
    return (*lead, *tail)


def check_gate(g, dims: Dims, *, per_channel: bool, values: bool = True) -> None:
    """Log-space decay: ``[B, T, H]`` (one per head) or ``[B, T, H, K]`` (one per key channel), all ≤ 0."""
    check_float("g", g)
    expected = _expected(dims, dims.K) if per_channel else _expected(dims)
    if tuple(g.shape) != expected:
        layout = ("[B, T, H, K]" if per_channel else "[B, T, H]") if dims.T is not None else (
            "[B, H, K]" if per_channel else "[B, H]")
        raise ValueError(f"g must have shape {layout} = {expected}, got {tuple(g.shape)}")
    if values:
        check_gate_values(g)


def check_gate_values(g) -> None:
    """g <= 0 everywhere (NaN fails): a ValueError on CPU, an asynchronous device-side assert on CUDA."""
    if not _values_readable(g) or g.numel() == 0:
        return
    # exp(g) is the fraction of memory kept; g > 0 would amplify the state and blow it up.
    largest = g.max()
    if _assert_on_device(largest <= 0, "g is a log-space decay and must be <= 0 everywhere"):   # NaN fails too
        return
    if not largest.item() <= 0:
        raise ValueError(f"g is a log-space decay and must be <= 0 everywhere, got max {largest.item():.4g}")


def check_beta(beta, dims: Dims, *, values: bool = True) -> None:
    """Write strength, one per head and token, in [0, 2] (above 1 allows negative eigenvalues)."""
    check_float("beta", beta)
    expected = _expected(dims)
    if tuple(beta.shape) != expected:
        layout = "[B, T, H]" if dims.T is not None else "[B, H]"
        raise ValueError(f"beta must have shape {layout} = {expected}, got {tuple(beta.shape)}")
    if values:
        check_beta_values(beta)


def check_beta_values(beta) -> None:
    """beta in [0, 2] everywhere (NaN fails): a ValueError on CPU, an asynchronous device-side assert on CUDA."""
    if not _values_readable(beta) or beta.numel() == 0:
        return
    # I - beta k k^T has eigenvalue 1 - beta along a unit key: outside [0, 2] it grows without bound.
    low, high = torch.aminmax(beta)
    if _assert_on_device((low >= 0) & (high <= 2), "beta must lie in [0, 2]"):   # NaN fails too
        return
    if not (0 <= low.item() and high.item() <= 2):
        raise ValueError(f"beta must lie in [0, 2], got min {low.item():.4g}, max {high.item():.4g}")


def check_state(state, dims: Dims, name: str = "initial_state") -> None:
    """Recurrent memory ``[B, H, K, V]``."""
    check_float(name, state)
    expected = (dims.B, dims.H, dims.K, dims.V)
    if tuple(state.shape) != expected:
        raise ValueError(f"{name} must have shape [B, H, K, V] = {expected}, got {tuple(state.shape)}")


SEQUENCE_OFFSET_DTYPES = (torch.int32, torch.int64)


def check_cu_seqlens(cu_seqlens, dims: Dims) -> tuple[int, ...]:
    """Offsets of N sequences packed along T: ``[0, ..., T]``, ``[N + 1]``, non-decreasing. Returns them as ints."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise ValueError(f"cu_seqlens must be a 1-D torch.Tensor of int32 or int64 offsets [N + 1], got "
                         f"{type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in SEQUENCE_OFFSET_DTYPES:
        raise ValueError(f"cu_seqlens must have dtype torch.int32 or torch.int64 (cumulative sequence offsets), got "
                         f"{cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
        raise ValueError(f"cu_seqlens must be 1-D [N + 1] with N >= 1 sequences (offsets 0, ..., T), got shape "
                         f"{tuple(cu_seqlens.shape)}")
    if dims.B != 1:
        raise ValueError(f"with cu_seqlens the sequences are packed along T, so the batch size must be 1 "
                         f"(q [1, T, H, K]), got B = {dims.B}")
    offsets = tuple(int(x) for x in cu_seqlens.tolist())
    if offsets[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got cu_seqlens[0] = {offsets[0]}")
    for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        if end < start:
            raise ValueError(f"cu_seqlens must be non-decreasing (cumulative sequence offsets), got "
                             f"cu_seqlens[{n}] = {start} > cu_seqlens[{n + 1}] = {end}")
    if offsets[-1] != dims.T:
        raise ValueError(f"cu_seqlens must end at T = {dims.T} (the packed length of q), got cu_seqlens[-1] = "
                         f"{offsets[-1]}")
    return offsets


def check_packed_inputs(q, k, v, g=None, beta=None, *, cu_seqlens=None, per_channel_gate: bool = False,
                        state=None, state_name: str = "initial_state", values: bool = True):
    """:func:`check_inputs` for the ops that take a variable-length batch. Returns ``(dims, offsets)``.

    Without ``cu_seqlens`` this is :func:`check_inputs` and ``offsets`` is None. With it, ``offsets`` is the tuple of
    the N + 1 offsets (:func:`check_cu_seqlens`) and the state holds one memory per sequence, ``[N, H, K, V]``.
    """
    if cu_seqlens is None:
        return check_inputs(q, k, v, g, beta, per_channel_gate=per_channel_gate, state=state, state_name=state_name,
                            values=values), None
    dims = check_inputs(q, k, v, g, beta, per_channel_gate=per_channel_gate, values=values)
    offsets = check_cu_seqlens(cu_seqlens, dims)
    if state is not None:
        check_float(state_name, state)
        expected = (len(offsets) - 1, dims.H, dims.K, dims.V)
        if tuple(state.shape) != expected:
            raise ValueError(f"{state_name} must have shape [N, H, K, V] = {expected}, one memory per sequence of "
                             f"cu_seqlens (N = len(cu_seqlens) - 1 = {expected[0]}), got {tuple(state.shape)}")
    return dims, offsets


def check_chunk_size(chunk_size) -> int:
    """Tokens per chunk: any integer >= 1 (returned as a Python int)."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    return int(chunk_size)


def resolve_scale(scale, K: int) -> float:
    """The factor applied to q: ``K ** -0.5`` unless given."""
    if scale is None:
        return K ** -0.5
    if isinstance(scale, bool) or not isinstance(scale, Real):
        raise ValueError(f"scale must be a number or None, got {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number, got {scale!r}")
    return float(scale)


def resolve_backend(backend, like: torch.Tensor) -> str:
    """``"auto"`` becomes ``"triton"`` for CUDA tensors and ``"torch"`` otherwise."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return "triton" if like.is_cuda else "torch"
    return backend


def needs_grad(*tensors) -> bool:
    """Whether autograd would record an op on these tensors (None entries are skipped)."""
    if torch.is_grad_enabled():
        for t in tensors:
            if t is not None and t.requires_grad:
                return True
    return False


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The references run in float32 (float64 stays float64, for gradient checks)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# Layouts (shapes and dtypes of one call's tensors) that passed the shape checks, and the sizes they gave. A decode
# loop or a training loop calls an op with one layout again and again, and on a slow host the shape checks' Python
# can take longer than the GPU takes for a small call; looking the layout up costs a fraction of checking it. Only
# layouts that passed are kept, so a wrong call always meets the checks.
_PASSED_LAYOUTS: dict = {}
_PASSED_LAYOUTS_MAX = 256


def _layout_key(q, k, v, g, beta, state, per_channel_gate: bool, time_axis: bool):
    """Everything the shape checks read: each tensor's shape and dtype (None when absent). None for a non-tensor."""
    try:
        return (per_channel_gate, time_axis, q.shape, q.dtype, k.shape, k.dtype, v.shape, v.dtype,
                None if g is None else (g.shape, g.dtype), None if beta is None else (beta.shape, beta.dtype),
                None if state is None else (state.shape, state.dtype))
    except AttributeError:
        return None


def check_inputs(q, k, v, g=None, beta=None, *, per_channel_gate: bool = False, state=None,
                 state_name: str = "initial_state", time_axis: bool = True, values: bool = True) -> Dims:
    """All checks of one op call at once; ``g``, ``beta`` and ``state`` are skipped when None.

    ``values=False`` checks shapes and dtypes only; the caller then owes the value checks of g and beta
    (:func:`check_values`, or a kernel that checks them as it reads them, like the fused decode step)."""
    # Plain tensors only: a subclass (torch.compile's fake tensors among them) is checked in full every time.
    key = _layout_key(q, k, v, g, beta, state, per_channel_gate, time_axis) if type(q) is torch.Tensor else None
    dims = _PASSED_LAYOUTS.get(key) if key is not None else None
    if dims is None:
        dims = check_qkv(q, k, v, time_axis=time_axis)
        if g is not None:
            check_gate(g, dims, per_channel=per_channel_gate, values=False)
        if beta is not None:
            check_beta(beta, dims, values=False)
        if state is not None:
            check_state(state, dims, state_name)
        if key is not None and len(_PASSED_LAYOUTS) < _PASSED_LAYOUTS_MAX:
            _PASSED_LAYOUTS[key] = dims
    if values:
        check_values(g, beta)
    return dims


def check_values(g=None, beta=None, *, in_kernel: bool = False) -> None:
    """The value checks :func:`check_inputs` skips with ``values=False`` (None entries are skipped).

    ``in_kernel=True``: the call goes on to a Triton kernel that checks the values as it reads them on CUDA
    (the fused decode step; stages 1 and 4 of the chunked pipeline), so on CUDA nothing is checked here."""
    given = g if g is not None else beta
    if in_kernel and given is not None and given.is_cuda:
        return
    if g is not None:
        check_gate_values(g)
    if beta is not None:
        check_beta_values(beta)

