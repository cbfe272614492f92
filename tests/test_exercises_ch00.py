"""Checkers of chapter 00: right answers pass, wrong ones fail with a targeted hint, stubs are 'not attempted'."""

from __future__ import annotations

import dataclasses

import pytest

from k3lite.course import accounting
from k3lite.exercises import ExerciseFailed, ch00
from k3lite.models.k3 import K3Config


def _stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("checker", [ch00.check_lineage, ch00.check_mixer_share_prediction,
                                     ch00.check_active_with_top_k, ch00.check_implied_gpt2_count])
def test_stub_is_not_attempted(checker, capsys):
    assert checker(_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


_LINEAGE_RIGHT = {
    "linear attention": "c",
    "DeltaNet": "e",
    "Gated DeltaNet": "a",
    "KDA": "d",
    "K3 (KDA + MLA hybrid)": "b",
}


def test_lineage_right_and_wrong():
    assert set(_LINEAGE_RIGHT) == set(ch00.STEPS)
    assert set(_LINEAGE_RIGHT.values()) < set(ch00.FAILURES)
    assert ch00.check_lineage(lambda: dict(_LINEAGE_RIGHT)) is True
    swapped = dict(_LINEAGE_RIGHT, DeltaNet="a", **{"Gated DeltaNet": "e"})
    with pytest.raises(ExerciseFailed, match="DeltaNet"):
        ch00.check_lineage(lambda: swapped)
    with pytest.raises(ExerciseFailed, match="keys"):
        ch00.check_lineage(lambda: {"DeltaNet": "b"})
    with pytest.raises(ExerciseFailed, match="not a failure of any step"):
        ch00.check_lineage(lambda: dict(_LINEAGE_RIGHT, KDA="f"))


def test_lineage_is_not_the_letters_in_order():
    in_order = dict(zip(ch00.STEPS, "abcde"))
    with pytest.raises(ExerciseFailed, match="Not yet right"):
        ch00.check_lineage(lambda: in_order)


def test_lineage_answer_key_is_not_public():
    public = {name for name in dir(ch00) if not name.startswith("_")}
    assert not any(isinstance(getattr(ch00, name), dict) and set(getattr(ch00, name)) == set(ch00.STEPS)
                   for name in public)


def test_mixer_share_prediction_accepts_the_stated_range_and_explains_a_miss(capsys):
    measured = ch00.mixer_share(K3Config.published())
    parts = accounting.k3_parameter_breakdown(K3Config.published())
    assert measured == pytest.approx((parts["kda mixers"] + parts["mla mixers"]) / sum(parts.values()))
    assert ch00.check_mixer_share_prediction(lambda: measured * 2, measured=measured) is True
    assert "measured" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="routed experts hold"):
        ch00.check_mixer_share_prediction(lambda: 0.3)  # the usual guess: a large share
    with pytest.raises(ExerciseFailed, match="not a fraction"):
        ch00.check_mixer_share_prediction(lambda: 5)
    with pytest.raises(ExerciseFailed, match="measured share"):
        ch00.check_mixer_share_prediction(lambda: measured, measured=0.5)


def _active_right(top_k):
    config = K3Config.published()
    counts = accounting.k3_param_counts(config)
    return counts["active"] + (top_k - config.top_k) * config.num_moe_layers * accounting.k3_expert_parameters(config)


def test_active_with_top_k_right_and_wrong():
    assert ch00.check_active_with_top_k(_active_right) is True
    published = accounting.k3_param_counts(K3Config.published())
    with pytest.raises(ExerciseFailed, match="must change the answer"):
        ch00.check_active_with_top_k(lambda top_k: published["active"])
    with pytest.raises(ExerciseFailed, match="Only the routed experts scale"):
        ch00.check_active_with_top_k(lambda top_k: round(published["active"] * top_k / 16))
    with pytest.raises(ExerciseFailed, match="embedding"):
        ch00.check_active_with_top_k(lambda top_k: _active_right(top_k) + published["embedding"])
    with pytest.raises(ExerciseFailed, match="one routed"):
        ch00.check_active_with_top_k(lambda top_k: _active_right(top_k) + 7)


def test_active_reference_is_the_accounting_of_the_changed_config():
    config = dataclasses.replace(K3Config.published(), top_k=8)
    assert _active_right(8) == accounting.k3_param_counts(config)["active"]


def test_implied_count_right_and_wrong():
    assert ch00.check_implied_gpt2_count(lambda: 2.8e12 / 22_580) is True
    with pytest.raises(ExerciseFailed, match="exact count"):
        ch00.check_implied_gpt2_count(lambda: 124_439_808)
    with pytest.raises(ExerciseFailed, match="not 22,580"):
        ch00.check_implied_gpt2_count(lambda: 124e6)
