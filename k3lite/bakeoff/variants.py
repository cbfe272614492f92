"""Mixers for ``--mixers module:function``: the bake-off's own diagnoses, and examples for a learner's.

A custom mixer runs inside KDA's layer (projections, short convolutions, per-channel decay ``g``, sigmoid
output gate) and is called like ``k3lite.ops.kda.chunked``. Swapping only the recurrence there separates
what the recurrence does from what its published layer around it does.

``gated_delta_rule_in_kda_layer``: Gated DeltaNet's recurrence, one decay per head (the layer's first
decay channel of each head), in KDA's layer. Gated DeltaNet's own layer differs from KDA's in two ways, the
per-head decay and a SiLU output gate (fla's ``FusedRMSNormGated``) instead of a sigmoid; this variant
keeps the first and drops the second, so a gap between it and ``gated_delta_rule`` is the output gate's.

    python -m k3lite.bakeoff --tasks rebind --d-models 64 \\
        --mixers gated_delta_rule,kda,k3lite.bakeoff.variants:gated_delta_rule_in_kda_layer
"""

from __future__ import annotations

from k3lite.ops import gated_delta_rule


def gated_delta_rule_in_kda_layer(q, k, v, g, beta, **options):
    """``g [B, T, H, K]`` -> one decay per head (channel 0), then the Gated DeltaNet recurrence."""
    return gated_delta_rule.chunked(q, k, v, g[..., 0], beta, **options)
