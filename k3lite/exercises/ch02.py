"""Checkers for chapter 02 (linear attention).

1. :func:`check_kv_cache_bytes` — the size of a KV cache, the memory linear attention removes.
2. :func:`check_split_relu_decode_step` — a transfer: one decode step of normalised linear attention with
   another feature map, φ(x) = [ReLU(x), ReLU(−x)].
3. :func:`check_interference_prediction` — a prediction: the retrieval error after 20 additive writes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal


def elu1(x: torch.Tensor) -> torch.Tensor:
    """The feature map of the 2020 paper: ELU(x) + 1, positive everywhere."""
    return F.elu(x) + 1.0


# ---------------------------------------------------------------- exercise 1: KV cache bytes

# (num_tokens, layers, heads, head_dim, bytes_per_element): an fp32 toy first (with 4 bytes per element,
# "forgot the bytes" and "forgot K or V" give different numbers), then GPT-2 small in fp16, a long one.
_CACHE_CASES = [(7, 3, 5, 16, 4), (1, 12, 12, 64, 2), (1024, 12, 12, 64, 2), (100_000, 24, 16, 128, 2)]


def _kv_cache_bytes_reference(num_tokens, layers, heads, head_dim, bytes_per_element):
    return 2 * num_tokens * layers * heads * head_dim * bytes_per_element


def check_kv_cache_bytes(kv_cache_bytes) -> bool:
    """``kv_cache_bytes(num_tokens, layers, heads, head_dim, bytes_per_element) -> int``."""

    def check():
        for case in _CACHE_CASES:
            got = kv_cache_bytes(*case)
            expected = _kv_cache_bytes_reference(*case)
            if got == expected // 2:
                raise ExerciseFailed(f"for {case} you got half the answer: the cache stores two vectors per "
                                     "token, per layer and per head (a key and a value).")
            if got == expected // case[4]:
                raise ExerciseFailed(f"for {case} you counted elements, not bytes: multiply by bytes_per_element.")
            expect_equal(got, expected, what=f"kv_cache_bytes{case}",
                         hint="Count keys and values, for every token, layer and head, head_dim elements each.")

    return attempt("Exercise 1 (KV cache bytes)", check)


# ---------------------------------------------------------------- exercise 2: another feature map

def split_relu(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = [ReLU(x), ReLU(−x)]: 2K non-negative features for a K-dimensional input."""
    return torch.cat([F.relu(x), F.relu(-x)], dim=-1)


def _decode_reference(state, normalizer, q, k, v, feature_map=split_relu):
    phi_q, phi_k = feature_map(q), feature_map(k)
    state = state + torch.outer(phi_k, v)
    normalizer = normalizer + phi_k
    return state.T @ phi_q / (normalizer @ phi_q), state, normalizer


def _run_steps(step, q, k, v, features):
    state = torch.zeros(features, v.shape[1], dtype=q.dtype)
    normalizer = torch.zeros(features, dtype=q.dtype)
    outputs = []
    for t in range(q.shape[0]):
        o, state, normalizer = step(state, normalizer, q[t], k[t], v[t])
        outputs.append(torch.as_tensor(o))
    return torch.stack(outputs), state, normalizer


def check_split_relu_decode_step(decode_step) -> bool:
    """``decode_step(state [2K,V], normalizer [2K], q [K], k [K], v [V]) -> (o [V], state, normalizer)``:
    one decode step of normalised linear attention with the feature map φ(x) = [ReLU(x), ReLU(−x)]."""

    def check():
        generator = torch.Generator().manual_seed(3)  # every step's denominator is well away from zero
        q = torch.randn(6, 6, generator=generator, dtype=torch.float64)
        k = torch.randn(6, 6, generator=generator, dtype=torch.float64)
        v = torch.randn(6, 3, generator=generator, dtype=torch.float64)
        key_dim = q.shape[1]
        expected, expected_state, expected_norm = _run_steps(_decode_reference, q, k, v, 2 * key_dim)
        try:
            got, got_state, got_norm = _run_steps(decode_step, q, k, v, 2 * key_dim)
        except NotImplementedError:
            raise
        except RuntimeError as error:  # a shape mismatch: the state was treated as [K, V]
            raise ExerciseFailed(f"the step failed on a state of shape [2K, V] = {(2 * key_dim, v.shape[1])}: "
                                 f"{error}. φ doubles the key dimension, so the state has 2K rows.") from error
        if tuple(torch.as_tensor(got_state).shape) != tuple(expected_state.shape):
            raise ExerciseFailed(f"the state has shape {tuple(torch.as_tensor(got_state).shape)}; with 2K features "
                                 f"it is [2K, V] = {tuple(expected_state.shape)}.")
        expect_close(got_state, expected_state, what="state after 6 steps", atol=1e-8,
                     hint="The state gathers φ(k) vᵀ with φ(k) = [ReLU(k), ReLU(−k)]: the positive parts first, "
                          "then the negative parts with their sign flipped.")
        expect_close(got_norm, expected_norm, what="normalizer after 6 steps", atol=1e-8,
                     hint="The normalizer z gathers φ(k) for every token.")
        unnormalised = torch.stack([s.T @ split_relu(q_t) for s, q_t in zip(_states(k, v), q)])
        if got.shape == unnormalised.shape and torch.allclose(got.double(), unnormalised, atol=1e-8):
            raise ExerciseFailed("your output is Sᵀφ(q) without the denominator: divide by zᵀφ(q).")
        expect_close(got, expected, what="outputs of 6 decode steps", atol=1e-8,
                     hint="Write the current token first, then read with φ(q) and divide by zᵀφ(q).")

    return attempt("Transfer: a decode step with another feature map", check)


def _states(k, v):
    state = torch.zeros(2 * k.shape[1], v.shape[1], dtype=k.dtype)
    for t in range(k.shape[0]):
        state = state + torch.outer(split_relu(k[t]), v[t])
        yield state


# ---------------------------------------------------------------- exercise 3: a prediction

INTERFERENCE_TOLERANCE = 0.3  # a prediction within 30 % of the measured error is accepted


def additive_retrieval_error(num_pairs: int = 20, key_dim: int = 16, trials: int = 200, seed: int = 0) -> float:
    """Mean relative error ‖Sᵀk_j − v_j‖ / ‖v_j‖ of reading every pair back from S = Σ k_i v_iᵀ (random unit
    keys, Gaussian values of width ``key_dim``), averaged over the pairs and ``trials`` draws."""
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for _ in range(trials):
        keys = torch.randn(num_pairs, key_dim, generator=generator, dtype=torch.float64)
        keys = keys / keys.norm(dim=-1, keepdim=True)
        values = torch.randn(num_pairs, key_dim, generator=generator, dtype=torch.float64)
        state = keys.T @ values
        total += ((keys @ state - values).norm(dim=-1) / values.norm(dim=-1)).mean().item()
    return total / trials


def check_interference_prediction(predict, measured: float | None = None) -> bool:
    """``predict() -> float``: the mean relative retrieval error after 20 additive writes with random unit keys
    into a 16-dimensional state. Accepted within ``INTERFERENCE_TOLERANCE`` of the measurement."""

    def check():
        predicted = float(predict())
        actual = additive_retrieval_error()
        if measured is not None and abs(measured - actual) > 0.1:
            raise ExerciseFailed(f"the measured {measured:.3f} is far from the checker's {actual:.3f}: write all 20 "
                                 "pairs with S = Σ k vᵀ, read each back with its own key, and average "
                                 "‖Sᵀk − v‖ / ‖v‖ over pairs and trials.")
        explanation = (f"measured {actual:.2f}. Reading k_j returns v_j plus Σ_(i≠j) (k_i·k_j) v_i: 19 stray "
                       "terms, each weighted by a dot product of two random unit vectors, of size about 1/√16. "
                       f"They add like a random walk, so the error is about √(19/16) = {(19 / 16) ** 0.5:.2f}: "
                       "the noise is as large as the signal, and it grows with every write.")
        if abs(predicted - actual) > INTERFERENCE_TOLERANCE * actual:
            hint = ""
            if predicted < 0.1:
                hint = " A 16-dimensional state has room for 16 orthogonal keys at most, and random keys are not " \
                       "orthogonal."
            elif abs(predicted - 19 / 16) < 0.01 or abs(predicted - 19 / 4) < 0.01:
                hint = " Independent stray terms add in squares: take the square root of their total variance."
            raise ExerciseFailed(f"your prediction {predicted:.2f} is more than {INTERFERENCE_TOLERANCE:.0%} away: "
                                 f"{explanation}{hint}")
        print(f"your prediction {predicted:.2f}, {explanation}")

    return attempt("Prediction: interference after 20 additive writes", check)
