"""K3 accounting: analytic parameter counts against the modules, cache bytes against real caches."""

import pytest
import torch

from k3lite.course import accounting as acc
from k3lite.layers.moe import RoutedExperts
from k3lite.models.k3 import K3, K3Config

VARIANTS = [
    {},
    dict(attnres_block_size=None, latent_size=None, q_lora_rank=None, kda_output_gate_rank=8,
         tie_embeddings=True, num_layers=8, gate_form="kimi_linear", mla_output_gate=False),
    dict(num_dense_layers=0, num_shared_experts=0, rope_dim=0, num_layers=4, layers_per_cycle=2),
]


@pytest.mark.parametrize("changes", VARIANTS)
def test_analytic_counts_equal_the_module_on_the_meta_device(changes):
    config = K3Config.tiny(**changes)
    analytic = acc.k3_param_counts(config)
    counted = acc.k3_meta_param_counts(config)
    assert (analytic["total"], analytic["active"]) == (counted["total"], counted["active"])
    assert analytic["total"] == sum(acc.k3_parameter_breakdown(config).values())


def test_published_counts_match_the_published_totals():
    config = K3Config.published()
    counts = acc.k3_param_counts(config)
    assert abs(counts["total"] / 2.78e12 - 1) < 0.02
    assert abs(counts["active"] / 1.04e11 - 1) < 0.03
    # the published configuration built on the meta device has exactly these numbers
    assert acc.k3_meta_param_counts(config) == {"total": counts["total"], "active": counts["active"]}
    assert counts["routed_experts"] / counts["total"] > 0.97          # experts are almost everything


def test_active_count_equals_the_parameters_one_token_touches():
    """Backpropagate from one token: exactly the active parameters get a gradient."""
    torch.manual_seed(0)
    config = K3Config.tiny()
    model = K3(config)
    model(torch.tensor([[65]])).sum().backward()
    touched = 0
    for module in model.modules():
        if isinstance(module, RoutedExperts):
            per_expert = sum(p[0].numel() for p in module.parameters())
            used = module.gate_proj.grad.flatten(1).abs().sum(-1) > 0
            touched += int(used.sum()) * per_expert
    for name, p in model.named_parameters():
        if ".experts." not in name and name != "embed.weight" and p.grad is not None:
            touched += p.numel()
    assert touched == acc.k3_param_counts(config)["active"]


def test_cache_bytes_of_the_published_model():
    config = K3Config.published()
    assert acc.k3_mla_cache_bytes_per_token_per_layer(config) == 576 * 2
    assert acc.k3_mla_cache_bytes_per_token(config) == 24 * 576 * 2 == 27_648
    assert acc.k3_mla_cache_bytes_per_token(config, all_layers_mla=True) == 93 * 576 * 2 == 107_136
    assert acc.k3_kda_state_bytes_per_sequence(config) == 69 * 96 * 128 * 128 * 4
    parts = acc.k3_cache_bytes(config, 1_048_576)
    assert parts["mla_latents"] == 27_648 * 1_048_576
    assert parts["total"] == parts["mla_latents"] + parts["kda_states"] + parts["conv_tails"]
    with pytest.raises(ValueError, match="seq_len"):
        acc.k3_cache_bytes(config, -1)


def test_cache_bytes_equal_what_the_model_keeps():
    torch.manual_seed(0)
    config = K3Config.tiny()
    model = K3(config).eval()
    with torch.no_grad():
        cache = model.run(torch.randint(0, 256, (3, 10))).cache
    parts = acc.k3_cache_bytes(config, 10, batch_size=3, cache_dtype="fp32", state_dtype="fp32")
    assert cache.nbytes("mla") == parts["mla_latents"]
    assert cache.nbytes("kda") == parts["kda_states"] + parts["conv_tails"]
    assert cache.nbytes() == parts["total"]
