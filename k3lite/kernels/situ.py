"""Fused SiTU gated activation (and a fused SiLU-and-mul to compare against), forward and backward.

    f(x) = b1 * tanh(x / b1) * sigmoid(x)        (SiTU of the gate)
    t(u) = b2 * tanh(u / b2)                      (soft-capped up projection)
    h    = f(gate) * t(up)
    dgate = dh * t(up) * [(1 - tanh^2(x/b1)) sigmoid(x) + b1 tanh(x/b1) sigmoid(x) (1 - sigmoid(x))]
    dup   = dh * f(gate) * (1 - tanh^2(u/b2))

Eager PyTorch runs each of these as its own pass over memory; here one program loads gate and up once,
does all the arithmetic in registers and writes h once. tanh is written with exp (tanh y = 1 - 2/(e^{2y}+1)),
which saturates correctly at both ends and exists on every Triton backend, the interpreter included.
Near 0 it loses relative (not absolute) precision: about 1e-3 relative at |x/beta| = 1e-4.

Measured on an H200 (8192 x 3072, bf16): a variant with one division per element and a Taylor fix near 0
ran slower (0.068 ms against 0.054 ms forward), so this plain form is the one kept.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048
WARPS = 8


@triton.jit
def _tanh(y):
    return 1.0 - 2.0 / (tl.exp(2.0 * y) + 1.0)


@triton.jit
def _situ_glu_fwd(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    # h = f(gate) t(up), one element per lane, float32 arithmetic, one read of each input, one write.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    h = beta1 * _tanh(x / beta1) * sig * (beta2 * _tanh(u / beta2))
    tl.store(out_ptr + offs, h.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _situ_glu_bwd(gate_ptr, up_ptr, dh_ptr, dgate_ptr, dup_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    # dgate = dh t(up) f'(gate), dup = dh f(gate) t'(up); recomputes f and t instead of storing them.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-x))
    tx = _tanh(x / beta1)
    tu = _tanh(u / beta2)
    f = beta1 * tx * sig
    df = (1.0 - tx * tx) * sig + beta1 * tx * sig * (1.0 - sig)
    tl.store(dgate_ptr + offs, (dh * beta2 * tu * df).to(dgate_ptr.dtype.element_ty), mask=mask)
    tl.store(dup_ptr + offs, (dh * f * (1.0 - tu * tu)).to(dup_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_mul_fwd(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # out = gate sigmoid(gate) up.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x / (1.0 + tl.exp(-x)) * u).to(out_ptr.dtype.element_ty), mask=mask)


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
