"""The decode caches on CUDA: the paths a GPU takes (SDPA for GPT-2, MLA's folded-heads matmul) give the
recomputed answer, and a decode step allocates nothing of the cache's size (it reads the cache in place)."""

from __future__ import annotations

import pytest
import torch

from k3lite.gpt2 import GPT2, GPT2Config
from k3lite.layers.mla import MLA

if not torch.cuda.is_available():
    pytest.skip("needs CUDA (tests/test_decode_caches.py covers the CPU)", allow_module_level=True)

GPT2_SMALL = GPT2Config(vocab_size=97, n_ctx=4200, n_layer=2, n_head=16, n_embd=1024)


def _gpt2(dtype):
    torch.manual_seed(0)
    return GPT2(GPT2_SMALL).to("cuda", dtype).eval()


def _mla(dtype):
    torch.manual_seed(2)
    layer = MLA(1024, 16, q_lora_rank=512, kv_lora_rank=512, nope_dim=128, rope_dim=64, v_dim=128)
    return layer.to("cuda", dtype).eval()


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_gpt2_cached_decoding_on_cuda_equals_recomputation(dtype, tol):
    model = _gpt2(dtype)
    gen = torch.Generator("cuda").manual_seed(1)
    tokens = torch.randint(0, GPT2_SMALL.vocab_size, (2, 40), device="cuda", generator=gen)
    with torch.no_grad():
        full = _gpt2(torch.float32)(tokens)            # without a cache, forward returns the logits alone
        logits, cache = model(tokens[:, :20], model.new_cache())
        pieces = [logits]
        block, cache = model(tokens[:, 20:23], cache)     # a block of three after a cache: the causal mask
        pieces.append(block)
        for t in range(23, 40):
            step, cache = model(tokens[:, t:t + 1], cache)
            pieces.append(step)
    got = torch.cat(pieces, dim=1).float()
    assert ((got - full).norm() / full.norm()).item() < tol


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
def test_mla_absorbed_decoding_on_cuda_equals_the_expanded_forward(dtype, tol):
    layer = _mla(dtype)
    x = torch.randn(2, 30, 1024, device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    with torch.no_grad():
        full, _ = _mla(torch.float32)(x, absorb=False)
        y, cache = layer(x[:, :10].to(dtype))
        pieces = [y]
        block, cache = layer(x[:, 10:13].to(dtype), cache)
        pieces.append(block)
        for t in range(13, 30):
            y, cache = layer(x[:, t:t + 1].to(dtype), cache)
            pieces.append(y)
    got = torch.cat(pieces, dim=1).float()
    assert ((got - full).norm() / full.norm()).item() < tol


def _step_peak_bytes(step):
    """Bytes allocated at the peak of one call of ``step``, above what was allocated before it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def test_a_decode_step_allocates_nothing_of_the_caches_size():
    # 4096 cached tokens of 2 sequences, bf16: one GPT-2 layer's keys are 2 x 4097 x 1024 x 2 B = 16 MiB, the MLA
    # layer's cache 2 x 4097 x 576 x 2 B = 9 MiB. A step that copied a cache (torch.cat, einsum's contiguous
    # copies, a float32 upcast, a broadcast over heads) would allocate at least that much; reading it in place
    # allocates only the step's own tensors (scores, probabilities: about 1 MiB here).
    length, batch = 4096, 2
    tokens = torch.randint(0, GPT2_SMALL.vocab_size, (batch, length + 4), device="cuda")
    model = _gpt2(torch.bfloat16)
    with torch.no_grad():
        _, cache = model(tokens[:, :length], model.new_cache(capacity=length + 4))
        model(tokens[:, length:length + 1], cache)       # warm-up: kernels chosen, workspaces allocated
        gpt2_peak = _step_peak_bytes(lambda: model(tokens[:, length + 1:length + 2], cache))
    one_layer_keys = cache.keys[0].numel() * cache.keys[0].element_size()
    layer = _mla(torch.bfloat16)
    x = torch.randn(batch, length + 4, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        _, mla_cache = layer(x[:, :length])
        _, mla_cache = layer(x[:, length:length + 1], mla_cache)   # grows the buffer once, outside the measure
        mla_peak = _step_peak_bytes(lambda: layer(x[:, length + 1:length + 2], mla_cache))
    assert gpt2_peak < one_layer_keys / 2, (gpt2_peak, one_layer_keys)
    assert mla_peak < mla_cache.nbytes() / 2, (mla_peak, mla_cache.nbytes())
