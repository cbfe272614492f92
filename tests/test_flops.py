"""The analytic FLOP counts equal what FlopCounterMode sees when the k3lite implementations run."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from k3lite.course import flops
from k3lite.ops import kda, linear_attention


def counted(function, *args, **kwargs) -> int:
    with FlopCounterMode(display=False) as counter:
        function(*args, **kwargs)
    return counter.get_total_flops()


@pytest.mark.parametrize("L,C", [(128, 32), (128, 1), (128, 128), (100, 32), (5, 64)])
def test_linear_attention_split_matches_flop_counter(L, C):
    d_k, d_v = 16, 8                      # unequal, so a swapped dimension would show
    q, k = torch.randn(1, L, 1, d_k), torch.randn(1, L, 1, d_k)
    v = torch.randn(1, L, 1, d_v)
    split = flops.linear_attention_chunked(L, d_k, C, d_v)
    assert counted(linear_attention.chunked, q, k, v, chunk_size=C) == split.total
    if L % C == 0:                        # the closed forms of the docstring
        assert split.state == 4 * L * d_k * d_v
        assert split.intra == 2 * L * C * (d_k + d_v)


def test_seed_formulas_are_multiply_adds():
    L, d, C = 4096, 64, 64
    split = flops.linear_attention_chunked(L, d, C)
    assert split.state // 2 == 2 * L * d * d          # the seed's "2 L d^2"
    assert split.intra // 2 == 2 * L * C * d          # the seed's "2 L C d"
    assert flops.full_attention(L, d) // 2 == 2 * L * L * d
    assert flops.full_attention(L, d, causal=True) == 2 * L * L * d
    # Chunking with C = L is full attention; the extra is the state part.
    assert flops.linear_attention_chunked(L, d, L).intra == flops.full_attention(L, d)


def test_full_attention_matches_flop_counter_on_the_masked_quadratic_form():
    L, d_k, d_v = 96, 16, 8
    q, k, v = torch.randn(1, L, 1, d_k), torch.randn(1, L, 1, d_k), torch.randn(1, L, 1, d_v)
    # linear_attention.parallel is (Q K^T ⊙ M) V plus the final state K^T V (2 L d_k d_v more).
    total = counted(linear_attention.parallel, q, k, v)
    assert total == flops.full_attention(L, d_k, d_v) + 2 * L * d_k * d_v


@pytest.mark.parametrize("T,C", [(128, 32), (100, 16), (50, 12), (7, 1)])
def test_kda_matmul_count_matches_flop_counter(T, C):
    d = 16
    q, k, v = (torch.randn(1, T, 1, d) for _ in range(3))
    g, beta = -torch.rand(1, T, 1, d), torch.rand(1, T, 1)
    split = flops.kda_chunked(T, d, C)
    assert counted(kda.chunked, q, k, v, g, beta, chunk_size=C) == split.total
    if T % C == 0 and C & (C - 1) == 0:                  # the closed forms of the docstring
        assert split.state == 6 * T * d * d
        assert split.intra == 4 * T * C * d - 2 * T * d


def test_kimi_linear_formula():
    T, d, C = 4096, 128, 64
    assert flops.kimi_linear_kda(T, d, C) == 6 * T * d * d + 3 * T * C * d + T * C * C
    assert flops.kda_chunked(T, d, C).state == 6 * T * d * d    # the shared d^2 term
    # Per token KDA costs 6d^2 + 3Cd + C^2 against causal attention's 2Td: at T = 4096, d = 128
    # that is 8192 / 992 ~ 8.3x fewer FLOPs, and the gap grows linearly with T.
    ratio = flops.full_attention(T, d, causal=True) / flops.kimi_linear_kda(T, d, C)
    assert ratio == pytest.approx(2 * T * d / (6 * d * d + 3 * C * d + C * C))
    assert 8 < ratio < 9
    longer = flops.full_attention(4 * T, d, causal=True) / flops.kimi_linear_kda(4 * T, d, C)
    assert longer == pytest.approx(4 * ratio)


def test_bad_sizes():
    with pytest.raises(ValueError, match="C must be >= 1"):
        flops.linear_attention_chunked(10, 8, 0)
