"""A trained bake-off of the course's token mixers: ``python -m k3lite.bakeoff --help``.

Modules: ``tasks`` (synthetic tasks and the byte-level LM with a planted recall probe), ``models`` (one
backbone, six mixers or a learner's ``module:function``, parameter counts matched), ``runs`` (one training
run, Triton forward and backward asserted on CUDA, divergence recorded), ``store`` (the JSON store of runs:
locked, merged, atomic writes; figures/bakeoff.json is the course's), ``stats`` (mean ± std, the "A beats B"
rule), ``cli`` (grid, learning-rate sweep, seeds, workers, measure, merge), ``plots``.
"""

from k3lite.bakeoff.stats import beats, beats_paired, summarize

__all__ = ["beats", "beats_paired", "summarize"]
