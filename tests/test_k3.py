"""The K3 model: configuration, assembly, AttnRes and MoE details, cached decoding, training."""


import pytest
import torch

from k3lite import data
from k3lite.layers.attnres import AttnResMixer
from k3lite.layers.kda_layer import KDALayer
from k3lite.layers.mla import MLA
from k3lite.layers.moe import GatedMLP, MoE
from k3lite.models.k3 import K3, K3Cache, K3Config
from k3lite.train import train


def _model(seed=0, **changes):
    """A tiny K3 whose AttnRes queries and weights are far from their initial values."""
    torch.manual_seed(seed)
    model = K3(K3Config.tiny(init_std=0.1, **changes)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("query"):
                p.normal_(std=1.0)
    return model


def test_published_config_layout():
    config = K3Config.published()
    assert config.num_layers == 93 and config.num_macrocycles == 23 and config.has_final_mla
    assert (config.num_kda_layers, config.num_mla_layers, config.num_moe_layers) == (69, 24, 92)
    types = config.layer_types
    assert [i for i, kind in enumerate(types) if kind == "mla"] == list(range(3, 92, 4)) + [92]
    assert types[:4] == ("kda", "kda", "kda", "mla")
    assert config.ffn_type(0) == "dense" and config.ffn_type(1) == "moe"
    assert (config.num_shared_experts * config.expert_width, config.latent_size) == (6144, 3584)


@pytest.mark.parametrize("changes, field", [
    (dict(num_layers=6), "num_layers"),
    (dict(num_layers=7), "num_layers"),
    (dict(top_k=9), "top_k"),
    (dict(num_dense_layers=6), "num_dense_layers"),
    (dict(use_rope=True, rope_dim=7), "rope_dim"),
    (dict(gate_form="mamba"), "gate_form"),
    (dict(gate_lower_bound=1.0), "gate_lower_bound"),
    (dict(activation="relu"), "activation"),
    (dict(hidden_size=0), "hidden_size"),
    (dict(kv_lora_rank=-4), "kv_lora_rank"),
    (dict(latent_size=0), "latent_size"),
    (dict(attnres_block_size=0), "attnres_block_size"),
    (dict(num_shared_experts=-1), "num_shared_experts"),
])
def test_config_validation_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        K3Config.tiny(**changes)


def test_assembly_follows_the_config():
    config = K3Config.tiny(num_layers=9)
    model = K3(config)
    kinds = [type(layer.mixer) for layer in model.layers]
    assert kinds == [KDALayer] * 3 + [MLA] + [KDALayer] * 3 + [MLA, MLA]
    assert isinstance(model.layers[0].ffn, GatedMLP) and all(isinstance(layer.ffn, MoE) for layer in model.layers[1:])
    assert model.lm_head.weight is not model.embed.weight
    tied = K3(K3Config.tiny(tie_embeddings=True))
    assert tied.lm_head.weight is tied.embed.weight


def test_attnres_weights_and_moe_loads_are_reported():
    model = _model()                      # 5 layers, AttnRes blocks of 2 layers = 4 sub-layers
    idx = torch.randint(0, 256, (2, 7))
    out = model.run(idx, collect=True)
    assert out.logits.shape == (2, 7, 256)
    # one mixing point per sub-layer plus the final one; sources: embedding, finished blocks, partial block
    assert [w.shape[0] for w in out.attnres_weights] == [1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4]
    for weights in out.attnres_weights:
        torch.testing.assert_close(weights.sum(0), torch.ones(2, 7))
    assert sorted(out.moe_loads) == [1, 2, 3, 4]
    assert all(int(load.sum()) == 2 * 7 * 2 for load in out.moe_loads.values())
    torch.testing.assert_close(model(idx), out.logits)


def test_attnres_module_is_a_constructor_argument_and_can_be_switched_off():
    calls = []

    class CountingMixer(AttnResMixer):
        def forward(self, sources):
            calls.append(len(sources))
            return super().forward(sources)

    torch.manual_seed(0)
    model = K3(K3Config.tiny(), attnres_mixer=CountingMixer)
    model(torch.randint(0, 256, (1, 4)))
    assert len(calls) == 2 * 5 + 1
    plain = K3(K3Config.tiny(attnres_block_size=None))
    assert not any("query" in name for name, _ in plain.named_parameters())
    assert plain.run(torch.randint(0, 256, (1, 4)), collect=True).attnres_weights == []


@pytest.mark.parametrize("changes", [{}, dict(attnres_block_size=None, use_rope=True, gate_form="kimi_linear")])
def test_cached_decoding_equals_recomputation(changes):
    model = _model(**changes)
    idx = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        prompt = model.run(idx[:, :17])          # chunked prefill
        pieces, cache = [prompt.logits], prompt.cache
        for t in range(17, 24):                  # one token at a time from the caches
            step = model.run(idx[:, t:t + 1], cache)
            pieces.append(step.logits)
            cache = step.cache
    assert full.abs().max() > 1.0                # the comparison is not between near-zero numbers
    assert (torch.cat(pieces, 1) - full).abs().max() <= 1e-4
    assert isinstance(cache, K3Cache) and cache.num_tokens == 24


def test_generate_with_cache_gives_the_same_tokens_as_without():
    model = _model()
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(2))
    greedy_cached = model.generate(prompt, 8, temperature=0)
    greedy_plain = model.generate(prompt, 8, temperature=0, use_cache=False)
    assert greedy_cached.shape == (2, 13) and torch.equal(greedy_cached, greedy_plain)
    assert torch.equal(greedy_cached[:, :5], prompt)
    sampled = [model.generate(prompt, 5, temperature=0.8, top_k=20, use_cache=cached,
                              generator=torch.Generator().manual_seed(3)) for cached in (True, False)]
    assert torch.equal(*sampled)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(prompt, 2, temperature=-0.5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(prompt, 2.5)


def test_generate_takes_the_same_options_as_gpt2():
    # One way to ask for each behaviour in both models: temperature=0 is greedy, options are keywords.
    import inspect

    from k3lite.models.gpt2 import GPT2

    k3_params = inspect.signature(_model().generate).parameters
    gpt2_params = inspect.signature(GPT2.generate).parameters
    assert list(k3_params) == [name for name in gpt2_params if name != "self"]
    assert all(k3_params[name].default == gpt2_params[name].default for name in k3_params)
    model = _model()
    prompt = torch.randint(0, 256, (1, 4), generator=torch.Generator().manual_seed(6))
    greedy = model.generate(prompt, 6, temperature=0)
    assert torch.equal(greedy, model.generate(prompt, 6, temperature=1.7, top_k=1, generator=torch.Generator()))
    with pytest.raises(ValueError, match="idx"):
        model.run(torch.full((1, 3), 256))


def test_tiny_k3_trains_on_cpu():
    torch.manual_seed(0)
    model = K3(K3Config.tiny())
    ids = data.encode(data.corpus_text(max_bytes=50_000))
    generator = torch.Generator().manual_seed(0)
    history = train(model, lambda step: data.random_batch(ids, 4, 32, generator), steps=25, lr=5e-3, warmup=3)
    first, last = sum(history.train_loss[:5]) / 5, sum(history.train_loss[-5:]) / 5
    assert first > 5.0                           # about ln(256) = 5.5 at the start
    assert last < first - 1.5, (first, last)


def test_empty_prompt_and_cache_of_another_batch_name_the_argument():
    model = _model()
    empty = torch.zeros(2, 0, dtype=torch.long)
    with pytest.raises(ValueError, match=r"idx must be \[B, T\] with T >= 1"):
        model.run(empty)
    with pytest.raises(ValueError, match=r"idx must be \[B, T\] with T >= 1"):
        model.generate(empty, 3, temperature=0)
    with pytest.raises(ValueError, match=r"idx must be \[B, T\] with T >= 1"):
        model.generate(empty, 0, temperature=0)
    idx = torch.randint(0, 256, (2, 4), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        cache = model.run(idx).cache
        assert cache.batch_size == 2
        with pytest.raises(ValueError, match="cache holds batch size 2, idx has 3"):
            model.run(torch.zeros(3, 1, dtype=torch.long), cache)
        assert model.run(idx[:, :1], cache).logits.shape == (2, 1, 256)      # the matching batch still works


def test_generate_restores_training_mode_even_after_an_error(monkeypatch):
    model = _model().train()
    prompt = torch.zeros(1, 3, dtype=torch.long)
    model.generate(prompt, 2, temperature=0)
    assert model.training

    def broken_run(*args, **kwargs):
        assert not model.training                 # generation itself runs in eval mode
        raise RuntimeError("simulated failure inside the decode loop")

    monkeypatch.setattr(model, "run", broken_run)
    with pytest.raises(RuntimeError, match="simulated failure"):
        model.generate(prompt, 2, temperature=0)
    assert model.training
