"""The mechanisms of the course as plain PyTorch, one module per mechanism, forms side by side.

``linear_attention``, ``delta_rule``, ``gated_delta_rule`` and ``kda`` each offer ``recurrent``
(the token loop that defines the op), ``chunked`` (the same numbers from matrix products over
chunks) and ``step`` (one decode token); ``linear_attention`` also has ``parallel`` (the masked
quadratic form). Everything follows the layout of the field: q, k ``[B, T, H, K]``, v
``[B, T, H, V]``, log-space gates ``<= 0``, state ``[B, H, K, V]`` in float32, and every op
returns ``(output, final_state)``.
"""

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

__all__ = ["linear_attention", "delta_rule", "gated_delta_rule", "kda"]
