# %% [markdown] slideshow={"slide_type": "slide"}
# # 07 · Multi-head Latent Attention: a compressed cache
#
# KDA (chapter 06) keeps a fixed-size state: constant memory per sequence, but a state of fixed size
# must forget. Kimi Linear and Kimi K3 therefore keep a few layers of full softmax attention, which can
# look up any earlier token exactly. Those layers bring the KV cache back, and the cache is what limits
# long-context decoding: every generated token reads all of it.
#
# This chapter:
#
# 1. measures how big a softmax-attention cache gets for GPT-2, DeepSeek-V3, Kimi Linear and K3;
# 2. compresses it with a shared latent (MLA), and derives the **absorption trick** that lets decoding
#    score the latent directly;
# 3. builds MLA in this notebook, checks absorbed = non-absorbed, and checks it against `k3lite.layers.mla`;
# 4. adds K3's **output gate**.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 3 h for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. compute the cache bytes per token of MHA, GQA, MQA and MLA for a given configuration, and the memory of a
#    1M-token sequence at K3's sizes;
# 2. derive the absorption trick ($W_{UK}$ moved into the query, $W_{UV}$ applied after the sum) and explain why a
#    rotary key part must be cached separately;
# 3. implement MLA's materialised (prefill) and absorbed (decode) paths and show that they give the same outputs;
# 4. compute absorbed MLA's arithmetic per byte read and compare it with a GPU's balance point;
# 5. explain what a sigmoid output gate lets an attention layer do that softmax alone cannot.
#
# **Prerequisites.**
#
# - Chapter 01 (multi-head attention and its KV cache) and chapter 06 (why the hybrid keeps a few softmax layers).
# - Low-rank factorisation of a matrix: Strang, *Introduction to Linear Algebra*, the singular value decomposition.
# - Rotary position embedding, for why absorption needs a separate positional part: Su et al. (2021),
#   [arXiv:2104.09864](https://arxiv.org/abs/2104.09864).
# - The roofline model (arithmetic per byte against a machine's balance point): Williams, Waterman and Patterson
#   (2009), [doi:10.1145/1498765.1498785](https://doi.org/10.1145/1498765.1498785).

# %% tags=["plumbing"]
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
from myst_nb import glue

from k3lite.course import viz
from k3lite.course.checks import expect
from k3lite.course.runtime import pick, seed_everything
from k3lite.models.k3 import K3Config

viz.use_style()
seed_everything(0)
torch.set_printoptions(precision=4, sci_mode=False)
# Small models train faster (and reproducibly) on one core.
torch.set_num_threads(1)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The failure: a cache that outgrows the GPU
#
# A softmax-attention layer stores, for every past token, one key and one value per head. Per token and
# per layer that is $2 n_h d_h$ numbers. The two classic ways to shrink it share keys and values
# between heads:
#
# | variant | cached per token and layer |
# |---|---|
# | MHA (multi-head) | $2\,n_h d_h$ |
# | GQA (grouped-query, $n_g$ KV groups) | $2\,n_g d_h$ |
# | MQA (multi-query) | $2\,d_h$ |
# | MLA (multi-head latent) | $d_c + d_r$ |
#
# MLA (DeepSeek-V2: DeepSeek-AI 2024, [arXiv:2405.04434](https://arxiv.org/abs/2405.04434), §2.1) caches a latent
# $c$ of $d_c = 512$ numbers and a shared $d_r = 64$-number key part: 576 numbers, whatever the number of heads.
# (MQA is Shazeer 2019, arXiv:1911.02150; GQA Ainslie et al. 2023, arXiv:2305.13245.) First the bookkeeping, for
# four real configurations: GPT-2 small (chapter 01), DeepSeek-V3 (arXiv:2412.19437), Kimi Linear
# (arXiv:2510.26692) and K3 (its published configuration).

# %% [markdown] tags=["notes"]
# Back to the failure of chapter 01, at K3's scale: a cache of every key and value for a
# million-token context does not fit on one GPU. Ask the room for the two classic fixes (share
# keys and values between heads: MQA, GQA) and what each gives up; then show where MLA sits in the
# table.

# %%
def cache_elements(kind, num_heads, head_dim, num_kv_heads=None, latent_dim=None, rope_dim=None):
    """Numbers cached per token and per attention layer."""
    if kind == "mha":
        return 2 * num_heads * head_dim
    if kind == "gqa":
        return 2 * num_kv_heads * head_dim
    if kind == "mqa":
        return 2 * head_dim
    if kind == "mla":
        return latent_dim + rope_dim
    raise ValueError(f"kind must be mha, gqa, mqa or mla, got {kind!r}")


BYTES_BF16 = 2
K3 = K3Config.published()
# Softmax-attention layers only: KDA layers keep a fixed state instead of a cache.
# GQA uses 8 KV groups (4 for GPT-2, whose 12 heads 8 does not divide); MLA uses d_c = 4 d_h, d_r = d_h / 2
# for GPT-2 (a hypothetical MLA GPT-2) and the published 512 + 64 for the others.
MODELS = {
    "GPT-2 small": dict(attention_layers=12, heads=12, head_dim=64, kv_groups=4, latent=256, rope=32, uses="mha"),
    "DeepSeek-V3": dict(attention_layers=61, heads=128, head_dim=128, kv_groups=8, latent=512, rope=64, uses="mla"),
    "Kimi Linear": dict(attention_layers=7, heads=32, head_dim=128, kv_groups=8, latent=512, rope=64, uses="mla"),
    "Kimi K3": dict(attention_layers=K3.num_mla_layers, heads=K3.mla_num_heads, head_dim=K3.head_dim, kv_groups=8,
                    latent=K3.kv_lora_rank, rope=K3.rope_dim, uses="mla"),
}
KINDS = ("mha", "gqa", "mqa", "mla")


def bytes_per_token(model, kind):
    m = MODELS[model]
    per_layer = cache_elements(kind, m["heads"], m["head_dim"], m["kv_groups"], m["latent"], m["rope"])
    return m["attention_layers"] * per_layer * BYTES_BF16


table = {model: {kind: bytes_per_token(model, kind) for kind in KINDS} for model in MODELS}
print(f"{'bytes / token (bf16)':22s}" + "".join(f"{k.upper():>12s}" for k in KINDS))
for model, row in table.items():
    cells = "".join(f"{row[k]:>11,d}{'*' if MODELS[model]['uses'] == k else ' '}" for k in KINDS)
    print(f"{model:22s}{cells}")
print("* = what the published model uses")
print(f"K3: {K3.num_layers} layers = {K3.num_macrocycles} cycles x ({K3.layers_per_cycle - 1} KDA + 1 MLA) "
      f"+ {int(K3.has_final_mla)} final MLA: {K3.num_kda_layers} KDA, {K3.num_mla_layers} MLA")
glue("ch07_gpt2_mha_bytes", f"{table['GPT-2 small']['mha']:,d}", display=False)
for name in ("num_layers", "num_macrocycles", "num_kda_layers", "num_mla_layers"):
    glue(f"ch07_k3_{name}", str(getattr(K3, name)), display=False)
glue("ch07_k3_kda_per_cycle", str(K3.layers_per_cycle - 1), display=False)

# %% [markdown]
# GPT-2's {glue:text}`ch07_gpt2_mha_bytes` bytes per token is the number from chapter 01. K3 has
# {glue:text}`ch07_k3_num_layers` layers: {glue:text}`ch07_k3_num_macrocycles` cycles of
# {glue:text}`ch07_k3_kda_per_cycle` KDA layers and one
# MLA layer, then a final MLA layer, so {glue:text}`ch07_k3_num_kda_layers` KDA and
# {glue:text}`ch07_k3_num_mla_layers` MLA (chapter 10 builds them). Below: what it would cache had all its layers
# been MLA, or had its MLA layers been plain MHA. Our MHA baseline, here and in the rest of the chapter, is K3's
# 96 heads with $d_h = 128$ numbers for each key and each value, the $2 n_h d_h$ of the table:

# %%
k3_mla = table["Kimi K3"]["mla"]
k3_all_mla = K3.num_layers * cache_elements("mla", 96, 128, latent_dim=512, rope_dim=64) * BYTES_BF16
k3_mha = table["Kimi K3"]["mha"]
n_mla = K3.num_mla_layers
print(f"K3, {n_mla} MLA layers x 576 x 2 B : {k3_mla:>9,d} B/token")
print(f"K3, if all {K3.num_layers} layers were MLA : {k3_all_mla:>9,d} B/token  ({k3_all_mla / k3_mla:.2f}x)")
print(f"K3, if its {n_mla} were MHA        : {k3_mha:>9,d} B/token  ({k3_mha / k3_mla:.1f}x; d_h = 128 for K and V)")
print(f"K3, if its {n_mla} were GQA-8      : {table['Kimi K3']['gqa']:>9,d} B/token  "
      f"({table['Kimi K3']['mha'] / table['Kimi K3']['gqa']:.0f}x less than MHA)")
print(f"Kimi Linear, 7 MLA layers     : {table['Kimi Linear']['mla']:>9,d} B/token")
glue("ch07_k3_mla_bytes", f"{k3_mla:,d}", display=False)
glue("ch07_k3_all_mla_bytes", f"{k3_all_mla:,d}", display=False)
glue("ch07_mha_over_mla", f"{k3_mha / k3_mla:.1f}", display=False)
glue("ch07_mha_over_gqa", f"{table['Kimi K3']['mha'] / table['Kimi K3']['gqa']:.0f}", display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7.5, 4.0))
width = 0.2
x = np.arange(len(MODELS))
for i, kind in enumerate(KINDS):
    values = [table[model][kind] for model in MODELS]
    ax.bar(x + (i - 1.5) * width, values, width, label=kind.upper(),
           color=viz.MECHANISM_COLORS["mla"] if kind == "mla" else viz.CYCLE[i])
ax.set_yscale("log")
ax.set_ylim(1e3, 5e7)  # head-room for the legend
ax.set_xticks(x, list(MODELS))
ax.set_ylabel("KV cache per token (bytes, bf16, log scale)")
ax.set_title("The same attention layers, four ways to cache them")
ax.legend(ncols=4, loc="upper left")
plt.show()

# %% [markdown]
# The axis is logarithmic, so equal steps are equal ratios. For every model MLA's bar sits below MHA's, and by
# more the more heads a model has: MLA's cache does not depend on the number of heads, since all of them share
# the latent.

# %% [markdown] slideshow={"slide_type": "subslide"}
# Bytes per token become memory per sequence once multiplied by the context. K3 is trained for a context of
# 1,048,576 tokens (its published configuration); one H200 has 141 GB (NVIDIA's H200 product page; the cell
# converts it to GiB). The {glue:text}`ch07_k3_num_kda_layers` KDA layers add a fixed state of
# $n_{\text{KDA}} \cdot 96 \cdot 128^2 \cdot 4$ bytes (float32, 96 heads of $128 \times 128$) per sequence,
# whatever its length.

# %%
GIB = 2 ** 30
context = 2 ** 20
kda_state_bytes = K3.num_kda_layers * 96 * 128 * 128 * 4
print(f"one H200: 141e9 B = {141e9 / GIB:.0f} GiB")
print(f"KDA state per sequence            : {kda_state_bytes / 2**20:8.0f} MiB")
for label, per_token in [(f"{n_mla} MHA layers", k3_mha), (f"{n_mla} GQA-8 layers", table["Kimi K3"]["gqa"]),
                         (f"{K3.num_layers} MLA layers", k3_all_mla), (f"{n_mla} MLA layers (K3)", k3_mla)]:
    print(f"{label:20s} at 1M tokens: {per_token * context / GIB:8.1f} GiB")
glue("ch07_mha_gib_at_1m", f"{k3_mha * context / GIB:.0f}", display=False)

# %% tags=["plumbing"]
lengths = np.logspace(3, 6.1, 60)
fig, ax = plt.subplots()
for label, per_token, color in [(f"{n_mla} MHA layers", k3_mha, viz.PALETTE["black"]),
                                (f"{n_mla} GQA layers (8 groups)", table["Kimi K3"]["gqa"], viz.PALETTE["orange"]),
                                (f"{K3.num_layers} MLA layers", k3_all_mla, viz.PALETTE["sky"]),
                                (f"{n_mla} MLA layers (K3)", k3_mla, viz.MECHANISM_COLORS["mla"])]:
    ax.plot(lengths, lengths * per_token / GIB, label=label, color=color)
ax.plot(lengths, np.full_like(lengths, kda_state_bytes / GIB), "--", color=viz.MECHANISM_COLORS["kda"],
        label=f"{K3.num_kda_layers} KDA states (fixed)")
ax.axhline(141e9 / GIB, color=viz.PALETTE["red"], linewidth=1, label="one H200 (141 GB)")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("memory per sequence (GiB)")
ax.set_title("K3-sized attention: cache per sequence")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# With plain MHA the {glue:text}`ch07_k3_num_mla_layers` attention layers alone would need {glue:text}`ch07_mha_gib_at_1m` GiB for one 1M-token
# sequence, more than a tebibyte (1024 GiB). GQA with 8 groups helps {glue:text}`ch07_mha_over_gqa`×, but then 12
# query heads share each key: heads lose their own view of the past. MLA keeps 96 distinct heads and still
# caches {glue:text}`ch07_mha_over_mla`× less than MHA. The
# rest of the chapter shows how.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The fix as math: one latent, many heads
#
# Compress each token into a latent and rebuild every head's key and value from it:
#
# $$c_t = \mathrm{RMSNorm}(W_{DKV}\,x_t) \in \mathbb{R}^{d_c}, \qquad
#   k^{\text{nope}}_{t,h} = W_{UK,h}\, c_t, \qquad v_{t,h} = W_{UV,h}\, c_t .$$
#
# Here "nope" marks the key part without position information: $d_{\text{nope}}$ numbers per head, and $d_v$ per
# head for the value (128 each in K3). A second, small key part $k^{\text{rope}}_t \in \mathbb{R}^{d_r}$ (shared by
# all heads) is projected from $x_t$ too. In DeepSeek it carries rotary position information (RoPE, Su et al. 2021,
# arXiv:2104.09864; DeepSeek-V2 §2.1.3); K3, like Kimi Linear, uses no positional encoding (NoPE), but keeps the 64
# channels: in K3, and in this chapter's code, they are an extra key part shared by all heads, never rotated. The query also goes
# through a low-rank bottleneck (query LoRA):
# $[q^{\text{nope}}_h; q^{\text{rope}}_h] = W_{UQ,h}\,\mathrm{RMSNorm}(W_{DQ} x_t)$. The score of query $t$ against
# token $s$ is
#
# $$a_{h}(t,s) = \frac{q^{\text{nope}\,\top}_{t,h}\, k^{\text{nope}}_{s,h} + q^{\text{rope}\,\top}_{t,h}\, k^{\text{rope}}_s}{\sqrt{d_{\text{nope}} + d_r}} .$$
#
# Caching $c_s$ and $k^{\text{rope}}_s$ suffices, but rebuilding $k$ and $v$ for every cached token at every
# decoding step would cost $d_c (d_{\text{nope}} + d_v)$ multiply-adds per head per cached token. The **absorption trick**
# moves the up-projections to the query side and to after the sum:
#
# $$q^{\text{nope}\,\top}_{t,h}\,(W_{UK,h} c_s) = (W_{UK,h}^{\top} q^{\text{nope}}_{t,h})^{\top} c_s = \tilde q_{t,h}^{\top} c_s,
# \qquad
# o_{t,h} = \sum_s p_{h}(t,s)\, W_{UV,h}\, c_s = W_{UV,h} \Big(\sum_s p_{h}(t,s)\, c_s\Big).$$
#
# Now every head scores and mixes the *same* cached 576-vectors. This is why DeepSeek keeps the positional part
# separate: a rotation $R_s$ applied to the rebuilt key would give the score $q^\top R_s W_{UK} c_s$, with $R_s$
# between the query and $W_{UK}$, so $W_{UK}^\top R_s^\top q$ would change with every cached position and could not
# be computed once per query.

# %% [markdown]
# ![MLA: cache one latent and a shared rotary key per token, absorb the up-projections into the query and the output](../figures/diagram_mla_cache.svg)

# %% [markdown] tags=["notes"]
# The key idea is on the diagram: cache one latent per token and rebuild every head's key and
# value from it, or never rebuild them at all by absorbing the up-projections into the query and
# the output. Ask the room why rotary position embedding breaks absorption (it sits between the
# two matrices), which is why a small shared rotary key is cached next to the latent.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Building MLA in the notebook
#
# A small configuration with the structure of K3's MLA. The weights are plain tensors in a dictionary,
# named like the `nn.Linear` layers of `k3lite.layers.mla`, so we can load them there later.

# %% [markdown] tags=["notes"]
# Read the two paths side by side: materialised for training and prefill, absorbed for decoding
# with only the latent in the cache. They must give the same outputs, and the cell checks it.
# Then ask what absorption costs: fewer bytes read per cached token, more multiply-adds per head,
# a good trade when decoding is limited by memory bandwidth.

# %%
D_MODEL, HEADS, Q_RANK, KV_RANK, NOPE, ROPE, V_DIM = 32, 4, 24, 16, 8, 4, 8
EPS = 1e-6


def init_weights(seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)

    def linear(out_features, in_features):
        return torch.randn(out_features, in_features, generator=generator, dtype=dtype) / math.sqrt(in_features)

    return {
        "q_down.weight": linear(Q_RANK, D_MODEL),
        "q_norm.weight": 1 + 0.1 * torch.randn(Q_RANK, generator=generator, dtype=dtype),
        "q_up.weight": linear(HEADS * (NOPE + ROPE), Q_RANK),
        "kv_down.weight": linear(KV_RANK + ROPE, D_MODEL),
        "kv_norm.weight": 1 + 0.1 * torch.randn(KV_RANK, generator=generator, dtype=dtype),
        "kv_up.weight": linear(HEADS * (NOPE + V_DIM), KV_RANK),
        "gate_proj.weight": linear(HEADS * V_DIM, D_MODEL),
        "o_proj.weight": linear(D_MODEL, HEADS * V_DIM),
    }


def rms_norm(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * weight


def project(x, w):
    """Queries, cached latents and shared rope keys for tokens x [T, D]."""
    c_q = rms_norm(x @ w["q_down.weight"].T, w["q_norm.weight"])
    q = (c_q @ w["q_up.weight"].T).view(-1, HEADS, NOPE + ROPE)
    compressed = x @ w["kv_down.weight"].T
    latent = rms_norm(compressed[:, :KV_RANK], w["kv_norm.weight"])
    return q[..., :NOPE], q[..., NOPE:], latent, compressed[:, KV_RANK:]


def split_up_projection(w):
    """W_UK [H, nope, d_c] and W_UV [H, v, d_c] out of the joint kv_up weight."""
    joint = w["kv_up.weight"].view(HEADS, NOPE + V_DIM, KV_RANK)
    return joint[:, :NOPE], joint[:, NOPE:]


def finish(heads_out, x, w, gate=True):
    """Concatenate heads, apply the output gate sigmoid(W_g x), project back to D."""
    out = heads_out.reshape(x.shape[0], HEADS * V_DIM)
    if gate:
        out = out * torch.sigmoid(x @ w["gate_proj.weight"].T)
    return out @ w["o_proj.weight"].T


# %% [markdown]
# **Materialised** (training / prefill): rebuild every head's keys and values, then ordinary causal attention.

# %%
def mla_materialised(x, w, gate=True):
    q_nope, q_rope, latent, rope_key = project(x, w)
    w_uk, w_uv = split_up_projection(w)
    k_nope = torch.einsum("hnc,tc->thn", w_uk, latent)                 # [T, H, nope]
    v = torch.einsum("hvc,tc->thv", w_uv, latent)                      # [T, H, v]
    scores = (torch.einsum("thn,shn->hts", q_nope, k_nope)
              + torch.einsum("thr,sr->hts", q_rope, rope_key)) / math.sqrt(NOPE + ROPE)
    future = torch.triu(torch.ones(len(x), len(x), dtype=torch.bool), diagonal=1)
    probs = scores.masked_fill(future, float("-inf")).softmax(-1)
    return finish(torch.einsum("hts,shv->thv", probs, v), x, w, gate)


# %% [markdown]
# **Absorbed** (decoding): one token at a time, the cache holds only `[c; k_rope]`, and no per-head key or
# value is ever built for a cached token.

# %%
def mla_decode_step(x_t, cache, w, gate=True):
    """x_t [D]; cache [S, d_c + d_r] (grows by one row). Returns (y_t [D], new cache)."""
    q_nope, q_rope, latent, rope_key = project(x_t[None], w)
    cache = torch.cat([cache, torch.cat([latent, rope_key], dim=-1)])
    w_uk, w_uv = split_up_projection(w)
    q_latent = torch.einsum("hn,hnc->hc", q_nope[0], w_uk)              # q~ = W_UK^T q_nope
    query = torch.cat([q_latent, q_rope[0]], dim=-1)                    # [H, d_c + d_r]
    probs = (query @ cache.T / math.sqrt(NOPE + ROPE)).softmax(-1)      # [H, S]
    mixed_latent = probs @ cache[:, :KV_RANK]                           # [H, d_c]
    heads_out = torch.einsum("hvc,hc->hv", w_uv, mixed_latent)          # W_UV after the sum
    return finish(heads_out[None], x_t[None], w, gate)[0], cache


def mla_decode(x, w, gate=True):
    cache = torch.zeros(0, KV_RANK + ROPE, dtype=x.dtype)
    outputs = []
    for x_t in x:
        y_t, cache = mla_decode_step(x_t, cache, w, gate)
        outputs.append(y_t)
    return torch.stack(outputs), cache


# %%
weights = init_weights()
tokens = torch.randn(12, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
y_materialised = mla_materialised(tokens, weights)
y_absorbed, cache = mla_decode(tokens, weights)
gap = (y_materialised - y_absorbed).abs().max().item()
print(f"output shape {tuple(y_absorbed.shape)}, cache shape {tuple(cache.shape)} (= {KV_RANK} + {ROPE} per token)")
print(f"absorbed = materialised (float64, max gap below 1e-12): {gap < 1e-12}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### What absorption costs
#
# Against MHA, absorbed MLA reads far fewer numbers per cached token but does more multiply-adds per number it
# reads. (Against rebuilding every key and value from the latent, absorption saves arithmetic too: exercise 4.)
# Per decoding step, per layer and per cached token, MHA reads
# $2 n_h d_h$ numbers and does $2 n_h d_h$ multiply-adds (a score and a weighted value per head). Absorbed MLA
# reads only 576 numbers but every head does $d_c + d_r$ multiply-adds for its score and $d_c$ for its mix. For K3's
# 96 heads, with the same MHA baseline as in section 1 ($d_h = 128$ for keys and values), counting multiply-adds
# (MACs; one MAC is two FLOPs):

# %%
heads, head_dim, latent_dim, rope_dim = 96, 128, 512, 64
mha_read = 2 * heads * head_dim                                     # one key and one value per head
for label, read, macs in [
    ("MHA (d_h=128 for K and V)", mha_read, 2 * heads * head_dim),
    ("MLA absorbed", latent_dim + rope_dim, heads * (latent_dim + rope_dim + latent_dim)),
]:
    flop_per_byte = 2 * macs / (BYTES_BF16 * read)                  # 2 FLOP per MAC, 2 bytes per bf16 number
    print(f"{label:25s} reads {read:6,d} numbers, {macs:7,d} MACs per cached token: {macs / read:6.1f} MACs per number read"
          f" = {flop_per_byte:6.1f} FLOP per byte")
print(f"absorbed MLA reads {mha_read / (latent_dim + rope_dim):.1f}x less per cached token "
      f"(= the cache ratio of section 1: {k3_mha / k3_mla:.1f}x)")
H200_BF16_DENSE_FLOPS, H200_BYTES_PER_S = 989e12, 4.8e12             # datasheet: dense BF16 tensor cores, HBM3e
print(f"H200 balance point: {H200_BF16_DENSE_FLOPS / 1e12:.0f} TFLOP/s / {H200_BYTES_PER_S / 1e12:.1f} TB/s "
      f"= {H200_BF16_DENSE_FLOPS / H200_BYTES_PER_S:.0f} FLOP per byte")
absorbed_macs_per_number = heads * (latent_dim + rope_dim + latent_dim) / (latent_dim + rope_dim)
glue("ch07_absorbed_macs_per_number", f"{absorbed_macs_per_number:.0f}", display=False)
glue("ch07_h200_balance", f"{H200_BF16_DENSE_FLOPS / H200_BYTES_PER_S:.0f}", display=False)

# %% [markdown]
# Decoding is limited by memory bandwidth. A multiply-add is 2 FLOP and a bf16 number is 2 bytes, so the two
# factors cancel: multiply-adds per number read equal FLOP per byte read. MHA does one multiply-add per number it
# reads (1 FLOP per byte), far below what an H200 can do per byte it loads, so its cores mostly wait for memory.
# Absorbed MLA reads {glue:text}`ch07_mha_over_mla`× less and does about
# {glue:text}`ch07_absorbed_macs_per_number` multiply-adds per number, so about as many FLOP per byte: close to the
# H200's balance point of ≈{glue:text}`ch07_h200_balance` FLOP per byte, where memory and arithmetic take about the
# same time. The extra arithmetic fills time the cores would otherwise have spent waiting.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The output gate
#
# A softmax head must put weight 1 somewhere, so it always writes a mix of values into the residual stream, even
# when nothing in the context is relevant. Models learn work-arounds (attention sinks: a junk token that soaks up
# the weight; Xiao et al. 2023, [arXiv:2309.17453](https://arxiv.org/abs/2309.17453)). K3's gated MLA lets the
# layer close the tap itself, channel by channel:
#
# $$y_t = W_O\big(\,o_t \odot \sigma(W_g\, x_t)\,\big), \qquad o_t = [o_{t,1}; \dots; o_{t,n_h}] .$$
#
# The gate depends on the current token only, so it costs one projection and nothing in the cache. With a
# strongly negative pre-activation $W_g x_t$ the gate is near 0 and the layer is silent; as the pre-activation
# goes to $+\infty$ the gate goes to 1 and the layer is ordinary MLA. The cell sets $W_g = 0$, a gate of exactly
# 0.5, and checks that the output halves:

# %% [markdown] tags=["notes"]
# A softmax head must put its weight somewhere, so it always writes something. Ask the room how
# models cope without a gate (attention sinks), then show the gate: one sigmoid per channel lets
# the layer close the tap itself.

# %%
ungated = mla_materialised(tokens, weights, gate=False)
open_gate = dict(weights, **{"gate_proj.weight": torch.zeros_like(weights["gate_proj.weight"])})
half_gap = (mla_materialised(tokens, open_gate) - 0.5 * ungated).abs().max().item()
print(f"gate = sigmoid(0) = 0.5 everywhere -> output is half of ungated (float64, max |Δ| < 1e-12): {half_gap < 1e-12}")
gates = torch.sigmoid(tokens @ weights["gate_proj.weight"].T)
print(f"random init: gate values span {gates.min().item():.2f} .. {gates.max().item():.2f}, "
      f"mean {gates.mean().item():.2f}")

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7.0, 3.2))
viz.heatmap(ax, gates.T, title="Output gate σ(W_g x) at initialisation",
            xlabel="token position", ylabel="channel (head × d_v)", colorbar_label="gate value")
plt.show()

# %% [markdown]
# At initialisation the gates scatter around 0.5 (the printed span and mean), mixed over channels and tokens: no
# channel is closed yet. Training has to push a gate towards 0 wherever the layer should stay silent.

# %% [markdown] slideshow={"slide_type": "slide"} tags=["reading"]
# ## 5. Checked against `k3lite.layers.mla`
#
# The package's `MLA` layer holds the same weights under the same names. Loaded with our dictionary it must
# give the same outputs along both of its paths, and its cache must hold exactly our latents. (The package takes
# the scores to at least float32 before the softmax, which a bf16 model needs; our weights are float64 and stay
# float64, so the match is to rounding, far below 1e-12.)

# %% [markdown] tags=["notes"]
# Reading: the package's layer loads the notebook's weights and matches both paths, and its K3
# size is counted on the `meta` device. Refer students here; no need to show it live.

# %%
from k3lite.layers.mla import MLA

layer = MLA(D_MODEL, HEADS, q_lora_rank=Q_RANK, kv_lora_rank=KV_RANK, nope_dim=NOPE, rope_dim=ROPE,
            v_dim=V_DIM, norm_eps=EPS).double()
layer.load_state_dict(weights)
with torch.no_grad():
    y_layer, layer_cache = layer(tokens[None])
    y_layer_absorbed, _ = layer(tokens[None], absorb=True)
    prefix, rest = tokens[None, :7], tokens[None, 7:]
    _, prefix_cache = layer(prefix)
    y_decoded, _ = layer(rest, prefix_cache)
def max_gap(a, b):
    return (a - b).abs().max().item()


print(f"k3lite expanded  = notebook (max |Δ| < 1e-12): {max_gap(y_layer[0], y_materialised) < 1e-12}")
print(f"k3lite absorbed  = notebook (max |Δ| < 1e-12): {max_gap(y_layer_absorbed[0], y_materialised) < 1e-12}")
print(f"k3lite cache     = notebook cache (max |Δ| < 1e-12): "
      f"{max_gap(torch.cat(layer_cache, dim=-1)[0], cache) < 1e-12}")
print(f"k3lite prefill 7 + decode 5 = notebook (max |Δ| < 1e-12): "
      f"{max_gap(y_decoded[0], y_materialised[7:]) < 1e-12}")

# %% [markdown]
# In K3 itself, with the published sizes: the MLA layer (built on PyTorch's `meta` device, shapes without memory)
# and the package's cache accounting must agree with our table.

# %%
from k3lite.course import accounting
from k3lite.models.k3 import K3Config

with torch.device("meta"):
    k3_layer = MLA(7168, 96)
latent_elems = k3_layer.kv_lora_rank + k3_layer.rope_dim
k3_config = K3Config.published()
print(f"K3 MLA layer caches {k3_layer.kv_lora_rank} + {k3_layer.rope_dim} = {latent_elems} numbers per token")
print(f"k3lite.course.accounting: {accounting.k3_mla_cache_bytes_per_token(k3_config):,d} B/token "
      f"(notebook {k3_mla:,d}); all layers MLA "
      f"{accounting.k3_mla_cache_bytes_per_token(k3_config, all_layers_mla=True):,d} (notebook {k3_all_mla:,d}); "
      f"KDA state {accounting.k3_kda_state_bytes_per_sequence(k3_config):,d} B (notebook {kda_state_bytes:,d})")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. What the gate buys: a layer that must sometimes stay silent
#
# A small task. Channel 0 of each token is a flag. When it is on, the layer must output the running average of the
# tokens so far (easy for attention: equal scores); when it is off, it must output zero. We train the package's MLA
# layer twice from the same initial weights, once with the output gate (whose projection the other layer does not
# have), and measure the error on each kind of token.

# %% [markdown] tags=["notes"]
# The experiment behind the gate: a layer that must output zero for some tokens. Show the two
# error numbers for the "off" tokens, with and without the gate, and ask why the ungated layer
# cannot get them to zero.

# %%
TASK_LEN, TASK_BATCH, TASK_STEPS = 16, 16, pick(200, 1000)


def gate_task(generator):
    x = torch.randn(TASK_BATCH, TASK_LEN, D_MODEL, generator=generator)
    speak = torch.rand(TASK_BATCH, TASK_LEN, generator=generator) < 0.5
    x[..., 0] = 4.0 * speak.float() - 2.0
    average = x.cumsum(1) / torch.arange(1, TASK_LEN + 1)[None, :, None]
    target = torch.where(speak[..., None], average, torch.zeros_like(average))
    target[..., 0] = 0.0
    return x, target, speak


def gate_task_layer(output_gate):
    seed_everything(0)
    return MLA(D_MODEL, HEADS, q_lora_rank=Q_RANK, kv_lora_rank=KV_RANK, nope_dim=NOPE, rope_dim=ROPE,
               v_dim=V_DIM, output_gate=output_gate)


def train_gate_task(output_gate):
    model = gate_task_layer(output_gate)
    if output_gate:   # start from the ungated layer's weights; only the gate's projection is new
        missing, _ = model.load_state_dict(gate_task_layer(False).state_dict(), strict=False)
        assert all(name.startswith("gate_proj") for name in missing), missing
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batches = torch.Generator().manual_seed(1)
    for _ in range(TASK_STEPS):
        x, target, _ = gate_task(batches)
        loss = (model(x)[0] - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    x, target, speak = gate_task(torch.Generator().manual_seed(99))
    with torch.no_grad():
        error = (model(x)[0] - target).pow(2).mean(-1)
    return error[~speak].mean().item(), error[speak].mean().item()


errors = {output_gate: train_gate_task(output_gate) for output_gate in (False, True)}

# %% [markdown]
# The errors of a trained layer depend on the CPU (its float32 sums add in a different order on another
# processor), so they are shown without being compared by the notebook tests, and the next cell checks the
# lesson drawn from them.

# %%
# NBVAL_IGNORE_OUTPUT
for output_gate in (False, True):
    print(f"output gate {'on ' if output_gate else 'off'}: squared error {errors[output_gate][0]:.4f} on silent tokens, "
          f"{errors[output_gate][1]:.4f} on averaging tokens")
print(f"silent-token error, gate off / gate on: {errors[False][0] / errors[True][0]:.1f}x")

# %%
(silent_off, averaging_off), (silent_on, averaging_on) = errors[False], errors[True]
expect("silent tokens: the gated layer's error is under half the ungated one's", silent_on < 0.5 * silent_off)
expect("averaging tokens: the gated layer's error is no worse (within 10 %)", averaging_on < 1.1 * averaging_off)

# %% [markdown]
# Without the gate, the only way to output zero is to find values that average to zero for that query; the gate
# simply closes. On this task the gated layer's error on silent tokens is a fraction of the ungated one's, and it is
# no worse on the averaging tokens. (Gated attention has a second, well-documented benefit at scale: models no
# longer need an "attention sink" token to park unwanted attention weight on; Qiu et al. 2025,
# [arXiv:2505.06708](https://arxiv.org/abs/2505.06708).)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# ### Exercise 1 (transfer) — one cached group, several heads
# The table at the top credits GQA with a cache of $2\,n_g d_h$ numbers instead of $2\,n_h d_h$: only $n_g$ key and
# value heads are stored, and each serves $n_h / n_g$ query heads. Write `expand_kv_groups(kv, num_heads)` that takes
# a cached `kv [B, T, n_g, d_h]` and returns `[B, T, num_heads, d_h]`, in which query head $h$ reads group
# $h \,//\, (n_h / n_g)$: consecutive heads share a group, the usual numbering (Llama's `repeat_kv` follows it).
# A `num_heads` that $n_g$ does not divide is a `ValueError` naming both numbers. The checker runs causal attention
# with your expansion and compares each head with attention over its own group's cache.

# %% [markdown] tags=["notes"]
# Exercise 1 (expand cached groups for GQA) is a transfer and a warm-up; exercises 2 and 3 are the two halves
# of absorption: the key projection moved into the query, the value projection after the sum. Do
# exercise 2 in the room if time allows. Exercise 4 is a prediction for a show of hands (about 1, about 10,
# about 100?), exercise 5 an open question on the decoupled rope key.

# %%
from k3lite.exercises import ch07


def my_expand_kv_groups(kv, num_heads):
    raise NotImplementedError


# %%
ch07.check_expand_kv_groups(my_expand_kv_groups);

# %% tags=["solution"]
# Solution: repeat each group in place (a view plus one copy), never tile the groups.
def solution_expand_kv_groups(kv, num_heads):
    groups = kv.shape[2]
    if num_heads % groups:
        raise ValueError(f"num_heads ({num_heads}) must be a multiple of the number of cached groups ({groups})")
    return kv.repeat_interleave(num_heads // groups, dim=2)


ch07.check_expand_kv_groups(solution_expand_kv_groups);

# %% [markdown]
# The expansion is a read-time convenience: the cache keeps $n_g$ heads, and a fused attention kernel does not
# even materialise the copy, it points each query head at its group. MLA goes one step further and caches no
# head at all, only the latent that every head's key and value are computed from.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 — absorb the key projection
# Given `q_nope [H, d_nope]` and the key up-projection `w_uk [H, d_nope, d_c]` (so that $k_h = W_{UK,h}\, c$),
# return `q_latent [H, d_c]` with `q_latent[h] @ c == q_nope[h] @ (w_uk[h] @ c)` for every latent `c`.

# %%
def my_absorb_query(q_nope, w_uk):
    raise NotImplementedError


# %%
ch07.check_absorb_query(my_absorb_query);

# %% tags=["solution"]
# Solution: q·(W c) = (Wᵀ q)·c, for each head.
def solution_absorb_query(q_nope, w_uk):
    return torch.einsum("hn,hnc->hc", q_nope, w_uk)


ch07.check_absorb_query(solution_absorb_query);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 — the value projection after the sum
# Given attention probabilities `probs [H, T]`, cached latents `latents [T, d_c]` and `w_uv [H, d_v, d_c]`, return each head's
# output `[H, d_v]` without building a value vector for any cached token.

# %%
def my_absorbed_output(probs, latents, w_uv):
    raise NotImplementedError


# %%
ch07.check_absorbed_output(my_absorbed_output);

# %% tags=["solution"]
# Solution: mix the latents first ([H, d_c]), then one small matrix-vector product per head.
def solution_absorbed_output(probs, latents, w_uv):
    return torch.einsum("hvc,hc->hv", w_uv, probs @ latents)


ch07.check_absorbed_output(solution_absorbed_output);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4 (predict, then run) — what does absorption save?
# One decoding step of one MLA layer with K3's sizes ($d_c = 512$, $d_{\text{nope}} = d_v = 128$) and 1,024 cached
# latents. The *rebuilding* step multiplies every cached latent by $W_{UK,h}$ and $W_{UV,h}$ to get each head's
# keys and values, then attends as MHA would; the *absorbed* step (exercises 2 and 3) never builds them. Leave the
# rope part and the softmax out. How many times more multiply-adds does the rebuilding step do? Return your
# prediction from `predicted_absorption_saving()` *before* running the cell after it; the checker accepts a
# prediction within a factor of 1.5.

# %%
def predicted_absorption_saving():
    raise NotImplementedError  # return your prediction, e.g. 3.0


# %%
from torch.utils.flop_counter import FlopCounterMode

seed_everything(7)
STEP_HEADS, STEP_TOKENS, STEP_LATENT, STEP_NOPE, STEP_VALUE = 8, 1024, 512, 128, 128   # the ratio is per head
step_latents = torch.randn(STEP_TOKENS, STEP_LATENT)
step_q_nope = torch.randn(STEP_HEADS, STEP_NOPE)
step_w_uk = torch.randn(STEP_HEADS, STEP_NOPE, STEP_LATENT) / STEP_LATENT ** 0.5
step_w_uv = torch.randn(STEP_HEADS, STEP_VALUE, STEP_LATENT) / STEP_LATENT ** 0.5


def rebuilding_step():
    keys = torch.einsum("tc,hnc->htn", step_latents, step_w_uk)               # every cached key, every head
    values = torch.einsum("tc,hvc->htv", step_latents, step_w_uv)
    probs = torch.softmax(torch.einsum("hn,htn->ht", step_q_nope, keys) / STEP_NOPE ** 0.5, dim=-1)
    return torch.einsum("ht,htv->hv", probs, values)


def absorbed_step():
    q_latent = torch.einsum("hn,hnc->hc", step_q_nope, step_w_uk)              # exercise 2
    probs = torch.softmax(q_latent @ step_latents.T / STEP_NOPE ** 0.5, dim=-1)
    return torch.einsum("hvc,hc->hv", step_w_uv, probs @ step_latents)          # exercise 3


macs = {}
for name, step in (("rebuilding", rebuilding_step), ("absorbed", absorbed_step)):
    with FlopCounterMode(display=False) as counter:
        step_output = step()
    macs[name] = counter.get_total_flops() // 2
    print(f"{name:>10}: {macs[name]:>13,d} multiply-adds")
measured_absorption_saving = macs["rebuilding"] / macs["absorbed"]
print(f"same output: {torch.allclose(rebuilding_step(), absorbed_step(), atol=1e-3)}; "
      f"ratio {measured_absorption_saving:.1f}")

# %%
ch07.check_absorption_saving_prediction(predicted_absorption_saving, measured_absorption_saving,
                                        cached_tokens=STEP_TOKENS, latent_dim=STEP_LATENT, nope_dim=STEP_NOPE,
                                        value_dim=STEP_VALUE);


# %% tags=["solution"]
# Solution: per head and cached token, d_c (d_nope + d_v) to rebuild against 2 d_c absorbed, about 128; the
# one-off projections of the absorbed step pull it a little lower.
def predicted_absorption_saving_solution():
    per_token_rebuild = STEP_LATENT * (STEP_NOPE + STEP_VALUE) + STEP_NOPE + STEP_VALUE
    per_token_absorbed = 2 * STEP_LATENT
    one_off = STEP_LATENT * (STEP_NOPE + STEP_VALUE)
    return STEP_TOKENS * per_token_rebuild / (STEP_TOKENS * per_token_absorbed + one_off)


ch07.check_absorption_saving_prediction(predicted_absorption_saving_solution, measured_absorption_saving,
                                        cached_tokens=STEP_TOKENS, latent_dim=STEP_LATENT, nope_dim=STEP_NOPE,
                                        value_dim=STEP_VALUE);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 5 (open question) — why a separate rope key?
# MLA caches a second, small key $k^{\text{rope}}_s$ shared by all heads, next to the latent, instead of applying
# rotary position embeddings to the key $W_{UK,h}\, c_s$ rebuilt from the latent. Explain what would go wrong with
# absorption if the rotation were applied to that rebuilt key, and what the separate rope key costs in the cache.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# RoPE multiplies a key at position $s$ by a rotation $R_s$ that depends on $s$. With the rotation on the rebuilt
# key the score is $q_h^\top R_t^\top R_s W_{UK,h}\, c_s = (W_{UK,h}^\top R_{t-s}\, q_h)^\top c_s$ (a rotation's
# transpose turns the other way: $R_{s-t}^\top = R_{t-s}$): the matrix between
# the query and the latent now depends on the relative position $s - t$, so it cannot be folded into the query
# once per step. Absorption would need a different absorbed query for every cached position, which is the
# rebuilding cost again (or the keys would have to be cached, which is the MHA cache again). Keeping position in a
# separate key (DeepSeek-V2, arXiv:2405.04434, section 2.1.3) leaves the latent part position-free, so $W_{UK}$
# folds into the query, and rotates only a small shared key. The cost: $d_r = 64$ more numbers per token and layer
# (576 instead of 512, 12.5 % more cache) and $d_r$ more multiply-adds per head and cached token for the score. A
# good answer shows that the position dependence sits *between* $q$ and $c$, and prices the rope key.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Summary
#
# - A softmax layer's cache grows with the context; at K3's sizes plain MHA would need
#   {glue:text}`ch07_mha_gib_at_1m` GiB, more than a tebibyte, per 1M-token sequence.
# - MLA caches one 512-number latent and a 64-number shared key per token and layer; K3's
#   {glue:text}`ch07_k3_num_mla_layers` MLA layers cache {glue:text}`ch07_k3_mla_bytes` bytes per token, about a
#   quarter of what {glue:text}`ch07_k3_num_layers` MLA layers would ({glue:text}`ch07_k3_all_mla_bytes`).
# - Absorbing $W_{UK}$ into the query and applying $W_{UV}$ after the sum makes decoding read only the latents;
#   it equals the materialised computation exactly, and lifts decoding from 1 to about
#   {glue:text}`ch07_absorbed_macs_per_number` FLOP per byte read, close to the H200's balance point
#   ({glue:text}`ch07_absorbed_macs_per_number` vs ≈{glue:text}`ch07_h200_balance` FLOP/byte).
# - The output gate $\sigma(W_g x)$ lets the layer write nothing when the context has nothing to offer.
#
# Next: the other half of every K3 layer but the first (which keeps a dense MLP), the mixture of experts, and its bounded activation SiTU.

# %% [markdown] tags=["notes"]
# Three points to leave with: cache the latent, absorb the projections at decode time, and gate
# the output. Ask how this layer and KDA divide the work in K3 (exact retrieval in a few MLA
# layers, a fixed state in the many KDA layers).

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. How many numbers does MLA cache per token and layer with $d_c = 512$ and $d_r = 64$, and how many would MHA
#    with 96 heads of 128?
# 2. Why could $W_{UK}$ not be absorbed into the query if the key's content part carried a rotary embedding?
# 3. With $n_h = 96$ query heads and $n_g = 8$ KV groups, which group does query head 25 read?
# 4. Why is absorption a good trade when decoding?
#
# <details>
# <summary>Short answers</summary>
#
# 1. $512 + 64 = 576$ against $2 \cdot 96 \cdot 128 = 24{,}576$, {glue:text}`ch07_mha_over_mla` times more.
# 2. The rotation $R_s$ depends on the key's position $s$ and sits between the query and $W_{UK}$: in
#    $q^\top R_s W_{UK} c_s$ the absorbed query $W_{UK}^\top R_s^\top q$ changes with every cached $s$, so no single
#    $\tilde q$ serves every cached token.
# 3. Group $25 \,//\, (96 / 8) = 25 \,//\, 12 = 2$.
# 4. Decoding is limited by memory bandwidth: absorbed MLA reads only the 576-number latents, and the extra
#    multiply-adds per head fill time the cores would otherwise spend waiting for memory.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - DeepSeek-AI (2024), *DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model*:
#   [arXiv:2405.04434](https://arxiv.org/abs/2405.04434): §2.1, Multi-head Latent Attention (low-rank key-value
#   compression, the decoupled rotary key, absorption); sections 1–3.
# - DeepSeek-AI (2024), *DeepSeek-V3 Technical Report*: [arXiv:2412.19437](https://arxiv.org/abs/2412.19437): its
#   MLA configuration (section 1's table) and the same attention design at larger scale.
# - Shazeer (2019), *Fast Transformer Decoding: One Write-Head is All You Need*:
#   [arXiv:1911.02150](https://arxiv.org/abs/1911.02150): multi-query attention (MQA).
# - Ainslie et al. (2023), *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*:
#   [arXiv:2305.13245](https://arxiv.org/abs/2305.13245): grouped-query attention (exercise 1).
# - Su et al. (2021), *RoFormer: Enhanced Transformer with Rotary Position Embedding*:
#   [arXiv:2104.09864](https://arxiv.org/abs/2104.09864).
# - Kimi Team (2025), *Kimi Linear: An Expressive, Efficient Attention Architecture*:
#   [arXiv:2510.26692](https://arxiv.org/abs/2510.26692): MLA without positional encoding (NoPE) in a 3 KDA : 1 MLA
#   hybrid.
# - Xiao et al. (2023), *Efficient Streaming Language Models with Attention Sinks*:
#   [arXiv:2309.17453](https://arxiv.org/abs/2309.17453); section 4.
# - Qiu et al. (2025), *Gated Attention for Large Language Models: Non-linearity, Sparsity, and
#   Attention-Sink-Free*: [arXiv:2505.06708](https://arxiv.org/abs/2505.06708): a sigmoid gate after attention
#   (sections 4 and 6).
# - Moonshot AI, the published configuration of Kimi K3 (July 2026), transcribed field by field in
#   `k3lite.models.k3.K3Config.published()`; no stable public address is recorded for it in the course's sources: 24
#   gated MLA layers, query LoRA, a context of 1,048,576 tokens.
# - NVIDIA, [H200 Tensor Core GPU](https://www.nvidia.com/en-us/data-center/h200/): 141 GB of HBM3e at 4.8 TB/s and
#   its bf16 tensor-core peak (sections 1 and 3).
