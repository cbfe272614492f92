"""The mechanisms of the course as plain PyTorch, one module per mechanism, forms side by side.

``linear_attention``, ``delta_rule``, ``gated_delta_rule`` and ``kda`` each offer ``recurrent``
(the token loop that defines the op), ``chunked`` (the same numbers from matrix products over
chunks) and ``step`` (one decode token); ``linear_attention`` also has ``parallel`` (the masked
quadratic form). Everything follows the layout of the field: q, k ``[B, T, H, K]``, v
``[B, T, H, V]``, log-space gates ``<= 0``, state ``[B, H, K, V]`` in float32, and every op
returns ``(output, final_state)``.

``RECURRENT_KINDS`` is the one list of these recurrent kinds, in the course's order: kind (the
module's ``KIND``, as the kernels, models and bake-off name it) -> ``(module, label)``, the label
being the name the chapters and plots print. ``KINDS`` is its keys.
"""

from types import ModuleType
from typing import NamedTuple

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention


class RecurrentKind(NamedTuple):
    module: ModuleType
    label: str


RECURRENT_KINDS: dict[str, RecurrentKind] = {
    module.KIND: RecurrentKind(module, label) for module, label in (
        (linear_attention, "linear attention"),
        (delta_rule, "DeltaNet"),
        (gated_delta_rule, "Gated DeltaNet"),
        (kda, "KDA"),
    )
}
KINDS = tuple(RECURRENT_KINDS)

__all__ = ["linear_attention", "delta_rule", "gated_delta_rule", "kda", "RECURRENT_KINDS", "KINDS",
           "RecurrentKind"]
