"""Checkers for chapter 00 (the introduction)."""

from __future__ import annotations

from k3lite.exercises import ExerciseFailed, attempt

SEED_RATIO = 22_580
K3_TOTAL_SEEDS = 2.8e12

# What each step of the lineage fixes (the failure of the step before).
FAILURES = {
    "a": "the KV cache grows with every token, so each decoding step reads more memory",
    "b": "writes only add: old associations are never removed, so they interfere",
    "c": "nothing ever fades: the memory cannot forget in bulk",
    "d": "one forgetting rate per head is too coarse: every channel fades alike",
    "e": "a fixed-size state loses exact recall of distant tokens",
}
# The steps the learner maps, in lineage order (the statement lists them).
STEPS = ("linear attention", "DeltaNet", "Gated DeltaNet", "KDA", "K3 (KDA + MLA hybrid)")
# The answer key stays private: the exercise is to work it out, not to read it.
_LINEAGE_FIXES = {
    "linear attention": "a",
    "DeltaNet": "b",
    "Gated DeltaNet": "c",
    "KDA": "d",
    "K3 (KDA + MLA hybrid)": "e",
}


def check_lineage(match) -> bool:
    """``match() -> dict`` mapping every step of ``STEPS`` to a letter of ``FAILURES``."""

    def check():
        answer = match()
        if not isinstance(answer, dict) or set(answer) != set(STEPS):
            raise ExerciseFailed(f"Return a dict with exactly these keys: {list(STEPS)}.")
        wrong = [step for step in STEPS if _LINEAGE_FIXES[step] != answer[step]]
        if wrong:
            raise ExerciseFailed(f"Not yet right for: {', '.join(wrong)}. Ask what the step before it "
                                 "could not do.")

    return attempt("What each step fixes", check)


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
