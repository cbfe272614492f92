"""GPT-2 accounting: analytic counts against the module built on the meta device, cache bytes."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from k3lite.course import accounting
from k3lite.models.gpt2 import GPT2, GPT2Config

PUBLISHED = {
    "small": 124_439_808,
    "medium": 354_823_168,
    "large": 774_030_080,
    "xl": 1_557_611_200,
}


@pytest.mark.parametrize("size", PUBLISHED)
def test_parameter_count_analytic_and_on_the_meta_device(size):
    config = getattr(GPT2Config, size)()
    assert accounting.gpt2_parameter_count(config) == PUBLISHED[size]
    assert accounting.meta_param_count(lambda: GPT2(config)) == PUBLISHED[size]


@pytest.mark.parametrize("config", [
    GPT2Config.tiny(), GPT2Config(vocab_size=11, n_ctx=7, n_layer=3, n_head=5, n_embd=10),
])
def test_analytic_count_matches_a_real_module(config):
    assert accounting.gpt2_parameter_count(config) == accounting.count_parameters(GPT2(config))


def test_gpt2_small_breakdown():
    parts = accounting.gpt2_parameter_breakdown(GPT2Config())
    assert parts["wte"] == 38_597_376
    assert parts["wpe"] == 786_432
    assert parts["each block"] == 7_087_872
    assert parts["ln_f"] == 1_536
    assert parts["all blocks"] == 12 * 7_087_872


def test_block_breakdown_matches_one_real_block():
    config = GPT2Config.tiny()
    model = GPT2(config)
    assert sum(accounting.gpt2_block_parameters(config).values()) == accounting.count_parameters(model.blocks[0])


def test_count_parameters_counts_a_tied_weight_once():
    first = nn.Linear(4, 4, bias=False)
    second = nn.Linear(4, 4, bias=False)
    second.weight = first.weight
    assert accounting.count_parameters(nn.Sequential(first, second)) == 16


def test_meta_count_allocates_nothing():
    with torch.device("meta"):
        model = GPT2(GPT2Config.xl())
    assert all(p.device.type == "meta" for p in model.parameters())


def test_kv_bytes_per_token_gpt2_small_bf16():
    assert accounting.gpt2_kv_bytes_per_token(GPT2Config(), "bf16") == 36_864
    assert accounting.gpt2_kv_bytes_per_token(GPT2Config(), torch.float32) == 73_728
    assert accounting.gpt2_kv_bytes_per_sequence(GPT2Config(), 1024) == 36_864 * 1024
    assert accounting.gpt2_kv_bytes_per_sequence(GPT2Config(), 10, batch_size=3) == 36_864 * 30


def test_kv_bytes_match_a_real_cache():
    config = GPT2Config.tiny()
    model = GPT2(config)
    _, cache = model(torch.zeros(2, 9, dtype=torch.long), model.new_cache())
    assert cache.nbytes() == accounting.gpt2_kv_bytes_per_sequence(config, 9, torch.float32, batch_size=2)


def test_decode_bytes_read_grows_with_position():
    config = GPT2Config()
    first = accounting.gpt2_decode_bytes_read(config, 0)
    later = accounting.gpt2_decode_bytes_read(config, 1000)
    assert first["kv_cache"] == 0
    assert first["weights"] == later["weights"]
    assert later["kv_cache"] == 1000 * 36_864
    weights_read = 124_439_808 - 786_432 + 768
    assert first["weights"] == 2 * weights_read
    assert later["total"] == later["weights"] + later["kv_cache"]


def test_forward_flops_cache_vs_recompute():
    config = GPT2Config(vocab_size=10, n_ctx=64, n_layer=2, n_head=2, n_embd=8)
    d = config.n_embd
    one_token = 2 * (24 * d * d + 4 * d * 1) + 2 * d * 10
    assert accounting.gpt2_forward_flops(config, 1) == one_token
    # A whole prompt at once equals the sum of its one-token cached steps.
    steps = sum(accounting.gpt2_forward_flops(config, 1, past) for past in range(20))
    assert accounting.gpt2_forward_flops(config, 20) == steps
    assert accounting.gpt2_forward_flops(config, 5, 15) == sum(
        accounting.gpt2_forward_flops(config, 1, past) for past in range(15, 20))


@pytest.mark.parametrize("call", [
    lambda: accounting.gpt2_kv_bytes_per_sequence(GPT2Config(), 2000),
    lambda: accounting.gpt2_kv_bytes_per_sequence(GPT2Config(), 10, batch_size=0),
    lambda: accounting.gpt2_decode_bytes_read(GPT2Config(), 1024),
    lambda: accounting.gpt2_forward_flops(GPT2Config(), 0),
    lambda: accounting.gpt2_forward_flops(GPT2Config(), 10, 1020),
    lambda: accounting.element_bytes("int3"),
])
def test_bad_arguments_raise_value_error(call):
    with pytest.raises(ValueError):
        call()
