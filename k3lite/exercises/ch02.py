"""Checkers for chapter 02 (linear attention).

1. :func:`check_kv_cache_bytes` — the size of a KV cache, the memory linear attention removes.
2. :func:`check_decode_step` — one decode step of normalised linear attention with the ELU+1 map.
3. :func:`check_chunked` — the chunked form ``O = Q S + (Q Kᵀ ⊙ M) V``, ``S ← S + Kᵀ V``.
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


# ---------------------------------------------------------------- exercise 2: one decode step

def _decode_reference(state, normalizer, q, k, v):
    phi_q, phi_k = elu1(q), elu1(k)
    state = state + torch.outer(phi_k, v)
    normalizer = normalizer + phi_k
    return state.T @ phi_q / (normalizer @ phi_q), state, normalizer


def _run_steps(step, q, k, v):
    state = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype)
    normalizer = torch.zeros(q.shape[1], dtype=q.dtype)
    outputs = []
    for t in range(q.shape[0]):
        o, state, normalizer = step(state, normalizer, q[t], k[t], v[t])
        outputs.append(o)
    return torch.stack(outputs), state, normalizer


def check_decode_step(decode_step) -> bool:
    """``decode_step(state [K,V], normalizer [K], q [K], k [K], v [V]) -> (o [V], state, normalizer)``."""

    def check():
        generator = torch.Generator().manual_seed(2)
        q = torch.randn(6, 5, generator=generator, dtype=torch.float64)
        k = torch.randn(6, 5, generator=generator, dtype=torch.float64)
        v = torch.randn(6, 3, generator=generator, dtype=torch.float64)
        expected, expected_state, expected_norm = _run_steps(_decode_reference, q, k, v)
        got, got_state, got_norm = _run_steps(decode_step, q, k, v)
        expect_close(got_state, expected_state, what="state after 6 steps", atol=1e-8,
                     hint="The state gathers φ(k) vᵀ for every token, with φ(x) = ELU(x) + 1.")
        expect_close(got_norm, expected_norm, what="normalizer after 6 steps", atol=1e-8,
                     hint="The normalizer z gathers φ(k) for every token.")
        unnormalised = torch.stack(list(_unnormalised(q, k, v)))
        if torch.as_tensor(got).shape == unnormalised.shape and torch.allclose(
                torch.as_tensor(got, dtype=torch.float64), unnormalised, atol=1e-8):
            raise ExerciseFailed("your output is Sᵀφ(q) without the denominator: divide by zᵀφ(q).")
        expect_close(got, expected, what="outputs of 6 decode steps", atol=1e-8,
                     hint="Write the current token first, then read with φ(q) and divide by zᵀφ(q).")

    return attempt("Exercise 2 (decode step)", check)


def _unnormalised(q, k, v):
    state = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype)
    for t in range(q.shape[0]):
        state = state + torch.outer(elu1(k[t]), v[t])
        yield state.T @ elu1(q[t])


# ---------------------------------------------------------------- exercise 3: chunked form

def _recurrent_reference(q, k, v):
    state = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype)
    outputs = []
    for t in range(q.shape[0]):
        state = state + torch.outer(k[t], v[t])
        outputs.append(state.T @ q[t])
    return torch.stack(outputs)


def check_chunked(chunked) -> bool:
    """``chunked(q [T,K], k [T,K], v [T,V], chunk_size) -> o [T,V]`` (no feature map, no scale)."""

    def check():
        generator = torch.Generator().manual_seed(3)
        q = torch.randn(12, 4, generator=generator, dtype=torch.float64)
        k = torch.randn(12, 4, generator=generator, dtype=torch.float64)
        v = torch.randn(12, 3, generator=generator, dtype=torch.float64)
        expected = _recurrent_reference(q, k, v)
        for chunk_size in (1, 3, 4, 12):
            got = chunked(q, k, v, chunk_size)
            if isinstance(got, (tuple, list)):
                raise ExerciseFailed("chunked returned a tuple: return the outputs o [T, V] only, not the state.")
            if torch.as_tensor(got).shape == expected.shape:
                diff = torch.as_tensor(got, dtype=torch.float64) - expected
                own_token = (q * k).sum(-1, keepdim=True) * v
                if torch.allclose(diff, -own_token, atol=1e-8):
                    raise ExerciseFailed(f"chunk_size={chunk_size}: each token misses its own key-value pair; "
                                         "the causal mask M must include the diagonal.")
            expect_close(got, expected, what=f"chunked output with chunk_size={chunk_size}", atol=1e-8,
                         hint="Per chunk: O = Q S + (Q Kᵀ ⊙ M) V with the state S of the chunks before, "
                              "then S ← S + Kᵀ V.")

    return attempt("Exercise 3 (chunked form)", check)
