"""Fused SiTU gated activation (and a fused SiLU-and-mul to compare against), forward and backward.

    f(x) = b1 * tanh(x / b1) * sigmoid(x)        (SiTU of the gate)
    t(u) = b2 * tanh(u / b2)                      (soft-capped up projection)
    h    = f(gate) * t(up)
    dgate = dh * t(up) * [(1 - tanh^2(x/b1)) sigmoid(x) + b1 tanh(x/b1) sigmoid(x) (1 - sigmoid(x))]
    dup   = dh * f(gate) * (1 - tanh^2(u/b2))

Eager PyTorch runs each of these as its own pass over memory; here one program loads gate and up once,
does all the arithmetic in registers and writes h once. tanh and sigmoid are written with exp
(tanh y = (1 - e^{-2y}) / (1 + e^{-2y})), which exists on every Triton backend, the interpreter included.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048
WARPS = 8


# tanh y = (1 - e)/(1 + e) with e = exp(-2y), sigmoid x = 1/(1 + exp(-x)). Exponents are clamped
# (to 40 for the sigmoid, 20 for the tanhs: both functions are flat to float32 precision beyond) so the
# product (1 + e1)(1 + e2)(1 + e3) stays below 6e34 and one division serves all three ratios: exps and
# divisions are what this memory-bound kernel spends its instructions on. Near y = 0 the numerator
# 1 - e cancels, so it is replaced there by (1 + e) times the odd Taylor series of tanh.
@triton.jit
def _exp_clamped(x, bound: tl.constexpr):
    return tl.exp(tl.minimum(tl.maximum(x, -bound), bound))


@triton.jit
def _tanh_numerator(y, e):
    y2 = y * y
    series = y * (1.0 - y2 * (1.0 / 3.0) + y2 * y2 * (2.0 / 15.0))
    return tl.where(tl.abs(y) < 0.08, (1.0 + e) * series, 1.0 - e)


@triton.jit
def _situ_glu_fwd(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    # h = b1 b2 (1 - e2)(1 - e3) / ((1 + e1)(1 + e2)(1 + e3)),  e1 = e^-x, e2 = e^(-2x/b1), e3 = e^(-2u/b2)
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    e1 = _exp_clamped(-x, 40.0)
    e2 = _exp_clamped(-2.0 * x / beta1, 20.0)
    e3 = _exp_clamped(-2.0 * u / beta2, 20.0)
    num = _tanh_numerator(x / beta1, e2) * _tanh_numerator(u / beta2, e3)
    h = (beta1 * beta2) * num / ((1.0 + e1) * (1.0 + e2) * (1.0 + e3))
    tl.store(out_ptr + offs, h.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _situ_glu_bwd(gate_ptr, up_ptr, dh_ptr, dgate_ptr, dup_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    # sigmoid = 1/p1, 1 - sigmoid = e1/p1, tanh_x = (1 - e2)/p2, 1 - tanh_x^2 = 4 e2/p2^2, same for u
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    e1 = _exp_clamped(-x, 40.0)
    e2 = _exp_clamped(-2.0 * x / beta1, 20.0)
    e3 = _exp_clamped(-2.0 * u / beta2, 20.0)
    p1, p2, p3 = 1.0 + e1, 1.0 + e2, 1.0 + e3
    inv = 1.0 / (p1 * p2 * p3)
    r1, r2, r3 = p2 * p3 * inv, p1 * p3 * inv, p1 * p2 * inv
    sig = r1
    tx = _tanh_numerator(x / beta1, e2) * r2
    tu = _tanh_numerator(u / beta2, e3) * r3
    f = beta1 * tx * sig
    df = 4.0 * e2 * r2 * r2 * sig + beta1 * tx * sig * (e1 * r1)
    tl.store(dgate_ptr + offs, (dh * beta2 * tu * df).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dh * f * 4.0 * e3 * r3 * r3).to(dup_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_fwd(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x / (1.0 + tl.exp(-x)) * u).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_bwd(gate_ptr, up_ptr, dh_ptr, dgate_ptr, dup_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    tl.store(dgate_ptr + offs, (dh * u * sig * (1.0 + x * (1.0 - sig))).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dh * x * sig).to(dup_ptr.dtype.element_ty), mask=mask)


def _grid(n, block):
    return (triton.cdiv(n, block),)


class _SiTUGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up, beta1, beta2):
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        n = gate.numel()
        _situ_glu_fwd[_grid(n, BLOCK)](gate, up, out, n, beta1, beta2, BLOCK, num_warps=WARPS)
        ctx.save_for_backward(gate, up)
        ctx.betas = (beta1, beta2)
        return out

    @staticmethod
    def backward(ctx, dh):
        gate, up = ctx.saved_tensors
        dh = dh.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        n = gate.numel()
        _situ_glu_bwd[_grid(n, BLOCK)](gate, up, dh, dgate, dup, n, *ctx.betas, BLOCK, num_warps=WARPS)
        return dgate, dup, None, None


class _SiLUMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        n = gate.numel()
        _silu_mul_fwd[_grid(n, BLOCK)](gate, up, out, n, BLOCK, num_warps=WARPS)
        ctx.save_for_backward(gate, up)
        return out

    @staticmethod
    def backward(ctx, dh):
        gate, up = ctx.saved_tensors
        dh = dh.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        n = gate.numel()
        _silu_mul_bwd[_grid(n, BLOCK)](gate, up, dh, dgate, dup, n, BLOCK, num_warps=WARPS)
        return dgate, dup


def situ_glu(gate, up, beta1=4.0, beta2=25.0):
    return _SiTUGLU.apply(gate, up, float(beta1), float(beta2))


def silu_and_mul(gate, up):
    return _SiLUMul.apply(gate, up)
