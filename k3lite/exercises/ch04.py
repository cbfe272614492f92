"""Checkers for chapter 04 (chunking DeltaNet).

1. :func:`check_ut_transform` — ``T = (I + A)⁻¹`` with ``A = StrictTril(Diag(β) K Kᵀ)``.
2. :func:`check_delta_chunk` — one chunk of DeltaNet in the WY/UT form, from a given state.
3. :func:`check_chunk_flops` — the two parts of the cost of chunking, ``4Ld²`` and ``4LCd`` FLOPs.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal


def _strict_a(k, beta):
    return torch.tril(beta[:, None] * (k @ k.T), diagonal=-1)


def _ut_reference(k, beta):
    identity = torch.eye(k.shape[0], dtype=k.dtype)
    return torch.linalg.solve_triangular(identity + _strict_a(k, beta), identity, upper=False)


def _chunk_case(seed: int, chunk: int = 6, key_dim: int = 4, value_dim: int = 3):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(chunk, key_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(chunk, key_dim, generator=generator, dtype=torch.float64)
    k = k / k.norm(dim=-1, keepdim=True)
    v = torch.randn(chunk, value_dim, generator=generator, dtype=torch.float64)
    beta = torch.rand(chunk, generator=generator, dtype=torch.float64)
    state = torch.randn(key_dim, value_dim, generator=generator, dtype=torch.float64)
    return q, k, v, beta, state


def _close(got, expected) -> bool:
    got = torch.as_tensor(got, dtype=torch.float64)
    return got.shape == expected.shape and torch.allclose(got, expected, atol=1e-8)


def check_ut_transform(ut_transform) -> bool:
    """``ut_transform(k [C,K], beta [C]) -> T [C,C]``."""

    def check():
        _, k, _, beta, _ = _chunk_case(0)
        got = ut_transform(k, beta)
        identity = torch.eye(k.shape[0], dtype=k.dtype)
        if _close(got, identity + _strict_a(k, beta)):
            raise ExerciseFailed("you returned I + A itself; T is its inverse (solve it by forward substitution).")
        with_diagonal = torch.tril(beta[:, None] * (k @ k.T))
        if _close(got, torch.linalg.inv(identity + with_diagonal)):
            raise ExerciseFailed("A must be strictly lower triangular: drop the diagonal of Diag(β) K Kᵀ.")
        if _close(got, _ut_reference(k, torch.ones_like(beta))):
            raise ExerciseFailed("β is missing: row r of A is β_r times the dot products k_r·k_i.")
        if _close(got, torch.linalg.inv(identity + torch.tril(k @ k.T * beta[None, :], diagonal=-1))):
            raise ExerciseFailed("β scales the rows of A (β_r of the later token r), not its columns.")
        expect_close(got, _ut_reference(k, beta), what="T = (I + A)⁻¹", atol=1e-8,
                     hint="A = StrictTril(Diag(β) K Kᵀ); T is lower triangular with ones on its diagonal.")

    return attempt("Exercise 1 (UT transform)", check)


def _delta_chunk_reference(q, k, v, beta, state):
    outputs = []
    for t in range(q.shape[0]):
        state = state + beta[t] * torch.outer(k[t], v[t] - state.T @ k[t])
        outputs.append(state.T @ q[t])
    return torch.stack(outputs), state


def check_delta_chunk(delta_chunk) -> bool:
    """``delta_chunk(q [C,K], k [C,K], v [C,V], beta [C], state [K,V]) -> (o [C,V], new state [K,V])``.

    No scale on q here: ``o_t = S_tᵀ q_t`` exactly as in the token-by-token recurrence.
    """

    def check():
        for seed in (1, 2):
            q, k, v, beta, state = _chunk_case(seed)
            expected_o, expected_state = _delta_chunk_reference(q, k, v, beta, state)
            got_o, got_state = delta_chunk(q, k, v, beta, state.clone())
            zero_state_o, _ = _delta_chunk_reference(q, k, v, beta, torch.zeros_like(state))
            if _close(got_o, zero_state_o) and not _close(got_o, expected_o):
                raise ExerciseFailed("the output ignores the incoming state: the new values are V' = U − W S, "
                                     "and the read adds Q S.")
            expect_close(got_state, expected_state, what="state after the chunk", atol=1e-8,
                         hint="S_new = S + Kᵀ V' with V' = U − W S, W = T Diag(β) K, U = T Diag(β) V.")
            expect_close(got_o, expected_o, what="outputs of the chunk", atol=1e-8,
                         hint="O = Q S + (Q Kᵀ ⊙ M) V' with M the causal mask including the diagonal.")

    return attempt("Exercise 2 (one chunk of DeltaNet)", check)


def check_chunk_flops(chunk_flops) -> bool:
    """``chunk_flops(seq_len, chunk_size, head_dim) -> (state_flops, intra_chunk_flops)`` per head."""

    def check():
        for seq_len, chunk_size, head_dim in ((1024, 64, 128), (4096, 1, 64), (256, 256, 32), (512, 128, 128)):
            got = tuple(int(x) for x in chunk_flops(seq_len, chunk_size, head_dim))
            state, intra = 4 * seq_len * head_dim ** 2, 4 * seq_len * chunk_size * head_dim
            if got == (intra, state) and got != (state, intra):
                raise ExerciseFailed("the two numbers are swapped: the state part does not depend on C.")
            if got == (state // 2, intra // 2):
                raise ExerciseFailed("half the answer: those are multiply-adds (the article's 2Ld² and 2LCd); "
                                     "count 2 FLOPs per multiply-add.")
            expect_equal(got, (state, intra), what=f"chunk_flops({seq_len}, {chunk_size}, {head_dim})",
                         hint="Per token: Q S and Kᵀ V each cost 2d² FLOPs; per chunk: Q Kᵀ and scores V each cost "
                              "2C²d FLOPs, and there are L/C chunks.")

    return attempt("Exercise 3 (FLOP split)", check)
