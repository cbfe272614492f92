"""Checkers of chapters 05 and 06: a right answer passes, each typical wrong one raises ExerciseFailed with a hint."""

from __future__ import annotations

import math

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch05, ch06


def not_attempted(*args, **kwargs):
    raise NotImplementedError


# ---------------------------------------------------------------- chapter 05

def measured_half_life(decay):
    """The chapter's measurement in closed form: the first t with decay**t < 1/2."""
    return next(t for t in range(1000) if decay ** t < 0.5)


def test_ch05_half_life_accepts_a_reasoned_prediction(capsys):
    measured = measured_half_life(0.95)
    assert ch05.check_half_life_prediction(lambda: math.log(2) / -math.log(0.95), measured, decay=0.95) is True
    out = capsys.readouterr().out
    assert "correct" in out and "ln 2" in out


def test_ch05_half_life_not_attempted(capsys):
    assert ch05.check_half_life_prediction(not_attempted, measured_half_life(0.95), decay=0.95) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("prediction, hint", [
    (3, "fades too fast"),                      # the writes in between taken for erasures
    (20, "1/e"),                                # 1 / (1 - alpha), the e-folding time
    (60, "lasts too long"),
    ("soon", "one number"),
])
def test_ch05_half_life_rejects_wrong_predictions(prediction, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch05.check_half_life_prediction(lambda: prediction, measured_half_life(0.95), decay=0.95)


def cumulative_decay(g):
    G = torch.cumsum(g, dim=0)
    lower = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp((G[:, None] - G[None, :]).masked_fill(~lower, float("-inf")))


def gated_linear_chunk(q, k, v, g, state, *, split_gamma=False, strict_mask=False, undecayed_writes=False,
                       undecayed_read=False, delta_correction=False):
    """One chunk of gated linear attention; each keyword switches on one typical mistake."""
    G = torch.cumsum(g, dim=0)
    gamma = torch.tril(torch.exp(G)[:, None] * torch.exp(-G)[None, :]) if split_gamma else cumulative_decay(g)
    if strict_mask:
        gamma = torch.tril(gamma, diagonal=-1)
    if delta_correction:                         # section 6's UT transform carried over where it has no place
        eye = torch.eye(len(g), dtype=q.dtype)
        v = torch.linalg.solve_triangular(eye + torch.tril((k @ k.T) * gamma, -1), v, upper=False)
    o = (1.0 if undecayed_read else torch.exp(G)[:, None]) * (q @ state) + ((q @ k.T) * gamma) @ v
    to_end = 1.0 if undecayed_writes else torch.exp(G[-1] - G)[:, None]
    return o, torch.exp(G[-1]) * state + (to_end * k).T @ v


def test_ch05_linear_chunk_accepts_the_solution(capsys):
    assert ch05.check_gated_linear_chunk(gated_linear_chunk) is True
    assert "correct" in capsys.readouterr().out


def test_ch05_linear_chunk_not_attempted():
    assert ch05.check_gated_linear_chunk(not_attempted) is False


@pytest.mark.parametrize("mistake, hint", [
    ("split_gamma", "inf or nan"),
    ("strict_mask", "reads its own write"),
    ("undecayed_writes", "reaches the end of the chunk"),
    ("undecayed_read", "starts from has decayed"),
    ("delta_correction", "no UT transform"),
])
def test_ch05_linear_chunk_rejects_wrong_answers(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch05.check_gated_linear_chunk(lambda *args: gated_linear_chunk(*args, **{mistake: True}))


# ---------------------------------------------------------------- chapter 06

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


def test_ch06_readback_accepts_a_reasoned_prediction(capsys):
    measured = 0.5 + 0.5 * 0.5 ** 10
    assert ch06.check_readback_prediction(lambda: 0.5, measured, kept_decay=1.0, fast_decay=0.5, steps=10) is True
    assert "correct" in capsys.readouterr().out


def test_ch06_readback_not_attempted(capsys):
    assert ch06.check_readback_prediction(not_attempted, 0.5, kept_decay=1.0, fast_decay=0.5, steps=10) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("prediction, hint", [
    (0.75 ** 10, "averaged the gates"),         # one scalar gate, the mean of the two
    (0.5 ** 10, "slow channels keep their half"),
    (1.0, "fast channels forget their half"),
    ("half", "one number"),
])
def test_ch06_readback_rejects_wrong_predictions(prediction, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch06.check_readback_prediction(lambda: prediction, 0.5 + 0.5 * 0.5 ** 10, kept_decay=1.0, fast_decay=0.5,
                                       steps=10)


def gla_chunk(q, k, v, g, *, split=False, strict=False, scalar=False):
    """Gated linear attention over one chunk; each keyword switches on one typical mistake."""
    if scalar:
        g = g.mean(-1, keepdim=True).expand_as(g)
    G = torch.cumsum(g, dim=0)
    later = torch.ones(len(g), len(g), dtype=torch.bool).triu(0 if strict else 1)
    if split:
        pair_decay = torch.exp(G)[:, None, :] * torch.exp(-G)[None, :, :] * (~later)[:, :, None]
    else:
        pair_decay = torch.exp((G[:, None, :] - G[None, :, :]).masked_fill(later[:, :, None], -math.inf))
    return torch.einsum("rd,id,rid->ri", q, k, pair_decay) @ v


def test_ch06_gla_accepts_the_solution(capsys):
    assert ch06.check_gla_chunk(gla_chunk) is True
    assert "correct" in capsys.readouterr().out


def test_ch06_gla_not_attempted():
    assert ch06.check_gla_chunk(not_attempted) is False


@pytest.mark.parametrize("mistake, hint", [
    ("split", "inf or nan"),
    ("strict", "reads its own write"),
    ("scalar", "every channel decayed alike"),
])
def test_ch06_gla_rejects_wrong_answers(mistake, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch06.check_gla_chunk(lambda *args: gla_chunk(*args, **{mistake: True}))
