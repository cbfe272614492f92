"""Where a decode step's time goes, for the model_decode benchmark's two models (GPU only; not part of any test).

    python scripts/gpu_decode_probe.py

The benchmark (python -m k3lite.bench --sections model_decode) found both models' step times flat in the
context length on the H200 (figures/bench_h200_2026-12-02b.json, model_decode_diagnosis): something other than
the cache traffic bounds them. This script builds the same K3-shaped and GPT-2-shaped models at a 4096-token
cache, times a step, times GPT-2's step again with SDPA's cuDNN backend switched off, and prints the profiler's
table of each step (host time per op first, then GPU time).

    python scripts/gpu_decode_probe.py --count

runs anywhere (a CPU is enough): the number of PyTorch operations one decode step dispatches, per sub-module,
with the choices the models make on CUDA (the MoE's all-experts path, GPT-2's SDPA), batch 8. Each is a
launch from Python; at a few microseconds to tens of microseconds of host time each, thousands of them set a
floor under the step time that no cache size changes.
"""

import collections
import dataclasses
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k3lite import bench  # noqa: E402
from k3lite.gpt2 import GPT2, GPT2Config  # noqa: E402
from k3lite.k3 import K3  # noqa: E402

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
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=6, max_name_column_width=50))


def count_ops():
    from torch.utils._python_dispatch import TorchDispatchMode

    import k3lite.gpt2 as gpt2_module
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


def main():
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
        print(f"GPT-2: {ms_per_step(gpt2_step, tokens):.2f} ms per step")
        torch.backends.cuda.enable_cudnn_sdp(False)
        gpt2_step(tokens[0])
        print(f"GPT-2, cuDNN SDPA off: {ms_per_step(gpt2_step, tokens):.2f} ms per step")
        torch.backends.cuda.enable_cudnn_sdp(True)
        profile_steps(gpt2_step, tokens, "GPT-2 step")
        cache = [bench.fill_k3_cache(k3, prompt, CONTEXT, "random", gen, HEADROOM)]
        bench._k3_in_place(k3, True)

        def k3_step(token):
            cache[0] = k3.run(token, cache[0]).cache

        for token in tokens[:3]:
            k3_step(token)
        print(f"K3: {ms_per_step(k3_step, tokens):.2f} ms per step")
        profile_steps(k3_step, tokens, "K3 step")


if __name__ == "__main__":
    main()
