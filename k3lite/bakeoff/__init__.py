"""A trained bake-off of the course's token mixers: ``python -m k3lite.bakeoff --help``.

Modules: ``tasks`` (synthetic tasks, Zoology-style MQAR, chance levels, and the byte-level LM with a planted
recall probe), ``models`` (one backbone, six mixers or a learner's ``module:function``, parameter counts
matched), ``runs`` (one training run with periodic held-out evaluation and its cost, Triton forward and backward
asserted on CUDA, divergence recorded), ``store`` (the JSON store of runs and learning-rate choices: locked,
merged, atomic writes; figures/bakeoff.json is the course's), ``stats`` (success rates with Wilson intervals,
Fisher's exact test, mean ± s.e., the mean rules for "A beats B"), ``cli`` (grid, learning-rate choice, seeds,
workers, measure, merge, the table), ``plots``.
"""

from k3lite.bakeoff.stats import (
    beats,
    beats_by_success,
    beats_paired,
    fisher_exact,
    success_rate,
    success_verdict,
    summarize,
    wilson_interval,
)

__all__ = ["beats", "beats_by_success", "beats_paired", "fisher_exact", "success_rate", "success_verdict",
           "summarize", "wilson_interval"]
