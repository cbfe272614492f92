"""Checkers of chapter 01: right answers pass, wrong ones fail with a targeted hint, stubs are 'not attempted'."""

from __future__ import annotations

import math

import pytest
import torch

from k3lite.course import accounting
from k3lite.exercises import ExerciseFailed, ch01
from k3lite.models.gpt2 import GPT2Config


def _stub(*args):
    raise NotImplementedError


def _attention_right(q, k, v):
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)


def _window_right(q, k, v, window):
    return _attention_right(q, k[:, -window:], v[:, -window:])


@pytest.mark.parametrize("checker", [
    ch01.check_cache_outweighs_prediction, ch01.check_attention_step, ch01.check_window_attention_step,
])
def test_stub_is_not_attempted(checker, capsys):
    assert checker(_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_crossover_is_weights_over_cache_bytes():
    xl = GPT2Config.xl()
    expected = accounting.gpt2_parameter_count(xl) * 2 / accounting.gpt2_kv_bytes_per_token(xl, "bf16")
    assert ch01.cache_outweighs_weights_at(xl) == pytest.approx(expected)


def test_crossover_prediction_range_and_explanations(capsys):
    measured = ch01.cache_outweighs_weights_at(GPT2Config.xl())
    assert ch01.check_cache_outweighs_prediction(lambda: 6 * 1600, measured=measured) is True
    assert "6d + V/(2L)" in capsys.readouterr().out
    assert ch01.check_cache_outweighs_prediction(lambda: measured * 1.25) is True
    with pytest.raises(ExerciseFailed, match="more than 30%"):
        ch01.check_cache_outweighs_prediction(lambda: 1024)  # "about the context length"
    with pytest.raises(ExerciseFailed, match="off by about 2x"):
        ch01.check_cache_outweighs_prediction(lambda: measured * 2)  # a key or a value forgotten
    with pytest.raises(ExerciseFailed, match="not the crossover"):
        ch01.check_cache_outweighs_prediction(lambda: measured, measured=measured * 2)


def test_attention_step_right_and_wrong():
    assert ch01.check_attention_step(_attention_right) is True
    with pytest.raises(ExerciseFailed, match="differ"):
        ch01.check_attention_step(lambda q, k, v: _attention_right(q * math.sqrt(q.shape[-1]), k, v))
    with pytest.raises(ExerciseFailed):
        ch01.check_attention_step(lambda q, k, v: v[:, -1:])
    with pytest.raises(ExerciseFailed, match=r"\[B, 1, H, d_h\]"):
        ch01.check_attention_step(lambda q, k, v: _attention_right(q, k, v).transpose(1, 2))


def test_window_attention_step_right_and_wrong():
    assert ch01.check_window_attention_step(_window_right) is True
    with pytest.raises(ExerciseFailed, match="full attention"):
        ch01.check_window_attention_step(lambda q, k, v, w: _attention_right(q, k, v))
    with pytest.raises(ExerciseFailed, match="oldest"):
        ch01.check_window_attention_step(lambda q, k, v, w: _attention_right(q, k[:, :w], v[:, :w]))
    with pytest.raises(ExerciseFailed, match="one token too few"):
        ch01.check_window_attention_step(lambda q, k, v, w: _window_right(q, k, v, max(w - 1, 1)))
    with pytest.raises(ExerciseFailed, match="output with window=1 "):
        ch01.check_window_attention_step(lambda q, k, v, w: _window_right(q, k, v, w) * 1.01)
