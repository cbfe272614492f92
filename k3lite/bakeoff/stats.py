"""Mean ± std over seeds, and the stated rule for "A beats B".

Rule: A beats B when the difference of the means is larger than ``z`` (default 2) standard errors of
that difference, ``se = sqrt(s_A^2 / n_A + s_B^2 / n_B)`` with sample standard deviations. With three
seeds this is a rough screen, not a significance test; it is stated so that every claim uses one rule.

Paired rule (``beats_paired``), for cells whose spread is mostly the data: a seed fixes the training and
validation batches, the same for every mixer, so runs of two mixers with one seed saw the same text. A beats
B when the mean of the per-seed differences is larger than ``z`` standard errors of that mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BEATS_Z = 2.0


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
