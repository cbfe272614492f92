"""Where a decode step's time goes, for the model_decode benchmark's two models (GPU only; not part of any test).

    python benchmarks/probes/gpu_decode_probe.py

The benchmark (python -m benchmarks.bench --sections model_decode) found both models' step times flat in the
context length on the H200 (benchmarks/archive/bench_h200_2026-12-02b.json, model_decode_diagnosis): something other
than the cache traffic bounds them. This script builds the same K3-shaped and GPT-2-shaped models at a 4096-token
cache, times a step of each, times GPT-2's step again with SDPA free to pick its cuDNN backend (as k3lite.models.gpt2
did before 2026-12-02), and prints the profiler's table of each step (host time per op first, then GPU time).

What it found on an H200 (2026-12-02, batch 8, width 1024, depth 8, bf16): SDPA's cuDNN backend builds a new
plan for every new key length, which decode grows by one each step (6.7 ms of host time per call against 39 us
of GPU time; GPT-2's step took 54.56 ms, 3.16 ms without cuDNN, now k3lite.models.gpt2's default), and K3's step is
host-bound (26.9 ms of wall time per step against ~2.4 ms of kernels, from about 1,000 kernel launches: 2,603
cudaLaunchKernel and 429 cuLaunchKernelEx in 3 steps).

    python benchmarks/probes/gpu_decode_probe.py --count

runs anywhere (a CPU is enough): the number of PyTorch operations one decode step dispatches, per sub-module,
with the choices the models make on CUDA (the MoE's all-experts path, GPT-2's SDPA), batch 8. Each is a
launch from Python; at a few microseconds to tens of microseconds of host time each, thousands of them set a
floor under the step time that no cache size changes.
"""

import collections
import dataclasses
import functools
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))   # the repository root: benchmarks.bench

import k3lite.models.gpt2 as gpt2_module
from benchmarks import bench
from k3lite.models.gpt2 import GPT2, GPT2Config
from k3lite.models.k3 import K3

CONTEXT, BATCH, HEADROOM = 4096, 8, 64


def ms_per_step(step, tokens, n=8):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for token in tokens[:n]:
        step(token)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e3


def profile_steps(step, tokens, title):
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for token in tokens[:3]:
            step(token)
        torch.cuda.synchronize()
    print(title)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=50))
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=50))


def count_ops():
    from torch.utils._python_dispatch import TorchDispatchMode

    from k3lite.layers import moe

    # The CUDA-path choices, taken on any device:
    moe.RoutedExperts.forward = lambda self, x, weights, indices: self.forward_all_experts(x, weights, indices)
    gpt2_module.causal_attention = gpt2_module.sdpa_causal_attention
    where, counts = ["model"], collections.Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[where[-1]] += 1
            return func(*args, **(kwargs or {}))

    def enter(name):
        return lambda module, args: where.append(name)

    def leave(module, args, out):
        where.pop()   # returns None: a forward hook that returned something would replace the output

    torch.manual_seed(3)
    k3_config, gpt2_config = bench.decode_model_configs(True, 8192)
    k3 = K3(dataclasses.replace(k3_config, backend="torch")).eval()
    gpt2 = GPT2(GPT2Config(**{**gpt2_config.__dict__, "n_ctx": 256})).eval()
    for model in (k3, gpt2):
        for module in model.modules():
            if module is not model and type(module).__name__ in ("KDALayer", "MLA", "MoE", "AttnResMixer",
                                                                  "CausalSelfAttention", "MLP", "GatedMLP"):
                module.register_forward_pre_hook(enter(type(module).__name__))
                module.register_forward_hook(leave)
    prompt = torch.randint(0, 8192, (BATCH, 64))
    token = torch.randint(0, 8192, (BATCH, 1))
    with torch.no_grad():
        k3_cache = k3.run(prompt).cache
        _, kv = gpt2(prompt, gpt2.new_cache(capacity=128))
        for name, step in (("K3", lambda: k3.run(token, k3_cache)), ("GPT-2", lambda: gpt2(token, kv))):
            counts.clear()
            with Count():
                step()
            by_module = ", ".join(f"{n} {c}" for n, c in counts.most_common())
            print(f"{name}: {sum(counts.values())} operations per decode step ({by_module})")


def warm_k3_step(k3, prompt, context, gen, tokens):
    """A decode step of ``k3`` over a cache of ``context`` random MLA rows, KDA states in place, run 3 times."""
    k3_step, _ = bench.k3_decode_step(k3, bench.fill_k3_cache(k3, prompt, context, "random", gen, HEADROOM))
    bench._k3_in_place(k3, True)
    for token in tokens[:3]:
        k3_step(token)
    return k3_step


def mla_products(batch, context, heads=16, rank=512, rope=64, block=4096):
    """GPU ms of the absorbed MLA decode's products at one context, alone, and of alternatives to them."""
    import torch.nn.functional as F
    import triton.testing

    from k3lite.layers.mla import MLACache

    gen = torch.Generator("cuda").manual_seed(5)
    rows = torch.randn(batch, context, rank + rope, device="cuda", generator=gen).bfloat16()
    cache = MLACache.from_tensors(rows[..., :rank].contiguous(), rows[..., rank:].contiguous(), capacity=context + 8)
    entries, latent = cache.entries, cache.latent
    queries = torch.randn(batch, heads, rank + rope, device="cuda", generator=gen).bfloat16()
    probs = torch.randn(batch, heads, context, device="cuda", generator=gen).softmax(-1).bfloat16()

    def split_batches():   # the reduction over the context cut in blocks: a batched product per sequence
        n = context // block
        out = []
        for b in range(batch):
            p = probs[b, :, :n * block].view(heads, n, block).transpose(0, 1)
            part = torch.bmm(p, latent[b, :n * block].unflatten(0, (n, block))).sum(0)
            out.append(part + probs[b, :, n * block:] @ latent[b, n * block:])
        return torch.stack(out)

    def sdpa(backend):
        from torch.nn.attention import sdpa_kernel
        q = queries[:, :, None]
        k = entries[:, None].expand(batch, heads, context, rank + rope)
        v = latent[:, None].expand(batch, heads, context, rank)
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, scale=0.1)

    from torch.nn.attention import SDPBackend
    cases = {"scores = rows @ entries^T": lambda: queries @ entries.transpose(1, 2),
             "softmax float32": lambda: probs.float().softmax(-1),
             "probs @ latent": lambda: probs @ latent,
             f"probs @ latent, blocks of {block} per sequence": split_batches,
             "SDPA efficient, heads expanded": lambda: sdpa(SDPBackend.EFFICIENT_ATTENTION),
             "SDPA flash, heads expanded": lambda: sdpa(SDPBackend.FLASH_ATTENTION)}
    bytes_read = entries.numel() * 2
    print(f"MLA products, batch {batch}, context {context}: the cache is {bytes_read / 1e9:.2f} GB "
          f"({bytes_read / 4.8e12 * 1e3:.3f} ms at 4.8 TB/s)")
    for name, fn in cases.items():
        try:
            ms = triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")
            print(f"  {name:48} {ms:.3f} ms", flush=True)
        except Exception as err:
            print(f"  {name:48} failed: {repr(err)[:150]}", flush=True)


def long_context(context=131072):
    torch.manual_seed(3)
    k3_config, _ = bench.decode_model_configs(True, 8192)
    k3 = K3(k3_config).to("cuda", torch.bfloat16).eval()
    gen = torch.Generator("cuda").manual_seed(4)
    prompt = torch.randint(0, 8192, (BATCH, 8), device="cuda", generator=gen)
    tokens = torch.randint(0, 8192, (40, BATCH, 1), device="cuda", generator=gen)
    with torch.no_grad():
        mla_products(BATCH, context)
        k3_step = warm_k3_step(k3, prompt, context, gen, tokens)
        profile_steps(k3_step, tokens, f"K3 step at context {context}")


def main():
    if "--long" in sys.argv:
        long_context()
        return
    if "--count" in sys.argv:
        count_ops()
        return
    torch.manual_seed(3)
    k3_config, gpt2_config = bench.decode_model_configs(True, 8192)
    gpt2_config = GPT2Config(**{**gpt2_config.__dict__, "n_ctx": CONTEXT + HEADROOM})
    k3 = K3(k3_config).to("cuda", torch.bfloat16).eval()
    gpt2 = GPT2(gpt2_config).to("cuda", torch.bfloat16).eval()
    gen = torch.Generator("cuda").manual_seed(4)
    prompt = torch.randint(0, 8192, (BATCH, 8), device="cuda", generator=gen)
    tokens = torch.randint(0, 8192, (40, BATCH, 1), device="cuda", generator=gen)
    with torch.no_grad():
        kv = bench.fill_gpt2_cache(gpt2, prompt, CONTEXT, "random", gen, HEADROOM)

        def gpt2_step(token):
            gpt2(token, kv)

        for token in tokens[:3]:
            gpt2_step(token)
        print(f"GPT-2 (SDPA without cuDNN, k3lite.models.gpt2's default): {ms_per_step(gpt2_step, tokens):.2f} ms "
              "per step")
        profile_steps(gpt2_step, tokens, "GPT-2 step")
        # The attention as it was: SDPA picks by PyTorch's global flags, whose defaults allow cuDNN. The model's
        # own SDPA call overrides those flags (sdpa_kernel), so switching enable_cudnn_sdp alone would change nothing.
        default_attention = gpt2_module.sdpa_causal_attention
        gpt2_module.sdpa_causal_attention = functools.partial(default_attention, backends=None)
        try:
            torch.backends.cuda.enable_cudnn_sdp(True)
            gpt2_step(tokens[0])
            print(f"GPT-2, SDPA free to pick cuDNN: {ms_per_step(gpt2_step, tokens):.2f} ms per step")
            profile_steps(gpt2_step, tokens, "GPT-2 step, SDPA free to pick cuDNN")
        finally:
            gpt2_module.sdpa_causal_attention = default_attention
        k3_step = warm_k3_step(k3, prompt, CONTEXT, gen, tokens)
        print(f"K3: {ms_per_step(k3_step, tokens):.2f} ms per step")
        profile_steps(k3_step, tokens, "K3 step")


if __name__ == "__main__":
    main()
