"""Checkers of chapter 10: a correct answer passes, a wrong one raises ExerciseFailed with a hint."""

import pytest

from k3lite.exercises import ExerciseFailed, ch10


def _layer_counts(cycles, per_cycle, final_mla):
    return cycles * (per_cycle - 1), cycles + int(final_mla)


def _decode_bytes(context, kda, mla, heads, head_dim, latent, rope):
    return context * mla * (latent + rope) * 2 + kda * heads * head_dim * head_dim * 4


def _sources_per_read(sublayers, block):
    return [1 + done // block + (1 if done % block else 0) for done in range(sublayers + 1)]


def test_not_attempted(capsys):
    def stub(*args):
        raise NotImplementedError

    for checker in (ch10.check_layer_counts, ch10.check_decode_cache_bytes, ch10.check_sources_per_read):
        assert checker(stub) is False
    assert capsys.readouterr().out.count("not attempted") == 3


def test_layer_counts(capsys):
    assert ch10.check_layer_counts(_layer_counts) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (lambda c, p, f: (c * (p - 1), c), "final MLA"),
    (lambda c, p, f: (c * p, c + int(f)), "only layers_per_cycle - 1"),
    (lambda c, p, f: (c * (p - 1) + 1, c + int(f)), "add up"),
    (lambda c, p, f: c * (p - 1) + c + int(f), "pair"),
    (lambda c, p, f: (c + int(f), c * (p - 1)), "not right"),
])
def test_layer_counts_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch10.check_layer_counts(wrong)


def test_decode_cache_bytes():
    assert ch10.check_decode_cache_bytes(_decode_bytes) is True


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, kda, mla, h, d, c, r: n * mla * (c + r) * 2, "KDA states are missing"),
    (lambda n, kda, mla, h, d, c, r: n * mla * c * 2 + kda * h * d * d * 4, "rope"),
    (lambda n, kda, mla, h, d, c, r: n * mla * (c + r) * 2 + max(n, 1) * kda * h * d * d * 4, "does not grow"),
    (lambda n, kda, mla, h, d, c, r: n * mla * (c + r) * 2 + kda * h * d * d * 2, "bf16"),
    (lambda n, kda, mla, h, d, c, r: n * mla * (c + r) * 4 + kda * h * d * d * 4, "bf16"),
    (lambda n, kda, mla, h, d, c, r: n * mla * (c + r) * 2 + kda * h * d * 4, "head_dim x head_dim"),
    (lambda n, kda, mla, h, d, c, r: _decode_bytes(n, kda, mla, h, d, c, r) + 1, "not right"),
])
def test_decode_cache_bytes_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch10.check_decode_cache_bytes(wrong)


def test_sources_per_read():
    assert ch10.check_sources_per_read(_sources_per_read) is True
    assert sum(_sources_per_read(186, 24)) == 1003   # K3, as chapters 09 and 10 count it


@pytest.mark.parametrize("wrong, hint", [
    (lambda n, b: _sources_per_read(n, b)[:-1], "output is a read too"),
    (lambda n, b: [c - 1 for c in _sources_per_read(n, b)], "embedding"),
    (lambda n, b: [2 + d // b for d in range(n + 1)], "partial sum is empty"),
    (lambda n, b: sum(_sources_per_read(n, b)), "one count per read"),
    (lambda n, b: _sources_per_read(n, b)[:-1] + [0], "not right"),
    (lambda n, b: _sources_per_read(n, 2 * b), "not right"),
])
def test_sources_per_read_wrong(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch10.check_sources_per_read(wrong)
