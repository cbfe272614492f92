# %% [markdown] slideshow={"slide_type": "slide"}
# # 08 · Latent MoE and SiTU
#
# Attention decides *where* a token reads from; the feed-forward network decides what it computes with what
# it read, and holds most of a model's parameters. K3 replaces it (in every layer but the first) by a
# **mixture of experts**: 896 routed experts of which each token uses 16, plus 2 shared experts every token
# uses (K3's published configuration). Three K3 details make that work:
#
# 1. **routing** with sigmoid scores and a load-balancing bias instead of an auxiliary loss (Wang et al. 2024,
#    [arXiv:2408.15664](https://arxiv.org/abs/2408.15664); DeepSeek-V3, [arXiv:2412.19437](https://arxiv.org/abs/2412.19437), §2.1.2).
#    An auxiliary loss is an extra term in the training loss that penalises uneven expert load, as in the Switch
#    Transformer (Fedus, Zoph and Shazeer 2021, [arXiv:2101.03961](https://arxiv.org/abs/2101.03961), §2.2);
# 2. **latent experts** that run in a space half the model width, which, the article claims, "nearly halves"
#    their cost (section 2 computes how nearly);
# 3. **SiTU**, a bounded replacement for SiLU in the gated MLP, which is only cheap when fused.
#
# Each gets the same treatment: what goes wrong without it, the math, code, a check against `k3lite`.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 2 h 30 min for a motivated student working alone: reading, running every cell, the exercises
# and the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. implement top-$k$ routing with sigmoid scores and a selection-only bias, and explain why the bias does not
#    enter the mixing weights;
# 2. simulate auxiliary-loss-free balancing and measure the experts' load before and after;
# 3. compute the multiply-adds per token of full-width and of latent routed experts, with the down and up
#    projections, and check the claim that latents "nearly halve" the cost;
# 4. implement SiTU and show its bound $|h| \le \beta_1\beta_2$ and its SiLU limit as $\beta \to \infty$;
# 5. count the memory traffic of an unfused elementwise chain, and explain why only a fused kernel makes SiTU as
#    cheap as SiLU.
#
# **Prerequisites.**
#
# - Chapter 01 (the MLP of a transformer block and its parameter count).
# - Gated linear units and SwiGLU: Shazeer (2020), [arXiv:2002.05202](https://arxiv.org/abs/2002.05202).
# - Mixture of experts with top-$k$ routing: Shazeer et al. (2017),
#   [arXiv:1701.06538](https://arxiv.org/abs/1701.06538); Fedus, Zoph and Shazeer (2021),
#   [arXiv:2101.03961](https://arxiv.org/abs/2101.03961).
# - Optional: why elementwise GPU kernels are limited by memory traffic, e.g. the performance guidelines of NVIDIA's
#   [CUDA C++ Best Practices Guide](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/); chapter 11 goes
#   deeper.

# %% tags=["plumbing"]
import json
import time

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from myst_nb import glue
from torch.utils.flop_counter import FlopCounterMode

from k3lite.course import accounting, viz
from k3lite import data
from k3lite.models.k3 import K3Config
from k3lite.layers.moe import MoE, SigmoidRouter
from k3lite.ops.situ import situ, situ_glu
from k3lite.course.runtime import pick, seed_everything

viz.use_style()
_ = seed_everything(0)
# One thread keeps the float32 sums below in one order from run to run on this machine. It does not make them
# agree across CPUs: the vector kernels (AVX2, AVX-512) sum in different orders, which is why the router
# scores of section 1, where near-ties decide the top-k, are computed in float64.
torch.set_num_threads(1)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Routing, and the load it produces
#
# A router scores every routed expert $e$ for token $x$ with $s_e = \sigma(r_e^\top x)$, picks the top $k$,
# and mixes their outputs with the selected scores renormalised:
#
# $$y = \sum_{e \in \mathrm{TopK}(s + b)} \frac{s_e}{\sum_{e' \in \mathrm{TopK}(s+b)} s_{e'}}\; E_e(x) \;+\; \mathrm{Shared}(x).$$
#
# The per-expert bias $b$ enters the *selection only*. Without it, nothing keeps the experts evenly used: real
# tokens are far from uniform, so some experts get most of the traffic (and in a distributed model, the GPU
# holding them is the bottleneck). Let us route real text: the bytes of the course corpus, each byte mapped to
# a fixed random vector plus noise (a stand-in for what the context adds to a token's hidden state), through a
# random router with 32 experts and top-4.

# %% [markdown] tags=["notes"]
# Start with the router: a sigmoid score per expert, the top $k$ picked, their scores mixed.
# Ask the room what happens to the load when some tokens are far more frequent than others, then
# show the measured imbalance. The fix to stress: the bias only *picks* experts, it never enters
# the mixing weights, so balancing needs no auxiliary loss.

# %%
D_MODEL, EXPERTS, TOP_K = 64, 32, 4
text_ids = data.encode(data.corpus_text(60_000))
embedding = torch.randn(data.VOCAB_SIZE, D_MODEL, generator=torch.Generator().manual_seed(0))
context = 0.5 * torch.randn(len(text_ids), D_MODEL, generator=torch.Generator().manual_seed(10))
hidden = embedding[text_ids] + context                                  # [N, d]: one vector per byte of text
router_weight = 0.02 * torch.randn(EXPERTS, D_MODEL, generator=torch.Generator().manual_seed(1))


def route(scores, bias, top_k):
    """scores [N, E] (sigmoid outputs), bias [E] -> (weights [N, k], indices [N, k])."""
    _, indices = torch.topk(scores + bias, top_k, dim=-1)
    selected = scores.gather(-1, indices)
    return selected / selected.sum(-1, keepdim=True), indices


def expert_load(indices, num_experts):
    return torch.bincount(indices.reshape(-1), minlength=num_experts)


# float64, because a few tokens have their 4th and 5th scores less than 1e-6 apart (printed below): close
# enough for float32 rounding, which depends on the CPU kernel's summation order, to swap them.
scores = torch.sigmoid(hidden.double() @ router_weight.double().T)
bias = torch.zeros(EXPERTS, dtype=torch.float64)
weights, indices = route(scores, bias, TOP_K)
load = expert_load(indices, EXPERTS)
mean_load = len(hidden) * TOP_K / EXPERTS
print(f"{len(hidden):,d} tokens x top-{TOP_K} over {EXPERTS} experts: mean load {mean_load:.0f}")
print(f"busiest expert {load.max().item():,d} tokens ({load.max().item() / mean_load:.1f}x the mean), "
      f"idlest {load.min().item():,d} ({load.min().item() / mean_load:.1f}x)")
fourth_and_fifth = torch.topk(scores, TOP_K + 1, dim=-1).values[:, TOP_K - 1:]
near_ties = int((fourth_and_fifth[:, 0] - fourth_and_fifth[:, 1] < 1e-6).sum())
print(f"tokens whose 4th and 5th scores are less than 1e-6 apart: {near_ties} (why the scores are float64)")

# %% [markdown]
# The same router in `k3lite.layers.moe` must pick the same experts with the same weights:

# %%
k3_router = SigmoidRouter(D_MODEL, EXPERTS, TOP_K)
with torch.no_grad():
    k3_router.weight.copy_(router_weight)
k3_weights, k3_indices, _ = k3_router.double()(hidden.double())
print(f"same experts: {torch.equal(k3_indices, indices)}, "
      f"same weights (max |Δ| < 1e-6): {(k3_weights - weights).abs().max().item() < 1e-6}")

# %% [markdown] slideshow={"slide_type": "subslide"}
# **The fix: auxiliary-loss-free balancing** (Wang et al. 2024). After each batch, nudge the bias of every
# over-loaded expert down and of every under-loaded one up by a fixed step,
# $b_e \leftarrow b_e + \gamma\,\mathrm{sign}(\bar{n} - n_e)$, where $n_e$ is the number of tokens of the batch
# routed to expert $e$, $\bar{n}$ the mean of the $n_e$ over the experts, and $\gamma$ the step (`RATE` below,
# $10^{-3}$). No gradient flows through it and the mixing weights never see it, so the model's function is not
# distorted by a balancing term.

# %%
BALANCE_STEPS, BATCH_TOKENS, RATE = pick(300, 1000), 2048, 1e-3
batches = torch.Generator().manual_seed(2)
imbalance = []
for _ in range(BALANCE_STEPS):
    batch = torch.randint(0, len(hidden), (BATCH_TOKENS,), generator=batches)
    _, batch_indices = route(scores[batch], bias, TOP_K)
    batch_load = expert_load(batch_indices, EXPERTS).float()
    imbalance.append((batch_load.max() / batch_load.mean()).item())
    bias += RATE * torch.sign(batch_load.mean() - batch_load)

_, balanced_indices = route(scores, bias, TOP_K)
balanced_load = expert_load(balanced_indices, EXPERTS)
print(f"after {BALANCE_STEPS} bias updates: busiest expert {balanced_load.max().item() / mean_load:.2f}x the mean, "
      f"idlest {balanced_load.min().item() / mean_load:.2f}x; bias range {bias.min().item():+.3f} .. {bias.max().item():+.3f}")
settled = next(step for step, ratio in enumerate(imbalance) if ratio < 1.2)
print(f"busiest / mean per batch: {imbalance[0]:.2f} at the first update, below 1.2 from update {settled} on; "
      f"after that between {min(imbalance[settled:]):.2f} and {max(imbalance[settled:]):.2f}")
glue("ch08_imbalance_first", f"{imbalance[0]:.1f}", display=False)
glue("ch08_imbalance_settled", str(settled), display=False)
glue("ch08_imbalance_low", f"{min(imbalance[settled:]):.2f}", display=False)
glue("ch08_imbalance_high", f"{max(imbalance[settled:]):.2f}", display=False)

# %% tags=["plumbing"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [2, 1]})
positions = np.arange(EXPERTS)
before = load.numpy() / len(hidden)
after = balanced_load.numpy() / len(hidden)
axes[0].bar(positions - 0.2, before, 0.4, label="routed, no bias", color=viz.PALETTE["red"])
axes[0].bar(positions + 0.2, after, 0.4, label="routed, balanced bias", color=viz.PALETTE["blue"])
axes[0].axhline(TOP_K / EXPERTS, color=viz.INK, linestyle="--", linewidth=1, label=f"ideal routed load k/E = {TOP_K / EXPERTS:.3f}")
axes[0].set_xticks(positions, [str(e) for e in range(EXPERTS)], fontsize=7)
axes[0].set_xlabel("routed expert")
axes[0].set_ylabel("fraction of tokens processed")
axes[0].set_title("Routed expert load on real text (shared experts: 100 % of tokens)")
axes[0].legend(fontsize=8)
axes[1].plot(imbalance, color=viz.PALETTE["blue"])
axes[1].set_xlabel("bias update step")
axes[1].set_ylabel("busiest / mean load (per batch)")
axes[1].set_title("Balancing without a loss")
plt.show()

# %% [markdown]
# Left: without a bias a few experts take about twice their share and others a fraction of it; with the balanced
# bias every bar sits close to the dashed line $k/E$. Right: the busiest expert of a batch starts at
# {glue:text}`ch08_imbalance_first`× the mean, first drops below 1.2× after {glue:text}`ch08_imbalance_settled`
# updates, and from there fluctuates between {glue:text}`ch08_imbalance_low`× and
# {glue:text}`ch08_imbalance_high`×. Per batch it stays above the whole-corpus figure printed above, because one
# batch is a small sample of the text.
#
# The bias can only move tokens whose scores differ. Without the context noise, every copy of a byte has the
# same hidden state and goes to the same experts, whatever the bias; the most frequent byte of this corpus
# alone sets a floor:

# %%
counts = torch.bincount(text_ids, minlength=data.VOCAB_SIZE)
top_byte = int(counts.argmax())
share = counts.max().item() / len(text_ids)
print(f"most frequent byte {bytes([top_byte])!r}: {share:.1%} of the text -> its experts carry at least "
      f"{share / (TOP_K / EXPERTS):.1f}x the mean load")

# %% [markdown]
# Shared experts see every token; a routed expert sees about $k/E$ of them. In K3 that is $16/896$:

# %%
print(f"K3: each routed expert sees {16 / 896:.2%} of the tokens on average; the 2 shared experts see 100%")
glue("ch08_k3_share", f"{16 / 896:.2%}", display=False)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Latent experts: what "nearly halves" means
#
# K3's hidden size is $d = 7168$. Its routed experts do not read $x$ itself but a latent $z = W_{\downarrow} x$ of
# size 3584; their summed output goes back up:
#
# $$y = W_{\uparrow}\,\mathrm{RMSNorm}\Big(\sum_{e} w_e\, E_e(z)\Big) + \mathrm{Shared}(x), \qquad E_e: 3584 \to 3072 \to 3584 .$$
#
# The router still reads the full $x$. A gated expert (gate, up, down) of width $w$ on size $s$ costs $3 s w$
# multiply-adds per token, so halving $s$ halves every routed expert, but $W_\downarrow$ and $W_\uparrow$ cost
# $2 \cdot 7168 \cdot 3584$ per token on top. Per token, in multiply-adds (MACs; one multiply-add is two FLOPs):

# %% [markdown]
# ![Latent MoE: shared experts read the token, routed top-k experts work in a smaller latent space](../figures/diagram_latent_moe.svg)

# %% [markdown] tags=["notes"]
# Use the diagram: shared experts see every token at full width, the routed experts work in a
# latent of half the width, with one projection down and one up. Ask the room to estimate the
# saving before the cell prints it: exactly half for the experts, a little less once the two
# projections are paid. The FLOP counter then checks the arithmetic on the real module.

# %%
HIDDEN, LATENT, WIDTH, K3_TOP_K, K3_EXPERTS = 7168, 3584, 3072, 16, 896
SHARED_WIDTH = 2 * WIDTH      # the 2 shared experts, each as wide as a routed one, act as one wider MLP


def moe_macs(latent):
    """Multiply-adds per token of one K3 MoE layer, by part (latent=None: experts on the hidden state)."""
    size = HIDDEN if latent is None else latent
    return {"routed experts": K3_TOP_K * 3 * size * WIDTH,
            "W_down + W_up": 0 if latent is None else 2 * HIDDEN * latent,
            "shared experts": 3 * HIDDEN * SHARED_WIDTH,
            "router": HIDDEN * K3_EXPERTS}


full_width, latent_space = moe_macs(None), moe_macs(LATENT)
print("millions of multiply-adds (MACs) per token:")
print(f"{'part':18s}{'experts at 7168':>18s}{'latent 3584':>16s}")
for part in full_width:
    print(f"{part:18s}{full_width[part] / 1e6:14.1f} MMAC{latent_space[part] / 1e6:12.1f} MMAC")
routed_ratio = (latent_space["routed experts"] + latent_space["W_down + W_up"]) / full_width["routed experts"]
layer_ratio = sum(latent_space.values()) / sum(full_width.values())
print(f"routed experts alone      : {latent_space['routed experts'] / full_width['routed experts']:.3f} of the cost")
print(f"routed experts + W_down/up: {routed_ratio:.3f}")
print(f"whole MoE layer           : {layer_ratio:.3f}")
glue("ch08_routed_ratio", f"{routed_ratio:.2f}", display=False)
glue("ch08_layer_ratio", f"{layer_ratio:.2f}", display=False)
glue("ch08_routed_full_mmac", f"{full_width['routed experts'] / 1e6:,.0f}", display=False)
glue("ch08_routed_latent_mmac",
     f"{(latent_space['routed experts'] + latent_space['W_down + W_up']) / 1e6:,.0f}", display=False)

# %% [markdown]
# So the experts themselves cost exactly half; paying for the two projections brings the routed part to
# {glue:text}`ch08_routed_ratio`, and the whole MoE layer (shared experts and router unchanged) to
# {glue:text}`ch08_layer_ratio`. "Nearly halves" is right for the
# experts and generous for the layer. The same factor applies to the routed experts' *parameters*, and that is
# the bigger prize: the cell below counts what 896 experts at half size save in every MoE layer.

# %%
expert_params_saved = K3_EXPERTS * 3 * (HIDDEN - LATENT) * WIDTH
print(f"parameters saved per MoE layer: {expert_params_saved / 1e9:.1f}B "
      f"(minus {2 * HIDDEN * LATENT / 1e6:.0f}M for W_down and W_up)")

# %% [markdown] slideshow={"slide_type": "subslide"}
# **Checked against `k3lite`.** First the parameter counts: each active weight is used in one multiply-add per
# token, so the weights that `k3lite.course.accounting` counts for the published configuration must equal the
# multiply-adds above (first printed line). Then build `k3lite.layers.moe.MoE` at 1/32 of K3's sizes (all ratios
# are unchanged: every term scales by $1/32^2$), count the floating-point operations PyTorch actually runs with
# `FlopCounterMode`, and divide by two to get multiply-adds:

# %%
SCALE, TOKENS = 32, 256


def counted_macs_per_token(latent):
    seed_everything(0)
    layer = MoE(HIDDEN // SCALE, K3_EXPERTS // SCALE, K3_TOP_K, WIDTH // SCALE, num_shared_experts=2,
                latent_size=None if latent is None else latent // SCALE)
    x = torch.randn(TOKENS, HIDDEN // SCALE)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(x)
    return counter.get_total_flops() / 2 / TOKENS


published = K3Config.published()
moe_params = accounting.k3_moe_layer_parameters(published)
print(f"k3lite.course.accounting, published K3: {published.top_k} experts x {accounting.k3_expert_parameters(published):,d} "
      f"weights = {published.top_k * accounting.k3_expert_parameters(published) / 1e6:.1f}M (routed, per token); "
      f"always-on weights {moe_params['always'] / 1e6:.1f}M "
      f"(notebook: {latent_space['routed experts'] / 1e6:.1f}M and "
      f"{(latent_space['W_down + W_up'] + latent_space['shared experts'] + latent_space['router']) / 1e6:.1f}M)")

for latent, analytic in ((None, full_width), (LATENT, latent_space)):
    counted = counted_macs_per_token(latent)
    label = "experts at d" if latent is None else "latent experts"
    print(f"{label:15s}: counted {counted:,.0f} MACs/token at 1/32 scale, formula / 32^2 = "
          f"{sum(analytic.values()) / SCALE**2:,.0f} MACs/token")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. SiTU: a bounded gated activation
#
# The gated MLP (SwiGLU, Shazeer 2020) computes $h = \mathrm{SiLU}(g) \odot u$ with $g = W_g x$, $u = W_u x$.
# Nothing bounds it: SiLU grows like $g$ and $u$ is linear, so $h$ grows like the *product* of two activations. One
# token with a large activation produces a quadratically larger value, which is exactly what low-precision formats
# (bf16, FP8) and training stability dislike (Fishman et al. 2024, [arXiv:2409.12517](https://arxiv.org/abs/2409.12517),
# trace FP8 training divergences to SwiGLU amplifying outliers):

# %% [markdown] tags=["notes"]
# A gated MLP multiplies two unbounded activations, so one large input becomes a quadratically
# larger output, which low-precision formats handle badly. Ask the room where a cap should go;
# SiTU caps both factors with a tanh and stays close to SiLU where values are small.

# %%
for scale in (1, 10, 100):
    g = scale * torch.randn(4096, generator=torch.Generator().manual_seed(3))
    u = scale * torch.randn(4096, generator=torch.Generator().manual_seed(4))
    print(f"inputs of scale {scale:3d}: max |SiLU(g) * u| = {(F.silu(g) * u).abs().max().item():10.1f}, "
          f"max |SiTU-GLU| = {situ_glu(g, u).abs().max().item():6.1f}")

# %% [markdown]
# K3's SiTU (soft-capped SiLU; K3's configuration) puts a tanh cap on both factors:
#
# $$\mathrm{SiTU}_\beta(x) = \beta \tanh(x/\beta)\,\sigma(x), \qquad
#   h = \mathrm{SiTU}_{\beta_1}(g) \cdot \beta_2 \tanh(u / \beta_2), \qquad \beta_1 = 4,\ \beta_2 = 25 .$$
#
# For $|x| \ll \beta$, $\beta\tanh(x/\beta) \approx x$ and SiTU is SiLU; as $\beta \to \infty$ it *is* SiLU. Since
# $|\tanh| < 1$ and $0 < \sigma < 1$, $|\mathrm{SiTU}_\beta(x)| < \beta$ and $|h| < \beta_1 \beta_2 = 100$ in exact
# arithmetic. In floating point the bound is reached: for large inputs $\tanh$ and $\sigma$ round to exactly 1, so
# the computed $|h| \le 100$, with equality (the cell below prints the largest $|h|$ it finds). The constants are fixed, not learned.

# %%
x = torch.linspace(-12, 12, 2401, dtype=torch.float64)
for beta in (4.0, 25.0, 100.0, 1000.0):
    print(f"beta = {beta:6.0f}: max |SiTU - SiLU| on [-12, 12] = {(situ(x, beta) - F.silu(x)).abs().max().item():.4f}")
huge = 1e4 * torch.randn(100_000, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
bound = situ_glu(huge, huge.flip(0)).abs().max().item()
print(f"inputs up to {huge.abs().max().item():,.0f}: max |h| = {bound:.2f} <= beta1 * beta2 = {4.0 * 25.0:.0f}")

# %%
fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
x_plot = torch.linspace(-8, 40, 961)
axes[0].plot(x_plot, F.silu(x_plot), color=viz.PALETTE["black"], label="SiLU")
for beta, color in ((4.0, viz.PALETTE["blue"]), (10.0, viz.PALETTE["orange"]), (25.0, viz.PALETTE["green"])):
    axes[0].plot(x_plot, situ(x_plot, beta), color=color, label=f"SiTU, β = {beta:.0f}")
    axes[0].axhline(beta, color=color, linestyle=":", linewidth=1)
axes[0].set_ylim(-2, 42)
axes[0].set_xlabel("gate pre-activation x")
axes[0].set_ylabel("activation")
axes[0].set_title("SiTU caps SiLU at β (dotted)")
axes[0].legend()
grid = torch.linspace(-60, 60, 241)
gate_grid, up_grid = torch.meshgrid(grid, grid, indexing="ij")
surface = situ_glu(gate_grid, up_grid)
image = axes[1].imshow(surface.numpy(), extent=(-60, 60, -60, 60), origin="lower", cmap=viz.diverging_cmap(),
                       vmin=-100, vmax=100, aspect="auto")
axes[1].set_xlabel("up u")
axes[1].set_ylabel("gate g")
axes[1].set_title("h = SiTU₄(g) · 25 tanh(u/25), |h| ≤ 100")
axes[1].grid(False)
plt.colorbar(image, ax=axes[1], label="h")
plt.show()

# %% [markdown]
# The notebook's formula and `k3lite.ops.situ` agree (the reference path of `situ_glu`):

# %%
gate = 30 * torch.randn(1000, generator=torch.Generator().manual_seed(6))
up = 30 * torch.randn(1000, generator=torch.Generator().manual_seed(7))
ours = 4.0 * torch.tanh(gate / 4.0) * torch.sigmoid(gate) * (25.0 * torch.tanh(up / 25.0))
gap = (situ_glu(gate, up, backend="torch") - ours).abs().max().item()
print(f"k3lite situ_glu = notebook formula (max |Δ| < 1e-5): {gap < 1e-5}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The price: SiTU is only cheap when fused
#
# On a GPU, an elementwise operation whose arithmetic is cheap is limited by memory traffic, not by arithmetic
# (chapter 11 measures this). Written as ordinary PyTorch, run operation by operation ("eager" mode), SiTU-GLU is a
# chain of small kernels, each reading its inputs from memory and writing its result back. Let us list the
# operations PyTorch really runs:

# %% [markdown] tags=["notes"]
# The price of the cap is memory traffic: unfused, each small elementwise operation reads and
# writes the whole tensor again. Ask the room to count the bytes moved by the operation list the
# cell prints, against one fused kernel that reads the gate and up projections once.

# %%
from torch.utils._python_dispatch import TorchDispatchMode


class TrafficLog(TorchDispatchMode):
    """Records every aten operation and how many full-size tensors it reads and writes."""

    def __init__(self):
        super().__init__()
        self.ops, self.passes = [], 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        reads = sum(isinstance(arg, torch.Tensor) and arg.numel() > 1 for arg in args)
        self.ops.append(func.__name__.split(".")[0])
        self.passes += reads + 1
        return result


def traffic(fn):
    gate, up = torch.randn(8), torch.randn(8)
    with TrafficLog() as log:
        fn(gate, up)
    return log


silu_log = traffic(lambda g, u: F.silu(g) * u)
situ_log = traffic(lambda g, u: situ_glu(g, u, backend="torch"))
FUSED_PASSES = 3                                  # read gate, read up, write h
print(f"SiLU-GLU, eager: {len(silu_log.ops)} kernels {silu_log.ops}, {silu_log.passes} tensor passes")
print(f"SiTU-GLU, eager: {len(situ_log.ops)} kernels {situ_log.ops}, {situ_log.passes} tensor passes")
print(f"either one fused: 1 kernel, {FUSED_PASSES} passes -> eager SiTU moves {situ_log.passes / FUSED_PASSES:.1f}x "
      f"the bytes of a fused SiLU-GLU")
print(f"eager SiTU / eager SiLU: {situ_log.passes / silu_log.passes:.1f}x the passes")
glue("ch08_eager_pass_ratio", f"{situ_log.passes / silu_log.passes:.1f}", display=False)

# %% [markdown]
# A fused kernel (one program reads `gate` and `up` once, computes everything in registers, writes `h` once)
# moves 3 tensors whatever the formula; with the GPU's approximate tanh and sigmoid (the end of this section) the
# arithmetic stays cheaper than the trip to memory. The eager version moves several times more. Measured here, on this CPU (the numbers vary from run to run and machine to machine):

# %%
# NBVAL_IGNORE_OUTPUT
def best_ms(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * min(times)


rows, cols = pick((1024, 3072), (8192, 3072))
big_gate = torch.randn(rows, cols, generator=torch.Generator().manual_seed(8))
big_up = torch.randn(rows, cols, generator=torch.Generator().manual_seed(9))
silu_ms = best_ms(lambda: F.silu(big_gate) * big_up)
situ_ms = best_ms(lambda: situ_glu(big_gate, big_up, backend="torch"))
print(f"[{rows} x {cols}] float32 on the CPU: SiLU-GLU eager {silu_ms:.1f} ms, SiTU-GLU eager {situ_ms:.1f} ms "
      f"({situ_ms / silu_ms:.1f}x)")
tanh_ms, scale_ms = best_ms(lambda: torch.tanh(big_gate)), best_ms(lambda: big_gate * 2.0)
print(f"one read and one write each: tanh {tanh_ms:.1f} ms, multiply by 2 {scale_ms:.1f} ms ({tanh_ms / scale_ms:.1f}x)")

# %% [markdown] slideshow={"slide_type": "subslide"} tags=["reading"]
# ### On an H200
#
# First, the CPU lines above against the pass counts before them. Eager SiTU makes
# {glue:text}`ch08_eager_pass_ratio`× the passes of eager SiLU; if its time ratio on your CPU is larger, the extra
# time is arithmetic, not traffic. The last line tests that directly: a tanh and a multiplication over the same
# tensor move the same bytes, so the gap between their times is what computing tanh costs on this CPU. A GPU's
# special-function units (hardware beside each multiprocessor's multiply-add units that evaluates exponentials,
# reciprocals and tanh approximately, as single instructions: NVIDIA's CUDA C++ Programming Guide, "Arithmetic
# Instructions", and PTX ISA, `ex2.approx`, `rcp.approx`, `tanh.approx`) make tanh and the sigmoid cheap (the end of
# this section), which is why the GPU measurement below follows the traffic count.
#
# `python -m benchmarks.bench` measures the four versions on one H200 in bf16 (fused SiTU is the Triton kernel
# `k3lite.kernels.situ`, fused SiLU-and-mul a Triton kernel of the same shape) and stores the result in
# `benchmarks/results/bench_h200.json`. The worklog (section "Kimi K3") and the 机器之心 summary claim an
# unfused SiTU runs almost 3× slower than the fused SiLU path.

# %% [markdown] tags=["notes"]
# Reading: the H200 measurements of fused and unfused SiTU from `benchmarks/results/bench_h200.json`. Quote
# only the conclusion in a lecture: fusion is what makes the cap affordable.

# %% tags=["plumbing"]
BENCH = viz.BENCH_RESULTS_DIR / "bench_h200.json"
bench = json.loads(BENCH.read_text()) if BENCH.exists() else {}
situ_bench = bench.get("situ", {})
VERSIONS = (("silu_mul_fused", "SiLU-GLU fused"), ("silu_mul_eager", "SiLU-GLU eager"),
            ("situ_eager", "SiTU-GLU eager"), ("situ_fused", "SiTU-GLU fused"))
if not situ_bench:
    print("benchmarks/results/bench_h200.json has no SiTU measurement yet: run `python -m benchmarks.bench` on an H200 "
          "and re-execute this chapter.")
else:
    print(f"{bench['meta']['device'].split(' (')[0]}, {situ_bench['shape'][0]} x {situ_bench['shape'][1]}, "
          f"{situ_bench['dtype']}:")
    print(f"{'':22s}{'forward':>10s}{'fwd+bwd':>10s}   (ms)")
    for name, label in VERSIONS:
        print(f"{label:22s}{situ_bench[name + '_fwd_ms']:10.4f}{situ_bench[name + '_fwd+bwd_ms']:10.4f}")
    for mode in ("fwd", "fwd+bwd"):
        unfused = situ_bench[f"situ_eager_{mode}_ms"] / situ_bench[f"silu_mul_fused_{mode}_ms"]
        print(f"{mode:8s}: SiTU eager / SiLU fused = {unfused:.2f}x; "
              f"SiTU fused / SiLU fused = {situ_bench[f'fused_over_silu_mul_{mode}']:.2f}x")
    for mode in ("fwd", "fwd+bwd"):
        if f"situ_fused_{mode}_gpu_ms" in situ_bench:
            gpu = {name: situ_bench[f"{name}_{mode}_gpu_ms"] for name, _ in VERSIONS}
            print(f"{mode}, GPU kernel time only (ms): " + ", ".join(f"{label} {gpu[name]:.4f}" for name, label in VERSIONS)
                  + f"; SiTU eager / SiLU fused = {gpu['situ_eager'] / gpu['silu_mul_fused']:.2f}x")
    print(f"forward, bytes moved by eager SiTU / fused SiLU (counted above): {situ_log.passes / FUSED_PASSES:.1f}x")
    H200_TB_PER_S = 4.8   # NVIDIA's H200 product page (nvidia.com/en-us/data-center/h200): HBM3e bandwidth
    print(f"fused SiTU forward streams {situ_bench['situ_fused_fwd_tb_per_s']:.1f} TB/s of the H200's "
          f"{H200_TB_PER_S} TB/s peak ({situ_bench['situ_fused_fwd_tb_per_s'] / H200_TB_PER_S:.0%})")
    for mode in ("fwd", "fwd+bwd"):
        key = mode.replace("+", "")
        glue(f"ch08_eager_over_fused_wall_{key}",
             f"{situ_bench[f'situ_eager_{mode}_ms'] / situ_bench[f'silu_mul_fused_{mode}_ms']:.1f}", display=False)
        if f"situ_fused_{mode}_gpu_ms" in situ_bench:
            glue(f"ch08_eager_over_fused_gpu_{key}",
                 f"{situ_bench[f'situ_eager_{mode}_gpu_ms'] / situ_bench[f'silu_mul_fused_{mode}_gpu_ms']:.0f}",
                 display=False)
    glue("ch08_bytes_ratio", f"{situ_log.passes / FUSED_PASSES:.1f}", display=False)
    glue("ch08_silu_fused_fwd_wall", f"{situ_bench['silu_mul_fused_fwd_ms']:.3f}", display=False)
    glue("ch08_silu_fused_fwd_gpu", f"{situ_bench.get('silu_mul_fused_fwd_gpu_ms', float('nan')):.3f}", display=False)
    glue("ch08_silu_fused_fwdbwd_gpu", f"{situ_bench.get('silu_mul_fused_fwd+bwd_gpu_ms', float('nan')):.2f}",
         display=False)
    glue("ch08_silu_fused_fwdbwd_wall", f"{situ_bench['silu_mul_fused_fwd+bwd_ms']:.2f}", display=False)
    glue("ch08_fused_over_silu_wall_fwd", f"{situ_bench['fused_over_silu_mul_fwd']:.2f}", display=False)
    if "situ_fused_fwd_gpu_ms" in situ_bench:
        host = {name: 1e3 * (situ_bench[f"{name}_fwd_ms"] - situ_bench[f"{name}_fwd_gpu_ms"]) for name, _ in VERSIONS}
        print("forward, wall minus GPU time (us): " + ", ".join(f"{label} {host[name]:.0f}" for name, label in VERSIONS))
        glue("ch08_host_us_situ_fused_fwd", f"{host['situ_fused']:.0f}", display=False)
        glue("ch08_host_us_silu_fused_fwd", f"{host['silu_mul_fused']:.0f}", display=False)
    glue("ch08_situ_shape", f"{situ_bench['shape'][0]} × {situ_bench['shape'][1]}", display=False)

# %% tags=["plumbing"]
if situ_bench:
    fig, ax = plt.subplots(figsize=(7, 3.4))
    labels = [label for _, label in VERSIONS]
    for offset, mode, color in ((-0.2, "fwd", viz.PALETTE["blue"]), (0.2, "fwd+bwd", viz.PALETTE["orange"])):
        ax.barh(np.arange(len(VERSIONS)) + offset, [situ_bench[f"{name}_{mode}_ms"] for name, _ in VERSIONS], 0.4,
                label=mode, color=color)
    ax.set_yticks(np.arange(len(VERSIONS)), labels)
    ax.set_xlabel("time on one H200 (ms, median)")
    ax.set_title(f"Gated activation, {situ_bench['shape'][0]} x {situ_bench['shape'][1]} {situ_bench['dtype']}")
    ax.legend()
    plt.show()

# %% [markdown]
# Read the GPU-time lines against the traffic count. In the forward pass eager SiTU keeps the GPU busy about
# {glue:text}`ch08_eager_over_fused_gpu_fwd`× as long as fused SiLU, close to the {glue:text}`ch08_bytes_ratio`×
# ratio of bytes the two move: on a GPU an elementwise chain is priced by memory traffic.
#
# The wall-clock lines add what the host spends around the kernels: launching them, and in the backward autograd's
# bookkeeping. Wall minus GPU time measures it. At {glue:text}`ch08_situ_shape` a fused kernel runs for a few
# hundredths of a millisecond, so that fixed cost can be a large share of a fused version's wall time, and it varies
# from kernel to kernel: in the forward it was {glue:text}`ch08_host_us_situ_fused_fwd` µs for fused SiTU and
# {glue:text}`ch08_host_us_silu_fused_fwd` µs for fused SiLU ({glue:text}`ch08_silu_fused_fwd_wall` ms of wall time
# for {glue:text}`ch08_silu_fused_fwd_gpu` ms on the GPU). That is why the wall-clock table puts fused SiTU's forward
# at {glue:text}`ch08_fused_over_silu_wall_fwd`× fused SiLU's: a difference in launch cost, not a faster kernel. It
# also pulls the wall-clock forward ratio of eager SiTU over fused SiLU down to
# {glue:text}`ch08_eager_over_fused_wall_fwd`×. With the backward the wall-clock gap is
# {glue:text}`ch08_eager_over_fused_wall_fwdbwd`×, below the article's "almost 3×", but the fused SiLU that this
# ratio divides by keeps the GPU busy for {glue:text}`ch08_silu_fused_fwdbwd_gpu` ms of the
# {glue:text}`ch08_silu_fused_fwdbwd_wall` ms it takes, and that fixed cost flatters the slow version. Counted in GPU
# time, eager SiTU is {glue:text}`ch08_eager_over_fused_gpu_fwd`× slower forward and
# {glue:text}`ch08_eager_over_fused_gpu_fwdbwd`× with the backward.
#
# The chart above shows wall-clock time, so it carries that fixed cost: there fused SiLU's forward+backward even
# takes longer than its eager version. In GPU time (the "GPU kernel time only" lines), fused, both are one pass
# over memory (3 tensors read or written in the forward) and SiTU runs level with SiLU.
# That took one decision in the kernel: its two tanh and its sigmoid go to the GPU's special-function unit in
# approximate form (`tanh.approx`, an approximate reciprocal), whose documented relative error (NVIDIA's PTX ISA),
# about $2^{-11}$, is below the bf16 rounding of the result, and the kernel stays bound by memory traffic rather
# than by arithmetic (the "TB/s" line above). A model component is only as cheap as the kernel that runs it:
# without the fused kernel, K3's activation would pay the eager price.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# ### Exercise 1 — routing
# Write `route(scores, bias, top_k)` for sigmoid scores `[N, E]` and a selection bias `[E]`, returning the mixing
# weights `[N, k]` and the chosen expert indices `[N, k]`. The bias only picks the experts (top $k$ of
# `scores + bias`); the weights are the selected *scores* (not scores + bias), renormalised to sum to 1 per token.
# The order of the $k$ indices within a token does not matter to the checker, as long as each weight stays
# next to its index.

# %% [markdown] tags=["notes"]
# Exercise 1 (routing with a selection-only bias) is the one to do in the room; exercises 2 (what
# a latent saves) and 3 (SiTU) are short homework. Exercise 4 is a show of hands (near β, near β/2, or far below
# β?), exercise 5 a transfer to the capacity limits that bias balancing replaced, exercise 6 a discussion.

# %%
from k3lite.exercises import ch08


def my_route(scores, bias, top_k):
    raise NotImplementedError


# %%
ch08.check_route(my_route);

# %% tags=["solution"]
# Solution: the bias picks, the scores weigh.
def solution_route(scores, bias, top_k):
    indices = torch.topk(scores + bias, top_k, dim=-1).indices
    selected = scores.gather(-1, indices)
    return selected / selected.sum(-1, keepdim=True), indices


ch08.check_route(solution_route);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 — what a latent saves
# Write `routed_macs(hidden, latent, expert_width, top_k)`: multiply-adds per token of the routed experts of one
# layer (gated experts: gate, up, down), including `W_down` and `W_up` when `latent` is not `None`; the router and
# the shared experts are excluded.

# %%
def my_routed_macs(hidden, latent, expert_width, top_k):
    raise NotImplementedError


# %%
ch08.check_routed_macs(my_routed_macs);

# %% tags=["solution"]
# Solution
def solution_routed_macs(hidden, latent, expert_width, top_k):
    size = hidden if latent is None else latent
    projections = 0 if latent is None else 2 * hidden * latent
    return top_k * 3 * size * expert_width + projections


ch08.check_routed_macs(solution_routed_macs);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 — SiTU
# Write `situ(x, beta)`: $\beta \tanh(x/\beta)\,\sigma(x)$ elementwise, returning a tensor of the same shape as
# `x`; `beta` is a float.

# %%
def my_situ(x, beta):
    raise NotImplementedError


# %%
ch08.check_situ(my_situ);

# %% tags=["solution"]
# Solution
def solution_situ(x, beta):
    return beta * torch.tanh(x / beta) * torch.sigmoid(x)


ch08.check_situ(solution_situ);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4 (predict, then run) — where does SiTU stop being SiLU?
# Take $\beta = 10$. For positive inputs, SiTU is below SiLU everywhere. Up to which input $x$ does it stay within
# 1 % of SiLU? Return your prediction from `predicted_situ_departure()` *before* running the cell after it; the
# checker accepts a prediction within 30 %.

# %%
def predicted_situ_departure():
    raise NotImplementedError  # return your prediction, an input x


# %%
DEPARTURE_BETA = 10.0
x_grid = torch.linspace(0.001, 3 * DEPARTURE_BETA, 30_001, dtype=torch.float64)
relative_gap = 1 - situ(x_grid, DEPARTURE_BETA) / F.silu(x_grid)
measured_situ_departure = x_grid[relative_gap > 0.01][0].item()
for x_at in (1.0, 2.0, 5.0, 10.0):
    print(f"x = {x_at:4.1f}: SiTU is {100 * (1 - situ(torch.tensor(x_at), DEPARTURE_BETA) / F.silu(torch.tensor(x_at))):5.2f} % below SiLU")
print(f"first x more than 1 % below: {measured_situ_departure:.2f}")

# %%
ch08.check_situ_departure_prediction(predicted_situ_departure, measured_situ_departure, beta=DEPARTURE_BETA);


# %% tags=["solution"]
# Solution: tanh(u)/u ≈ 1 − u²/3, which is 0.99 at u = √0.03.
def predicted_situ_departure_solution():
    return DEPARTURE_BETA * 0.03 ** 0.5


ch08.check_situ_departure_prediction(predicted_situ_departure_solution, measured_situ_departure, beta=DEPARTURE_BETA);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 5 (transfer) — what would a capacity limit drop?
# Before bias balancing, MoE layers such as GShard (Lepikhin et al. 2020,
# [arXiv:2006.16668](https://arxiv.org/abs/2006.16668)) and Switch Transformer (Fedus, Zoph and Shazeer 2021,
# [arXiv:2101.03961](https://arxiv.org/abs/2101.03961), section 2.2) gave each expert a fixed *capacity* per batch and
# dropped the assignments beyond it (the token then skips that expert). Write
# `dropped_assignments(indices, num_experts, capacity)` for the chosen experts `indices [N, k]` of a batch:
# return how many (token, expert) assignments are turned away. The cell after the solution measures the same count,
# as a share of all assignments, on section 1's router before and after balancing, with a capacity of 1.25 times
# the mean load.

# %%
def dropped_assignments(indices, num_experts, capacity):
    raise NotImplementedError


# %%
ch08.check_dropped_assignments(dropped_assignments);


# %% tags=["solution"]
# Solution: only an expert's own load counts against its capacity.
def dropped_assignments_solution(indices, num_experts, capacity):
    load = torch.bincount(indices.reshape(-1), minlength=num_experts)
    return int((load - capacity).clamp_min(0).sum())


ch08.check_dropped_assignments(dropped_assignments_solution);

# %%
# What exercise 5 shows: section 1's loads, without and with the bias, against a capacity of 1.25 times the mean.
capacity = int(1.25 * indices.numel() / EXPERTS)
dropped_share = {label: ch08.dropped_share(chosen, EXPERTS, capacity)    # the checker's reference, as a share
                 for label, chosen in (("no bias", indices), ("balanced bias", balanced_indices))}
for label, share_dropped in dropped_share.items():
    print(f"{label:>13}: {share_dropped:.1%} of the assignments dropped at capacity {capacity:,d}")
glue("ch08_dropped_no_bias", f"{dropped_share['no bias']:.1%}", display=False)
glue("ch08_dropped_balanced", f"{dropped_share['balanced bias']:.1%}", display=False)

# %% [markdown]
# With a capacity of 1.25 times the mean load, the router without a bias turns away
# {glue:text}`ch08_dropped_no_bias` of its (token, expert) assignments and the balanced router
# {glue:text}`ch08_dropped_balanced`. A capacity limit takes a token away from an expert it chose; the bias instead
# moves borderline tokens to other experts, so every token keeps its $k$ experts.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 6 (open question) — why must the bias not weigh?
# The selection bias picks the experts but the mixing weights are computed from the scores alone. Suppose the
# bias were added to the weights too. What would change in what the layer computes, and why would that be a worse
# way to balance than the auxiliary loss it replaces? And why is dropping tokens (exercise 5) not a good
# alternative either?

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# The bias is set by a controller that looks only at load, not at the loss. If it entered the weights, balancing
# would change the layer's output: an over-loaded expert's contribution would be scaled down for every token that
# still picks it, and an idle expert's scaled up, regardless of whether that helps the prediction. The function
# the model learned would then drift with the load statistics of the batch, and the gradient would have to fight
# it, which is exactly the interference an auxiliary balancing loss causes and that the loss-free method
# (Wang et al. 2024, arXiv:2408.15664) was designed to avoid. As a selection-only term the bias changes only
# *which* experts a borderline token visits; the weights, and the gradient through them, are the model's own.
# Dropping is worse still: a dropped token skips an expert it needed (only the residual and shared experts
# carry it), so the output depends on its position in the batch and on what other tokens did, and the loss of
# information grows with the imbalance. A good answer names both effects: balance without distorting the function,
# and no token left behind.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Summary
#
# - A sigmoid router with top-k picks experts; a selection-only bias, nudged by the measured load, balances them
#   without an auxiliary loss and without touching the mixing weights.
# - Latent experts (3584 instead of 7168) cost exactly half; with `W_down` and `W_up` the routed part costs
#   {glue:text}`ch08_routed_ratio` and the whole MoE layer {glue:text}`ch08_layer_ratio` of the full-width version.
# - SiTU caps SiLU with tanh: $|h| \le \beta_1\beta_2 = 100$, SiLU recovered as $\beta \to \infty$. Eager PyTorch runs it as a
#   chain of memory-bound kernels (on an H200 several times slower than fused SiLU); fused, it comes close to SiLU.

# %% [markdown] tags=["notes"]
# Three ideas: balance the load with a bias that picks but does not weigh, put the routed experts
# in a latent to halve their cost, and cap the activation, fused. Ask which of the three changes
# the model's function and which only its cost.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. K3 routes each token to 16 of 896 experts. What share of the tokens does each routed expert see when the load
#    is perfectly balanced?
# 2. Per token, how many multiply-adds do K3's 16 routed experts cost at full width (7168), and in the 3584-wide
#    latent with its two projections?
# 3. Why does $|h| \le 100$ hold for SiTU's gated MLP with $\beta_1 = 4$, $\beta_2 = 25$?
# 4. Why does the balancing bias not distort the function the model computes?
#
# <details>
# <summary>Short answers</summary>
#
# 1. $16 / 896 = 1/56$, {glue:text}`ch08_k3_share`; a shared expert sees every token.
# 2. Full width: $16 \cdot 3 \cdot 7168 \cdot 3072$, {glue:text}`ch08_routed_full_mmac` million. Latent:
#    $16 \cdot 3 \cdot 3584 \cdot 3072 + 2 \cdot 7168 \cdot 3584$, {glue:text}`ch08_routed_latent_mmac` million,
#    {glue:text}`ch08_routed_ratio` of it: "nearly halves".
# 3. $|\beta_1 \tanh(x/\beta_1)\,\sigma(x)| < \beta_1$ and $|\beta_2\tanh(u/\beta_2)| < \beta_2$, so their product
#    is below $\beta_1\beta_2 = 100$ (equal to it only after rounding).
# 4. It only changes *which* experts are selected; the mixing weights are the selected raw scores, renormalised, and
#    no loss term or gradient comes from the bias.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Shazeer et al. (2017), *Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer*:
#   [arXiv:1701.06538](https://arxiv.org/abs/1701.06538).
# - Fedus, Zoph and Shazeer (2021), *Switch Transformers: Scaling to Trillion Parameter Models with Simple and
#   Efficient Sparsity*: [arXiv:2101.03961](https://arxiv.org/abs/2101.03961): routing and the load-balancing
#   auxiliary loss that section 1 does without.
# - Lepikhin et al. (2020), *GShard: Scaling Giant Models with Conditional Computation and Automatic Sharding*:
#   [arXiv:2006.16668](https://arxiv.org/abs/2006.16668): expert capacity, exercise 5.
# - Wang et al. (2024), *Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts*:
#   [arXiv:2408.15664](https://arxiv.org/abs/2408.15664): the selection-only bias and its update; section 1.
# - DeepSeek-AI (2024), *DeepSeek-V3 Technical Report*: [arXiv:2412.19437](https://arxiv.org/abs/2412.19437):
#   §2.1.2, sigmoid routing with auxiliary-loss-free balancing, and shared experts.
# - Shazeer (2020), *GLU Variants Improve Transformer*: [arXiv:2002.05202](https://arxiv.org/abs/2002.05202): the
#   gated MLP (SwiGLU) that SiTU modifies; section 3.
# - Fishman, Chmiel, Banner and Soudry (2024), *Scaling FP8 training to trillion-token LLMs*:
#   [arXiv:2409.12517](https://arxiv.org/abs/2409.12517): SwiGLU's outlier amplification in long FP8 training;
#   section 3.
# - Elfwing, Uchibe and Doya (2017), *Sigmoid-Weighted Linear Units for Neural Network Function Approximation in
#   Reinforcement Learning*: [arXiv:1702.03118](https://arxiv.org/abs/1702.03118): SiLU.
# - Moonshot AI, the published configuration of Kimi K3 (July 2026), transcribed field by field in
#   `k3lite.models.k3.K3Config.published()`; no stable public address is recorded for it in the course's sources:
#   896 routed experts, top-16, 2 shared, the 3584-wide latent, SiTU with $\beta_1 = 4$, $\beta_2 = 25$.
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); section "Kimi K3" (latent experts "nearly halve" the FLOPs; an
#   unfused SiTU is "almost 3x slower").
# - 机器之心 (Synced), *From GPT-2 to Kimi K3: Seven Years of Architecture Upgrades That Go Far Beyond Parameter Count*
#   (29 July 2026, published on juejin.cn), and a bilingual (Chinese and English) abstract of the worklog; no stable
#   public address is recorded for them: the same two claims, and the definition of SiTU.
# - NVIDIA, [PTX ISA](https://docs.nvidia.com/cuda/parallel-thread-execution/): the approximate `tanh` and
#   reciprocal instructions and their documented error; section 4.
