"""The decode caches on CUDA: the paths a GPU takes (SDPA for GPT-2, MLA's folded-heads matmul) give the
recomputed answer, and a decode step allocates nothing of the cache's size (it reads the cache in place).
GPT-2's SDPA never takes cuDNN's backend, and a decode step of either model captured in a CUDA graph (as
``python -m benchmarks.bench --sections model_decode`` times it) gives the eager step's logits."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench
from k3lite.layers.mla import MLA
from k3lite.models.gpt2 import GPT2, GPT2Config
from k3lite.models.k3 import K3

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


def test_gpt2_attention_on_cuda_leaves_cudnn_out():
    # cuDNN's SDPA backend builds a plan for every new key length: 6.7 ms of host time per decode step and layer
    # on an H200 (k3lite.models.gpt2.SDPA_BACKENDS). The model must not pick it even where PyTorch's flags allow it.
    from torch.profiler import ProfilerActivity, profile

    model = _gpt2(torch.bfloat16)
    tokens = torch.randint(0, GPT2_SMALL.vocab_size, (2, 104), device="cuda")
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)                  # PyTorch's default: cuDNN allowed
    try:
        with torch.no_grad():
            _, cache = model(tokens[:, :100], model.new_cache(capacity=104))
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                model(tokens[:, 100:101], cache)                 # one token: no mask
                model(tokens[:, 101:104], cache)                 # a block after a cache: the lower-right mask
            torch.cuda.synchronize()
        assert torch.backends.cuda.cudnn_sdp_enabled()        # the global flag is back as it was
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
    names = {event.key for event in prof.key_averages()}
    assert not [name for name in names if "cudnn" in name.lower()], sorted(names)
    assert [name for name in names if "flash" in name or "efficient" in name], sorted(names)


def _decode_model(name, dtype):
    """The model_decode benchmark's GPU model (width 1024, depth 8), with a cache of 64 prompt tokens."""
    k3_config, gpt2_config = bench.decode_model_configs(True, 8192)
    torch.manual_seed(3)
    if name == "k3":
        model = K3(k3_config).to("cuda", dtype).eval()
    else:
        model = GPT2(GPT2Config(**{**gpt2_config.__dict__, "n_ctx": 128})).to("cuda", dtype).eval()
    gen = torch.Generator("cuda").manual_seed(4)
    prompt = torch.randint(0, 8192, (8, 64), device="cuda", generator=gen)
    token = torch.randint(0, 8192, (8, 1), device="cuda", generator=gen)
    return model, prompt, token


def _decode_step(name, model, prompt):
    """The bench's step on a fresh cache of ``prompt`` (room for 16 more tokens)."""
    if name == "k3":
        return bench.k3_decode_step(model, bench.fill_k3_cache(model, prompt, 64, "prefill", None, 16))
    return bench.gpt2_decode_step(model, bench.fill_gpt2_cache(model, prompt, 64, "prefill", None, 16))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("name", ["gpt2", "k3"])
def test_a_graph_replayed_decode_step_gives_the_eager_logits(name, dtype, tol):
    # Two identical caches: one continued eagerly, one by bench.capture_step's warm-up steps (the same token)
    # and then a replay of the captured step, at the same position. The replay must read the cache it was
    # captured on (K3's convolution tails come from the cache before the step) and write the same slot.
    model, prompt, token = _decode_model(name, dtype)
    if name == "k3":
        bench._k3_in_place(model, True)      # as the bench runs it: the KDA states written over in place
    try:
        with torch.no_grad():
            eager_step, _ = _decode_step(name, model, prompt)
            for _ in range(bench.GRAPH_WARMUP_STEPS):
                eager_step(token)
            expected = eager_step(token)[0].float()
            after = eager_step(token)[0].float()                     # the next position: what a wrong slot gives
            graph_step, current = _decode_step(name, model, prompt)
            buffers = bench._cache_buffers(current())
            graph, output = bench.capture_step(graph_step, token)
            graph.replay()
            torch.cuda.synchronize()
            got = output[0].float().clone()
            assert bench._cache_buffers(current()) == buffers        # nothing grew or moved
            graph.replay()
            torch.cuda.synchronize()
            again = output[0].float().clone()
    finally:
        if name == "k3":
            bench._k3_in_place(model, False)
    error = ((got - expected).norm() / expected.norm()).item()
    assert error < tol, error
    # The test can tell positions apart: one step later the logits differ by far more than the tolerance
    # (0.70 of their norm for GPT-2, 1.2 for K3, in float32 on a CPU).
    assert ((after - expected).norm() / expected.norm()).item() > 10 * tol
    if name == "gpt2":   # the same slot written again, the same keys read: the same logits
        torch.testing.assert_close(again, got, rtol=0, atol=0)
    else:                # every replay also updates the KDA states in place, so the next one differs
        assert not torch.equal(again, got)
    bench.graph_ms_per_step(graph, replays=3, repeats=1)             # runs, and returns


def test_model_decode_measures_device_and_graph_times_on_cuda():
    # The bench's GPU rows at one short context: every measure filled, nothing failed (a capture that fails
    # would leave *_graph_error and None).
    results = {"meta": {}}
    bench.bench_model_decode([256], 8, 4, 4096, "cuda", results, lambda: None)
    (row,) = results["model_decode"]["rows"]
    assert not {key: value for key, value in row.items() if key.endswith("_error")}
    for key in ("k3_device_ms_per_step", "gpt2_device_ms_per_step", "k3_graph_ms_per_step", "gpt2_graph_ms_per_step"):
        assert row[key] > 0, (key, row)
        # Eager steps cost at least the device work; the replay has no host in it.
        assert row[key] < 1.5 * row[key.split("_")[0] + "_ms_per_step"], (key, row)
    assert row["k3_over_gpt2_graph"] == row["gpt2_graph_ms_per_step"] / row["k3_graph_ms_per_step"]
