"""Checkers for chapter 01 (GPT-2 and the KV cache).

1. :func:`check_cache_outweighs_prediction` — a prediction: after how many tokens GPT-2 XL's cache weighs
   as much as its weights.
2. :func:`check_attention_step` — one decoding step of attention against a KV cache.
3. :func:`check_window_attention_step` — a transfer: the same step for sliding-window attention.
"""

from __future__ import annotations

import math

import torch

from k3lite.course import accounting
from k3lite.exercises import ExerciseFailed, attempt, expect_close
from k3lite.models.gpt2 import GPT2Config, causal_attention

CROSSOVER_TOLERANCE = 0.3  # a prediction within 30 % of the measured token count is accepted


def cache_outweighs_weights_at(config: GPT2Config, dtype="bf16") -> float:
    """Tokens of one sequence after which the KV cache holds as many bytes as the model's weights (same dtype)."""
    weight_bytes = accounting.gpt2_parameter_count(config) * accounting.element_bytes(dtype)
    return weight_bytes / accounting.gpt2_kv_bytes_per_token(config, dtype)


def check_cache_outweighs_prediction(predict, measured: float | None = None) -> bool:
    """``predict() -> number``: after how many tokens of one sequence GPT-2 XL's bf16 KV cache weighs as much
    as its bf16 weights. Accepted within ``CROSSOVER_TOLERANCE`` of the measurement."""
    config = GPT2Config.xl()

    def check():
        predicted = float(predict())
        actual = cache_outweighs_weights_at(config)
        if measured is not None and abs(measured - actual) > 1e-6 * actual:
            raise ExerciseFailed(f"the measured {measured:,.0f} is not the crossover: divide the weights' bytes by "
                                 "the cache bytes one token adds, both in bf16.")
        d, layers, vocab = config.n_embd, config.n_layer, config.vocab_size
        estimate = 6 * d + vocab / (2 * layers)
        explanation = (f"measured {actual:,.0f} tokens. The blocks hold about 12·L·d² weights and a token "
                       f"caches 2·L·d numbers, so the crossover is near 6d + V/(2L) = {estimate:,.0f} tokens"
                       ": the layer count cancels, and a wider model takes longer to be outweighed by its "
                       f"cache. GPT-2 XL's context is {config.n_ctx:,} tokens, so one sequence never gets there; "
                       f"a batch of {math.ceil(actual / config.n_ctx)} full-length sequences does.")
        if abs(predicted - actual) > CROSSOVER_TOLERANCE * actual:
            ratio = predicted / actual
            if abs(ratio - 2) < 0.2 or abs(ratio - 0.5) < 0.1:
                explanation += " You are off by about 2x: a key AND a value per head, both in bf16 like the weights."
            raise ExerciseFailed(f"your prediction {predicted:,.0f} is more than {CROSSOVER_TOLERANCE:.0%} away: "
                                 f"{explanation}")
        print(f"your prediction {predicted:,.0f}, {explanation}")

    return attempt("Prediction: when the cache outweighs the model", check)


def _cases(seed: int):
    generator = torch.Generator().manual_seed(seed)
    for batch, steps, heads, dim in ((1, 1, 1, 4), (2, 9, 3, 8)):
        q = torch.randn(batch, 1, heads, dim, generator=generator)
        k = torch.randn(batch, steps, heads, dim, generator=generator)
        v = torch.randn(batch, steps, heads, dim, generator=generator)
        yield q, k, v


def _shape_hint(got, q) -> None:
    if tuple(got.shape) != tuple(q.shape):
        raise ExerciseFailed(f"Return the new token's output laid out like q, [B, 1, H, d_h] = "
                             f"{tuple(q.shape)}; got {tuple(got.shape)}.")


def check_attention_step(attention_step) -> bool:
    """``attention_step(q, k_cache, v_cache) -> out [B, 1, H, D]``: one new query ``[B, 1, H, D]``
    attends to every cached key ``[B, T, H, D]`` (the new token's own key is the last one)."""

    def check():
        for q, k, v in _cases(11):
            got = torch.as_tensor(attention_step(q, k, v))
            _shape_hint(got, q)
            expect_close(got, causal_attention(q, k, v), what=f"output for T={k.shape[1]} cached tokens",
                         hint="softmax over the keys of q.k / sqrt(D), then the weighted sum of values; "
                              "keep heads separate and scale by sqrt(head_dim).")

    return attempt("One decode step of attention", check)


def check_window_attention_step(window_attention_step) -> bool:
    """``window_attention_step(q, k_cache, v_cache, window) -> out [B, 1, H, D]``: the decoding step of
    sliding-window attention, in which the new token attends only to the last ``window`` cached tokens
    (its own included)."""

    def check():
        generator = torch.Generator().manual_seed(12)
        batch, steps, heads, dim = 2, 10, 3, 8
        q = torch.randn(batch, 1, heads, dim, generator=generator)
        k = torch.randn(batch, steps, heads, dim, generator=generator)
        v = torch.randn(batch, steps, heads, dim, generator=generator)
        for window in (1, 4, steps, steps + 5):
            got = torch.as_tensor(window_attention_step(q, k, v, window))
            _shape_hint(got, q)
            expected = causal_attention(q, k[:, -window:], v[:, -window:])
            if window < steps and torch.allclose(got, causal_attention(q, k, v), atol=1e-5):
                raise ExerciseFailed(f"window={window}: the output is full attention over all {steps} cached "
                                     "tokens; the window must leave the older ones out.")
            if window < steps and torch.allclose(got, causal_attention(q, k[:, :window], v[:, :window]), atol=1e-5):
                raise ExerciseFailed(f"window={window}: you kept the *oldest* {window} tokens; the window slides, "
                                     "so it keeps the newest ones, the new token's own key included.")
            if 1 < window <= steps and torch.allclose(got, causal_attention(q, k[:, -window + 1:], v[:, -window + 1:]),
                                             atol=1e-5):
                raise ExerciseFailed(f"window={window}: one token too few; the window counts the new token too.")
            expect_close(got, expected, what=f"output with window={window} over T={steps} cached tokens",
                         hint="attention over the last `window` cached keys and values only (all of them when "
                              "fewer are cached).")

    return attempt("Transfer: a decoding step of sliding-window attention", check)
