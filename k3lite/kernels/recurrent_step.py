"""Fused one-token decode step for the four kinds: the float32 state is read once and written once.

Per head and value block (state block S [K, BV]):
    S = Diag(exp g) S                       (g scalar per head, per channel, or absent)
    S = S + k (beta * (v - S^T k))^T        (delta rule)   |   S = S + k v^T   (linear attention)
    o = S^T (scale * q)
Decode is bound by the state traffic (2 * 4 * K * V bytes per head), so the kernel keeps the whole
update in registers and touches the state exactly twice.

Value checks on CUDA: the kernel reads every g and beta anyway, so it checks them there (g <= 0, beta in
[0, 2], NaN failing both) with a ``tl.device_assert`` that names both arguments; the failure reaches the host
at its next synchronisation, as any CUDA error does. Triton compiles device asserts only into a kernel
launched with ``debug=True`` (which also adds integer-overflow checks unless ``sanitize_overflow=False``), so
the step is launched with both. Checks on the host would be eight small launches per step (a max, an aminmax,
three comparisons, an and, two asserts), and a flag cleared in the kernel plus one ``torch._assert_async`` two.
A decode step is host-bound (the host issues it about as fast as the GPU runs it), so every launch shows in its
time: the assert in the kernel keeps the step at one launch.
"""

from __future__ import annotations

import torch

from . import _ensure_backend

_ensure_backend()  # on CPU Triton's interpreter must be on before triton is imported (see k3lite.kernels)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from ._launch import cached_launch  # noqa: E402
from .chunk_fwd import DELTA_OF_KIND, GATE_CHANNEL, GATE_OF_KIND, GATE_SCALAR, _block, cdiv  # noqa: E402


@cached_launch
@triton.jit
def _decode_step(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                 K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                 GATE: tl.constexpr, DELTA: tl.constexpr, CHECK: tl.constexpr, MESSAGE: tl.constexpr):
    # One program: state block S [K, BV] of one head. Load S once; S *= exp(g); for the delta rule
    # v <- beta (v - S^T k); S += k v^T; o = S^T (scale q); store S once.
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh.to(tl.int64) * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0).to(tl.float32)
    bad = False
    if GATE == GATE_SCALAR:
        b_g1 = tl.load(g_ptr + i_bh).to(tl.float32)
        bad = bad | ~(b_g1 <= 0.0)              # written so that NaN counts as bad
        b_s = b_s * tl.exp(b_g1)
    if GATE == GATE_CHANNEL:
        b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0).to(tl.float32)
        bad = bad | (tl.max((~(b_g <= 0.0)).to(tl.int32), axis=0) > 0)
        b_s = b_s * tl.exp(b_g)[:, None]
    if DELTA:
        b_beta = tl.load(beta_ptr + i_bh).to(tl.float32)
        bad = bad | ~((b_beta >= 0.0) & (b_beta <= 2.0))
        b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    if CHECK:
        tl.device_assert(~bad, MESSAGE)
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o.to(o_ptr.dtype.element_ty), mask=mv)


# One message per call, so the gated kinds' assert names both arguments it covers.
_GATE_AND_BETA = ("g is a log-space decay and must be <= 0 everywhere, and beta must lie in [0, 2]; "
                  "one of them does not")
VALUE_MESSAGES = {"gated_delta_rule": _GATE_AND_BETA, "kda": _GATE_AND_BETA, "delta_rule": "beta must lie in [0, 2]"}


# The assert's message per kind, built once: a call's host time counts (see decode_step).
_ASSERT_MESSAGES = {kind: f"k3lite: {message} (ValueError on CPU)" for kind, message in VALUE_MESSAGES.items()}

# The chunked forward checks its values with a flag instead (see chunk_fwd.chunk_forward): one int32 per device,
# 1 while every value stages 1 and 4 read was in range. A stage that finds a bad value writes 0 and the assert after
# the forward fails; a failed device assert ends the process's use of the GPU, so the flag never has to be set back.
_VALUES_OK: dict = {}


def values_ok_flag(kind, device):
    """The flag the chunked forward's kernels of one ``kind``'s call clear on a bad value, or None where nothing is
    checked in a kernel (linear attention has neither g nor beta; the interpreter leaves the checks to the host)."""
    if kind not in VALUE_MESSAGES or device.type != "cuda":
        return None
    flag = _VALUES_OK.get(device)
    if flag is None:
        flag = _VALUES_OK[device] = torch.ones((), dtype=torch.int32, device=device)
    return flag


def assert_values_ok(kind, flag) -> None:
    """Queue the assert on the flag (no host synchronisation); nothing when the call had none."""
    if flag is not None:
        torch._assert_async(flag, _ASSERT_MESSAGES[kind])


# Launch options of a step that checks its values in the kernel: device asserts are compiled in only with debug;
# without sanitize_overflow=False, debug would also add an overflow check to every integer operation.
_CHECKED_STEP = {"debug": True, "sanitize_overflow": False}


def decode_step(kind, q, k, v, g, beta, state, scale, *, inplace=False, block_v=64, num_warps=4):
    """q, k [B,H,K]; v [B,H,V]; g [B,H] or [B,H,K]; beta [B,H]; state [B,H,K,V] float32.

    ``inplace``: write the new state over ``state`` (contiguous float32). Each program reads its state
    block completely before it writes the same block, so reading and writing one buffer is safe.
    On CUDA the kernel checks g and beta (see the module docstring); the interpreter leaves that to the
    host-side checks, which raise a ValueError at once."""
    B, H, K = q.shape
    V = v.shape[-1]
    BK = _block(K)
    BV = min(block_v, _block(V))
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    state = state if inplace else state.contiguous()
    g = g.contiguous() if g is not None else q
    beta = beta.contiguous() if beta is not None else q
    o = torch.empty_like(v)
    new_state = state if inplace else torch.empty_like(state)
    check = q.is_cuda and kind in VALUE_MESSAGES
    _decode_step[(cdiv(V, BV), B * H)](q, k, v, g, beta, state, o, new_state, scale, K, V, BK, BV, GATE_OF_KIND[kind],
                                       DELTA_OF_KIND[kind], check, _ASSERT_MESSAGES.get(kind, ""),
                                       num_warps=num_warps, **(_CHECKED_STEP if check else {}))
    return o, new_state
