"""Statistics of the bake-off, written once and used by the harness, the table and every chapter.

Outcomes are bimodal: a run either learns a recall task (accuracy near 1) or stays stuck near chance, and
which one happens depends on the seed. A mean ± standard error over a few seeds hides that, so every cell is
reported two ways:

* **success rate**: a run *succeeds* when its metric reaches :data:`SUCCESS_THRESHOLD` (accuracy >= 0.9); a
  diverged or failed run does not succeed. The rate ``k/n`` comes with its 95 % Wilson score interval
  (Wilson 1927; Agresti & Coull 1998 compare it with the normal interval, which is useless at 0/n or n/n).
* **mean ± s.e.**: the sample mean and the standard error ``s / sqrt(n)`` of the metric over seeds.

"A beats B" on success (:func:`beats_by_success`): A's success rate is higher and Fisher's exact test
(two-sided, on the 2 x 2 table of successes and failures; Fisher 1935, Agresti 2002 Sec. 3.5) gives
``p < alpha`` (default 0.05). With 5 seeds a side only 5/5 against 0/5 reaches ``p < 0.05`` (p = 0.0079);
4/5 against 0/5 gives p = 0.048; 4/5 against 1/5 does not (p = 0.21). That is the honest size of the
evidence five seeds give about a bimodal outcome.

The older mean rules stay for metrics that are not bimodal (bits per byte):

* ``beats``: the difference of the means is larger than ``z`` (default 2) standard errors of that difference,
  ``se = sqrt(s_A^2 / n_A + s_B^2 / n_B)``; a rough screen, not a significance test.
* ``beats_paired``: for cells whose spread is mostly the data (a seed fixes the training batches, the same for
  every mixer): the mean of the per-seed differences is larger than ``z`` standard errors of that mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BEATS_Z = 2.0
SUCCESS_THRESHOLD = 0.9     # accuracy at or above this counts as "learned the task"
WILSON_Z = 1.959963984540054   # the standard normal's 97.5 % quantile: a two-sided 95 % interval
FISHER_ALPHA = 0.05


@dataclass(frozen=True)
class Summary:
    mean: float
    std: float
    n: int

    @property
    def sem(self) -> float:
        return self.std / math.sqrt(self.n) if self.n else float("nan")


def summarize(values) -> Summary:
    """Mean and sample standard deviation (0 for a single value); NaN runs count as they are."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("values must hold at least one number, got none")
    mean = sum(values) / len(values)
    if len(values) == 1:
        return Summary(mean, 0.0, 1)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return Summary(mean, math.sqrt(variance), len(values))


def mean_se(values) -> str:
    """``"0.512 ± 0.221"`` (mean ± standard error over the values), ``"0.977 (n=1)"`` for one value."""
    s = summarize(values)
    return f"{s.mean:.3f} ± {s.sem:.3f}" if s.n > 1 else f"{s.mean:.3f} (n=1)"


# ---------------------------------------------------------------- success rates


def is_success(metric, threshold: float = SUCCESS_THRESHOLD) -> bool:
    """Whether one run learned the task: a finite metric at or above ``threshold`` (None, NaN: no)."""
    return isinstance(metric, (int, float)) and math.isfinite(metric) and metric >= threshold


def wilson_interval(successes: int, trials: int, z: float = WILSON_Z) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion: ``(low, high)``, 95 % by default.

    ``centre = (p + z^2 / 2n) / (1 + z^2 / n)``, ``half = z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n)``
    with ``p = successes / trials``. Unlike the normal interval it is never empty at 0/n or n/n."""
    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be an integer >= 1, got {trials!r}")
    if not isinstance(successes, int) or not 0 <= successes <= trials:
        raise ValueError(f"successes must be an integer in [0, trials={trials}], got {successes!r}")
    if not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a finite number > 0, got {z}")
    p, n = successes / trials, trials
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    # exact at the edges: rounding must not move 0/n's low end or n/n's high end off the boundary
    return (0.0 if successes == 0 else low), (1.0 if successes == trials else high)


@dataclass(frozen=True)
class SuccessRate:
    successes: int
    trials: int
    low: float
    high: float

    @property
    def rate(self) -> float:
        return self.successes / self.trials

    def __str__(self) -> str:
        return f"{self.successes}/{self.trials} [{self.low:.2f}, {self.high:.2f}]"


def success_rate(metrics, threshold: float = SUCCESS_THRESHOLD) -> SuccessRate:
    """How many of ``metrics`` (one per seed; None for a diverged or failed run) reached ``threshold``, with
    the 95 % Wilson interval of the rate."""
    metrics = list(metrics)
    if not metrics:
        raise ValueError("metrics must hold at least one run, got none")
    successes = sum(is_success(m, threshold) for m in metrics)
    return SuccessRate(successes, len(metrics), *wilson_interval(successes, len(metrics)))


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(successes_a: int, trials_a: int, successes_b: int, trials_b: int) -> float:
    """Two-sided p-value of Fisher's exact test on the table ``[[s_a, n_a - s_a], [s_b, n_b - s_b]]``.

    With the margins fixed, the count ``x`` of A's successes is hypergeometric:
    ``P(x) = C(n_a, x) C(n_b, s - x) / C(n_a + n_b, s)`` with ``s = s_a + s_b``. The p-value sums ``P(x)``
    over every table no more probable than the observed one (the usual two-sided definition; a relative
    tolerance of 1e-7 keeps tables of equal probability equal despite rounding, as R and SciPy do)."""
    for name, value, top in (("successes_a", successes_a, trials_a), ("successes_b", successes_b, trials_b)):
        if not isinstance(top, int) or top < 1:
            raise ValueError(f"{name.replace('successes', 'trials')} must be an integer >= 1, got {top!r}")
        if not isinstance(value, int) or not 0 <= value <= top:
            raise ValueError(f"{name} must be an integer in [0, {top}], got {value!r}")
    total_successes, total = successes_a + successes_b, trials_a + trials_b
    low, high = max(0, total_successes - trials_b), min(trials_a, total_successes)
    norm = _log_choose(total, total_successes)

    def probability(x: int) -> float:
        return math.exp(_log_choose(trials_a, x) + _log_choose(trials_b, total_successes - x) - norm)

    observed = probability(successes_a)
    p = sum(q for q in map(probability, range(low, high + 1)) if q <= observed * (1 + 1e-7))
    return min(1.0, p)


def beats_by_success(a, b, *, threshold: float = SUCCESS_THRESHOLD, alpha: float = FISHER_ALPHA) -> bool:
    """True when the runs ``a`` (metrics, one per seed; None for a diverged run) succeed more often than the
    runs ``b`` and Fisher's exact test on the success counts gives ``p < alpha``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    ra, rb = success_rate(a, threshold), success_rate(b, threshold)
    if ra.rate <= rb.rate:
        return False
    return fisher_exact(ra.successes, ra.trials, rb.successes, rb.trials) < alpha


def success_verdict(a, b, name_a: str = "A", name_b: str = "B", *, threshold: float = SUCCESS_THRESHOLD,
                    alpha: float = FISHER_ALPHA) -> str:
    """The success comparison of two cells in words, with both rates and Fisher's p-value; the rates are in the
    order the sentence names the cells (the winner's first)."""
    ra, rb = success_rate(a, threshold), success_rate(b, threshold)
    p = fisher_exact(ra.successes, ra.trials, rb.successes, rb.trials)
    a_first = f"{ra.successes}/{ra.trials} vs {rb.successes}/{rb.trials}, Fisher p = {p:.3g}"
    if beats_by_success(a, b, threshold=threshold, alpha=alpha):
        return f"{name_a} beats {name_b} ({a_first})"
    if beats_by_success(b, a, threshold=threshold, alpha=alpha):
        return f"{name_b} beats {name_a} ({rb.successes}/{rb.trials} vs {ra.successes}/{ra.trials}, Fisher p = {p:.3g})"
    return f"no call ({a_first})"


def steps_to_learn(evaluations, metric: str = "accuracy", threshold: float = SUCCESS_THRESHOLD):
    """The step of the first evaluation whose ``metric`` reaches ``threshold``, or None (never, or no
    evaluations: a record written before periodic evaluation)."""
    for point in evaluations or ():
        if is_success(point.get(metric), threshold):
            return point["step"]
    return None


def median(values) -> float | None:
    """The median of the values that are not None (None when none are)."""
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    middle = len(values) // 2
    return float(values[middle]) if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


# ---------------------------------------------------------------- mean rules


def beats(a, b, *, higher_is_better: bool = True, z: float = BEATS_Z) -> bool:
    """True when the runs ``a`` beat the runs ``b``: means apart by more than ``z`` standard errors."""
    for name, values in (("a", a), ("b", b)):
        if len(values) < 2:
            raise ValueError(f"{name} must hold at least 2 runs (seeds) to estimate a spread, got {len(values)}")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")
    sa, sb = summarize(a), summarize(b)
    if any(math.isnan(x) for x in (sa.mean, sb.mean)):
        return False
    difference = sa.mean - sb.mean if higher_is_better else sb.mean - sa.mean
    standard_error = math.sqrt(sa.std ** 2 / sa.n + sb.std ** 2 / sb.n)
    return difference > z * standard_error


def beats_paired(a: dict, b: dict, *, higher_is_better: bool = True, z: float = BEATS_Z) -> bool:
    """True when ``a`` beats ``b`` seed for seed: ``a`` and ``b`` map seed -> metric; the differences on the
    seeds both hold must have a mean larger than ``z`` standard errors of that mean."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        raise ValueError(f"a and b must share at least 2 seeds to pair them, got {seeds}")
    if not z > 0:
        raise ValueError(f"z must be > 0, got {z}")
    sign = 1.0 if higher_is_better else -1.0
    differences = summarize([sign * (a[seed] - b[seed]) for seed in seeds])
    if math.isnan(differences.mean):
        return False
    return differences.mean > z * differences.sem
