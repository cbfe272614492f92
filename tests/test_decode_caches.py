"""Decode caches: preallocated buffers that grow by doubling, written in place, read without copies.

GPT-2's KVCache is one mutable cache per generation; an MLACache is a value (a length into a shared
buffer), so continuing the same cache twice (branching) must leave the first continuation intact.
"""

from __future__ import annotations

import pytest
import torch

import k3lite.models.gpt2 as gpt2_module
from k3lite.layers.mla import MLA, MLACache
from k3lite.models.gpt2 import GPT2, GPT2Config, KVCache, causal_attention, sdpa_causal_attention
from k3lite.models.k3 import K3, K3Config

TINY_GPT2 = GPT2Config(vocab_size=61, n_ctx=64, n_layer=2, n_head=4, n_embd=32)


def _gpt2():
    torch.manual_seed(0)
    return GPT2(TINY_GPT2).eval()


def _mla(use_rope=False):
    torch.manual_seed(2)
    layer = MLA(32, 4, q_lora_rank=12, kv_lora_rank=10, nope_dim=6, rope_dim=4, v_dim=5, use_rope=use_rope)
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(std=0.2)     # far from the initial values, so that every path matters
    return layer.eval()


def run_in_pieces(run, inputs, ends, cache=None):
    """Feed ``inputs [B, T, ...]`` to ``run(piece, cache) -> (out, cache)``: pieces ending at ``ends``, then one
    token at a time to the end. Returns the outputs joined along time, and the last cache."""
    bounds = [0, *ends, *range(ends[-1] + 1, inputs.shape[1] + 1)]
    outputs = []
    for start, end in zip(bounds, bounds[1:]):
        out, cache = run(inputs[:, start:end], cache)
        outputs.append(out)
    return torch.cat(outputs, dim=1), cache


# ----- GPT-2 -----------------------------------------------------------------------------------------

def test_kv_cache_appends_in_place_and_doubles_when_full():
    cache = KVCache(2)
    pointers, capacities = set(), []
    for step in range(40):
        k, v = torch.randn(3, 1, 2, 4), torch.randn(3, 1, 2, 4)
        for layer in range(2):
            history_k, history_v = cache.append(layer, k, v)
        assert history_k.shape == (3, step + 1, 2, 4) and torch.equal(history_v[:, -1:], v)
        pointers.add(cache.keys[0].data_ptr())
        capacities.append(cache.capacity_nbytes() // (2 * 2 * 3 * 2 * 4 * 4))
    assert sorted(set(capacities)) == [1, 2, 4, 8, 16, 32, 64]       # doubling: log2(40) reallocations
    assert len(pointers) == 7
    assert cache.length == 40 and cache.batch_size == 3
    assert cache.nbytes() == 2 * 2 * 40 * 3 * 2 * 4 * 4             # the tokens, not the spare room


def test_reserved_capacity_means_no_reallocation():
    cache = KVCache(1, capacity=10)
    cache.append(0, torch.randn(1, 4, 2, 3), torch.randn(1, 4, 2, 3))
    pointer = cache.keys[0].data_ptr()
    for _ in range(6):
        cache.append(0, torch.randn(1, 1, 2, 3), torch.randn(1, 1, 2, 3))
    assert cache.keys[0].data_ptr() == pointer and cache.length == 10
    cache.append(0, torch.randn(1, 1, 2, 3), torch.randn(1, 1, 2, 3))   # past the reserve: grows
    assert cache.length == 11 and cache.capacity_nbytes() == 2 * 20 * 2 * 3 * 4


def test_kv_cache_rejects_keys_of_another_shape_or_dtype():
    cache = KVCache(1)
    cache.append(0, torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8))
    with pytest.raises(ValueError, match="k must be"):
        cache.append(0, torch.randn(2, 1, 4, 8, dtype=torch.float64), torch.randn(2, 1, 4, 8))
    with pytest.raises(ValueError, match="k must be"):
        cache.append(0, torch.randn(1, 1, 4, 8), torch.randn(1, 1, 4, 8))
    with pytest.raises(ValueError, match="capacity"):
        KVCache(2, capacity=-1)
    with pytest.raises(ValueError, match="n_layer"):
        KVCache(0)


@pytest.mark.parametrize("q_len, past", [(1, 0), (1, 9), (5, 0), (5, 7), (3, 1)])
def test_sdpa_attention_on_cache_views_equals_the_einsum_formula(q_len, past):
    """The CUDA path, run on a CPU: queries ``past .. past + q_len - 1`` against the strided views of a
    cache buffer with spare room, including a block of several queries with a cache in front."""
    generator = torch.Generator().manual_seed(q_len * 10 + past)
    cache = KVCache(1, capacity=32)
    keys, values = (torch.randn(2, past + q_len, 3, 8, generator=generator) for _ in range(2))
    if past:
        cache.append(0, keys[:, :past], values[:, :past])
    k, v = cache.append(0, keys[:, past:], values[:, past:])
    assert not k.is_contiguous()                                     # views of the [B, 32, H, D] buffer
    q = torch.randn(2, q_len, 3, 8, generator=generator)
    torch.testing.assert_close(sdpa_causal_attention(q, k, v), causal_attention(q, k, v), atol=1e-6, rtol=1e-6)


def test_gpt2_decoding_through_sdpa_equals_recomputation(monkeypatch):
    """The whole model on its CUDA path (forced on a CPU): prefill, a 3-token block after the cache, steps."""
    model = _gpt2()
    tokens = torch.randint(0, TINY_GPT2.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        monkeypatch.setattr(gpt2_module, "causal_attention", sdpa_causal_attention)
        decoded, cache = run_in_pieces(model, tokens, [6, 9], model.new_cache(capacity=8))
    torch.testing.assert_close(decoded, full, atol=1e-5, rtol=1e-5)
    assert cache.length == 20 and cache.keys[1].shape == (2, 20, 4, 8)


def test_gpt2_cached_decoding_with_autograd_recording_still_backpropagates():
    """With gradients on, appends copy instead of writing over tensors an earlier step saved."""
    model = _gpt2().train()
    tokens = torch.randint(0, TINY_GPT2.vocab_size, (1, 8), generator=torch.Generator().manual_seed(2))
    decoded, _ = run_in_pieces(model, tokens, [4], model.new_cache(capacity=16))
    decoded.sum().backward()
    assert model.wte.weight.grad is not None
    torch.testing.assert_close(decoded, model(tokens), atol=1e-5, rtol=1e-5)


# ----- MLA -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("use_rope", [False, True])
def test_mla_token_by_token_decoding_across_growths_equals_the_expanded_forward(use_rope):
    """From a one-token prefill the buffer holds 1 row and grows 1 -> 2 -> 4 -> ... -> 32 over 21 tokens."""
    layer = _mla(use_rope)
    x = torch.randn(2, 21, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = layer(x, absorb=False)
        y, cache = layer(x[:, :1])
        pieces, capacities = [y], {cache.capacity}
        for t in range(1, 21):
            y, cache = layer(x[:, t:t + 1], cache)
            pieces.append(y)
            capacities.add(cache.capacity)
    assert sorted(capacities) == [1, 2, 4, 8, 16, 32]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=2e-6, rtol=1e-5)
    latent, rope_key = layer.latents(x)
    assert cache.length == 21 and cache.latent.shape == (2, 21, 10) and cache.rope_key.shape == (2, 21, 4)
    if not use_rope:
        torch.testing.assert_close(cache.entries, torch.cat([latent, rope_key], dim=-1), atol=1e-6, rtol=1e-6)


def test_mla_blocks_of_several_tokens_after_a_cache_are_masked_causally():
    layer = _mla(use_rope=True)
    x = torch.randn(2, 13, 32, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full, _ = layer(x, absorb=False)
        head, cache = layer(x[:, :3])
        middle, cache = layer(x[:, 3:8], cache)                      # absorbed, 5 queries, offset 3
        tail, cache = layer(x[:, 8:], cache)
    torch.testing.assert_close(torch.cat([head, middle, tail], dim=1), full, atol=2e-6, rtol=1e-5)


def test_mla_appends_in_place_while_the_cache_is_the_newest():
    layer = _mla()
    x = torch.randn(1, 9, 32)
    with torch.no_grad():
        _, cache = layer(x[:, :3])
        cache = MLACache.from_tensors(cache.latent, cache.rope_key, capacity=16)
        pointer = cache.entries.data_ptr()
        for t in range(3, 9):
            _, cache = layer(x[:, t:t + 1], cache)
    assert cache.entries.data_ptr() == pointer and cache.capacity == 16 and cache.length == 9


def test_mla_branching_from_one_cache_leaves_each_continuation_intact():
    layer = _mla(use_rope=True)
    generator = torch.Generator().manual_seed(5)
    prefix, first, second = (torch.randn(2, n, 32, generator=generator) for n in (5, 3, 3))
    with torch.no_grad():
        _, shared = layer(prefix)
        shared = MLACache.from_tensors(shared.latent, shared.rope_key, capacity=32)
        saved_prefix = shared.entries.clone()
        y_first, cache_first = layer(first, shared)                  # written in place after the prefix
        y_second, cache_second = layer(second, shared)               # must not overwrite `first`'s rows
        expected_first, _ = layer(torch.cat([prefix, first], dim=1), absorb=False)
        expected_second, _ = layer(torch.cat([prefix, second], dim=1), absorb=False)
        tail = torch.randn(2, 1, 32, generator=generator)
        y_after_first, _ = layer(tail, cache_first)                  # cache_first is still the newest: in place
        expected_after_first, _ = layer(torch.cat([prefix, first, tail], dim=1), absorb=False)
    assert cache_first.entries.data_ptr() == shared.entries.data_ptr()
    assert cache_second.entries.data_ptr() != shared.entries.data_ptr()
    assert shared.length == 5 and torch.equal(shared.entries, saved_prefix)
    torch.testing.assert_close(y_first, expected_first[:, 5:], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(y_second, expected_second[:, 5:], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(y_after_first, expected_after_first[:, 8:], atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(cache_first.entries[:, :5], saved_prefix, atol=0, rtol=0)


def test_mla_cached_decoding_with_autograd_recording_still_backpropagates():
    layer = _mla().train()
    x = torch.randn(1, 6, 32)
    decoded, _ = run_in_pieces(layer, x, [2])
    decoded.sum().backward()
    assert layer.kv_down.weight.grad is not None
    torch.testing.assert_close(decoded, layer(x)[0], atol=2e-6, rtol=1e-5)


def test_mla_cache_is_the_pair_of_views_counts_bytes_and_checks_its_input():
    latent, rope_key = torch.randn(2, 5, 10), torch.randn(2, 5, 4)
    cache = MLACache.from_tensors(latent, rope_key, capacity=12)
    unpacked_latent, unpacked_rope_key = cache
    assert torch.equal(unpacked_latent, latent) and torch.equal(unpacked_rope_key, rope_key)
    assert torch.equal(torch.cat(cache, dim=-1), cache.entries)      # still the pair chapter 07 concatenates
    assert (cache.length, cache.capacity, cache.batch_size) == (5, 12, 2)
    assert cache.nbytes() == 2 * 5 * 14 * 4
    with pytest.raises(ValueError, match="rope_key"):
        MLACache.from_tensors(latent, torch.randn(2, 4, 4))
    with pytest.raises(ValueError, match="latent"):
        MLACache.from_tensors(torch.randn(5, 10), rope_key)
    with pytest.raises(ValueError, match="capacity"):
        MLACache.from_tensors(latent, rope_key, capacity=-3)
    with pytest.raises(ValueError, match="latent, rope_key"):
        cache.append(torch.randn(2, 1, 9), torch.randn(2, 1, 4))
    with pytest.raises(ValueError, match="latent, rope_key"):
        cache.append(torch.randn(2, 1, 10, dtype=torch.float64), torch.randn(2, 1, 4, dtype=torch.float64))


# ----- K3: the caches as values ------------------------------------------------------------------------

def test_k3_two_continuations_of_one_cache_both_equal_recomputation():
    """What chapter 10 does: continue a cache by one token, then keep using the old cache."""
    torch.manual_seed(0)
    model = K3(K3Config.tiny(init_std=0.1)).eval()
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        cache = model.run(tokens[:, :8]).cache
        mla_bytes = cache.nbytes("mla")
        one_more = model.run(tokens[:, 8:9], cache)
        other = model.run(tokens[:, 9:12], cache)                    # a branch of the same cache
        then = model.run(tokens[:, 9:10], one_more.cache)
        expected_one_more = model.run(tokens[:, :9]).logits[:, -1]
        expected_other = model.run(torch.cat([tokens[:, :8], tokens[:, 9:12]], dim=1)).logits[:, -3:]
        expected_then = model.run(tokens[:, :10]).logits[:, -1]
    assert cache.nbytes("mla") == mla_bytes and one_more.cache.nbytes("mla") > mla_bytes
    torch.testing.assert_close(one_more.logits[:, -1], expected_one_more, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(other.logits, expected_other, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(then.logits[:, -1], expected_then, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("use_rope", [False, True])
def test_mla_decoding_over_a_padded_key_length_equals_the_exact_length(monkeypatch, use_rope):
    # On CUDA the absorbed path rounds the key length up (mla.KEY_ALIGN_CUDA) and masks the rows past the cache's
    # end; here the same rounding on a CPU, to 8 rows, against none: in-place steps, a buffer that grows, and a
    # branch that copies its prefix. The padding rows hold zeros, which would change every output if not masked.
    from k3lite.layers import mla

    layer = _mla(use_rope=use_rope).double()
    generator = torch.Generator().manual_seed(11)
    prefix, first, second = (torch.randn(2, n, 32, generator=generator, dtype=torch.float64) for n in (5, 4, 3))
    outputs = {}
    for align in (1, 8):
        monkeypatch.setattr(mla, "key_alignment", lambda device, align=align: align)
        with torch.no_grad():
            _, shared = layer(prefix)
            shared = MLACache.from_tensors(shared.latent, shared.rope_key, capacity=6)
            steps, cache = [], shared
            for t in range(first.shape[1]):                       # one query per step, written in place
                y, cache = layer(first[:, t:t + 1], cache)
                steps.append(y)
            y_branch, _ = layer(second, shared)                   # 3 queries; `first`'s rows lie past its end
        outputs[align] = torch.cat(steps + [y_branch], dim=1)
        assert cache.capacity % align == 0
    torch.testing.assert_close(outputs[8], outputs[1], atol=1e-12, rtol=0)
