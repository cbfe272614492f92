"""Triton kernels of k3lite: chunked forward of the delta family, fused decode step, fused SiTU.

Three entry points, called by ``k3lite.ops``:

    chunked(kind, q, k, v, g=None, beta=None, *, scale, initial_state=None, chunk_size=64) -> (o, final_state)
    step(kind, q, k, v, g=None, beta=None, *, state, scale) -> (o, new_state)
    situ_glu(gate, up, beta1=4.0, beta2=25.0) -> h

kind is one of "linear_attention", "delta_rule", "gated_delta_rule", "kda".

On a machine without CUDA the kernels run through the Triton interpreter (float32 only, slow; meant
for tiny shapes in tests and notebooks). The interpreter must be switched on before the kernel
modules are imported, which is why they are imported lazily, after ``_ensure_backend``.

Gradients of ``chunked``: by default every stage of the backward is a Triton kernel
(``chunk_bwd_triton.py``: the reverse state pass plus the chunk-parallel gradients through the
intra-chunk products, the triangular solve, the WY factors and the decays). ``backward="hybrid"`` keeps
the earlier path for comparison (``chunk_bwd.py``): Triton reverse state pass, PyTorch autograd in
float32 through the chunk-parallel parts.

Precision: every tl.dot takes ``input_precision`` from a DOT_PRECISION constexpr, "ieee" when the
inputs are float32 (Hopper would otherwise use TF32 for float32 products) and "tf32" otherwise.
"""

from __future__ import annotations

import os
import sys

import torch

KINDS = ("linear_attention", "delta_rule", "gated_delta_rule", "kda")

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


def _check_tensors(*tensors):
    interp = _ensure_backend()
    present = [t for t in tensors if t is not None]
    for t in present:
        if interp and t.dtype != torch.float32:
            raise ValueError(
                f"backend='triton' without a GPU runs the Triton interpreter, which supports float32 only; "
                f"got {t.dtype}. Cast the inputs with .float() or use backend='torch'."
            )
        if not interp and not t.is_cuda:
            raise ValueError("backend='triton' needs CUDA tensors on a machine with a GPU; got a CPU tensor")
    devices = {t.device for t in present}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(map(str, devices))}")


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


class _Chunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kind, scale, backward, q, k, v, g, beta, initial_state):
        from .chunk_fwd import chunk_forward

        args = [x.contiguous() if x is not None else None for x in (q, k, v, g, beta)]
        h0 = initial_state.float().contiguous() if initial_state is not None else None
        o, final_state, kept = chunk_forward(kind, *args, scale, h0, keep_intermediates=True)
        ctx.kind, ctx.scale, ctx.backward_kind = kind, scale, backward
        ctx.save_for_backward(q, k, v, g, beta, initial_state, kept["h"], kept["vn"], kept["G"], kept["aqk"],
                              kept["ai"])
        return o, final_state

    @staticmethod
    def backward(ctx, d_o, d_state):
        q, k, v, g, beta, h0, h, v_new, G, aqk, ai = ctx.saved_tensors
        needs = ctx.needs_input_grad[3:]
        if ctx.backward_kind == "hybrid":
            # Sequential part in Triton, chunk-parallel parts through PyTorch autograd (see chunk_bwd.py).
            from .chunk_bwd import chunk_backward

            inputs = [x.detach().requires_grad_(need) if x is not None else None
                      for x, need in zip((q, k, v, g, beta, h0), needs)]
            grads = chunk_backward(ctx.kind, ctx.scale, inputs, h, v_new, d_o, d_state)
        else:
            from .chunk_bwd_triton import chunk_backward

            args = [x.contiguous() if x is not None else None for x in (q, k, v, g, beta)]
            kept = {"h": h, "vn": v_new, "G": G, "aqk": aqk, "ai": ai}
            grads = chunk_backward(ctx.kind, ctx.scale, *args, h0, kept, d_o, d_state)
        result = [None, None, None]
        for grad, x, need in zip(grads, (q, k, v, g, beta, h0), needs):
            result.append(grad.to(x.dtype) if need and grad is not None else None)
        return tuple(result)


BACKWARDS = ("triton", "hybrid")


def chunked(kind, q, k, v, g=None, beta=None, *, scale, initial_state=None, chunk_size=64, backward="triton"):
    """Chunked forward of one mixer through the Triton pipeline; differentiable.

    The Triton pipeline always works on 64-token chunks (tensor-core tiles); ``chunk_size`` is accepted
    for a uniform signature and does not change the result, which is the same for every chunk size.
    ``backward`` picks the gradient path: "triton" (all stages Triton kernels, chunk_bwd_triton.py) or
    "hybrid" (Triton reverse state pass plus PyTorch autograd, chunk_bwd.py), kept for comparison.
    """
    _check_kind(kind)
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size}")
    if backward not in BACKWARDS:
        raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
    _check_tensors(q, k, v, g, beta)
    if initial_state is not None:
        _check_tensors(initial_state.float())
    return _Chunked.apply(kind, float(scale), backward, q, k, v, g, beta, initial_state)


def step(kind, q, k, v, g=None, beta=None, *, state, scale):
    """One fused recurrent step (decode). q, k [B,H,K]; v [B,H,V]; state [B,H,K,V] float32."""
    _check_kind(kind)
    _check_tensors(q, k, v, g, beta, state)
    from .recurrent_step import decode_step

    return decode_step(kind, q, k, v, g, beta, state.float(), float(scale))


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
