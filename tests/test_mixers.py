"""k3lite.models.mixers: the small MQAR models of chapter 06 (shapes, causality, gates, bad input, learning)."""

from __future__ import annotations

import pytest
import torch

from k3lite.data import mqar_batch
from k3lite.models import mixers

TINY = dict(d_model=16, num_layers=1, num_heads=2, vocab_size=32, chunk_size=4)


@pytest.mark.parametrize("mechanism", mixers.MECHANISMS)
def test_logits_shape_and_gradients_reach_every_parameter(mechanism):
    torch.manual_seed(0)
    model = mixers.build(mechanism, **TINY)
    ids = torch.randint(0, 32, (3, 11))                 # T = 11: not a multiple of the chunk size
    logits = model(ids)
    assert logits.shape == (3, 11, 32)
    assert torch.isfinite(logits).all()
    logits.square().mean().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, f"no gradient reaches {missing}"


@pytest.mark.parametrize("mechanism", mixers.MECHANISMS)
def test_causal_the_future_does_not_change_the_past(mechanism):
    torch.manual_seed(1)
    model = mixers.build(mechanism, **TINY).eval()
    ids = torch.randint(0, 32, (2, 13))
    changed = ids.clone()
    changed[:, 9:] = (changed[:, 9:] + 7) % 32
    with torch.no_grad():
        before, after = model(ids), model(changed)
    assert torch.allclose(before[:, :9], after[:, :9], atol=1e-5)
    assert not torch.allclose(before[:, 9:], after[:, 9:], atol=1e-3)


@pytest.mark.parametrize("mechanism", mixers.RECURRENT)
def test_chunk_size_does_not_change_the_model(mechanism):
    torch.manual_seed(2)
    small_chunks = mixers.build(mechanism, **TINY).eval()
    one_chunk = mixers.build(mechanism, **{**TINY, "chunk_size": 64}).eval()
    one_chunk.load_state_dict(small_chunks.state_dict())
    ids = torch.randint(0, 32, (2, 19))
    with torch.no_grad():
        assert torch.allclose(small_chunks(ids), one_chunk(ids), atol=1e-4)


def test_gates_have_the_documented_shapes_and_range():
    torch.manual_seed(3)
    ids = torch.randint(0, 32, (2, 7))
    gdn = mixers.build("gated_delta_rule", **TINY)
    kda = mixers.build("kda", **TINY)
    (g_scalar,) = gdn.log_decays(ids)
    (g_channel,) = kda.log_decays(ids)
    assert g_scalar.shape == (2, 7, 2)                 # [B, T, H]
    assert g_channel.shape == (2, 7, 2, 8)             # [B, T, H, K]
    for g in (g_scalar, g_channel):
        assert (g <= 0).all() and (g >= mixers.LOG_DECAY_FLOOR).all()
    with pytest.raises(ValueError, match="no decay gate"):
        mixers.build("delta_rule", **TINY).log_decays(ids)


def test_kda_with_equal_channels_is_the_gated_delta_model():
    """Copy the GDN weights into a KDA model whose decay rows repeat per channel: same logits."""
    torch.manual_seed(4)
    gdn = mixers.build("gated_delta_rule", **TINY).eval()
    kda = mixers.build("kda", **TINY).eval()
    state = gdn.state_dict()
    head_dim = TINY["d_model"] // TINY["num_heads"]
    for name, tensor in list(state.items()):
        if ".decay." in name:
            state[name] = tensor.repeat_interleave(head_dim, dim=0)
    kda.load_state_dict(state)
    ids = torch.randint(0, 32, (2, 9))
    with torch.no_grad():
        assert torch.allclose(gdn(ids), kda(ids), atol=1e-5)


@pytest.mark.parametrize("bad, match", [
    (dict(mechanism="mamba"), "mechanism must be one of"),
    (dict(mechanism="kda", d_model=30, num_heads=4), "divisible by num_heads"),
    (dict(mechanism="kda", num_layers=0), "num_layers must be >= 1"),
])
def test_bad_config_raises_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        mixers.MixerConfig(**bad)


def test_ids_must_be_two_dimensional():
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        mixers.build("softmax", **TINY)(torch.zeros(5, dtype=torch.long))


def test_softmax_model_learns_a_small_mqar():
    """The training helper works end to end: 4 pairs are learned well above chance (1/16)."""
    _, result = mixers.train_on_mqar("softmax", 4, steps=120, batch_size=32, lr=1e-2, seed=0, eval_size=64,
                                     d_model=32, num_layers=1, num_heads=1, vocab_size=32)
    assert result.accuracy > 0.5
    assert result.parameters == mixers.num_parameters(mixers.build("softmax", d_model=32, num_layers=1,
                                                                   num_heads=1, vocab_size=32))


def test_training_is_reproducible():
    options = dict(steps=5, batch_size=8, seed=3, eval_size=16, **TINY)
    _, first = mixers.train_on_mqar("kda", 3, **options)
    _, second = mixers.train_on_mqar("kda", 3, **options)
    assert first.final_loss == second.final_loss and first.accuracy == second.accuracy


def test_mqar_batch_fits_the_model_vocabulary():
    inputs, _ = mqar_batch(2, 5, vocab_size=32, generator=torch.Generator().manual_seed(0))
    assert mixers.build("linear_attention", **TINY)(inputs).shape == (2, 15, 32)
