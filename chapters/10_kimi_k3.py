# %% [markdown] slideshow={"slide_type": "slide"}
# # 10 · Kimi K3: the whole hybrid
#
# Nine chapters built the parts one failure at a time. GPT-2's KV cache grows with every token
# (chapter 01); linear attention folds it into a fixed state but lets associations blur (02); the delta
# rule overwrites instead of adding (03, 04); a gate lets the state forget (05), one decay per channel
# lets it forget selectively (06). A fixed state still loses information, so a few layers of softmax
# attention with a compressed cache come back (MLA, 07); the feed-forward half becomes a sparse latent
# mixture of experts with a bounded activation (08); and Attention Residuals let a layer choose which
# earlier depths to read (09).
#
# This last lecture puts the parts together and checks the story against the numbers:
#
# 1. what K3 adds over Kimi Linear;
# 2. the assembled model: its layer plan, computed from the configuration;
# 3. its parameters, and the famous "22,580 GPT-2s";
# 4. a small K3 and a small GPT-2 trained side by side, and what that can and cannot show;
# 5. decode memory: constant state plus a slowly growing latent cache, against GPT-2's cache;
# 6. a **claim ledger**: every quantitative claim of the three articles the course retells (listed under
#    Sources), with the cell that checks it
#    and a verdict.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 4 h for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. derive K3's layer plan from its configuration: 23 macrocycles of 3 KDA + 1 MLA layers and a final MLA layer, 93
#    layers in all (69 KDA, 24 MLA);
# 2. compute K3's total and active parameters, and its ratio to GPT-2 small from exact and from rounded counts;
# 3. compute decode memory as a function of the context for K3 (a fixed KDA state plus MLA latents) and for GPT-2,
#    and the break-even contexts;
# 4. check a published quantitative claim against a computation and give it one of the ledger's verdicts, with
#    the reason;
# 5. read a GPU decode benchmark three ways (eager wall time, device time, CUDA-graph replay) and say what each one
#    measures.
#
# **Prerequisites.**
#
# - Chapters 06 (KDA), 07 (MLA), 08 (latent MoE and SiTU) and 09 (AttnRes); chapter 01 for GPT-2's cache.
# - The bake-off's two-standard-error rule (chapter 03, section 6, or chapter 06, section 7).
# - Optional, for section 6: host-device asynchrony and CUDA graphs, in NVIDIA's [CUDA C++ Programming
#   Guide](https://docs.nvidia.com/cuda/cuda-c-programming-guide/) ("CUDA Graphs").

# %% [markdown] tags=["notes"]
# The closing lecture: assemble the parts, count them, train a toy K3 next to a toy GPT-2, and hold the
# three articles' claims against numbers. The trained bake-off answers two ledger rows (the hybrid or Kimi Linear
# against full attention, and the hybrid against pure KDA). Its earlier KDA and hybrid runs began with a saturated
# gate; the two MQAR cells trained again with the published layers settle the first row at toy scale (softmax
# attention wins on 64 pairs) and leave the second open.

# %%
import json
import math
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from IPython.display import Markdown, display
from matplotlib.patches import Patch
from myst_nb import glue

from k3lite.course import accounting, flops, viz
from k3lite import data
from k3lite.course.checks import expect
from k3lite.models.gpt2 import GPT2, GPT2Config
from k3lite.models.k3 import K3, K3Config
from k3lite.layers.attnres import num_block_sources
from k3lite.layers.mla import KEY_ALIGN_CUDA
from k3lite.ops import gated_delta_rule, situ
from k3lite.course.runtime import device, pick, seed_everything
from k3lite.train import train

viz.use_style()
seed_everything(0)
# Models this small train faster on one core: on a shared CPU two threads mostly wait for each other.
torch.set_num_threads(1)
DEVICE = torch.device(pick("cpu", device().type))
GPT2_SMALL = GPT2Config.small()
K3_PUBLISHED = K3Config.published()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. What K3 adds over Kimi Linear
#
# Kimi Linear (2025) already had the skeleton: three KDA layers for every MLA layer, MLA without
# positional encoding, and a mixture of experts in place of the MLP. K3 keeps the skeleton and changes
# almost every organ. The Kimi Linear numbers below are the published 48B-A3B configuration
# (Kimi Linear, arXiv:2510.26692, and its released configuration); the K3 column is read from
# `K3Config.published()`.

# %% [markdown] tags=["notes"]
# Side-by-side table: same skeleton, new organs. Point at the bounded gate, gated MLA, latent experts with
# SiTU and block AttnRes; each was a chapter.

# %%
KIMI_LINEAR = {"hidden size": 2304, "layers": 27, "KDA : MLA layers": "20 : 7", "heads x head dim": "32 x 128",
               "routed experts, top-k": "256, top-8", "shared experts": 1, "expert width": 1024,
               "experts run on": "hidden state (2304)", "activation": "SiLU",
               "KDA decay": "-exp(A) softplus(.)", "KDA output gate": "low rank", "MLA output gate": "no",
               "residuals": "plain sum", "vocabulary": 163_840}
k3 = K3_PUBLISHED
K3_ROW = {"hidden size": k3.hidden_size, "layers": k3.num_layers,
          "KDA : MLA layers": f"{k3.num_kda_layers} : {k3.num_mla_layers}",
          "heads x head dim": f"{k3.num_heads} x {k3.head_dim}",
          "routed experts, top-k": f"{k3.num_experts}, top-{k3.top_k}", "shared experts": k3.num_shared_experts,
          "expert width": k3.expert_width, "experts run on": f"latent ({k3.latent_size})",
          "activation": k3.activation.replace("situ", "SiTU"),
          "KDA decay": f"{k3.gate_lower_bound:g} sigmoid(.)",
          "KDA output gate": "full rank" if k3.kda_output_gate_rank is None else "low rank",
          "MLA output gate": "yes" if k3.mla_output_gate else "no",
          "residuals": f"block AttnRes ({k3.attnres_block_size} layers)", "vocabulary": k3.vocab_size}
print(f"{'':22s}{'Kimi Linear 48B':>24s}{'Kimi K3':>28s}")
for key, value in KIMI_LINEAR.items():
    print(f"{key:22s}{value!s:>24s}{K3_ROW[key]!s:>28s}")

# %% [markdown]
# Read the right column as a list of chapters: bounded decay and a full-rank output gate (06),
# a gated MLA with a low-rank query (07), latent experts with SiTU (08), block AttnRes (09), and
# scale: a wider and much deeper stack, with more experts that run on a half-width latent.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The assembled model
#
# Every decoder layer of K3 is two sub-layers, each behind an RMSNorm: a token mixer (KDA or MLA) and
# a feed-forward block (a dense gated MLP in layer 0, a latent MoE everywhere else). The mixers follow
# a macrocycle of three KDA layers and one MLA layer. Block AttnRes groups the decoder layers into
# blocks of twelve and replaces the plain residual sum before every sub-layer by a learned softmax over
# `[embedding, finished blocks, running partial block]`. All of it is in the configuration:
#
# ![Kimi K3: the whole stack](../figures/diagram_k3_stack.svg)

# %% [markdown] tags=["notes"]
# Walk the stack diagram: embedding, 23 macrocycles of three KDA and one MLA layer each with a latent MoE,
# a final MLA layer, the head; AttnRes reads the block sums before every sub-layer. Then let the
# configuration count the layers: 93, not 92.

# %%
types = k3.layer_types
ffn_types = [k3.ffn_type(i) for i in range(k3.num_layers)]
blocks = math.ceil(k3.num_layers / k3.attnres_block_size)
print(f"layers             : {k3.num_layers} = {k3.num_macrocycles} macrocycles x {k3.layers_per_cycle}"
      f" + {int(k3.has_final_mla)} final MLA layer")
print(f"token mixers       : {types.count('kda')} KDA + {types.count('mla')} MLA")
print(f"MLA layers (0-based): {[i for i, t in enumerate(types) if t == 'mla'][:3]} ... "
      f"{[i for i, t in enumerate(types) if t == 'mla'][-2:]}")
print(f"feed-forward       : {ffn_types.count('dense')} dense (layer {ffn_types.index('dense')}) "
      f"+ {ffn_types.count('moe')} latent MoE")
print(f"AttnRes            : blocks of {k3.attnres_block_size} layers -> {blocks} blocks "
      f"(the last holds {k3.num_layers - (blocks - 1) * k3.attnres_block_size} layers)")

# %% tags=["plumbing"]
def draw_layer_plan(config, title):
    """Two rows of cells, one column per decoder layer: token mixer on top, feed-forward below."""
    mixer_colors = {"kda": viz.MECHANISM_COLORS["kda"], "mla": viz.MECHANISM_COLORS["mla"]}
    ffn_colors = {"dense": viz.PALETTE["orange"], "moe": viz.PALETTE["green"]}
    n = config.num_layers
    fig, ax = plt.subplots(figsize=(12, 2.6))
    for i, kind in enumerate(config.layer_types):
        ax.add_patch(plt.Rectangle((i, 1), 0.9, 0.9, color=mixer_colors[kind]))
        ax.add_patch(plt.Rectangle((i, 0), 0.9, 0.9, color=ffn_colors[config.ffn_type(i)]))
    if config.attnres_block_size:
        for start in range(0, n, config.attnres_block_size):
            if start:
                ax.axvline(start - 0.05, color=viz.INK, linewidth=1.5)
            middle = (start + min(start + config.attnres_block_size, n)) / 2
            ax.text(middle, -0.35, f"block {start // config.attnres_block_size + 1}", ha="center", fontsize=8)
    ax.set_xlim(-0.5, n + 0.5)
    ax.set_ylim(-0.6, 2.0)
    ax.set_yticks([0.45, 1.45], ["feed-forward", "token mixer"])
    ax.set_xticks(range(0, n, 12))
    ax.set_xlabel("decoder layer (0-based); black lines: AttnRes block boundaries")
    ax.grid(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(title)
    legend = [Patch(color=mixer_colors["kda"], label="KDA"), Patch(color=mixer_colors["mla"], label="MLA"),
              Patch(color=ffn_colors["dense"], label="dense MLP"), Patch(color=ffn_colors["moe"], label="latent MoE")]
    ax.legend(handles=legend, ncols=4, loc="upper center", bbox_to_anchor=(0.5, -0.35), fontsize=8)
    return fig


draw_layer_plan(k3, f"Kimi K3: {k3.num_layers} layers, {k3.num_kda_layers} KDA + {k3.num_mla_layers} MLA")
plt.show()

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### 23 macrocycles, but 93 layers
#
# The worklog ("Kimi K3") and its bilingual abstract ([B] in section 6's list of sources) say "23 four-layer
# macrocycles": 92 layers. The published
# configuration has one more: after the 23rd cycle comes a final MLA layer, so the stack ends in softmax
# attention and has 24 MLA layers, not 23. Build both and count:

# %%
seed_reading = replace(k3, num_layers=k3.num_macrocycles * k3.layers_per_cycle)
for label, config in [("articles: 23 x 4", seed_reading), ("published", k3)]:
    print(f"{label:15s}: {config.num_layers} layers, {config.num_kda_layers} KDA + {config.num_mla_layers} MLA, "
          f"last layer {config.layer_types[-1].upper()}, "
          f"MLA cache {accounting.k3_mla_cache_bytes_per_token(config):,d} B/token (bf16)")

# %% [markdown]
# And the AttnRes blocks. K3 counts sub-layers (two per decoder layer) when it fills a block, so a block
# of 12 decoder layers is 24 sub-layers. After the whole stack, the sources it holds are the embedding
# and one sum per finished block; the unfinished one is the running partial sum.

# %%
for label, num_layers in [("articles: 92 layers", 92), ("published: 93", k3.num_layers)]:
    stored, partial_sublayers = num_block_sources(2 * num_layers, 2 * k3.attnres_block_size)
    print(f"{label:17s}: {num_layers} / {k3.attnres_block_size} = {num_layers / k3.attnres_block_size:.2f} -> "
          f"{math.ceil(num_layers / k3.attnres_block_size)} blocks; stored sources {stored} "
          f"(embedding + {stored - 1} finished blocks) + a partial block of {partial_sublayers // 2} layers")

# %% [markdown]
# Either way "8 AttnRes blocks" comes out: 93 / 12 = 7.75, so seven full blocks and a last one of
# nine layers. The final read (before the output norm) mixes 8 stored sources and the partial block.

# %% [markdown] slideshow={"slide_type": "slide"} tags=["reading"]
# ## 3. How many parameters?
#
# `k3lite.course.accounting.k3_param_counts` counts every weight matrix from the configuration. "Active" means
# the parameters that take part in computing one token: all but the 16 selected routed experts are
# idle, and the input embedding table is only looked up (one row read), so both are left out.
# Below, the MoE's "always on" part is split into shared experts and router + latent projections.

# %% [markdown] tags=["notes"]
# Every weight counted from the configuration and checked on the meta device. The famous 22,580 is the
# ratio of two rounded headline numbers; the exact counts move it by about one percent.

# %%
def parameter_groups(config):
    """Parameters by group, with the number of them one token actually uses."""
    parts = accounting.k3_parameter_breakdown(config)
    d, moe_layers = config.hidden_size, config.num_moe_layers
    shared = moe_layers * 3 * d * config.num_shared_experts * config.expert_width
    router_latent = parts["moe router, shared, latent"] - shared
    routed_active = moe_layers * config.top_k * accounting.k3_expert_parameters(config)
    groups = {  # name: (total, active)
        "input embedding": (parts["embedding"], 0),
        "output head": (parts["output head"], parts["output head"]),
        "KDA mixers": (parts["kda mixers"],) * 2,
        "MLA mixers": (parts["mla mixers"],) * 2,
        "routed experts": (parts["routed experts"], routed_active),
        "shared experts": (shared, shared),
        "router + latent down/up": (router_latent, router_latent),
        "dense MLP (layer 0)": (parts["dense mlps"],) * 2,
        "norms + AttnRes queries": (parts["norms and attnres"],) * 2,
    }
    return groups


groups = parameter_groups(k3)
counts = accounting.k3_param_counts(k3)
total = sum(t for t, _ in groups.values())
active = sum(a for _, a in groups.values())
assert (total, active) == (counts["total"], counts["active"])
print(f"{'group':26s}{'total':>20s}{'share':>8s}{'active':>18s}")
for name, (group_total, group_active) in groups.items():
    print(f"{name:26s}{group_total:>20,d}{group_total / total:>8.2%}{group_active:>18,d}")
print(f"{'sum':26s}{total:>20,d}{1:>8.0%}{active:>18,d}")
print(f"\ntotal  {total / 1e12:.2f}T   active {active / 1e9:.1f}B per token  ({active / total:.2%} of the weights)")
glue("ch10_total", f"{total / 1e12:.2f}T", display=False)
glue("ch10_active", f"{active / 1e9:.0f}B", display=False)
glue("ch10_routed_share", f"{groups['routed experts'][0] / total:.0%}", display=False)
glue("ch10_routed_active_share", f"{groups['routed experts'][1] / active:.0%}", display=False)

# %% [markdown]
# The routed experts are {glue:text}`ch10_routed_share` of the weights, yet a token uses only 16 of the 896 in each
# layer; those 16 still carry {glue:text}`ch10_routed_active_share` of the parameters a token is multiplied by. The formula is only as good as its match with the real modules, so build the whole 2.8T model
# on PyTorch's `meta` device (shapes, no storage) and count what was built:

# %%
meta = accounting.k3_meta_param_counts(k3)
print(f"built on the meta device: total {meta['total']:,d}, active {meta['active']:,d}; "
      f"equal to the formula: {meta == {'total': total, 'active': active}}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### How many GPT-2s fit into K3?
#
# The worklog's title number is 22,580, "exactly" in the bilingual abstract. It is the ratio of the two
# rounded headline numbers, 2.8T over 124M. With GPT-2 small's exact count (chapter 01) and K3's exact
# count from above, the ratio moves:

# %%
gpt2_total = accounting.gpt2_parameter_count(GPT2_SMALL)
ratios = {"2.8e12 / 124e6 (both rounded)": 2.8e12 / 124e6,
          "2.8e12 / 124,439,808": 2.8e12 / gpt2_total,
          "exact K3 / exact GPT-2": total / gpt2_total,
          "K3 active / GPT-2": active / gpt2_total}
print(f"GPT-2 small: {gpt2_total:,d} parameters (meta-device count {accounting.gpt2_meta_parameter_count(GPT2_SMALL):,d})")
for label, ratio in ratios.items():
    print(f"{label:32s}: {ratio:>11,.1f}")
for key, label in (("rounded", "2.8e12 / 124e6 (both rounded)"), ("exact", "exact K3 / exact GPT-2"),
                   ("active", "K3 active / GPT-2")):
    glue(f"ch10_ratio_{key}", f"{ratios[label]:,.1f}", display=False)

# %% [markdown]
# So 22,580 is the ratio of the two rounded numbers ({glue:text}`ch10_ratio_rounded`, the same as chapter 00
# prints); the exact counts give {glue:text}`ch10_ratio_exact`, one percent less. Per token the comparison is
# far closer: K3 *uses* about {glue:text}`ch10_ratio_active` GPT-2s' worth of weights.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. A small K3 against a small GPT-2
#
# We cannot train 2.8T parameters here, but we can train the same architecture at toy size next to a
# GPT-2 of nearly the same parameter count, on the same bytes, with the same optimiser, schedule and
# batches. The data are the course's offline corpus (Python standard-library source, byte-level, 256
# tokens). On a CPU the K3 is `K3Config.tiny()`: one macrocycle plus the final MLA (5 layers), width 64,
# 8 routed experts (top-2) and 1 shared, AttnRes blocks of 2 layers.

# %% [markdown] tags=["notes"]
# Same data, optimiser and batches; nearly the same parameter count. Say before the plot what a toy run
# can and cannot show: that the pieces train together, not that the design wins at scale.

# %%
SEQ_LEN = pick(64, 128)
BATCH = pick(8, 32)
STEPS = pick(150, 1500)
k3_small_config = pick(K3Config.tiny(), K3Config.small())
gpt2_small_config = pick(GPT2Config.tiny(n_layer=4, n_embd=76, n_head=4), GPT2Config.tiny(n_layer=4, n_embd=248, n_head=4))

text = data.corpus_text()
ids = data.encode(text)
train_ids, val_ids = data.train_val_split(ids)
print(f"corpus: {len(ids):,d} bytes (fingerprint {data.corpus_fingerprint(text)}), "
      f"train {len(train_ids):,d} / validation {len(val_ids):,d}")
batch_generator = torch.Generator().manual_seed(0)
batches = [data.random_batch(train_ids, BATCH, SEQ_LEN, batch_generator) for _ in range(STEPS)]
val_batch = data.random_batch(val_ids, 32, SEQ_LEN, torch.Generator().manual_seed(1))
batches = [(x.to(DEVICE), y.to(DEVICE)) for x, y in batches]
val_batch = tuple(t.to(DEVICE) for t in val_batch)

seed_everything(0)
small_k3 = K3(k3_small_config).to(DEVICE)
seed_everything(0)
small_gpt2 = GPT2(gpt2_small_config).to(DEVICE)
k3_counts = accounting.k3_param_counts(k3_small_config)
gpt2_count = accounting.count_parameters(small_gpt2)
assert k3_counts["total"] == accounting.count_parameters(small_k3)
print(f"small K3   : {k3_counts['total']:>9,d} parameters, {k3_counts['active']:>9,d} active per token")
print(f"small GPT-2: {gpt2_count:>9,d} parameters (all active); ratio K3/GPT-2 {k3_counts['total'] / gpt2_count:.3f}")
print(f"small K3 layout: {'-'.join(k3_small_config.layer_types)}, width {k3_small_config.hidden_size}, "
      f"{k3_small_config.num_experts} routed experts (top-{k3_small_config.top_k}) + "
      f"{k3_small_config.num_shared_experts} shared, AttnRes blocks of {k3_small_config.attnres_block_size} layers")
print(f"small GPT-2 layout: {gpt2_small_config.n_layer} layers, width {gpt2_small_config.n_embd}, "
      f"{gpt2_small_config.n_head} heads")
print(f"budget: {STEPS} steps x {BATCH} x {SEQ_LEN} = {STEPS * BATCH * SEQ_LEN:,d} training tokens each")
glue("ch10_small_k3_params", f"{k3_counts['total']:,d}", display=False)
glue("ch10_small_gpt2_params", f"{gpt2_count:,d}", display=False)
glue("ch10_small_train_bytes", f"{STEPS * BATCH * SEQ_LEN:,d}", display=False)

# %%
histories = {}
for name, model in [("K3", small_k3), ("GPT-2", small_gpt2)]:
    histories[name] = train(model, lambda step: batches[step], steps=STEPS, lr=3e-3, warmup=10,
                            eval_batch=val_batch, eval_every=STEPS // 5)

# %%
# NBVAL_IGNORE_OUTPUT
for name, history in histories.items():
    print(f"{name:6s} trained in {history.seconds:.1f} s ({history.seconds / STEPS * 1e3:.0f} ms per step)")

# %%
# The best prediction that ignores the context: byte frequencies of the training text (add-one smoothed),
# scored on the validation text.
byte_counts = torch.bincount(train_ids, minlength=256).double() + 1
unigram_loss = -(byte_counts / byte_counts.sum()).log()[val_ids].mean().item()
print(f"uniform over 256 bytes: {math.log(256):.2f} nats; context-free (unigram) predictor: {unigram_loss:.2f} nats")


def unigram_entropy(token_ids):
    """Entropy (nats per byte) of a text's own byte frequencies: how hard it is without context."""
    counts = torch.bincount(token_ids, minlength=256).double()
    p = counts[counts > 0] / counts.sum()
    return -(p * p.log()).sum().item()


train_unigram_loss = -(byte_counts / byte_counts.sum()).log()[train_ids].mean().item()
print(f"unigram entropy: training text {unigram_entropy(train_ids):.2f}, validation text {unigram_entropy(val_ids):.2f} "
      f"nats per byte; the training-text unigram scores {train_unigram_loss:.2f} on training text, "
      f"{unigram_loss:.2f} on validation text")
glue("ch10_val_entropy", f"{unigram_entropy(val_ids):.2f}", display=False)
glue("ch10_train_entropy", f"{unigram_entropy(train_ids):.2f}", display=False)
glue("ch10_unigram_on_val", f"{unigram_loss:.2f}", display=False)
glue("ch10_unigram_on_train", f"{train_unigram_loss:.2f}", display=False)
loss_gap = histories["K3"].val_loss[-1] - histories["GPT-2"].val_loss[-1]
final_train = {name: float(np.mean(history.train_loss[-10:])) for name, history in histories.items()}
final_val = {name: history.val_loss[-1] for name, history in histories.items()}

# %% [markdown]
# The losses themselves depend on the CPU: a few thousand float32 sums per step, added in an order that
# differs between processors, instruction sets and thread counts, move the second decimal. They are shown
# here (the notebook tests do not compare them), and the cell after them checks what the text draws from them.

# %%
# NBVAL_IGNORE_OUTPUT
print(f"{'':8s}{'val loss at step ' + ', '.join(str(s) for s in histories['K3'].val_steps):>44s}")
for name, history in histories.items():
    print(f"{name:8s}{'  '.join(f'{v:.2f}' for v in history.val_loss):>44s}")
print("mean training loss of the last 10 steps: " + ", ".join(f"{name} {loss:.2f}" for name, loss in final_train.items()))
print(f"final validation loss: K3 {final_val['K3']:.2f}, GPT-2 {final_val['GPT-2']:.2f} "
      f"(K3 - GPT-2 = {loss_gap:+.2f} nats)")
for name, key in (("K3", "k3"), ("GPT-2", "gpt2")):
    glue(f"ch10_{key}_val_loss", f"{final_val[name]:.2f}", display=False)
    glue(f"ch10_{key}_train_loss", f"{final_train[name]:.2f}", display=False)
glue("ch10_loss_gap", f"{loss_gap:+.2f}".replace("-", "\N{MINUS SIGN}"), display=False)

# %%
GAP = 0.2  # nats: what "a few hundredths apart" may grow to on another CPU, far less than a broken model loses
for name in histories:
    expect(f"{name}: final validation loss < 2.6, well below the unigram's {unigram_loss:.2f}", final_val[name] < 2.6)
    expect(f"{name}: final validation loss below its mean training loss of the last 10 steps",
           final_val[name] < final_train[name])
expect(f"K3 and GPT-2 end within {GAP} nats of each other", abs(loss_gap) < GAP)

# %% tags=["plumbing"]
def smooth(values, width=10):
    kernel = np.ones(width) / width
    return np.convolve(values, kernel, mode="valid")


fig, ax = plt.subplots()
for name, color in [("K3", viz.MECHANISM_COLORS["k3"]), ("GPT-2", viz.MECHANISM_COLORS["gpt2"])]:
    history = histories[name]
    smoothed = smooth(history.train_loss)
    ax.plot(history.steps[len(history.steps) - len(smoothed):], smoothed, color=color, label=f"{name} train (mean of 10)")
    ax.plot(history.val_steps, history.val_loss, "o--", color=color, linewidth=1, label=f"{name} validation")
ax.axhline(unigram_loss, color=viz.PALETTE["black"], linewidth=1, linestyle=":", label="unigram (no context)")
ax.set_xlabel("optimizer step")
ax.set_ylabel("cross-entropy (nats per byte)")
ax.set_title(f"Same bytes, same budget: K3 {k3_counts['total'] / 1e3:.0f}k vs GPT-2 {gpt2_count / 1e3:.0f}k parameters")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The validation curves lie below the training curves for both models ({glue:text}`ch10_k3_val_loss` and
# {glue:text}`ch10_gpt2_val_loss` against {glue:text}`ch10_k3_train_loss` and {glue:text}`ch10_gpt2_train_loss`
# at the end, in the run stored here). That is not a bug, and part of it is the text itself: the validation
# bytes are the end of the corpus (the last standard-library modules), and they are easier to predict
# even without context. Their own byte frequencies have an entropy of {glue:text}`ch10_val_entropy` nats per
# byte against {glue:text}`ch10_train_entropy` for the training text, and the unigram fitted on the training
# text scores {glue:text}`ch10_unigram_on_val` nats on them against {glue:text}`ch10_unigram_on_train` on the
# text it was fitted to. That accounts for only part of the gap. Two other effects are not separated here: the
# last modules may be easier *in context* too, which a unigram cannot see, and the training figure is the mean of
# the last ten steps of a model that is still improving, while validation is scored after the last step. It is
# the same held-out text for both models, so the comparison between them stays fair.
#
# Greedy continuations of the same prompt (arg-max at every step, so no randomness, but the trained weights
# differ in their last bits from CPU to CPU, and so may a near-tied arg-max: the text is not compared):

# %%
# NBVAL_IGNORE_OUTPUT
prompt = data.encode("    def ")[None].to(DEVICE)
k3_text = data.decode(small_k3.generate(prompt, 40, temperature=0)[0].cpu())
gpt2_text = data.decode(small_gpt2.generate(prompt, 40, temperature=0)[0].cpu())
print(f"K3   : {k3_text!r}")
print(f"GPT-2: {gpt2_text!r}")

# %% [markdown]
# **What this run can show:** both models train on the same data and budget without trouble, both get
# well below the context-free (unigram) loss, so both use the context, and the whole K3 machinery
# (chunked KDA, absorbed MLA, routing, SiTU, AttnRes) runs end to end, forward and backward.
#
# **What it cannot show:** which architecture is better. With {glue:text}`ch10_small_k3_params` (K3) and
# {glue:text}`ch10_small_gpt2_params` (GPT-2) parameters and {glue:text}`ch10_small_train_bytes` training bytes,
# the final losses differ by K3 − GPT-2 = {glue:text}`ch10_loss_gap` nats here, from one seed and one learning
# rate, which is too little evidence to rank two architectures; the samples are barely code. K3's design pays off at lengths and scales this run never reaches:
# its KDA layers earn their keep when the context is long (memory, section 5), its experts when there are
# many tokens to specialise on, AttnRes when the stack is deep. A fair quality comparison needs trained
# models at scale, and it is the one claim family this notebook leaves open.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Decode memory: a state that stays, a cache that grows slowly
#
# While decoding, one sequence of K3 holds, per KDA layer, a $H\times K\times V$ float32 state (plus
# the convolution tails: the last three inputs of each of its q, k and v short convolutions, chapter 06), and
# per MLA layer one 576-number latent per token. GPT-2 holds a key and a value per head, layer and token:
#
# $$ \text{K3}(N) = \underbrace{69\cdot 96\cdot 128^2\cdot 4}_{\text{KDA states}} + \text{conv tails}
#    + N\cdot \underbrace{24\cdot 576\cdot 2}_{\text{MLA latents}},\qquad
#    \text{GPT-2}(N) = N\cdot \underbrace{2\cdot 12\cdot 12\cdot 64\cdot 2}_{\text{K and V}} \text{ bytes}. $$

# %% [markdown] tags=["notes"]
# Decode memory is where the hybrid pays off: a fixed KDA state plus a small latent per MLA layer and token.
# Show the break-even points, then the check that the real caches match the formula and recomputation.

# %%
MIB, GIB = 2 ** 20, 2 ** 30
k3_per_token = accounting.k3_mla_cache_bytes_per_token(k3)
k3_all_mla_per_token = accounting.k3_mla_cache_bytes_per_token(k3, all_layers_mla=True)
kda_state = accounting.k3_kda_state_bytes_per_sequence(k3)
k3_fixed = accounting.k3_cache_bytes(k3, 0)["total"]
gpt2_per_token = accounting.gpt2_kv_bytes_per_token(GPT2_SMALL)
print(f"K3 MLA latents         : {k3.num_mla_layers} x {k3.kv_lora_rank + k3.rope_dim} x 2 = {k3_per_token:,d} B/token")
print(f"K3 KDA states          : {k3.num_kda_layers} x {k3.num_heads} x {k3.head_dim}^2 x 4 = {kda_state:,d} B "
      f"= {kda_state / MIB:.0f} MiB per sequence")
print(f"K3 fixed part incl. conv tails: {k3_fixed / MIB:.0f} MiB")
print(f"GPT-2 small KV cache   : 2 x 12 x 12 x 64 x 2 = {gpt2_per_token:,d} B/token")
print(f"K3 if all 93 layers were MLA: {k3_all_mla_per_token:,d} B/token")
print(f"K3 holds less than an all-MLA K3 beyond {k3_fixed / (k3_all_mla_per_token - k3_per_token):,.0f} tokens, "
      f"less than GPT-2 small's cache beyond {k3_fixed / (gpt2_per_token - k3_per_token):,.0f} tokens")
glue("ch10_k3_bytes_per_token", f"{k3_per_token:,d}", display=False)
glue("ch10_gpt2_bytes_per_token", f"{gpt2_per_token:,d}", display=False)
glue("ch10_kda_state_mib", f"{kda_state / MIB:.0f}", display=False)
glue("ch10_fixed_mib", f"{k3_fixed / MIB:.0f}", display=False)
glue("ch10_break_even_gpt2", f"{k3_fixed / (gpt2_per_token - k3_per_token):,.0f}", display=False)
glue("ch10_break_even_all_mla", f"{k3_fixed / (k3_all_mla_per_token - k3_per_token):,.0f}", display=False)
for n in (1024, 2 ** 17, 2 ** 20):
    print(f"  N = {n:>9,d}: K3 {accounting.k3_cache_bytes(k3, n)['total'] / GIB:7.2f} GiB, "
          f"GPT-2-shaped cache {n * gpt2_per_token / GIB:7.2f} GiB")

# %% tags=["plumbing"]
lengths = np.unique(np.logspace(2, math.log10(2 ** 20), 80).astype(int))
k3_total = np.array([accounting.k3_cache_bytes(k3, int(n))["total"] for n in lengths]) / GIB
fig, ax = plt.subplots(figsize=(7.2, 4.4))
ax.plot(lengths, k3_total, color=viz.MECHANISM_COLORS["k3"], label="K3: KDA states + MLA latents")
ax.plot(lengths, lengths * k3_per_token / GIB, ":", color=viz.MECHANISM_COLORS["mla"], label="K3: MLA latents alone")
ax.plot(lengths, np.full(len(lengths), k3_fixed / GIB), "--", color=viz.MECHANISM_COLORS["kda"],
        label="K3: KDA states (+ conv tails), fixed")
ax.plot(lengths, lengths * k3_all_mla_per_token / GIB, color=viz.PALETTE["sky"], linewidth=1.2,
        label="K3 with all 93 layers MLA")
inside = lengths <= GPT2_SMALL.n_ctx
ax.plot(lengths[inside], lengths[inside] * gpt2_per_token / GIB, color=viz.MECHANISM_COLORS["gpt2"],
        label="GPT-2 small KV cache")
ax.plot(lengths[~inside], lengths[~inside] * gpt2_per_token / GIB, "--", color=viz.MECHANISM_COLORS["gpt2"],
        linewidth=1, label="GPT-2 small, beyond its 1024 context")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("context length N (tokens)")
ax.set_ylabel("decode memory per sequence (GiB)")
ax.set_title("Decode memory per sequence: fixed state + slow cache vs fast cache")
ax.legend(fontsize=7.5, loc="upper left")
plt.show()

# %% [markdown]
# The slopes are the lesson: K3, a model {glue:text}`ch10_ratio_exact` times larger, adds {glue:text}`ch10_k3_bytes_per_token` bytes
# per token, *less* than GPT-2 small's {glue:text}`ch10_gpt2_bytes_per_token`, because only 24 of its 93 layers
# keep a cache and that cache is a latent. It pays a fixed {glue:text}`ch10_kda_state_mib` MiB of KDA state up
# front ({glue:text}`ch10_fixed_mib` MiB with the convolution tails), which is why at short contexts the small
# GPT-2 needs less, and from about {glue:text}`ch10_break_even_gpt2` tokens on (where GPT-2 could not go) the
# giant needs less. Against a K3 whose 93 layers were all MLA, the hybrid wins from about
# {glue:text}`ch10_break_even_all_mla` tokens on.
#
# ### Checked on the small model
#
# The formulas are only useful if the real caches obey them. The trained small K3 decodes with a
# `K3Cache`: a state and conv tails per KDA layer, latents per MLA layer. Continuing from the cache must
# give the same logits as recomputing the whole sequence, and its size must be what `accounting` says.

# %%
small_k3.eval()
sequence = val_batch[0][:2, :40]
prefix = 24
with torch.no_grad():
    recomputed = small_k3.run(sequence).logits
    result = small_k3.run(sequence[:, :prefix])
    pieces, cache = [result.logits], result.cache
    for t in range(prefix, sequence.shape[1]):
        result = small_k3.run(sequence[:, t:t + 1], cache)
        pieces.append(result.logits)
        cache = result.cache
stepped = torch.cat(pieces, dim=1)
logit_gap = (stepped - recomputed).abs().max().item()
print(f"prompt of {prefix} tokens, then {sequence.shape[1] - prefix} single-token steps")
print(f"max |logits(cached) - logits(recomputed)| < 1e-4: {logit_gap < 1e-4}")
with_cache = small_k3.generate(sequence[:, :prefix], 16, temperature=0, use_cache=True)
without_cache = small_k3.generate(sequence[:, :prefix], 16, temperature=0, use_cache=False)
print(f"generate(): same 16 tokens with and without the cache: {torch.equal(with_cache, without_cache)}")

expected = accounting.k3_cache_bytes(k3_small_config, cache.num_tokens, batch_size=2, cache_dtype="fp32")
print(f"cache after {cache.num_tokens} tokens, batch 2 (float32): MLA {cache.nbytes('mla'):,d} B "
      f"(accounting {expected['mla_latents']:,d}), KDA {cache.nbytes('kda'):,d} B "
      f"(accounting {expected['kda_states'] + expected['conv_tails']:,d})")
longer = small_k3.run(sequence[:, :1], cache).cache
print(f"one more token: MLA +{longer.nbytes('mla') - cache.nbytes('mla')} B "
      f"(= 2 x {k3_small_config.num_mla_layers} layers x {k3_small_config.kv_lora_rank + k3_small_config.rope_dim} x 4 B), "
      f"KDA +{longer.nbytes('kda') - cache.nbytes('kda')} B")

# %% [markdown]
# The same check on the small GPT-2 shows the worklog's picture of a decode step: per layer it
# writes one new key and one new value (two vectors of width $D$) and then reads the whole cache of
# keys and values (two $N \times D$ matrices).

# %%
small_gpt2.eval()
gpt2_cache = small_gpt2.new_cache()
with torch.no_grad():
    _, gpt2_cache = small_gpt2(sequence[:, :prefix], gpt2_cache)
    before = gpt2_cache.nbytes()
    _, gpt2_cache = small_gpt2(sequence[:, prefix:prefix + 1], gpt2_cache)
grown = gpt2_cache.nbytes() - before
layers, width = gpt2_small_config.n_layer, gpt2_small_config.n_embd
print(f"one decode step, batch 2: cache grows by {grown:,d} B = 2 (k, v) x {layers} layers x {width} x 4 B x 2: "
      f"{grown == 2 * layers * width * 4 * 2}")
print(f"then each layer reads K and V of shape [{gpt2_cache.length}, {width}]: "
      f"{2 * gpt2_cache.length * width * 4 * 2:,d} B per layer for the batch")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. The claim ledger
#
# The three articles the course retells make many quantitative claims. Each one is checked below by a cell of
# this chapter or an earlier one, with one of four verdicts: **holds**, **holds with a nuance**,
# **does not hold**, or **not checkable here** (with the reason), or it stays **open** where the evidence this
# course holds cannot yet decide it. The ledger's "source" column names the
# articles that make a claim: [A] the 机器之心 (Synced) summary *From GPT-2 to Kimi K3: Seven Years of
# Architecture Upgrades That Go Far Beyond Parameter Count*, [B] a bilingual abstract of the worklog, [C] the
# worklog *From GPT-2 to Kimi K3, Explained* (Sources, at the end, give their details and sections). First
# the checks that earlier sections have not done yet.
#
# **Latent MoE "nearly halves FLOPs".** Per token and MoE layer, count multiply-adds (MACs) of the active
# experts with full-width experts (7168 → 3072 → 7168) and with latent ones (3584 → 3072 → 3584, plus
# the down and up projections). A FLOP count is twice the MAC count, so the ratios are the same in either
# unit:

# %% [markdown] tags=["notes"]
# The ledger: each claim, the cell that checks it, a verdict among four (or open). Do a few checks live (the MoE FLOPs,
# SiTU), then the trained bake-off for the two quality claims, then read the table as a whole.

# %%
def moe_macs_per_token(config):
    """Multiply-adds of one MoE layer for one token, by part."""
    d = config.hidden_size
    size = d if config.latent_size is None else config.latent_size
    return {"routed": config.top_k * 3 * size * config.expert_width,
            "latent projections": 0 if config.latent_size is None else 2 * d * config.latent_size,
            "shared": 3 * d * config.num_shared_experts * config.expert_width,
            "router": config.num_experts * d}


full_width = replace(k3, latent_size=None)
latent, wide = moe_macs_per_token(k3), moe_macs_per_token(full_width)
routed_ratio = (latent["routed"] + latent["latent projections"]) / wide["routed"]
layer_ratio = sum(latent.values()) / sum(wide.values())
model_ratio = active / accounting.k3_param_counts(full_width)["active"]
GMAC = 1e9
print(f"one MoE layer, one token: latent {sum(latent.values()) / GMAC:.2f} GMACs, "
      f"full-width {sum(wide.values()) / GMAC:.2f} GMACs (multiply-adds; x2 for FLOPs)")
print(f"routed experts (incl. down/up projections): {routed_ratio:.2f} of full-width experts (ratio of MACs)")
print(f"whole MoE layer (router, shared, routed)   : {layer_ratio:.2f} (ratio of MACs)")
print(f"whole model, active parameters per token   : {model_ratio:.2f} "
      f"({active / 1e9:.0f}B vs {accounting.k3_param_counts(full_width)['active'] / 1e9:.0f}B parameters; "
      "one MAC per active weight, so also the ratio of MACs)")

# %% [markdown]
# Read the three ratios from the top: only the routed experts come close to halving. The whole MoE layer saves
# less, because its shared experts and router keep their full width, and the whole model less again, because its
# attention layers do not change at all. "Nearly halves" is true of the routed experts, not of the model.

# %% [markdown]
# **AttnRes cost.** Every sub-layer (186) and the output read (1) mixes the stored sources. Per source and
# token that is an RMSNorm of the source as key (about $3d$ FLOPs: square, sum, scale), its score against
# the layer's query ($2d$: $d$ multiply-adds) and its share of the weighted sum ($2d$), so $7d$ FLOPs, with
# FLOPs $= 2\times$ multiply-adds as everywhere in this course (chapter 09 uses the same model). The
# rest of a token's forward pass costs about $2\times$ (active parameters) FLOPs: one multiply-add per
# active weight.

# %%
sublayers = 2 * k3.num_layers
sources_per_read = [1 + j // (2 * k3.attnres_block_size) + (1 if j % (2 * k3.attnres_block_size) else 0)
                    for j in range(sublayers + 1)]
flops_per_source = (3 + 2 + 2) * k3.hidden_size   # RMSNorm of the key + score + weighted sum
attnres_flops = flops_per_source * sum(sources_per_read)
print(f"per source and token: 7 x d = 7 x {k3.hidden_size} = {flops_per_source:,d} FLOPs")
print(f"AttnRes reads {sublayers + 1}, sources per read {min(sources_per_read)}..{max(sources_per_read)}, "
      f"{sum(sources_per_read):,d} sources in all: {attnres_flops / 1e6:.0f} MFLOPs per token "
      f"vs {2 * active / 1e9:.0f} GFLOPs per token for the rest: {attnres_flops / (2 * active):.4%}")
full_attnres_reads = sum(j + 1 for j in range(sublayers + 1))  # embedding + every earlier sub-layer output
print(f"full AttnRes (every sub-layer a source): up to {sublayers + 1} sources per read, "
      f"{full_attnres_reads / sum(sources_per_read):.1f}x the mixing FLOPs of blocks of {k3.attnres_block_size} "
      f"({flops_per_source * full_attnres_reads / 1e6:.0f} MFLOPs per token)")

# %% [markdown]
# So the blocks matter for memory and bandwidth (a few stored vectors per token instead of one per
# sub-layer), and even the full variant is cheap in FLOPs; a latency of about 2 % (the worklog, "Kimi K3") has
# to come from moving those vectors and from extra kernel launches, which only a real serving stack can measure.
#
# **Decode throughput from cache traffic.** A memory-bound decode step reads every cached byte of the
# sequence. For K3-shaped layers, compare the bytes read per step with 24 MLA + 69 KDA layers (latents
# read, states read and written) against 93 MLA layers:

# %%
def bytes_per_decode_step(n, hybrid=True):
    if not hybrid:
        return n * k3_all_mla_per_token
    return n * k3_per_token + 2 * k3_fixed  # the states are read and written back


for n in (8192, 2 ** 17, 2 ** 20):
    print(f"N = {n:>9,d}: all-MLA / hybrid bytes per step = "
          f"{bytes_per_decode_step(n, False) / bytes_per_decode_step(n):.2f}")
print(f"limit N -> infinity: {k3_all_mla_per_token / k3_per_token:.3f}")
glue("ch10_traffic_ratio_1m", f"{bytes_per_decode_step(2 ** 20, False) / bytes_per_decode_step(2 ** 20):.2f}",
     display=False)
glue("ch10_traffic_ratio_limit", f"{k3_all_mla_per_token / k3_per_token:.3f}", display=False)
print(f"KV cache saved by the hybrid (growing part): {1 - k3_per_token / k3_all_mla_per_token:.1%}; "
      f"Kimi Linear (7 of 27 layers MLA): {1 - 7 / 27:.1%}")
# Kimi Linear 48B-A3B: 27 layers, MLA at 4, 8, ..., 24 and 27, the other 20 KDA; 32 heads of 128.
KL_KDA_LAYERS, KL_MLA_LAYERS, KL_HEADS, KL_HEAD_DIM = 20, 7, 32, 128
kl_state = KL_KDA_LAYERS * KL_HEADS * KL_HEAD_DIM ** 2 * 4
kl_saved_per_token = KL_KDA_LAYERS * (k3.kv_lora_rank + k3.rope_dim) * 2   # each KDA layer caches no latent
kl_break_even = kl_state / kl_saved_per_token
k3_break_even = k3_fixed / (k3_all_mla_per_token - k3_per_token)
print(f"break-even with an all-MLA stack: Kimi Linear {KL_KDA_LAYERS} x {KL_HEADS} x {KL_HEAD_DIM}^2 x 4 B of states "
      f"/ ({KL_KDA_LAYERS} x 576 x 2 B saved per token) = {kl_break_even:,.0f} tokens (states only); "
      f"K3 {k3_break_even:,.0f} tokens (incl. conv tails)")
glue("ch10_kl_break_even", f"{kl_break_even:,.0f}", display=False)

# %% [markdown]
# At 8k tokens the hybrid moves *more* bytes per step than an all-MLA stack (its states dominate); at 1M it
# moves {glue:text}`ch10_traffic_ratio_1m` times fewer, and never more than {glue:text}`ch10_traffic_ratio_limit`
# times fewer. These are K3's shapes; Kimi Linear (7 of 27 layers MLA) holds less than its all-MLA twin beyond
# about {glue:text}`ch10_kl_break_even` tokens instead of K3's {glue:text}`ch10_break_even_all_mla`. Kimi
# Linear's measured 6.3x at 1M context (time per output token against MLA, arXiv:2510.26692) needs something
# besides bytes per sequence: the memory freed lets a GPU decode larger batches at once.

# %% [markdown]
# **The same question on a GPU, measured.** The benchmark times single-token decode on an H200 of two small
# models of one width and depth: a K3-shaped one (KDA and MLA layers in K3's mix) and a GPT-2-shaped one with
# a KV cache, both writing their caches in place (`python -m benchmarks.bench --sections model_decode`). It measures
# each step three ways: the wall time of eager PyTorch (what `generate` gets), the device time (every kernel's
# time, summed by the profiler: the GPU's work alone), and the replay of the step captured in a CUDA graph (the
# host out of the loop, as a serving engine would run it). The cell reads the committed run:

# %%
decode_file = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02c.json").read_text())
decode_run = decode_file["model_decode"]
layer_mix = ", ".join(f"{decode_run['k3_layers'].count(kind)} {kind.upper()}" for kind in ("kda", "mla"))
print(f"width {decode_run['width']}, depth {decode_run['depth']} (K3: {layer_mix}), batch {decode_run['batch']}, "
      f"{decode_run['dtype'].removeprefix('torch.')}; ms per step, K3 / GPT-2 as a tokens/s ratio")
print(f"{'context':>8} | {'eager: K3':>9} {'GPT-2':>6} {'ratio':>6} | {'device: K3':>10} {'GPT-2':>6} {'ratio':>6} | "
      f"{'graph: K3':>9} {'GPT-2':>6} {'ratio':>6} | {'GPT-2/K3 cache':>14}")
for row in decode_run["rows"]:
    print(f"{row['context']:>8,d} | {row['k3_ms_per_step']:>9.2f} {row['gpt2_ms_per_step']:>6.2f} "
          f"{row['k3_over_gpt2']:>5.2f}x | {row['k3_device_ms_per_step']:>10.2f} {row['gpt2_device_ms_per_step']:>6.2f} "
          f"{row['k3_over_gpt2_device']:>5.2f}x | {row['k3_graph_ms_per_step']:>9.2f} {row['gpt2_graph_ms_per_step']:>6.2f} "
          f"{row['k3_over_gpt2_graph']:>5.2f}x | {row['gpt2_over_k3_cache_bytes']:>13.1f}x")
decode_rows = decode_run["rows"]
first, last = decode_rows[0], decode_rows[-1]
gpt2_cache_growth = last["gpt2_cache_bytes_per_seq"] / first["gpt2_cache_bytes_per_seq"]
k3_cache_growth = last["k3_cache_bytes_per_seq"] / first["k3_cache_bytes_per_seq"]
gpt2_device_growth = last["gpt2_device_ms_per_step"] / first["gpt2_device_ms_per_step"]
k3_device_growth = last["k3_device_ms_per_step"] / first["k3_device_ms_per_step"]
# A step that only read its cache once, at 4 TB/s, for the whole batch:
gpt2_read_ms = decode_run["batch"] * last["gpt2_cache_bytes_per_seq"] / 4e12 * 1e3
host_share = min(row["k3_host_ms_per_step"] / row["k3_ms_per_step"] for row in decode_rows)
print(f"from {first['context'] // 1024}k to {last['context'] // 1024}k: GPT-2's cache grew {gpt2_cache_growth:.0f}x and its "
      f"device time {gpt2_device_growth:.1f}x (reading its cache once at 4 TB/s: {gpt2_read_ms:.1f} ms); K3's cache grew "
      f"{k3_cache_growth:.0f}x and its device time {k3_device_growth:.2f}x")
print(f"eager K3: issuing a step takes the host {host_share:.0%} of the step's time or more (the GPU waits: launch-bound)")
probe = decode_file["decode_probe_4096"]
k3_launches_per_step = sum(probe["k3_kernel_launches_3_steps"].values()) / 3   # profiled over 3 steps at 4k
print(f"kernel launches per K3 step (profiled, 4k): {k3_launches_per_step:,.0f}")
ops_per_step = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02b.json").read_text())["model_decode_diagnosis"]["ops_per_step"]
print(f"PyTorch operations per decode step: K3 {ops_per_step['k3']:,d}, GPT-2 {ops_per_step['gpt2']:,d}")
glue("ch10_gpu_short_ctx", f"{first['context'] // 1024}k", display=False)
glue("ch10_gpu_long_ctx", f"{last['context'] // 1024}k", display=False)
glue("ch10_gpu_mid_ctx", f"{decode_rows[1]['context'] // 1024}k", display=False)
glue("ch10_gpu_eager_ratio_short", f"{first['k3_over_gpt2']:.2f}", display=False)
glue("ch10_gpu_eager_ratio_long", f"{last['k3_over_gpt2']:.2f}", display=False)
glue("ch10_gpu_device_ratio_short", f"{first['k3_over_gpt2_device']:.2f}", display=False)
glue("ch10_gpu_device_ratio_mid", f"{decode_rows[1]['k3_over_gpt2_device']:.2f}", display=False)
glue("ch10_gpu_device_ratio_long", f"{last['k3_over_gpt2_device']:.2f}", display=False)
glue("ch10_gpu_graph_ratio_long", f"{last['k3_over_gpt2_graph']:.2f}", display=False)
glue("ch10_gpu_host_share", f"{host_share:.0%}", display=False)
glue("ch10_gpu_cache_growth", f"{gpt2_cache_growth:.0f}", display=False)
glue("ch10_gpu_gpt2_device_growth", f"{gpt2_device_growth:.1f}", display=False)
glue("ch10_gpu_k3_device_growth", f"{k3_device_growth:.2f}", display=False)
glue("ch10_gpu_k3_device_short", f"{first['k3_device_ms_per_step']:.1f}", display=False)
glue("ch10_gpu_gpt2_device_short", f"{first['gpt2_device_ms_per_step']:.2f}", display=False)
glue("ch10_gpu_gpt2_device_long", f"{last['gpt2_device_ms_per_step']:.1f}", display=False)
glue("ch10_gpu_read_ms_long", f"{gpt2_read_ms:.1f}", display=False)
glue("ch10_k3_ops_per_step", f"{ops_per_step['k3']:,d}", display=False)
glue("ch10_gpt2_ops_per_step", f"{ops_per_step['gpt2']:,d}", display=False)
glue("ch10_k3_launches", f"{k3_launches_per_step:,.0f}", display=False)
glue("ch10_mla_align", str(KEY_ALIGN_CUDA), display=False)
glue("ch10_cudnn_ms", f"{probe['gpt2_ms_per_step_sdpa_default_flags']:.1f}", display=False)
glue("ch10_no_cudnn_ms", f"{probe['gpt2_ms_per_step_cudnn_sdpa_off']:.1f}", display=False)
expect("eager K3 is launch-bound: the host's issuing time is at least 95 % of every step", host_share > 0.95)
expect("GPT-2's device time grows with its cache (more than 8x for 32x), K3's far less (under 2x)",
       gpt2_device_growth > 8 and gpt2_cache_growth >= 32 and k3_device_growth < 2)
expect("on device time K3 is slower than GPT-2 at the shortest context and faster at the longest",
       first["k3_over_gpt2_device"] < 1 < last["k3_over_gpt2_device"])
expect("the graph replays agree with the device times (within 25 %)",
       all(0.75 < row[f"{m}_graph_ms_per_step"] / row[f"{m}_device_ms_per_step"] < 1.25
           for row in decode_rows for m in ("k3", "gpt2")))

# %% tags=["plumbing"]
contexts = np.array([row["context"] for row in decode_rows])
fig, ax = plt.subplots(figsize=(7.2, 4.4))
for model, label in (("k3", "K3-shaped (6 KDA + 2 MLA)"), ("gpt2", "GPT-2-shaped, KV cache")):
    color = viz.MECHANISM_COLORS[model]
    ax.plot(contexts, [row[f"{model}_device_ms_per_step"] for row in decode_rows], "o-", color=color,
            label=f"{label}: device time")
    ax.plot(contexts, [row[f"{model}_graph_ms_per_step"] for row in decode_rows], "s--", color=color, linewidth=1,
            label=f"{label}: CUDA-graph replay")
ax.plot(contexts, decode_run["batch"] * contexts * first["gpt2_cache_bytes_per_seq"] / first["context"] / 4e12 * 1e3,
        ":", color=viz.PALETTE["black"], linewidth=1, label="reading GPT-2's cache once at 4 TB/s")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(contexts, [f"{n // 1024}k" for n in contexts])
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("GPU time per decode step (ms), batch 8")
ax.set_title("Measured on an H200: GPT-2's step grows with its cache, K3's far less")
ax.legend(fontsize=7.5, loc="upper left")
plt.show()

# %% [markdown]
# Three readings, three answers. **Eager PyTorch** makes K3 the slower model: {glue:text}`ch10_gpu_eager_ratio_short`×
# GPT-2's tokens/s at {glue:text}`ch10_gpu_short_ctx` and {glue:text}`ch10_gpu_eager_ratio_long`× at
# {glue:text}`ch10_gpu_long_ctx`. That measures Python, not the architecture: one K3 step dispatches
# {glue:text}`ch10_k3_ops_per_step` PyTorch operations (GPT-2 {glue:text}`ch10_gpt2_ops_per_step`), and issuing them
# takes {glue:text}`ch10_gpu_host_share` of its step time or more: the GPU waits for the host. **The device time** removes the host. GPT-2's
# grows with its cache: {glue:text}`ch10_gpu_cache_growth`× the cache, {glue:text}`ch10_gpu_gpt2_device_growth`× the
# time, and at {glue:text}`ch10_gpu_long_ctx` its {glue:text}`ch10_gpu_gpt2_device_long` ms are close to reading the
# cache once ({glue:text}`ch10_gpu_read_ms_long` ms at 4 TB/s). K3's grows {glue:text}`ch10_gpu_k3_device_growth`×.
# That is the mechanism behind "faster decode", measured. But the ratio starts below 1:
# {glue:text}`ch10_gpu_device_ratio_short`× at {glue:text}`ch10_gpu_short_ctx`, {glue:text}`ch10_gpu_device_ratio_mid`×
# at {glue:text}`ch10_gpu_mid_ctx`, {glue:text}`ch10_gpu_device_ratio_long`× at {glue:text}`ch10_gpu_long_ctx`
# (graph replay: {glue:text}`ch10_gpu_graph_ratio_long`×). K3's step has a floor of about
# {glue:text}`ch10_gpu_k3_device_short` ms: {glue:text}`ch10_k3_launches` kernel launches per step (profiled), most of them small
# (the KDA layers' gates, norms and convolutions, the MoE's experts, AttnRes), each costing microseconds, where
# GPT-2's short-context step costs
# {glue:text}`ch10_gpu_gpt2_device_short` ms. Production kernels fuse those away; ours do not.
#
# So the data support the articles' direction and not their number, at these sizes. "Up to 6×" is Kimi Linear's
# measurement at 1M tokens against an all-MLA model (arXiv:2510.26692); here, against a full KV cache at up to
# {glue:text}`ch10_gpu_long_ctx`, the hybrid is nearly level at {glue:text}`ch10_gpu_mid_ctx` and
# {glue:text}`ch10_gpu_device_ratio_long`× faster at {glue:text}`ch10_gpu_long_ctx`. Two traps in measuring this are worth
# knowing when you read any such benchmark. GPT-2's attention at first went through SDPA's cuDNN backend,
# which builds a new plan for every new key length: in a probe of GPT-2 decoding at 4k tokens (stored beside the
# table's file), {glue:text}`ch10_cudnn_ms` ms per step instead of {glue:text}`ch10_no_cudnn_ms` without it. MLA's two
# products got slow cuBLAS kernels at the unaligned cache lengths of decoding ({glue:text}`ch10_gpu_long_ctx` plus
# a few tokens), some without tensor cores, until the cache was read padded to a multiple of
# {glue:text}`ch10_mla_align` rows (`k3lite.layers.mla.KEY_ALIGN_CUDA`). A benchmark has to be read kernel by
# kernel before its ratio means anything.

# %% [markdown]
# **The O(N²) framing.** With GPT-2 small's FLOP count (`accounting.gpt2_forward_flops`), the cost of
# the step that produces token $N+1$ with a KV cache, and without one (recompute everything), when $N$
# doubles. The same cell checks the worklog's cost of chunked linear attention, $4Ld^2 + 4LCd$ FLOPs per head
# (the $2Ld^2 + 2LCd$ of chapter 04 in multiply-adds): at $C = L$ its intra-chunk part is exactly full
# attention's cost, and at $C = 1$ it shrinks to the $1 \times 1$ scores, $4Ld$.

# %%
for n in (256, 512):
    cached = [accounting.gpt2_forward_flops(GPT2_SMALL, 1, m) for m in (n, 2 * n - 1)]
    recomputed = [accounting.gpt2_forward_flops(GPT2_SMALL, m + 1) for m in (n, 2 * n - 1)]
    print(f"N {n:>4d} -> {2 * n - 1:>4d}: with cache {cached[0] / 1e9:.3f} -> {cached[1] / 1e9:.3f} GFLOPs "
          f"(x{cached[1] / cached[0]:.2f}); without {recomputed[0] / 1e9:.0f} -> {recomputed[1] / 1e9:.0f} GFLOPs "
          f"(x{recomputed[1] / recomputed[0]:.2f})")
attention_part = [4 * GPT2_SMALL.n_embd * m for m in (512, 1023)]  # scores 2dN + weighted sum 2dN FLOPs per layer
print(f"attention over the cache alone (4dN FLOPs per layer): {attention_part[0]:,d} -> {attention_part[1]:,d} FLOPs, "
      f"x{attention_part[1] / attention_part[0]:.2f} when N doubles (linear); summed over a whole sequence: quadratic")
L_CHUNK, D_HEAD = 1024, 64
state_only = flops.linear_attention_chunked(L_CHUNK, D_HEAD, 1)
linear_split = flops.linear_attention_chunked(L_CHUNK, D_HEAD, L_CHUNK)
print(f"chunked linear attention, L = {L_CHUNK}, d = {D_HEAD}, FLOPs per head (2 per multiply-add):")
print(f"  state part {linear_split.state:,d} = 4Ld^2: {linear_split.state == 4 * L_CHUNK * D_HEAD ** 2}")
print(f"  C = L: intra part {linear_split.intra:,d} = 4LCd: {linear_split.intra == 4 * L_CHUNK * L_CHUNK * D_HEAD}; "
      f"= full attention {flops.full_attention(L_CHUNK, D_HEAD):,d}: "
      f"{linear_split.intra == flops.full_attention(L_CHUNK, D_HEAD)}")
print(f"  C = 1: intra part {state_only.intra:,d} = 4Ld (the 1 x 1 scores): {state_only.intra == 4 * L_CHUNK * D_HEAD}")

# %% [markdown]
# **"Multiplied by $\alpha_x\alpha_{x+1}\cdots\alpha_{x+t}$."** The worklog says that a value written at token $x$
# and read $t$ steps later has been scaled by this product of gates. Write token $x$ with an orthogonal key
# into a gated delta-rule state, read it back with the same key $t$ steps later, and compare the factor
# with the two candidate products:

# %%
T_DECAY, WRITE_AT = 6, 1
keys = torch.eye(8)[:T_DECAY]                                   # orthogonal keys: no delta interference
queries = keys[WRITE_AT].expand(T_DECAY, 8)                     # every step reads token x's key
values = torch.randn(T_DECAY, 8, generator=torch.Generator().manual_seed(3))
alphas = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
out, _ = gated_delta_rule.recurrent(queries[None, :, None], keys[None, :, None], values[None, :, None],
                                    alphas.log()[None, :, None], torch.ones(1, T_DECAY, 1), scale=1.0)
for t in (1, 2, 3):
    factor = (out[0, WRITE_AT + t, 0] / values[WRITE_AT]).mean().item()
    after = alphas[WRITE_AT + 1:WRITE_AT + t + 1].prod().item()
    including = alphas[WRITE_AT:WRITE_AT + t + 1].prod().item()
    print(f"t = {t}: read-back factor {factor:.4f}; prod alpha_(x+1..x+t) = {after:.4f}, "
          f"prod alpha_(x..x+t) = {including:.4f}; |factor - prod alpha_(x+1..x+t)| < 1e-5: {abs(factor - after) < 1e-5}")

# %% [markdown]
# The read-back factor is the product from $\alpha_{x+1}$ to $\alpha_{x+t}$, $t$ factors, not the worklog's $t + 1$
# starting at $\alpha_x$: the gate of step $x$ acts on the state *before* $x$'s own write is added (chapter 05,
# section 5).

# %% [markdown]
# **SiTU's formula.** The summary [A] defines SiTU as $\beta \tanh(x/\beta)\,\sigma(x)$. Compare with
# `k3lite.ops.situ` (chapter 08), check that a large $\beta$ gives back SiLU, and that K3's gated form
# with $\beta_1 = 4, \beta_2 = 25$ stays within $\beta_1\beta_2$ even for huge inputs:

# %%
x = torch.linspace(-60, 60, 2001)
by_formula = 4.0 * torch.tanh(x / 4.0) * torch.sigmoid(x)
situ_matches = torch.allclose(situ.situ(x, 4.0), by_formula, atol=1e-6)
silu_limit = (situ.situ(x, 1e6) - F.silu(x)).abs().max().item()
huge = 1e4 * torch.randn(4096, generator=torch.Generator().manual_seed(4))
glu_bound = situ.situ_glu(huge, huge.flip(0), beta1=4.0, beta2=25.0, backend="torch").abs().max().item()
print(f"k3lite SiTU equals beta tanh(x/beta) sigmoid(x) (beta = 4): {situ_matches}")
print(f"beta = 1e6: max |SiTU - SiLU| on [-60, 60] below 1e-3: {silu_limit < 1e-3}")
print(f"gated SiTU on inputs of size ~1e4: max |h| = {glu_bound:.1f} <= beta1 x beta2 = 100: {glu_bound <= 100}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Trained: the hybrid, pure KDA and full attention (the bake-off)
#
# Two claims need trained models: that Kimi Linear "beats full attention in controlled comparisons" (the
# worklog's section "KDA/Kimi Linear", after the Kimi Linear paper), and that
# the hybrid's MLA layers recover what pure KDA loses. The course's bake-off (`k3lite.bakeoff`; small models
# that differ only in their token mixer, trained on a GPU through k3lite's Triton kernels, every run with its
# provenance in `figures/bakeoff.json`) compares softmax attention (SDPA), pure KDA and the K3 hybrid
# (3 KDA : 1 MLA) on recall tasks. The rule for "better", as in every chapter: **A beats B when the difference of
# their mean accuracies is larger than two standard errors of that difference** (`k3lite.bakeoff.stats.beats`); a
# cell with one seed gets no call. These are small models and short runs, far from the scale of the
# claims; what they can test is whether the claims show up at toy scale. The store holds two generations of runs:
# cells trained with the layers as published (read first), and an earlier grid whose KDA and hybrid gates began
# saturated (read after, for what it can still say). The answer of the first, in short: softmax attention beats
# both pure KDA and the hybrid on MQAR with 64 pairs; on the other three published-layer cells all three learn on
# (nearly) every seed; and the hybrid is never separated from pure KDA.

# %% tags=["plumbing"]
from k3lite.bakeoff import beats, store, summarize
from k3lite.bakeoff.plots import (
    LABELS, cell_metrics, cell_summary, final_cells, plot_cell,
    print_cell_table, rule_verdict, run_setup,
)
from functools import partial

BAKEOFF = viz.FIGURES_DIR / "bakeoff.json"
bakeoff_runs = store.load(BAKEOFF)                # every stored run, by key

# %% [markdown]
# The layers as published: Gated DeltaNet's gate $g = -A\,\mathrm{softplus}(W x + b_{dt})$ with its
# initialisation (Yang, Kautz and Hatamizadeh 2024, [arXiv:2412.06464](https://arxiv.org/abs/2412.06464)), KDA's
# per-channel form of Kimi Linear ([arXiv:2510.26692](https://arxiv.org/abs/2510.26692)), and K3's bounded gate
# starting from $A_{\log} = 0$ (chapter 06, section 6). The cells trained with them (chapters 05 and 06, section 7)
# are MQAR with 16, 32 and 64 pairs, rebinding, the context switch and the two time scales, all at width 64, with a
# budget long enough for softmax attention and DeltaNet to learn MQAR-16 on every seed. Each mixer's rate is chosen
# from a sweep (MQAR-16's for every MQAR cell, its own for each other task), each cell has several seeds, and success (accuracy at least 0.9) is compared by
# Fisher's exact test.

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import cell_success
from k3lite.bakeoff.stats import success_verdict
choices = store.load_choices(BAKEOFF)
# A final cell is the seeds at the rate its family's sweep chose (every MQAR task takes MQAR-16's); a mixer whose
# sweep is unfinished has none yet.
published_cells = final_cells(bakeoff_runs, choices, layers="published")


PUBLISHED_TASKS = ("mqar16", "mqar32", "mqar64", "rebind", "switch", "twoscale")


def published_verdict(a, b, task, d=64):
    """Fisher's exact test on success counts of ``a`` against ``b`` in one published-layer cell, in words."""
    missing = [LABELS[m] for m in (a, b) if (task, d, m) not in published_cells]
    if missing:
        return f"no call, {' and '.join(missing)} not yet trained to a final cell"
    a_runs, b_runs = ([r["metric"] for r in published_cells[task, d, m]] for m in (a, b))
    return success_verdict(a_runs, b_runs, LABELS[a], LABELS[b])


def published_note(a, b, d=64):
    """What the published layers' cells say about ``a`` against ``b``, cell by cell, in words."""
    return "as published: " + "; ".join(f"{task}, d {d}, {published_verdict(a, b, task, d)}"
                                        for task in PUBLISHED_TASKS)


for task in PUBLISHED_TASKS:
    for mixer in ("softmax", "kda", "k3_hybrid"):
        cell = published_cells.get((task, 64, mixer))
        print(f"{task}, width 64, as published: {LABELS[mixer]:<26} "
              + (f"{cell_success(published_cells, task, mixer)} succeed" if cell else "no final cell yet"))
published_kda_softmax, published_hybrid_kda = published_note("kda", "softmax"), published_note("k3_hybrid", "kda")
softmax_wins = {task: [m for m in ("kda", "k3_hybrid")
                       if published_verdict("softmax", m, task).startswith(f"{LABELS['softmax']} beats")]
                for task in PUBLISHED_TASKS}
glue("ch10_published_kda_softmax", published_kda_softmax, display=False)
glue("ch10_published_hybrid_kda", published_hybrid_kda, display=False)
glue("ch10_published_softmax_hybrid_hard", published_verdict("softmax", "k3_hybrid", "mqar64"), display=False)
hard_setup = published_cells["mqar64", 64, "softmax"][0]
glue("ch10_published_setup", f"width {hard_setup['d_model']}, {hard_setup['num_layers']} layers, "
     f"{hard_setup['steps']:,} steps", display=False)
print(published_kda_softmax)
print(published_hybrid_kda)
for task in ("mqar32", "rebind", "switch", "twoscale"):
    glue(f"ch10_published_{task}", ", ".join(f"{name} {cell_summary(published_cells, task, m)} "
                                            f"({cell_success(published_cells, task, m)})"
                                            for name, m in (("softmax attention", "softmax"), ("pure KDA", "kda"),
                                                            ("the hybrid", "k3_hybrid"))), display=False)
glue("ch10_published_twoscale_means", rule_verdict(published_cells, "twoscale", "kda", "k3_hybrid"), display=False)
for task, digits in (("switch", 4), ("twoscale", 3)):
    gap = (summarize(cell_metrics(published_cells, task, "softmax")).mean
           - summarize(cell_metrics(published_cells, task, "k3_hybrid")).mean)
    glue(f"ch10_published_gap_{task}", f"{gap:.{digits}f}", display=False)
    print(f"{task}: softmax attention's mean accuracy minus the hybrid's: {gap:.{digits}f}")
expect("on MQAR-16, MQAR-32 and rebinding the means rule puts softmax attention ahead of pure KDA and the hybrid",
       all(rule_verdict(published_cells, task, "softmax", m).startswith(LABELS["softmax"])
           for m in ("kda", "k3_hybrid") for task in ("mqar16", "mqar32", "rebind")))
expect("on the switch and two time scales the means rule puts softmax attention ahead of the hybrid on both",
       all(rule_verdict(published_cells, task, "softmax", "k3_hybrid").startswith(LABELS["softmax"])
           for task in ("switch", "twoscale")))
expect("every published cell read here has at least 5 seeds",
       min(len(published_cells[task, 64, m]) for task in PUBLISHED_TASKS for m in ("softmax", "kda", "k3_hybrid")) >= 5)
expect("in every published cell but MQAR-64 success counts call no pair of the three",
       all(published_verdict(a, b, task).startswith("no call")
           for a, b in (("kda", "softmax"), ("k3_hybrid", "kda"), ("softmax", "k3_hybrid"))
           for task in PUBLISHED_TASKS if task != "mqar64"))
expect("on MQAR-32 softmax attention learns on every seed, pure KDA and the hybrid on fewer",
       all(len(published_cells["mqar32", 64, m]) > sum(r["metric"] >= 0.9 for r in published_cells["mqar32", 64, m])
           for m in ("kda", "k3_hybrid"))
       and all(r["metric"] >= 0.9 for r in published_cells["mqar32", 64, "softmax"]))
expect("on rebinding all three learn on every seed",
       all(r["metric"] >= 0.9 for m in ("softmax", "kda", "k3_hybrid") for r in published_cells["rebind", 64, m]))
expect("in every published cell neither rule separates the hybrid from pure KDA",
       all(rule_verdict(published_cells, task, "kda", "k3_hybrid").startswith("no call")
           and published_verdict("k3_hybrid", "kda", task).startswith("no call") for task in PUBLISHED_TASKS))
expect("on two time scales the means rule cannot separate the hybrid from pure KDA either",
       rule_verdict(published_cells, "twoscale", "kda", "k3_hybrid").startswith("no call"))
expect("on MQAR-64 softmax attention beats both pure KDA and the hybrid", softmax_wins["mqar64"] == ["kda", "k3_hybrid"])
expect("on MQAR-64 the hybrid is no call against pure KDA",
       published_verdict("k3_hybrid", "kda", "mqar64").startswith("no call"))
expect("neither KDA nor the hybrid beats softmax attention in any published cell",
       not any(published_verdict(m, "softmax", task).startswith(f"{LABELS[m]} beats")
               for m in ("kda", "k3_hybrid") for task in PUBLISHED_TASKS))

# %% [markdown]
# On MQAR-16 pure KDA, the hybrid and softmax attention all learn the task on every seed, so success counts cannot
# separate them (the means rule puts softmax attention ahead). On MQAR-64
# softmax attention learns on every seed and both recurrent designs mostly fall short, the hybrid included (*{glue:text}`ch10_published_softmax_hybrid_hard`*), while the hybrid and pure KDA stay too close to
# call. In full, pure KDA against softmax attention: *{glue:text}`ch10_published_kda_softmax`*; the hybrid against
# pure KDA: *{glue:text}`ch10_published_hybrid_kda`*.
#
# Read this for what it is: {glue:text}`ch10_published_setup`, and a learning rate chosen on the easier MQAR-16.
# The hybrid's MLA layer keeps every pair, yet it does not carry the model the way an all-softmax stack does here.
# Halfway, with 32 pairs, the fall has begun: {glue:text}`ch10_published_mqar32`. Softmax attention still learns on
# every seed; the other two fall short on some, too few seeds apart for the success test to call, while the means
# rule puts softmax attention ahead of both.
#
# On rebinding, chapter 03's test of overwriting, all three learn on every seed: {glue:text}`ch10_published_rebind`.
# The means rule puts softmax attention ahead of both recurrent designs; success counts cannot separate them.
#
# On the two tasks built for forgetting all three learn. On the context switch: {glue:text}`ch10_published_switch`.
# On the two time scales: {glue:text}`ch10_published_twoscale`. Success counts separate no pair. The means rule
# puts softmax attention ahead of the hybrid on both tasks, though by little: by
# {glue:text}`ch10_published_gap_switch` in accuracy on the switch (both print as 1.000) and by
# {glue:text}`ch10_published_gap_twoscale` on the two time scales. On the two time scales it cannot separate the
# hybrid from pure KDA: *{glue:text}`ch10_published_twoscale_means`*. So at this size the one MLA layer in four recovers nothing
# measurable that pure KDA loses: with a working gate, pure KDA loses little here to begin with. What the hybrid is
# built for, long and busy contexts at scale, is far from these cells.

# %% tags=["plumbing"]
fig, axes = plt.subplots(2, 1, figsize=(7.2, 8.0))          # stacked: the site's column is 7.5 in wide
for ax, task, title in zip(axes, ("switch", "twoscale"), ("Context switch", "Two time scales")):
    plot_cell(task, d_model=64, path=BAKEOFF, layers="published", ax=ax, mixers=("softmax", "kda", "k3_hybrid"))
    ax.set_title(f"{title}, layers as published (mean ± std)", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# Bars are the mean over seeds, dots the seeds: on both tasks built for forgetting the three designs sit near 1,
# and pure KDA's one seed short of 0.9 on the two time scales is the widest spread.

# %% [markdown] slideshow={"slide_type": "subslide"}
# #### The earlier grid, and what it can still say
#
# The earlier grid covers more: MQAR with 128 pairs, width 128 and the language model, with half the
# budget. Its gated columns need a caveat, checked right after its table.

# %% tags=["plumbing"]
bakeoff_cells = final_cells(bakeoff_runs, layers="earlier")  # the earlier grid: (task, d, mixer) -> runs
BAKEOFF_TASKS = ("rebind", "switch", "mqar128", "twoscale")


accuracies = partial(cell_metrics, bakeoff_cells)   # (task, mixer, d_model=64) -> the stored seeds' accuracies
verdict = partial(rule_verdict, bakeoff_cells)      # (task, a, b, d_model=64) -> the rule's call, in words
shown = partial(cell_summary, bakeoff_cells)        # (task, mixer, d_model=64) -> "mean ± std" as the prose quotes it


setup = bakeoff_cells["rebind", 64, "k3_hybrid"][0]
print(run_setup(setup))
print_cell_table(bakeoff_cells, BAKEOFF_TASKS, ("softmax", "kda", "k3_hybrid"))
for task in BAKEOFF_TASKS:
    for mixer in ("softmax", "kda", "k3_hybrid"):
        glue(f"ch10_{task}_{mixer}", cell_summary(bakeoff_cells, task, mixer), display=False)
for task in BAKEOFF_TASKS:
    print(f"{task}: {verdict(task, 'k3_hybrid', 'softmax')};  {verdict(task, 'kda', 'softmax')};  "
          f"{verdict(task, 'kda', 'k3_hybrid')}")
# Best or tied: by the rule, no stored mixer beats softmax attention on any task at any size (the direction of
# each task's metric honoured: bits/byte are better lower).
def beats_softmax(task, d, runs):
    softmax_runs = bakeoff_cells.get((task, d, "softmax"), [])
    if min(len(runs), len(softmax_runs)) < 2:
        return False
    return beats([r["metric"] for r in runs], [r["metric"] for r in softmax_runs],
                 higher_is_better=runs[0].get("higher_is_better", True))


softmax_best_or_tied = not any(beats_softmax(task, d, runs) for (task, d, mixer), runs in bakeoff_cells.items())
cells_compared = sum((task, d, "softmax") in bakeoff_cells and mixer != "softmax" for (task, d, mixer) in bakeoff_cells)
glue("ch10_cells_compared", str(cells_compared), display=False)
print(f"softmax attention best or tied on every stored (task, width), {cells_compared} cells: {softmax_best_or_tied}")
bakeoff_seeds = min(len(accuracies(t, m)) for t in BAKEOFF_TASKS for m in ("softmax", "kda", "k3_hybrid"))
glue("ch10_bakeoff_seeds", str(bakeoff_seeds), display=False)
hybrid_vs_kda = {task: verdict(task, "kda", "k3_hybrid") for task in BAKEOFF_TASKS}
for task, said in hybrid_vs_kda.items():
    glue(f"ch10_hybrid_vs_kda_{task}", said, display=False)
softmax_vs_kda_rebind = verdict("rebind", "kda", "softmax")
softmax_vs_hybrid_rebind = verdict("rebind", "k3_hybrid", "softmax")
# Every (task, width) where both were trained: the synthetic tasks at d 64, MQAR at d 128 and the language model.
hybrid_vs_kda_all = {(task, d): verdict(task, "kda", "k3_hybrid", d)
                     for (task, d, mixer) in sorted(bakeoff_cells) if mixer == "kda" and (task, d, "k3_hybrid") in bakeoff_cells}
glue("ch10_hybrid_kda_cells", str(len(hybrid_vs_kda_all)), display=False)
hybrid_wins = [f"{task} d{d}" for (task, d), said in hybrid_vs_kda_all.items() if said.startswith(LABELS["k3_hybrid"])]
kda_wins = [f"{task} d{d}" for (task, d), said in hybrid_vs_kda_all.items() if said.startswith(LABELS["kda"])]
print(f"the hybrid beats pure KDA on: {hybrid_wins or 'no task'}; pure KDA beats the hybrid on: {kda_wins or 'no task'}")
for mixer in ("kda", "k3_hybrid"):
    scores = accuracies("twoscale", mixer)
    glue(f"ch10_twoscale_{'hybrid' if mixer == 'k3_hybrid' else mixer}_learned",
         f"{sum(a > 0.5 for a in scores)} of {len(scores)}", display=False)
expect("every cell quoted here has at least 3 seeds", bakeoff_seeds >= 3)
expect("softmax attention is best or tied on every stored (task, width)", softmax_best_or_tied)
expect("in the stored runs the hybrid beats pure KDA on two time scales and on no other task; KDA never beats it",
       hybrid_wins == ["twoscale d64"] and not kda_wins)

# %% [markdown]
# **Before trusting the table above: did the stored gates gate?** Each stored run of a mixer with a decay gate
# records, per gated layer, the mean retention $e^{g}$ it ended with after training:

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import print_trained_retention, saturated_recipe_retention

retention = print_trained_retention(bakeoff_runs, "ch10", glue)
GATED_MIXERS = {mixer for mixer, _ in retention}   # the stored mixers with a decay gate
# The stored runs' gate at x = 0: exp(-5 sigmoid(A dt_bias)), A in U(1, 16), dt_bias = softplus^-1(dt).
stored_init_retention = saturated_recipe_retention()
print(f"stored runs' gate at initialisation (x = 0): median retention {stored_init_retention.median().item():.4f}")
glue("ch10_stored_init_median_retention", f"{stored_init_retention.median().item():.4f}", display=False)
print(f"stored mixers with a decay gate: {', '.join(LABELS[m] for m in sorted(GATED_MIXERS))}")
expect("the stored runs' gate began saturated: median retention at initialisation above 0.999",
       stored_init_retention.median().item() > 0.999)

# %% [markdown]
# **Caveat: the stored KDA, hybrid and Gated DeltaNet runs were trained without much of their decay.** Their stored
# runs used K3's bounded gate $g = -5\,\sigma(A\,(W x + b_{dt}))$ with Mamba's initialisation $A \in [1, 16]$, an
# initialisation that does not match the published layers: the gate began saturated (median retention
# {glue:text}`ch10_stored_init_median_retention` per token at initialisation) and passed almost no gradient. After
# training, pure KDA's layers at width 64 keep a median mean retention of {glue:text}`ch10_retention_kda_d64_median`
# (smallest {glue:text}`ch10_retention_kda_d64_min`, {glue:text}`ch10_retention_kda_d64_runs` runs), the hybrid's
# KDA layers {glue:text}`ch10_retention_k3_hybrid_d64_median` (smallest {glue:text}`ch10_retention_k3_hybrid_d64_min`),
# and Gated DeltaNet's {glue:text}`ch10_retention_gated_delta_rule_d64_median` (smallest
# {glue:text}`ch10_retention_gated_delta_rule_d64_min` over {glue:text}`ch10_retention_gated_delta_rule_d64_runs`
# runs: its gate stayed effectively unused). So Gated DeltaNet's stored runs measure its layer without the decay, and
# the KDA and hybrid columns measure layers whose decay began saturated and moved only a little in training.
# Where the published-layer cells above exist, they replace these; every other comparison below that involves
# these columns describes the stored runs only.

# %% [markdown]
# What the earlier runs add (the KDA and hybrid columns with the saturated gate of the caveat above):
#
# * **Full attention is best or tied on every task in the stored runs** ({glue:text}`ch10_bakeoff_seeds` seeds or more per cell
#   above; by the rule, no mixer beats it in any of the {glue:text}`ch10_cells_compared` stored comparisons, MQAR at
#   two widths and the language model included).
#   On every task softmax attention is at or near 1 and no mixer's mean is above it. Since KDA and the hybrid
#   trained here with gates that began saturated, these runs neither support nor refute "beats full attention"; the
#   published-layer cells above are the toy-scale answer: in none does KDA or the hybrid beat softmax attention,
#   and on MQAR-64 softmax attention wins outright. Nothing here can speak to it at scale, where the published comparisons (Kimi Linear, arXiv:2510.26692) were made with far
#   larger models, longer training and long contexts.
# * **Hybrid against pure KDA**, in the stored runs: on the two-timescale task the hybrid reached
#   {glue:text}`ch10_twoscale_k3_hybrid` and pure KDA {glue:text}`ch10_twoscale_kda`:
#   *{glue:text}`ch10_hybrid_vs_kda_twoscale`*; the hybrid passed 0.5 on {glue:text}`ch10_twoscale_hybrid_learned`
#   seeds, pure KDA on {glue:text}`ch10_twoscale_kda_learned`. On rebinding
#   (*{glue:text}`ch10_hybrid_vs_kda_rebind`*), MQAR with 128 pairs (*{glue:text}`ch10_hybrid_vs_kda_mqar128`*) and the
#   switch task (*{glue:text}`ch10_hybrid_vs_kda_switch`*) the two were not separated, nor in any of the remaining
#   (task, width) cells of the {glue:text}`ch10_hybrid_kda_cells` where both were trained (MQAR with 16 to 128 pairs at
#   widths 64 and 128, the language model below). That one win came from runs whose KDA layers, in both models,
#   began with a saturated decay, on half the budget. Retrained as published, with gates in use (chapter 06) and twice the
#   steps, pure KDA learns the two time scales nearly as often as the hybrid and the win is gone (read above); the
#   runs do not say which of the two changes mattered.
# * **A language model that memorised its corpus.** The first LM runs (T = 2048, a code planted early and asked for
#   late) trained on a {glue:text}`ch10_small_corpus_mb` MB corpus, seeing its training split about
#   {glue:text}`ch10_small_corpus_repeats` times, and the models memorised it (cell below). The task now draws on the
#   whole standard library; its results follow.

# %% tags=["plumbing"]
withdrawn = list(store.load(viz.FIGURES_DIR / "bakeoff_lm_small_corpus.json").values())
small_corpus_bytes = len(data.corpus_text().encode("utf-8"))
bytes_trained = withdrawn[0]["steps"] * withdrawn[0]["batch_size"] * withdrawn[0]["lm_seq_len"]
repeats = bytes_trained / (0.9 * small_corpus_bytes)      # the training split is 90 % of the corpus
glue("ch10_small_corpus_mb", f"{small_corpus_bytes / 1e6:.2f}", display=False)
glue("ch10_small_corpus_repeats", f"{repeats:.0f}", display=False)
print(f"withdrawn LM runs: {bytes_trained / 1e6:.1f} M training bytes over a {small_corpus_bytes / 1e6:.2f} MB corpus: "
      f"its training split seen about {repeats:.0f} times")
train_bits = summarize([run["curve"]["loss"][-1] / math.log(2) for run in withdrawn])
val_bits = summarize([run["metric"] for run in withdrawn])
print(f"withdrawn LM runs ({len(withdrawn)}): last logged training loss {train_bits.mean:.2f} ± {train_bits.std:.2f} "
      f"bits/byte, validation {val_bits.mean:.2f} ± {val_bits.std:.2f} bits/byte")
expect("the withdrawn LM runs fit their training text far better than held-out text (> 1 bit/byte apart)",
       val_bits.mean - train_bits.mean > 1.0)

# %% [markdown]
# ### The language model: bits per byte, and a recall probe
#
# Each run trains on {glue:text}`ch10_lm_train_mb` M bytes of the standard library's Python files (T = 2048, nothing
# repeated) and is scored
# on held-out files: validation **bits per byte** (lower is better), and the **probe**: every window carries a
# random 8-character code near its start (`#k=...`) and asks for it again near its end, so only a model that
# recalls across about 2000 bytes gets it (chance: {glue:text}`ch10_probe_chance` per character).
#
# The seeds' spread here is mostly the *text*: a seed fixes which windows a run trains and is scored on, the same
# for every mixer, and some windows are simply harder. So beside the chapters' rule this section also states a
# **paired rule** (`k3lite.bakeoff.stats.beats_paired`): A beats B when, seed by seed on the same text, the mean
# difference is larger than two standard errors of that mean.

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import paired_verdict
from k3lite.bakeoff.tasks import PROBE_ALPHABET

LM_MIXERS = ("softmax", "linear_attention", "delta_rule", "gated_delta_rule", "kda", "k3_hybrid")
print(run_setup(bakeoff_cells["lm", 128, "kda"][0]))
print_cell_table(bakeoff_cells, ("lm",), LM_MIXERS, d_model=128)
lm_setup = bakeoff_cells["lm", 128, "kda"][0]
glue("ch10_lm_train_mb", f"{lm_setup['steps'] * lm_setup['batch_size'] * lm_setup['lm_seq_len'] / 1e6:.1f}",
     display=False)
for mixer in LM_MIXERS:
    glue(f"ch10_lm_{mixer}", shown("lm", mixer, 128), display=False)
probe = {m: [r["metrics"]["probe_recall"] for r in bakeoff_cells["lm", 128, m]] for m in LM_MIXERS}
probe_chance = 1 / len(PROBE_ALPHABET)
probe_best = max(max(v) for v in probe.values())
glue("ch10_probe_best", f"{probe_best:.3f}", display=False)
glue("ch10_probe_chance", f"{probe_chance:.3f}", display=False)
print(f"probe recall, best run of any mixer: {probe_best:.3f} (chance {probe_chance:.3f})")
LM_PAIRS = (("delta_rule", "linear_attention"), ("gated_delta_rule", "delta_rule"), ("kda", "delta_rule"),
            ("kda", "gated_delta_rule"), ("k3_hybrid", "kda"), ("softmax", "k3_hybrid"), ("softmax", "gated_delta_rule"))
lm_said, lm_diffs = {}, {}
for a, b in LM_PAIRS:
    by_seed = [{r["seed"]: r["metric"] for r in bakeoff_cells["lm", 128, m]} for m in (a, b)]
    differences = [by_seed[0][seed] - by_seed[1][seed] for seed in sorted(set(by_seed[0]) & set(by_seed[1]))]
    lm_said[a, b] = (verdict("lm", a, b, 128), paired_verdict(bakeoff_cells, "lm", a, b, 128))
    lm_diffs[a, b] = differences
    glue(f"ch10_lm_{a}_{b}", f"{lm_said[a, b][0]}; {lm_said[a, b][1]}", display=False)
    glue(f"ch10_lm_diff_{a}_{b}", ", ".join(f"{x:+.3f}" for x in differences), display=False)
    print(f"{LABELS[a]} - {LABELS[b]} per seed: {', '.join(f'{x:+.3f}' for x in differences)} bits/byte -> "
          f"{lm_said[a, b][0]}; {lm_said[a, b][1]}")
expect("no LM run recalls the planted code: every probe below 0.1 (chance 1/36)", probe_best < 0.1)
expect("DeltaNet beats linear attention on bits/byte by both rules",
       all(said.startswith(LABELS["delta_rule"]) for said in lm_said["delta_rule", "linear_attention"]))
expect("Gated DeltaNet and KDA each end below DeltaNet on every seed",
       all(max(lm_diffs[m, "delta_rule"]) < 0 for m in ("gated_delta_rule", "kda")))
expect("Gated DeltaNet and KDA each beat DeltaNet by the paired rule, not by the unpaired one",
       all(lm_said[m, "delta_rule"][1].startswith(LABELS[m]) and lm_said[m, "delta_rule"][0].startswith("no call")
           for m in ("gated_delta_rule", "kda")))
expect("the hybrid and KDA are not separated by either rule, nor softmax attention and the hybrid",
       all(said.startswith("no call") for pair in (("k3_hybrid", "kda"), ("softmax", "k3_hybrid")) for said in lm_said[pair]))

# %% tags=["plumbing"]
fig, axes = plt.subplots(2, 1, figsize=(7.2, 8.4))           # stacked: the site's column is 7.5 in wide
plot_cell("lm", d_model=128, path=BAKEOFF, layers="earlier", ax=axes[0])
axes[0].set_ylim(1.2, None)
plot_cell("lm", d_model=128, path=BAKEOFF, layers="earlier", ax=axes[1], metric="probe_recall")
fig.tight_layout()
plt.show()

# %% [markdown]
# What the language model says:
#
# * **The recurrence's steps show up in bits per byte.** DeltaNet against linear attention
#   ({glue:text}`ch10_lm_delta_rule` against {glue:text}`ch10_lm_linear_attention`; per seed
#   {glue:text}`ch10_lm_diff_delta_rule_linear_attention`): *{glue:text}`ch10_lm_delta_rule_linear_attention`*. The
#   gated mixers come next, in stored runs whose gates began saturated: Gated DeltaNet
#   ({glue:text}`ch10_lm_gated_delta_rule`) against DeltaNet, per seed
#   {glue:text}`ch10_lm_diff_gated_delta_rule_delta_rule`: *{glue:text}`ch10_lm_gated_delta_rule_delta_rule`*; KDA
#   ({glue:text}`ch10_lm_kda`) against DeltaNet, {glue:text}`ch10_lm_diff_kda_delta_rule`:
#   *{glue:text}`ch10_lm_kda_delta_rule`*. Both end below DeltaNet on every seed, by less than the text's own
#   spread, which is why only the paired rule sees it. With decays that stayed mostly near retention 1, the gain
#   cannot be credited to forgetting old context; the gated layers also differ from DeltaNet's in their output
#   gate. Whether a working gate pays on real text is open until the re-run.
# * **Per-channel against per-head decay, and the hybrid, are not separated in the stored runs** (their gates
#   barely decayed, so this does not yet compare the gate shapes): KDA against Gated DeltaNet,
#   *{glue:text}`ch10_lm_kda_gated_delta_rule`*; the hybrid ({glue:text}`ch10_lm_k3_hybrid`) against KDA,
#   *{glue:text}`ch10_lm_k3_hybrid_kda`*; softmax attention ({glue:text}`ch10_lm_softmax`) against the hybrid,
#   *{glue:text}`ch10_lm_softmax_k3_hybrid`*.
# * **The recall probe cannot answer the hybrid question at this budget.** No run of any mixer, softmax
#   attention included, recalls the planted code: the best is {glue:text}`ch10_probe_best` against a chance of
#   {glue:text}`ch10_probe_chance`. A model that has not yet learned to copy at all cannot show that its MLA layers
#   copy better; the probe needs longer training or a larger model, and this row stays open.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### The ledger
#
# Every "value" below is computed in this notebook (the variables of the cells above), so the table
# cannot drift from the checks.

# %% tags=["plumbing"]
def verdict_close(value, claimed, tolerance):
    return "holds" if abs(value - claimed) <= tolerance * abs(claimed) else "does not hold"


def bench_situ_ratios():
    """Unfused SiTU over the fused SiLU-and-mul it replaces, per mode, from the committed H200 benchmark."""
    path = viz.BENCH_RESULTS_DIR / "bench_h200.json"
    if not path.exists():
        return None, {}
    situ_bench = json.loads(path.read_text()).get("situ", {})
    return situ_bench, {mode: situ_bench[f"situ_eager_{mode}_ms"] / situ_bench[f"silu_mul_fused_{mode}_ms"]
                        for mode in ("fwd", "fwd+bwd")}


def situ_row():
    claim, sources, where = "unfused SiTU runs almost 3x slower", "A C", "ch 08; benchmarks/results/bench_h200.json"
    situ_bench, ratio = bench_situ_ratios()
    if not ratio:
        return claim, sources, "-", where, "not checkable here: benchmarks/results/bench_h200.json is not in this checkout"
    rows, cols = situ_bench["shape"]
    dtype = situ_bench["dtype"].removeprefix("torch.").replace("bfloat16", "bf16")
    return (claim, sources, f"unfused SiTU / fused SiLU-and-mul: fwd+bwd {ratio['fwd+bwd']:.2f}x, fwd {ratio['fwd']:.1f}x",
            where, f"holds with a nuance: the factor depends on the pass, {ratio['fwd+bwd']:.2f}x fwd+bwd (wall time, "
            f"launch-bound at this size), {ratio['fwd']:.1f}x forward only; H200, {dtype}, {rows}x{cols}")


def bakeoff_verdict(mixers_read, verdict_from_cells, what_the_stored_runs_show, published):
    """The verdict a row's bake-off cells give, unless a cell it reads comes from a mixer with a decay gate: the
    earlier runs of those began with a saturated gate, so such a row stays open, with what the published layers'
    runs say so far (``published``)."""
    if GATED_MIXERS & set(mixers_read):
        return f"open: earlier runs predate the faithful layers ({what_the_stored_runs_show}); {published}"
    return verdict_from_cells


bakeoff_rebind = (f"rebind: softmax {shown('rebind', 'softmax')}, KDA {shown('rebind', 'kda')}, "
                  f"hybrid {shown('rebind', 'k3_hybrid')}")
published_hard_value = ("MQAR-64 as published, success: " + ", ".join(
    f"{name} {cell_success(published_cells, 'mqar64', m)}" for name, m in (("softmax", "softmax"), ("KDA", "kda"),
                                                                          ("hybrid", "k3_hybrid"))))
softmax_won_published = ("does not hold at toy scale: as published, " + "; ".join(
    f"{task}, d 64, {published_verdict('softmax', m, task)}" for task, won in softmax_wins.items() for m in won)
    + "; no call by success counts on " + ", ".join(task for task, won in softmax_wins.items() if not won)
    + "; at the published scale not checkable here"
    if any(softmax_wins.values()) else "")
hybrid_kda_value = ("as published, success: " + "; ".join(
    f"{task}: " + ", ".join(f"{name} {cell_success(published_cells, task, m)}"
                            for name, m in (("softmax", "softmax"), ("KDA", "kda"), ("hybrid", "k3_hybrid")))
    for task in ("mqar64", "twoscale")))
HERE = "ch 10"
ledger = [
    ("GPT-2 has about 124M parameters (50k vocab, 12 blocks, 12 heads, 768)", "A B C",
     f"{gpt2_total:,d}", f"{HERE} §3; ch 01", verdict_close(gpt2_total, 124e6, 0.005)),
    ("Kimi K3 has 2.8T parameters", "A B C", f"{total:,d}", f"{HERE} §3 (formula = meta device)",
     verdict_close(total, 2.8e12, 0.01) + f" ({total / 1e12:.2f}T rounds to 2.8T)"),
    ("K3 holds roughly 22,580 GPT-2s", "A C",
     f"2.8T / 124M = {ratios['2.8e12 / 124e6 (both rounded)']:,.1f}; exact {ratios['exact K3 / exact GPT-2']:,.1f}",
     f"{HERE} §3", "holds with a nuance: the ratio of the rounded headline numbers; exact counts give 1 % less"),
    ("a scaling factor of \"exactly 22,580\"", "B", f"exact counts: {ratios['exact K3 / exact GPT-2']:,.1f}",
     f"{HERE} §3", verdict_close(ratios["exact K3 / exact GPT-2"], 22_580, 0.001)),
    ("23 four-layer macrocycles (3 KDA + 1 MLA)", "B C",
     f"{k3.num_macrocycles} x {k3.layers_per_cycle} + final MLA = {k3.num_layers} layers",
     f"{HERE} §2 (layer plan)", f"holds with a nuance: 23 cycles, but {k3.num_layers} layers and "
     f"{k3.num_mla_layers} MLA (not {seed_reading.num_layers} and {seed_reading.num_mla_layers})"),
    ("first layer dense FFN, every other layer latent MoE", "C",
     f"{ffn_types.count('dense')} dense + {ffn_types.count('moe')} MoE", f"{HERE} §2",
     "holds" if ffn_types[0] == "dense" and set(ffn_types[1:]) == {"moe"} else "does not hold"),
    ("898 experts = 2 shared + 896 routed", "A B C",
     f"{k3.num_shared_experts} + {k3.num_experts} = {k3.num_shared_experts + k3.num_experts}", f"{HERE} §1; ch 08",
     "holds" if (k3.num_shared_experts, k3.num_experts) == (2, 896) else "does not hold"),
    ("router picks 16 of the 896 per token", "A B C", f"top-{k3.top_k}", f"{HERE} §1, §3; ch 08",
     "holds (a token touches 16 routed + 2 shared = 18 experts)" if k3.top_k == 16 else "does not hold"),
    ("latent MoE nearly halves FLOPs (B credits SiTU too)", "A B C",
     f"MAC ratios: routed {routed_ratio:.2f}, MoE layer {layer_ratio:.2f}, model {model_ratio:.2f}", f"{HERE} §6; ch 08",
     "holds with a nuance: the latent (3584 = 7168 / 2) halves the experts; SiTU saves no FLOPs"),
    ("AttnRes every 12 layers", "A B C", f"block size {k3.attnres_block_size}", f"{HERE} §2; ch 09",
     "holds" if k3.attnres_block_size == 12 else "does not hold"),
    ("8 AttnRes blocks", "B C", f"ceil(93 / 12) = {blocks}; 7 full + 1 of 9 layers", f"{HERE} §2",
     "holds with a nuance: the last block is partial; 8 stored sources incl. the embedding"),
    ("blocks (vs AttnRes at every layer) lower the cost", "C",
     f"max sources {max(sources_per_read)} vs {sublayers + 1}; mixing FLOPs / {full_attnres_reads / sum(sources_per_read):.1f}",
     f"{HERE} §6; ch 09", "holds with a nuance: the cost drops; \"captures most of the benefit\" not shown: in ch 09 "
     "block AttnRes behaved unlike full"),
    ("AttnRes adds about 2 % inference latency", "A B C", f"{attnres_flops / 1e6:.0f} MFLOPs per token (7d per source) = {attnres_flops / (2 * active):.4%} of FLOPs",
     f"{HERE} §6; ch 09", "not checkable here: latency is a property of the serving stack on GPUs; "
     "the extra FLOPs are negligible"),
    ("AttnRes gives a 1.25x compute advantage", "A B C", "-", "ch 09 (toy training)",
     "not checkable here: a scaling-law result, needs training runs at many scales"),
    ("SiTU = beta tanh(x / beta) sigmoid(x) replaces SiLU", "A C",
     f"matches k3lite: {situ_matches}; SiLU as beta -> inf: {silu_limit < 1e-3}", f"{HERE} §6; ch 08",
     "holds" if situ_matches and silu_limit < 1e-3 else "does not hold"),
    situ_row(),
    ("chunk size C = 64 or 128 suits tensor cores", "B C", f"K3 chunk_size = {k3.chunk_size}", "ch 04; bench_h200.json",
     "holds with a nuance: the config uses 64; the speed argument needs a GPU"),
    ("C = L is full O(L^2) attention, C = 1 linear attention; 2Ld^2 + 2LCd", "C",
     f"intra(C = L) = full attention: {linear_split.intra == flops.full_attention(L_CHUNK, D_HEAD)}", f"{HERE} §6; ch 04",
     "holds with a nuance: 2Ld^2 + 2LCd counts multiply-adds; in FLOPs 4Ld^2 + 4LCd (ch 04)"),
    ("Kimi Linear: up to 6x decode throughput", "B C",
     f"K3-shaped cache traffic alone: {bytes_per_decode_step(2 ** 20, False) / bytes_per_decode_step(2 ** 20):.2f}x at 1M; "
     f"H200, K3-shaped / GPT-2-shaped, device time: {first['k3_over_gpt2_device']:.2f}x at {first['context'] // 1024}k, "
     f"{last['k3_over_gpt2_device']:.2f}x at {last['context'] // 1024}k (eager: {first['k3_over_gpt2']:.2f}x, "
     f"{last['k3_over_gpt2']:.2f}x)",
     f"{HERE} §6", "holds with a nuance: the mechanism is measured (GPT-2's step grows with its cache, K3's far less), "
     "the number is not: 1M context, larger batches and fused kernels are out of reach here; K3-shaped byte "
     "arithmetic alone gives < 3.9x; at short context our K3 is slower (its many small kernels)"),
    ("Kimi Linear: up to 75 % less KV cache", "(Kimi Linear paper)",
     f"{1 - k3_per_token / k3_all_mla_per_token:.1%} (K3), {1 - 7 / 27:.1%} (Kimi Linear)", f"{HERE} §5-6; ch 07",
     f"holds with a nuance: for the growing part; with its KDA states Kimi Linear holds less than all-MLA "
     f"only beyond {kl_break_even:,.0f} tokens (K3: {k3_break_even:,.0f})"),
    ("O(N^2) framing: per-step cost grows with the square of N", "C",
     f"with cache x{cached[1] / cached[0]:.2f}, without x{recomputed[1] / recomputed[0]:.2f} when N doubles",
     f"{HERE} §6; ch 01, 02",
     f"does not hold (as the worklog itself says): per step x{cached[1] / cached[0]:.2f} with a cache, "
     f"x{recomputed[1] / recomputed[0]:.2f} without; quadratic only summed over a sequence"),
    ("the KV cache grows O(N) with the sequence", "B C", f"{gpt2_per_token:,d} B/token (GPT-2 small)",
     f"{HERE} §5; ch 01", "holds"),
    ("each decode step: two ND reads and two 1D writes", "C",
     f"cache grows by exactly 2 vectors per layer: {grown == 2 * layers * width * 4 * 2}", f"{HERE} §5",
     "holds (per layer: K and V read, one k and one v written)"),
    ("linear attention keeps a fixed D x D state", "A B C", f"KDA: {kda_state / MIB:.0f} MiB whatever N",
     f"{HERE} §5; ch 02", "holds"),
    ("unit-norm keys read back v exactly", "C", "-", "ch 03", "holds (ch 03, to 1e-12)"),
    ("decay product alpha_x ... alpha_(x+t)", "C", "factor = prod alpha_(x+1..x+t)", f"{HERE} §6; ch 05",
     "holds with a nuance: with decay-then-write, t factors alpha_(x+1)..alpha_(x+t), not t + 1"),
    ("Kimi Linear beats full attention in controlled comparisons", "C",
     published_hard_value if softmax_won_published else bakeoff_rebind, f"{HERE} §6 (bake-off); ch 03, 05, 06",
     softmax_won_published or bakeoff_verdict(("softmax", "kda", "k3_hybrid"),
                     (f"does not hold at toy scale: softmax attention is best or tied on every bake-off task "
                      f"(rebinding: {softmax_vs_kda_rebind}; "
                      f"{softmax_vs_hybrid_rebind.replace('no call: ', 'hybrid, no call: ')}); "
                      "at the published scale not checkable here")
                     if softmax_best_or_tied else
                     "holds with a nuance: some mixer beats softmax attention on a bake-off task",
                     "in them softmax attention is best or tied on every task; at the published scale not "
                     "checkable here", published_kda_softmax)),
    ("the MLA layers of a 3 KDA : 1 MLA hybrid recover what pure KDA loses", "(Kimi Linear paper)", hybrid_kda_value,
     f"{HERE} §6 (bake-off); ch 06",
     bakeoff_verdict(("kda", "k3_hybrid"),
                     f"holds at toy scale on one (task, width) of {len(hybrid_vs_kda_all)}: two timescales, "
                     f"{hybrid_vs_kda['twoscale']}; no call on the other {len(hybrid_vs_kda_all) - len(hybrid_wins)} "
                     f"(rebinding, switch, MQAR at d 64 and 128, the language model); the LM's recall probe is at "
                     f"chance for every mixer (best {probe_best:.3f})",
                     f"in them the hybrid beats pure KDA on one (task, width) of {len(hybrid_vs_kda_all)} (two "
                     f"timescales); the LM's recall probe is at chance for every mixer (best {probe_best:.3f})",
                     published_hybrid_kda)),
    ("K3's design works better than a same-size transformer", "(implied)",
     f"toy run: final losses within {GAP} nats: {abs(loss_gap) < GAP}", f"{HERE} §4",
     "not checkable here: needs a trained 2.8T model"),
    ("seven years from GPT-2 (2019) to K3 (2026)", "B C", f"{2026 - 2019}", "-", "holds"),
]
lines = ["| claim | source | computed | checked in | verdict |", "|---|---|---|---|---|"]
lines += [f"| {c} | {s} | {v} | {w} | {x} |" for c, s, v, w, x in ledger]
display(Markdown("\n".join(lines)))


def verdict_kind(verdict):
    for kind in ("holds with a nuance", "does not hold", "not checkable", "open"):
        if verdict.startswith(kind):
            return kind
    return "holds"


kinds = [verdict_kind(v) for *_, v in ledger]
print(f"{len(ledger)} claims: " + ", ".join(f"{kinds.count(k)} {k}"
                                           for k in ("holds", "holds with a nuance", "does not hold", "not checkable",
                                                     "open")))

# %% [markdown]
# The GPU numbers come from the benchmark files that `python -m benchmarks.bench` writes on an H200,
# committed under `benchmarks/results/`. Timings depend on the
# machine, but the cell below only reads the committed files, so its output is fixed by those files.

# %% tags=["plumbing"]
bench_path = viz.BENCH_RESULTS_DIR / "bench_h200.json"
if not bench_path.exists():
    print("benchmarks/results/bench_h200.json is not in this checkout: the SiTU and chunk-size rows stay "
          "'not checkable here'. Run `python -m benchmarks.bench` on an H200 to produce it.")
else:
    bench = json.loads(bench_path.read_text())
    meta = bench.get("meta", {})
    dates = [run.get("date_utc", "?") for run in meta.get("runs", [])] or [meta.get("date_utc", "?")]
    print(f"{meta.get('device', '?')}; runs {', '.join(dates)}")
    situ_bench = bench.get("situ", {})
    for mode in ("fwd", "fwd+bwd"):
        eager, fused = situ_bench.get(f"situ_eager_{mode}_ms"), situ_bench.get(f"situ_fused_{mode}_ms")
        silu_fused, silu_eager = situ_bench.get(f"silu_mul_fused_{mode}_ms"), situ_bench.get(f"silu_mul_eager_{mode}_ms")
        if None in (eager, fused, silu_fused, silu_eager):
            continue
        print(f"SiTU {mode:>7} (shape {situ_bench.get('shape')}): unfused SiTU / fused SiLU-and-mul = {eager / silu_fused:.2f}x, "
              f"/ unfused SiLU-and-mul = {eager / silu_eager:.1f}x, / fused SiTU = {eager / fused:.1f}x "
              "(claim: almost 3x slower)")
    for row in bench.get("chunked", []):
        if row.get("kind") == "kda" and row.get("k3lite_triton_ms"):
            print(f"KDA chunked (C = 64) {row['mode']:>7} B={row['B']} T={row['T']:>5}: k3lite {row['k3lite_triton_ms']:.2f} ms, "
                  f"fla {row.get('fla_ms') or float('nan'):.2f} ms, causal SDPA {row['sdpa_ms']:.2f} ms")
    for row in bench.get("decode", []):
        if row.get("k3lite_default_ms"):
            print(f"KDA decode step B={row['B']}, H={row['H']}: {row['k3lite_default_ms']:.3f} ms "
                  f"({row.get('tb_per_s', float('nan')):.2f} TB/s of state traffic)")

# %% [markdown]
# How to read the SiTU lines against the claim: the worklog (section "Kimi K3") compares an unfused SiTU with "the
# original path", a fused SiLU-and-multiply, so the first ratio of each line is the one to set against "almost 3x";
# the last ratio is what the fused SiTU kernel of chapter 08 buys back. A forward pass alone is the harshest case,
# because it is pure memory traffic and the unfused version makes several trips.

# %% [markdown]
# Reading the ledger as a whole: the architecture numbers of the articles are right, sometimes rounded
# (22,580, 2.8T) and once off by a layer (92 vs 93). The mechanism claims check out when read
# carefully (halving comes from the latent, not from SiTU; the decay product has $t$ factors), except the
# per-step O(N²) framing, which the worklog itself corrects: with a cache a step grows linearly in $N$. The
# performance claims (latency, compute advantage, throughput, quality) are measurements of real systems
# at scale: this notebook can bound them with arithmetic, not confirm them. Of the two quality claims a trained
# bake-off can speak to at toy scale, one is answered there: on MQAR-64 softmax attention beats both pure KDA and
# the hybrid, built as published (a toy cell, far from the papers' scale). The other, that the MLA layers recover
# what pure KDA loses, stays open: built as published, the hybrid is not separated from pure KDA in any of the
# four cells (MQAR with 16 and 64 pairs, the switch, the two time scales), and the language model's runs began
# with a saturated gate.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# ### Exercise 1 — count the layers
# Write `layer_counts(num_cycles, layers_per_cycle, final_mla)` returning `(num_kda, num_mla)` for a stack
# of macrocycles (`layers_per_cycle - 1` KDA layers, then one MLA layer), with one extra MLA layer at the
# end when `final_mla` is true.

# %% [markdown] tags=["notes"]
# Six exercises on the whole model: count the layers, decode memory at context N, AttnRes sources per read (short,
# homework), a prediction for the room (serving a batch: most forget that each sequence has its own state), a
# design transfer (MLA layers under a memory budget) and an open question for a project (check a ledger row).

# %%
from k3lite.exercises import ch10


def my_layer_counts(num_cycles, layers_per_cycle, final_mla):
    raise NotImplementedError


# %%
ch10.check_layer_counts(my_layer_counts);

# %% tags=["solution"]
# Solution
def solution_layer_counts(num_cycles, layers_per_cycle, final_mla):
    return num_cycles * (layers_per_cycle - 1), num_cycles + int(final_mla)


ch10.check_layer_counts(solution_layer_counts);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 — decode memory at context N
# Write `decode_cache_bytes(context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim)`:
# the bytes one sequence holds after `context` tokens, with MLA latents and rope keys in bf16 (2 bytes) and
# KDA states (`num_heads × head_dim × head_dim` numbers per layer) in float32 (4 bytes). Each MLA layer caches
# `latent_dim + rope_dim` numbers per token (section 5's 576 = 512 + 64 for K3). Leave the convolution tails out.

# %%
def my_decode_cache_bytes(context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim):
    raise NotImplementedError


# %%
ch10.check_decode_cache_bytes(my_decode_cache_bytes);

# %% tags=["solution"]
# Solution: the latents grow with the context, the states do not.
def solution_decode_cache_bytes(context, num_kda_layers, num_mla_layers, num_heads, head_dim, latent_dim, rope_dim):
    latents = context * num_mla_layers * (latent_dim + rope_dim) * 2
    states = num_kda_layers * num_heads * head_dim * head_dim * 4
    return latents + states


ch10.check_decode_cache_bytes(solution_decode_cache_bytes);
print(f"K3 at 1M tokens: {solution_decode_cache_bytes(2 ** 20, 69, 24, 96, 128, 512, 64) / GIB:.1f} GiB")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 — sources per AttnRes read
# Block AttnRes reads once before every sub-layer (attention and FFN of each decoder layer) and once more for
# the output. Write `sources_per_read(num_sublayers, sublayers_per_block)` returning the list of how many
# sources each of the `num_sublayers + 1` reads attends over: the embedding, one sum per completed block,
# and the running sum of the current block when it holds an output. Its sum for K3 is the number of
# sources section 6 priced at $7d$ FLOPs each.

# %%
def my_sources_per_read(num_sublayers, sublayers_per_block):
    raise NotImplementedError


# %%
ch10.check_sources_per_read(my_sources_per_read);

# %% tags=["solution"]
# Solution: before read j, j outputs exist; divmod splits them into completed blocks and a partial one.
def solution_sources_per_read(num_sublayers, sublayers_per_block):
    counts = []
    for done in range(num_sublayers + 1):
        completed, partial = divmod(done, sublayers_per_block)
        counts.append(1 + completed + (1 if partial else 0))
    return counts


ch10.check_sources_per_read(solution_sources_per_read);
k3_reads = solution_sources_per_read(2 * k3.num_layers, 2 * k3.attnres_block_size)
print(f"K3: {len(k3_reads)} reads, {sum(k3_reads):,d} sources in all; same as section 6: {k3_reads == sources_per_read}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4 (predict, then run) — serving a batch
# A server decodes **256 sequences at once, each 8,192 tokens long**, with the published K3. How many GiB of decode
# memory do their caches and states take in all (MLA latents, KDA states and convolution tails; the weights
# aside)? Return your prediction from `predicted_batch_gib()` *before* running the cell after it; section 5's
# numbers are per sequence. The checker accepts a prediction within 25 %.

# %%
def predicted_batch_gib():
    raise NotImplementedError  # return your prediction, in GiB


# %%
SERVE_CONTEXT, SERVE_BATCH = 8192, 256
serving = accounting.k3_cache_bytes(k3, SERVE_CONTEXT, batch_size=SERVE_BATCH)
measured_batch_gib = serving["total"] / GIB
print(f"{SERVE_BATCH} sequences x {SERVE_CONTEXT:,d} tokens: " +
      ", ".join(f"{name} {size / GIB:.1f} GiB" for name, size in serving.items()))

# %%
ch10.check_batch_memory_prediction(predicted_batch_gib, measured_batch_gib, context=SERVE_CONTEXT,
                                   batch_size=SERVE_BATCH);


# %% tags=["solution"]
# Solution: per sequence about 414 MiB of KDA state plus 8,192 x 27,648 bytes of latents, times 256.
def predicted_batch_gib_solution():
    return SERVE_BATCH * (kda_state + SERVE_CONTEXT * k3_per_token) / GIB


ch10.check_batch_memory_prediction(predicted_batch_gib_solution, measured_batch_gib, context=SERVE_CONTEXT,
                                   batch_size=SERVE_BATCH);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 5 (transfer) — how many MLA layers fit a budget?
# You design a new hybrid: every layer is either KDA (a fixed `kda_state_bytes` per sequence) or MLA
# (`mla_bytes_per_token` for every token of context). Write `most_mla_layers(num_layers, context, budget_bytes,
# kda_state_bytes, mla_bytes_per_token)` returning the largest number of MLA layers for which one sequence of
# `context` tokens fits in `budget_bytes`, or `None` when no mix fits. Assume, as the hybrid's designers do, that
# more MLA layers give more exact recall, so the designer wants as many as the memory allows (section 6 could not
# confirm this at toy scale). Think about short contexts before you code.

# %%
def most_mla_layers(num_layers, context, budget_bytes, kda_state_bytes, mla_bytes_per_token):
    raise NotImplementedError


# %%
ch10.check_most_mla_layers(most_mla_layers);


# %% tags=["solution"]
# Solution: the cost (L − m)·S + m·N·b is linear in m; its slope N·b − S decides which end is cheap.
def most_mla_layers_solution(num_layers, context, budget_bytes, kda_state_bytes, mla_bytes_per_token):
    slope = context * mla_bytes_per_token - kda_state_bytes        # the price of turning one KDA layer into MLA
    all_kda = num_layers * kda_state_bytes
    if slope <= 0:                                                 # short context: MLA is the cheaper layer
        return num_layers if all_kda + num_layers * slope <= budget_bytes else None
    if all_kda > budget_bytes:
        return None
    return min(num_layers, (budget_bytes - all_kda) // slope)


ch10.check_most_mla_layers(most_mla_layers_solution);
k3_layer_state = kda_state // k3.num_kda_layers
print(f"K3-shaped layers, 1M tokens, 40 GiB: at most "
      f"{most_mla_layers_solution(k3.num_layers, 2 ** 20, 40 * GIB, k3_layer_state, k3_per_token // k3.num_mla_layers)}"
      f" MLA layers of {k3.num_layers} (K3 has {k3.num_mla_layers})")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 6 (open question) — check a claim the ledger could not
# Pick one row of the claim ledger marked **not checkable here**. Design the cheapest experiment that would turn
# it into *holds* or *does not hold*: what you would run, on what hardware, what you would measure, which
# comparison (and how many repeats) would decide it, and what result would make you change the verdict. Say
# which part of the claim your experiment still could not reach.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# Any row will do; what matters is a controlled comparison with a decision rule. Two examples:
#
# * **"AttnRes adds about 2 % inference latency."** Serve the same model twice, with block AttnRes and with the
#   plain residual sum (same weights elsewhere, the mixing weights folded out), on the GPUs and serving stack
#   the claim refers to, at a few batch sizes and context lengths. Measure the time per decode step and per
#   prefill token over many steps, repeated on separate runs, and report the ratio with its spread. The claim
#   holds if the overhead sits near 2 % over the realistic settings; it is refuted if it is clearly larger at the
#   batch sizes that matter. What stays out of reach: whether the authors' fused kernels or their serving
#   system were used; a naive implementation would overstate the cost.
# * **"AttnRes gives a 1.25x compute advantage."** Train models with and without AttnRes at three to five sizes
#   (e.g. 10x apart in compute), each at its compute-optimal token count, and fit loss against compute per
#   variant. The advantage is the horizontal gap between the fitted curves at equal loss; a few seeds per point
#   give its error. It holds if the gap is about 1.25x with an interval that excludes 1. What stays out of
#   reach: extrapolation to K3's scale.
#
# Marks for: a precise quantity to measure, a like-for-like baseline changing one thing, repeats and a
# decision rule fixed in advance, and an honest limit.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Summary
#
# - Kimi K3 is Kimi Linear's skeleton at scale with new organs: 93 layers (23 cycles of 3 KDA + 1 MLA,
#   then a final MLA), bounded per-channel decay, gated MLA, latent experts with SiTU, block AttnRes.
# - It has {glue:text}`ch10_total` parameters, {glue:text}`ch10_routed_share` of them routed experts; a token
#   uses about {glue:text}`ch10_active`. "22,580 GPT-2s" is the ratio of rounded numbers; the exact one is
#   {glue:text}`ch10_ratio_exact`.
# - Its decode memory is a fixed {glue:text}`ch10_kda_state_mib` MiB of KDA state plus
#   {glue:text}`ch10_k3_bytes_per_token` bytes per token, less per token than
#   GPT-2 small; on the small model the caches reproduce recomputation to within 1e-4 in the logits, with the same
#   greedy tokens.
# - At toy scale K3 and GPT-2 train alike; whether the design wins is a question of scale and context
#   length that a CPU notebook cannot settle, and the ledger says so claim by claim.
# - The trained bake-off (GPU, small models): with the layers as published, softmax attention beats
#   both pure KDA and the hybrid on MQAR with 64 pairs, and with 32 pairs the two already fall short on some seeds;
#   on MQAR-16, rebinding, the context switch and the two time scales all three learn on (nearly) every seed, and
#   the hybrid is not separated from pure KDA anywhere. The hybrid's one win
#   in the earlier grid (two time scales, gates that began saturated, half the steps) is gone with a working gate
#   and twice the steps.
#   The language model rests on earlier-grid runs; what a working gate changes there waits for its runs.
#
# The course ends where the article does: a fixed-size memory needs a way to forget (gates, decay), and
# a way to look things up exactly (attention over tokens, over depth). K3 is one careful answer to both.

# %% [markdown] tags=["notes"]
# Close the course: a fixed-size memory needs a way to forget and a way to look things up exactly, and K3
# combines both. Be honest about the evidence: the architecture numbers check out; the quality claims need
# scale, and at toy scale full attention was never beaten.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. Why does K3 have 24 MLA layers and not 23?
# 2. How many bytes does K3 cache per token, and why is it less than GPT-2 small's 36,864?
# 3. Why can bytes per sequence alone not reproduce Kimi Linear's "6.3× at 1M tokens"?
# 4. Why is "K3 holds roughly 22,580 GPT-2s" a claim that "holds with a nuance"?
#
# <details>
# <summary>Short answers</summary>
#
# 1. After its 23 macrocycles of three KDA layers and one MLA layer comes one more, final MLA layer: 93 layers, not
#    92.
# 2. $24 \cdot 576 \cdot 2 = 27{,}648$ bytes in bf16: only the 24 MLA layers keep a cache, and it is a 576-number
#    latent, not a key and a value per head.
# 3. K3-shaped byte arithmetic bounds the ratio well below that; the measured speed-up also comes from the larger
#    batches that the freed memory allows, and from production kernels.
# 4. 22,580 is the ratio of the rounded headline numbers (2.8T over 124M); the exact counts give about one percent
#    less.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Moonshot AI, the published configuration of Kimi K3 (July 2026), transcribed field by field in
#   `k3lite.models.k3.K3Config.published()`; no stable public address is recorded for it in the course's sources:
#   every size in sections 1–6.
# - Kimi Team (2025), *Kimi Linear: An Expressive, Efficient Attention Architecture*:
#   [arXiv:2510.26692](https://arxiv.org/abs/2510.26692): the 3 KDA : 1 MLA skeleton, the 48B-A3B configuration of
#   section 1 (also released as
#   [moonshotai/Kimi-Linear-48B-A3B-Instruct](https://huggingface.co/moonshotai/Kimi-Linear-48B-A3B-Instruct)), up
#   to 75 % less KV cache and 6.3× faster decoding at a 1M context; section 6.
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); the ledger's source [C], sections "GPT-2" to "AttnRes".
# - 机器之心 (Synced), *From GPT-2 to Kimi K3: Seven Years of Architecture Upgrades That Go Far Beyond Parameter Count*
#   (29 July 2026, published on juejin.cn), and a bilingual (Chinese and English) abstract of the worklog; no stable
#   public address is recorded for them; the ledger's sources [A] and [B].
# - Kimi Team (2026), *Attention Residuals*: [arXiv:2603.15031](https://arxiv.org/abs/2603.15031): the AttnRes
#   claims of the ledger.
# - DeepSeek-AI (2024), *DeepSeek-V3 Technical Report*: [arXiv:2412.19437](https://arxiv.org/abs/2412.19437): the
#   MLA and MoE design K3 inherits.
# - Arora, Eyuboglu et al. (2023), *Zoology: Measuring and Improving Recall in Efficient Language Models*:
#   [arXiv:2312.04927](https://arxiv.org/abs/2312.04927): MQAR, one of the bake-off's tasks.
# - Radford, Wu, Child, Luan, Amodei and Sutskever (2019), *Language Models are Unsupervised Multitask Learners*,
#   OpenAI: [the GPT-2 report page](https://openai.com/index/better-language-models/): GPT-2 small, the model K3 is
#   compared with.
