"""Checkers of chapters 00 and 01: right answers pass, wrong ones fail with a hint, stubs are 'not attempted'."""

from __future__ import annotations

import math

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch00, ch01


def _stub(*args):
    raise NotImplementedError


def _kv_right(config, element_size):
    return 2 * config.n_layer * config.n_head * (config.n_embd // config.n_head) * element_size


def _attention_right(q, k, v):
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)


@pytest.mark.parametrize("checker", [
    ch01.check_kv_bytes_per_token, ch01.check_block_parameters, ch01.check_attention_step,
    ch00.check_lineage, ch00.check_implied_gpt2_count,
])
def test_stub_is_not_attempted(checker, capsys):
    assert checker(_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


def test_kv_bytes_right_and_wrong():
    assert ch01.check_kv_bytes_per_token(_kv_right) is True
    with pytest.raises(ExerciseFailed, match="key AND a value"):
        ch01.check_kv_bytes_per_token(lambda c, b: _kv_right(c, b) // 2)
    with pytest.raises(ExerciseFailed, match="bytes_per_element"):
        ch01.check_kv_bytes_per_token(lambda c, b: _kv_right(c, b) // b)
    with pytest.raises(ExerciseFailed, match="layer"):
        ch01.check_kv_bytes_per_token(lambda c, b: _kv_right(c, b) // c.n_layer)
    with pytest.raises(ExerciseFailed):
        ch01.check_kv_bytes_per_token(lambda c, b: 2 * c.n_layer * c.n_embd * b + 1)


def test_block_parameters_right_and_wrong():
    assert ch01.check_block_parameters(lambda d: 12 * d * d + 13 * d) is True
    with pytest.raises(ExerciseFailed, match="bias"):
        ch01.check_block_parameters(lambda d: 12 * d * d + 4 * d)
    with pytest.raises(ExerciseFailed, match="LayerNorm"):
        ch01.check_block_parameters(lambda d: 12 * d * d + 9 * d)
    with pytest.raises(ExerciseFailed):
        ch01.check_block_parameters(lambda d: 8 * d * d + 13 * d)


def test_attention_step_right_and_wrong():
    assert ch01.check_attention_step(_attention_right) is True
    with pytest.raises(ExerciseFailed, match="differ"):
        ch01.check_attention_step(lambda q, k, v: _attention_right(q * math.sqrt(q.shape[-1]), k, v))
    with pytest.raises(ExerciseFailed):
        ch01.check_attention_step(lambda q, k, v: v[:, -1:])
    with pytest.raises(ExerciseFailed, match=r"\[B, 1, H, d_h\]"):
        ch01.check_attention_step(lambda q, k, v: _attention_right(q, k, v).transpose(1, 2))


_LINEAGE_RIGHT = {
    "linear attention": "a",
    "DeltaNet": "b",
    "Gated DeltaNet": "c",
    "KDA": "d",
    "K3 (KDA + MLA hybrid)": "e",
}


def test_lineage_right_and_wrong():
    assert set(_LINEAGE_RIGHT) == set(ch00.STEPS)
    assert ch00.check_lineage(lambda: dict(_LINEAGE_RIGHT)) is True
    swapped = dict(_LINEAGE_RIGHT, DeltaNet="c", **{"Gated DeltaNet": "b"})
    with pytest.raises(ExerciseFailed, match="DeltaNet"):
        ch00.check_lineage(lambda: swapped)
    with pytest.raises(ExerciseFailed, match="keys"):
        ch00.check_lineage(lambda: {"DeltaNet": "b"})


def test_lineage_answer_key_is_not_public():
    public = {name for name in dir(ch00) if not name.startswith("_")}
    assert not any(isinstance(getattr(ch00, name), dict) and set(getattr(ch00, name)) == set(ch00.STEPS)
                   for name in public)


def test_implied_count_right_and_wrong():
    assert ch00.check_implied_gpt2_count(lambda: 2.8e12 / 22_580) is True
    with pytest.raises(ExerciseFailed, match="exact count"):
        ch00.check_implied_gpt2_count(lambda: 124_439_808)
    with pytest.raises(ExerciseFailed, match="not 22,580"):
        ch00.check_implied_gpt2_count(lambda: 124e6)
