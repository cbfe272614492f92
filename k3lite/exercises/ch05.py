"""Checkers for chapter 05 (Gated DeltaNet).

* :func:`check_gated_delta_step` - one token of the gated delta rule for one head.
* :func:`check_cumulative_decay` - the matrix of decays between a write at i and a read at r.
* :func:`check_gated_delta_chunk` - one chunk of Gated DeltaNet in the WY/UT form, from a given state.
"""

from __future__ import annotations

import torch

from k3lite.exercises import ExerciseFailed, attempt, expect_close


def reference_gated_delta_step(state, k, v, g, beta):
    """S ← exp(g)·S, then move the answer under k a fraction β towards v (against the decayed S)."""
    decayed = torch.exp(torch.as_tensor(g, dtype=state.dtype)) * state
    error = v - decayed.T @ k
    return decayed + beta * torch.outer(k, error)


def reference_cumulative_decay(g):
    """``Γ[r, i] = exp(g[i+1] + ... + g[r])`` for i <= r, 0 above the diagonal."""
    G = torch.cumsum(g, dim=0)
    diff = G[:, None] - G[None, :]
    lower = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp(diff.masked_fill(~lower, float("-inf")))


def _step_cases():
    generator = torch.Generator().manual_seed(5)
    cases = []
    for K, V, g, beta in [(4, 3, -0.7, 0.6), (8, 8, 0.0, 1.0), (6, 5, -30.0, 0.3), (5, 2, -0.05, 0.0)]:
        state = torch.randn(K, V, generator=generator, dtype=torch.float64)
        k = torch.nn.functional.normalize(torch.randn(K, generator=generator, dtype=torch.float64), dim=0)
        v = torch.randn(V, generator=generator, dtype=torch.float64)
        cases.append((state, k, v, g, beta))
    return cases


def _decay_after_delta(state, k, v, g, beta):
    updated = state + beta * torch.outer(k, v - state.T @ k)
    return torch.exp(torch.as_tensor(g, dtype=state.dtype)) * updated


def _error_against_old_state(state, k, v, g, beta):
    decayed = torch.exp(torch.as_tensor(g, dtype=state.dtype)) * state
    return decayed + beta * torch.outer(k, v - state.T @ k)


def check_gated_delta_step(gated_delta_step) -> bool:
    """``gated_delta_step(S [K, V], k [K], v [V], g: float, beta: float) -> new S [K, V]``."""

    def check():
        for state, k, v, g, beta in _step_cases():
            got = gated_delta_step(state.clone(), k, v, g, beta)
            expected = reference_gated_delta_step(state, k, v, g, beta)
            if torch.as_tensor(got).shape != expected.shape:
                raise ExerciseFailed(f"the new state must have shape {tuple(expected.shape)} = [K, V], "
                                     f"got {tuple(torch.as_tensor(got).shape)}.")
            got = torch.as_tensor(got, dtype=torch.float64)
            if g != 0.0 and beta > 0 and torch.allclose(got, _decay_after_delta(state, k, v, g, beta)):
                raise ExerciseFailed("you decay after writing. The gate comes first: S ← exp(g)·S, then the "
                                     "delta correction, so a new association is not shrunk on the step it is written.")
            if g != 0.0 and beta > 0 and torch.allclose(got, _error_against_old_state(state, k, v, g, beta)):
                raise ExerciseFailed("the error v − Sᵀk must be measured against the decayed memory "
                                     "exp(g)·S, the one you are correcting, not the state before the gate.")
            expect_close(got, expected, what=f"new state for K={len(k)}, g={g}, beta={beta}",
                         hint="Decay with exp(g) (g is a log), then add beta · k (v − Sᵀk)ᵀ.")

    return attempt("Gated delta step", check)


def check_cumulative_decay(cumulative_decay) -> bool:
    """``cumulative_decay(g [T]) -> Γ [T, T]`` with ``Γ[r, i]`` the factor from a write at i to a read at r."""

    def check():
        generator = torch.Generator().manual_seed(6)
        for g in (-torch.rand(7, generator=generator, dtype=torch.float64),
                  torch.tensor([0.0, -0.1, -1000.0, -0.2, 0.0, -0.3], dtype=torch.float64),
                  -3.0 * torch.rand(1, generator=generator, dtype=torch.float64)):
            got = torch.as_tensor(cumulative_decay(g.clone()), dtype=torch.float64)
            expected = reference_cumulative_decay(g)
            if got.shape != expected.shape:
                raise ExerciseFailed(f"for g of length {len(g)} expected a [{len(g)}, {len(g)}] matrix, "
                                     f"got {tuple(got.shape)}.")
            if not torch.isfinite(got).all():
                raise ExerciseFailed("some entries are inf or nan: form exp(G_r − G_i) from the difference of "
                                     "the log sums, never exp(G_r)·exp(−G_i), and mask i > r before exp.")
            if torch.triu(got, diagonal=1).abs().max() > 0:
                raise ExerciseFailed("entries above the diagonal (read before write, i > r) must be 0.")
            including_write_step = expected * torch.exp(g)[None, :]
            if len(g) > 1 and torch.allclose(got, including_write_step):
                raise ExerciseFailed("you also multiply by the gate of the writing step i. That gate acts "
                                     "before k_i v_iᵀ is added, so the product runs over steps i+1 … r.")
            expect_close(got, expected, what=f"decay matrix for T={len(g)}", atol=1e-9,
                         hint="Γ[r, i] = exp(G_r − G_i) with G = cumsum(g); the diagonal is 1.")

    return attempt("Cumulative decay", check)


def _chunk_by_tokens(q, k, v, g, beta, state):
    """The definition, token by token from ``state``: o_t = S_tᵀ q_t (no scale)."""
    outputs = []
    for t in range(q.shape[0]):
        state = reference_gated_delta_step(state, k[t], v[t], g[t], beta[t])
        outputs.append(state.T @ q[t])
    return torch.stack(outputs), state


def _chunk_cases():
    """(name, q, k, v, g, beta, state): mild gates, no gate, and a wipe at every token (G reaches -960)."""
    generator = torch.Generator().manual_seed(7)
    cases = []
    for name, chunk, gate in (("mild gates", 6, None), ("g = 0", 5, 0.0), ("g = -30 at every token", 32, -30.0)):
        q = torch.randn(chunk, 4, generator=generator, dtype=torch.float64)
        k = torch.nn.functional.normalize(torch.randn(chunk, 4, generator=generator, dtype=torch.float64), dim=-1)
        v = torch.randn(chunk, 3, generator=generator, dtype=torch.float64)
        g = -torch.rand(chunk, generator=generator, dtype=torch.float64) if gate is None \
            else torch.full((chunk,), gate, dtype=torch.float64)
        beta = torch.rand(chunk, generator=generator, dtype=torch.float64)
        state = torch.randn(4, 3, generator=generator, dtype=torch.float64)
        cases.append((name, q, k, v, g, beta, state))
    return cases


def _chunk_without_decay_to_end(q, k, v, g, beta, state):
    """The WY/UT chunk with one mistake: the writes reach the new state undecayed."""
    G = torch.cumsum(g, dim=0)
    gamma = reference_cumulative_decay(g)
    identity = torch.eye(len(g), dtype=q.dtype)
    ut = torch.linalg.inv(identity + torch.tril(beta[:, None] * (k @ k.T) * gamma, diagonal=-1))
    corrected = ut @ (beta[:, None] * v) - ut @ (beta[:, None] * torch.exp(G)[:, None] * k) @ state
    return torch.exp(G[-1]) * state + k.T @ corrected


def check_gated_delta_chunk(gated_delta_chunk) -> bool:
    """``gated_delta_chunk(q [C,K], k [C,K], v [C,V], g [C], beta [C], state [K,V]) -> (o [C,V], new state [K,V])``.

    No scale on q: ``o_t = S_tᵀ q_t`` as in the token-by-token recurrence.
    """

    def check():
        for name, q, k, v, g, beta, state in _chunk_cases():
            expected_o, expected_state = _chunk_by_tokens(q, k, v, g, beta, state)
            got_o, got_state = gated_delta_chunk(q, k, v, g.clone(), beta, state.clone())
            got_o, got_state = (torch.as_tensor(x, dtype=torch.float64) for x in (got_o, got_state))
            if not (torch.isfinite(got_o).all() and torch.isfinite(got_state).all()):
                raise ExerciseFailed(f"{name}: inf or nan in your result. Form Γ from differences, "
                                     "exp(G_r − G_i) with i > r masked before exp, never exp(G_r)·exp(−G_i).")
            if name == "mild gates" and got_state.shape == expected_state.shape \
                    and torch.allclose(got_state, _chunk_without_decay_to_end(q, k, v, g, beta, state)):
                raise ExerciseFailed("the new state adds each write undecayed: a write at i reaches the chunk's end "
                                     "multiplied by exp(G_C − G_i), so S_C = e^{G_C} S_0 + (e^{G_C − G} ⊙ K)ᵀ V'.")
            expect_close(got_state, expected_state, what=f"{name}: state after the chunk", atol=1e-8,
                         hint="V' = U − W S_0 with A = StrictTril(Diag(β)(K Kᵀ ⊙ Γ)), T = (I + A)⁻¹, "
                              "W = T Diag(β)(e^G ⊙ K), U = T Diag(β) V.")
            expect_close(got_o, expected_o, what=f"{name}: outputs of the chunk", atol=1e-8,
                         hint="O = (e^G ⊙ Q) S_0 + (Q Kᵀ ⊙ Γ) V': the incoming state is read decayed, "
                              "and Γ (zero above the diagonal) masks the scores.")

    return attempt("One chunk of Gated DeltaNet", check)
