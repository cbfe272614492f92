"""k3lite.bakeoff.stats against published values: Wilson intervals, Fisher's exact test, success rates."""

from __future__ import annotations

import math

import pytest

from k3lite.bakeoff.stats import (
    beats_by_success,
    fisher_exact,
    is_success,
    median,
    steps_to_learn,
    success_rate,
    success_verdict,
    wilson_interval,
)


@pytest.mark.parametrize("k,n,low,high", [
    (0, 5, 0.0, 0.4345),        # the rule-of-three region: the normal interval would be [0, 0]
    (5, 5, 0.5655, 1.0),
    (3, 5, 0.2307, 0.8824),
])
def test_wilson_interval_matches_published_values(k, n, low, high):
    got = wilson_interval(k, n)
    assert got == pytest.approx((low, high), abs=5e-5)
    assert got[0] <= k / n <= got[1]


def test_wilson_interval_is_symmetric_and_refuses_bad_counts():
    for k in range(6):
        low, high = wilson_interval(k, 5)
        mirror = wilson_interval(5 - k, 5)
        assert low == pytest.approx(1 - mirror[1]) and high == pytest.approx(1 - mirror[0])
    for bad in ((6, 5), (-1, 5), (0, 0), (1.5, 5)):
        with pytest.raises(ValueError, match="successes|trials"):
            wilson_interval(*bad)


def test_fisher_exact_matches_textbook_tables():
    # Fisher's lady tasting tea (Fisher 1935, The Design of Experiments, Sec. 2): [[3, 1], [1, 3]], two-sided 0.4857
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(0.4857, abs=5e-5)
    # Wikipedia, "Fisher's exact test" (the dieting example): [[1, 9], [11, 3]], two-sided p = 0.002759
    assert fisher_exact(1, 10, 11, 14) == pytest.approx(0.002759, abs=5e-7)
    # Five seeds a side: 5/5 vs 0/5 is 2 / C(10, 5) = 1/126 (two tables, each 1/252)
    assert fisher_exact(5, 5, 0, 5) == pytest.approx(2 / math.comb(10, 5))
    assert fisher_exact(2, 5, 2, 5) == pytest.approx(1.0)
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(fisher_exact(1, 4, 3, 4))       # two-sided: symmetric
    with pytest.raises(ValueError, match="successes_b"):
        fisher_exact(1, 5, 6, 5)


def test_success_counts_none_and_nan_as_failures():
    assert is_success(0.9) and not is_success(0.8999) and not is_success(None) and not is_success(float("nan"))
    rate = success_rate([0.99, 0.95, None, 0.02, float("nan")])
    assert (rate.successes, rate.trials) == (2, 5) and str(rate).startswith("2/5 [")
    assert (rate.low, rate.high) == pytest.approx(wilson_interval(2, 5))
    with pytest.raises(ValueError, match="metrics"):
        success_rate([])


def test_beats_by_success_needs_fishers_p_below_alpha():
    learned, stuck = [0.99] * 5, [0.02] * 5
    assert beats_by_success(learned, stuck) and not beats_by_success(stuck, learned)
    assert not beats_by_success([0.99] * 4 + [0.1], [0.99] + [0.1] * 4)    # 4/5 vs 1/5: p = 0.21
    assert beats_by_success([0.99] * 4 + [0.1], stuck)                    # 4/5 vs 0/5: p = 0.048
    assert success_verdict(learned, stuck, "kda", "gdn").startswith("kda beats gdn (5/5 vs 0/5, Fisher p = 0.00794")
    assert success_verdict(stuck, stuck).startswith("no call (0/5 vs 0/5")
    assert success_verdict(stuck, learned, "gdn", "kda").startswith("kda beats gdn (5/5 vs 0/5, Fisher p = 0.00794")


def test_steps_to_learn_and_median():
    evaluations = [{"step": 100, "accuracy": 0.1}, {"step": 200, "accuracy": 0.95}, {"step": 300, "accuracy": 0.5}]
    assert steps_to_learn(evaluations) == 200
    assert steps_to_learn(evaluations[:1]) is None and steps_to_learn(None) is None     # an old record
    assert median([300, None, 100, 200]) == 200 and median([100, 200]) == 150 and median([None]) is None
