"""The checkers of chapters 02-04: a right answer passes, wrong ones fail with a hint, a stub is "not attempted"."""

from __future__ import annotations

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch02, ch03, ch04


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("checker", [ch02.check_kv_cache_bytes, ch02.check_decode_step, ch02.check_chunked,
                                     ch03.check_delta_write, ch03.check_residual_factor,
                                     ch03.check_fast_weight_gradient, ch04.check_ut_transform,
                                     ch04.check_delta_chunk, ch04.check_chunk_flops])
def test_a_stub_is_not_attempted(checker, capsys):
    assert checker(_stub) is False
    assert "not attempted yet" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- chapter 02

def test_ch02_kv_cache_bytes():
    assert ch02.check_kv_cache_bytes(lambda n, layers, heads, dim, size: 2 * n * layers * heads * dim * size)
    with pytest.raises(ExerciseFailed, match="two vectors"):
        ch02.check_kv_cache_bytes(lambda n, layers, heads, dim, size: n * layers * heads * dim * size)
    with pytest.raises(ExerciseFailed, match="elements, not bytes"):
        ch02.check_kv_cache_bytes(lambda n, layers, heads, dim, size: 2 * n * layers * heads * dim)
    with pytest.raises(ExerciseFailed, match="kv_cache_bytes"):
        ch02.check_kv_cache_bytes(lambda n, layers, heads, dim, size: 2 * (n + 1) * layers * heads * dim * size)


def _decode_right(state, normalizer, q, k, v):
    phi_q, phi_k = ch02.elu1(q), ch02.elu1(k)
    state = state + torch.outer(phi_k, v)
    normalizer = normalizer + phi_k
    return state.T @ phi_q / (normalizer @ phi_q), state, normalizer


def test_ch02_decode_step_right_and_wrong():
    assert ch02.check_decode_step(_decode_right)

    def unnormalised(state, normalizer, q, k, v):
        _, state, normalizer = _decode_right(state, normalizer, q, k, v)
        return state.T @ ch02.elu1(q), state, normalizer

    with pytest.raises(ExerciseFailed, match="denominator"):
        ch02.check_decode_step(unnormalised)

    def no_feature_map(state, normalizer, q, k, v):
        state = state + torch.outer(k, v)
        normalizer = normalizer + k
        return state.T @ q / (normalizer @ q), state, normalizer

    with pytest.raises(ExerciseFailed, match="ELU"):
        ch02.check_decode_step(no_feature_map)

    def read_before_write(state, normalizer, q, k, v):
        phi_q, phi_k = ch02.elu1(q), ch02.elu1(k)
        o = state.T @ phi_q / (normalizer @ phi_q + 1e-9)
        return o, state + torch.outer(phi_k, v), normalizer + phi_k

    with pytest.raises(ExerciseFailed, match="outputs"):
        ch02.check_decode_step(read_before_write)


def _chunked_right(q, k, v, chunk_size, include_diagonal=True):
    state = torch.zeros(q.shape[1], v.shape[1], dtype=q.dtype)
    outputs = []
    for start in range(0, len(q), chunk_size):
        q_c, k_c, v_c = q[start:start + chunk_size], k[start:start + chunk_size], v[start:start + chunk_size]
        scores = (q_c @ k_c.T).tril(0 if include_diagonal else -1)
        outputs.append(q_c @ state + scores @ v_c)
        state = state + k_c.T @ v_c
    return torch.cat(outputs)


def test_ch02_chunked_right_and_wrong():
    assert ch02.check_chunked(_chunked_right)
    with pytest.raises(ExerciseFailed, match="diagonal"):
        ch02.check_chunked(lambda q, k, v, c: _chunked_right(q, k, v, c, include_diagonal=False))

    def forgets_the_state(q, k, v, chunk_size):
        return torch.cat([(q[s:s + chunk_size] @ k[s:s + chunk_size].T).tril() @ v[s:s + chunk_size]
                          for s in range(0, len(q), chunk_size)])

    with pytest.raises(ExerciseFailed, match="chunk_size=1"):
        ch02.check_chunked(forgets_the_state)

    with pytest.raises(ExerciseFailed, match="outputs o"):
        ch02.check_chunked(lambda q, k, v, c: (_chunked_right(q, k, v, c), torch.zeros(q.shape[1], v.shape[1])))


# ------------------------------------------------------------------------------------------- chapter 03

def test_ch03_delta_write_right_and_wrong():
    assert ch03.check_delta_write(lambda s, k, v, b: s + b * torch.outer(k, v - s.T @ k))
    with pytest.raises(ExerciseFailed, match="additive"):
        ch03.check_delta_write(lambda s, k, v, b: s + b * torch.outer(k, v))
    with pytest.raises(ExerciseFailed, match="beta"):
        ch03.check_delta_write(lambda s, k, v, b: s + torch.outer(k, v - s.T @ k))
    with pytest.raises(ExerciseFailed, match="state after a write"):
        ch03.check_delta_write(lambda s, k, v, b: s - b * torch.outer(k, v - s.T @ k))


def test_ch03_residual_factor_right_and_wrong():
    assert ch03.check_residual_factor(lambda beta, norm_sq: 1 - beta * norm_sq)
    with pytest.raises(ExerciseFailed, match="not a unit vector"):
        ch03.check_residual_factor(lambda beta, norm_sq: 1 - beta)
    with pytest.raises(ExerciseFailed, match="not right"):
        ch03.check_residual_factor(lambda beta, norm_sq: beta * norm_sq)


def test_ch03_fast_weight_gradient_right_and_wrong():
    assert ch03.check_fast_weight_gradient(lambda s, k, v: torch.outer(k, s.T @ k - v))
    with pytest.raises(ExerciseFailed, match="sign"):
        ch03.check_fast_weight_gradient(lambda s, k, v: torch.outer(k, v - s.T @ k))
    with pytest.raises(ExerciseFailed, match="shape"):
        ch03.check_fast_weight_gradient(lambda s, k, v: torch.outer(s.T @ k - v, k))


def test_ch03_fast_weight_gradient_matches_autograd():
    """The checker's expected answer is the real gradient (so a right answer cannot be rejected)."""
    generator = torch.Generator().manual_seed(7)
    state = torch.randn(5, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    k = torch.randn(5, generator=generator, dtype=torch.float64)
    v = torch.randn(3, generator=generator, dtype=torch.float64)
    (0.5 * (state.T @ k - v).pow(2).sum()).backward()
    assert torch.allclose(state.grad, torch.outer(k, state.detach().T @ k - v))


# ------------------------------------------------------------------------------------------- chapter 04

def _ut_right(k, beta):
    a = torch.tril(beta[:, None] * (k @ k.T), diagonal=-1)
    t = torch.eye(len(k), dtype=k.dtype)
    for r in range(1, len(k)):
        t[r] = t[r] - a[r, :r] @ t[:r]
    return t


def test_ch04_ut_transform_right_and_wrong():
    assert ch04.check_ut_transform(_ut_right)
    eye = lambda k: torch.eye(len(k), dtype=k.dtype)  # noqa: E731
    with pytest.raises(ExerciseFailed, match="inverse"):
        ch04.check_ut_transform(lambda k, b: eye(k) + torch.tril(b[:, None] * (k @ k.T), diagonal=-1))
    with pytest.raises(ExerciseFailed, match="strictly lower"):
        ch04.check_ut_transform(lambda k, b: torch.linalg.inv(eye(k) + torch.tril(b[:, None] * (k @ k.T))))
    with pytest.raises(ExerciseFailed, match="β is missing"):
        ch04.check_ut_transform(lambda k, b: _ut_right(k, torch.ones_like(b)))
    with pytest.raises(ExerciseFailed, match="rows"):
        ch04.check_ut_transform(lambda k, b: torch.linalg.inv(eye(k) + torch.tril(k @ k.T * b[None, :], diagonal=-1)))


def _chunk_right(q, k, v, beta, state):
    t = _ut_right(k, beta)
    w, u = t @ (beta[:, None] * k), t @ (beta[:, None] * v)
    corrected = u - w @ state
    return q @ state + (q @ k.T).tril() @ corrected, state + k.T @ corrected


def test_ch04_delta_chunk_right_and_wrong():
    assert ch04.check_delta_chunk(_chunk_right)

    def ignores_state(q, k, v, beta, state):
        o, _ = _chunk_right(q, k, v, beta, torch.zeros_like(state))
        return o, state

    with pytest.raises(ExerciseFailed, match="incoming state"):
        ch04.check_delta_chunk(ignores_state)

    def linear_attention_values(q, k, v, beta, state):
        values = beta[:, None] * v
        return q @ state + (q @ k.T).tril() @ values, state + k.T @ values

    with pytest.raises(ExerciseFailed, match="state after the chunk"):
        ch04.check_delta_chunk(linear_attention_values)


def test_ch04_chunk_flops_right_and_wrong():
    assert ch04.check_chunk_flops(lambda L, C, d: (4 * L * d * d, 4 * L * C * d))
    with pytest.raises(ExerciseFailed, match="swapped"):
        ch04.check_chunk_flops(lambda L, C, d: (4 * L * C * d, 4 * L * d * d))
    with pytest.raises(ExerciseFailed, match="multiply-adds"):
        ch04.check_chunk_flops(lambda L, C, d: (2 * L * d * d, 2 * L * C * d))
    with pytest.raises(ExerciseFailed, match="chunk_flops"):
        ch04.check_chunk_flops(lambda L, C, d: (4 * L * d * d, 4 * C * C * d))


def test_ch04_chunk_flops_reference_matches_k3lite_flops():
    """The exercise's convention is the library's: FLOPs of chunked linear attention."""
    from k3lite.course import flops

    for L, C, d in ((1024, 64, 128), (256, 256, 32)):
        split = flops.linear_attention_chunked(L, d, C)
        assert (split.state, split.intra) == (4 * L * d * d, 4 * L * C * d)
