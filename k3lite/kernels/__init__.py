"""Triton kernels of k3lite: chunked forward of the delta family, fused decode step, fused SiTU.

Three entry points, called by ``k3lite.ops``:

    chunked(kind, q, k, v, g=None, beta=None, *, scale=None, initial_state=None, chunk_size=64, cu_seqlens=None)
        -> (o, final_state)
    step(kind, q, k, v, g=None, beta=None, *, state=None, scale=None, inplace=False) -> (o, new_state)
    situ_glu(gate, up, beta1=4.0, beta2=25.0) -> h

kind is one of "linear_attention", "delta_rule", "gated_delta_rule", "kda".

On a machine without CUDA the kernels run through the Triton interpreter (float32 only, slow; meant
for tiny shapes in tests and notebooks). The interpreter must be switched on before the kernel
modules are imported, which is why they are imported lazily, after ``_ensure_backend``.

Both entry points check their arguments as ``k3lite.ops`` does (one set of checks, ``k3lite._validate``);
``run_chunked`` / ``run_step`` skip them for the ops, which checked already. When no input requires grad (or grad
is off), ``chunked`` runs the forward without an autograd node and keeps no intermediates for a backward.

Gradients of ``chunked``: every stage of the backward is a Triton kernel (``chunk_bwd_triton.py``: the reverse state
pass plus the chunk-parallel gradients through the intra-chunk products, the triangular solve, the WY factors and
the decays). ``step`` has no backward (see its docstring). First derivatives only: every autograd Function here is
once-differentiable (:func:`first_derivatives_only`), so a second backward through the Triton path raises, naming
it, instead of returning wrong numbers; ``backend="torch"`` differentiates twice. The gates' gradient is each vector
the gates scale times its gradient (q dq and k dk, signed by the direction of the decay; in the state stage
dG = Q dQ - K dK), summed in reverse over each chunk: terms of order one that cancel, so its error is absolute, a
few float32 steps of |q dq| + |k dk|. Where the gates are so strong that dg itself falls below that (about -20 per
step: dg near 1e-8), its relative error is large; the PyTorch backward (``backend="torch"``) differentiates the
decays themselves and keeps it relative (tests/test_kernels_cpu.py measures both).

Variable-length batches (``cu_seqlens``, flash-linear-attention's convention: B = 1, N sequences packed along T,
states ``[N, H, K, V]``) run through the batched pipeline: the dispatch packs the sequences into a zero-padded batch
``[N, T_max]`` (``k3lite.ops._common.through_padded_batch``), runs the Triton forward and backward on it, and gathers
the real tokens back. A zero token (k = v = 0, beta = 0, g = 0) leaves the memory unchanged, so the result is each
sequence's alone up to rounding, and the gradients reach q, k, v, g, beta and the initial states through the gather.
The kernels themselves index tokens as ``b * T + t``, every sequence starting at a chunk boundary; reading
per-sequence offsets in the kernels would save the padding's work (N x T_max tokens instead of T) and is left to them.

Launches: on a GPU every kernel these entry points launch is wrapped by ``_launch.cached_launch``, so that
(unless ``K3LITE_TRITON_DISPATCH=1`` switches it off) a call like an earlier one (same dtypes,
scalars, constexprs and options, every tensor 16-byte aligned) goes straight to the compiled kernel's launcher
instead of through Triton's per-call dispatch (see ``_launch`` for what it checks and why).

Tests on a GPU: besides the interpreter tests, ``tests/test_grid_{kda,gdn,delta}_gpu.py`` and
``tests/test_grid_kda_varlen_gpu.py`` port the reference library's own test grids (flash-linear-attention,
tests/ops/test_kda.py, test_gated_delta.py, test_delta.py: T from 15 to 8,192, head widths 32 to 256, fp16 and bf16,
gate normalisers, masked gates, initial states, packed batches), each case judged by that library's per-tensor
error ratios against a float64 token loop; widths above 128 must be refused by name, and grouped value heads
(more value heads than key heads), a layout k3lite does not have, are skipped. The last run's command, card and
counts are in ``benchmarks/results/grids_h100.json``.

Precision: every tl.dot takes ``input_precision`` from a DOT_PRECISION constexpr, "ieee" when the
inputs are float32 (Hopper would otherwise use TF32 for float32 products) and "tf32" otherwise.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

from k3lite import _validate
from k3lite.ops import KINDS

# The chunk sizes the kernels run: the pipeline's tiles, its sub-chunk structure (four 16-row blocks) and the
# block inverse of the triangular solve are all sized for 64-token chunks (chunk_fwd.CHUNK).
CHUNK_SIZES = (64,)

# Triton decides at decoration time whether a @triton.jit function is compiled or interpreted, and
# that includes its own standard library (tl.zeros, tl.sum, ...) defined when triton is first imported.
# So the switch is thrown here, at import, before anything of ours imports triton.
_INTERPRETING = not torch.cuda.is_available()
if _INTERPRETING:
    os.environ["TRITON_INTERPRET"] = "1"
_CHECKED = False


def _ensure_backend() -> bool:
    """Check that Triton is importable and set up as this machine needs; True when interpreting."""
    global _CHECKED
    if not _CHECKED:
        try:
            import triton.language.standard as tl_standard
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("backend='triton' needs the triton package: pip install 'k3lite[kernels]'") from err
        if _INTERPRETING and not _is_interpreted(tl_standard):
            # Someone imported triton before us (torch.utils.flop_counter does): re-import its Python
            # side with the interpreter switched on. The compiled extension triton._C stays loaded
            # (it cannot be loaded twice); earlier importers keep their own, compiled-mode, objects.
            for name in [m for m in sys.modules if (m == "triton" or m.startswith("triton."))
                         and not m.startswith("triton._C")]:
                del sys.modules[name]
            import triton.language.standard as tl_standard
            if not _is_interpreted(tl_standard):
                raise RuntimeError(
                    "triton was imported before k3lite.kernels could switch on its CPU interpreter; "
                    "import k3lite.kernels first, or set TRITON_INTERPRET=1 before starting Python"
                )
        _CHECKED = True
    return _INTERPRETING


def _is_interpreted(tl_standard) -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl_standard.zeros, InterpretedFunction)


def interpreting() -> bool:
    """True when the kernels run through the Triton interpreter (no CUDA on this machine)."""
    return _ensure_backend()


def _check_tensors(*tensors, state=None):
    """One device for all, CUDA on a GPU machine, float32 under the interpreter (the state excepted: it is made
    float32 before use). A plain loop: this runs on every call, and on a slow host its Python is time the GPU waits."""
    interp = _ensure_backend()
    device = None
    for t in (*tensors, state):
        if t is None:
            continue
        if interp and t.dtype != torch.float32 and t is not state:
            raise ValueError(
                f"backend='triton' without a GPU runs the Triton interpreter, which supports float32 only; "
                f"got {t.dtype}. Cast the inputs with .float() or use backend='torch'."
            )
        if not interp and not t.is_cuda:
            raise ValueError("backend='triton' needs CUDA tensors on a machine with a GPU; got a CPU tensor")
        if device is None:
            device = t.device
        elif t.device != device:
            devices = {x.device for x in (*tensors, state) if x is not None}
            raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


# The tensor-core products take bf16, fp16 or float32 operands.
KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def check_call(kind, q, k, v, g, beta, state, *, state_name, time_axis, chunk_size=None, scale=None,
               values=True, cu_seqlens=None):
    """The ops' argument checks (``_validate``, ValueError naming the tensor) for one kernel call.

    Returns the scale. The kinds fix which of g and beta must be given: a gate for gated_delta_rule
    ([.., H]) and kda ([.., H, K]), beta for every delta kind, neither for linear attention.
    ``values=False`` checks shapes only and leaves the value checks of g and beta to the caller.
    ``cu_seqlens`` (chunked calls only) is checked as the ops check it, and the state is then ``[N, H, K, V]``.
    """
    _check_kind(kind)
    gate, delta = kind in ("gated_delta_rule", "kda"), kind != "linear_attention"
    for name, x, needed, shape in (("g", g, gate, "[B, T, H, K]" if kind == "kda" else "[B, T, H]"),
                                   ("beta", beta, delta, "[B, T, H]")):
        if needed and x is None:
            raise ValueError(f"kind {kind!r} needs {name} of shape {shape}, got None")
        if not needed and x is not None:
            raise ValueError(f"kind {kind!r} takes no {name}, got a tensor of shape {tuple(x.shape)}")
    if cu_seqlens is not None:
        dims, _ = _validate.check_packed_inputs(q, k, v, g, beta, per_channel_gate=kind == "kda", state=state,
                                                state_name=state_name, cu_seqlens=cu_seqlens, values=values)
    else:
        dims = _validate.check_inputs(q, k, v, g, beta, per_channel_gate=kind == "kda", state=state,
                                      state_name=state_name, time_axis=time_axis, values=values)
    if chunk_size is not None:
        _validate.check_chunk_size(chunk_size)
    return _validate.resolve_scale(scale, dims.K)


# The chunked pipeline keeps a [K, V] state tile and [64, K] key tiles in shared memory; beyond 128 (a width of 200
# pads to 256) a stage asks for more shared memory than a Hopper GPU has, and Triton fails at launch.
MAX_CHUNKED_HEAD_WIDTH = 128


def _check_chunk_widths(q, v):
    for name, width in (("q, k", q.shape[-1]), ("v", v.shape[-1])):
        if width > MAX_CHUNKED_HEAD_WIDTH:
            raise ValueError(f"{name} head width must be at most {MAX_CHUNKED_HEAD_WIDTH} for the chunked Triton "
                             f"kernels, got {width}; backend='torch' takes any width")


def _check_kernel_inputs(kind, q, k, v, g, beta, state):
    """What the kernels need beyond the ops' checks: a known kind, their dtypes, one device."""
    _check_kind(kind)
    if q.dtype not in KERNEL_DTYPES:
        raise ValueError(f"q, k, v must have one of the dtypes {KERNEL_DTYPES} for the Triton kernels, "
                         f"got {q.dtype}")
    _check_tensors(q, k, v, g, beta, state=state)


# Below this key or value width a bf16/fp16 backward runs in float32 (cheap at such widths). It was added when the
# half-precision backward at width 32 gave wrong gradients; the cause, a stage Triton compiled wrongly at that
# shape, is now routed around (chunk_bwd_triton.verified_fast_shape) and the half-precision backward at widths
# 32, 48 and 100 matches the float64 reference on an H100, but the reference grids were run with this rule in place.
MIN_HALF_PRECISION_BACKWARD_WIDTH = 64


def _needs_float32_backward(q, v) -> bool:
    return (q.is_cuda and q.dtype != torch.float32
            and min(q.shape[-1], v.shape[-1]) < MIN_HALF_PRECISION_BACKWARD_WIDTH)


def _forward(kind, scale, q, k, v, g, beta, initial_state, keep_intermediates):
    """The Triton forward with the value checks of g and beta on CUDA (the kernels clear a flag, one assert)."""
    from .chunk_fwd import chunk_forward
    from .recurrent_step import assert_values_ok, values_ok_flag

    args = [x.contiguous() if x is not None else None for x in (q, k, v, g, beta)]
    h0 = initial_state.float().contiguous() if initial_state is not None else None
    ok = values_ok_flag(kind, q.device)
    result = chunk_forward(kind, *args, scale, h0, keep_intermediates=keep_intermediates, values_ok=ok)
    assert_values_ok(kind, ok)
    return result


def double_backward_message(path: str) -> str:
    """What a second derivative through a Triton autograd Function says (see :func:`first_derivatives_only`)."""
    return (f"k3lite: {path} runs Triton kernels whose backward gives first derivatives only, so a second "
            "derivative through it (torch.autograd.grad(..., create_graph=True), then another backward) cannot be "
            "computed; use backend='torch' for double backward")


def first_derivatives_only(path):
    """``torch.autograd.function.once_differentiable`` for the Triton Functions, with an error that names the path.

    The Triton backward computes its gradients in kernels that autograd cannot see into: with ``create_graph=True``
    a plain backward would hand out gradients whose graph misses every path through the kernels, and a second
    backward would return silently wrong numbers. As ``once_differentiable`` does, the backward runs without grad and,
    when autograd is recording (``create_graph=True``), its gradients are tied to a node that raises on a second
    backward; unlike it, this happens whenever recording is on, also when the incoming gradients do not require
    grad (``once_differentiable`` would then return gradients with no graph at all, and a later backward would
    ignore the kernels' part or fail with an unrelated message). ``path(ctx)`` names the public path in the error.
    The first derivatives themselves are unchanged.
    """
    from torch._C import _functions

    def decorate(backward):
        @functools.wraps(backward)
        def wrapper(ctx, *grad_outputs):
            with torch.no_grad():
                grads = backward(ctx, *grad_outputs)
            if not torch.is_grad_enabled():
                return grads
            grads = grads if isinstance(grads, tuple) else (grads,)
            error = _functions.DelayedError(double_backward_message(path(ctx)), len(grads))
            tied = error(*[x.detach().requires_grad_() if isinstance(x, torch.Tensor) else x for x in grads])
            return tuple(tied)

        wrapper.first_derivatives_only = True
        return wrapper

    return decorate


class _Chunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kind, scale, q, k, v, g, beta, initial_state):
        o, final_state, kept = _forward(kind, scale, q, k, v, g, beta, initial_state, keep_intermediates=True)
        ctx.kind, ctx.scale, ctx.lo_from = kind, scale, kept["lo_from"]
        ctx.save_for_backward(q, k, v, g, beta, initial_state, kept["h"], kept["vn"], kept["G"], kept["G_lo"],
                              kept["aqk"], kept["ai"])
        return o, final_state

    @staticmethod
    @first_derivatives_only(lambda ctx: f"k3lite.ops.{ctx.kind}.chunked(backend='triton')")
    def backward(ctx, d_o, d_state):
        from .chunk_bwd_triton import chunk_backward

        q, k, v, g, beta, h0, h, v_new, G, G_lo, aqk, ai = ctx.saved_tensors
        needs = ctx.needs_input_grad[2:]
        args = [x.contiguous() if x is not None else None for x in (q, k, v, g, beta)]
        kept = {"h": h, "vn": v_new, "G": G, "G_lo": G_lo, "aqk": aqk, "ai": ai}
        if _needs_float32_backward(q, v):
            args = [x.float() if x is not None else None for x in args]
            kept = {name: x.float() if x is not None else None for name, x in kept.items()}
            d_o = d_o.float()
        kept["lo_from"] = ctx.lo_from   # the forward's, also when the backward runs in float32
        grads = chunk_backward(ctx.kind, ctx.scale, *args, h0, kept, d_o, d_state)
        result = [None, None]
        for grad, x, need in zip(grads, (q, k, v, g, beta, h0), needs):
            result.append(grad.to(x.dtype) if need and grad is not None else None)
        return tuple(result)


def chunked(kind, q, k, v, g=None, beta=None, *, scale=None, initial_state=None, chunk_size=64, cu_seqlens=None):
    """Chunked forward of one mixer through the Triton pipeline; differentiable (Triton backward).

    q, k ``[B, T, H, K]``, v ``[B, T, H, V]`` in one of float32 / bf16 / fp16; g and beta as the ops
    take them (any float dtype); initial_state ``[B, H, K, V]`` or None. Every argument is checked as
    ``k3lite.ops`` checks it (ValueError naming the tensor). On CUDA the kernels check the values of g and
    beta as they read them (one flag, one asynchronous assert: no extra pass, no host synchronisation).
    The pipeline works on 64-token chunks only (its tiles and triangular solve are sized for them):
    ``chunk_size`` must be one of ``CHUNK_SIZES``, anything else is a ValueError. (The PyTorch ops,
    ``backend="torch"``, take any chunk size; the result is the same for every one, up to rounding.)

    ``cu_seqlens`` ``[N + 1]`` (int32 or int64): N sequences packed along T of a batch of one, each from its own
    ``initial_state[n]`` (``[N, H, K, V]``); returns ``o [1, T, H, V]`` and ``final_state [N, H, K, V]``. The
    sequences run as a zero-padded batch (see the module docstring).
    """
    scale = check_call(kind, q, k, v, g, beta, initial_state, state_name="initial_state", time_axis=True,
                       chunk_size=chunk_size, scale=scale, values=False, cu_seqlens=cu_seqlens)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES} for the Triton kernels (their tiles are sized "
                         f"for 64-token chunks), got {chunk_size!r}; backend='torch' takes any chunk size")
    _validate.check_values(g, beta, in_kernel=True)
    return run_chunked(kind, q, k, v, g, beta, scale=scale, initial_state=initial_state, cu_seqlens=cu_seqlens)


def run_chunked(kind, q, k, v, g=None, beta=None, *, scale, initial_state=None, chunk_size=64, cu_seqlens=None):
    """:func:`chunked` after the ops' checks, for callers that ran them already (``k3lite.ops``): shapes,
    and on CPU the values (on CUDA the kernels check the values themselves).

    ``chunk_size`` is the op's, which ``k3lite.ops`` documents as any size >= 1 with the same result: it
    sets the tiles of the PyTorch form, and the kernels keep their 64-token chunks whatever it is (an op
    called with ``backend="auto"`` on a GPU must not fail where the PyTorch form would succeed).
    ``cu_seqlens``, checked already, runs the sequences as a zero-padded batch."""
    if cu_seqlens is not None:
        return _run_padded(kind, q, k, v, g, beta, scale, initial_state, tuple(cu_seqlens.tolist()))
    _check_kernel_inputs(kind, q, k, v, g, beta, initial_state)
    _check_chunk_widths(q, v)
    if not _validate.needs_grad(q, k, v, g, beta, initial_state):
        # Inference: no autograd node, no intermediates kept. At small shapes a call is host-bound (its Python sets
        # the pace), and an autograd node's bookkeeping is a large part of that Python.
        return _forward(kind, float(scale), q, k, v, g, beta, initial_state, keep_intermediates=False)
    return _Chunked.apply(kind, float(scale), q, k, v, g, beta, initial_state)


def _run_padded(kind, q, k, v, g, beta, scale, initial_state, offsets):
    """:func:`run_chunked` on the sequences at ``offsets``, padded into one batch (g and beta may be None)."""
    from k3lite.ops._common import through_padded_batch

    given = [x is not None for x in (g, beta)]

    def batched(q, k, v, *gates, initial_state):
        rest = iter(gates)
        g, beta = (next(rest) if present else None for present in given)
        return run_chunked(kind, q, k, v, g, beta, scale=scale, initial_state=initial_state)

    tensors = [x for x in (q, k, v, g, beta) if x is not None]
    return through_padded_batch(batched, offsets, tensors, initial_state)


def step(kind, q, k, v, g=None, beta=None, *, state=None, scale=None, inplace=False):
    """One fused recurrent step (decode): q, k ``[B, H, K]``, v ``[B, H, V]``, state ``[B, H, K, V]``.

    ``state=None`` starts from zeros. With ``inplace=True`` the new state is written into ``state``
    (float32 and contiguous), so a decode loop allocates no state. The kernel has no backward: when an
    input requires grad it raises; ``k3lite.ops.<kind>.step`` then takes the PyTorch step instead.
    On CUDA the kernel checks the values of g and beta itself (a device assert in the kernel).
    Returns ``(o [B, H, V], new_state [B, H, K, V] float32)``.
    """
    scale = check_call(kind, q, k, v, g, beta, state, state_name="state", time_axis=False, scale=scale,
                       values=False)
    _validate.check_values(g, beta, in_kernel=True)
    if _validate.needs_grad(q, k, v, g, beta, state):
        raise ValueError("the fused decode step has no backward and an input requires grad; use "
                         f"k3lite.ops.{kind}.step, which takes the differentiable PyTorch step then")
    return run_step(kind, q, k, v, g, beta, state=state, scale=scale, inplace=inplace)


def run_step(kind, q, k, v, g=None, beta=None, *, state=None, scale, inplace=False):
    """:func:`step` after the ops' checks, for callers that ran them already (``k3lite.ops``)."""
    from .recurrent_step import decode_step

    _check_kernel_inputs(kind, q, k, v, g, beta, state)
    if inplace and (state is None or state.dtype != torch.float32 or not state.is_contiguous()):
        raise ValueError("inplace=True needs a contiguous float32 state [B, H, K, V] to write into, got "
                         + ("None" if state is None else f"{state.dtype}, contiguous={state.is_contiguous()}"))
    if state is None:
        state = q.new_zeros(*q.shape, v.shape[-1], dtype=torch.float32)
    return decode_step(kind, q, k, v, g, beta, state.float(), float(scale), inplace=inplace)


def situ_glu(gate, up, beta1=4.0, beta2=25.0):
    """Fused h = SiTU_beta1(gate) * beta2 * tanh(up / beta2); differentiable (Triton forward and backward)."""
    _check_tensors(gate, up)
    if gate.shape != up.shape:
        raise ValueError(f"gate and up must have one shape, got {tuple(gate.shape)} and {tuple(up.shape)}")
    from .situ import situ_glu as _situ_glu

    return _situ_glu(gate, up, beta1, beta2)


def silu_and_mul(gate, up):
    """Fused SiLU(gate) * up, the baseline SiTU is compared with."""
    _check_tensors(gate, up)
    from .situ import silu_and_mul as _silu_and_mul

    return _silu_and_mul(gate, up)
