"""Checkers for chapter 07 (Multi-head Latent Attention).

1. :func:`check_cache_elements` — cached elements per token and layer for MHA, GQA, MQA and MLA.
2. :func:`check_absorb_query` — fold the key up-projection into the query (scores from the latent).
3. :func:`check_absorbed_output` — apply the value up-projection once, after the attention sum.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal

# ---------------------------------------------------------------- exercise 1: cache elements

# (kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim)
_CACHE_CASES = [
    ("mha", 12, 64, None, None, None),
    ("mha", 96, 128, None, None, None),
    ("gqa", 32, 128, 8, None, None),
    ("gqa", 96, 128, 4, None, None),
    ("mqa", 96, 128, None, None, None),
    ("mla", 128, 128, None, 512, 64),
    ("mla", 4, 16, None, 24, 8),
]


def _cache_elements_reference(kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim):
    if kind == "mha":
        return 2 * num_heads * head_dim
    if kind == "gqa":
        return 2 * num_kv_heads * head_dim
    if kind == "mqa":
        return 2 * head_dim
    return latent_dim + rope_dim


def check_cache_elements(cache_elements) -> bool:
    """``cache_elements(kind, num_heads, head_dim, num_kv_heads, latent_dim, rope_dim) -> int``.

    ``kind`` is ``"mha"``, ``"gqa"``, ``"mqa"`` or ``"mla"``; arguments a kind does not use are ``None``.
    """

    def check():
        for case in _CACHE_CASES:
            got = cache_elements(*case)
            expected = _cache_elements_reference(*case)
            kind = case[0]
            if kind != "mla" and got == expected // 2:
                raise ExerciseFailed(f"{case}: you got half the answer. Every cached head stores a key and a value.")
            if kind == "mla" and got == 2 * expected:
                raise ExerciseFailed(f"{case}: MLA caches the latent once; keys and values are both read from it.")
            if kind == "mla" and got == case[4]:
                raise ExerciseFailed(f"{case}: the shared positional key part (rope_dim) is cached too.")
            hints = {"mha": "one key and one value per head",
                     "gqa": "one key and one value per KV group, shared by the heads of that group",
                     "mqa": "a single key and value shared by all heads",
                     "mla": "the latent c_KV plus the shared positional key"}
            expect_equal(got, expected, what=f"cache_elements{case}", hint=f"{kind.upper()} caches {hints[kind]}.")

    return attempt("Exercise 1 (cache elements per token and layer)", check)


# ---------------------------------------------------------------- exercise 2: absorbed query

def _random(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def check_absorb_query(absorb_query) -> bool:
    """``absorb_query(q_nope [H, d_nope], w_uk [H, d_nope, d_c]) -> q_latent [H, d_c]``.

    The per-head key is ``k_h = w_uk[h] @ c``; the answer must satisfy ``q_latent[h] @ c == q_nope[h] @ k_h``.
    """

    def check():
        heads, d_nope, d_latent = 3, 5, 7
        q_nope, w_uk = _random(heads, d_nope, seed=0), _random(heads, d_nope, d_latent, seed=1)
        latents = _random(11, d_latent, seed=2)
        got = absorb_query(q_nope, w_uk)
        expected = torch.einsum("hn,hnc->hc", q_nope, w_uk)
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (heads, d_nope):
            raise ExerciseFailed("the absorbed query lives in the latent space: shape [H, d_c], not [H, d_nope]. "
                                 "Multiply q by the transpose of the key up-projection.")
        got_scores = torch.as_tensor(got, dtype=torch.float64) @ latents.T if torch.is_tensor(got) else got
        expected_scores = torch.einsum("hn,hnc,tc->ht", q_nope, w_uk, latents)
        expect_close(got_scores, expected_scores, what="scores q_latent · c against every cached latent", atol=1e-9,
                     hint="q · (W_UK c) = (W_UKᵀ q) · c, one head at a time.")
        expect_close(got, expected, what="absorbed query", atol=1e-9)

    return attempt("Exercise 2 (absorb the key projection into the query)", check)


# ---------------------------------------------------------------- exercise 3: absorbed output

def check_absorbed_output(absorbed_output) -> bool:
    """``absorbed_output(probs [H, T], latents [T, d_c], w_uv [H, d_v, d_c]) -> o [H, d_v]``.

    Must equal ``sum_t probs[h, t] * (w_uv[h] @ latents[t])`` for every head.
    """

    def check():
        heads, steps, d_latent, d_value = 3, 9, 6, 4
        probs = torch.softmax(_random(heads, steps, seed=3), dim=-1)
        latents, w_uv = _random(steps, d_latent, seed=4), _random(heads, d_value, d_latent, seed=5)
        expected = torch.einsum("ht,hvc,tc->hv", probs, w_uv, latents)
        got = absorbed_output(probs, latents, w_uv)
        expect_close(got, expected, what="absorbed output", atol=1e-9,
                     hint="First mix the latents with each head's probabilities ([H, d_c]), "
                          "then apply that head's W_UV ([d_v, d_c]).")

    return attempt("Exercise 3 (apply W_UV after the attention sum)", check)
