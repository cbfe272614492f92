"""Checkers for chapter 04 (chunking DeltaNet).

1. :func:`check_repeated_key_prediction` — a prediction: the UT transform ``T`` of a chunk that writes one key
   four times.
2. :func:`check_ut_transform` — a transfer: ``T = (I + A)⁻¹`` for the delta rule with a constant decay γ,
   ``S_t = γ (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close

REPEATED_KEY_TOLERANCE = 0.05  # largest accepted distance of one predicted entry from the computed T


def _strict_a(k, beta, decay=1.0):
    """A[r, i] = β_r γ^(r−i) k_r·k_i for i < r (γ = 1: the chapter's A)."""
    positions = torch.arange(k.shape[0], dtype=k.dtype)
    decays = decay ** (positions[:, None] - positions[None, :]).clamp(min=0)
    return torch.tril(beta[:, None] * decays * (k @ k.T), diagonal=-1)


def _inverse(a):
    identity = torch.eye(a.shape[0], dtype=a.dtype)
    return torch.linalg.solve_triangular(identity + a, identity, upper=False)


def repeated_key_t(chunk_size: int = 4) -> torch.Tensor:
    """T of a chunk in which every token writes the same unit key with β = 1."""
    k = torch.zeros(chunk_size, 3, dtype=torch.float64)
    k[:, 0] = 1.0
    return _inverse(_strict_a(k, torch.ones(chunk_size, dtype=torch.float64)))


def check_repeated_key_prediction(predict, measured=None) -> bool:
    """``predict() -> 4 x 4 nested list (or tensor)``: T for a chunk of 4 tokens that all write one unit key with
    β = 1. Accepted when every entry is within ``REPEATED_KEY_TOLERANCE`` of the computed T."""

    def check():
        predicted = torch.as_tensor(predict(), dtype=torch.float64)
        expected = repeated_key_t()
        if measured is not None and not torch.allclose(torch.as_tensor(measured, dtype=torch.float64), expected,
                                                       atol=1e-9):
            raise ExerciseFailed("the measured T is not the one of four identical unit keys at β = 1: build A from "
                                 "those keys and solve (I + A) T = I.")
        if predicted.shape != expected.shape:
            raise ExerciseFailed(f"predict a {tuple(expected.shape)} matrix (one row and column per token), got "
                                 f"{tuple(predicted.shape)}.")
        explanation = ("T = I with −1 just below the diagonal, zero further down. The state already returns "
                       "v_(r−1) for the key, so token r writes only u_r = v_r − v_(r−1): what changed since the "
                       "previous token. The terms of T = I − A + A² − … cancel beyond the first subdiagonal.")
        if (predicted - expected).abs().max() > REPEATED_KEY_TOLERANCE:
            hint = ""
            identity = torch.eye(4, dtype=torch.float64)
            if torch.allclose(predicted, identity, atol=REPEATED_KEY_TOLERANCE):
                hint = " A is not zero: identical keys overlap completely, k_r·k_i = 1."
            elif torch.allclose(predicted, identity - torch.ones(4, 4, dtype=torch.float64).tril(-1),
                                atol=REPEATED_KEY_TOLERANCE):
                hint = (" You wrote I − A, the first two terms of the series; A is not small here, so solve row by "
                        "row: T_r = e_r − Σ_(i<r) A_ri T_i.")
            raise ExerciseFailed(f"your T differs from the computed one by up to "
                                 f"{(predicted - expected).abs().max().item():.2f}: {explanation}{hint}")
        print(f"your prediction is within {REPEATED_KEY_TOLERANCE} everywhere. {explanation}")

    return attempt("Prediction: T for one key written four times", check)


def _decayed_case(seed: int, chunk: int = 6, key_dim: int = 4):
    generator = torch.Generator().manual_seed(seed)
    k = torch.randn(chunk, key_dim, generator=generator, dtype=torch.float64)
    k = k / k.norm(dim=-1, keepdim=True)
    beta = torch.rand(chunk, generator=generator, dtype=torch.float64)
    return k, beta


def _close(got, expected) -> bool:
    got = torch.as_tensor(got, dtype=torch.float64)
    return got.shape == expected.shape and torch.allclose(got, expected, atol=1e-8)


def check_ut_transform(ut_transform) -> bool:
    """``ut_transform(k [C,K], beta [C], decay) -> T [C,C]``: the UT transform of one chunk for the delta rule
    with a constant decay ``decay`` = γ in (0, 1], ``S_t = γ (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ``, such
    that ``T Diag(β) V`` are the corrections the chunk's tokens write when it starts from a zero state."""

    def check():
        for seed, decay in ((0, 1.0), (1, 0.8), (2, 0.5)):
            k, beta = _decayed_case(seed)
            got = ut_transform(k, beta, decay)
            expected = _inverse(_strict_a(k, beta, decay))
            if _close(got, expected):
                continue
            identity = torch.eye(k.shape[0], dtype=k.dtype)
            if _close(got, identity + _strict_a(k, beta, decay)):
                raise ExerciseFailed("you returned I + A itself; T is its inverse (forward substitution).")
            if decay != 1.0 and _close(got, _inverse(_strict_a(k, beta))):
                raise ExerciseFailed(f"decay={decay} had no effect: between token i's write and token r's read the "
                                     "state is multiplied by γ several times, which weakens what r reads of i.")
            shifted = _inverse(torch.tril(_strict_a(k, beta, decay) / decay, diagonal=-1))
            if decay != 1.0 and _close(got, shifted):
                raise ExerciseFailed("one factor γ too few: token r reads γ S_(r−1), so token i's write reaches it "
                                     "through γ^(r−i), not γ^(r−i−1).")
            if decay != 1.0 and _close(got, _inverse(_strict_a(k, beta, 1 / decay))):
                raise ExerciseFailed("the decay grows with the distance instead of shrinking: use γ^(r−i) with "
                                     "r > i, the later token's index first.")
            if _close(got, _inverse(_strict_a(k, torch.ones_like(beta), decay))):
                raise ExerciseFailed("β is missing: row r of A is β_r times the decayed dot products.")
            expect_close(got, expected, what=f"T with decay={decay}", atol=1e-8,
                         hint="Write u_r = β_r (v_r − γ S_(r−1)ᵀ k_r) with S_(r−1) the start state decayed plus the "
                              "chunk's earlier writes, each decayed since it was made; collect the u_i terms.")

    return attempt("Transfer: the UT transform with a decay", check)
