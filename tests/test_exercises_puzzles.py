"""The checkers of chapter 11a's Triton puzzles, under the interpreter: a right kernel passes, a stub is "not
attempted", and each typical mistake fails with ExerciseFailed naming it."""

from __future__ import annotations

import pytest
import torch

from k3lite import kernels  # noqa: F401  first: on a CPU it switches on the Triton interpreter before triton is imported

pytest.importorskip("triton")

import triton
import triton.language as tl

from k3lite.exercises import ExerciseFailed, ch11a

# ------------------------------------------------------------------------------- 1. masked add


@triton.jit
def add_right(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def add_unmasked_store(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y)


@triton.jit
def add_no_program_offset(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def add_stub(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    raise NotImplementedError


def test_add_right_passes():
    assert ch11a.check_add(add_right)


def test_add_stub_is_not_attempted(capsys):
    assert ch11a.check_add(add_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("kernel, hint", [(add_unmasked_store, "outside the tensor were written"),
                                          (add_no_program_offset, "never stored")])
def test_add_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_add(kernel)


# ------------------------------------------------------------------------------- 2. row softmax


@triton.jit
def softmax_right(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_no_max(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=float("-inf"))
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_zero_padding(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_unmasked_load(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def softmax_stub(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    raise NotImplementedError


def test_softmax_right_passes():
    assert ch11a.check_softmax(softmax_right)


def test_softmax_stub_is_not_attempted(capsys):
    assert ch11a.check_softmax(softmax_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("kernel, hint", [(softmax_no_max, "row maximum"), (softmax_zero_padding, "-inf"),
                                          (softmax_unmasked_load, "NaN")])
def test_softmax_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_softmax(kernel)


# ------------------------------------------------------------------------------- 3. tiled matmul


@triton.jit
def matmul_right(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_first_block_only(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
    b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
    acc = tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_drops_tail(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K - BK + 1, BK):   # whole blocks only
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=rows[:, None] < M, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=cols[None, :] < N, other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def test_matmul_right_passes():
    assert ch11a.check_matmul(matmul_right)


@pytest.mark.parametrize("kernel, hint", [(matmul_first_block_only, "first BK columns"),
                                          (matmul_drops_tail, "partial block")])
def test_matmul_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_matmul(kernel)


# ------------------------------------------------------------------------------- 4. chunk-local prefix sum


@triton.jit
def cumsum_right(g_ptr, out_ptr, T, CHUNK: tl.constexpr):
    chunk, row = tl.program_id(0), tl.program_id(1)
    steps = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = steps < T
    g = tl.load(g_ptr + row * T + steps, mask=mask, other=0.0)
    tl.store(out_ptr + row * T + steps, tl.cumsum(g, axis=0), mask=mask)


@triton.jit
def cumsum_exclusive(g_ptr, out_ptr, T, CHUNK: tl.constexpr):
    chunk, row = tl.program_id(0), tl.program_id(1)
    steps = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = steps < T
    g = tl.load(g_ptr + row * T + steps, mask=mask, other=0.0)
    tl.store(out_ptr + row * T + steps, tl.cumsum(g, axis=0) - g, mask=mask)


@triton.jit
def cumsum_carried(g_ptr, out_ptr, T, CHUNK: tl.constexpr):
    # Adds every earlier chunk's total: the sum of the whole row so far.
    chunk, row = tl.program_id(0), tl.program_id(1)
    steps = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = steps < T
    g = tl.load(g_ptr + row * T + steps, mask=mask, other=0.0)
    before = tl.arange(0, CHUNK)
    carried = tl.zeros([CHUNK], dtype=tl.float32)
    for c in range(0, chunk):
        carried += tl.load(g_ptr + row * T + c * CHUNK + before)
    tl.store(out_ptr + row * T + steps, tl.cumsum(g, axis=0) + tl.sum(carried, axis=0), mask=mask)


def test_cumsum_reference_restarts_at_chunks():
    g = torch.arange(1.0, 7.0)[None]
    assert ch11a.chunk_cumsum_reference(g, 4).tolist() == [[1.0, 3.0, 6.0, 10.0, 5.0, 11.0]]


def test_cumsum_right_passes():
    assert ch11a.check_chunk_cumsum(cumsum_right)


@pytest.mark.parametrize("kernel, hint", [(cumsum_exclusive, "exclusive"), (cumsum_carried, "across chunks")])
def test_cumsum_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_chunk_cumsum(kernel)


# ------------------------------------------------------------------------------- 5. SiLU(gate) * up


@triton.jit
def _silu_mul(x_ptr, out_ptr, D, BLOCK: tl.constexpr, MODE: tl.constexpr):
    # MODE 0: right; 1: gate and up swapped; 2: rows strided by D, not 2D; 3: sigma as e^a / (1 + e^a).
    row, block = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < D
    stride = 2 * D
    if MODE == 2:
        stride = D
    gate = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    up = tl.load(x_ptr + row * stride + D + cols, mask=mask, other=0.0)
    if MODE == 1:
        gate, up = up, gate
    if MODE == 0:
        small = tl.exp(-tl.abs(gate))
        sigmoid = tl.where(gate >= 0, 1.0 / (1.0 + small), small / (1.0 + small))
    elif MODE == 3:
        grown = tl.exp(gate)                              # inf at gate = 100: inf / inf is NaN
        sigmoid = grown / (1.0 + grown)
    else:
        sigmoid = 1.0 / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * D + cols, gate * sigmoid * up, mask=mask)


@triton.jit
def silu_mul_right(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    _silu_mul(x_ptr, out_ptr, D, BLOCK, 0)


@triton.jit
def silu_mul_swapped(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    _silu_mul(x_ptr, out_ptr, D, BLOCK, 1)


@triton.jit
def silu_mul_row_stride_d(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    _silu_mul(x_ptr, out_ptr, D, BLOCK, 2)


@triton.jit
def silu_mul_overflowing(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    _silu_mul(x_ptr, out_ptr, D, BLOCK, 3)


def test_silu_mul_right_passes():
    assert ch11a.check_silu_mul(silu_mul_right)


@pytest.mark.parametrize("kernel, hint", [(silu_mul_swapped, "swapped"), (silu_mul_row_stride_d, "r \\* 2D"),
                                          (silu_mul_overflowing, "inf / inf")])
def test_silu_mul_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_silu_mul(kernel)


# ------------------------------------------------------------------------------- 6. delta-rule decode step


@triton.jit
def _delta_step(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                BK: tl.constexpr, BV: tl.constexpr, USE_BETA: tl.constexpr, READ_AFTER_WRITE: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BK)
    cols = block * BV + tl.arange(0, BV)
    row_ok, col_ok = rows < K, cols < V
    state_at = head * K * V + rows[:, None] * V + cols[None, :]
    tile_ok = row_ok[:, None] & col_ok[None, :]
    S = tl.load(s_ptr + state_at, mask=tile_ok, other=0.0)
    q = tl.load(q_ptr + head * K + rows, mask=row_ok, other=0.0)
    k = tl.load(k_ptr + head * K + rows, mask=row_ok, other=0.0)
    v = tl.load(v_ptr + head * V + cols, mask=col_ok, other=0.0)
    beta = tl.load(beta_ptr + head)
    if not USE_BETA:
        beta = 1.0
    o_old = tl.sum(S * (q * scale)[:, None], axis=0)
    v_new = beta * (v - tl.sum(S * k[:, None], axis=0))
    S = S + k[:, None] * v_new[None, :]
    o = tl.sum(S * (q * scale)[:, None], axis=0)
    if not READ_AFTER_WRITE:
        o = o_old
    tl.store(s_out_ptr + state_at, S, mask=tile_ok)
    tl.store(o_ptr + head * V + cols, o, mask=col_ok)


@triton.jit
def delta_right(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                BK: tl.constexpr, BV: tl.constexpr):
    _delta_step(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV, True, True)


@triton.jit
def delta_no_beta(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                  BK: tl.constexpr, BV: tl.constexpr):
    _delta_step(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV, False, True)


@triton.jit
def delta_reads_old_state(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                          BK: tl.constexpr, BV: tl.constexpr):
    _delta_step(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV, True, False)


def test_delta_right_passes():
    assert ch11a.check_delta_step(delta_right)


@pytest.mark.parametrize("kernel, hint", [(delta_no_beta, "beta = 1"), (delta_reads_old_state, "before the write")])
def test_delta_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_delta_step(kernel)


# ------------------------------------------------------------------------------- 7. causal scores of a chunk


@triton.jit
def _scores(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    # MODE 0: right; 1: multiplies by the mask (inf * 0 above the diagonal); 2: strict mask (c < r); 3: no mask.
    chunk = tl.program_id(0)
    rows = tl.arange(0, BC)
    ks = tl.arange(0, BK)
    tile_ok = (rows[:, None] < C) & (ks[None, :] < K)
    q = tl.load(q_ptr + chunk * C * K + rows[:, None] * K + ks[None, :], mask=tile_ok, other=0.0)
    k = tl.load(k_ptr + chunk * C * K + rows[:, None] * K + ks[None, :], mask=tile_ok, other=0.0)
    G = tl.load(G_ptr + chunk * C + rows, mask=rows < C, other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision="ieee")
    span = G[:, None] - G[None, :]
    if MODE == 0:
        causal = (rows[:, None] >= rows[None, :]) & (rows[:, None] < C)
        scores = tl.where(causal, scores * tl.exp(tl.where(causal, span, 0.0)), 0.0)
    elif MODE == 1:
        causal = rows[:, None] >= rows[None, :]
        scores = scores * tl.exp(span) * causal.to(tl.float32)
    elif MODE == 2:
        causal = rows[:, None] > rows[None, :]
        scores = tl.where(causal, scores * tl.exp(tl.where(causal, span, 0.0)), 0.0)
    else:
        scores = scores * tl.exp(tl.minimum(span, 0.0))
    out_ok = (rows[:, None] < C) & (rows[None, :] < C)
    tl.store(out_ptr + chunk * C * C + rows[:, None] * C + rows[None, :], scores, mask=out_ok)


@triton.jit
def scores_right(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    _scores(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK, 0)


@triton.jit
def scores_mask_multiplied(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    _scores(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK, 1)


@triton.jit
def scores_strict(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    _scores(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK, 2)


@triton.jit
def scores_unmasked(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    _scores(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK, 3)


def test_scores_reference_is_causal_and_decayed():
    q = torch.ones(1, 2, 1)
    G = torch.tensor([[0.0, -1.0]])
    expected = torch.tensor([[[1.0, 0.0], [torch.exp(torch.tensor(-1.0)).item(), 1.0]]])
    assert torch.allclose(ch11a.chunk_scores_reference(q, q, G), expected)


def test_scores_right_passes():
    assert ch11a.check_chunk_scores(scores_right)


@pytest.mark.parametrize("kernel, hint", [(scores_mask_multiplied, "NaN above the diagonal"),
                                          (scores_strict, "diagonal is 0"),
                                          (scores_unmasked, "not 0")])
def test_scores_mistakes_fail(kernel, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_chunk_scores(kernel)


def test_reload_prediction_accepts_the_grid_row_count():
    assert ch11a.tile_reloads(256, 256, 256, 32, 32, 32) == 8
    assert ch11a.tile_reloads(256, 100, 256, 32, 32, 32) == 4   # a partial column tile still reads a
    assert ch11a.check_reload_prediction(lambda: 8, measured=8)


@pytest.mark.parametrize("guess, hint", [(1, "whole row of c"), (64, "number of programs"), (16, "not right")])
def test_reload_prediction_explains_a_wrong_guess(guess, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch11a.check_reload_prediction(lambda: guess)


def test_reload_prediction_refuses_a_wrong_measurement():
    with pytest.raises(ExerciseFailed, match="measured count 7"):
        ch11a.check_reload_prediction(lambda: 8, measured=7)
