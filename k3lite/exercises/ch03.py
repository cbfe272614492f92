"""Checkers for chapter 03 (DeltaNet as fast weights).

1. :func:`check_overwrite_prediction` — a prediction: what a key reads after two half-strength writes.
2. :func:`check_residual_factor` — how much of the retrieval error one write leaves behind.
3. :func:`check_decayed_delta_write` — a transfer: one gradient step on the fast weights with weight decay.
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


OVERWRITE_TOLERANCE = 0.05  # accepted: within this distance of the error averaged over random values


def overwrite_error(beta: float = 0.5, dim: int = 64, trials: int = 400, seed: int = 0) -> float:
    """Mean relative error ‖Sᵀk − v_new‖ / ‖v_new‖ after writing (k, v_old) then (k, v_new) with the delta
    rule at strength ``beta`` into an empty state: one random unit key, random Gaussian values."""
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(trials):
        k = torch.randn(dim, generator=generator, dtype=torch.float64)
        k = k / k.norm()
        v_old, v_new = torch.randn(2, dim, generator=generator, dtype=torch.float64)
        state = torch.zeros(dim, dim, dtype=torch.float64)
        for value in (v_old, v_new):
            state = _delta_write_reference(state, k, value, beta)
        total += ((state.T @ k - v_new).norm() / v_new.norm()).item()
    return total / trials


def check_overwrite_prediction(predict, measured: float | None = None) -> bool:
    """``predict() -> float``: the relative error of reading v_new after writing (k, v_old) then (k, v_new) with
    β = 0.5 into an empty state. Accepted within ``OVERWRITE_TOLERANCE`` of the error averaged over random
    values; ``measured`` (one draw, the notebook's) must be near it."""

    def check():
        predicted = float(predict())
        expected = overwrite_error()
        if measured is not None and abs(measured - expected) > 0.15:
            raise ExerciseFailed(f"the measured {measured:.3f} is far from {expected:.3f}: write v_old then v_new "
                                 "under the same unit key with β = 0.5, starting from zeros.")
        explanation = (f"averaged over random values: {expected:.3f}. The first write stores half of v_old; the "
                       "second writes half of the difference v_new − ½v_old, so the key reads ½v_new + ¼v_old. "
                       "For unrelated values of equal size that is off by √(½² + ¼²) ≈ 0.56: a write at β < 1 "
                       "only goes part of the way, and what it leaves of the old value stays.")
        if abs(predicted - expected) > OVERWRITE_TOLERANCE:
            hint = ""
            if abs(predicted) < 0.05:
                hint = " Zero would need β = 1: a half-strength write only goes half-way."
            elif abs(predicted - 0.5) < 0.02:
                hint = " Close: besides half of v_new missing, a quarter of v_old is still there."
            raise ExerciseFailed(f"your prediction {predicted:.3f} is more than {OVERWRITE_TOLERANCE} away: "
                                 f"{explanation}{hint}")
        print(f"your prediction {predicted:.3f}; {explanation}")

    return attempt("Prediction: overwriting at half strength", check)


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


def _decayed_reference(state, k, v, beta, weight_decay):
    return (1.0 - beta * weight_decay) * state + beta * torch.outer(k, v - state.T @ k)


def check_decayed_delta_write(decayed_delta_write) -> bool:
    """``decayed_delta_write(state [K,V], k [K], v [V], beta, weight_decay) -> new state [K,V]``: one step of
    gradient descent with learning rate ``beta`` on ½‖Sᵀk − v‖² + (weight_decay / 2)‖S‖²."""

    def check():
        for seed, beta, weight_decay in ((4, 0.5, 0.2), (5, 1.0, 0.1), (6, 0.3, 0.0)):
            state, k, v = _random_case(seed)
            got = decayed_delta_write(state.clone(), k, v, beta, weight_decay)
            expected = _decayed_reference(state, k, v, beta, weight_decay)
            if weight_decay and _matches(got, _delta_write_reference(state, k, v, beta)):
                raise ExerciseFailed(f"weight_decay={weight_decay} had no effect: the gradient of "
                                     "(λ/2)‖S‖² is λS, and the step subtracts β times it.")
            if weight_decay and beta != 1.0 and _matches(
                    got, (1.0 - weight_decay) * state + beta * torch.outer(k, v - state.T @ k)):
                raise ExerciseFailed("the decay is a gradient term too, so the learning rate β scales it: "
                                     "S shrinks by 1 − βλ, not 1 − λ.")
            if weight_decay and _matches(got, _decayed_reference(state, k, v, beta, -weight_decay)):
                raise ExerciseFailed("the sign is flipped: weight decay shrinks S.")
            decayed = (1.0 - beta * weight_decay) * state
            if weight_decay and _matches(got, decayed + beta * torch.outer(k, v - decayed.T @ k)):
                raise ExerciseFailed("you decayed S before reading it. That is the order Gated DeltaNet uses "
                                     "(chapter 05), but one gradient step evaluates both terms of the gradient at "
                                     "the old S.")
            expect_close(got, expected, what=f"state after a step with beta={beta}, weight_decay={weight_decay}",
                         atol=1e-8, hint="Add λS to the gradient of ½‖Sᵀk − v‖², then take one step of size β.")

    return attempt("Transfer: the delta rule with weight decay", check)
