"""Mixers for ``--mixers module:function``: the bake-off's own diagnoses, and examples for a learner's.

A custom mixer runs inside KDA's layer in its default form (projections, short convolutions, K3's bounded
per-channel decay ``g`` through a low-rank projection, sigmoid output gate; see ``k3lite.bakeoff.models``)
and is called like ``k3lite.ops.kda.chunked``. Swapping only the recurrence there separates what the
recurrence does from what its published layer around it does.

``gated_delta_rule_in_kda_layer``: Gated DeltaNet's recurrence, one decay per head (the layer's first
decay channel of each head), in KDA's layer. Gated DeltaNet's own layer differs from KDA's in three ways:
the per-head decay, its parametrisation (``-exp(A_log) softplus(W_a x + dt_bias)`` from a full-rank
``W_a`` against K3's ``-5 sigmoid(exp(A_log) (W_up W_down x + dt_bias))``) and a SiLU output gate (fla's
``FusedRMSNormGated``) instead of a sigmoid. This variant keeps the first and takes the other two from
KDA's layer, so a gap between it and ``gated_delta_rule`` belongs to the decay parametrisation and the
output gate together, and a gap between it and ``kda`` to one decay per head against one per channel.
Its stored retention (``metrics["retention_mean"]``) averages every decay channel of the layer, of which the
recurrence reads one per head: it does not describe the decay this mixer uses.

    python -m k3lite.bakeoff --tasks rebind --d-models 64 \\
        --mixers gated_delta_rule,kda,k3lite.bakeoff.variants:gated_delta_rule_in_kda_layer
"""

from __future__ import annotations

from k3lite.ops import gated_delta_rule


def gated_delta_rule_in_kda_layer(q, k, v, g, beta, **options):
    """``g [B, T, H, K]`` -> one decay per head (channel 0), then the Gated DeltaNet recurrence."""
    return gated_delta_rule.chunked(q, k, v, g[..., 0], beta, **options)
