# %% [markdown] slideshow={"slide_type": "slide"}
# # 01 · GPT-2 and the KV cache
#
# GPT-2 (Radford et al. 2019, OpenAI's GPT-2 report) is the starting point of the whole course. Every later chapter
# changes one part of it, so we build it here from its pieces, check our pieces against `k3lite.models.gpt2`, count
# its parameters exactly, and then look hard at the one structure that the rest of the course is about: **the KV
# cache**, the memory that softmax attention needs while it generates text.
#
# By the end of this chapter you will have
#
# 1. written a GPT-2 block by hand and checked it against the library,
# 2. counted GPT-2 small's parameters component by component,
# 3. shown that decoding with a KV cache gives the same logits as recomputing everything,
# 4. measured what the cache saves (compute) and what it costs (memory that grows with every token),
# 5. trained a tiny GPT-2 on a CPU and sampled from it.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 3 h for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. implement a pre-LayerNorm GPT-2 block (causal multi-head attention, GELU MLP) from tensor operations and check
#    it against `k3lite.models.gpt2` to a tolerance of `1e-5`;
# 2. compute GPT-2's exact parameter count from its configuration ($12d^2 + 13d$ per block, plus the embeddings) and
#    verify it on PyTorch's `meta` device;
# 3. implement one decoding step of attention against a KV cache, and explain why the cache changes the work but not
#    the logits;
# 4. compute the KV cache's bytes per token, $2 L H d_h$ times the bytes per element, and the context at which a
#    batch's cache reads overtake the weight reads.
#
# **Prerequisites.**
#
# - Chapter 00 (the lineage, and how to run a chapter).
# - Matrix products, softmax and the chain rule, with PyTorch's autograd: the [autograd
#   tutorial](https://pytorch.org/tutorials/beginner/basics/autogradqs_tutorial.html).
# - Scaled dot-product and multi-head attention: Vaswani et al. (2017),
#   [arXiv:1706.03762](https://arxiv.org/abs/1706.03762), §3.2.
# - What a GPU reads from memory while it computes (HBM against on-chip memory): the memory hierarchy section of
#   NVIDIA's [CUDA C++ Programming Guide](https://docs.nvidia.com/cuda/cuda-c-programming-guide/).

# %% tags=["plumbing"]
import math

import matplotlib.pyplot as plt
import torch

from myst_nb import glue

from k3lite.course import accounting, runtime, viz
from k3lite import data
from k3lite.course.checks import expect
from k3lite.exercises import ch01
from k3lite.models.gpt2 import GPT2, GPT2Config
from k3lite.train import evaluate, train

viz.use_style()
# One thread: on a shared two-core machine a single thread is not slower.
torch.set_num_threads(1)
generator = runtime.seed_everything(0)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The model in four equations
#
# Token ids $t_1, \dots, t_T$ become vectors by adding a learned token embedding and a learned
# position embedding:
#
# $$x^{(0)}_i = W_{te}[t_i] + W_{pe}[i].$$
#
# Then $L$ identical **pre-LayerNorm blocks** each add two things to this *residual stream*:
#
# $$h = x + \mathrm{Attn}\big(\mathrm{LN}_1(x)\big), \qquad x' = h + \mathrm{MLP}\big(\mathrm{LN}_2(h)\big).$$
#
# **Causal multi-head attention.** Each of the $H$ heads projects the normalised stream to
# queries, keys and values of width $d_h = d/H$ and mixes the values of token $i$ and the tokens
# *before* it (the causal mask):
#
# $$o_i = \sum_{j \le i} \operatorname{softmax}_j\!\left(\frac{q_i \cdot k_j}{\sqrt{d_h}}\right) v_j .$$
#
# The heads are concatenated and projected back to width $d$.
#
# **MLP.** Two linear maps with a GELU (Hendrycks and Gimpel 2016; the tanh approximation) in between, four times
# wider than the stream: $\mathrm{MLP}(x) = W_2\, \mathrm{GELU}(W_1 x + b_1) + b_2$.
#
# Finally a last LayerNorm, and the logits are scores against every token embedding,
# $\ell_i = W_{te}\, \mathrm{LN}_f(x^{(L)}_i)$: the output matrix *is* the input matrix (tied embeddings).

# %% [markdown] tags=["notes"]
# Write the two residual equations on the board and leave them there: every later chapter
# replaces only the attention term. Ask the room why the output head can reuse the embedding
# matrix (tied weights), and what the causal mask would break if it were missing. The hand-built
# block is checked against the library to float32 rounding: stress that a tolerance far below a
# wrong formula's error is what makes the check mean something.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Building the block by hand
#
# We write each piece as a plain function of tensors. The weights come from a `k3lite` block, so
# the two compute the same function and may differ only by float32 rounding (the order in which
# sums are added). We check the largest difference against a tolerance of `1e-5`: rounding stays
# far below it, a wrong formula lands far above it.

# %%
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(dim=-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # the biased variance, as PyTorch uses
    return (x - mean) / torch.sqrt(variance + eps) * weight + bias


def attention(x, w_qkv, b_qkv, w_out, b_out, n_head):
    batch, steps, width = x.shape
    head_dim = width // n_head
    q, k, v = (x @ w_qkv.T + b_qkv).split(width, dim=-1)
    # [B, T, d] -> [B, H, T, d_h]: every head works on its own slice of the width
    q, k, v = (t.view(batch, steps, n_head, head_dim).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)
    future = torch.triu(torch.ones(steps, steps, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    mixed = scores.softmax(dim=-1) @ v
    return mixed.transpose(1, 2).reshape(batch, steps, width) @ w_out.T + b_out


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def mlp(x, w_up, b_up, w_down, b_down):
    return gelu_tanh(x @ w_up.T + b_up) @ w_down.T + b_down


def block(x, p, n_head):
    """One pre-LayerNorm block; ``p`` maps names to the block's weight tensors."""
    x = x + attention(layer_norm(x, p["ln_1.weight"], p["ln_1.bias"]),
                      p["attn.qkv.weight"], p["attn.qkv.bias"], p["attn.proj.weight"], p["attn.proj.bias"], n_head)
    return x + mlp(layer_norm(x, p["ln_2.weight"], p["ln_2.bias"]),
                   p["mlp.fc.weight"], p["mlp.fc.bias"], p["mlp.proj.weight"], p["mlp.proj.bias"])


# %% [markdown]
# The library's model, small enough for a CPU (bytes as tokens, so a vocabulary of 256):

# %%
tiny = GPT2Config.tiny()
model = GPT2(tiny).eval()
print(tiny)
print(f"parameters: {accounting.count_parameters(model):,}")

# %%
x = torch.randn(2, 16, tiny.n_embd, generator=generator)
weights = {name: tensor.detach() for name, tensor in model.blocks[0].state_dict().items()}
with torch.no_grad():
    by_hand = block(x, weights, tiny.n_head)
    by_library = model.blocks[0](x)
TOLERANCE = 1e-5
print(f"one block, max |hand - k3lite| < 1e-5: {(by_hand - by_library).abs().max().item() < TOLERANCE}")

# %% [markdown]
# Now the whole model: embeddings, every block, the final LayerNorm and the tied output head.

# %%
def gpt2_forward(idx, model):
    steps = idx.shape[1]
    x = model.wte.weight[idx] + model.wpe.weight[:steps]
    for layer in model.blocks:
        x = block(x, {n: t.detach() for n, t in layer.state_dict().items()}, model.config.n_head)
    x = layer_norm(x, model.ln_f.weight, model.ln_f.bias)
    return x @ model.wte.weight.T


idx = torch.randint(0, tiny.vocab_size, (2, 24), generator=generator)
with torch.no_grad():
    difference = (gpt2_forward(idx, model) - model(idx)).abs().max().item()
print(f"whole model, max |hand - k3lite| of the logits < 1e-5: {difference < TOLERANCE}")

# %% [markdown] slideshow={"slide_type": "subslide"} tags=["reading"]
# ### Real checkpoints
#
# Published GPT-2 weights use Hugging Face's names (`transformer.h.0.attn.c_attn.weight`, ...)
# and store the projections as `Conv1D`, whose weight is `[in, out]`: the transpose of an
# `nn.Linear` weight. `GPT2.from_hf(state_dict)` renames and transposes; `to_hf_state_dict()` goes
# the other way. Nothing can be downloaded here, so we check the round trip on our own model.
# The head count cannot be read off the shapes: without `config=`, `from_hf` assumes GPT-2's 64
# dimensions per head, which our tiny model (32 per head) does not use.

# %%
exported = model.to_hf_state_dict()
for name in ("transformer.h.0.attn.c_attn.weight", "transformer.h.0.mlp.c_fc.weight", "lm_head.weight"):
    print(f"{name:<38}{tuple(exported[name].shape)}")
print(f"ours: blocks.0.attn.qkv.weight        {tuple(model.blocks[0].attn.qkv.weight.shape)}")
reloaded = GPT2.from_hf(exported, config=tiny).eval()
with torch.no_grad():
    print(f"round trip, identical logits: {torch.equal(reloaded(idx), model(idx))}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Counting GPT-2 small's parameters
#
# Each block has two LayerNorms ($2d$ each: a scale and a shift), the query-key-value projection
# ($d \cdot 3d + 3d$), the output projection ($d^2 + d$) and the MLP ($d \cdot 4d + 4d$ up,
# $4d \cdot d + d$ down): $12d^2 + 13d$ in all. Add the two embedding tables and the final
# LayerNorm, and the output head adds nothing because it is tied to $W_{te}$.

# %% [markdown] tags=["notes"]
# Derive $12d^2 + 13d$ per block together before the cell prints it; students remember a count
# they did themselves. The point to take away: at this size the embeddings are a large share of
# the model, and the analytic count is checked against the real module on PyTorch's `meta` device.

# %%
small = GPT2Config()
parts = accounting.gpt2_parameter_breakdown(small)
print(f"{'component':<22}{'parameters':>14}")
print(f"{f'wte ({small.vocab_size} x {small.n_embd})':<22}{parts['wte']:>14,}")
print(f"{f'wpe ({small.n_ctx} x {small.n_embd})':<22}{parts['wpe']:>14,}")
for name, count in accounting.gpt2_block_parameters(small).items():
    print(f"{'  block: ' + name:<22}{count:>14,}")
print(f"{'each block':<22}{parts['each block']:>14,}")
print(f"{'12 blocks':<22}{parts['all blocks']:>14,}")
print(f"{'ln_f':<22}{parts['ln_f']:>14,}")
print(f"{'total':<22}{accounting.gpt2_parameter_count(small):>14,}")
glue("ch01_param_count", f"{accounting.gpt2_parameter_count(small):,}", display=False)

# %% [markdown]
# An analytic count is only as good as its check. PyTorch's `meta` device builds a module with
# shapes but no storage, so we can count the real `GPT2` module of every size, even XL, in
# milliseconds and without allocating the gigabytes XL's weights would take (the last line prints how many):

# %% tags=["plumbing"]
print(f"{'size':<8}{'analytic':>16}{'counted on meta':>18}")
for size in ("small", "medium", "large", "xl"):
    config = getattr(GPT2Config, size)()
    analytic = accounting.gpt2_parameter_count(config)
    counted = accounting.meta_param_count(lambda config=config: GPT2(config))
    print(f"{size:<8}{analytic:>16,}{counted:>18,}")
print(f"XL's weights in float32 would take {4 * accounting.gpt2_parameter_count(GPT2Config.xl()) / 1e9:.1f} GB")

# %% [markdown]
# The embeddings are almost a third of the small model; the share falls as the models get wider and deeper:

# %% tags=["plumbing"]
for size in ("small", "medium", "large", "xl"):
    config = getattr(GPT2Config, size)()
    size_parts = accounting.gpt2_parameter_breakdown(config)
    share = (size_parts["wte"] + size_parts["wpe"]) / accounting.gpt2_parameter_count(config)
    print(f"embeddings are {share:.0%} of GPT-2 {size}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Generating text, and the work it repeats
#
# To generate, the model predicts one token from the logits at the last position, appends it,
# and runs again. Run naively, step $n$ recomputes the keys and values of all $n$ earlier tokens,
# although they have not changed: a token's key and value depend only on that token and the ones before it (the
# causal mask ensures this in every layer), so later tokens never change them.
#
# The fix is to keep them. The **KV cache** stores, for every layer, the keys and values of the
# tokens seen so far; a decoding step then computes projections for the *one* new token, appends
# its key and value, and lets its query attend to the whole cache.

# %% [markdown]
# ![GPT-2 block with its KV cache: each step writes one key and value row and reads all of them](../figures/diagram_gpt2_block.svg)

# %% [markdown] tags=["notes"]
# Use the diagram: the new token's attention writes one row of keys and values and reads every
# row written before. Ask the room what a key depends on (only the tokens before it), which is
# why it may be kept. Then show that the cache changes the work, not the answer: the same logits
# and the same greedy tokens.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### The cache changes the work, not the answer
#
# We sample 64 tokens with the cache, then, at every one of those positions, compare the cached
# step's logits with a full recomputation of the whole prefix.

# %%
prompt = data.encode("def ")[None, :]
sampled = model.generate(prompt, 64, temperature=1.0, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    logits, cache = model(sampled[:, :prompt.shape[1]], model.new_cache())
    worst = 0.0
    for position in range(prompt.shape[1], sampled.shape[1]):
        step_logits, cache = model(sampled[:, position:position + 1], cache)
        full_logits = model(sampled[:, :position + 1])[:, -1]
        worst = max(worst, (step_logits[:, -1] - full_logits).abs().max().item())
print(f"positions compared: {sampled.shape[1] - prompt.shape[1]}")
print(f"max |cached - recomputed| logits <= 1e-4: {worst <= 1e-4}")
same_tokens = torch.equal(model.generate(prompt, 64, temperature=0),
                          model.generate(prompt, 64, temperature=0, use_cache=False))
print(f"greedy tokens identical with and without cache: {same_tokens}")

# %% [markdown]
# Inside the cache: one key and one value tensor per layer, laid out `[B, T, H, d_h]`, the field's layout and the
# one every later chapter uses. Note that heads are the third axis here, not the second as inside `attention`
# above, which moves them forward for the matrix products.

# %%
print(f"cached tokens: {cache.length}")
print(f"keys of layer 0: {tuple(cache.keys[0].shape)}")
print(f"bytes held (float32): {cache.nbytes():,}")
print(f"formula, {cache.length} tokens x {accounting.gpt2_kv_bytes_per_token(tiny, torch.float32):,} B/token: "
      f"{accounting.gpt2_kv_bytes_per_sequence(tiny, cache.length, torch.float32):,}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### What the cache saves: compute
#
# We count FLOPs, two per multiply-add. Per layer, one token costs $24d^2$ FLOPs in its projections ($4d^2$
# multiply-adds for query, key, value and output, $8d^2$ for the MLP) plus $4d(n+1)$ FLOPs to score and mix the
# $n + 1$ keys it can see (the token at position $n$ has $n$ tokens cached and attends to them and to itself;
# `accounting.gpt2_forward_flops(config, new_tokens, past_tokens)` counts it); the logits add $2dV$, where $V$ = 50,257 is the vocabulary size (GPT-2's, from its report). With
# the cache, the token at position $n$ pays this once; without it, the whole prefix of $n$ tokens is run through
# the model again. We count that recomputation two ways: as a plain forward pass with logits at every position, as
# reference code computes them, and as a loop that keeps only the last position's logits, which saves the $2dV$
# of the others.

# %% tags=["plumbing"]
positions = list(range(0, small.n_ctx, 8))
with_cache = [accounting.gpt2_forward_flops(small, 1, n) for n in positions]
without_cache = [accounting.gpt2_forward_flops(small, n + 1) for n in positions]
fig, ax = plt.subplots()
ax.plot(positions, [f / 1e9 for f in without_cache], label="recompute the prefix", color=viz.PALETTE["red"])
ax.plot(positions, [f / 1e9 for f in with_cache], label="with a KV cache", color=viz.PALETTE["blue"])
ax.set_yscale("log")
ax.set_xlabel("position of the generated token")
ax.set_ylabel("GFLOPs for that one token")
ax.set_title("GPT-2 small: compute per generated token")
ax.legend()
plt.show()

# %% [markdown]
# On the logarithmic axis the recomputation (red) climbs with the position while the cached step (blue) stays
# nearly flat: with a cache only the $4d(n+1)$ attention term grows, and it stays small next to the projections and
# the logits.

# %%
last = small.n_ctx - 1
cached_flops = accounting.gpt2_forward_flops(small, 1, last)
recomputed_flops = accounting.gpt2_forward_flops(small, last + 1)
print(f"token {last} (the last of the context): {cached_flops / 1e9:.2f} GFLOPs with the cache, "
      f"{recomputed_flops / 1e9:.0f} GFLOPs without ({recomputed_flops / cached_flops:.0f}x)")
logits_of_the_prefix = 2 * small.n_embd * small.vocab_size * last  # the logits of the first `last` positions
recomputed_last_logits = recomputed_flops - logits_of_the_prefix
print(f"without the cache, logits at the last position only: {recomputed_last_logits / 1e9:.0f} GFLOPs "
      f"({recomputed_last_logits / cached_flops:.0f}x)")
glue("ch01_cache_saving", f"{recomputed_flops / cached_flops:.0f}", display=False)
glue("ch01_cache_saving_last_logits", f"{recomputed_last_logits / cached_flops:.0f}", display=False)

# %% [markdown]
# At the end of GPT-2's context the cache saves a factor of {glue:text}`ch01_cache_saving` in compute, or
# {glue:text}`ch01_cache_saving_last_logits` against a recomputation that keeps only the last logits. On this
# machine, for the tiny model, expect far less: it generates only 120 tokens, where fixed costs per step (Python,
# small kernels) weigh more than the arithmetic. Times vary from run to run, so the output is not checked:

# %%
# NBVAL_IGNORE_OUTPUT
import time

for use_cache in (True, False):
    start = time.perf_counter()
    model.generate(prompt, 120, temperature=0, use_cache=use_cache)
    print(f"use_cache={use_cache}: {time.perf_counter() - start:.3f} s for 120 tokens")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. What the cache costs: memory that grows with every token
#
# Per token, multi-head attention caches one key and one value per layer and head:
#
# $$\text{bytes per token} = 2 \cdot L \cdot H \cdot d_h \cdot \text{bytes per element}.$$
#
# We count the cache in a 16-bit format, bf16 (bfloat16): 2 bytes per number, against float32's 4. (Serving systems
# also use fp16, or quantise the cache further.)

# %% [markdown] tags=["notes"]
# The formula is the whole lesson: two tensors per layer and head, for every token of the sequence.
# With a batch of 32 sequences, ask the room from which position the cache reads overtake the
# weight reads, then show the crossover the cell computes. This is the failure chapter 02 starts from.

# %%
bf16_per_token = accounting.gpt2_kv_bytes_per_token(small, "bf16")
print(f"GPT-2 small, bf16: 2 x {small.n_layer} x {small.n_head} x {small.head_dim} x 2 = {bf16_per_token:,} bytes per token")
full_context = accounting.gpt2_kv_bytes_per_sequence(small, small.n_ctx, "bf16")
print(f"a full {small.n_ctx}-token context: {full_context / 2**20:.1f} MiB per sequence")
glue("ch01_kv_bytes_bf16", f"{bf16_per_token:,}", display=False)
glue("ch01_kv_mib_full_context", f"{full_context / 2**20:.1f}", display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots()
lengths = list(range(0, 1025, 32))
for size, color in zip(("small", "medium", "large", "xl"), viz.CYCLE):
    config = getattr(GPT2Config, size)()
    ax.plot(lengths, [accounting.gpt2_kv_bytes_per_sequence(config, n, "bf16") / 2**20 for n in lengths],
            label=f"GPT-2 {size}", color=color)
ax.set_xlabel("sequence length (tokens)")
ax.set_ylabel("KV cache per sequence (MiB, bf16)")
ax.set_title("The KV cache grows linearly with the sequence")
ax.legend()
plt.show()

# %% [markdown]
# Straight lines through the origin: every token adds the same bytes, and a bigger model adds more per token
# (more layers, more heads).

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Bytes read per decoding step
#
# Generating one token is a handful of matrix-vector products: the arithmetic is small and the
# time goes into *reading* from GPU memory (HBM). Each step reads every weight matrix once (shared by the
# whole batch; of the position table `wpe` only the current position's row) and, for each sequence, the entire
# cache so far. With a batch of sequences the
# cache reads overtake the weights:

# %%
fig, ax = plt.subplots()
steps_at = list(range(0, 1024, 16))
weights_read = accounting.gpt2_decode_bytes_read(small, 0)["weights"]
ax.axhline(weights_read / 2**20, color=viz.PALETTE["black"], linestyle="--", label="weights (any batch)")
for batch, color in ((1, viz.PALETTE["sky"]), (8, viz.PALETTE["blue"]), (32, viz.PALETTE["red"])):
    cache_read = [accounting.gpt2_decode_bytes_read(small, n, batch_size=batch)["kv_cache"] / 2**20 for n in steps_at]
    ax.plot(steps_at, cache_read, label=f"KV cache, batch {batch}", color=color)
ax.set_xlabel("position of the generated token")
ax.set_ylabel("MiB read from HBM per step (bf16)")
ax.set_title("GPT-2 small: what one decoding step reads")
ax.legend()
plt.show()

# %%
crossover = next(n for n in range(small.n_ctx)
                 if accounting.gpt2_decode_bytes_read(small, n, batch_size=32)["kv_cache"] > weights_read)
print(f"weights read per step: {weights_read / 2**20:.1f} MiB")
print(f"with 32 sequences, the cache reads exceed the weights from position {crossover} on")

# %% [markdown]
# This linear growth is the failure the next chapters attack. Linear attention (chapter 02)
# replaces the growing cache by a **fixed-size state**; the rest of the course is about making
# that state remember as well as the cache does.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Training a tiny GPT-2 on a CPU
#
# The corpus is the source code of a few modules of Python's standard library (the same bytes on
# every machine, nothing downloaded), read as bytes. A uniform guess over 256 byte values has a
# loss of $\ln 256$. The model is smaller than `GPT2Config.tiny()`: three blocks of width 96, a
# context of 128 bytes: small enough for a few hundred optimiser steps on a laptop CPU within
# this chapter's time budget.

# %% [markdown] tags=["notes"]
# Run the training live if the machine allows, otherwise show the stored outputs: the loss
# starts at the uniform guess $\ln 256$ and falls. Read the samples aloud before and after
# training; the layout of Python appears long before any words do.

# %%
text = data.corpus_text()
ids = data.encode(text)
train_ids, val_ids = data.train_val_split(ids)
print(f"corpus: {len(ids):,} bytes, fingerprint {data.corpus_fingerprint(text)}")
print(f"uniform guess: loss {math.log(256):.2f}")

# %%
runtime.seed_everything(0)
student_config = GPT2Config.tiny(n_embd=96, n_layer=3)
student = GPT2(student_config).to(runtime.device())
print(student_config)
print(f"parameters: {accounting.count_parameters(student):,}")
SMALL_STEPS, FULL_STEPS = 400, 4000            # the CPU profile's budget, and the GPU profile's
steps = runtime.pick(SMALL_STEPS, FULL_STEPS)
glue("ch01_steps", f"{steps}", display=False)
glue("ch01_full_steps", f"{FULL_STEPS:,}", display=False)
batch_generator = torch.Generator().manual_seed(0)


def sample(model, length=100):
    """A seeded sample (temperature 0.8) continuing "def ", decoded to text."""
    prompt = data.encode("def ")[None, :].to(runtime.device())
    tokens = model.generate(prompt, length, temperature=0.8, generator=torch.Generator().manual_seed(0))
    return data.decode(tokens[0].cpu())


def next_batch(step):
    inputs, targets = data.random_batch(train_ids, 8, 128, batch_generator)
    return inputs.to(runtime.device()), targets.to(runtime.device())


val_batch = tuple(t.to(runtime.device()) for t in data.random_batch(val_ids, 16, 128, torch.Generator().manual_seed(1)))
untrained_sample = sample(student)
untrained_loss = evaluate(student, *val_batch)
history = train(student, next_batch, steps=steps, lr=6e-3, warmup=20, eval_batch=val_batch, eval_every=25)

# %% [markdown]
# The exact losses depend on the CPU: a few hundred steps of float32 arithmetic add in an order that
# differs between processors, instruction sets and thread counts. So the exact numbers are shown (and
# not compared by the notebook tests), and what the lesson needs of them is checked below.

# %%
# NBVAL_IGNORE_OUTPUT
print("before training:", repr(untrained_sample))
print(f"validation loss: {untrained_loss:.2f} untrained, {history.val_loss[0]:.2f} after the first update, "
      f"{history.val_loss[-1]:.2f} after {steps} steps")
glue("ch01_final_val_loss", f"{history.val_loss[-1]:.2f}", display=False)

# %%
expect(f"the untrained model's validation loss is within 0.5 of the uniform guess ({math.log(256):.2f})",
       abs(untrained_loss - math.log(256)) < 0.5)
expect(f"validation loss after {steps} steps < 2.7", history.val_loss[-1] < 2.7)

# %% tags=["plumbing"]
fig, ax = plt.subplots()
ax.plot(history.steps, history.train_loss, label="training batch", color=viz.PALETTE["sky"], linewidth=1)
ax.plot(history.val_steps, history.val_loss, "o-", label="validation", color=viz.PALETTE["blue"])
ax.axhline(math.log(256), color=viz.PALETTE["black"], linestyle="--", label="uniform guess")
ax.set_xlabel("optimiser step")
ax.set_ylabel("cross-entropy (nats per byte)")
ax.set_title("A tiny GPT-2 learning Python source")
ax.legend()
plt.show()

# %% [markdown]
# Before training, the validation loss is close to the uniform guess over 256 bytes, $\ln 256$ (the first cell
# above prints it; the plot's first validation point already comes after one update). It falls as the model
# learns which bytes follow which; the loss on each training batch is noisier but follows it.

# %% [markdown]
# The same seeded sample after training (temperature 0.8, with the KV cache). Its letters depend on the
# exact weights, so they differ from CPU to CPU (the notebook tests do not compare them); what a trained
# model's sample has in common everywhere is checked in the cell after it.

# %%
# NBVAL_IGNORE_OUTPUT
trained_sample = sample(student)
print(trained_sample)


# %%
def printable_share(text):
    """The share of characters that are printable ASCII, line breaks or tabs."""
    return sum(ch.isascii() and (ch.isprintable() or ch in "\n\t") for ch in text) / len(text)


expect("untrained sample: under half of it printable ASCII", printable_share(untrained_sample) < 0.5)
expect("trained sample: over 95 % of it printable ASCII", printable_share(trained_sample) > 0.95)

# %% [markdown]
# Before training: arbitrary bytes. After {glue:text}`ch01_steps` steps (validation loss
# {glue:text}`ch01_final_val_loss` on this machine), the sample is made of the characters of Python
# source and starts to take its *layout*: line breaks, indentation, groups of letters separated by
# spaces and punctuation, but hardly any real words yet. Words need many more steps; the full profile
# (`K3LITE_PROFILE=full`, meant for a GPU) trains for {glue:text}`ch01_full_steps` steps.

# %% [markdown] slideshow={"slide_type": "subslide"} tags=["reading"]
# ### Where the trained model looks
#
# Each of the model's 12 heads (3 blocks of 4) has its own attention pattern. Feed it two lines of
# Python and ask one question of all of them: which head, when the second line's indentation is
# being read, looks back at the line break? The line break tells those bytes where their line began,
# and so how deep the indentation already is. The weights come from the functions written at the
# top of the chapter.

# %%
def attention_weights(x, p, n_head, head):
    """Softmax weights [T, T] of one head of a block, for the residual stream ``x`` [1, T, d]."""
    steps, width = x.shape[1], x.shape[2]
    normed = layer_norm(x, p["ln_1.weight"], p["ln_1.bias"])
    q, k, _ = (normed @ p["attn.qkv.weight"].T + p["attn.qkv.bias"]).split(width, dim=-1)
    head_dim = width // n_head
    q, k = (t.view(steps, n_head, head_dim)[:, head] for t in (q[0], k[0]))
    scores = q @ k.T / math.sqrt(head_dim)
    return scores.masked_fill(torch.triu(torch.ones(steps, steps, dtype=torch.bool), 1), float("-inf")).softmax(-1)


text_snippet = "        if self.width <= 0:\n            raise Value"
line_break = text_snippet.index("\n")
second_line = text_snippet[line_break + 1:]
indentation = range(line_break + 1, line_break + 1 + len(second_line) - len(second_line.lstrip(" ")))
snippet = data.encode(text_snippet)[None, :].to(runtime.device())
student.eval()
weights_of = {}  # (block, head) -> [T, T]
with torch.no_grad():
    stream = student.wte(snippet) + student.wpe.weight[:snippet.shape[1]]
    for block_index, layer in enumerate(student.blocks):
        params = {n: t for n, t in layer.state_dict().items()}
        for head in range(student_config.n_head):
            weights_of[block_index, head] = attention_weights(stream, params, student_config.n_head, head).cpu()
        stream = layer(stream)

on_line_break = {key: w[list(indentation), line_break].mean().item() for key, w in weights_of.items()}
found = max(on_line_break, key=on_line_break.get)
chosen = weights_of[found]
median_weight = sorted(on_line_break.values())[len(on_line_break) // 2]
most_attended = chosen[list(indentation)].argmax(dim=-1)
found_on_line_break = (most_attended == line_break).sum().item()
print(f"the line break is byte {line_break}; the indentation after it is bytes {indentation.start}-{indentation.stop - 1}")
print(f"rows sum to one: {torch.allclose(chosen.sum(-1), torch.ones(snippet.shape[1]), atol=1e-5)}")
print(f"weight above the diagonal: {chosen.triu(1).abs().sum().item():.1f}")

# %% [markdown]
# Which head it is, and its exact weights, depend on the training run and so on the CPU:

# %%
# NBVAL_IGNORE_OUTPUT
print(f"the head that looks most at the line break from the indentation: block {found[0]}, head {found[1]} "
      f"(mean weight {on_line_break[found]:.2f}; the median head: {median_weight:.2f})")
print(f"for {found_on_line_break} of the {len(indentation)} indentation bytes, "
      f"the line break is this head's most attended key")

# %%
expect("the chosen head puts a mean weight > 0.3 on the line break (uniform: about 0.03)", on_line_break[found] > 0.3)
expect("the median head puts a mean weight < 0.1 on it", median_weight < 0.1)
expect(f"the line break is its most attended key for at least 9 of the {len(indentation)} indentation bytes",
       found_on_line_break >= 9)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 5.6))
viz.heatmap(ax, chosen, title=f"block {found[0]}, head {found[1]}: the head that finds the line break",
            xlabel="key position (byte)", ylabel="query position (byte)", colorbar_label="attention weight")
fig.suptitle(f"Attention weights of the trained {student_config.n_layer}-block model on two lines of Python")
fig.tight_layout()
plt.show()

# %% [markdown]
# Everything above the diagonal is zero (the causal mask) and every row sums to one: each byte's
# query spreads a fixed budget over its past. The bright column at the line break, in the rows of
# the indentation, is the head doing its job.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# Three kinds: a **prediction** (write down what you expect, then run the measurement; the checker accepts
# a range and explains the gap), a **transfer** (the chapter's idea on a case it did not show) and an
# **open question** (a paragraph; the model answer for the lecturer is folded below it).
#
# ### Exercise 1 (prediction): when does the cache outweigh the model?
#
# GPT-2 XL has $L = 48$ blocks of width $d = 1600$ with 25 heads, and the same vocabulary and context as
# GPT-2 small. In bf16, after how many tokens of *one* sequence does its KV cache hold as many bytes as the
# model's own weights? Estimate it from sections 2 and 4 without computing the exact count (a rough count
# of the blocks' weights is enough), return your number, then run the measurement. The checker accepts a
# prediction within 30 %. The answer may exceed XL's 1,024-token context: treat it as a hypothetical length.

# %% [markdown] tags=["notes"]
# Take the prediction as a show of hands first: most guesses are either far too small or scale with the
# number of layers. The point is that the layer count cancels, about 6d tokens. Exercise 2 (one decoding
# step against a cache) is the core skill; exercise 3 transfers it to sliding-window attention. The open
# question makes a good five-minute discussion at the end of the lecture.

# %%
def predicted_crossover_tokens():
    raise NotImplementedError  # return your estimate, a number of tokens


# %%
xl = GPT2Config.xl()
xl_weight_bytes = accounting.gpt2_parameter_count(xl) * 2                   # bf16: 2 bytes per parameter
xl_cache_bytes_per_token = accounting.gpt2_kv_bytes_per_token(xl, "bf16")
ch01.check_cache_outweighs_prediction(predicted_crossover_tokens,
                                      measured=xl_weight_bytes / xl_cache_bytes_per_token);


# %% tags=["solution"]
# Solution: 12·L·d² weights in the blocks (plus V·d for the embedding) against 2·L·d cached numbers per token:
# about 6d tokens from the blocks, whatever L is, plus V/(2L) from the embedding.
def predicted_crossover_tokens_solution():
    return 6 * 1600 + 50_257 / (2 * 48)


ch01.check_cache_outweighs_prediction(predicted_crossover_tokens_solution,
                                      measured=xl_weight_bytes / xl_cache_bytes_per_token);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2: one decoding step of attention
#
# Write `attention_step(q, k_cache, v_cache)`: a single new query `[B, 1, H, d_h]` attends to all
# `T` cached keys and values `[B, T, H, d_h]` (its own key is already the last one), each head on
# its own, with the usual $1/\sqrt{d_h}$ scale. Return the new token's attention output, laid out
# like the query: `[B, 1, H, d_h]` (before the output projection). No mask is needed: why?

# %%
def attention_step(q, k_cache, v_cache):
    raise NotImplementedError


# %%
ch01.check_attention_step(attention_step);


# %% tags=["solution"]
# Solution: the newest token may see every cached token, so nothing is masked.
def attention_step_solution(q, k_cache, v_cache):
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k_cache) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(dim=-1), v_cache)


ch01.check_attention_step(attention_step_solution);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 (transfer): a decoding step of sliding-window attention
#
# Some models bound the cache by letting each token attend only to the last $W$ tokens, its own included
# (causal sliding-window attention as in Jiang et al. 2023, Mistral 7B, §2,
# [arXiv:2310.06825](https://arxiv.org/abs/2310.06825), whose "rolling buffer" cache holds $W$ tokens; Longformer,
# Beltagy et al. 2020, §3.1, [arXiv:2004.05150](https://arxiv.org/abs/2004.05150), introduced the two-sided
# window). Write `window_attention_step(q, k_cache, v_cache, window)`: the
# decoding step of exercise 2 for such a model, given a cache that still holds all `T` tokens. When fewer
# than `window` tokens are cached, the step sees all of them. Then answer for yourself: how much cache does
# this model hold after a million tokens, and what has it given up?

# %%
def window_attention_step(q, k_cache, v_cache, window):
    raise NotImplementedError


# %%
ch01.check_window_attention_step(window_attention_step);


# %% tags=["solution"]
# Solution: the newest `window` tokens are the last ones; slicing past the start keeps them all. The cache
# never holds more than W tokens (a fixed size, like the state of the next chapter), and a token further back
# than W positions can no longer be read at all, however important it was.
def window_attention_step_solution(q, k_cache, v_cache, window):
    k_recent, v_recent = k_cache[:, -window:], v_cache[:, -window:]
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k_recent) / math.sqrt(q.shape[-1])
    return torch.einsum("bhqk,bkhd->bqhd", scores.softmax(dim=-1), v_recent)


ch01.check_window_attention_step(window_attention_step_solution);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4 (open question): when is the cache not worth it?
#
# The KV cache trades memory for compute. Describe a situation in which generating *without* a cache (or
# with a cache that is partly thrown away and recomputed) is the better choice, and say which quantities
# from this chapter decide it.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# The cache saves recomputing the keys and values of the prefix, at the price of holding them and reading
# all of them at every step. It stops paying when memory, not arithmetic, is the limit: (1) very long
# contexts or large batches whose cache no longer fits next to the weights (section 4: the cache grows
# linearly and, with a batch, its reads overtake the weight reads), where one recomputes evicted parts,
# shrinks the batch or offloads; (2) very short generations from a short prompt, where the prefix costs
# almost nothing to recompute and the cache's bookkeeping is overhead; (3) serving many users, where
# memory spent on one user's cache is a batch slot taken from another. The deciding quantities are the
# bytes per token ($2 L H d_h$ times the element size), the number of tokens and sequences, the memory
# left after the weights, and the ratio of the recomputation's FLOPs to the cache's bytes read per step.
# Give credit for any situation argued from these numbers; a strong answer adds that the rest of the course
# attacks the same trade-off from the other side, with a state of fixed size.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Summary
#
# * GPT-2 is embeddings, $L$ pre-LayerNorm blocks (causal softmax attention, GELU MLP), a final
#   LayerNorm and a tied output head; GPT-2 small has exactly {glue:text}`ch01_param_count` parameters.
# * The KV cache makes each generated token cost one token's worth of compute, and it changes
#   the work, not the answer: logits within 1e-4 of a full recomputation, the same greedy tokens.
# * Its price is memory: {glue:text}`ch01_kv_bytes_bf16` bytes per token for GPT-2 small in bf16, growing with
#   the sequence ({glue:text}`ch01_kv_mib_full_context` MiB at GPT-2's full context, per sequence of the batch),
#   and read in full at every step.
#
# Next: linear attention folds the whole history into a state whose size does not depend on the
# sequence length.

# %% [markdown] tags=["notes"]
# Three facts to leave with: the exact parameter count, the cache gives the same answer for a
# fraction of the compute, and the cache's memory grows with every token. Ask what a model would
# have to give up to keep a memory of fixed size: that is the next lecture.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. How many parameters has one GPT-2 block of width $d = 1024$?
# 2. Why does a decoding step with a KV cache need no causal mask?
# 3. GPT-2 small caches {glue:text}`ch01_kv_bytes_bf16` bytes per token in bf16. How much is that for 8 sequences of 1,024 tokens?
# 4. Why does GPT-2's output head add no parameters?
#
# <details>
# <summary>Short answers</summary>
#
# 1. $12d^2 + 13d = 12{,}582{,}912 + 13{,}312 = 12{,}596{,}224$.
# 2. The new query is the last position: every key in the cache belongs to a token at or before it, so none of them
#    has to be masked.
# 3. $36{,}864 \cdot 1{,}024 \cdot 8 = 301{,}989{,}888$ bytes, 288 MiB, and all of it is read at every decoding
#    step.
# 4. It is tied to the token embedding: the logits are scores against the rows of $W_{te}$.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Radford, Wu, Child, Luan, Amodei and Sutskever (2019), *Language Models are Unsupervised Multitask Learners*,
#   OpenAI: [the report (PDF)](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf):
#   the architecture and the 50,257-token vocabulary (§2.3: LayerNorm moved to the input of each sub-block) and
#   the sizes (Table 2, whose parameter counts are lower than the exact counts computed in section 2).
# - Vaswani et al. (2017), *Attention Is All You Need*, NeurIPS 2017:
#   [arXiv:1706.03762](https://arxiv.org/abs/1706.03762): causal multi-head attention (§3.2).
# - Hendrycks and Gimpel (2016), *Gaussian Error Linear Units (GELUs)*:
#   [arXiv:1606.08415](https://arxiv.org/abs/1606.08415).
# - Ba, Kiros and Hinton (2016), *Layer Normalization*: [arXiv:1607.06450](https://arxiv.org/abs/1607.06450).
# - Press and Wolf (2017), *Using the Output Embedding to Improve Language Models*, EACL 2017:
#   [arXiv:1608.05859](https://arxiv.org/abs/1608.05859): tied input and output embeddings.
# - Pope et al. (2022), *Efficiently Scaling Transformer Inference*:
#   [arXiv:2211.05102](https://arxiv.org/abs/2211.05102): why decoding is limited by reading weights and the KV
#   cache (background for section 4).
# - The Hugging Face GPT-2 checkpoint, whose weight names `from_hf` reads:
#   [huggingface.co/openai-community/gpt2](https://huggingface.co/openai-community/gpt2).
