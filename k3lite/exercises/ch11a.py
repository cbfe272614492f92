"""Checkers for chapter 11a (Triton puzzles), run under the Triton interpreter on a CPU.

Seven kernels, from a masked vector add to the causal scores of one chunk, each checked against PyTorch at
several shapes, at least one of which leaves the last block partly outside the tensor:

1. :func:`check_add` — load, add, store, with masks.
2. :func:`check_softmax` — a row-wise reduction: the softmax of each row.
3. :func:`check_matmul` — a tiled matrix product with ``tl.dot``.
4. :func:`check_chunk_cumsum` — running sums of log-gates that restart at every chunk.
5. :func:`check_silu_mul` — SiLU(gate) * up read from one fused gate-up tensor.
6. :func:`check_delta_step` — one decode step of the delta rule (``k3lite.ops.delta_rule.step``).
7. :func:`check_chunk_scores` — one chunk's causal, decayed scores (q_r . k_c) exp(G_r - G_c).

As in chapter 11's checkers, every tensor a learner's kernel touches lies inside a larger buffer (``ch11.guarded``):
inputs are surrounded by NaN and outputs by a sentinel, so a load or a store without a mask is caught as such.
"""

from __future__ import annotations

import torch

from k3lite import kernels
from k3lite.exercises import ExerciseFailed, attempt, expect_close

kernels.interpreting()  # switches the interpreter on (no GPU) before triton is imported below
import triton  # noqa: E402

from k3lite.exercises.ch11 import SENTINEL, device, guarded, overwritten_guard  # noqa: E402
from k3lite.ops import delta_rule  # noqa: E402


def _launch(kernel, grid: tuple, *args) -> None:
    """Launch ``kernel[grid](*args)``; a stub kernel's NotImplementedError reaches us wrapped by Triton."""
    try:
        kernel[grid](*args)
    except NotImplementedError:
        raise
    except Exception as err:
        if isinstance(err.__cause__, NotImplementedError) or "NotImplementedError" in str(err):
            raise NotImplementedError from err
        raise


def _inputs(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """Contiguous copies on the checkers' device, each with NaN around it."""
    return [guarded(x.to(device()).contiguous(), float("nan"))[1] for x in tensors]


def _output(shape) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): an output tensor filled with the sentinel, the sentinel around it too."""
    return guarded(torch.full(shape, SENTINEL, device=device()), SENTINEL)


def _check_output(buffer: torch.Tensor, out: torch.Tensor, what: str, owner: str) -> torch.Tensor:
    """The failures every puzzle shares: a store past the end, a load past the end, an element never stored."""
    written = overwritten_guard(buffer)
    if written:
        raise ExerciseFailed(f"{what}: {written} elements outside the tensor were written. A block that sticks out "
                             "past the end stores its outside lanes too unless tl.store gets mask=.")
    out = out.cpu()
    if torch.isnan(out).any():
        raise ExerciseFailed(f"{what} holds NaN: a load without a mask read past the end of an input (the checker "
                             "surrounds every input with NaN). Pass mask= and other= to tl.load.")
    missing = int((out == SENTINEL).sum())
    if missing:
        raise ExerciseFailed(f"{what}: {missing} elements were never stored. {owner}")
    return out


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------- 1. load and store

ADD_CASES = ((37, 16), (64, 16), (1, 32), (1000, 128))   # (n, BLOCK): a short last block, an exact fit, one lane


def check_add(kernel) -> bool:
    """``kernel(x_ptr, y_ptr, out_ptr, n, BLOCK)`` writes out = x + y for n float32 elements, launched on
    ``cdiv(n, BLOCK)`` programs of BLOCK lanes."""

    def check():
        for n, block in ADD_CASES:
            gen = _generator(n)
            x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
            x_in, y_in = _inputs(x, y)
            buffer, out = _output((n,))
            _launch(kernel, (triton.cdiv(n, block),), x_in, y_in, out, n, block)
            got = _check_output(buffer, out, f"out (n={n}, BLOCK={block})",
                                "Program i owns elements i*BLOCK ... i*BLOCK + BLOCK - 1: offset tl.arange by "
                                "tl.program_id(0) * BLOCK.")
            expect_close(got, x + y, what=f"out (n={n}, BLOCK={block})", hint="out[i] = x[i] + y[i].")

    return attempt("Puzzle 1 (masked add)", check)


# ------------------------------------------------------------------------------- 2. row-wise softmax

# (rows, columns, BLOCK, spread): scores are spread times a normal draw. A spread of 60 overflows exp() in float32
# unless the row maximum is taken off first; a spread of 1 lets lanes wrongly loaded as 0 change the sums.
SOFTMAX_CASES = ((4, 37, 64, 1.0), (3, 16, 16, 60.0), (5, 100, 128, 60.0))


def check_softmax(kernel) -> bool:
    """``kernel(x_ptr, out_ptr, n_cols, BLOCK)`` writes the softmax of each row of a contiguous float32
    ``[rows, n_cols]`` tensor, one program per row; BLOCK is n_cols rounded up to a power of two."""

    def check():
        for rows, cols, block, spread in SOFTMAX_CASES:
            x = spread * torch.randn(rows, cols, generator=_generator(cols))
            (x_in,) = _inputs(x)
            buffer, out = _output((rows, cols))
            _launch(kernel, (rows,), x_in, out, cols, block)
            what = f"softmax of a [{rows}, {cols}] tensor (BLOCK={block})"
            bad_rows = (~torch.isfinite(out.cpu())).any(dim=1)
            if bad_rows[:-1].any() and overwritten_guard(buffer) == 0:
                raise ExerciseFailed(f"{what} holds inf or NaN. Its scores are {spread:.0f} times a "
                                     "normal draw, and exp(89) is already inf in float32: subtract the row maximum "
                                     "(tl.max(x, axis=0)) before tl.exp. The answer does not change; the range does.")
            got = _check_output(buffer, out, what, "One program per row: row r starts at r * n_cols.")
            expected = torch.softmax(x, dim=1)
            zero_padded = torch.softmax(torch.cat([x, torch.zeros(rows, block - cols)], dim=1), dim=1)[:, :cols]
            if not torch.allclose(zero_padded, expected, atol=1e-6) and torch.allclose(got, zero_padded, atol=1e-6):
                raise ExerciseFailed(f"{what}: the lanes past n_cols count as scores of 0. Load them with "
                                     "other=float('-inf'), which exp turns into 0.")
            expect_close(got, expected, what=what, atol=1e-6,
                         hint="softmax(x)_j = exp(x_j - max x) / sum_i exp(x_i - max x), over one row.")

    return attempt("Puzzle 2 (row softmax)", check)


# ------------------------------------------------------------------------------- 3. tiled matmul

def _refuse_tf32_products(got, expected, what: str, *, exact_below: float) -> None:
    """A result off by more than float32 rounding but by less than TF32's three digits: tl.dot ran in TF32."""
    worst = (got - expected).abs().max().item()
    if exact_below < worst < 5e-2:
        raise ExerciseFailed(f"{what}: close but not exact (max |difference| {worst:.2g}). On a GPU tl.dot "
                             "multiplies float32 in TF32 unless told input_precision='ieee'.")


MATMUL_CASES = ((20, 24, 40), (16, 16, 16), (33, 17, 5))   # (M, N, K), with 16 x 16 x 16 blocks
MATMUL_BLOCK = 16


def check_matmul(kernel) -> bool:
    """``kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK)`` writes c = a @ b for contiguous float32 a ``[M, K]``,
    b ``[K, N]``, c ``[M, N]``, one program per ``[BM, BN]`` tile of c on a ``(cdiv(M, BM), cdiv(N, BN))`` grid."""

    def check():
        bs = MATMUL_BLOCK
        for m, n, k in MATMUL_CASES:
            gen = _generator(m * n + k)
            a, b = torch.randn(m, k, generator=gen), torch.randn(k, n, generator=gen)
            a_in, b_in = _inputs(a, b)
            buffer, out = _output((m, n))
            _launch(kernel, (triton.cdiv(m, bs), triton.cdiv(n, bs)), a_in, b_in, out, m, n, k, bs, bs, bs)
            what = f"c = a @ b with M, N, K = {m}, {n}, {k}"
            got = _check_output(buffer, out, what, "Program (i, j) owns rows i*BM ... and columns j*BN ... of c.")
            expected = a @ b
            if k > bs and torch.allclose(got, a[:, :bs] @ b[:bs], atol=1e-4):
                raise ExerciseFailed(f"{what}: only the first BK columns of a were used. Walk the shared dimension: "
                                     "for k0 in range(0, K, BK), accumulating tl.dot of each pair of blocks.")
            whole = k // bs * bs
            if k % bs and whole and torch.allclose(got, a[:, :whole] @ b[:whole], atol=1e-4):
                raise ExerciseFailed(f"{what}: the last, partial block of the shared dimension is missing. The loop "
                                     "must reach K; mask the lanes past K with other=0.0 so they add nothing.")
            _refuse_tf32_products(got, expected, what, exact_below=1e-4)
            expect_close(got, expected, what=what, atol=1e-4,
                         hint="Load a[rows, k0:k0+BK] and b[k0:k0+BK, cols] (row-major: a at row * K + col), "
                              "masked on every side.")

    return attempt("Puzzle 3 (tiled matmul)", check)


def tile_reloads(M: int, N: int, K: int, BM: int, BN: int, BK: int) -> int:
    """How many programs of the tiled matmul read each element of ``a``: one per column tile of ``c``."""
    if min(M, N, K, BM, BN, BK) < 1:
        raise ValueError(f"sizes and blocks must be >= 1, got {(M, N, K, BM, BN, BK)}")
    return triton.cdiv(N, BN)


def check_reload_prediction(predict, measured: int | None = None) -> bool:
    """``predict() -> int``: how many times the tiled matmul of puzzle 3 reads each element of ``a`` for
    M = N = K = 256 with 32 x 32 x 32 blocks. ``measured`` (the notebook's count) must agree with the rule."""

    def check():
        predicted = predict()
        expected = tile_reloads(256, 256, 256, 32, 32, 32)
        if measured is not None and measured != expected:
            raise ExerciseFailed(f"the measured count {measured} is not {expected}: count the reads of a on the "
                                 "(8, 8) grid, one per program and loop step that loads the element.")
        explanation = (f"each element of a is read {expected} times: program (i, j) reads all of a's row block i, "
                       f"and there are N / BN = {expected} programs in that row of the grid, one per column tile of "
                       "c. The arithmetic per byte read grows with BN, which is why kernels take the largest tiles "
                       "that fit on chip.")
        if predicted != expected:
            hint = ""
            if predicted == 1:
                hint = " Once would need one program to compute a whole row of c; here a row block is shared."
            elif predicted == 64:
                hint = " 64 is the number of programs; only the ones in a's row block read a given element."
            raise ExerciseFailed(f"your prediction {predicted!r} is not right: {explanation}{hint}")
        print(f"your prediction {predicted}; {explanation}")

    return attempt("Prediction: how often the tiled matmul reads a", check)


# ------------------------------------------------------------------------------- 4. chunk-local prefix sums

CUMSUM_CASES = ((3, 40, 16), (2, 64, 64), (1, 5, 8))   # (rows, T, CHUNK)


def chunk_cumsum_reference(g: torch.Tensor, chunk: int) -> torch.Tensor:
    """Running sums of ``g [rows, T]`` along T that restart at every multiple of ``chunk``."""
    rows, length = g.shape
    padded = torch.nn.functional.pad(g, (0, -length % chunk))
    return padded.view(rows, -1, chunk).cumsum(-1).view(rows, -1)[:, :length]


def check_chunk_cumsum(kernel) -> bool:
    """``kernel(g_ptr, out_ptr, T, CHUNK)`` writes, for contiguous float32 log-gates ``g [rows, T]``, the inclusive
    running sum of each chunk of CHUNK steps, restarting at every chunk, on a ``(cdiv(T, CHUNK), rows)`` grid."""

    def check():
        for rows, length, chunk in CUMSUM_CASES:
            g = -torch.rand(rows, length, generator=_generator(length))
            (g_in,) = _inputs(g)
            buffer, out = _output((rows, length))
            _launch(kernel, (triton.cdiv(length, chunk), rows), g_in, out, length, chunk)
            what = f"the chunk sums of g [{rows}, {length}] (CHUNK={chunk})"
            got = _check_output(buffer, out, what, "Program (c, r) owns steps c*CHUNK ... of row r.")
            expected = chunk_cumsum_reference(g, chunk)
            if torch.allclose(got, expected - g, atol=1e-5):
                raise ExerciseFailed(f"{what}: the sums leave out the step itself (an exclusive scan). G_t includes "
                                     "g_t: the decay up to and including step t.")
            if length > chunk and torch.allclose(got, g.cumsum(1), atol=1e-5):
                raise ExerciseFailed(f"{what}: the sums run on across chunks. Each chunk starts from 0; what came "
                                     "before it is carried by the state, not by G.")
            expect_close(got, expected, what=what, atol=1e-5, hint="tl.cumsum(g_block, axis=0).")

    return attempt("Puzzle 4 (chunk-local prefix sum)", check)


# ------------------------------------------------------------------------------- 5. fused SiLU(gate) * up

SILU_CASES = ((3, 20, 16), (2, 64, 32), (1, 7, 8))   # (rows, D, BLOCK)


def check_silu_mul(kernel) -> bool:
    """``kernel(x_ptr, out_ptr, D, BLOCK)`` reads a contiguous float32 ``x [rows, 2 D]`` whose first D columns are the
    gate and last D the up projection, and writes ``out [rows, D] = SiLU(gate) * up`` on a
    ``(rows, cdiv(D, BLOCK))`` grid."""

    def check():
        for rows, width, block in SILU_CASES:
            x = 6 * torch.randn(rows, 2 * width, generator=_generator(width))
            x[0, 0], x[-1, width - 1] = -100.0, 100.0            # exp(100) is inf in float32; SiLU is not
            (x_in,) = _inputs(x)
            buffer, out = _output((rows, width))
            _launch(kernel, (rows, triton.cdiv(width, block)), x_in, out, width, block)
            what = f"SiLU(gate) * up for x [{rows}, {2 * width}] (BLOCK={block})"
            raw = out.cpu()
            at_extremes = torch.stack([raw[0, 0], raw[-1, width - 1]])
            elsewhere = raw.clone()
            elsewhere[0, 0] = elsewhere[-1, width - 1] = 0.0
            if torch.isnan(at_extremes).any() and torch.isfinite(elsewhere).all():
                raise ExerciseFailed(f"{what}: NaN exactly where the gate is +-100. exp(100) is inf in float32, and "
                                     "e^a / (1 + e^a) is then inf / inf: write sigmoid(a) = 1 / (1 + exp(-a)), or "
                                     "go through exp(-|a|), which never overflows.")
            got = _check_output(buffer, out, what, "Program (r, j) owns columns j*BLOCK ... of row r of out.")
            gate, up = x[:, :width], x[:, width:]
            if torch.allclose(got, torch.nn.functional.silu(up) * gate, atol=1e-4, rtol=1e-4):
                raise ExerciseFailed(f"{what}: gate and up are swapped. The gate is the first half of each row.")
            if torch.allclose(got, torch.nn.functional.silu(gate), atol=1e-4, rtol=1e-4):
                raise ExerciseFailed(f"{what}: that is SiLU(gate) alone; multiply by up.")
            expect_close(got, torch.nn.functional.silu(gate) * up, what=what, atol=1e-4, rtol=1e-4,
                         hint="Row r of x starts at r * 2D, its up half at r * 2D + D; row r of out at r * D. "
                              "SiLU(a) = a sigmoid(a).")

    return attempt("Puzzle 5 (fused SiLU(gate) * up)", check)


# ------------------------------------------------------------------------------- 6. one decode step of the delta rule

DELTA_CASES = (dict(B=2, H=2, K=12, V=20, BK=16, BV=8),   # K and V not powers of two: both masks needed
               dict(B=1, H=3, K=16, V=16, BK=16, BV=16),
               dict(B=1, H=1, K=5, V=3, BK=8, BV=4))


def _delta_inputs(case: dict, seed: int):
    gen = _generator(seed)
    B, H, K, V = case["B"], case["H"], case["K"], case["V"]
    q = torch.randn(B, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, H, K, generator=gen), dim=-1)
    v = torch.randn(B, H, V, generator=gen)
    beta = 0.1 + 0.9 * torch.rand(B, H, generator=gen)
    state = torch.randn(B, H, K, V, generator=gen)
    return q, k, v, beta, state


def check_delta_step(kernel) -> bool:
    """``kernel(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV)`` does one decode step of
    the delta rule for contiguous float32 q, k ``[B, H, K]``, v ``[B, H, V]``, beta ``[B, H]``, state
    ``[B, H, K, V]``, on a ``(cdiv(V, BV), B * H)`` grid; checked against ``delta_rule.step``."""

    def check():
        for seed, case in enumerate(DELTA_CASES):
            q, k, v, beta, state = _delta_inputs(case, seed)
            B, H, K, V, BK, BV = (case[name] for name in ("B", "H", "K", "V", "BK", "BV"))
            scale = K ** -0.5
            ins = _inputs(q, k, v, beta, state)
            o_buffer, o = _output((B, H, V))
            s_buffer, new_state = _output((B, H, K, V))
            _launch(kernel, (triton.cdiv(V, BV), B * H), *ins, o, new_state, scale, K, V, BK, BV)
            shape = f"K={K}, V={V}, BK={BK}, BV={BV}"
            owner = "Program (j, bh) owns value columns j*BV ... of head bh: all K rows of them."
            new_state = _check_output(s_buffer, new_state, f"the new state ({shape})", owner)
            o = _check_output(o_buffer, o, f"the output ({shape})", owner)
            expected_o, expected_state = delta_rule.step(q, k, v, beta, state=state, scale=scale, backend="torch")
            unit_beta = delta_rule.step(q, k, v, torch.ones_like(beta), state=state, scale=scale, backend="torch")
            if torch.allclose(new_state, unit_beta[1], atol=1e-5):
                raise ExerciseFailed(f"the new state ({shape}) is the one for beta = 1: the correction is "
                                     "beta (v - S^T k), written with the head's own beta.")
            expect_close(new_state, expected_state, what=f"the new state ({shape})", atol=1e-5,
                         hint="v' = beta (v - S^T k), S^T k being tl.sum(S * k[:, None], axis=0) (one number per "
                              "value column); then S + k v'^T is S + k[:, None] * v'[None, :].")
            old_read = torch.einsum("bhk,bhkv->bhv", scale * q, state)
            if torch.allclose(o, old_read, atol=1e-5):
                raise ExerciseFailed(f"the output ({shape}) reads the state before the write. The output reads the "
                                     "new state: o = S_new^T (scale q).")
            if torch.allclose(o, expected_o / scale, atol=1e-4):
                raise ExerciseFailed(f"the output ({shape}) lacks the scale: o = S^T (scale * q).")
            expect_close(o, expected_o, what=f"the output ({shape})", atol=1e-5,
                         hint="o = tl.sum(S * (q * scale)[:, None], axis=0), from the new S.")

    return attempt("Puzzle 6 (a delta-rule decode step)", check)


# ------------------------------------------------------------------------------- 7. causal scores of a chunk

SCORES_CASES = (dict(N=2, C=16, K=16, BC=16, BK=16),
                dict(N=3, C=20, K=12, BC=32, BK=16))   # C and K not powers of two
SCORES_GATE = 12.0   # gates down to -12 per step: above the diagonal exp(G_r - G_c) overflows float32


def chunk_scores_reference(q: torch.Tensor, k: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """(q_r . k_c) exp(G_r - G_c) for c <= r, 0 above: q, k ``[N, C, K]``, G ``[N, C]`` -> ``[N, C, C]``."""
    C = q.shape[1]
    causal = torch.ones(C, C, dtype=torch.bool).tril()
    span = torch.where(causal, G[:, :, None] - G[:, None, :], 0.0)
    return torch.where(causal, q @ k.transpose(1, 2) * torch.exp(span), 0.0)


def check_chunk_scores(kernel) -> bool:
    """``kernel(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK)`` writes, for contiguous float32 q, k ``[N, C, K]`` and
    chunk-local gate sums ``G [N, C]``, the causal decayed scores ``out [N, C, C]``, one program per chunk."""

    def check():
        for seed, case in enumerate(SCORES_CASES):
            N, C, K, BC, BK = (case[name] for name in ("N", "C", "K", "BC", "BK"))
            gen = _generator(100 + seed)
            q, k = torch.randn(N, C, K, generator=gen), torch.randn(N, C, K, generator=gen)
            G = (-SCORES_GATE * torch.rand(N, C, generator=gen)).cumsum(1)
            ins = _inputs(q, k, G)
            buffer, out = _output((N, C, C))
            what = f"the scores (C={C}, K={K}, BC={BC}, BK={BK})"
            _launch(kernel, (N,), *ins, out, C, K, BC, BK)
            got = out.cpu()
            upper = ~torch.ones(C, C, dtype=torch.bool).tril()
            if torch.isnan(got[:, upper]).any() and not torch.isnan(got[:, ~upper]).any():
                raise ExerciseFailed(f"{what}: NaN above the diagonal only. There exp(G_r - G_c) is inf, and inf * 0 "
                                     "is NaN: choose with tl.where(causal, ..., 0.0) rather than multiplying by the "
                                     "mask, and keep the span in range (where(causal, span, 0) before tl.exp).")
            got = _check_output(buffer, out, what, "The program of chunk n stores all C x C scores of that chunk.")
            expected = chunk_scores_reference(q, k, G)
            if (got[:, upper] != 0).any():
                raise ExerciseFailed(f"{what}: scores above the diagonal are not 0. Token r sees tokens c <= r only: "
                                     "build causal = rows[:, None] >= cols[None, :].")
            if torch.allclose(got, torch.tril(expected, diagonal=-1), atol=1e-4, rtol=1e-4):
                raise ExerciseFailed(f"{what}: the diagonal is 0. A token sees itself: c <= r, not c < r.")
            _refuse_tf32_products(got, expected, what, exact_below=1e-3)   # rtol 1e-4 of scores up to ~10
            expect_close(got, expected, what=what, atol=1e-4, rtol=1e-4,
                         hint="scores = tl.dot(q, tl.trans(k)), [BC, BC]; decay = exp(G[:, None] - G[None, :]), "
                              "the decay from step c to step r.")

    return attempt("Puzzle 7 (causal scores of a chunk)", check)
