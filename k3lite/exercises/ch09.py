"""Checkers for chapter 09 (Attention Residuals).

1. :func:`check_depth_attention` — the AttnRes read: a softmax over depth with RMS-normalised keys.
2. :func:`check_block_count` — how many sources block AttnRes stores for a given depth and block size.
3. :func:`check_block_sources` — the source list ``[embedding, completed blocks..., partial block]``.
4. :func:`check_read_scale_prediction` — a prediction: the scale of an AttnRes read at initialisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal


def _random(*shape, seed, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _depth_attention_reference(values, query, eps=1e-6):
    keys = F.rms_norm(values, (values.shape[-1],), eps=eps)
    weights = torch.softmax(keys @ query, dim=0)
    return (weights.unsqueeze(-1) * values).sum(0), weights


# ---------------------------------------------------------------- exercise 1: the AttnRes read

def check_depth_attention(depth_attention) -> bool:
    """``depth_attention(values [S, M, d], query [d]) -> (mixed [M, d], weights [S, M])``
    (S sources, M positions; RMSNorm eps 1e-6)."""

    def check():
        # Sources of very different sizes, as in a real residual stream.
        values = _random(5, 7, 6, seed=0) * torch.tensor([0.1, 1.0, 3.0, 10.0, 0.5], dtype=torch.float64)[:, None, None]
        query = _random(6, seed=1)
        expected_mixed, expected_weights = _depth_attention_reference(values, query)
        mixed, weights = depth_attention(values, query)
        weights = torch.as_tensor(weights, dtype=torch.float64)
        if weights.shape == (5, 7) and not torch.allclose(weights.sum(0), torch.ones(7, dtype=torch.float64)):
            raise ExerciseFailed("the weights of each token must sum to 1 over the sources (softmax over dim 0, "
                                 "the depth axis).")
        plain_weights = torch.softmax(values @ query, dim=0)
        if weights.shape == (5, 7) and torch.allclose(weights, plain_weights, atol=1e-8):
            raise ExerciseFailed("the keys are RMSNorm(v_i), not v_i: without the norm the biggest source wins "
                                 "just by being big.")
        expect_close(weights, expected_weights, what="weights", atol=1e-8,
                     hint="alpha_i = softmax_i(query . RMSNorm(v_i)), RMSNorm without a gain, eps = 1e-6.")
        normalised_mix = (expected_weights.unsqueeze(-1) * F.rms_norm(values, (6,), eps=1e-6)).sum(0)
        if torch.as_tensor(mixed).shape == normalised_mix.shape and torch.allclose(
                torch.as_tensor(mixed, dtype=torch.float64), normalised_mix, atol=1e-8):
            raise ExerciseFailed("the values are mixed as they are: only the keys are normalised.")
        expect_close(mixed, expected_mixed, what="mixed", atol=1e-8, hint="mixed = sum_i alpha_i v_i.")
        zero_mixed, zero_weights = depth_attention(values, torch.zeros(6, dtype=torch.float64))
        expect_close(zero_mixed, values.mean(0), what="mix with a zero query", atol=1e-8,
                     hint="A zero query must give uniform weights, i.e. the mean of the sources.")

    return attempt("Exercise 1 (the AttnRes read)", check)


# ---------------------------------------------------------------- exercise 2: counting block sources

# (layers, layers_per_block): K3, a shallow model, exact multiples, blocks bigger than the model.
_COUNT_CASES = [(93, 12), (6, 2), (24, 12), (12, 24), (27, 1), (1, 1)]


def _block_count_reference(layers, layers_per_block):
    full_blocks, remainder = divmod(layers, layers_per_block)
    return 1 + full_blocks, remainder


def check_block_count(block_count) -> bool:
    """``block_count(layers, layers_per_block) -> (stored_sources, layers_in_partial_block)`` after the last layer.

    Stored sources are the embedding and every completed block; the partial block is the running sum of the
    layers after the last boundary (0 layers if the depth is a multiple of the block size).
    """

    def check():
        for case in _COUNT_CASES:
            got = tuple(block_count(*case))
            stored, partial = _block_count_reference(*case)
            if got == (stored - 1, partial):
                raise ExerciseFailed(f"block_count{case}: the token embedding is a stored source too.")
            if partial and got == (stored + 1, partial):
                raise ExerciseFailed(f"block_count{case}: the partial block is not stored; it is recomputed as a "
                                     "running sum and read alongside the stored sources.")
            expect_equal(got, (stored, partial), what=f"block_count{case}",
                         hint="How many block boundaries does the stack cross, "
                              "and how many layers come after the last?")

    return attempt("Exercise 2 (counting block sources)", check)


# ---------------------------------------------------------------- exercise 3: the source list

def _block_sources_reference(embedding, outputs, sublayers_per_block):
    completed, partial, count = [embedding], None, 0
    for output in outputs:
        partial = output if partial is None else partial + output
        count += 1
        if count == sublayers_per_block:
            completed.append(partial)
            partial, count = None, 0
    return completed + ([partial] if partial is not None else [])


def check_block_sources(block_sources) -> bool:
    """``block_sources(embedding [M, d], outputs: list of [M, d], sublayers_per_block) -> list of [M, d]``
    (M positions)."""

    def check():
        embedding = _random(3, 4, seed=2)
        outputs = [_random(3, 4, seed=10 + i) for i in range(7)]
        for block in (1, 2, 3, 7, 8):
            expected = _block_sources_reference(embedding, outputs, block)
            got = list(block_sources(embedding, list(outputs), block))
            if len(got) == len(expected) + 1 and len(outputs) % block == 0:
                raise ExerciseFailed(f"sublayers_per_block={block}: after a complete block the partial sum is empty "
                                     "and must not be listed.")
            expect_equal(len(got), len(expected), what=f"number of sources for sublayers_per_block={block}",
                         hint="[embedding, one sum per completed block, the running sum if it holds any output].")
            for index, (g, e) in enumerate(zip(got, expected)):
                expect_close(g, e, what=f"source {index} for sublayers_per_block={block}", atol=1e-10,
                             hint="A block's source is the sum of its sub-layer outputs.")

    return attempt("Exercise 3 (the block source list)", check)


# ---------------------------------------------------------------- exercise 4: predict the scale at initialisation

SCALE_TOLERANCE = 0.25


def check_read_scale_prediction(predict, measured_rms: float, *, num_sources: int) -> bool:
    """``predict() -> float``: the RMS of an AttnRes read at initialisation (pseudo-query 0) of ``num_sources``
    independent sources of RMS 1; right within 25 % of ``measured_rms``."""

    def check():
        prediction = predict()
        try:
            predicted = float(prediction)
        except (TypeError, ValueError):
            raise ExerciseFailed(f"return your prediction as one number, got {prediction!r}.") from None
        root = num_sources ** 0.5
        why = (f"With the pseudo-query at 0 every score is 0, so the read is the mean of the {num_sources} sources. "
               f"Independent sources add in variance: their sum has RMS √{num_sources} = {root:.2f} (what a plain "
               f"residual stream hands on), their mean √{num_sources} / {num_sources} = {1 / root:.2f}. The plain "
               "stream grows with depth; the AttnRes read does not, and a trained query can pick one source at its "
               "full scale.")
        if abs(predicted - measured_rms) > SCALE_TOLERANCE * measured_rms:
            if abs(predicted - root) <= SCALE_TOLERANCE * root:
                gap = "That is the plain sum; the AttnRes read at initialisation is the mean. "
            elif abs(predicted - 1) <= SCALE_TOLERANCE:
                gap = "A mean keeps the scale only of sources that agree; independent ones partly cancel. "
            elif abs(predicted - 1 / num_sources) <= SCALE_TOLERANCE / num_sources:
                gap = "RMS values of independent sources add in quadrature, not linearly. "
            else:
                gap = ""
            raise ExerciseFailed(f"you predicted {predicted:g}, the run measured {measured_rms:.3f}. {gap}{why}")
        print(f"Predicted {predicted:g}, measured {measured_rms:.3f}. {why}")

    return attempt("Exercise 4 (prediction: the scale of the read at initialisation)", check)
