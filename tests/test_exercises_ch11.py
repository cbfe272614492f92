"""The checkers of chapter 11, under the Triton interpreter: the reference solutions pass, kernels without
masks or with the wrong decay fail with ExerciseFailed, a stub is "not attempted"."""

from __future__ import annotations

import pytest
import torch

from k3lite import kernels  # noqa: F401  first: on a CPU it switches on the Triton interpreter before triton is imported

pytest.importorskip("triton")

import triton
import triton.language as tl

from k3lite.exercises import ExerciseFailed, ch11

# ------------------------------------------------------------------------------- exercise 1

@triton.jit
def decode_right(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                 K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0)
    b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_beta = tl.load(beta_ptr + i_bh)
    b_s = b_s * tl.exp(b_g)[:, None]
    b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o, mask=mv)


@triton.jit
def decode_no_decay(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                    K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0)
    b_beta = tl.load(beta_ptr + i_bh)
    b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o, mask=mv)


@triton.jit
def decode_decay_after_delta(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                             K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0)
    b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_beta = tl.load(beta_ptr + i_bh)
    b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = (b_s + b_k[:, None] * b_v[None, :]) * tl.exp(b_g)[:, None]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o, mask=mv)


@triton.jit
def decode_unmasked_store(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                          K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_k = tl.load(k_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0)
    b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_beta = tl.load(beta_ptr + i_bh)
    b_s = b_s * tl.exp(b_g)[:, None]
    b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o)


@triton.jit
def decode_unmasked_key_load(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                             K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    mk, mv = rk < K, rv < V
    off = i_bh * K * V + rk[:, None] * V + rv[None, :]
    b_s = tl.load(s_ptr + off, mask=mk[:, None] & mv[None, :], other=0.0)
    b_q = tl.load(q_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_k = tl.load(k_ptr + i_bh * K + rk)
    b_v = tl.load(v_ptr + i_bh * V + rv, mask=mv, other=0.0)
    b_g = tl.load(g_ptr + i_bh * K + rk, mask=mk, other=0.0)
    b_beta = tl.load(beta_ptr + i_bh)
    b_s = b_s * tl.exp(b_g)[:, None]
    b_v = b_beta * (b_v - tl.sum(b_s * b_k[:, None], axis=0))
    b_s = b_s + b_k[:, None] * b_v[None, :]
    b_o = tl.sum(b_s * (b_q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + off, b_s, mask=mk[:, None] & mv[None, :])
    tl.store(o_ptr + i_bh * V + rv, b_o, mask=mv)


@triton.jit
def decode_stub(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    raise NotImplementedError


def test_decode_reference_passes():
    assert ch11.check_decode_kernel(decode_right)


def test_decode_stub_is_not_attempted(capsys):
    assert ch11.check_decode_kernel(decode_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("kernel, hint", [(decode_no_decay, "not decayed"),
                                          (decode_decay_after_delta, "new state"),
                                          (decode_unmasked_store, "past the end"),
                                          (decode_unmasked_key_load, "NaN")])
def test_decode_wrong_kernels_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11.check_decode_kernel(kernel)


# ------------------------------------------------------------------------------- exercise 2

@triton.jit
def situ_right(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0)
    tanh_x = 1.0 - 2.0 / (tl.exp(2.0 * x / beta1) + 1.0)
    tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u / beta2) + 1.0)
    h = beta1 * tanh_x / (1.0 + tl.exp(-x)) * beta2 * tanh_u
    tl.store(out_ptr + offs, h, mask=mask)


@triton.jit
def situ_unmasked(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(gate_ptr + offs)
    u = tl.load(up_ptr + offs)
    tanh_x = 1.0 - 2.0 / (tl.exp(2.0 * x / beta1) + 1.0)
    tanh_u = 1.0 - 2.0 / (tl.exp(2.0 * u / beta2) + 1.0)
    tl.store(out_ptr + offs, beta1 * tanh_x / (1.0 + tl.exp(-x)) * beta2 * tanh_u)


@triton.jit
def situ_is_silu(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x / (1.0 + tl.exp(-x)) * u, mask=mask)


@triton.jit
def situ_uncapped_up(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(gate_ptr + offs, mask=mask, other=0.0)
    u = tl.load(up_ptr + offs, mask=mask, other=0.0)
    tanh_x = 1.0 - 2.0 / (tl.exp(2.0 * x / beta1) + 1.0)
    tl.store(out_ptr + offs, beta1 * tanh_x / (1.0 + tl.exp(-x)) * u, mask=mask)


def test_situ_reference_passes():
    assert ch11.check_situ_forward(situ_right)


@pytest.mark.parametrize("kernel, hint", [(situ_unmasked, "past the end"), (situ_is_silu, "SiLU"),
                                          (situ_uncapped_up, "values differ")])
def test_situ_wrong_kernels_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11.check_situ_forward(kernel)


# ------------------------------------------------------------------------------- exercise 3

def test_overrun_measured_matches_arithmetic_and_masks_stop_it():
    for n, block in ch11.OVERRUN_CASES:
        assert ch11.measure_overrun(n, block) == triton.cdiv(n, block) * block - n
        assert ch11.measure_overrun(n, block, ch11.copy_masked) == 0


def test_overrun_prediction_right_and_wrong():
    assert ch11.check_overrun(lambda n, block: -n % block)
    with pytest.raises(ExerciseFailed, match="inside the tensor"):
        ch11.check_overrun(lambda n, block: n % block)
    with pytest.raises(ExerciseFailed, match="predict"):
        ch11.check_overrun(lambda n, block: 0)
    with pytest.raises(ExerciseFailed, match="predict"):
        ch11.check_overrun(lambda n, block: block)


def test_measure_overrun_rejects_bad_block():
    with pytest.raises(ValueError, match="block"):
        ch11.measure_overrun(10, 3)
    with pytest.raises(ValueError, match="n must"):
        ch11.measure_overrun(0, 16)


def test_stub_prediction_is_not_attempted(capsys):
    def stub(n, block):
        raise NotImplementedError

    assert ch11.check_overrun(stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_guarded_views_share_the_buffer():
    buffer, view = ch11.guarded(torch.arange(6.0).view(2, 3), ch11.SENTINEL)
    view.add_(1.0)
    assert buffer[ch11.GUARD:ch11.GUARD + 6].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert ch11.overwritten_guard(buffer) == 0


# ------------------------------------------------------------------- k3lite.course.listing (the chapter's listings)

def test_listing_shows_a_kernel_and_a_named_slice():
    from k3lite.course import listing
    from k3lite.kernels import situ

    whole = listing.source(situ._tanh)
    assert whole.startswith("@triton.jit\ndef _tanh(")
    part = listing.source(situ._tanh, "else:", "return 1.0")
    assert part.splitlines()[0] == "else:" and part.splitlines()[-1].lstrip().startswith("return 1.0")
    assert listing.show(situ._tanh)._repr_markdown_() == f"```python\n{whole}\n```"


def test_listing_raises_when_the_code_changed():
    from k3lite.course import listing
    from k3lite.kernels import situ

    with pytest.raises(ValueError, match="start text 'no such line'"):
        listing.source(situ._tanh, "no such line")
    with pytest.raises(ValueError, match="end text 'no such line'"):
        listing.source(situ._tanh, "def _tanh", "no such line")
    with pytest.raises(ValueError, match="end needs a start"):
        listing.source(situ._tanh, None, "return")


# ------------------------------------------------------------------------------- exercise 4

def sums_right(g):
    total = g.double().clamp_min(-1024.0).cumsum(0)
    hi = total.float()
    return hi, (total - hi.double()).float()


def sums_float32(g):  # one float32 running sum: the gentle gates after a spike are rounded away
    return g.clamp_min(-1024.0).cumsum(0), torch.zeros_like(g)


def sums_without_floor(g):  # right sums, but -inf - (-inf) = NaN
    total = g.double().cumsum(0)
    hi = total.float()
    return hi, (total - hi.double()).float()


def test_gate_sums_right_passes():
    assert ch11.check_gate_sums(sums_right)


@pytest.mark.parametrize("wrong,message", [(sums_float32, "values differ"), (sums_without_floor, "NaN"),
                                           (lambda g: (g.cumsum(0).double(), g), "float32 tensor")])
def test_gate_sums_wrong_fail_with_a_reason(wrong, message):
    with pytest.raises(ExerciseFailed, match=message):
        ch11.check_gate_sums(wrong)


def test_gate_sums_stub_is_not_attempted():
    def stub(g):
        raise NotImplementedError

    assert ch11.check_gate_sums(stub) is False


def test_one_float32_sum_is_measurably_off_on_the_spike_chunks():
    # What the exercise rests on: the float32 running sum's decays are off by more than 100x the checker's 1e-6.
    for spike in ch11.SPIKES:
        g = ch11.spike_gates(spike)
        error = (ch11.decays_from_parts(*sums_float32(g)) - ch11.exact_decays(g)).abs().max().item()
        assert error > 1e-4, (spike, error)
