"""The checkers of chapters 02-04: a right answer passes, wrong ones fail with a targeted hint, a stub is
"not attempted"."""

from __future__ import annotations

import pytest
import torch

from k3lite.exercises import ExerciseFailed, ch02, ch03, ch04


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("checker", [ch02.check_kv_cache_bytes, ch02.check_split_relu_decode_step,
                                     ch02.check_interference_prediction, ch03.check_overwrite_prediction,
                                     ch03.check_residual_factor, ch03.check_decayed_delta_write,
                                     ch04.check_repeated_key_prediction, ch04.check_ut_transform])
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


def _split_relu_step(state, normalizer, q, k, v, feature_map=ch02.split_relu):
    phi_q, phi_k = feature_map(q), feature_map(k)
    state = state + torch.outer(phi_k, v)
    normalizer = normalizer + phi_k
    return state.T @ phi_q / (normalizer @ phi_q), state, normalizer


def test_ch02_split_relu_is_a_non_negative_map_of_twice_the_width():
    x = torch.tensor([1.5, -2.0, 0.0])
    assert torch.equal(ch02.split_relu(x), torch.tensor([1.5, 0.0, 0.0, 0.0, 2.0, 0.0]))


def test_ch02_split_relu_decode_step_right_and_wrong():
    assert ch02.check_split_relu_decode_step(_split_relu_step)

    def unnormalised(state, normalizer, q, k, v):
        _, state, normalizer = _split_relu_step(state, normalizer, q, k, v)
        return state.T @ ch02.split_relu(q), state, normalizer

    with pytest.raises(ExerciseFailed, match="denominator"):
        ch02.check_split_relu_decode_step(unnormalised)

    def relu_only(state, normalizer, q, k, v):  # K features: the state cannot be [2K, V]
        return _split_relu_step(state, normalizer, q, k, v, feature_map=torch.relu)

    with pytest.raises(ExerciseFailed, match="2K rows"):
        ch02.check_split_relu_decode_step(relu_only)

    def negative_part_unflipped(state, normalizer, q, k, v):
        return _split_relu_step(state, normalizer, q, k, v,
                                feature_map=lambda x: torch.cat([torch.relu(x), torch.relu(x) - x]))

    with pytest.raises(ExerciseFailed, match="state after 6 steps"):
        ch02.check_split_relu_decode_step(lambda s, z, q, k, v: _split_relu_step(s, z, q, k, 2 * v))
    assert ch02.check_split_relu_decode_step(negative_part_unflipped)  # relu(x) − x = relu(−x): the same map


def test_ch02_interference_prediction_range_and_explanations(capsys):
    measured = ch02.additive_retrieval_error()
    assert abs(measured - (19 / 16) ** 0.5) < 0.1  # the checker's measurement is the textbook estimate
    assert ch02.check_interference_prediction(lambda: (19 / 16) ** 0.5, measured=measured)
    assert "√(19/16)" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="orthogonal"):
        ch02.check_interference_prediction(lambda: 0.0)
    with pytest.raises(ExerciseFailed, match="more than 30%"):
        ch02.check_interference_prediction(lambda: 0.3)
    with pytest.raises(ExerciseFailed, match="far from"):
        ch02.check_interference_prediction(lambda: 1.1, measured=0.2)


# ------------------------------------------------------------------------------------------- chapter 03

def test_ch03_overwrite_prediction_range_and_explanations(capsys):
    expected = ch03.overwrite_error()
    assert abs(expected - (1 / 16 + 1 / 4) ** 0.5) < 0.03
    assert ch03.check_overwrite_prediction(lambda: 0.56, measured=0.58)
    assert "½v_new + ¼v_old" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="β = 1"):
        ch03.check_overwrite_prediction(lambda: 0.0)
    with pytest.raises(ExerciseFailed, match="a quarter of v_old"):
        ch03.check_overwrite_prediction(lambda: 0.5)
    with pytest.raises(ExerciseFailed, match="far from"):
        ch03.check_overwrite_prediction(lambda: 0.56, measured=0.0)


def test_ch03_residual_factor_right_and_wrong():
    assert ch03.check_residual_factor(lambda beta, norm_sq: 1 - beta * norm_sq)
    with pytest.raises(ExerciseFailed, match="not a unit vector"):
        ch03.check_residual_factor(lambda beta, norm_sq: 1 - beta)
    with pytest.raises(ExerciseFailed, match="not right"):
        ch03.check_residual_factor(lambda beta, norm_sq: beta * norm_sq)


def _decayed_right(state, k, v, beta, weight_decay):
    return (1 - beta * weight_decay) * state + beta * torch.outer(k, v - state.T @ k)


def test_ch03_decayed_delta_write_right_and_wrong():
    assert ch03.check_decayed_delta_write(_decayed_right)
    with pytest.raises(ExerciseFailed, match="had no effect"):
        ch03.check_decayed_delta_write(lambda s, k, v, b, wd: s + b * torch.outer(k, v - s.T @ k))
    with pytest.raises(ExerciseFailed, match="1 − βλ"):
        ch03.check_decayed_delta_write(lambda s, k, v, b, wd: (1 - wd) * s + b * torch.outer(k, v - s.T @ k))
    with pytest.raises(ExerciseFailed, match="sign"):
        ch03.check_decayed_delta_write(lambda s, k, v, b, wd: _decayed_right(s, k, v, b, -wd))

    def decay_then_read(state, k, v, beta, weight_decay):
        decayed = (1 - beta * weight_decay) * state
        return decayed + beta * torch.outer(k, v - decayed.T @ k)

    with pytest.raises(ExerciseFailed, match="Gated DeltaNet"):
        ch03.check_decayed_delta_write(decay_then_read)


def test_ch03_decayed_delta_write_is_a_gradient_step():
    """The checker's expected answer is a real gradient step (so a right answer cannot be rejected)."""
    generator = torch.Generator().manual_seed(7)
    state = torch.randn(5, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    k = torch.nn.functional.normalize(torch.randn(5, generator=generator, dtype=torch.float64), dim=0)
    v = torch.randn(3, generator=generator, dtype=torch.float64)
    beta, weight_decay = 0.4, 0.25
    (0.5 * (state.T @ k - v).pow(2).sum() + 0.5 * weight_decay * state.pow(2).sum()).backward()
    stepped = state.detach() - beta * state.grad
    assert torch.allclose(stepped, _decayed_right(state.detach(), k, v, beta, weight_decay))


# ------------------------------------------------------------------------------------------- chapter 04

def test_ch04_repeated_key_prediction_range_and_explanations(capsys):
    right = [[1, 0, 0, 0], [-1, 1, 0, 0], [0, -1, 1, 0], [0, 0, -1, 1]]
    assert ch04.check_repeated_key_prediction(lambda: right, measured=ch04.repeated_key_t())
    assert "v_r − v_(r−1)" in capsys.readouterr().out
    assert ch04.check_repeated_key_prediction(lambda: torch.tensor(right) + 0.04)
    with pytest.raises(ExerciseFailed, match="not zero"):
        ch04.check_repeated_key_prediction(lambda: torch.eye(4))
    with pytest.raises(ExerciseFailed, match="I − A"):
        ch04.check_repeated_key_prediction(lambda: torch.eye(4) - torch.ones(4, 4).tril(-1))
    with pytest.raises(ExerciseFailed, match="4, 4"):
        ch04.check_repeated_key_prediction(lambda: [[1, 0], [-1, 1]])


def _decayed_t(k, beta, decay):
    positions = torch.arange(len(k), dtype=k.dtype)
    decays = decay ** (positions[:, None] - positions[None, :]).clamp(min=0)
    a = torch.tril(beta[:, None] * decays * (k @ k.T), diagonal=-1)
    t = torch.eye(len(k), dtype=k.dtype)
    for r in range(1, len(k)):
        t[r] = t[r] - a[r, :r] @ t[:r]
    return t


def test_ch04_decayed_t_gives_the_recurrence_corrections():
    """T Diag(β) V are the u_t the decayed delta rule writes from a zero state: the checker's reference is right."""
    generator = torch.Generator().manual_seed(5)
    k = torch.nn.functional.normalize(torch.randn(7, 4, generator=generator, dtype=torch.float64), dim=-1)
    v = torch.randn(7, 3, generator=generator, dtype=torch.float64)
    beta = torch.rand(7, generator=generator, dtype=torch.float64)
    decay = 0.7
    state, corrections = torch.zeros(4, 3, dtype=torch.float64), []
    for k_t, v_t, b_t in zip(k, v, beta):
        u_t = b_t * (v_t - decay * state.T @ k_t)
        corrections.append(u_t)
        state = decay * state + torch.outer(k_t, u_t)
    assert torch.allclose(_decayed_t(k, beta, decay) @ (beta[:, None] * v), torch.stack(corrections))


def test_ch04_ut_transform_right_and_wrong():
    assert ch04.check_ut_transform(_decayed_t)
    eye = lambda k: torch.eye(len(k), dtype=k.dtype)  # noqa: E731
    with pytest.raises(ExerciseFailed, match="inverse"):
        ch04.check_ut_transform(lambda k, b, g: torch.linalg.inv(_decayed_t(k, b, g)))
    with pytest.raises(ExerciseFailed, match="no effect"):
        ch04.check_ut_transform(lambda k, b, g: _decayed_t(k, b, 1.0))
    with pytest.raises(ExerciseFailed, match="one factor γ too few"):
        ch04.check_ut_transform(lambda k, b, g: torch.linalg.inv(
            eye(k) + torch.tril(torch.linalg.inv(_decayed_t(k, b, g)) - eye(k), diagonal=-1) / g))
    with pytest.raises(ExerciseFailed, match="grows with the distance"):
        ch04.check_ut_transform(lambda k, b, g: _decayed_t(k, b, 1 / g))
    with pytest.raises(ExerciseFailed, match="β is missing"):
        ch04.check_ut_transform(lambda k, b, g: _decayed_t(k, torch.ones_like(b), g))
