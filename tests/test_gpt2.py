"""GPT-2: cached decoding equals recomputation, the Hugging Face round-trip, bad input."""

from __future__ import annotations

import pytest
import torch

from k3lite.models.gpt2 import GPT2, GPT2Config, KVCache, causal_attention

TINY = GPT2Config(vocab_size=97, n_ctx=96, n_layer=2, n_head=4, n_embd=32)


def _model(config=TINY, seed=0):
    torch.manual_seed(seed)
    return GPT2(config).eval()


def _prompt(batch=2, length=5, vocab=TINY.vocab_size, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_causal_attention_matches_sdpa_and_ignores_the_future():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 7, 3, 8, generator=generator) for _ in range(3))
    ours = causal_attention(q, k, v)
    reference = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)
    changed_future = v.clone()
    changed_future[:, 4:] += 10.0
    torch.testing.assert_close(causal_attention(q, k, changed_future)[:, :4], ours[:, :4])


def test_attention_with_cached_keys_equals_the_last_rows_of_full_attention():
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 9, 2, 4, generator=generator) for _ in range(3))
    full = causal_attention(q, k, v)
    torch.testing.assert_close(causal_attention(q[:, 6:], k, v), full[:, 6:], atol=1e-6, rtol=1e-5)


def test_logits_shape_and_cache_return_type():
    model = _model()
    idx = _prompt()
    assert model(idx).shape == (2, 5, TINY.vocab_size)
    logits, cache = model(idx, model.new_cache())
    assert isinstance(cache, KVCache) and cache.length == 5
    assert cache.keys[0].shape == (2, 5, TINY.n_head, TINY.head_dim)
    torch.testing.assert_close(logits, model(idx))


def test_cached_decoding_equals_full_recomputation_over_64_tokens():
    model = _model()
    prompt = _prompt(length=3)
    tokens = model.generate(prompt, 64, temperature=1.0, generator=torch.Generator().manual_seed(5))
    assert tokens.shape == (2, 67)
    cache = model.new_cache()
    logits, cache = model(tokens[:, :3], cache)
    worst = 0.0
    for position in range(3, tokens.shape[1]):
        step_logits, cache = model(tokens[:, position:position + 1], cache)
        full_logits = model(tokens[:, :position + 1])[:, -1]
        worst = max(worst, (step_logits[:, -1] - full_logits).abs().max().item())
    assert worst <= 1e-4, worst


def test_generate_with_and_without_cache_gives_the_same_tokens():
    model = _model()
    prompt = _prompt()
    greedy_cached = model.generate(prompt, 20, temperature=0)
    greedy_plain = model.generate(prompt, 20, temperature=0, use_cache=False)
    assert torch.equal(greedy_cached, greedy_plain)
    sampled = [model.generate(prompt, 20, temperature=0.8, top_k=10, use_cache=use,
                              generator=torch.Generator().manual_seed(7)) for use in (True, False)]
    assert torch.equal(sampled[0], sampled[1])
    assert torch.equal(sampled[0][:, :5], prompt)


def test_top_k_one_is_greedy():
    model = _model()
    prompt = _prompt()
    sampled = model.generate(prompt, 10, temperature=1.3, top_k=1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sampled, model.generate(prompt, 10, temperature=0))


def test_generate_restores_training_mode():
    model = _model().train()
    model.generate(_prompt(), 2, temperature=0)
    assert model.training


def test_generate_restores_training_mode_even_after_an_error(monkeypatch):
    model = _model().train()

    def broken_forward(*args, **kwargs):
        assert not model.training                 # generation itself runs in eval mode
        raise RuntimeError("simulated failure inside the decode loop")

    monkeypatch.setattr(model, "forward", broken_forward)
    with pytest.raises(RuntimeError, match="simulated failure"):
        model.generate(_prompt(), 2, temperature=0)
    assert model.training


def test_hf_round_trip_gives_identical_logits():
    model = _model()
    exported = model.to_hf_state_dict()
    assert exported["transformer.h.0.attn.c_attn.weight"].shape == (TINY.n_embd, 3 * TINY.n_embd)
    assert exported["transformer.h.1.mlp.c_fc.weight"].shape == (TINY.n_embd, 4 * TINY.n_embd)
    assert torch.equal(exported["lm_head.weight"], exported["transformer.wte.weight"])
    loaded = GPT2.from_hf(exported, config=TINY).eval()
    idx = _prompt(length=11)
    assert torch.equal(loaded(idx), model(idx))


def test_from_hf_infers_the_config_and_skips_the_mask_buffer():
    config = GPT2Config(vocab_size=50, n_ctx=16, n_layer=3, n_head=2, n_embd=128)
    model = _model(config)
    exported = {name.removeprefix("transformer."): t for name, t in model.to_hf_state_dict().items()}
    exported["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 16, 16))
    loaded = GPT2.from_hf(exported)
    assert loaded.config == config
    idx = _prompt(length=7, vocab=50)
    assert torch.equal(loaded.eval()(idx), model(idx))


def test_from_hf_reads_conv1d_weights_transposed():
    """A hand-made Conv1D weight [in, out] must act as x @ W, as in Hugging Face's Conv1D."""
    model = _model()
    exported = model.to_hf_state_dict()
    conv_weight = exported["transformer.h.0.mlp.c_fc.weight"]
    x = torch.randn(3, TINY.n_embd)
    expected = x @ conv_weight + exported["transformer.h.0.mlp.c_fc.bias"]
    loaded = GPT2.from_hf(exported, config=TINY)
    torch.testing.assert_close(loaded.blocks[0].mlp.fc(x), expected)


def test_from_hf_rejects_mismatched_weights():
    exported = _model().to_hf_state_dict()
    untied = dict(exported, **{"lm_head.weight": exported["lm_head.weight"] + 1})
    with pytest.raises(ValueError, match="lm_head"):
        GPT2.from_hf(untied, config=TINY)
    missing = {k: v for k, v in exported.items() if "ln_f" not in k}
    with pytest.raises(ValueError, match="missing"):
        GPT2.from_hf(missing, config=TINY)
    with pytest.raises(ValueError, match="shape"):
        GPT2.from_hf(exported, config=GPT2Config(vocab_size=97, n_ctx=96, n_layer=2, n_head=4, n_embd=64))


@pytest.mark.parametrize("bad, message", [
    (torch.tensor([[0, 97]]), r"token ids in \[0, "),
    (torch.tensor([[-1, 3]]), r"token ids in \[0, "),
    (torch.tensor([[1.0, 2.0]]), "dtype"),
    (torch.tensor([[True, False]]), "dtype"),
    (torch.tensor([1, 2, 3]), r"\[B, T\]"),
    (torch.zeros(1, 0, dtype=torch.long), r"\[B, T\]"),
    (torch.zeros(1, 97, dtype=torch.long), "n_ctx"),
])
def test_bad_token_ids_raise_value_error_naming_idx(bad, message):
    with pytest.raises(ValueError, match=message) as error:
        _model()(bad)
    assert "idx" in str(error.value)


def test_cache_plus_new_tokens_longer_than_context_is_rejected():
    model = _model()
    _, cache = model(torch.zeros(1, 90, dtype=torch.long), model.new_cache())
    with pytest.raises(ValueError, match="90 cached"):
        model(torch.zeros(1, 7, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(torch.zeros(1, 90, dtype=torch.long), 7)


def test_cache_from_another_batch_or_model_is_rejected():
    model = _model()
    _, cache = model(torch.zeros(2, 3, dtype=torch.long), model.new_cache())
    with pytest.raises(ValueError, match="batch size"):
        model(torch.zeros(1, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="cache"):
        model(torch.zeros(1, 1, dtype=torch.long), KVCache(5))


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_new_tokens=-1), "max_new_tokens"),
    (dict(max_new_tokens=2, temperature=-0.5), "temperature"),
    (dict(max_new_tokens=2, top_k=0), "top_k"),
])
def test_bad_generate_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        _model().generate(_prompt(), **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(n_embd=30, n_head=4), "n_embd"),
    (dict(n_layer=0), "n_layer"),
    (dict(vocab_size=2.5), "vocab_size"),
])
def test_bad_config_raises(kwargs, name):
    with pytest.raises(ValueError, match=name):
        GPT2Config(**kwargs)


def test_presets():
    assert (GPT2Config().n_layer, GPT2Config().n_head, GPT2Config().n_embd) == (12, 12, 768)
    assert GPT2Config.small() == GPT2Config()
    assert (GPT2Config.medium().n_layer, GPT2Config.medium().n_embd) == (24, 1024)
    assert (GPT2Config.large().n_head, GPT2Config.large().n_embd) == (20, 1280)
    assert (GPT2Config.xl().n_layer, GPT2Config.xl().head_dim) == (48, 64)
    assert GPT2Config.tiny().vocab_size == 256 and GPT2Config.tiny(n_layer=2).n_layer == 2


def test_tiny_model_learns_a_repeating_pattern():
    """A few optimiser steps must lower the loss: gradients flow through every part."""
    torch.manual_seed(0)
    model = GPT2(GPT2Config.tiny(n_layer=1, n_ctx=32, n_embd=32))
    pattern = torch.arange(16).repeat(2)[None, :]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        logits = model(pattern[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), pattern[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
