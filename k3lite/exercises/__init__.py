"""Checkers for the chapters' exercises: one module per chapter (``k3lite.exercises.ch01`` ...).

Every checker follows one contract, so a learner meets the same behaviour in every chapter:

* the attempt still raises ``NotImplementedError`` -> it prints "not attempted yet" and returns False;
* the attempt is wrong -> it raises :class:`ExerciseFailed` whose message says what is wrong (a hint);
* the attempt is right -> it prints "correct" and returns True.
"""

from __future__ import annotations

from typing import Callable

import torch


class ExerciseFailed(AssertionError):
    """A wrong answer; the message is a hint, not the solution."""


def attempt(name: str, check: Callable[[], None]) -> bool:
    """Run ``check`` (which calls the learner's code and raises on a wrong result) under the contract."""
    try:
        check()
    except NotImplementedError:
        print(f"{name}: not attempted yet. Replace the `raise NotImplementedError` and run this cell again.")
        return False
    print(f"{name}: correct.")
    return True


def expect_close(got, expected, *, what: str, atol: float = 1e-5, rtol: float = 1e-4, hint: str = "") -> None:
    """Raise :class:`ExerciseFailed` unless ``got`` matches ``expected`` in shape and value."""
    got_t = torch.as_tensor(got, dtype=torch.float64)
    expected_t = torch.as_tensor(expected, dtype=torch.float64)
    if got_t.shape != expected_t.shape:
        raise ExerciseFailed(
            f"{what}: expected shape {tuple(expected_t.shape)}, got {tuple(got_t.shape)}. {hint}".strip())
    if not torch.allclose(got_t, expected_t, atol=atol, rtol=rtol):
        worst = (got_t - expected_t).abs().max().item()
        raise ExerciseFailed(f"{what}: values differ (max |difference| {worst:.3g}). {hint}".strip())


def expect_equal(got, expected, *, what: str, hint: str = "") -> None:
    """Raise :class:`ExerciseFailed` unless ``got == expected`` (for counts and exact integers)."""
    if got != expected:
        raise ExerciseFailed(f"{what}: got {got!r}, which is not right. {hint}".strip())
