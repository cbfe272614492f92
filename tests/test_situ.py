"""SiTU reference (k3lite.ops.situ): the formula, its limits and bounds, input checks."""

import math

import pytest
import torch

from k3lite.ops.situ import situ, situ_glu


def test_situ_matches_the_formula_pointwise():
    for x in (-7.5, -1.0, 0.0, 0.3, 2.0, 12.0):
        expected = 4.0 * math.tanh(x / 4.0) / (1.0 + math.exp(-x))
        assert situ(torch.tensor([x], dtype=torch.float64), 4.0).item() == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_large_beta_recovers_silu():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    assert torch.allclose(situ(x, 1e6), torch.nn.functional.silu(x), atol=1e-9)
    assert not torch.allclose(situ(x, 4.0), torch.nn.functional.silu(x), atol=1e-2)


def test_gated_output_is_bounded_by_beta1_times_beta2():
    gate = torch.tensor([1e4, 50.0, -1e4]).double()
    up = torch.tensor([1e4, -1e4, 1e4]).double()
    h = situ_glu(gate, up, backend="torch")
    assert h.abs().max().item() <= 4.0 * 25.0 + 1e-9
    assert h[0].item() == pytest.approx(100.0)


def test_gated_equals_situ_times_capped_up():
    gen = torch.Generator().manual_seed(0)
    gate, up = 5 * torch.randn(64, generator=gen), 30 * torch.randn(64, generator=gen)
    expected = situ(gate, 4.0) * 25.0 * torch.tanh(up / 25.0)
    assert torch.allclose(situ_glu(gate, up, backend="torch"), expected)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), -float("inf")])
def test_beta_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError, match="beta must be a positive finite number"):
        situ(torch.ones(3), bad)
    with pytest.raises(ValueError, match="beta1 must be a positive finite number"):
        situ_glu(torch.ones(3), torch.ones(3), beta1=bad, backend="torch")
    with pytest.raises(ValueError, match="beta2 must be a positive finite number"):
        situ_glu(torch.ones(3), torch.ones(3), beta2=bad, backend="torch")


def test_beta_that_is_not_a_number_names_beta():
    with pytest.raises(ValueError, match="beta must be a positive finite number"):
        situ(torch.ones(3), "four")


def test_shapes_and_backend_are_checked():
    with pytest.raises(ValueError, match="up"):
        situ_glu(torch.ones(3), torch.ones(4), backend="torch")
    with pytest.raises(ValueError, match="backend"):
        situ_glu(torch.ones(3), torch.ones(3), backend="cuda")
    with pytest.raises(ValueError, match="gate"):
        situ_glu(torch.ones(3, dtype=torch.long), torch.ones(3), backend="torch")
