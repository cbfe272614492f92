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


def _batch_parts(context=8192, batch=256):
    from k3lite.course import accounting
    from k3lite.models.k3 import K3Config

    parts = accounting.k3_cache_bytes(K3Config.published(), context, batch_size=batch)
    return {name: size / 2 ** 30 for name, size in parts.items()}


def test_batch_memory_prediction_accepts_the_reasoned_sum(capsys):
    parts = _batch_parts()
    reasoned = parts["kda_states"] + parts["mla_latents"]          # the convolution tails left out
    assert ch10.check_batch_memory_prediction(lambda: reasoned, parts["total"], context=8192, batch_size=256)
    assert "correct" in capsys.readouterr().out


def test_batch_memory_prediction_not_attempted(capsys):
    def stub():
        raise NotImplementedError

    assert ch10.check_batch_memory_prediction(stub, _batch_parts()["total"], context=8192, batch_size=256) is False
    assert "not attempted" in capsys.readouterr().out


@pytest.mark.parametrize("mistake, hint", [
    ("state once", "counted once for the whole batch"),
    ("states only", "the states alone"),
    ("tenfold", "more than 25% off"),
    ("text", "one number"),
])
def test_batch_memory_prediction_rejects_typical_mistakes(mistake, hint):
    parts = _batch_parts()
    fixed = parts["kda_states"] + parts["conv_tails"]
    prediction = {"state once": parts["mla_latents"] + fixed / 256, "states only": fixed,
                  "tenfold": 10 * parts["total"], "text": "a lot"}[mistake]
    with pytest.raises(ExerciseFailed, match=hint):
        ch10.check_batch_memory_prediction(lambda: prediction, parts["total"], context=8192, batch_size=256)


def test_batch_memory_prediction_rejects_a_wrong_measurement():
    parts = _batch_parts()
    with pytest.raises(ExerciseFailed, match="is not accounting"):
        ch10.check_batch_memory_prediction(lambda: parts["total"], parts["mla_latents"], context=8192, batch_size=256)


def _most_mla_layers(layers, context, budget, state, per_token):
    slope = context * per_token - state
    if slope <= 0:
        return layers if layers * state + layers * slope <= budget else None
    if layers * state > budget:
        return None
    return min(layers, (budget - layers * state) // slope)


def _states_never_freed(layers, context, budget, state, per_token):
    if layers * state > budget:
        return None
    return min(layers, (budget - layers * state) // (context * per_token))


def _short_context_ignored(layers, context, budget, state, per_token):
    slope = context * per_token - state
    if slope <= 0:
        return None if layers * state > budget else 0
    return _most_mla_layers(layers, context, budget, state, per_token)


def test_most_mla_layers_accepts_the_solution(capsys):
    assert ch10.check_most_mla_layers(_most_mla_layers) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, hint", [
    (_states_never_freed, "stops holding its KDA state"),
    (_short_context_ignored, "no larger than a KDA state"),
    (lambda *case: float(_most_mla_layers(*case) or 0), "whole number"),
])
def test_most_mla_layers_rejects_typical_mistakes(wrong, hint):
    with pytest.raises(ExerciseFailed, match=hint):
        ch10.check_most_mla_layers(wrong)
