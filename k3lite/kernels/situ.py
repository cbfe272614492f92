"""Fused SiTU gated activation (and a fused SiLU-and-mul to compare against), forward and backward.

    f(x) = b1 * tanh(x / b1) * sigmoid(x)        (SiTU of the gate)
    t(u) = b2 * tanh(u / b2)                      (soft-capped up projection)
    h    = f(gate) * t(up)
    dgate = dh * t(up) * [(1 - tanh^2(x/b1)) sigmoid(x) + b1 tanh(x/b1) sigmoid(x) (1 - sigmoid(x))]
    dup   = dh * f(gate) * (1 - tanh^2(u/b2))

Eager PyTorch runs each of these as its own pass over memory; here one program loads gate and up once,
does all the arithmetic in registers and writes h once.

Two arithmetic paths, picked by the FAST constexpr:
- exact (float32 tensors, and always in the CPU interpreter): tanh y = 1 - 2/(e^{2y}+1) with IEEE
  divisions. It saturates correctly at both ends and runs on every Triton backend. Near 0 it loses
  relative (not absolute) precision: about 1e-3 relative at |x/beta| = 1e-4.
- fast (bf16/fp16 tensors on a GPU): the special-function unit's tanh.approx.f32, and
  sigmoid x = 1 / (1 + 2^(-x log2 e)) with an approximate reciprocal: four MUFU operations per element
  and no IEEE division. Their relative error (about 2^-11) is under the bf16 rounding of the result
  (2^-8), and with it the kernel is bound by memory traffic rather than by arithmetic.

On a GPU the exact path is bound by its five IEEE divisions per element (a fused SiLU-and-mul has one),
not by memory traffic: that is why bf16/fp16 take the fast path.
"""

from __future__ import annotations

import torch

from . import _ensure_backend, first_derivatives_only

_ensure_backend()  # on CPU Triton's interpreter must be on before triton is imported (see k3lite.kernels)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._launch import cached_launch  # noqa: E402
from .chunk_fwd import cdiv  # noqa: E402

BLOCK = 2048
WARPS = 8


@triton.jit
def _tanh(y, FAST: tl.constexpr):
    if FAST:
        return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=f,f", [y], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return 1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)


@triton.jit
def _sigmoid(x, FAST: tl.constexpr):
    if FAST:
        e = tl.exp2(x * -1.4426950408889634)
        return tl.inline_asm_elementwise("rcp.approx.ftz.f32 $0, $1;", "=f,f", [1.0 + e], dtype=tl.float32,
                                         is_pure=True, pack=1)
    else:
        return 1.0 / (1.0 + tl.exp(-x))


@cached_launch
@triton.jit
def _situ_glu_fwd(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr, FAST: tl.constexpr):
    # h = f(gate) t(up), one element per lane, float32 arithmetic, one read of each input, one write.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = _sigmoid(x, FAST)
    h = beta1 * _tanh(x * (1.0 / beta1), FAST) * sig * (beta2 * _tanh(u * (1.0 / beta2), FAST))
    tl.store(out_ptr + offs, h.to(out_ptr.dtype.element_ty), mask=mask)


@cached_launch
@triton.jit
def _situ_glu_bwd(gate_ptr, up_ptr, dh_ptr, dgate_ptr, dup_ptr, n, beta1, beta2, BLOCK: tl.constexpr,
                  FAST: tl.constexpr):
    # dgate = dh t(up) f'(gate), dup = dh f(gate) t'(up); recomputes f and t instead of storing them.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = _sigmoid(x, FAST)
    tx = _tanh(x * (1.0 / beta1), FAST)
    tu = _tanh(u * (1.0 / beta2), FAST)
    f = beta1 * tx * sig
    df = (1.0 - tx * tx) * sig + beta1 * tx * sig * (1.0 - sig)
    tl.store(dgate_ptr + offs, (dh * beta2 * tu * df).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dh * f * (1.0 - tu * tu)).to(dup_ptr.dtype.element_ty), mask=mask)


@cached_launch
@triton.jit
def _silu_mul_fwd(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # out = gate sigmoid(gate) up.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x / (1.0 + tl.exp(-x)) * u).to(out_ptr.dtype.element_ty), mask=mask)


@cached_launch
@triton.jit
def _silu_mul_bwd(gate_ptr, up_ptr, dh_ptr, dgate_ptr, dup_ptr, n, BLOCK: tl.constexpr):
    # dgate = dh up sigmoid(gate) (1 + gate (1 - sigmoid(gate))), dup = dh gate sigmoid(gate).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    tl.store(dgate_ptr + offs, (dh * u * sig * (1.0 + x * (1.0 - sig))).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dh * x * sig).to(dup_ptr.dtype.element_ty), mask=mask)


def _grid(n, block):
    return (cdiv(n, block),)


# Set to False to time the exact path on 16-bit tensors too (benchmark comparisons).
FAST_MATH = True


def _fast(x):
    """The approximate special-function path: bf16/fp16 on a GPU only (see the module docstring)."""
    return FAST_MATH and x.is_cuda and x.dtype in (torch.bfloat16, torch.float16)


class _FusedGLU(torch.autograd.Function):
    """h = f(gate) t(up) through one forward and one backward kernel (SiTU-GLU or SiLU-and-mul).

    Both kernel pairs take (gate, up, out, n, *tail) and (gate, up, dh, dgate, dup, n, *tail), where tail holds
    their own scalars and constexprs; the backward recomputes f and t from the saved inputs.
    """

    @staticmethod
    def forward(ctx, gate, up, kernels, tail, path):
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        n = gate.numel()
        kernels[0][_grid(n, BLOCK)](gate, up, out, n, *tail, num_warps=WARPS)
        ctx.save_for_backward(gate, up)
        ctx.kernels, ctx.tail, ctx.path = kernels, tail, path
        return out

    @staticmethod
    @first_derivatives_only(lambda ctx: ctx.path)
    def backward(ctx, dh):
        gate, up = ctx.saved_tensors
        dh = dh.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        n = gate.numel()
        ctx.kernels[1][_grid(n, BLOCK)](gate, up, dh, dgate, dup, n, *ctx.tail, num_warps=WARPS)
        return dgate, dup, None, None, None


def situ_glu(gate, up, beta1=4.0, beta2=25.0):
    return _FusedGLU.apply(gate, up, (_situ_glu_fwd, _situ_glu_bwd), (float(beta1), float(beta2), BLOCK, _fast(gate)),
                           "k3lite.ops.situ.situ_glu(backend='triton')")


def silu_and_mul(gate, up):
    return _FusedGLU.apply(gate, up, (_silu_mul_fwd, _silu_mul_bwd), (BLOCK,), "k3lite.kernels.silu_and_mul")
