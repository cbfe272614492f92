"""Checkers for chapter 03 (DeltaNet as fast weights).

1. :func:`check_delta_write` — one write of the delta rule into a ``[K, V]`` state.
2. :func:`check_residual_factor` — how much of the retrieval error one write leaves behind.
3. :func:`check_fast_weight_gradient` — the delta rule as one gradient step on ½‖Sᵀk − v‖².
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close


def _delta_write_reference(state, k, v, beta):
    return state + beta * torch.outer(k, v - state.T @ k)


def _random_case(seed: int, key_dim: int = 5, value_dim: int = 3):
    generator = torch.Generator().manual_seed(seed)
    state = torch.randn(key_dim, value_dim, generator=generator, dtype=torch.float64)
    k = torch.randn(key_dim, generator=generator, dtype=torch.float64)
    k = k / k.norm()
    v = torch.randn(value_dim, generator=generator, dtype=torch.float64)
    return state, k, v


def _matches(got, expected) -> bool:
    got = torch.as_tensor(got, dtype=torch.float64)
    return got.shape == expected.shape and torch.allclose(got, expected, atol=1e-8)


def check_delta_write(delta_write) -> bool:
    """``delta_write(state [K,V], k [K], v [V], beta) -> new state [K,V]``."""

    def check():
        for seed, beta in ((0, 1.0), (1, 0.5), (2, 0.1)):
            state, k, v = _random_case(seed)
            got = delta_write(state.clone(), k, v, beta)
            if _matches(got, state + beta * torch.outer(k, v)):
                raise ExerciseFailed("that is the additive (linear attention) write: the delta rule first "
                                     "reads what k currently returns, Sᵀk, and writes only the difference.")
            if _matches(got, state + torch.outer(k, v - state.T @ k)) and beta != 1.0:
                raise ExerciseFailed(f"beta={beta} had no effect: the correction is scaled by beta.")
            expect_close(got, _delta_write_reference(state, k, v, beta), what=f"state after a write with beta={beta}",
                         atol=1e-8, hint="S_new = S + beta · k (v − Sᵀk)ᵀ, an outer product of shape [K, V].")

    return attempt("Exercise 1 (delta write)", check)


def check_residual_factor(residual_factor) -> bool:
    """``residual_factor(beta, key_norm_sq) -> float``: (v − S_newᵀk) = factor · (v − S_oldᵀk)."""

    def check():
        for beta, key_norm_sq in ((1.0, 1.0), (0.5, 1.0), (0.5, 3.0), (1.5, 1.0), (0.25, 0.2)):
            got = float(residual_factor(beta, key_norm_sq))
            expected = 1.0 - beta * key_norm_sq
            if key_norm_sq != 1.0 and abs(got - (1.0 - beta)) < 1e-9:
                raise ExerciseFailed(f"for key_norm_sq={key_norm_sq} the key is not a unit vector: reading it back "
                                     "after the write returns ‖k‖² times what was written.")
            if abs(got - expected) > 1e-9:
                raise ExerciseFailed(f"residual_factor({beta}, {key_norm_sq}) = {got:.4g} is not right. Write "
                                     "S_newᵀk with the update rule and collect the terms in (v − S_oldᵀk).")

    return attempt("Exercise 2 (residual factor)", check)


def check_fast_weight_gradient(fast_weight_gradient) -> bool:
    """``fast_weight_gradient(state [K,V], k [K], v [V]) -> dL/dS [K,V]`` for L = ½‖Sᵀk − v‖²."""

    def check():
        state, k, v = _random_case(4)
        got = fast_weight_gradient(state.clone(), k, v)
        expected = torch.outer(k, state.T @ k - v)
        if _matches(got, -expected):
            raise ExerciseFailed("the sign is flipped: the loss grows when Sᵀk moves away from v, so the "
                                 "gradient points along Sᵀk − v.")
        expect_close(got, expected, what="gradient of ½‖Sᵀk − v‖² with respect to S", atol=1e-8,
                     hint="Differentiate ½‖Sᵀk − v‖² by the chain rule (or check it with torch.autograd): "
                          "the result is an outer product of shape [K, V].")

    return attempt("Exercise 3 (fast-weight gradient)", check)
