"""Checkers of chapters 05 and 06: a right answer passes, each typical wrong one raises ExerciseFailed with a hint."""

from __future__ import annotations

import math

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch05, ch06


def not_attempted(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------- chapter 05

def gated_delta_step(S, k, v, g, beta):
    S = math.exp(g) * S
    return S + beta * torch.outer(k, v - S.T @ k)


def decay_after_writing(S, k, v, g, beta):
    return math.exp(g) * (S + beta * torch.outer(k, v - S.T @ k))


def error_against_undecayed_state(S, k, v, g, beta):
    return math.exp(g) * S + beta * torch.outer(k, v - S.T @ k)


def gate_not_exponentiated(S, k, v, g, beta):
    S = g * S
    return S + beta * torch.outer(k, v - S.T @ k)


def cumulative_decay(g):
    G = torch.cumsum(g, dim=0)
    lower = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp((G[:, None] - G[None, :]).masked_fill(~lower, float("-inf")))


def decay_including_the_write_step(g):
    return cumulative_decay(g) * torch.exp(g)[None, :]


def decay_without_mask(g):
    G = torch.cumsum(g, dim=0)
    return torch.exp(G[:, None] - G[None, :])


def decay_from_separate_exponentials(g):
    G = torch.cumsum(g, dim=0)
    return torch.tril(torch.exp(G)[:, None] * torch.exp(-G)[None, :])


def test_ch05_step_accepts_the_solution(capsys):
    assert ch05.check_gated_delta_step(gated_delta_step) is True
    assert "correct" in capsys.readouterr().out


def test_ch05_step_not_attempted(capsys):
    assert ch05.check_gated_delta_step(not_attempted) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (decay_after_writing, "decay after writing"),
    (error_against_undecayed_state, "decayed memory"),
    (gate_not_exponentiated, "exp"),
])
def test_ch05_step_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch05.check_gated_delta_step(wrong)


def test_ch05_decay_accepts_the_solution():
    assert ch05.check_cumulative_decay(cumulative_decay) is True


@pytest.mark.parametrize("wrong, hint", [
    (decay_including_the_write_step, "writing step"),
    (decay_without_mask, "inf or nan|above the diagonal"),
    (decay_from_separate_exponentials, "inf or nan"),
    (lambda g: cumulative_decay(g)[:-1], "expected a"),
])
def test_ch05_decay_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch05.check_cumulative_decay(wrong)


def gated_delta_chunk(q, k, v, g, beta, state, *, split_gamma=False, undecayed_writes=False,
                      ungated_a=False, undecayed_read=False):
    """One chunk in the WY/UT form; each keyword switches on one typical mistake."""
    G = torch.cumsum(g, dim=0)
    gamma = torch.tril(torch.exp(G)[:, None] * torch.exp(-G)[None, :]) if split_gamma else cumulative_decay(g)
    eye = torch.eye(len(g), dtype=q.dtype)
    a = torch.tril(beta[:, None] * (k @ k.T) * (1.0 if ungated_a else gamma), diagonal=-1)
    ut = torch.linalg.solve_triangular(eye + a, eye, upper=False, unitriangular=True)
    corrected = ut @ (beta[:, None] * v) - ut @ (beta[:, None] * torch.exp(G)[:, None] * k) @ state
    o = (1.0 if undecayed_read else torch.exp(G)[:, None]) * (q @ state) + ((q @ k.T) * gamma) @ corrected
    to_end = 1.0 if undecayed_writes else torch.exp(G[-1] - G)[:, None]
    return o, torch.exp(G[-1]) * state + (to_end * k).T @ corrected


def test_ch05_chunk_accepts_the_solution(capsys):
    assert ch05.check_gated_delta_chunk(gated_delta_chunk) is True
    assert "correct" in capsys.readouterr().out


def test_ch05_chunk_not_attempted():
    assert ch05.check_gated_delta_chunk(not_attempted) is False


@pytest.mark.parametrize("mistake, hint", [
    ("split_gamma", "inf or nan"),
    ("undecayed_writes", "undecayed"),
    ("ungated_a", "state after the chunk"),
    ("undecayed_read", "outputs of the chunk"),
])
def test_ch05_chunk_rejects_wrong_answers(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch05.check_gated_delta_chunk(lambda *args: gated_delta_chunk(*args, **{mistake: True}))


# ---------------------------------------------------------------- chapter 06

def kda_step(S, k, v, g, beta):
    S = torch.exp(g)[:, None] * S
    return S + beta * torch.outer(k, v - S.T @ k)


def kda_step_scalar_decay(S, k, v, g, beta):
    S = torch.exp(g.mean()) * S
    return S + beta * torch.outer(k, v - S.T @ k)


def kda_step_columns(S, k, v, g, beta):
    S = S * torch.exp(g)[None, :] if S.shape[0] == S.shape[1] else S * torch.exp(g).mean()
    return S + beta * torch.outer(k, v - S.T @ k)


def kda_step_decay_last(S, k, v, g, beta):
    return torch.exp(g)[:, None] * (S + beta * torch.outer(k, v - S.T @ k))


def kda_step_transposed(S, k, v, g, beta):
    return kda_step(S, k, v, g, beta).T


def test_ch06_step_accepts_the_solution(capsys):
    assert ch06.check_kda_step(kda_step) is True
    assert "correct" in capsys.readouterr().out


def test_ch06_step_not_attempted():
    assert ch06.check_kda_step(not_attempted) is False


@pytest.mark.parametrize("wrong, hint", [
    (kda_step_scalar_decay, "Gated DeltaNet"),
    (kda_step_columns, "columns|values differ"),
    (kda_step_decay_last, "decay after writing"),
    (kda_step_transposed, "shape"),
])
def test_ch06_step_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch06.check_kda_step(wrong)


def two_timescale_gate(num_steps, num_channels, switch_steps, long_channels):
    g = torch.zeros(num_steps, num_channels)
    fast = [d for d in range(num_channels) if d not in set(long_channels)]
    for step in switch_steps:
        g[step, fast] = float("-inf")            # -inf is allowed: the checker floors it
    return g


def wipe_everything_at_switches(num_steps, num_channels, switch_steps, long_channels):
    g = torch.zeros(num_steps, num_channels)
    g[switch_steps] = -30.0
    return g


def test_ch06_gate_accepts_a_per_channel_wipe():
    assert ch06.check_two_timescale_gate(two_timescale_gate) is True


@pytest.mark.parametrize("wrong, hint", [
    (lambda T, K, s, lc: torch.zeros(T, K), "not below the best scalar"),
    (wipe_everything_at_switches, "decays\\s+some long channels"),
    (lambda T, K, s, lc: torch.zeros(K, T), "shape"),
    (lambda T, K, s, lc: torch.full((T, K), 0.1), "<= 0"),
])
def test_ch06_gate_rejects_wrong_answers(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch06.check_two_timescale_gate(wrong)


def test_ch06_task_matches_the_chapter_numbers():
    """The checker's task is the chapter's: best scalar alpha = 1, and the per-channel wipe beats it."""
    num_steps, long_channels, switch_steps = ch06.task_layout()
    keys, values = ch06.task_sequences(**ch06.TASK)
    scalars = ch06.task_errors(ch06.scalar_gates(num_steps, 32, switch_steps, torch.linspace(0, 1, 11)), keys, values)
    assert scalars.argmin().item() == 10
    wipe = two_timescale_gate(num_steps, 32, switch_steps, long_channels).clamp_min(-30.0)
    assert ch06.task_errors(wipe[None], keys, values).item() < scalars.min().item() - 0.03
