"""Checkers for chapter 07 (Multi-head Latent Attention).

1. :func:`check_expand_kv_groups` — serve GQA's cached key/value groups to every query head.
2. :func:`check_absorb_query` — fold the key up-projection into the query (scores from the latent).
3. :func:`check_absorbed_output` — apply the value up-projection once, after the attention sum.
4. :func:`check_absorption_saving_prediction` — a prediction: how many times fewer multiply-adds an absorbed
   decoding step does than one that rebuilds every cached key and value.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close

# ---------------------------------------------------------------- exercise 1: one cached group, several heads

def _random(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _attention(q, k, v):
    """Causal softmax attention per head, q, k, v [B, T, H, D]."""
    scores = torch.einsum("bthd,bshd->bhts", q, k) / q.shape[-1] ** 0.5
    causal = torch.ones(q.shape[1], q.shape[1], dtype=torch.bool).tril()
    return torch.einsum("bhts,bshd->bthd", scores.masked_fill(~causal, float("-inf")).softmax(-1), v)


def check_expand_kv_groups(expand_kv_groups) -> bool:
    """``expand_kv_groups(kv [B, T, G, D], num_heads) -> [B, T, num_heads, D]``.

    Query head ``h`` reads group ``h // (num_heads // G)``: consecutive heads share a group. A ``num_heads``
    that ``G`` does not divide is a ``ValueError``.
    """

    def check():
        batch, T, groups, heads, dim = 2, 5, 3, 12, 4
        q = _random(batch, T, heads, dim, seed=0)
        k, v = _random(batch, T, groups, dim, seed=1), _random(batch, T, groups, dim, seed=2)
        got_k, got_v = expand_kv_groups(k, heads), expand_kv_groups(v, heads)
        for name, got, cached in (("keys", got_k, k), ("values", got_v, v)):
            if not torch.is_tensor(got) or tuple(got.shape) != (batch, T, heads, dim):
                shape = tuple(got.shape) if torch.is_tensor(got) else type(got).__name__
                raise ExerciseFailed(f"expanded {name}: expected shape {(batch, T, heads, dim)}, got {shape}. "
                                     "The head axis (dim 2) grows from G groups to num_heads heads.")
            if torch.equal(got, cached.repeat(1, 1, heads // groups, 1)):
                raise ExerciseFailed(f"expanded {name}: head h reads group h % G here (the groups tiled). Consecutive "
                                     "heads share a group: head h reads group h // (num_heads // G).")
        per_group = torch.stack([_attention(q[:, :, h:h + 1], k[:, :, h // (heads // groups)][:, :, None],
                                            v[:, :, h // (heads // groups)][:, :, None])[:, :, 0]
                                 for h in range(heads)], dim=2)
        expect_close(_attention(q, got_k, got_v), per_group, what="attention of every head over its group's cache",
                     atol=1e-9, hint="Head h reads group h // (num_heads // G).")
        try:
            expand_kv_groups(k, 8)
        except ValueError:
            pass
        else:
            raise ExerciseFailed("8 heads cannot share 3 groups evenly: raise a ValueError that says so, rather than "
                                 "return a tensor with some heads reading the wrong group.")

    return attempt("Exercise 1 (one cached group, several heads)", check)


# ---------------------------------------------------------------- exercise 2: absorbed query

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


# ---------------------------------------------------------------- exercise 4: predict what absorption saves

SAVING_FACTOR = 1.5


def check_absorption_saving_prediction(predict, measured_ratio: float, *, cached_tokens: int, latent_dim: int,
                                       nope_dim: int, value_dim: int) -> bool:
    """``predict() -> float``: multiply-adds of a decoding step that rebuilds every cached key and value from the
    latent, over those of the absorbed step; right within a factor of 1.5 of ``measured_ratio``."""

    def check():
        prediction = predict()
        try:
            predicted = float(prediction)
        except (TypeError, ValueError):
            raise ExerciseFailed(f"return your prediction as one number, got {prediction!r}.") from None
        limit = (nope_dim + value_dim) / 2
        rebuild = latent_dim * (nope_dim + value_dim)
        why = (f"Per head and cached token, rebuilding costs d_c (d_nope + d_v) = {rebuild:,} "
               f"multiply-adds (a key and a value from the latent), the absorbed step d_c for the score and d_c for "
               f"the mix = {2 * latent_dim:,}. The ratio tends to (d_nope + d_v) / 2 = {limit:g} as the context grows; "
               f"at {cached_tokens:,} tokens the one-off absorbed projections (W_UK into the query, W_UV after the "
               f"sum) bring it to {measured_ratio:.0f}.")
        if predicted <= 0 or not (measured_ratio / SAVING_FACTOR <= predicted <= measured_ratio * SAVING_FACTOR):
            if predicted <= 1.5:
                gap = ("Absorption is not a reordering that saves nothing: it removes the per-token rebuild "
                       "(section 3 found it costs more multiply-adds than MHA per number read, not more than "
                       "rebuilding). ")
            elif predicted > measured_ratio:
                gap = "The absorbed step still visits every cached token: 2 d_c multiply-adds per head for each. "
            else:
                gap = "The rebuild multiplies every cached latent by two d_c x d matrices per head. "
            raise ExerciseFailed(f"you predicted {predicted:g}, the count gives {measured_ratio:.0f}. {gap}{why}")
        print(f"Predicted {predicted:g}, counted {measured_ratio:.0f}. {why}")

    return attempt("Exercise 4 (prediction: what absorption saves)", check)
