"""Checkers for chapter 08 (latent MoE and SiTU).

1. :func:`check_route` — sigmoid scores, top-k on score + bias, weights renormalised from the scores alone.
2. :func:`check_routed_macs` — multiply-adds per token of the routed experts, with or without a latent space.
3. :func:`check_situ` — the SiTU activation ``beta * tanh(x / beta) * sigmoid(x)``.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal


def _random(*shape, seed, scale=1.0):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ---------------------------------------------------------------- exercise 1: routing

def _route_reference(scores, bias, top_k):
    _, indices = torch.topk(scores + bias, top_k, dim=-1)
    selected = scores.gather(-1, indices)
    return selected / selected.sum(-1, keepdim=True), indices


def _as_sets(weights, indices):
    """Per token: {expert: weight}, so the order of the k chosen experts does not matter."""
    return [dict(zip(i.tolist(), w.tolist())) for w, i in zip(weights, indices)]


def check_route(route) -> bool:
    """``route(scores [N, E], bias [E], top_k) -> (weights [N, k], indices [N, k])``; ``scores`` are sigmoid outputs."""

    def check():
        scores = torch.sigmoid(_random(6, 10, seed=0))
        bias = _random(10, seed=1, scale=0.3)
        expected_weights, expected_indices = _route_reference(scores, bias, 3)
        weights, indices = route(scores, bias, 3)
        weights, indices = torch.as_tensor(weights, dtype=torch.float64), torch.as_tensor(indices)
        if tuple(indices.shape) != (6, 3):
            raise ExerciseFailed(f"indices must be [N, top_k] = (6, 3), got {tuple(indices.shape)}.")
        unbiased = torch.topk(scores, 3, dim=-1).indices
        got_sets = [set(row.tolist()) for row in indices]
        expected_sets = [set(r.tolist()) for r in expected_indices]
        if got_sets == [set(row.tolist()) for row in unbiased] and got_sets != expected_sets:
            raise ExerciseFailed("the experts are chosen on score + bias: the bias steers the selection.")
        expect_equal(got_sets, [set(r.tolist()) for r in expected_indices], what="chosen experts per token",
                     hint="Take the top_k of scores + bias along the expert axis.")
        got = _as_sets(weights, indices)
        want = _as_sets(expected_weights, expected_indices)
        biased = _as_sets((scores + bias).gather(-1, expected_indices) / (scores + bias).gather(-1, expected_indices)
                          .sum(-1, keepdim=True), expected_indices)
        close = lambda a, b: all(abs(a[t][e] - b[t][e]) < 1e-9 for t in range(len(a)) for e in a[t])  # noqa: E731
        if close(got, biased):
            raise ExerciseFailed("the bias only selects; the mixing weights come from the scores alone.")
        raw = _as_sets(scores.gather(-1, expected_indices), expected_indices)
        if close(got, raw):
            raise ExerciseFailed("renormalise the selected scores so each token's weights sum to 1.")
        if not close(got, want):
            raise ExerciseFailed("the weights are wrong: w_e = s_e / (sum of the selected s), for the chosen e.")

    return attempt("Exercise 1 (sigmoid routing with a selection bias)", check)


# ---------------------------------------------------------------- exercise 2: routed multiply-adds

# (hidden, latent or None, expert_width, top_k): K3, K3 without a latent, Kimi Linear-like, a toy.
_MAC_CASES = [(7168, 3584, 3072, 16), (7168, None, 3072, 16), (2304, None, 1024, 8), (64, 16, 24, 2)]


def _routed_macs_reference(hidden, latent, expert_width, top_k):
    if latent is None:
        return top_k * 3 * hidden * expert_width
    return top_k * 3 * latent * expert_width + 2 * hidden * latent


def check_routed_macs(routed_macs) -> bool:
    """``routed_macs(hidden, latent, expert_width, top_k) -> int``: per token, routed experts (+ W_down, W_up)."""

    def check():
        for case in _MAC_CASES:
            hidden, latent, width, top_k = case
            got = routed_macs(*case)
            expected = _routed_macs_reference(*case)
            if latent is not None and got == top_k * 3 * latent * width:
                raise ExerciseFailed(f"routed_macs{case}: the latent is not free: count W_down (d -> latent) and "
                                     "W_up (latent -> d) once per token.")
            two_matrix_count = None if latent is None else top_k * 2 * latent * width + 2 * hidden * latent
            if got == expected * 2 // 3 or (latent is not None and got == two_matrix_count):
                raise ExerciseFailed(f"routed_macs{case}: a gated expert has three matrices (gate, up, down).")
            if got == 2 * expected:
                raise ExerciseFailed(f"routed_macs{case}: count multiply-adds, not FLOPs (FLOPs = 2 x MACs).")
            expect_equal(got, expected, what=f"routed_macs{case}",
                         hint="top_k experts, each 3 x size x width, on the latent if there is one.")

    return attempt("Exercise 2 (routed multiply-adds per token)", check)


# ---------------------------------------------------------------- exercise 3: SiTU

def check_situ(situ) -> bool:
    """``situ(x, beta) -> beta * tanh(x / beta) * sigmoid(x)``, elementwise."""

    def check():
        x = torch.linspace(-30.0, 30.0, 241, dtype=torch.float64)
        for beta in (0.5, 4.0, 25.0):
            expected = beta * torch.tanh(x / beta) * torch.sigmoid(x)
            got = torch.as_tensor(situ(x, beta), dtype=torch.float64)
            if got.shape == expected.shape and torch.allclose(got, beta * torch.tanh(x / beta), atol=1e-9):
                raise ExerciseFailed("the sigmoid gate is missing: SiTU is a soft-capped SiLU, "
                                     "x -> sigmoid(x) * cap(x).")
            if got.shape == expected.shape and torch.allclose(got, torch.tanh(x / beta) * torch.sigmoid(x), atol=1e-9):
                raise ExerciseFailed(f"beta={beta}: multiply tanh(x / beta) by beta, "
                                     "so that SiTU ~ SiLU for |x| << beta.")
            if got.shape == expected.shape and torch.allclose(got, beta * torch.tanh(x) * torch.sigmoid(x), atol=1e-9):
                raise ExerciseFailed(f"beta={beta}: the tanh takes x / beta, not x.")
            expect_close(got, expected, what=f"situ(x, beta={beta})", atol=1e-9,
                         hint="beta * tanh(x / beta) * sigmoid(x).")

    return attempt("Exercise 3 (SiTU)", check)
