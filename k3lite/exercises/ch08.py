"""Checkers for chapter 08 (latent MoE and SiTU).

1. :func:`check_route` — sigmoid scores, top-k on score + bias, weights renormalised from the scores alone.
2. :func:`check_routed_macs` — multiply-adds per token of the routed experts, with or without a latent space.
3. :func:`check_situ` — the SiTU activation ``beta * tanh(x / beta) * sigmoid(x)``.
4. :func:`check_situ_departure_prediction` — a prediction: where SiTU stops being SiLU.
5. :func:`check_dropped_assignments` — transfer: what a capacity limit per expert drops.
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


# ---------------------------------------------------------------- exercise 4: predict where SiTU departs from SiLU

DEPARTURE_TOLERANCE = 0.3


def check_situ_departure_prediction(predict, measured_x: float, *, beta: float) -> bool:
    """``predict() -> float``: the smallest x > 0 where SiTU_beta falls more than 1 % below SiLU; right within 30 %
    of ``measured_x``."""

    def check():
        prediction = predict()
        try:
            predicted = float(prediction)
        except (TypeError, ValueError):
            raise ExerciseFailed(f"return your prediction as one number, got {prediction!r}.") from None
        why = (f"SiTU / SiLU = β tanh(x/β) / x (the sigmoid cancels), and tanh(u)/u ≈ 1 − u²/3 for small u: 1 % "
               f"below at u ≈ √0.03 ≈ 0.17, so x ≈ 0.17 β = {0.17 * beta:.2f}. The cap bends the curve long before "
               f"it reaches β = {beta:g}: at x = β SiTU is already {100 * (1 - 0.7616):.0f} % below SiLU.")
        if abs(predicted - measured_x) > DEPARTURE_TOLERANCE * measured_x:
            if predicted > measured_x:
                gap = "Too late: tanh is not flat until it nears 1, it starts to bend at once. "
            else:
                gap = "Too early: for x ≪ β, β tanh(x/β) is x to second order. "
            raise ExerciseFailed(f"you predicted {predicted:g}, the run measured {measured_x:.2f}. {gap}{why}")
        print(f"Predicted {predicted:g}, measured {measured_x:.2f}. {why}")

    return attempt("Exercise 4 (prediction: where SiTU departs from SiLU)", check)


# ---------------------------------------------------------------- exercise 5: what a capacity limit drops

def _dropped_reference(indices, num_experts, capacity):
    load = torch.bincount(torch.as_tensor(indices).reshape(-1), minlength=num_experts)
    return int((load - capacity).clamp_min(0).sum())


def dropped_share(indices, num_experts, capacity) -> float:
    """The share of a batch's (token, expert) assignments that a per-expert ``capacity`` turns away, by the
    reference exercise 5 is checked against: the chapter reads the exercise's outcome through it, so that the cell
    after the exercise does not print its solution."""
    return _dropped_reference(indices, num_experts, capacity) / torch.as_tensor(indices).numel()


def _capacity_cases():
    generator = torch.Generator().manual_seed(5)
    skewed = torch.multinomial(torch.tensor([8.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]), 64, replacement=True,
                               generator=generator).reshape(32, 2)
    balanced = torch.arange(64).remainder(8).reshape(32, 2)
    spread = torch.stack([torch.randperm(16, generator=generator)[:4] for _ in range(50)])
    # (indices [N, k], num_experts, capacity)
    return [(skewed, 8, 10), (balanced, 8, 8), (balanced, 8, 5), (spread, 16, 12), (skewed, 8, 0)]


def check_dropped_assignments(dropped_assignments) -> bool:
    """``dropped_assignments(indices [N, k], num_experts, capacity) -> int``: the (token, expert) assignments an
    expert turns away because it already holds ``capacity`` of them."""

    def check():
        for indices, num_experts, capacity in _capacity_cases():
            expected = _dropped_reference(indices, num_experts, capacity)
            got = dropped_assignments(indices.clone(), num_experts, capacity)
            got = int(got) if isinstance(got, torch.Tensor) and got.numel() == 1 else got
            case = f"{tuple(indices.shape)} indices, {num_experts} experts, capacity {capacity}"
            load = torch.bincount(indices.reshape(-1), minlength=num_experts)
            pooled = {int((load - capacity).sum()), max(0, indices.numel() - capacity * num_experts)}
            if got in pooled and got != expected:
                raise ExerciseFailed(f"{case}: an expert below its capacity does not take the overflow of another "
                                     "(that would be re-routing): count max(0, load − capacity) per expert.")
            if got == int((load > capacity).sum()) and got != expected:
                raise ExerciseFailed(f"{case}: that is the number of experts over capacity; count the assignments "
                                     "they turn away.")
            expect_equal(got, expected, what=f"dropped assignments for {case}",
                         hint="Count each expert's load (torch.bincount over the flattened indices), then sum "
                              "max(0, load − capacity).")

    return attempt("Exercise 5 (what a capacity limit drops)", check)
