# %% [markdown] slideshow={"slide_type": "slide"}
# # 02 · Linear attention: a fixed-size state
#
# Chapter 01 ended with GPT-2 decoding one token at a time from a **KV cache**: every key and value
# it has ever produced, for every layer and head. The cache makes decoding cheap in arithmetic, but it
# grows by one entry per token, and each new token has to *read all of it*.
#
# This chapter follows the 2020 answer to that (Katharopoulos et al., *Transformers are RNNs*, ICML 2020,
# [arXiv:2006.16236](https://arxiv.org/abs/2006.16236)):
#
# 1. measure what the cache costs as the context grows;
# 2. rewrite softmax attention as a weighted average with a *similarity kernel*;
# 3. pick a kernel that factorises, $\mathrm{sim}(q,k)=\phi(q)^\top\phi(k)$, and re-associate the
#    product so that the whole history folds into one fixed $D\times D$ matrix ($D$ the head dimension);
# 4. compute the same thing three ways (parallel, recurrent, chunked) and check they agree,
#    with each other and with `k3lite.ops.linear_attention`;
# 5. look at what we paid: a kernel that cannot focus as sharply as softmax;
# 6. and put the paper's "$O(N^2)$" in its 2020 context, FlashAttention came two years later.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 2 h 30 min for a motivated student working alone: reading, running every cell, the exercises
# and the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. derive linear attention from softmax attention by factorising the similarity kernel and re-associating
#    $(\phi(Q)\phi(K)^\top)V = \phi(Q)(\phi(K)^\top V)$;
# 2. implement the parallel, recurrent and chunked forms of (normalised) linear attention and show that they agree
#    with each other and with `k3lite.ops.linear_attention`;
# 3. compute the bytes a decode step moves with a KV cache and with a fixed $D \times D$ state, and the context
#    length beyond which the state is smaller;
# 4. explain why a positive feature map cannot focus like softmax, and what "$O(N^2)$" meant before and after
#    FlashAttention.
#
# **Prerequisites.**
#
# - Chapter 01 (causal softmax attention, the KV cache and its bytes per token).
# - Associativity of matrix products and what a matrix product costs: any linear-algebra text, e.g. Strang,
#   *Introduction to Linear Algebra* (Wellesley-Cambridge Press), §2.4.
# - For section 6 only: the online softmax, Milakov and Gimelshein (2018),
#   [arXiv:1805.02867](https://arxiv.org/abs/1805.02867).

# %% tags=["plumbing"]
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from k3lite.course import viz
from k3lite.course.accounting import gpt2_kv_bytes_per_token
from k3lite.models.gpt2 import GPT2Config
from k3lite.course.runtime import seed_everything

viz.use_style()
generator = seed_everything(0)
torch.set_default_dtype(torch.float64)  # exact comparisons in the lesson; k3lite's own checks use float32


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:,.2f} MiB"


def agree(a, b, tol=1e-12) -> str:
    """Whether two results agree to `tol` (printing the raw gap would differ in the last bits between machines)."""
    gap = (torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max().item()
    return f"agree to {tol:.0e}: {gap < tol}"


# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The failure we start from: a cache that grows with the context
#
# GPT-2 small has 12 layers of 12 heads with head dimension $D = 64$. In 16-bit precision the cache
# stores, per token, a key and a value for every head of every layer:
# $2 \cdot 12 \cdot 12 \cdot 64 \cdot 2$ bytes.
#
# Linear attention (built below) replaces the cache of each head by one $D\times D$ matrix $S$ (plus a
# $D$-vector $z$ for the normaliser), kept in float32, whose size does not depend on the number of
# tokens $N$ at all.

# %% [markdown] tags=["notes"]
# Start from the number chapter 01 ended on and ask the room: beyond how many tokens is a
# fixed-size state smaller than the cache? Let them guess before the cell prints the crossover.
# Then insist on bytes *moved* per decode step, not bytes held: that is what sets decoding speed.

# %%
gpt2 = GPT2Config()
head_dim = gpt2.head_dim
kv_per_token = gpt2_kv_bytes_per_token(gpt2, "fp16")
state_bytes = gpt2.n_layer * gpt2.n_head * (head_dim * head_dim + head_dim) * 4  # S and z, float32

print(f"KV cache per token (fp16):           {kv_per_token:,} bytes")
print(f"linear-attention state, any N (fp32): {state_bytes:,} bytes = {mib(state_bytes)}")
print(f"the cache is larger than the state beyond N = {math.ceil(state_bytes / kv_per_token)} tokens")
for n_tokens in (1024, 32_768, 1_048_576):
    print(f"  N = {n_tokens:>9,}: cache {mib(n_tokens * kv_per_token):>14}  vs state {mib(state_bytes)}")

# %% tags=["plumbing"]
positions = torch.logspace(1, 6, 60).round().long().unique()   # context lengths N from 10 to a million
state_held = torch.full_like(positions, state_bytes)

fig, ax = plt.subplots()
ax.loglog(positions, positions * kv_per_token, color=viz.MECHANISM_COLORS["gpt2"], label="KV cache (fp16)")
ax.loglog(positions, state_held, color=viz.MECHANISM_COLORS["linear_attention"], label="linear-attention state (fp32)")
ax.set(xlabel="tokens in context N", ylabel="bytes held (whole model)", title="Memory held per sequence")
ax.legend()
plt.show()

# %% [markdown]
# On logarithmic axes the cache is a straight line (it grows in proportion to $N$) and the state is flat; they
# cross at the length printed above, and beyond it the gap widens without limit.
#
# Per decode step the cost that matters on a GPU is not arithmetic but **bytes moved from memory**.
# With a cache, each head reads $N$ keys and $N$ values ($2ND$ elements) and writes one key and one value
# ($2D$). Linear attention reads its state and writes it back: $D^2 + D$ elements each way, whatever $N$ is.

# %% tags=["plumbing"]
layers_heads = gpt2.n_layer * gpt2.n_head
cache_read = 2 * positions * head_dim * 2 * layers_heads           # fp16 keys and values
cache_written = torch.full_like(positions, 2 * head_dim * 2 * layers_heads)
state_moved = torch.full_like(positions, state_bytes)              # read once and written once

fig, ax = plt.subplots()
ax.loglog(positions, cache_read, color=viz.MECHANISM_COLORS["gpt2"], label="KV cache: read")
ax.loglog(positions, cache_written, color=viz.MECHANISM_COLORS["gpt2"], linestyle="--", label="KV cache: written")
ax.loglog(positions, state_moved, color=viz.MECHANISM_COLORS["linear_attention"], label="state: read (= written)")
ax.set(xlabel="tokens in context N (position of the token being decoded)",
       ylabel="bytes per decode step (whole model, attention only)", title="Bytes moved to decode one token")
ax.legend()
plt.show()

# %%
at = 100_000
print(f"decoding token {at:,}: the cache reads {mib(2 * at * head_dim * 2 * layers_heads)}, "
      f"linear attention reads {mib(state_bytes)} and writes the same")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Softmax attention is a weighted average with a similarity kernel
#
# For one head, causal softmax attention computes, for every position $t$,
#
# $$ o_t = \frac{\sum_{j \le t} \mathrm{sim}(q_t, k_j)\, v_j}{\sum_{j \le t} \mathrm{sim}(q_t, k_j)},
#    \qquad \mathrm{sim}(q, k) = \exp\!\left(\frac{q^\top k}{\sqrt{D}}\right). $$
#
# Three steps: make the scores non-negative ($\exp$), divide by their sum, average the values.
# The exponential sits *on* the product $q^\top k$, so every query is tied to every key: nothing about
# the past can be summarised before the query arrives. Hence the cache.
#
# Linear attention keeps the three steps but chooses a kernel that factorises,
# $\mathrm{sim}(q, k) = \phi(q)^\top \phi(k)$ with a positive feature map applied to $q$ and $k$
# *separately*. The paper's choice (its §3.2) is $\phi(x) = \mathrm{ELU}(x) + 1$ (elementwise; it is $x+1$ for
# $x>0$ and $e^x$ for $x\le 0$, so always positive).

# %% [markdown] tags=["notes"]
# Rewrite softmax attention as a normalised weighted average with a similarity kernel; the whole
# chapter follows from that one line. Ask what property of $\exp(q^\top k)$ stops us from splitting
# it into a function of $q$ times a function of $k$.

# %%
def softmax_attention(q, k, v):
    """Causal softmax attention of one head, with the T×T score matrix materialised. q, k [T, D], v [T, Dv]."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    causal = torch.ones(len(q), len(k), dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v


def elu1(x):
    return F.elu(x) + 1.0


def linear_attention_parallel(q, k, v):
    """The same three steps with sim(q, k) = φ(q)ᵀφ(k): still a T×T matrix, but no exponential on it."""
    weights = (elu1(q) @ elu1(k).T).tril()  # causal: token t sees j <= t
    return (weights @ v) / weights.sum(-1, keepdim=True)


T, D = 12, 8
q, k, v = (torch.randn(T, D, generator=generator) for _ in range(3))
softmax_out = softmax_attention(q, k, v)
gap = (softmax_out - linear_attention_parallel(q, k, v)).abs().mean().item()
print(f"two different averages of the same values: mean |softmax - linear| = {gap:.2f}, "
      f"against mean |softmax| = {softmax_out.abs().mean().item():.2f}")

# %% [markdown]
# The two outputs differ by a margin comparable to the softmax output itself (the two printed means). Linear
# attention is not softmax
# attention computed faster: it is a different layer, a different weighted average of the same values. What it
# buys with that change comes next.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Re-association: the history folds into a $D\times D$ state
#
# Write the numerator of $o_t$ with the factorised kernel and move the brackets:
#
# $$ \sum_{j\le t} \big(\phi(q_t)^\top \phi(k_j)\big)\, v_j^\top
#    = \phi(q_t)^\top \underbrace{\sum_{j\le t} \phi(k_j)\, v_j^\top}_{S_t \;\in\; \mathbb{R}^{D\times D_v}},
#    \qquad
#    \sum_{j\le t} \phi(q_t)^\top \phi(k_j) = \phi(q_t)^\top \underbrace{\sum_{j\le t}\phi(k_j)}_{z_t \;\in\;\mathbb{R}^{D}} . $$
#
# Without the causal mask, in matrix form, this is $(\phi(Q)\phi(K)^\top)V = \phi(Q)\,(\phi(K)^\top V)$: same
# numbers, different order of multiplication (the paper's eq. 6). With the mask, $(\phi(Q)\phi(K)^\top \odot M)V$
# has no such one-line regrouping; its row-by-row version is the running sums below, and chapter 04 regroups it
# chunk by chunk. The sums over the past are now *running sums* that do not depend on the query:
#
# $$ S_t = S_{t-1} + \phi(k_t)\, v_t^\top, \qquad z_t = z_{t-1} + \phi(k_t), \qquad
#    o_t = \frac{S_t^\top \phi(q_t)}{z_t^\top \phi(q_t)} . $$
#
# Here $D_v$ is the value dimension (equal to $D$ in GPT-2). A recurrent neural network (RNN: a layer that carries a
# hidden state from one token to the next) whose hidden state is a matrix: this is the
# recurrent form, and $S$ and $z$ are all a decode step needs.

# %% [markdown]
# ![Linear attention: the history folds into a fixed-size state S, written by k v-transpose and read by q](../figures/diagram_linear_attention_state.svg)

# %% [markdown] tags=["notes"]
# Move the brackets on the board, slowly: this re-association is the idea of the whole course.
# Point at the diagram: every token writes $k v^\top$ into the same matrix and a query reads it
# with one product. Ask what the state's size depends on (the head dimension) and what it no
# longer depends on (the sequence length). The chunked form is the bridge to chapter 04.

# %%
def linear_attention_recurrent(q, k, v):
    """Token by token: fold φ(k) vᵀ into S and φ(k) into z, then read with φ(q)."""
    state = torch.zeros(q.shape[1], v.shape[1])
    normalizer = torch.zeros(q.shape[1])
    outputs = []
    for q_t, k_t, v_t in zip(elu1(q), elu1(k), v):
        state = state + torch.outer(k_t, v_t)
        normalizer = normalizer + k_t
        outputs.append(state.T @ q_t / (normalizer @ q_t))
    return torch.stack(outputs), state


o_parallel = linear_attention_parallel(q, k, v)
o_recurrent, final_state = linear_attention_recurrent(q, k, v)
print(f"parallel and recurrent {agree(o_parallel, o_recurrent)}")
print(f"the state after {T} tokens has shape {tuple(final_state.shape)}; after a million tokens it still would")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### The chunked form: between the two
#
# The parallel form is one big matrix product (good for a GPU) but builds a $T\times T$ matrix; the
# recurrent form is tiny per step but strictly sequential. The **chunked** form cuts the sequence into
# chunks of $C$ tokens. Inside a chunk it uses the parallel form; across chunks it carries the state:
#
# $$ O_{[c]} = Q_{[c]} S + \big(Q_{[c]} K_{[c]}^\top \odot M\big) V_{[c]}, \qquad S \leftarrow S + K_{[c]}^\top V_{[c]}, $$
#
# with $M$ the causal mask including the diagonal, and $Q, K$ already passed through $\phi$.
# The denominator needs no separate code: it is the numerator computed for a column of ones, since
# $z_t^\top\phi(q_t) = \sum_{j\le t} \phi(q_t)^\top\phi(k_j)\cdot 1$.

# %%
def chunked_numerator(q, k, v, chunk_size):
    """Σ_{j<=t} (q_t·k_j) v_j for every t, chunk by chunk (q, k already mapped by φ)."""
    state = torch.zeros(q.shape[1], v.shape[1])
    outputs = []
    for start in range(0, len(q), chunk_size):
        q_c, k_c, v_c = (x[start:start + chunk_size] for x in (q, k, v))
        intra = (q_c @ k_c.T).tril()             # inside the chunk: score first (attention order)
        outputs.append(q_c @ state + intra @ v_c)  # across chunks: state first (recurrent order)
        state = state + k_c.T @ v_c
    return torch.cat(outputs), state


def linear_attention_chunked(q, k, v, chunk_size):
    ones = torch.ones(len(v), 1)
    numerator_and_denominator, _ = chunked_numerator(elu1(q), elu1(k), torch.cat([v, ones], dim=1), chunk_size)
    return numerator_and_denominator[:, :-1] / numerator_and_denominator[:, -1:]


for chunk_size in (1, 4, 5, T):
    print(f"chunk_size={chunk_size:>2}: chunked and recurrent {agree(linear_attention_chunked(q, k, v, chunk_size), o_recurrent)}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. Why the denominator stays
#
# Drop the division and the "average" becomes a sum of $t$ weighted values whose weights are all positive, so
# nothing keeps its size in check as $t$ grows. With values of random sign the sum grows like a random walk,
# roughly as $\sqrt{t}$; the denominator, a sum of $t$ positive weights, grows like $t$, and dividing by it makes
# the output a convex combination of values, which can never be larger than the largest value. Measure the output norm along a long random sequence with and without
# the normaliser.

# %% [markdown] tags=["notes"]
# Show the plot of the output norm: without the denominator the output grows with the position.
# Ask the room how fast a sum of random-sign values grows (about sqrt(t)) and how fast the sum of
# positive weights grows (t); the normaliser turns the sum back into an average.

# %%
T_long = 512
q_long, k_long, v_long = (torch.randn(T_long, D, generator=generator) for _ in range(3))
numerator, _ = chunked_numerator(elu1(q_long), elu1(k_long), v_long, chunk_size=64)
normalised = linear_attention_chunked(q_long, k_long, v_long, chunk_size=64)

fig, ax = plt.subplots()
steps = torch.arange(1, T_long + 1)
ax.loglog(steps, numerator.norm(dim=-1), color=viz.PALETTE["red"], label="without the denominator")
ax.loglog(steps, normalised.norm(dim=-1), color=viz.MECHANISM_COLORS["linear_attention"], label="normalised")
ax.set(xlabel="position t", ylabel="‖o_t‖", title="Unnormalised linear attention grows with t")
ax.legend()
plt.show()
for t in (1, 64, 512):
    print(f"t={t:>3}: ‖o_t‖ without denominator {numerator[t - 1].norm().item():8.2f}, "
          f"normalised {normalised[t - 1].norm().item():.2f}")

# %% [markdown]
# The normalised output is an average of values, so it never outgrows them; with random values it even shrinks,
# like $\sqrt t / t = 1/\sqrt t$ (compare the printed norms at $t = 64$ and $t = 512$), since an average of many
# random vectors cancels out. The raw sum keeps growing.
#
# Modern linear-attention layers (DeltaNet and its descendants in the next chapters) drop the
# denominator again, but not the control it gave: they normalise the keys and the layer's output
# instead (L2-normalised keys, an RMSNorm after the mixer: each vector divided by its root-mean-square, then
# scaled by a learned weight). `k3lite.ops.linear_attention` has both:
# `normalize=True` with `feature_map="elu1"` is the 2020 layer; the defaults are the bare recurrence.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. What we paid: a kernel that cannot focus
#
# $\exp(q^\top k)$ grows without bound as a query aligns with one key, so softmax can put almost all
# its weight on one token. $\phi(q)^\top\phi(k)$ grows only linearly. Take 64 random keys, make the query
# a sharper and sharper copy of key number 10, $q = s\,k_{10}$, and see how much weight each kernel puts on
# key 10.

# %% [markdown] tags=["notes"]
# This is the price: a kernel that grows only linearly cannot put nearly all its weight on one
# key. Ask the room to predict where each curve ends before showing the plot. The other half of
# the price comes in chapter 03: every write only adds to one shared matrix.

# %%
n_keys, dim = 64, 16
keys = torch.randn(n_keys, dim, generator=generator)
target = 10
sharpness = torch.logspace(-1, 1.5, 30)
softmax_focus, linear_focus = [], []
for s in sharpness:
    query = s * keys[target]
    softmax_focus.append(torch.softmax(keys @ query / math.sqrt(dim), dim=0)[target].item())
    similarity = elu1(keys) @ elu1(query)
    linear_focus.append((similarity[target] / similarity.sum()).item())

fig, ax = plt.subplots()
ax.semilogx(sharpness, softmax_focus, color=viz.MECHANISM_COLORS["softmax"], label="softmax  exp(qᵀk/√D)")
ax.semilogx(sharpness, linear_focus, color=viz.MECHANISM_COLORS["linear_attention"], label="linear  φ(q)ᵀφ(k)")
ax.axhline(1 / n_keys, color="#888888", linestyle=":", label="uniform 1/64")
ax.set(xlabel="query sharpness s  (q = s·k₁₀)", ylabel="weight on key 10", title="Softmax can focus; ELU+1 saturates")
ax.legend()
plt.show()
print(f"at s = {sharpness[-1].item():.1f}: softmax puts {softmax_focus[-1]:.3f} on key 10, "
      f"linear attention {linear_focus[-1]:.3f} (uniform would be {1 / n_keys:.3f})")

# %% [markdown]
# For large $s$, $\phi(s\,k_{10})$ tends to $s\cdot\mathrm{ReLU}(k_{10})$, and $s$ cancels in the ratio: the
# weights freeze at a spread-out profile. That is the "weaker approximation of the softmax kernel" the article
# mentions (the worklog's section "Linear Attention"); the next chapters are about getting precision back without
# giving up the fixed state.

# %% [markdown] slideshow={"slide_type": "slide"} tags=["reading"]
# ## 6. What "$O(N^2)$" meant in 2020
#
# The 2020 paper (Katharopoulos et al., §3.3.2, quoted in the worklog's section "Linear Attention") says the
# cost *per time step* of a transformer grows with the square of the sequence
# length. With a KV cache that is not true: a decode step reads $2ND$ numbers and does $4ND$ FLOPs per head,
# linear in $N$. The quadratic cost described two real things of the time:
#
# * **recomputation without a cache**: reference generation loops re-ran the whole prefix at every step,
#   so step $t$ computed the causal half of a $t\times t$ attention, about $2t^2D$ FLOPs per head (the paper's
#   own baseline, §4.2, contrasts such a loop with a softmax transformer that caches keys and values);
# * **a materialised $N\times N$ score matrix** in training and prefill (running the whole prompt through the
#   model in one parallel pass before decoding starts), whose memory is quadratic.
#
# Streaming attention removes the second: it walks over key blocks with a running maximum and sum (the "online
# softmax") and never stores the $N\times N$ matrix (Rabe and Staats 2021,
# [arXiv:2112.05682](https://arxiv.org/abs/2112.05682)); FlashAttention (Dao et al. 2022,
# [arXiv:2205.14135](https://arxiv.org/abs/2205.14135), §3.1) made it fast on GPUs. Compute both costs.

# %% [markdown] tags=["notes"]
# Reading, not lecture: the history behind "quadratic" and why FlashAttention changed the
# comparison. Mention it in one sentence if asked: with a KV cache and a streaming kernel, softmax
# attention needs linear memory, and the case for a fixed state is the cache read at decode time.

# %%
def attention_flops_per_decode_step(position, head_dim, regime):
    """Attention FLOPs of one head to decode the `position`-th token (2 FLOPs per multiply-add).

    The decoded token sees `position` keys, its own included. Only the causal triangle is counted,
    as chapter 01's accounting does: without a cache, prefix token i (1 <= i <= position) scores and
    mixes its i visible keys again.
    """
    if regime == "no cache":        # sum over i of 4·i·D for the whole prefix
        return 2 * position * (position + 1) * head_dim
    if regime == "KV cache":        # one query against `position` keys and values
        return 4 * position * head_dim
    if regime == "linear":          # read S with one query, fold one k vᵀ into it
        return 4 * head_dim * head_dim
    raise ValueError(f"regime must be 'no cache', 'KV cache' or 'linear', got {regime!r}")


fig, ax = plt.subplots()
for regime, color in (("no cache", viz.PALETTE["red"]), ("KV cache", viz.MECHANISM_COLORS["gpt2"]),
                      ("linear", viz.MECHANISM_COLORS["linear_attention"])):
    ax.loglog(positions, [attention_flops_per_decode_step(int(p), head_dim, regime) for p in positions],
              color=color, linestyle="--" if regime == "no cache" else "-", label=regime)
ax.set(xlabel="position of the token being decoded", ylabel="FLOPs per head per step",
       title="Attention work per decode step (D = 64)")
ax.legend()
plt.show()
for regime in ("no cache", "KV cache", "linear"):
    print(f"{regime:>9}: {attention_flops_per_decode_step(4096, head_dim, regime):>16,} FLOPs at position 4,096")

# %% [markdown]
# Read the slopes on the logarithmic axes: 2 without a cache (each step redoes a triangle that grows as $t^2$),
# 1 with a KV cache (one query against $t$ keys), 0 for linear attention (one state, whatever $t$). Only
# recomputation makes a single step quadratic.
#
# Memory of the score matrix for one head in float32, against what a streaming (FlashAttention-style)
# pass keeps beyond its inputs and output: a running maximum and a running sum per query, plus one
# $B_q\times B_k$ tile of scores, for blocks of $B_q$ queries and $B_k$ keys (64 × 64 in the table). The
# demonstration after it tiles only the keys, which is enough to show the running maximum and sum at work.

# %%
tile = 64
print(f"{'N':>9} {'N×N scores':>14} {'streaming extra':>16}")
for n_tokens in (1024, 8192, 32_768, 131_072):
    materialised = n_tokens * n_tokens * 4
    streaming = 2 * n_tokens * 4 + tile * tile * 4
    print(f"{n_tokens:>9,} {mib(materialised):>14} {mib(streaming):>16}")

# %% [markdown]
# The streaming pass is not an approximation. Here it is in a dozen lines: process the keys in tiles,
# keep per query the largest score seen so far $m$, the sum of exponentials $\ell$ relative to it, and the
# weighted sum of values; rescale them whenever $m$ grows.

# %%
def streaming_softmax_attention(q, k, v, tile):
    """Causal softmax attention without the T×T matrix: online softmax over key tiles."""
    scale = 1 / math.sqrt(q.shape[-1])
    running_max = torch.full((len(q), 1), float("-inf"))
    running_sum = torch.zeros(len(q), 1)
    accumulator = torch.zeros(len(q), v.shape[1])
    rows = torch.arange(len(q))[:, None]
    for start in range(0, len(k), tile):
        scores = q @ k[start:start + tile].T * scale                       # [T, tile]: one tile at a time
        scores = scores.masked_fill(torch.arange(start, start + scores.shape[1]) > rows, float("-inf"))
        new_max = torch.maximum(running_max, scores.max(dim=1, keepdim=True).values)
        rescale = torch.exp(running_max - new_max)
        weights = torch.exp(scores - new_max)
        running_sum = running_sum * rescale + weights.sum(dim=1, keepdim=True)
        accumulator = accumulator * rescale + weights @ v[start:start + tile]
        running_max = new_max
    return accumulator / running_sum


T_check = 100
q_check, k_check, v_check = (torch.randn(T_check, D, generator=generator) for _ in range(3))
print(f"streaming and materialised softmax attention (T={T_check}, tile=16) "
      f"{agree(streaming_softmax_attention(q_check, k_check, v_check, tile=16), softmax_attention(q_check, k_check, v_check))}")

# %% [markdown]
# So with a KV cache and a streaming kernel the honest comparison is: softmax attention needs $O(N)$ *memory* (the cache) and
# $O(N)$ *work and traffic per decode step*; linear attention needs $O(1)$ of both. Training and prefill
# still cost $O(N^2)$ FLOPs for softmax attention, and $O(N)$ for the chunked linear form (chapter 04
# prices that split).

# %% [markdown] slideshow={"slide_type": "slide"} tags=["reading"]
# ## 7. Checked against `k3lite.ops.linear_attention`
#
# The library works in the field's layout: `q, k [B, T, H, K]`, `v [B, T, H, V]`, state `[B, H, K, V]` in
# float32 (B sequences, T tokens, H heads, K the key width, our $D$, and V the value width), and `scale`
# multiplying the query features $\phi(q)$, by default $K^{-1/2}$; with `normalize=True` it cancels in the division
# (we pass `scale=1.0` there all the same), and for the bare, unnormalised recurrence we keep the default and scale
# our own queries by $K^{-1/2}$ to match. With `feature_map="elu1", normalize=True` it is the layer of this
# chapter. We compare in float32 on a batch of two sequences with three heads, against our single-head
# code run head by head.

# %% [markdown] tags=["notes"]
# Reading: the library's layout and its decode step agree with the notebook's code. Point
# students here if they want to see `[B, T, H, K]` in practice.

# %%
from k3lite.ops import linear_attention as la

B, T_lib, H, K_lib, V_lib = 2, 37, 3, 8, 5
q_lib = torch.randn(B, T_lib, H, K_lib, generator=generator).float()
k_lib = torch.randn(B, T_lib, H, K_lib, generator=generator).float()
v_lib = torch.randn(B, T_lib, H, V_lib, generator=generator).float()

ours = torch.stack([torch.stack([linear_attention_recurrent(q_lib[b, :, h].double(), k_lib[b, :, h].double(),
                                                            v_lib[b, :, h].double())[0]
                                 for h in range(H)], dim=1) for b in range(B)])
for name, run in (("recurrent", la.recurrent), ("parallel", la.parallel)):
    o_lib, state_lib = run(q_lib, k_lib, v_lib, scale=1.0, feature_map="elu1", normalize=True)
    print(f"k3lite {name:>9} (elu1, normalised) and ours {agree(o_lib, ours, 1e-5)}")

# the bare recurrence (no feature map, no normaliser): recurrent, parallel and chunked agree
o_rec, s_rec = la.recurrent(q_lib, k_lib, v_lib)
for chunk_size in (1, 8, 16, 64):
    o_chk, s_chk = la.chunked(q_lib, k_lib, v_lib, chunk_size=chunk_size, backend="torch")
    print(f"chunked C={chunk_size:>2} and recurrent: outputs {agree(o_chk, o_rec, 1e-4)}, states {agree(s_chk, s_rec, 1e-4)}")
ours_numerator, _ = chunked_numerator(q_lib[0, :, 0].double() * K_lib ** -0.5, k_lib[0, :, 0].double(),
                                      v_lib[0, :, 0].double(), chunk_size=8)
print(f"our chunked numerator (head 0, default scale K^-0.5) and k3lite {agree(ours_numerator, o_rec[0, :, 0], 1e-4)}")

# %% [markdown]
# One decode step of the library, `step`, continues a sequence from its state: decoding the last token
# from the state of the first $T-1$ tokens must give the last output of the full pass.

# %%
_, state_before = la.recurrent(q_lib[:, :-1], k_lib[:, :-1], v_lib[:, :-1])
o_step, state_after = la.step(q_lib[:, -1], k_lib[:, -1], v_lib[:, -1], state=state_before, backend="torch")
print(f"step output and the last output of the pass {agree(o_step, o_rec[:, -1], 1e-5)}")
print(f"state after the step and the final state {agree(state_after, s_rec, 1e-5)}")
print(f"state: {tuple(state_after.shape)} {state_after.dtype}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# Three kinds: a **prediction** (write down what you expect, then run the measurement; the checker accepts
# a range and explains the gap), a **transfer** (the chapter's idea on a case it did not show) and an
# **open question** (a paragraph; the model answer for the lecturer is folded below it).
#
# ### Exercise 1: the size of a KV cache
# Write `kv_cache_bytes(num_tokens, layers, heads, head_dim, bytes_per_element)`: the bytes of the
# cache of one sequence after `num_tokens` tokens in a multi-head attention model.

# %% [markdown] tags=["notes"]
# Exercise 1 (cache bytes) is a warm-up. Take exercise 3's prediction as a show of hands before anyone
# runs it: "how wrong is a read after 20 writes into a 16-dimensional state?" Most people guess small;
# the answer (noise as large as the signal) is the opening of the next lecture. Exercise 2, a decode
# step with another feature map, is homework: the state's shape is the thing to notice.

# %%
from k3lite.exercises import ch02


def kv_cache_bytes(num_tokens, layers, heads, head_dim, bytes_per_element):
    raise NotImplementedError


# %%
ch02.check_kv_cache_bytes(kv_cache_bytes);


# %% tags=["solution"]
# Solution
def kv_cache_bytes_solution(num_tokens, layers, heads, head_dim, bytes_per_element):
    keys_and_values = 2
    return keys_and_values * num_tokens * layers * heads * head_dim * bytes_per_element


ch02.check_kv_cache_bytes(kv_cache_bytes_solution);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 (transfer): a decode step with another feature map
# Any map to non-negative features gives a kernel $\phi(q)^\top\phi(k) \ge 0$, and so a weighted average wherever
# the denominator is positive. ELU + 1 guarantees that; the map below does not (a query whose signs are all
# opposite to every key's gives 0/0), which is why real code adds a small $\epsilon$ to the denominator. Take $\phi(x) = [\mathrm{ReLU}(x), \mathrm{ReLU}(-x)]$, the positive parts of $x$ followed by the
# positive parts of $-x$ (`ch02.split_relu`). Write `decode_step(state, normalizer, q, k, v)` for one head of
# normalised linear attention with this map: `q, k [K]`, `v [V]`; return `(o [V], new_state, new_normalizer)`.
# What shapes must `state` and `normalizer` have? (The checker starts them at zeros of those shapes.)

# %%
def decode_step(state, normalizer, q, k, v):
    raise NotImplementedError


# %%
ch02.check_split_relu_decode_step(decode_step);


# %% tags=["solution"]
# Solution: φ has 2K features, so the state is [2K, V] and the normaliser [2K]; the recurrence is unchanged.
# The kernel φ(q)ᵀφ(k) adds |q_i||k_i| over the channels where q and k have the same sign: zero for keys
# pointing the opposite way, which ELU + 1 never gives.
def decode_step_solution(state, normalizer, q, k, v):
    phi_q, phi_k = ch02.split_relu(q), ch02.split_relu(k)
    state = state + torch.outer(phi_k, v)
    normalizer = normalizer + phi_k
    return state.T @ phi_q / (normalizer @ phi_q), state, normalizer


ch02.check_split_relu_decode_step(decode_step_solution);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 (prediction): 20 writes into a 16-dimensional state
# Drop the feature map and the normaliser and store 20 pairs in one head with $D = 16$: random *unit*
# keys, random Gaussian values, $S = \sum_i k_i v_i^\top$. Then read every pair back with its own key.
# Predict the mean relative error $\lVert S^\top k_j - v_j\rVert / \lVert v_j\rVert$ before you run the
# measurement below (0 would be perfect recall, 1 as bad as reading nothing). The checker accepts a
# prediction within 30 % of the measurement.

# %%
def predicted_retrieval_error():
    raise NotImplementedError  # return your prediction, a number


# %%
def additive_retrieval_error(num_pairs=20, key_dim=16, trials=200):
    memory_generator = torch.Generator().manual_seed(0)
    total = 0.0
    for _ in range(trials):
        keys = F.normalize(torch.randn(num_pairs, key_dim, generator=memory_generator, dtype=torch.float64), dim=-1)
        values = torch.randn(num_pairs, key_dim, generator=memory_generator, dtype=torch.float64)
        state = keys.T @ values                                   # S = Σ k vᵀ: every write adds
        total += ((keys @ state - values).norm(dim=-1) / values.norm(dim=-1)).mean().item()
    return total / trials


ch02.check_interference_prediction(predicted_retrieval_error, measured=additive_retrieval_error());


# %% tags=["solution"]
# Solution: 19 stray terms (k_i·k_j) v_i, each dot product of size about 1/√16, add up to about √(19/16).
def predicted_retrieval_error_solution():
    return (19 / 16) ** 0.5


ch02.check_interference_prediction(predicted_retrieval_error_solution, measured=additive_retrieval_error());

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4 (open question): making linear attention focus
# Section 5 showed that a kernel of positive features cannot concentrate its weight the way the exponential
# does. Propose one change to the feature map (or to the layer) that would let linear attention focus more
# sharply, and say what it costs in the size of the state or in the work per token.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# Expected directions, any one argued with its cost earns full credit. (1) *More features*: approximate
# $\exp(q^\top k)$ with many random positive features (FAVOR+ of Choromanski et al. 2021, *Rethinking
# Attention with Performers*, §2, positive random features in §2.3, [arXiv:2009.14794](https://arxiv.org/abs/2009.14794))
# or a Taylor expansion (a second-order one has about $D^2/2$ features; Katharopoulos et al. 2020, §3.2.1, price
# the degree-2 polynomial kernel); the kernel
# sharpens, but the state grows from $D\times D_v$ to $D_\phi \times D_v$ and every step reads and writes it.
# (2) *A sharper map*, e.g. a higher power or temperature on the features: focuses more but amplifies
# noise and makes the normaliser unstable. (3) *Keep a few exact softmax layers or a sliding window* next
# to the linear ones (the hybrid that K3 ends with): exact focus where needed, paid with a cache that grows
# (or is bounded by the window). (4) Changing *what is written* rather than how it is read, the delta rule
# of the next chapter, reduces interference but does not make the kernel itself sharper; a strong answer
# notices the difference.
#
# </details>

# %% [markdown]
# ## Summary
#
# * A factorised kernel $\phi(q)^\top\phi(k)$ lets attention be re-associated, $(\phi(Q)\phi(K)^\top)V =
#   \phi(Q)(\phi(K)^\top V)$, so the past folds into a $D\times D$ state: fixed memory and fixed work per
#   decode step, where the KV cache grows with every token.
# * The parallel, recurrent and chunked forms compute the same numbers; the chunked one is what trains fast.
# * The price: positive features cannot focus like an exponential, and every write *adds* to one shared
#   matrix. The next chapter shows what that addition does to memories, and the delta rule that fixes it.

# %% [markdown] tags=["notes"]
# Summarise with the three forms (parallel, recurrent, chunked) and the two prices paid: a kernel
# that cannot focus, and writes that only add. Ask what a memory that can overwrite an
# association would need: a read before the write, which is DeltaNet.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. One head has $D = 64$. How many bytes do its state $S$ and normaliser $z$ take in float32, and how does that
#    change with the sequence length?
# 2. Why can softmax attention not be re-associated the same way?
# 3. In the chunked form, what is computed inside a chunk, and what is carried from chunk to chunk?
# 4. What happens to the output without the denominator, and why?
#
# <details>
# <summary>Short answers</summary>
#
# 1. $(64 \cdot 64 + 64) \cdot 4 = 16{,}640$ bytes, whatever the sequence length.
# 2. The exponential acts on the product $q^\top k$ as a whole: $\exp(q^\top k)$ is not a finite sum of products
#    $f(q)\,g(k)$, so the past cannot be summed before the query is known.
# 3. Inside: the masked scores $(QK^\top \odot M)V$; across: the state, read as $QS$ and updated by
#    $S \leftarrow S + K^\top V$.
# 4. It grows with the position: it is a sum of $t$ positively weighted values, not an average, so with random-sign
#    values it grows roughly like $\sqrt{t}$; the denominator, which grows like $t$, made the output an average,
#    never larger than the largest value.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Katharopoulos, Vyas, Pappas and Fleuret (2020), *Transformers are RNNs: Fast Autoregressive Transformers with
#   Linear Attention*, ICML 2020: [arXiv:2006.16236](https://arxiv.org/abs/2006.16236): §3.2 (the linearised kernel
#   and $\phi(x) = \mathrm{ELU}(x) + 1$), §3.3–3.4 (the causal form and the RNN view); sections 2–5 of this chapter;
#   §3.3.2 (the per-step cost "scales with the square of the current sequence length") and §4.2 (the baselines);
#   section 6.
# - Dao, Fu, Ermon, Rudra and Ré (2022), *FlashAttention: Fast and Memory-Efficient Exact Attention with
#   IO-Awareness*, NeurIPS 2022: [arXiv:2205.14135](https://arxiv.org/abs/2205.14135): §3.1, tiling with a running
#   maximum and sum; section 6.
# - Rabe and Staats (2021), *Self-attention Does Not Need $O(n^2)$ Memory*:
#   [arXiv:2112.05682](https://arxiv.org/abs/2112.05682): attention streamed over key blocks; section 6.
# - Milakov and Gimelshein (2018), *Online normalizer calculation for softmax*:
#   [arXiv:1805.02867](https://arxiv.org/abs/1805.02867); section 6.
# - Yang, Wang, Zhang, Shen and Kim (2024), *Parallelizing Linear Transformers with the Delta Rule over Sequence
#   Length*, NeurIPS 2024: [arXiv:2406.06484](https://arxiv.org/abs/2406.06484): L2-normalised keys and an output
#   norm in place of the denominator (section 4).
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); section "Linear Attention" (the "weaker approximation" of the
#   softmax kernel and the $O(N^2)$ framing).
