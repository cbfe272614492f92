"""Checkers for chapter 00 (the introduction).

1. :func:`check_lineage` — which failure each step of the lineage fixes (the letters are shuffled, one is a decoy).
2. :func:`check_mixer_share_prediction` — a prediction: the share of K3's parameters in its token mixers.
3. :func:`check_active_with_top_k` — a transfer: K3's active parameters if the router picked another number of experts.
4. :func:`check_implied_gpt2_count` — the GPT-2 size that makes 2.8e12 / size exactly 22,580.
"""

from __future__ import annotations

import dataclasses

from k3lite.exercises import ExerciseFailed, attempt

SEED_RATIO = 22_580
K3_TOTAL_SEEDS = 2.8e12

# Failures, in no particular order; one of them is fixed by no step of the lineage.
FAILURES = {
    "a": "nothing ever fades: the memory cannot forget in bulk",
    "b": "a fixed-size state loses exact recall of distant tokens",
    "c": "the KV cache grows with every token, so each decoding step reads more memory",
    "d": "one forgetting rate per head is too coarse: every channel fades alike",
    "e": "writes only add: old associations are never removed, so they interfere",
    "f": "softmax attention cannot be trained in parallel over the positions of a sequence",
}
# The steps the learner maps, in lineage order (the statement lists them).
STEPS = ("linear attention", "DeltaNet", "Gated DeltaNet", "KDA", "K3 (KDA + MLA hybrid)")
# The answer key stays private: the exercise is to work it out, not to read it.
_LINEAGE_FIXES = {
    "linear attention": "c",
    "DeltaNet": "e",
    "Gated DeltaNet": "a",
    "KDA": "d",
    "K3 (KDA + MLA hybrid)": "b",
}
_DECOY = "f"


def check_lineage(match) -> bool:
    """``match() -> dict`` mapping every step of ``STEPS`` to a letter of ``FAILURES``."""

    def check():
        answer = match()
        if not isinstance(answer, dict) or set(answer) != set(STEPS):
            raise ExerciseFailed(f"Return a dict with exactly these keys: {list(STEPS)}.")
        decoyed = [step for step in STEPS if answer[step] == _DECOY]
        if decoyed:
            raise ExerciseFailed(f"({_DECOY}) is not a failure of any step: GPT-2 already trains in parallel over "
                                 f"the positions (the causal mask does it). Look again at: {', '.join(decoyed)}.")
        wrong = [step for step in STEPS if _LINEAGE_FIXES[step] != answer[step]]
        if wrong:
            raise ExerciseFailed(f"Not yet right for: {', '.join(wrong)}. Ask what the step *before* it "
                                 "could not do, not what the step itself adds.")

    return attempt("What each step fixes", check)


def _within_factor(predicted: float, measured: float, factor: float) -> bool:
    return predicted > 0 and measured / factor <= predicted <= measured * factor


def mixer_share(config) -> float:
    """The fraction of a K3 configuration's parameters in its token mixers (KDA and MLA layers)."""
    from k3lite.course import accounting

    parts = accounting.k3_parameter_breakdown(config)
    return (parts["kda mixers"] + parts["mla mixers"]) / sum(parts.values())


MIXER_SHARE_FACTOR = 3.0


def check_mixer_share_prediction(predict, measured: float | None = None) -> bool:
    """``predict() -> float``: the predicted fraction (0.05 for 5 %) of K3's parameters in KDA and MLA layers.

    Accepted within a factor of ``MIXER_SHARE_FACTOR`` of the measured share. ``measured``, when given, is the
    notebook's own computation; it must agree with the checker's.
    """
    from k3lite.course import accounting
    from k3lite.models.k3 import K3Config

    config = K3Config.published()

    def check():
        predicted = float(predict())
        actual = mixer_share(config)
        if measured is not None and abs(measured - actual) > 1e-9:
            raise ExerciseFailed(f"the measured share {measured:.4f} is not the mixers' share of the published "
                                 "configuration: sum the 'kda mixers' and 'mla mixers' parts over the total.")
        if predicted >= 1:
            raise ExerciseFailed(f"{predicted} is not a fraction: write 5 % as 0.05.")
        routed = accounting.k3_param_counts(config)["routed_experts"] / accounting.k3_param_counts(config)["total"]
        explanation = (f"measured {actual:.2%}. The routed experts hold {routed:.1%} of K3, so everything else, "
                       f"mixers included, shares the last {1 - routed:.1%}: the parts this course is about are "
                       "small in parameters and large in what they decide (memory per token, time per step).")
        if not _within_factor(predicted, actual, MIXER_SHARE_FACTOR):
            raise ExerciseFailed(f"your prediction {predicted:.2%} is more than {MIXER_SHARE_FACTOR:g}x away: "
                                 f"{explanation}")
        print(f"your prediction {predicted:.2%}, {explanation}")

    return attempt("Prediction: the mixers' share of K3", check)


def _active_reference(top_k: int) -> int:
    from k3lite.course import accounting
    from k3lite.models.k3 import K3Config

    return accounting.k3_param_counts(dataclasses.replace(K3Config.published(), top_k=top_k))["active"]


def check_active_with_top_k(active_with_top_k) -> bool:
    """``active_with_top_k(top_k) -> int``: K3's active parameters per token if its router chose ``top_k``
    routed experts instead of 16 (everything else as published)."""
    from k3lite.course import accounting
    from k3lite.models.k3 import K3Config

    published = accounting.k3_param_counts(K3Config.published())

    def check():
        for top_k in (16, 1, 8, 32, 896):
            got = int(active_with_top_k(top_k))
            expected = _active_reference(top_k)
            if got == expected:
                continue
            if top_k != 16 and got == published["active"]:
                raise ExerciseFailed(f"top_k={top_k} gives the published 16-expert count: the number of routed "
                                     "experts a token uses must change the answer.")
            if abs(got - published["active"] * top_k / 16) < 1:
                raise ExerciseFailed(f"top_k={top_k}: you scaled all active parameters by top_k / 16. Only the "
                                     "routed experts scale; attention, shared experts, router and norms run for "
                                     "every token whatever top_k is.")
            if abs(got - expected) == published["embedding"]:
                raise ExerciseFailed("off by exactly the embedding table: a token looks up one row of it, so "
                                     "'active' leaves it out, as in the count printed above.")
            raise ExerciseFailed(f"top_k={top_k}: got {got:,}, which is not right. Start from the published active "
                                 "count and add or remove whole experts: how many parameters has one routed "
                                 "expert, summed over the MoE layers?")

    return attempt("Transfer: active parameters for another top_k", check)


def check_implied_gpt2_count(implied_count) -> bool:
    """``implied_count() -> number`` (int or float, within one parameter): the GPT-2 size that makes
    2.8e12 / size exactly 22,580."""

    def check():
        got = implied_count()
        expected = K3_TOTAL_SEEDS / SEED_RATIO
        if abs(got - 124_439_808) < 1:
            raise ExerciseFailed("That is GPT-2's exact count; the question asks which count the ratio implies.")
        if abs(got - expected) > 1:
            raise ExerciseFailed(f"2.8e12 / {got:,.0f} = {K3_TOTAL_SEEDS / got:,.1f}, not 22,580.")

    return attempt("The GPT-2 size behind 22,580", check)
