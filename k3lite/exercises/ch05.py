"""Checkers for chapter 05 (Gated DeltaNet).

* :func:`check_half_life_prediction` - a prediction: how long an association survives a constant gate.
* :func:`check_gated_linear_chunk` - transfer: one chunk of gated linear attention (Mamba-2's scalar decay without
  the delta rule), in parallel form.
"""

from __future__ import annotations

import math

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close


def reference_cumulative_decay(g):
    """``Γ[r, i] = exp(g[i+1] + ... + g[r])`` for i <= r, 0 above the diagonal."""
    G = torch.cumsum(g, dim=0)
    diff = G[:, None] - G[None, :]
    lower = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp(diff.masked_fill(~lower, float("-inf")))


def _prediction(predict, unit: str) -> float:
    """What ``predict()`` returns, as a float."""
    value = predict()
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ExerciseFailed(f"return your prediction as one number ({unit}), e.g. 25.") from None


def check_half_life_prediction(predict, measured_tokens, *, decay: float) -> bool:
    """``predict() -> float``: the first token at which an association read back under a constant gate ``decay``
    has fallen below half of its strength; right within 25 % of ``measured_tokens``."""

    def check():
        predicted = _prediction(predict, "tokens")
        exact = math.log(2) / -math.log(decay)
        why = (f"The readback after t tokens is {decay}^t, whatever the other writes do (their keys are orthogonal "
               f"to k, so the delta rule never touches k's association): half is left after ln 2 / (−ln {decay}) = "
               f"{exact:.1f} tokens, about 0.69 / (1 − α) for α near 1.")
        if abs(predicted - measured_tokens) > 0.25 * measured_tokens:
            if predicted < measured_tokens:
                gap = "Your memory fades too fast: the writes in between do not erase it, only the gate does. "
            elif abs(predicted - 1 / (1 - decay)) < 0.15 / (1 - decay):
                gap = "1 / (1 − α) is the time to fall to 1/e (37 %), not to one half. "
            else:
                gap = "Your memory lasts too long. "
            raise ExerciseFailed(f"you predicted {predicted:g}, the run measured {measured_tokens}. {gap}{why}")
        print(f"Predicted {predicted:g}, measured {measured_tokens}. {why}")

    return attempt("Half-life prediction", check)


def _linear_chunk_by_tokens(q, k, v, g, state):
    """The definition, token by token from ``state``: S_t = exp(g_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ q_t."""
    outputs = []
    for t in range(q.shape[0]):
        state = torch.exp(g[t]) * state + torch.outer(k[t], v[t])
        outputs.append(state.T @ q[t])
    return torch.stack(outputs), state


def _linear_chunk_mistakes(q, k, v, g, state):
    """Typical wrong parallel forms, each (name of the mistake, outputs, new state)."""
    G, gamma = torch.cumsum(g, dim=0), reference_cumulative_decay(g)
    right_o = torch.exp(G)[:, None] * (q @ state) + ((q @ k.T) * gamma) @ v
    right_state = torch.exp(G[-1]) * state + (torch.exp(G[-1] - G)[:, None] * k).T @ v
    return {
        "incoming state read undecayed": (q @ state + ((q @ k.T) * gamma) @ v, right_state),
        "own write left out": (torch.exp(G)[:, None] * (q @ state) + ((q @ k.T) * torch.tril(gamma, -1)) @ v,
                               right_state),
        "writes reach the end undecayed": (right_o, torch.exp(G[-1]) * state + k.T @ v),
    }


_LINEAR_HINTS = {
    "incoming state read undecayed": "the state the chunk starts from has decayed by exp(G_r) when token r reads it: "
                                     "the first term is (e^G ⊙ Q) S_0.",
    "own write left out": "token r reads its own write: without the delta rule nothing is corrected first, so Γ keeps "
                          "its diagonal (mask only i > r).",
    "writes reach the end undecayed": "a write at i reaches the end of the chunk multiplied by exp(G_C − G_i): "
                                      "S_C = e^{G_C} S_0 + (e^{G_C − G} ⊙ K)ᵀ V.",
}


def _linear_chunk_cases():
    """(name, q, k, v, g, state): mild gates, no gate, and a wipe at every token (G reaches -960)."""
    generator = torch.Generator().manual_seed(8)
    cases = []
    for name, chunk, gate in (("mild gates", 6, None), ("g = 0", 5, 0.0), ("g = -30 at every token", 32, -30.0)):
        q = torch.randn(chunk, 4, generator=generator, dtype=torch.float64)
        k = torch.randn(chunk, 4, generator=generator, dtype=torch.float64)
        v = torch.randn(chunk, 3, generator=generator, dtype=torch.float64)
        g = -torch.rand(chunk, generator=generator, dtype=torch.float64) if gate is None \
            else torch.full((chunk,), gate, dtype=torch.float64)
        state = torch.randn(4, 3, generator=generator, dtype=torch.float64)
        cases.append((name, q, k, v, g, state))
    return cases


def check_gated_linear_chunk(gated_linear_chunk) -> bool:
    """``gated_linear_chunk(q [C,K], k [C,K], v [C,V], g [C], state [K,V]) -> (o [C,V], new state [K,V])`` for
    ``S_t = exp(g_t) S_{t-1} + k_t v_tᵀ`` and ``o_t = S_tᵀ q_t`` (no scale)."""

    def check():
        for name, q, k, v, g, state in _linear_chunk_cases():
            expected_o, expected_state = _linear_chunk_by_tokens(q, k, v, g, state)
            got_o, got_state = gated_linear_chunk(q, k, v, g.clone(), state.clone())
            got_o, got_state = (torch.as_tensor(x, dtype=torch.float64) for x in (got_o, got_state))
            if not (torch.isfinite(got_o).all() and torch.isfinite(got_state).all()):
                raise ExerciseFailed(f"{name}: inf or nan in your result. Form Γ from differences, exp(G_r − G_i) "
                                     "with i > r masked before exp, never exp(G_r)·exp(−G_i).")
            if name == "mild gates" and got_o.shape == expected_o.shape and got_state.shape == expected_state.shape:
                for mistake, (wrong_o, wrong_state) in _linear_chunk_mistakes(q, k, v, g, state).items():
                    if torch.allclose(got_o, wrong_o) and torch.allclose(got_state, wrong_state):
                        raise ExerciseFailed(f"{name}: {_LINEAR_HINTS[mistake]}")
            expect_close(got_o, expected_o, what=f"{name}: outputs of the chunk", atol=1e-8,
                         hint="Without the delta rule there is no UT transform: V is used as it is, "
                              "O = (e^G ⊙ Q) S_0 + (Q Kᵀ ⊙ Γ) V with Γ's diagonal kept.")
            expect_close(got_state, expected_state, what=f"{name}: state after the chunk", atol=1e-8,
                         hint="S_C = e^{G_C} S_0 + (e^{G_C − G} ⊙ K)ᵀ V.")

    return attempt("One chunk of gated linear attention", check)
