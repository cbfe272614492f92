"""Checkers for chapter 01 (GPT-2 and the KV cache)."""

from __future__ import annotations

import torch

from k3lite.course import accounting
from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal
from k3lite.models.gpt2 import GPT2Config, causal_attention

# The first case tells the usual mistakes apart (halving, dropping the bytes, one layer only).
_KV_CASES = [
    (GPT2Config.xl(), 4),
    (GPT2Config(), 2),
    (GPT2Config.medium(), 2),
    (GPT2Config(vocab_size=10, n_ctx=8, n_layer=3, n_head=5, n_embd=40), 1),
]


def check_kv_bytes_per_token(kv_bytes_per_token) -> bool:
    """``kv_bytes_per_token(config, bytes_per_element) -> int``: cache bytes one token adds."""

    def check():
        for config, element_size in _KV_CASES:
            got = kv_bytes_per_token(config, element_size)
            expected = accounting.gpt2_kv_bytes_per_token(config, element_size)
            if got == expected:
                continue
            if got == expected // 2:
                raise ExerciseFailed("Half the right size: the cache holds a key AND a value per head.")
            if got == expected // element_size:
                raise ExerciseFailed("That is a count of numbers, not bytes: multiply by bytes_per_element.")
            if got == expected // config.n_layer:
                raise ExerciseFailed("Every layer has its own attention, hence its own keys and values.")
            expect_equal(got, expected, what=f"bytes per token for n_layer={config.n_layer}, "
                         f"n_head={config.n_head}, n_embd={config.n_embd}, {element_size} B/element",
                         hint="Count: 2 (K and V) x layers x heads x head_dim x bytes.")

    return attempt("KV-cache bytes per token", check)


def check_block_parameters(block_parameters) -> bool:
    """``block_parameters(n_embd) -> int``: parameters of one GPT-2 block (MLP width 4 n_embd)."""

    def check():
        for width in (768, 1024, 1600, 10):
            config = GPT2Config(n_embd=width, n_head=2 if width == 10 else 16)
            expected = sum(accounting.gpt2_block_parameters(config).values())
            got = block_parameters(width)
            no_bias = expected - (3 * width + width + 4 * width + width)
            if got == expected:
                continue
            if got == no_bias:
                raise ExerciseFailed("Close: every linear layer of GPT-2 also has a bias vector.")
            if got == expected - 4 * width:
                raise ExerciseFailed("Close: the two LayerNorms each have a weight and a bias of size n_embd.")
            expect_equal(got, expected, what=f"block parameters for n_embd={width}",
                         hint="Sum LayerNorm, qkv projection, output projection, LayerNorm, MLP up and down.")

    return attempt("Parameters of one block", check)


def check_attention_step(attention_step) -> bool:
    """``attention_step(q, k_cache, v_cache) -> out [B, 1, H, D]``: one new query ``[B, 1, H, D]``
    attends to every cached key ``[B, T, H, D]`` (the new token's own key is the last one)."""

    def check():
        generator = torch.Generator().manual_seed(11)
        for batch, steps, heads, dim in ((1, 1, 1, 4), (2, 9, 3, 8)):
            q = torch.randn(batch, 1, heads, dim, generator=generator)
            k = torch.randn(batch, steps, heads, dim, generator=generator)
            v = torch.randn(batch, steps, heads, dim, generator=generator)
            got = torch.as_tensor(attention_step(q, k, v))
            if tuple(got.shape) != (batch, 1, heads, dim):
                raise ExerciseFailed(f"Return the new token's output laid out like q, [B, 1, H, d_h] = "
                                     f"{(batch, 1, heads, dim)}; got {tuple(got.shape)}.")
            expect_close(got, causal_attention(q, k, v), what=f"output for T={steps} cached tokens",
                         hint="softmax over the keys of q.k / sqrt(D), then the weighted sum of values; "
                              "keep heads separate and scale by sqrt(head_dim).")

    return attempt("One decode step of attention", check)
