"""Checkers of chapters 07-09: a correct answer passes, a wrong one raises ExerciseFailed with a hint."""

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch07

# ---------------------------------------------------------------- chapter 07


def _cache_elements(kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim):
    return {"mha": 2 * num_heads * head_dim, "gqa": 2 * (num_kv_heads or 0) * head_dim,
            "mqa": 2 * head_dim, "mla": (latent_dim or 0) + (rope_dim or 0)}[kind]


def test_ch07_cache_elements(capsys):
    assert ch07.check_cache_elements(_cache_elements) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda kind, h, d, g, c, r: _cache_elements(kind, h, d, g, c, r) // (1 if kind == "mla" else 2), "half"),
    (lambda kind, h, d, g, c, r: c if kind == "mla" else _cache_elements(kind, h, d, g, c, r), "rope"),
    (lambda kind, h, d, g, c, r: 2 * (c + r) if kind == "mla" else _cache_elements(kind, h, d, g, c, r), "once"),
    (lambda kind, h, d, g, c, r: 2 * h * d if kind == "gqa" else _cache_elements(kind, h, d, g, c, r), "GQA"),
])
def test_ch07_cache_elements_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch07.check_cache_elements(wrong)


def test_ch07_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    assert ch07.check_absorb_query(stub) is False
    assert "not attempted" in capsys.readouterr().out


def test_ch07_absorb_query():
    assert ch07.check_absorb_query(lambda q, w: torch.einsum("hn,hnc->hc", q, w))
    with pytest.raises(ExerciseFailed, match=r"\[H, d_c\]"):
        ch07.check_absorb_query(lambda q, w: q)
    with pytest.raises(ExerciseFailed, match="scores"):
        ch07.check_absorb_query(lambda q, w: torch.einsum("hn,hnc->hc", q, w.flip(0)))


def test_ch07_absorbed_output():
    assert ch07.check_absorbed_output(lambda p, c, w: torch.einsum("hvc,hc->hv", w, p @ c))
    with pytest.raises(ExerciseFailed, match="W_UV"):
        ch07.check_absorbed_output(lambda p, c, w: torch.einsum("hvc,hc->hv", w, p.softmax(-1) @ c))
    with pytest.raises(ExerciseFailed, match="shape"):
        ch07.check_absorbed_output(lambda p, c, w: p @ c)
