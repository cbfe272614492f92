# %% [markdown] slideshow={"slide_type": "slide"}
# # 05 · Gated DeltaNet: learning to forget
#
# DeltaNet (chapters 03 and 04) gave the fixed-size memory of linear attention a way to *correct*
# itself: before writing $v_t$ under key $k_t$ it reads what the memory already returns for $k_t$ and
# writes only the difference,
#
# $$S_t = S_{t-1} + \beta_t\, k_t \big(v_t - S_{t-1}^\top k_t\big)^\top .$$
#
# That fixes one association at a time. This chapter asks what it cannot do: **throw away many
# associations at once** when the context changes (a new document, a new speaker, a new sub-task).
# The delta rule only forgets an association when a new value arrives *for the same key*; everything
# else stays in the memory, stale, taking capacity from what comes next.
#
# The fix is one number per token: a decay $\alpha_t \in (0, 1]$ applied to the whole memory before the
# delta update. That is the gated delta rule of Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024,
# [arXiv:2412.06464](https://arxiv.org/abs/2412.06464)). At the end, trained models from the
# course's GPU bake-off show a trap (a gate that never gated), then test the layer as published: on a recall task
# at a small width it rarely learns, where the delta rule without a gate always does, and two one-change variants
# find which part of the layer is to blame.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 3 h 30 min for a motivated student working alone: reading, running every cell, the exercises
# and the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. explain, with the context-switch experiment, why the delta rule cannot clear many stale associations at once;
# 2. implement one step of the gated delta rule in the right order (decay, then the delta correction against the
#    decayed state) and check it against `k3lite.ops.gated_delta_rule`;
# 3. compute the cumulative decay matrix $\Gamma_{ri} = \exp(G_r - G_i)$ from a prefix sum of log-gates, and explain
#    why it must never be formed as $e^{G_r} e^{-G_i}$;
# 4. derive and implement one chunk of Gated DeltaNet in the WY/UT form with the decay folded in;
# 5. check whether a trained gate ever gated, from its retention at initialisation and after training, and say
#    why a layer named after a published layer must match its initialisation.
#
# **Prerequisites.**
#
# - Chapter 03 (the delta rule) and chapter 04 (the WY/UT chunk).
# - Logarithms and exponentials, and prefix sums: PyTorch's
#   [`torch.cumsum`](https://pytorch.org/docs/stable/generated/torch.cumsum.html).
# - Float32's range and what overflows: Goldberg (1991),
#   [doi:10.1145/103162.103163](https://doi.org/10.1145/103162.103163).
# - Optional: the decay of Mamba-2, Dao and Gu (2024), [arXiv:2405.21060](https://arxiv.org/abs/2405.21060).

# %% [markdown] tags=["notes"]
# One question for the hour: how does a fixed-size memory throw away many associations at once? The delta
# rule cannot; one number per token can. End with trained evidence, including the parts that did not work.

# %% slideshow={"slide_type": "skip"}
import inspect
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from myst_nb import glue

from k3lite.course import viz
from k3lite.layers.kda_layer import KDALayer
from k3lite.ops import delta_rule, gated_delta_rule
from k3lite.course.runtime import seed_everything

viz.use_style()
# One thread, as in chapter 01: a product split over two threads adds in a different order, and the
# printed numbers should not depend on the machine's core count.
torch.set_num_threads(1)
seed_everything(0)
torch.set_printoptions(precision=3)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The delta rule at a context switch
#
# A small memory experiment, no training. Keys are random unit vectors in $K = 16$ dimensions, values
# random unit vectors. We store a set **A** of associations, then the context switches and we store a
# set **B** of 8 new ones, with new keys. At the end we read every key back, $\hat v = S^\top k$, and
# call a read *recalled* when the stored value closest in direction to $\hat v$ (among all values of A
# and B) is the right one. Every write uses $\beta = 0.5$, the middle of its range $(0, 1)$; section 4
# repeats the experiment at $\beta = 0.3$ and $\beta = 1$.
#
# First the memory loop for one head, written for a batch of independent trials. It already takes a
# log-decay `g` per token; for the plain delta rule we pass `g = 0` (a decay factor of 1).

# %% [markdown] tags=["notes"]
# A pure memory experiment, no training: store set A, switch, store set B, read everything back. The point
# to land: stale associations linger, and past capacity they crowd out the new ones.

# %%
def write_all(keys, values, g, beta):
    """Run the gated delta rule over [trials, T, K] keys and [trials, T, V] values; return S [trials, K, V].

    g [trials, T] is the log of the decay applied before each write (0 = plain delta rule).
    """
    trials, steps, K = keys.shape
    S = torch.zeros(trials, K, values.shape[-1])
    for t in range(steps):
        S = torch.exp(g[:, t])[:, None, None] * S
        error = values[:, t] - torch.einsum("nk,nkv->nv", keys[:, t], S)
        S = S + beta * torch.einsum("nk,nv->nkv", keys[:, t], error)
    return S


def recalled(S, keys, values):
    """[trials, T] booleans: is the stored value nearest (in cosine) to Sᵀk the one written under k?"""
    reads = torch.einsum("ntk,nkv->ntv", keys, S)
    similarity = F.normalize(reads, dim=-1) @ F.normalize(values, dim=-1).transpose(1, 2)
    return similarity.argmax(dim=-1) == torch.arange(keys.shape[1])


def context_switch_sets(num_a, num_b, dim=16, trials=200, seed=0):
    """Keys and values of set A followed by set B, every key and value a random unit vector."""
    generator = torch.Generator().manual_seed(seed)
    keys = F.normalize(torch.randn(trials, num_a + num_b, dim, generator=generator), dim=-1)
    values = F.normalize(torch.randn(trials, num_a + num_b, dim, generator=generator), dim=-1)
    return keys, values


# %% [markdown]
# With 8 associations in A and 8 in B, 16 in all, the memory is exactly at its nominal capacity
# ($K = 16$ orthogonal directions). The plain delta rule:

# %%
NUM_B, BETA = 8, 0.5


def run_switch(num_a, switch_log_decay, beta=BETA):
    """Recall of A and of B after storing A, switching (gate exp(switch_log_decay)), storing B."""
    keys, values = context_switch_sets(num_a, NUM_B)
    g = torch.zeros(keys.shape[:2])
    g[:, num_a] = switch_log_decay        # the gate acts once, on the first token of B
    hits = recalled(write_all(keys, values, g, beta), keys, values).float()
    return hits[:, :num_a].mean().item(), hits[:, num_a:].mean().item()


recall_a, recall_b = run_switch(8, switch_log_decay=0.0)
print(f"delta rule, |A| = 8, |B| = 8: recall of A {recall_a:.2f}, recall of B {recall_b:.2f}")

# %% [markdown]
# Most of A is still there after the switch. Whether that is good depends on the task; if the
# switch meant "that document is over", those are stale answers the memory will still give. Now let A
# grow well past the capacity of the memory (64 associations in 16 dimensions) and look at B:

# %%
for num_a in (0, 8, 64):
    recall_a, recall_b = run_switch(num_a, switch_log_decay=0.0)
    shown_a = "  -  " if num_a == 0 else f"{recall_a:.2f}"
    print(f"delta rule, |A| = {num_a:2d}: recall of A {shown_a}, recall of B {recall_b:.2f}")
    glue(f"ch05_delta_recall_b_after_{num_a}", f"{recall_b:.0%}".replace("%", " %"), display=False)

# %% [markdown]
# The stale part of A does not only linger: it takes room from B. With nothing before it, B is
# recalled {glue:text}`ch05_delta_recall_b_after_0` of the time; after 64 stale associations,
# {glue:text}`ch05_delta_recall_b_after_64`. The delta rule has no instruction for
# "forget all of that": it can only correct the answer under the key it is writing now, and each
# correction only partly removes what the stale content contributed along that key ($\beta < 1$).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Forgetting by decay: Mamba-2
#
# For purely additive linear attention the cure is well known. Mamba-2 (Dao and Gu 2024,
# [arXiv:2405.21060](https://arxiv.org/abs/2405.21060)) multiplies the memory by a data-dependent scalar before
# adding the new association:
#
# $$S_t = \alpha_t\, S_{t-1} + k_t v_t^\top, \qquad \alpha_t = e^{g_t} \in (0, 1].$$
#
# An association written at step $x$ and read at step $x + t$ has been multiplied by
# $\alpha_{x+1}\alpha_{x+2}\cdots\alpha_{x+t}$ on the way. With a constant $\alpha$ every association
# fades the same way, whatever it holds:

# %% [markdown] tags=["notes"]
# Mamba-2's answer for additive memories: multiply the whole state by a number below one. It forgets
# everything alike; it cannot replace one changed answer. The next section takes both tools.

# %%
for alpha in (1.0, 0.95, 0.8):
    strengths = ", ".join(f"t={t}: {alpha ** t:.3f}" for t in (1, 10, 50))
    print(f"alpha = {alpha:4.2f}  read-back strength after {strengths}")

# %% [markdown]
# Uniform decay frees capacity and can wipe the memory at a switch ($\alpha_t \to 0$), but it forgets
# all associations equally: it has no way to replace the one answer that changed. The delta rule has
# exactly that, and no way to let the rest fade. Gated DeltaNet takes both.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. The gated delta rule
#
# Decay first, then the delta correction, measured against the decayed memory:
#
# $$S_t = \big(I - \beta_t k_t k_t^\top\big)\,\alpha_t S_{t-1} + \beta_t k_t v_t^\top,
# \qquad o_t = S_t^\top (\text{scale}\cdot q_t).$$
#
# * $\alpha_t = 1$ ($g_t = 0$) is DeltaNet;
# * $\alpha_t \to 0$ clears the memory, then writes $\beta_t k_t v_t^\top$ into an empty one;
# * in between, the model chooses per token how much of the past to keep.
#
# In code the gate is carried in log space, $g_t = \log \alpha_t \le 0$, the convention of the field
# (and of `k3lite.ops`): products of decays become sums, which is what the chunked form needs below.
# The layout is the field's: q, k `[B, T, H, K]`, v `[B, T, H, V]`, g and β `[B, T, H]`.
#
# ![Gated decay: the whole state fades a little every token](../figures/diagram_gated_decay.svg)

# %% [markdown] tags=["notes"]
# Show the diagram: the whole state fades by e^g each token, then the delta correction is applied to the
# faded state. Stress the order (decay first) and the log-space gate g <= 0. The checks tie our loop to
# k3lite's recurrent and chunked forms, and g = 0 back to DeltaNet.

# %%
def gated_delta_recurrent(q, k, v, g, beta, scale=None):
    """Token loop of the gated delta rule; returns (o [B, T, H, V], S [B, H, K, V])."""
    batch, steps, heads, K = k.shape
    scale = K ** -0.5 if scale is None else scale
    S = torch.zeros(batch, heads, K, v.shape[-1])
    outputs = []
    for t in range(steps):
        S = torch.exp(g[:, t])[..., None, None] * S                     # forget: S ← α_t S
        error = v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], S)      # v_t − Sᵀk_t
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, t], beta[:, t, :, None] * error)
        outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))
    return torch.stack(outputs, dim=1), S


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Checked against k3lite
#
# `k3lite.ops.gated_delta_rule` has the same recurrence (`recurrent`) and the chunked WY/UT form of
# chapter 04 with the decay folded in (`chunked`, derived in section 6). Random inputs at an awkward
# length (T = 37, not a multiple of the chunk size 16), unit keys, gates anywhere in $[-3, 0]$:

# %%
generator = torch.Generator().manual_seed(1)
B, T, H, K, V = 2, 37, 3, 8, 5
q = torch.randn(B, T, H, K, generator=generator)
k = F.normalize(torch.randn(B, T, H, K, generator=generator), dim=-1)
v = torch.randn(B, T, H, V, generator=generator)
g = -3 * torch.rand(B, T, H, generator=generator)
beta = torch.rand(B, T, H, generator=generator)


def agreement(got, expected, tol):
    """Whether two results agree within `tol` (the raw gap changes in its last bits between machines)."""
    worst = (got - expected).abs().max().item()
    return f"max |Δ| < {tol:.0e}: {worst < tol}"


ours, our_state = gated_delta_recurrent(q, k, v, g, beta)
reference, reference_state = gated_delta_rule.recurrent(q, k, v, g, beta)
chunked, chunked_state = gated_delta_rule.chunked(q, k, v, g, beta, chunk_size=16, backend="torch")
print(f"ours vs k3lite recurrent: output {agreement(ours, reference, 1e-5)}, "
      f"state {agreement(our_state, reference_state, 1e-5)}")
print(f"ours vs k3lite chunked:   output {agreement(ours, chunked, 1e-4)}, "
      f"state {agreement(our_state, chunked_state, 1e-4)}")
assert torch.allclose(ours, reference, atol=1e-5) and torch.allclose(ours, chunked, atol=1e-4)

# %% [markdown]
# And with the gate switched off ($g = 0$) it is DeltaNet, `k3lite.ops.delta_rule`:

# %%
as_deltanet, _ = gated_delta_recurrent(q, k, v, torch.zeros_like(g), beta)
deltanet, _ = delta_rule.recurrent(q, k, v, beta)
print(f"gated delta with g = 0 vs DeltaNet: {agreement(as_deltanet, deltanet, 1e-5)}")
assert torch.allclose(as_deltanet, deltanet, atol=1e-5)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The context switch again, both rules
#
# Same experiment, same keys and values; the gated rule closes the gate once, on the first token of
# B ($g = -30$, a decay of $e^{-30} \approx 9.4 \times 10^{-14}$, printed below). A trained model would produce that drop from
# the input (a separator token, say); here we set it by hand to see what the mechanism can do.

# %% [markdown] tags=["notes"]
# Same sets, both rules, gate set by hand. Each rule is wrong about something: gated forgets A by design,
# delta keeps stale A and loses some of B. The beta sweep shows the gap is not an artefact of one setting.

# %%
print(f"exp(-30) = {math.exp(-30):.1e}")
print(f"{'|A|':>4} {'rule':<12} {'recall A':>9} {'recall B':>9}")
table = {}
for num_a in (8, 64):
    for rule, switch in (("delta", 0.0), ("gated delta", -30.0)):
        table[num_a, rule] = run_switch(num_a, switch_log_decay=switch)
        recall_a, recall_b = table[num_a, rule]
        print(f"{num_a:>4} {rule:<12} {recall_a:>9.2f} {recall_b:>9.2f}")
        for name, recall in (("a", recall_a), ("b", recall_b)):
            glue(f"ch05_{rule.replace(' ', '_')}_recall_{name}_{num_a}", f"{recall:.2f}", display=False)

# %% [markdown]
# Each rule gets something wrong, and the table shows what:
#
# * **Gated delta forgets A, by design.** Its recall of A is near zero ({glue:text}`ch05_gated_delta_recall_a_8`
#   and {glue:text}`ch05_gated_delta_recall_a_64`): an A key now
#   reads B content, which points to a B value. If the task after the switch still needed A, this is
#   a failure, and a scalar gate cannot avoid it: it decays everything together. (Chapter 06 is
#   about exactly that.)
# * **Delta keeps stale A.** Under capacity, A stays largely readable ({glue:text}`ch05_delta_recall_a_8` at |A| = 8): stale
#   answers to questions that no longer apply. Over capacity, the stale associations crowd B: B drops
#   to {glue:text}`ch05_delta_recall_b_64` while the gated rule, with an empty memory at the switch, recalls B
#   {glue:text}`ch05_gated_delta_recall_b_64` of the time.
#
# The gap on B is real but modest at $\beta = 0.5$: the delta rule's own correction removes part of
# the stale content along each key it writes. How much depends on the write strength $\beta$:

# %%
B_READS = NUM_B * 200          # the 8 keys of B, read back in each of the 200 trials
for beta_value in (0.3, 0.5, 1.0):
    delta_b = round(run_switch(64, 0.0, beta=beta_value)[1] * B_READS)
    gated_b = round(run_switch(64, -30.0, beta=beta_value)[1] * B_READS)
    print(f"beta = {beta_value:.1f}, |A| = 64: B keys recalled, delta {delta_b}/{B_READS}, gated delta {gated_b}/{B_READS}")
    glue(f"ch05_delta_b_reads_beta_{beta_value:.1f}".replace(".", "_"), f"{delta_b}", display=False)
    glue(f"ch05_gated_b_reads_beta_{beta_value:.1f}".replace(".", "_"), f"{gated_b}", display=False)
glue("ch05_b_reads", f"{B_READS}", display=False)

# %% [markdown]
# Weak writes ($\beta = 0.3$) leave most of the stale content in place and the delta rule recalls
# {glue:text}`ch05_delta_b_reads_beta_0_3` of the {glue:text}`ch05_b_reads` B reads against the gated rule's
# {glue:text}`ch05_gated_b_reads_beta_0_3`; full-strength writes ($\beta = 1$) replace the answer along each
# written key exactly, yet the gap stays ({glue:text}`ch05_delta_b_reads_beta_1_0` against
# {glue:text}`ch05_gated_b_reads_beta_1_0`), because each later
# B key overlaps the earlier ones and its correction drags stale A content along. (Both rules are lower at $\beta = 1$: eight
# full-strength writes of overlapping keys overwrite each other.)

# %% [markdown] slideshow={"slide_type": "subslide"}
# The same comparison for every size of A: the picture of what each rule keeps.

# %% tags=["plumbing"]
sizes_of_a = [0, 2, 4, 8, 16, 32, 64]
curves = {rule: [run_switch(n, switch) for n in sizes_of_a]
          for rule, switch in (("delta_rule", 0.0), ("gated_delta_rule", -30.0))}

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
for rule, points in curves.items():
    color = viz.MECHANISM_COLORS[rule]
    label = rule.replace("_", " ")
    left.plot(sizes_of_a[1:], [a for a, _ in points[1:]], "o-", color=color, label=label)
    right.plot(sizes_of_a, [b for _, b in points], "o-", color=color, label=label)
for ax, title in ((left, "old context A (read after the switch)"), (right, "new context B (8 associations)")):
    ax.set_xscale("symlog", linthresh=2)
    ax.set_xticks(sizes_of_a[1:] if ax is left else sizes_of_a, labels=None)
    ax.get_xaxis().set_major_formatter(plt.ScalarFormatter())
    ax.set_xlabel("associations stored before the switch, |A|")
    ax.set_title(title)
left.set_ylabel("recall (fraction of keys)")
left.axvline(16, color=viz.PALETTE["black"], lw=1, ls=":")
right.axvline(16, color=viz.PALETTE["black"], lw=1, ls=":")
left.text(17, 0.55, "K = 16", fontsize=9)
right.legend(loc="lower left")
fig.suptitle("Context switch: delta keeps A and pays for it in B; gated delta drops A", y=1.02)
plt.show()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Cumulative decay: a prefix sum in log space
#
# Unroll the decays. An association written at step $i$ and read at step $r \ge i$ has been
# multiplied by every gate *after* its write:
#
# $$\Gamma_{r,i} = \prod_{j=i+1}^{r} \alpha_j = \exp\Big(\sum_{j=i+1}^{r} g_j\Big) = \exp(G_r - G_i),
# \qquad G_t = \sum_{j \le t} g_j .$$
#
# One prefix sum $G$ gives every entry. (The letter is $\Gamma$ because $D$ is the head dimension in
# chapters 02–04.) The chunked form of section 6 uses exactly this matrix inside each chunk, with $G$
# restarted at the chunk's start. Above the diagonal ($i > r$) the formula would give $e^{G_r - G_i} \ge 1$, so
# $\Gamma$ is *defined* as 0 there (masked before the exponential), which makes it do the causal mask's job too.
# It is computed from the difference of the log sums, never as $e^{G_r} \cdot e^{-G_i}$: section 6
# shows the overflow that the split runs into.
#
# The article (chapter 00's *From GPT-2 to Kimi K3* worklog, section "Gated Delta Net") writes the product as
# $\alpha_x \alpha_{x+1} \cdots \alpha_{x+t}$, starting at the writing step $x$. The recurrence says otherwise: the
# gate of step $x$ acts *before* $k_x v_x^\top$ is added. Compute it: write one association at $x$, read it at
# $x + t$.

# %% [markdown] tags=["notes"]
# The decays compose as a prefix sum of log-gates. Correct the article's off-by-one on the board, then show
# the heatmap: one strong gate cuts the whole past off in one step.

# %%
generator = torch.Generator().manual_seed(2)
x, t = 3, 6
steps = x + t + 1                                       # steps 0 … x+t; the read is the last one
g_one = -0.5 * torch.rand(1, steps, 1, generator=generator)
key = torch.zeros(1, steps, 1, 4)
key[0, x, 0, 0] = 1.0                                   # only step x writes (unit key e_0)
value = torch.zeros(1, steps, 1, 1)
value[0, x] = 1.0
_, S = gated_delta_recurrent(key, key, value, g_one, torch.ones(1, steps, 1))
measured = S[0, 0, 0, 0].item()                         # what key e_0 reads at step x+t
from_next_step = torch.exp(g_one[0, x + 1:x + t + 1, 0].sum()).item()
from_write_step = torch.exp(g_one[0, x:x + t + 1, 0].sum()).item()
print(f"read-back after {t} steps      {measured:.4f}")
print(f"α_(x+1) ··· α_(x+t)           {from_next_step:.4f}")
print(f"α_x ··· α_(x+t) (the article) {from_write_step:.4f}")

# %% [markdown]
# The product starts at $\alpha_{x+1}$, as in the reference formula; the article's version has one gate
# too many. Now the whole matrix, for a gate that stays near 1 and drops once, at a switch at step 24:

# %%
def decay_matrix(g):
    """Γ [T, T] for log-gates g [T]: Γ[r, i] = exp(G_r − G_i) for i ≤ r, 0 above the diagonal."""
    G = torch.cumsum(g, dim=0)
    below = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp((G[:, None] - G[None, :]).masked_fill(~below, float("-inf")))


steps = 48
g_switch = torch.full((steps,), -0.03)
g_switch[24] = -4.0
decay = decay_matrix(g_switch)
print(f"Γ[23, 0] = {decay[23, 0].item():.3f} (before the switch)   "
      f"Γ[47, 0] = {decay[47, 0].item():.4f} (across it)   Γ[47, 24] = {decay[47, 24].item():.3f} (after it)")

fig, ax = plt.subplots(figsize=(5.6, 4.6))
viz.heatmap(ax, decay, title="Γ = exp(G_r − G_i): g = −0.03 per step, −4 at step 24", xlabel="written at step i",
            ylabel="read at step r", colorbar_label="factor the association is multiplied by")
ax.axvline(23.5, color="white", lw=1, ls="--")
ax.axhline(23.5, color="white", lw=1, ls="--")
plt.show()

# %% [markdown]
# Below the diagonal, the triangle written and read before the switch (top left) and the one written
# and read after it (bottom right) stay bright; the rectangle of associations written before step 24
# and read after it is dark. One gate, one step, one cut through the whole past.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. The chunked form with a gate
#
# Chapter 04 chunked DeltaNet by writing every state inside a chunk as the chunk's start state plus the
# chunk's own writes. With a gate, each of those terms also carries its decay, and $\Gamma$ says how much.
# Take one chunk with start state $S_0$ and tokens $r = 1, \dots, C$; restart the prefix sum there,
# $G_r = \sum_{j=1}^{r} g_j$, so that $\Gamma_{ri} = \exp(G_r - G_i)$ for $i \le r$ is the chunk's block of
# section 5's matrix. Call $u_r = \beta_r\big(v_r - (\alpha_r S_{r-1})^\top k_r\big)$ what token $r$ adds, so that
# $S_r = \alpha_r S_{r-1} + k_r u_r^\top$. Unrolled over the chunk:
#
# $$ S_r = e^{G_r} S_0 + \sum_{i \le r} \Gamma_{ri}\, k_i u_i^\top . $$
#
# The memory that token $r$ corrects is the decayed one,
# $\alpha_r S_{r-1} = e^{G_r} S_0 + \sum_{i<r} \Gamma_{ri}\, k_i u_i^\top$ (because $\alpha_r \Gamma_{r-1,i} = \Gamma_{ri}$).
# Put it into the definition of $u_r$:
#
# $$ u_r + \sum_{i<r} \beta_r\, \Gamma_{ri}\, (k_r^\top k_i)\, u_i = \beta_r\big(v_r - e^{G_r} S_0^\top k_r\big). $$
#
# The gate is one number per token, so it multiplies the dot product $k_r^\top k_i$ from outside. With
# $A = \mathrm{StrictTril}\big(\mathrm{Diag}(\beta)\,(KK^\top \odot \Gamma)\big)$ and $e^{G} \odot K$ for $K$ with row $r$
# scaled by $e^{G_r}$, the whole chunk is again one unit lower-triangular system for $V'$, the $u_r$ stacked as rows:
#
# $$ (I + A)\, V' = \mathrm{Diag}(\beta)\big(V - (e^{G} \odot K)\, S_0\big), $$
#
# and with chapter 04's UT transform $T = (I + A)^{-1}$ it splits into the WY factors:
#
# $$ V' = \underbrace{T\,\mathrm{Diag}(\beta)\,V}_{U}
#    \;-\; \underbrace{T\,\mathrm{Diag}(\beta)\,(e^{G} \odot K)}_{W}\; S_0 . $$
#
# Reading, $o_r = S_r^\top q_r$ (with $q$ already scaled), and the state handed to the next chunk follow from the
# unrolled $S_r$:
#
# $$ O = (e^{G} \odot Q)\, S_0 + (QK^\top \odot \Gamma)\, V', \qquad
#    S_C = e^{G_C} S_0 + \big(e^{G_C - G} \odot K\big)^\top V' . $$
#
# With $g = 0$, $\Gamma$ is the lower triangle of ones and $e^{G} = 1$: chapter 04's chunk, line by line. The only new
# work is the $C \times C$ matrix $\Gamma$, multiplied into the two score matrices.
#
# On paper $\Gamma_{ri} = e^{G_r} \cdot e^{-G_i}$, which would make $QK^\top \odot \Gamma$ the plain product
# $(e^{G} \odot Q)(e^{-G} \odot K)^\top$ and save the elementwise step. In floating point it does not work, because
# $e^{-G_i}$ grows as the decay accumulates. float32 overflows above $e^{88.7}$:

# %% [markdown] tags=["notes"]
# Chapter 04's chunk with one extra C x C matrix. The lesson worth the time is numerical: never split
# exp(G_r - G_i) into a product, because exp(-G_i) overflows under strong or long decay.

# %%
largest = torch.finfo(torch.float32).max
print(f"largest float32 {largest:.2e} = e^{math.log(largest):.2f}; "
      f"exp(88) = {torch.exp(torch.tensor(88.0)).item():.2e}, exp(89) = {torch.exp(torch.tensor(89.0)).item()}")

gentle = F.logsigmoid(torch.randn(4096, generator=torch.Generator().manual_seed(3)) + 4)  # benchmarks/bench.py's gates
G_gentle = torch.cumsum(gentle, dim=0)
first_inf = torch.isinf(torch.exp(-G_gentle)).nonzero()[0].item()
print(f"g = logsigmoid(randn + 4), mean decay per token {torch.exp(gentle).mean().item():.3f}: "
      f"G after 4096 tokens = {G_gentle[-1].item():.1f}; exp(-G_i) is inf from token {first_inf} on")
glue("ch05_gentle_decay", f"{torch.exp(gentle).mean().item():.3f}", display=False)
glue("ch05_first_inf", f"{first_inf}", display=False)

floor = inspect.signature(KDALayer).parameters["gate_lower_bound"].default
strong = torch.full((64,), floor)       # every token at K3's lower bound on a gate, one 64-token chunk
G_strong = torch.cumsum(strong, dim=0)
split = torch.exp(G_strong)[:, None] * torch.exp(-G_strong)[None, :]
lower = torch.ones(64, 64, dtype=torch.bool).tril()
print(f"K3's gate floor (k3lite.layers.kda_layer): {floor}")
print(f"g = {floor} per token, one chunk of 64: G_64 = {G_strong[-1].item():.0f}; split e^G_r · e^-G_i: "
      f"{(~torch.isfinite(split[lower])).sum().item()} of {lower.sum().item()} entries inf or nan; "
      f"difference exp(G_r - G_i) all finite: {torch.isfinite(decay_matrix(strong)[lower]).all().item()}")

# %% [markdown]
# Over a whole sequence even gentle gates get there: with the gates that the kernel benchmark
# (`benchmarks/bench.py`, chapter 04) feeds Gated DeltaNet, $g = \log\sigma(x + 4)$ with $x$ standard normal (a decay of
# {glue:text}`ch05_gentle_decay` per token on average) $e^{-G_i}$ is infinite from token
# {glue:text}`ch05_first_inf` on, which is one reason $G$ is restarted at every chunk. Restarting is not enough on
# its own: with gates as strong as K3's lower bound of $-5$ per token (K3's published configuration; chapter 06), a
# single 64-token chunk reaches $G = -320$, and $e^{G_r} \to 0$ times $e^{-G_i} \to \infty$ gives nan. The
# difference $G_r - G_i \le 0$ is always safe, so $\Gamma$ is formed from differences, as `decay_matrix` does. (For
# Gated DeltaNet that costs nothing: $\Gamma$ is one $C \times C$ matrix per chunk. Chapter 06's per-channel gate
# puts the decay *inside* the sum over key channels, which is where the split becomes tempting and the field uses
# sub-chunk anchors instead.)
#
# The chunked form for one head, `q, k [T, K]`, `v [T, V]`, `g, beta [T]`, each line one equation above:

# %%
def gated_delta_chunked(q, k, v, g, beta, chunk_size, scale=None):
    """Gated DeltaNet for one head in chunks: chapter 04's WY/UT form with the decay matrix Γ folded in."""
    scale = k.shape[1] ** -0.5 if scale is None else scale
    S = torch.zeros(k.shape[1], v.shape[1])
    outputs = []
    for start in range(0, len(q), chunk_size):
        q_c, k_c, v_c, g_c, b_c = (x[start:start + chunk_size] for x in (scale * q, k, v, g, beta))
        G, gamma = torch.cumsum(g_c, dim=0), decay_matrix(g_c)          # restarted at the chunk's start
        A = torch.tril(b_c[:, None] * (k_c @ k_c.T) * gamma, diagonal=-1)
        eye = torch.eye(len(A))
        ut = torch.linalg.solve_triangular(eye + A, eye, upper=False, unitriangular=True)  # T = (I + A)^-1
        W = ut @ (b_c[:, None] * torch.exp(G)[:, None] * k_c)          # how the start state enters V'
        U = ut @ (b_c[:, None] * v_c)                                   # how the values enter V'
        corrected = U - W @ S                                           # the only state-dependent step
        outputs.append(torch.exp(G)[:, None] * (q_c @ S) + ((q_c @ k_c.T) * gamma) @ corrected)
        S = torch.exp(G[-1]) * S + (torch.exp(G[-1] - G)[:, None] * k_c).T @ corrected
    return torch.cat(outputs), S


def every_head(fn, q, k, v, g, beta, **kwargs):
    """Run a one-head function over [B, T, H, *] inputs; stack to o [B, T, H, V] and S [B, H, K, V]."""
    runs = [[fn(q[b, :, h], k[b, :, h], v[b, :, h], g[b, :, h], beta[b, :, h], **kwargs)
             for h in range(q.shape[2])] for b in range(q.shape[0])]
    o = torch.stack([torch.stack([o_h for o_h, _ in heads], dim=1) for heads in runs])
    S = torch.stack([torch.stack([s_h for _, s_h in heads]) for heads in runs])
    return o, S


# %% [markdown]
# Checked on section 3's inputs (T = 37, gates in $[-3, 0]$) against our token loop `gated_delta_recurrent` and
# `k3lite.ops.gated_delta_rule.chunked`, for chunk sizes that do and do not divide $T$, and on a longer sequence
# with every gate at $-5$ in 64-token chunks, where the split would have produced nan:

# %%
library, library_state = gated_delta_rule.chunked(q, k, v, g, beta, chunk_size=16, backend="torch")
for chunk_size in (1, 5, 16, 37):
    o_chunks, S_chunks = every_head(gated_delta_chunked, q, k, v, g, beta, chunk_size=chunk_size)
    print(f"C={chunk_size:>2}: vs our token loop: output {agreement(o_chunks, ours, 1e-5)}, "
          f"state {agreement(S_chunks, our_state, 1e-5)};  "
          f"vs k3lite chunked: output {agreement(o_chunks, library, 1e-5)}")

generator = torch.Generator().manual_seed(4)
q_long = torch.randn(1, 200, 2, K, generator=generator)
k_long = F.normalize(torch.randn(1, 200, 2, K, generator=generator), dim=-1)
v_long, beta_long = torch.randn(1, 200, 2, V, generator=generator), torch.rand(1, 200, 2, generator=generator)
g_long = torch.full((1, 200, 2), floor)
o_long, _ = every_head(gated_delta_chunked, q_long, k_long, v_long, g_long, beta_long, chunk_size=64)
o_long_loop, _ = gated_delta_recurrent(q_long, k_long, v_long, g_long, beta_long)
print(f"g = {floor}, T = 200, C = 64: all finite {torch.isfinite(o_long).all().item()}, "
      f"vs token loop {agreement(o_long, o_long_loop, 1e-5)}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 7. Trained: what the gate buys, and a gate that never gated
#
# Sections 1 and 4 set the gate by hand. The course's bake-off (`k3lite.bakeoff`, small models that differ
# only in their token mixer, trained on a GPU through k3lite's Triton kernels; every run with its
# provenance in `figures/bakeoff.json`) asks whether a *trained* gate does the job. Before reading any trained
# number, one question comes first: **did the gate take part?** A decay that starts at retention 1 and gets no
# gradient leaves a Gated DeltaNet that is a DeltaNet with an output gate, whatever its name says. (The *output
# gate*: the published layer returns $\mathrm{RMSNorm}(o) \odot \mathrm{SiLU}(W_g x)$, the recurrence's output
# normalised and multiplied channel by channel by a SiLU of the input; KDA's layer uses a sigmoid there instead.)
#
# The bake-off's tasks are synthetic, with byte-sized vocabularies, and every one is scored by the fraction of
# queries answered correctly (`k3lite/bakeoff/tasks.py` generates them):
#
# * **rebind**: sixteen keys are bound to values again and again; a query asks for a key's *latest* value
#   (section 1's overwrite, trained);
# * **switch**: episodes, each opened by a reset token, bind eight keys; half of the queries ask for a key that
#   this episode did not bind (most often one an *earlier* episode bound), whose right answer is "none"
#   (section 4's context switch, trained);
# * **MQAR-N** (multi-query associative recall; Arora et al. 2023, *Zoology*, section 3): $N$ key-value pairs,
#   then every key asked again later in the sequence; nothing ever needs forgetting, only storing;
# * **twoscale**: a few facts at the start must survive a long stream of short-lived pairs (chapter 06's task).
#
# The first rule for "better", the same in every chapter, is the **means rule**: A beats B when the difference
# of their mean accuracies is larger than two standard errors of that difference (`k3lite.bakeoff.stats.beats`;
# sample standard deviations over seeds). With few seeds it is a rough screen; a cell with one seed cannot be
# called. The second rule, on success counts, comes with the published layers later in this section.
# All numbers are read from the committed file, so they are exact. The first table is the bake-off's earlier
# grid: a shorter budget, {glue:text}`ch05_earlier_seeds` seeds per cell, trained before k3lite built Gated DeltaNet
# and KDA as published.

# %% [markdown] tags=["notes"]
# Trained evidence, and how a gate that never gated can mislead. Ask the room first: "what would a decay look like if it never took
# part?" (expected: retention 1 everywhere, and a gate parameter with no gradient). Then the stored runs'
# retention, the two initialisations side by side, and the toy run with the layer built as published.

# %% tags=["plumbing"]
from k3lite.bakeoff import store
from k3lite.bakeoff.plots import (
    GDN_IN_KDA_LAYER, LABELS, cell_metrics, cell_summary, final_cells, print_cell_table, rule_verdict, run_setup,
)
from k3lite.course.checks import expect
from functools import partial

BAKEOFF = viz.FIGURES_DIR / "bakeoff.json"
bakeoff_runs = store.load(BAKEOFF)
bakeoff_cells = final_cells(bakeoff_runs, layers="earlier")  # the earlier grid: (task, d, mixer) -> runs
MIXERS = ("softmax", "linear_attention", "delta_rule", "gated_delta_rule", "kda", "k3_hybrid")

accuracies = partial(cell_metrics, bakeoff_cells)   # (task, mixer, d_model=64) -> the stored seeds' accuracies
verdict = partial(rule_verdict, bakeoff_cells)      # (task, a, b, d_model=64) -> the rule's call, in words

setup = bakeoff_cells["switch", 64, "gated_delta_rule"][0]
print(run_setup(setup))
print_cell_table(bakeoff_cells, ("switch", "rebind", "mqar128", "twoscale"), MIXERS)
for task in ("switch", "rebind", "mqar128", "twoscale"):
    for mixer in ("delta_rule", "gated_delta_rule"):
        glue(f"ch05_{task}_{mixer}", cell_summary(bakeoff_cells, task, mixer), display=False)
glue("ch05_steps", str(setup["steps"]), display=False)
glue("ch05_switch_verdict", verdict("switch", "delta_rule", "gated_delta_rule"), display=False)
expect("on the switch task the earlier grid cannot tell Gated DeltaNet from DeltaNet",
       verdict("switch", "delta_rule", "gated_delta_rule").startswith("no call"))
expect("every switch cell has at least 3 seeds", min(len(accuracies("switch", m)) for m in MIXERS) >= 3)
earlier_seeds = {len(accuracies(t, m)) for t in ("switch", "rebind", "mqar128", "twoscale") for m in MIXERS}
glue("ch05_earlier_seeds", "–".join(str(n) for n in sorted({min(earlier_seeds), max(earlier_seeds)})), display=False)

# %% [markdown]
# Read as a table of mechanisms, this says Gated DeltaNet's layer failed where DeltaNet succeeded: at width 64
# it sits at {glue:text}`ch05_rebind_gated_delta_rule` on rebinding against DeltaNet's
# {glue:text}`ch05_rebind_delta_rule`, and at {glue:text}`ch05_mqar128_gated_delta_rule` on MQAR with 128 pairs
# against {glue:text}`ch05_mqar128_delta_rule` ({glue:text}`ch05_steps` steps). On the context switch, the task built
# for forgetting, it reaches {glue:text}`ch05_switch_gated_delta_rule` against DeltaNet's
# {glue:text}`ch05_switch_delta_rule` (*{glue:text}`ch05_switch_verdict`*): where a gate should have helped, this
# one made no difference. Every stored run also recorded
# how much memory its trained gates keep: the mean retention $e^{g}$ per layer, over the tokens of an
# evaluation batch.

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import trained_retention

# Each stored width-64 Gated DeltaNet run's most forgetful layer (smallest per-layer mean retention).
stored_gdn = [min(layers) for layers in trained_retention(bakeoff_runs)[("gated_delta_rule", 64)]]
print(f"Gated DeltaNet, width 64: {len(stored_gdn)} stored runs; the most forgetful layer of any run keeps "
      f"{min(stored_gdn):.3f} of its memory per token on average")
glue("ch05_stored_gdn_runs", str(len(stored_gdn)), display=False)
glue("ch05_stored_gdn_min_retention", f"{min(stored_gdn):.3f}", display=False)
expect("every stored width-64 Gated DeltaNet layer kept over 0.95 of its memory per token", min(stored_gdn) > 0.95)

# %% [markdown]
# In all {glue:text}`ch05_stored_gdn_runs` stored runs at width 64 (every task and rate of the earlier grid, more
# than the table shows) the most forgetful layer keeps
# {glue:text}`ch05_stored_gdn_min_retention` per token or more: its decay barely moved from 1 in training. The
# cause is the initialisation those runs used. Their layer computed the decay in K3's bounded form,
# $g = -5\,\sigma\big(e^{A_{\log}} (W x + b)\big)$, but initialised it with the recipe of the *softplus* form:
# $A = e^{A_{\log}}$ drawn from $[1, 16]$ and $b = \mathrm{softplus}^{-1}(\Delta t)$ with $\Delta t$ log-uniform in
# $[10^{-3}, 10^{-1}]$ (Mamba's recipe, Gu and Dao 2023, section 3.6). Then $A\,b$ lies between $-110$ and $-2.25$,
# and for most draws it is far below zero, where the sigmoid is flat: $g \approx 0$, and the gradient reaching
# $A_{\log}$ vanishes with it. The published Gated
# DeltaNet layer (Yang, Kautz and Hatamizadeh 2024, section 3; its layer in flash-linear-attention) computes
# $g = -e^{A_{\log}}\,\mathrm{softplus}(W x + b)$ with $A \sim U(0, 16)$; `k3lite.bakeoff` now builds that
# layer. The cell below takes one freshly built model and evaluates both formulas on the same projections.

# %% tags=["plumbing"]
from k3lite.bakeoff.models import build_model, lower_bound_gate, softplus_gate
from k3lite.bakeoff.tasks import make_task


def mixer_inputs(mixer, task, seed):
    """A freshly built width-64 bake-off model's token mixers, each with the input it sees on a batch of ``task``."""
    torch.manual_seed(seed)
    model = build_model(mixer, vocab_size=512, d_model=64, num_layers=4)
    inputs, _, _ = make_task(task).sample(8, torch.Generator().manual_seed(seed), "cpu")
    seen = {}
    hooks = [b.mixer.register_forward_pre_hook(lambda m, args: seen.__setitem__(m, args[0])) for b in model.blocks]
    with torch.no_grad():
        model(inputs)
    for hook in hooks:
        hook.remove()
    return seen


def initial_retentions(seed):
    """Per-token retention at initialisation of a width-64 bake-off model: the published softplus form it is built
    with, and the bounded form with A in [1, 16] (the recipe of the stored runs), on the same projections."""
    seen = mixer_inputs("gated_delta_rule", "rebind", seed)
    published, saturated = [], []
    A_log_old = torch.empty(2).uniform_(1.0, 16.0, generator=torch.Generator().manual_seed(seed)).log()
    for mixer, x in seen.items():
        with torch.no_grad():
            f = mixer.decay(x).float().unflatten(-1, (2, -1))
            published.append(softplus_gate(f, mixer.A_log.float()).exp().flatten())
            saturated.append(lower_bound_gate(f, A_log_old).exp().flatten())
    return torch.cat(published), torch.cat(saturated)


rows = [initial_retentions(seed) for seed in range(5)]
print(f"{'seed':<6}{'published: median':>20}{'share >= 0.99':>15}{'stored recipe: median':>24}{'share >= 0.99':>15}")
for seed, (published, saturated) in enumerate(rows):
    print(f"{seed:<6}{published.median():>20.3f}{(published >= 0.99).float().mean():>15.2f}"
          f"{saturated.median():>24.4f}{(saturated >= 0.99).float().mean():>15.2f}")
published_all = torch.cat([p for p, _ in rows])
saturated_all = torch.cat([s for _, s in rows])
glue("ch05_init_published_median", f"{published_all.median():.2f}", display=False)
glue("ch05_init_saturated_share", f"{(saturated_all >= 0.99).float().mean():.0%}", display=False)
expect("built as published, the median retention at initialisation is below 0.99 on every seed",
       all(p.median() < 0.99 for p, _ in rows))
expect("with the stored runs' recipe, most retentions start at 0.99 or above on every seed",
       all((s >= 0.99).float().mean() > 0.5 for _, s in rows))

# %% [markdown]
# Built as published, the median token (over five seeds, on rebinding inputs) keeps
# {glue:text}`ch05_init_published_median` of the memory per step from
# the first step, and the gate learns from there. With the stored runs' recipe,
# {glue:text}`ch05_init_saturated_share` of the retentions start at 0.99 or above. So the stored "Gated DeltaNet"
# column measured a DeltaNet wrapped in Gated DeltaNet's layer, not the gate. What it can still speak to is that
# layer: the same stored grid has the same recurrence (gate saturated alike) inside KDA's layer, which differs from
# Gated DeltaNet's in how it computes the decay and in its output gate (a sigmoid instead of a SiLU).

# %% tags=["plumbing"]
glue("ch05_rebind_gdn_in_kda_layer", cell_summary(bakeoff_cells, "rebind", GDN_IN_KDA_LAYER), display=False)
said = verdict("rebind", "gated_delta_rule", GDN_IN_KDA_LAYER)
glue("ch05_verdict_layer", said, display=False)
print(f"rebinding, width 64: {LABELS[GDN_IN_KDA_LAYER]} {cell_summary(bakeoff_cells, 'rebind', GDN_IN_KDA_LAYER)}; "
      f"{LABELS['gated_delta_rule']} in its own layer {cell_summary(bakeoff_cells, 'rebind', 'gated_delta_rule')}"
      f" -> {said}")

# %% [markdown]
# Inside KDA's layer the same (ungated) recurrence reaches {glue:text}`ch05_rebind_gdn_in_kda_layer` on rebinding:
# *{glue:text}`ch05_verdict_layer`*. The gap belongs to the two differences together, and only for a layer whose
# decay did nothing. The output gate is the easier one to test. Does it matter for the layer built as published? The toy below trains it on the CPU (chapter 03's live set-up:
# rebinding with 4 keys, width 32, one layer, 300 steps, three seeds; a few seconds each), once with its SiLU
# output gate and once with a sigmoid output gate, everything else equal.

# %%
# NBVAL_IGNORE_OUTPUT
from k3lite.bakeoff.plots import live_demo

SIGMOID_GATED = "gated_delta_rule_sigmoid_gate"
live = live_demo("rebind4", ("gated_delta_rule", SIGMOID_GATED), d_model=32, num_layers=1, steps=300,
                 seeds=(0, 1, 2))
for mixer, scores in live.items():
    print(f"{mixer:<31} " + "  ".join(f"{a:.2f}" for a in scores))

# %%
silu_gated, sigmoid_gated = live["gated_delta_rule"], live[SIGMOID_GATED]
expect("live: every seed of the sigmoid-gated layer learns the task (accuracy > 0.9)", min(sigmoid_gated) > 0.9)
expect("live: the SiLU-gated layer averages at least 0.2 lower", sum(silu_gated) / 3 < sum(sigmoid_gated) / 3 - 0.2)

# %% [markdown]
# With the decay working, the sigmoid-gated layer learns the toy task on every seed within 300 steps, and the
# SiLU-gated one, which is the published layer, lags on average (the exact numbers differ between CPUs: their
# float rounding differs, and 300 steps of training amplify it). Two limits keep this from being a verdict:
# 300 steps measure how fast a model leaves its plateau, not what it can learn given time, and three seeds of an
# outcome that is either learned or not say little. The GPU grid below removes both limits for one task.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### The published layers, trained again
#
# The bake-off has trained the layers as published on MQAR with 16 pairs at width 64 (the same
# backbone as above, four layers) through k3lite's Triton kernels, with three changes to how it measures:
#
# * **a budget long enough to converge**: the budget is set so that softmax attention and DeltaNet learn the task
#   on every seed (`MQAR_STEPS` in `k3lite/bakeoff/cli.py`, checked by a test against the stored runs);
# * **a learning rate chosen on more than noise**: three rates, two seeds each, per mixer; the rate with the best
#   mean wins, ties go to the middle rate, and a mixer whose every rate stays at chance gets no rate at all;
# * **success counts**: a seed succeeds when its accuracy reaches 0.9, and a success rate comes with its 95 %
#   Wilson interval, because outcomes are bimodal (a seed learns the task or stays near chance). One mixer
#   beats another when Fisher's exact test on the success counts gives p < 0.05 (`k3lite.bakeoff.stats`).
#
# Each run is evaluated every tenth of its steps on the same held-out batches, so a record also says when the
# seed learned.

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import cell_success, print_sweep_table, published_layer
from k3lite.bakeoff.stats import success_rate, success_verdict

UNIT_A = "gated_delta_rule_unit_a"
SWEEP_SEEDS = 2
choices = store.load_choices(BAKEOFF)
published_cells = final_cells(bakeoff_runs, choices, layers="published")   # the published layers' runs only
GRID_MIXERS = ("softmax", "delta_rule", "gated_delta_rule", "kda")
published_setup = published_cells["mqar16", 64, "delta_rule"][0]
GRID_STEPS = published_setup["steps"]                                         # the grid's budget (longer runs below)
print(run_setup(published_setup))
print("sweep: accuracy of seeds 0 and 1 at each rate; final cell: every seed run at the chosen rate")
sweep = print_sweep_table(bakeoff_runs, published_cells, "mqar16", GRID_MIXERS, steps=GRID_STEPS, choices=choices,
                          sweep_seeds=SWEEP_SEEDS)   # mixer -> {rate: each seed's accuracy}
gdn_sweep = [a for seeds in sweep["gated_delta_rule"].values() for a in seeds[:SWEEP_SEEDS]]
deltanet = [r["metric"] for r in published_cells["mqar16", 64, "delta_rule"]]
kda_final = [r["metric"] for r in published_cells["mqar16", 64, "kda"]]
glue("ch05_grid_steps", f"{published_setup['steps']:,}", display=False)
glue("ch05_grid_deltanet", cell_success(published_cells, "mqar16", "delta_rule"), display=False)
glue("ch05_grid_kda", cell_success(published_cells, "mqar16", "kda"), display=False)
glue("ch05_grid_gdn_runs", str(len(gdn_sweep)), display=False)
glue("ch05_grid_gdn_best", f"{max(gdn_sweep):.3f}", display=False)
glue("ch05_grid_verdict", success_verdict(deltanet, gdn_sweep, "DeltaNet", "Gated DeltaNet (its sweep)"),
     display=False)
expect("DeltaNet and KDA succeed on at least 5 seeds each", min(sum(a >= 0.9 for a in x) for x in (deltanet, kda_final))
       >= 5)
expect("no sweep run of Gated DeltaNet's published layer gets past 0.1", max(gdn_sweep) < 0.1)
expect("Gated DeltaNet's sweep is stored as all at chance, with no rate chosen",
       ("mqar16", 64, "gated_delta_rule") not in published_cells)

# %% [markdown]
# After {glue:text}`ch05_grid_steps` steps DeltaNet succeeds on {glue:text}`ch05_grid_deltanet` seeds and KDA on
# {glue:text}`ch05_grid_kda`. Gated DeltaNet's published layer stays at chance at every rate of the sweep: none of
# its {glue:text}`ch05_grid_gdn_runs` sweep runs gets past {glue:text}`ch05_grid_gdn_best`
# (*{glue:text}`ch05_grid_verdict`*). So on this task, at this width, the published layer learns far less often
# than the delta rule without a gate. Did its gate take part this time?

# %% tags=["plumbing"]
mqar_runs = {key: r for key, r in bakeoff_runs.items() if r["task"].startswith("mqar")}
published_gdn = trained_retention(mqar_runs, layers="published")[("gated_delta_rule", 64)]
most_forgetful = [min(layers) for layers in published_gdn]
print(f"Gated DeltaNet as published: {len(published_gdn)} runs; each run's most forgetful layer keeps "
      + ", ".join(f"{r:.2f}" for r in sorted(most_forgetful)) + " of its memory per token on average")
glue("ch05_grid_gdn_retention_max", f"{max(most_forgetful):.2f}", display=False)
expect("every published-layer Gated DeltaNet run has a layer whose mean retention is below 0.99",
       max(most_forgetful) < 0.99)

# %% [markdown]
# Yes: in every run (the extra seeds and longer runs below included) some layer keeps
# {glue:text}`ch05_grid_gdn_retention_max` of its memory per token or less, so the decay is not stuck at 1. Two suspects remain, and the layer has two parts that DeltaNet's lacks:
#
# * **the decay's starting point**: as published the gate starts well below retention 1 (the cell below measures
#   its median $\alpha$ on MQAR's inputs), so an association fades within a few tokens: a decay that
#   keeps $\alpha$ per step keeps a write for $1/(1 - \alpha)$ steps on average (the mean of a geometric
#   lifetime), in a task whose queries can come a whole sequence after their keys;
# * **the SiLU output gate**, the toy's suspect: KDA, which learns on every seed, multiplies its output by a sigmoid
#   gate instead.
#
# One layer variant per suspect isolates it. Each changes one thing and nothing else (the same random draws for
# every other weight; `tests/test_faithful_layers.py` checks it): `gated_delta_rule_unit_a` starts the decay at
# $A = 1$ instead of $A \sim U(0, 16)$, and `gated_delta_rule_sigmoid_gate` swaps SiLU for a sigmoid in the output
# gate. First, what each change does at initialisation, on the same inputs.

# %% tags=["plumbing"]
def initial_gates(mixer, seed=0):
    """At initialisation, on MQAR inputs: every layer's per-token retention exp(g) and output-gate preactivation."""
    seen = mixer_inputs(mixer, "mqar16", seed)
    with torch.no_grad():
        retention = torch.cat([m.log_decay(x).exp().flatten() for m, x in seen.items()])
        preactivation = torch.cat([m.out_gate(x).flatten() for m, x in seen.items()])
    return retention, preactivation


start = {mixer: initial_gates(mixer) for mixer in ("gated_delta_rule", UNIT_A)}
memory = {mixer: 1 / (1 - retention.median().item()) for mixer, (retention, _) in start.items()}
z = start["gated_delta_rule"][1]
print(f"{'':<34}{'median retention':>17}{'memory (tokens)':>17}")
for mixer, (retention, _) in start.items():
    print(f"{LABELS[mixer]:<34}{retention.median():>17.3f}{memory[mixer]:>17.0f}")
print(f"output gate at init: SiLU(z) mean |value| {F.silu(z).abs().mean():.2f}, negative for "
      f"{(F.silu(z) < 0).float().mean():.0%} of channels; sigmoid(z) mean {torch.sigmoid(z).mean():.2f}, never negative")
glue("ch05_memory_published", f"{memory['gated_delta_rule']:.0f}", display=False)
glue("ch05_memory_unit_a", f"{memory[UNIT_A]:.0f}", display=False)
glue("ch05_silu_magnitude", f"{F.silu(z).abs().mean():.2f}", display=False)
glue("ch05_silu_negative", f"{(F.silu(z) < 0).float().mean():.0%}", display=False)
glue("ch05_sigmoid_mean", f"{torch.sigmoid(z).mean():.2f}", display=False)
expect("A = 1 starts with a memory at least 4 times longer", memory[UNIT_A] > 4 * memory["gated_delta_rule"])

# %% [markdown]
# Starting at $A = 1$ stretches the initial memory from about {glue:text}`ch05_memory_published` tokens to about
# {glue:text}`ch05_memory_unit_a` (measured on MQAR's inputs, so the median differs from the one above, measured on
# rebinding's). The output gates differ more than their shapes suggest: at initialisation the
# SiLU gate multiplies each channel by a small number, {glue:text}`ch05_silu_magnitude` in magnitude on average and
# negative for {glue:text}`ch05_silu_negative` of the channels, while the sigmoid passes about
# {glue:text}`ch05_sigmoid_mean` of every channel with its sign intact.
#
# The sweep's two seeds per rate are too few for a layer that sometimes learns and sometimes does not, so the three
# layers were trained with more seeds at one rate: the rate DeltaNet, KDA and both variants chose from their
# sweeps (printed below; the published layer's sweep chose none, so it takes theirs).

# %% tags=["plumbing"]
RATE = published_cells["mqar16", 64, "delta_rule"][0]["lr"]
DIAGNOSED = ("gated_delta_rule", UNIT_A, SIGMOID_GATED)
expect("DeltaNet, KDA and both variants chose the same rate",
       {published_cells["mqar16", 64, m][0]["lr"] for m in ("delta_rule", "kda", UNIT_A, SIGMOID_GATED)} == {RATE})
at_rate = {mixer: sweep[mixer][RATE] for mixer in DIAGNOSED}
print(f"MQAR-16, width 64, lr {RATE:g}: accuracy of every seed")
for mixer, seeds in at_rate.items():
    print(f"{LABELS[mixer]:<37}{str(success_rate(seeds)):>18}   " + " ".join(f"{a:.2f}" for a in seeds))
silu_runs = at_rate["gated_delta_rule"]
p_learn = sum(a >= 0.9 for a in silu_runs) / len(silu_runs)
glue("ch05_rate", f"{RATE:g}", display=False)
for mixer, name in zip(DIAGNOSED, ("silu", "unit_a", "sigmoid")):
    glue(f"ch05_more_{name}", str(success_rate(at_rate[mixer])), display=False)
glue("ch05_verdict_gate", success_verdict(at_rate[SIGMOID_GATED], silu_runs, "sigmoid output gate",
                                          "SiLU output gate"), display=False)
glue("ch05_verdict_start", success_verdict(at_rate[UNIT_A], silu_runs, "A = 1 at start", "A ~ U(0, 16)"),
     display=False)
glue("ch05_sweep_miss", f"{(1 - p_learn) ** SWEEP_SEEDS:.2f}", display=False)
expect("the sigmoid output gate beats the SiLU one by Fisher's exact test",
       success_verdict(at_rate[SIGMOID_GATED], silu_runs, "a", "b").startswith("a beats b"))
expect("starting at A = 1 is no call against the published start",
       success_verdict(at_rate[UNIT_A], silu_runs, "a", "b").startswith("no call"))
expect("yet a larger share of A = 1 seeds learns than of the published start",
       success_rate(at_rate[UNIT_A]).rate > success_rate(silu_runs).rate)
expect("at least 5 seeds per layer", min(len(seeds) for seeds in at_rate.values()) >= 5)
expect("the sigmoid-gated layer is no call against DeltaNet",
       success_verdict(at_rate[SIGMOID_GATED], deltanet, "a", "b").startswith("no call"))

# %% [markdown]
# The published layer does learn the task sometimes: {glue:text}`ch05_more_silu` seeds at {glue:text}`ch05_rate`.
# With a success rate that low, both seeds of a sweep fail with probability about {glue:text}`ch05_sweep_miss`, so
# "at chance at every rate" said less than it seemed to. The two variants answer differently:
#
# * **starting at $A = 1$**: {glue:text}`ch05_more_unit_a`; *{glue:text}`ch05_verdict_start`*. A larger share of
#   seeds learns with the longer starting memory, but not by enough for the test to tell it from luck at this
#   number of seeds: the start of the decay may play a part, and the runs cannot yet say.
# * **a sigmoid output gate**: {glue:text}`ch05_more_sigmoid`; *{glue:text}`ch05_verdict_gate`*.
#
# The learning curves show how they differ (below): {glue:text}`ch05_silu_stuck` SiLU-gated seeds never get past
# 0.1 and {glue:text}`ch05_silu_climbing` are still climbing at the end, while {glue:text}`ch05_sigmoid_early`
# sigmoid-gated seeds pass 0.9 within the first thousand steps.

# %% tags=["plumbing"]
def learning_curves(mixer):
    return [r["evaluations"] for r in bakeoff_runs.values() if published_layer(r) and r["task"] == "mqar16"
            and r["d_model"] == 64 and r["mixer"] == mixer and r["lr"] == RATE and r["steps"] == GRID_STEPS]


curves = {mixer: learning_curves(mixer) for mixer in ("gated_delta_rule", SIGMOID_GATED)}
best = [max(e["accuracy"] for e in curve) for curve in curves["gated_delta_rule"]]
stuck, climbing = sum(a < 0.1 for a in best), sum(0.1 <= a < 0.9 for a in best)
learned_early = sum(any(e["accuracy"] >= 0.9 and e["step"] <= 1000 for e in curve) for curve in curves[SIGMOID_GATED])
print(f"SiLU gate: {stuck} of {len(best)} seeds never pass 0.1, {climbing} end between 0.1 and 0.9; "
      f"sigmoid gate: {learned_early} of {len(curves[SIGMOID_GATED])} pass 0.9 by step 1,000")
glue("ch05_silu_stuck", f"{stuck} of {len(best)}", display=False)
glue("ch05_silu_climbing", str(climbing), display=False)
glue("ch05_sigmoid_early", f"{learned_early} of {len(curves[SIGMOID_GATED])}", display=False)
expect("more SiLU-gated seeds stay below 0.1 than sigmoid-gated seeds miss 0.9 by step 1,000",
       stuck > len(curves[SIGMOID_GATED]) - learned_early)

fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
for ax, mixer, title in zip(axes, ("gated_delta_rule", SIGMOID_GATED),
                            ("SiLU output gate (as published)", "sigmoid output gate")):
    color = viz.MECHANISM_COLORS["gated_delta_rule"] if mixer == "gated_delta_rule" else viz.PALETTE["purple"]
    for curve in curves[mixer]:
        ax.plot([e["step"] for e in curve], [e["accuracy"] for e in curve], "o-", ms=3, lw=1.2, alpha=0.8,
                color=color)
    ax.axhline(0.9, color=viz.PALETTE["black"], lw=1, ls=":")
    ax.set_title(title)
    ax.set_xlabel("training step")
axes[0].set_ylabel("held-out accuracy (fraction of queries)")
axes[0].text(50, 0.92, "success: 0.9", fontsize=9)
fig.suptitle(f"Gated DeltaNet on MQAR-16, width 64, lr {RATE:g}: one line per seed", y=1.02)
plt.show()

# %% [markdown]
# ### Blocked or slowed? Twice the budget
#
# Seeds still climbing at the last evaluation leave a question open: does the SiLU gate stop some seeds from ever
# learning, or only make them slower? More seeds of the published layer were trained at the same rate with twice
# the budget.
# A longer run is a new run (the learning-rate schedule stretches with it), so these seeds are not the earlier
# ones continued.

# %% tags=["plumbing"]
long_runs = sorted((r for r in bakeoff_runs.values() if published_layer(r) and r["task"] == "mqar16"
                    and r["d_model"] == 64 and r["mixer"] == "gated_delta_rule" and r["lr"] == RATE
                    and r["steps"] > GRID_STEPS), key=lambda r: r["seed"])
LONG_STEPS = long_runs[0]["steps"]
long_best = [max(e["accuracy"] for e in r["evaluations"]) for r in long_runs]
long_stuck, long_between = sum(a < 0.1 for a in long_best), sum(0.1 <= a < 0.9 for a in long_best)
print(f"Gated DeltaNet as published, {LONG_STEPS:,} steps, lr {RATE:g}: "
      f"{success_rate([r['metric'] for r in long_runs])} succeed")
for r in long_runs:
    print(f"  seed {r['seed']}: " + " ".join(f"{e['accuracy']:.2f}" for e in r["evaluations"]))
glue("ch05_long_steps", f"{LONG_STEPS:,}", display=False)
glue("ch05_long_success", str(success_rate([r["metric"] for r in long_runs])), display=False)
glue("ch05_long_stuck", f"{long_stuck} of {len(long_runs)}", display=False)
glue("ch05_long_between", str(long_between), display=False)
first_success = [next((e["step"] for e in r["evaluations"] if e["accuracy"] >= 0.9), None) for r in long_runs]
long_late = sum(step is not None and step > GRID_STEPS for step in first_success)
expect("at least 5 seeds at the longer budget", len(long_runs) >= 5)
expect("the longer budget is at least twice the grid's", LONG_STEPS >= 2 * GRID_STEPS)
expect("with twice the budget some seed still never passes 0.1", long_stuck >= 1)
expect("and some seed still ends between 0.1 and 0.9", long_between >= 1)
expect("no seed passes 0.9 for the first time after the grid's budget", long_late == 0)

fig, ax = plt.subplots(figsize=(7.2, 3.6))
for r in long_runs:
    ax.plot([e["step"] for e in r["evaluations"]], [e["accuracy"] for e in r["evaluations"]], "o-", ms=3, lw=1.2,
            alpha=0.8, color=viz.MECHANISM_COLORS["gated_delta_rule"])
ax.axhline(0.9, color=viz.PALETTE["black"], lw=1, ls=":")
ax.axvline(GRID_STEPS, color=viz.PALETTE["black"], lw=1, ls="--", alpha=0.6)
ax.text(GRID_STEPS + 50, 0.45, "the grid's budget", fontsize=9)
ax.set_xlabel("training step")
ax.set_ylabel("held-out accuracy (fraction of queries)")
ax.set_title(f"Published Gated DeltaNet, MQAR-16, {LONG_STEPS:,} steps: one line per seed", fontsize=11)
plt.show()

# %% [markdown]
# With {glue:text}`ch05_long_steps` steps the published layer succeeds on {glue:text}`ch05_long_success` seeds.
# {glue:text}`ch05_long_stuck` never gets past 0.1 in the whole run, and {glue:text}`ch05_long_between` climb
# slowly and stop short of 0.9. The seeds that succeed do so within the grid's budget; none first passes 0.9 after
# it (the check above). So doubling the budget rescued no seed: the published layer's failures here are not a
# matter of time. These longer runs have no sigmoid-gated control, so they cannot say whether the SiLU output gate
# is what holds the others back.

# %% [markdown]
# ### A harder task: 64 pairs
#
# Sixteen pairs were too easy to separate DeltaNet, KDA and the sigmoid-gated layer. With 64 pairs at the same
# width, every head's state must hold more associations than its key has dimensions, so keys interfere (chapter 03).
# The same mixers were trained there, each at the rate its MQAR-16 sweep chose (every seed is printed below). The
# published Gated DeltaNet, which rarely learned even 16 pairs, is left out.

# %% tags=["plumbing"]
HARD = ("softmax", "delta_rule", SIGMOID_GATED, "kda")
head_dim = published_setup["d_model"] // published_setup["num_heads"]
for mixer in HARD:
    cell = published_cells.get(("mqar64", 64, mixer))
    success = cell_success(published_cells, "mqar64", mixer)
    print(f"MQAR-64, width 64, lr {cell[0]['lr']:g}: {LABELS[mixer]:<37}{success:>18}   "
          + " ".join(f"{r['metric']:.2f}" for r in cell))
hard = {mixer: [r["metric"] for r in published_cells["mqar64", 64, mixer]] for mixer in HARD}
glue("ch05_hard_head_dim", str(head_dim), display=False)
for mixer, name in zip(HARD, ("softmax", "deltanet", "sigmoid", "kda")):
    glue(f"ch05_hard_{name}", cell_success(published_cells, "mqar64", mixer), display=False)
glue("ch05_hard_verdict", success_verdict(hard[SIGMOID_GATED], hard["delta_rule"], "the sigmoid-gated layer",
                                          "DeltaNet"), display=False)
expect("MQAR-64 asks each head's state for more pairs than it has key dimensions", 64 > head_dim)
expect("every MQAR-64 cell has at least 5 seeds, all at the rate chosen on MQAR-16",
       all(len(v) >= 5 for v in hard.values())
       and all(published_cells["mqar64", 64, m][0]["lr"] == published_cells["mqar16", 64, m][0]["lr"] for m in HARD))
glue("ch05_hard_deltanet_low", f"{min(hard['delta_rule']):.2f}", display=False)
expect("softmax attention succeeds on every MQAR-64 seed", min(hard["softmax"]) >= 0.9)
expect("every DeltaNet seed gets above 0.8", min(hard["delta_rule"]) > 0.8)
expect("the gated layers split: some seed near chance (< 0.1), some past 0.5",
       all(min(hard[m]) < 0.1 and max(hard[m]) > 0.5 for m in (SIGMOID_GATED, "kda")))
expect("the sigmoid-gated layer is no call against DeltaNet on MQAR-64",
       success_verdict(hard[SIGMOID_GATED], hard["delta_rule"], "a", "b").startswith("no call"))

# %% [markdown]
# Softmax attention, whose cache keeps every pair, succeeds on {glue:text}`ch05_hard_softmax` seeds. The
# recurrent layers' heads have {glue:text}`ch05_hard_head_dim` key dimensions for 64 pairs. DeltaNet comes close on
# every seed (its lowest is {glue:text}`ch05_hard_deltanet_low`) but crosses 0.9 on {glue:text}`ch05_hard_deltanet`;
# the sigmoid-gated Gated DeltaNet ({glue:text}`ch05_hard_sigmoid`) and KDA ({glue:text}`ch05_hard_kda`) split
# between seeds that get most of the way and seeds that stay near chance. These seeds cannot call the gated layer
# against DeltaNet (*{glue:text}`ch05_hard_verdict`*). Nothing in MQAR ever needs forgetting, so a decay has
# nothing to win here; what it buys needs tasks that change what is true (the context switch and the two time
# scales of chapter 06).

# %% [markdown]
# ### The context switch, with the layers as published
#
# The context switch is section 4's experiment as a trained task: after a reset token, a query for a key that only
# an earlier episode bound must be answered "none" (chance 0.5: always answering "none"). The bake-off trained
# DeltaNet, Gated DeltaNet and KDA as published on it, at width 64 with the same budget: a sweep of three rates
# with two seeds each, then more seeds at the chosen rate, as many as the MQAR cells have (printed below).

# %% tags=["plumbing"]
SWITCH_MIXERS = ("delta_rule", "gated_delta_rule", "kda")
switch_final = {m: [r["metric"] for r in published_cells["switch", 64, m]] for m in SWITCH_MIXERS}
print("switch, width 64, as published")
print("sweep: accuracy of seeds 0 and 1 at each rate; final cell: every seed run at the chosen rate")
switch_sweep = print_sweep_table(bakeoff_runs, published_cells, "switch", SWITCH_MIXERS, steps=GRID_STEPS,
                                 choices=choices, sweep_seeds=SWEEP_SEEDS)
switch_runs = {key: r for key, r in bakeoff_runs.items() if r["task"] == "switch"}
switch_gdn = [min(layers) for layers in trained_retention(switch_runs, layers="published")[("gated_delta_rule", 64)]]
stuck_sweep = sum(a < 0.6 for seeds in switch_sweep["gated_delta_rule"].values() for a in seeds[:SWEEP_SEEDS])
glue("ch05_switch_seeds", str(min(len(v) for v in switch_final.values())), display=False)
for mixer, name in zip(SWITCH_MIXERS, ("deltanet", "gdn", "kda")):
    glue(f"ch05_switch_pub_{name}", cell_summary(published_cells, "switch", mixer), display=False)
    glue(f"ch05_switch_pub_{name}_success", cell_success(published_cells, "switch", mixer), display=False)
glue("ch05_switch_pub_fisher", success_verdict(switch_final["gated_delta_rule"], switch_final["delta_rule"],
                                               "Gated DeltaNet", "DeltaNet"), display=False)
glue("ch05_switch_pub_means_gdn", rule_verdict(published_cells, "switch", "gated_delta_rule", "delta_rule"),
     display=False)
glue("ch05_switch_pub_means_kda", rule_verdict(published_cells, "switch", "kda", "gated_delta_rule"), display=False)
glue("ch05_switch_gdn_retention_max", f"{max(switch_gdn):.2f}", display=False)
glue("ch05_switch_stuck", str(stuck_sweep), display=False)
expect("each switch cell has at least 5 seeds at a rate chosen from 3 rates x 2 seeds",
       min(len(v) for v in switch_final.values()) >= 5
       and all(len(switch_sweep[m]) >= 3 and min(len(s) for s in switch_sweep[m].values()) >= SWEEP_SEEDS
               for m in SWITCH_MIXERS))
expect("at the chosen rate every seed of all three layers succeeds (>= 0.9)",
       min(min(v) for v in switch_final.values()) >= 0.9)
expect("success counts cannot separate Gated DeltaNet from DeltaNet on the switch",
       success_verdict(switch_final["gated_delta_rule"], switch_final["delta_rule"], "a", "b").startswith("no call"))
expect("by the means rule Gated DeltaNet beats DeltaNet, and KDA beats Gated DeltaNet",
       rule_verdict(published_cells, "switch", "gated_delta_rule", "delta_rule").startswith(LABELS["gated_delta_rule"])
       and rule_verdict(published_cells, "switch", "kda", "gated_delta_rule").startswith(LABELS["kda"]))
expect("every published Gated DeltaNet switch run has a layer with mean retention below 0.99", max(switch_gdn) < 0.99)

# %% [markdown]
# All three layers learn the context switch on every seed at their chosen rate ({glue:text}`ch05_switch_seeds`
# seeds or more a cell), DeltaNet included: at this size the task does not need a gate to be learned. The gated
# layers answer more accurately on average: DeltaNet {glue:text}`ch05_switch_pub_deltanet`, Gated DeltaNet
# {glue:text}`ch05_switch_pub_gdn`, KDA {glue:text}`ch05_switch_pub_kda` (mean ± standard deviation). By the means
# rule *{glue:text}`ch05_switch_pub_means_gdn`* and *{glue:text}`ch05_switch_pub_means_kda`*; by success counts
# the cells cannot be told apart (*{glue:text}`ch05_switch_pub_fisher`*), since every seed succeeds. The gates took
# part: in every Gated DeltaNet run some layer keeps {glue:text}`ch05_switch_gdn_retention_max` of its memory per
# token or less. And the published Gated DeltaNet, SiLU output gate and all, learns this task on every seed at its
# chosen rate, where it rarely learned MQAR-16; {glue:text}`ch05_switch_stuck` of its sweep runs never left
# chance. So on the task built for forgetting, a working gate buys a point or so of accuracy, not the ability to
# learn the task. That gap of a point is called by the means rule alone, and only because the seeds of each cell
# land so close together.

# %% tags=["plumbing"]
from k3lite.bakeoff.plots import sweep_metrics

for task in ("twoscale", "rebind"):
    task_sweep = sweep_metrics(bakeoff_runs, task, 64, steps=GRID_STEPS)
    glue(f"ch05_{task}_in_kda_layer", cell_success(published_cells, task, GDN_IN_KDA_LAYER), display=False)
    glue(f"ch05_{task}_gdn_best", f"{max(a for s in task_sweep['gated_delta_rule'].values() for a in s):.2f}",
         display=False)
    expect(f"{task}: Gated DeltaNet's own layer has no final cell (every rate at chance)",
           (task, 64, "gated_delta_rule") not in published_cells)
    expect(f"{task}: while its recurrence inside KDA's layer learns the task on most seeds",
           success_rate(cell_metrics(published_cells, task, GDN_IN_KDA_LAYER)).rate > 0.5)

# %% [markdown]
# At this scale (width 64, four layers, {glue:text}`ch05_grid_steps` steps) the published layer's SiLU output gate
# is what holds it back most clearly: the same layer with a sigmoid gate learns MQAR-16 about as often as DeltaNet
# and KDA, and the longer runs succeed only where they had already succeeded within the grid's budget. The decay's
# start may add to it (the $A = 1$ runs learn more often, but not yet by the test). Chapter 06 tests the layer
# around the recurrence a second way: Gated DeltaNet's recurrence inside KDA's layer learns chapter 06's
# two-timescale task on {glue:text}`ch05_twoscale_in_kda_layer` seeds and rebinding on
# {glue:text}`ch05_rebind_in_kda_layer`, where Gated DeltaNet's own layer stayed at chance at every rate (best seed
# {glue:text}`ch05_twoscale_gdn_best` and {glue:text}`ch05_rebind_gdn_best`).
#
# Why a SiLU gate hurts here is a hypothesis, not a measurement: at initialisation it scales the recurrence's output
# and its gradient down and flips the sign of about half the channels. Two deliberate differences from the published
# model could matter too: the bake-off keeps PyTorch's default initialisation for every linear map, and a value
# width equal to the key width (the table of differences in `k3lite/bakeoff/models.py`). Gated DeltaNet is trained
# at far larger widths in its paper (Yang, Kautz and Hatamizadeh 2024, section 4), where none of this need hold.
#
# The lessons reach beyond this chapter:
#
# * a layer named after a published layer must *be* that layer, down to its initialisation;
# * the first thing to check of a trained gate is whether it ever gated;
# * a sweep with two seeds per rate can miss a layer that learns on {glue:text}`ch05_more_silu` seeds;
# * a claim about why a layer fails stays a hypothesis until a run isolates the cause.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 8. Exercises
#
# ### Exercise 1 (predict, then run): how long does a memory last?
#
# One head with 8 key channels. At token 0 the association $(k, v)$ is written with $\beta = 1$ under the unit key
# $k = e_0$. Every later token writes a new association with $\beta = 1$ under another unit key, $e_1, e_2, \dots,
# e_7$ in turn, and every token has the same gate $\alpha = 0.95$ ($g = \ln 0.95$). At which token does reading
# with $q = k$ first return less than half of $v$? Return your prediction from `predicted_half_life()`
# *before* running the cell after it; think about what the writes in between do to $k$'s association. The
# checker accepts a prediction within 25 % of the measured token.

# %% [markdown] tags=["notes"]
# Three exercises: a prediction (ask the room for a show of hands: under 10, 10 to 20, over 20 tokens; the writes in
# between are a distractor), a transfer (the chunked form of a gated rule with no delta correction, Mamba-2's
# recurrence) and an open question for discussion: can a constant gate act as a sliding window?

# %%
from k3lite.exercises import ch05



def predicted_half_life():
    raise NotImplementedError  # return your prediction, in tokens, e.g. 25

# %%
DECAY, MEMORY_TOKENS, KEYS = 0.95, 60, 8
key_index = torch.tensor([0] + [1 + t % (KEYS - 1) for t in range(MEMORY_TOKENS - 1)])
k_mem = F.one_hot(key_index, KEYS).double().view(1, MEMORY_TOKENS, 1, KEYS)
q_mem = F.one_hot(torch.zeros(MEMORY_TOKENS, dtype=torch.long), KEYS).double().view(1, MEMORY_TOKENS, 1, KEYS)
v_mem = torch.zeros(1, MEMORY_TOKENS, 1, 1, dtype=torch.float64)
v_mem[0, 0] = 1.0                                          # v = 1 under e_0; the other writes store 0
g_mem = torch.full((1, MEMORY_TOKENS, 1), math.log(DECAY), dtype=torch.float64)
beta_mem = torch.ones(1, MEMORY_TOKENS, 1, dtype=torch.float64)
readback, _ = gated_delta_rule.recurrent(q_mem, k_mem, v_mem, g_mem, beta_mem, scale=1.0)
readback = readback[0, :, 0, 0]
measured_half_life = int((readback < 0.5).nonzero()[0])
print("readback at tokens 0, 5, 10, 15, 20:", " ".join(f"{readback[t]:.3f}" for t in (0, 5, 10, 15, 20)))
print(f"first token with less than half of v: {measured_half_life}")

# %%
ch05.check_half_life_prediction(predicted_half_life, measured_half_life, decay=DECAY);

# %% tags=["solution"]
# Solution: only the gate shrinks k's association (the other keys are orthogonal to k), by 0.95 per token.
def predicted_half_life_solution():
    return math.ceil(math.log(2) / -math.log(DECAY))


ch05.check_half_life_prediction(predicted_half_life_solution, measured_half_life, decay=DECAY);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 (transfer): a gated rule without the delta correction
#
# Mamba-2 (Dao and Gu 2024, section 2) uses the same scalar decay without the delta rule:
# $S_t = \alpha_t S_{t-1} + k_t v_t^\top$, $o_t = S_t^\top q_t$. Section 6 chunked the *gated delta* rule; derive
# the chunked form of this simpler recurrence yourself. Write `gated_linear_chunk(q, k, v, g, state)` for one chunk
# of one head: `q, k [C, K]`, `v [C, V]`, `g [C]` (log-gates), `state [K, V]` the state the chunk starts from, no
# query scale. Return `(o [C, V], new_state [K, V])` with matrix products, no loop over the tokens. Ask yourself
# which parts of section 6 are still needed, and whether token $r$ reads its own write. The checker passes float64
# tensors and also runs 32 tokens with $g = -30$ at every token.

# %%
def gated_linear_chunk(q, k, v, g, state):
    raise NotImplementedError


# %%
ch05.check_gated_linear_chunk(gated_linear_chunk);


# %% tags=["solution"]
# Solution: no correction, so no UT transform; Γ keeps its diagonal because o_t reads S_t after the write.
def gated_linear_chunk_solution(q, k, v, g, state):
    G = torch.cumsum(g, dim=0)
    gamma = torch.exp((G[:, None] - G[None, :]).masked_fill(torch.ones(len(g), len(g)).triu(1).bool(), -math.inf))
    o = torch.exp(G)[:, None] * (q @ state) + ((q @ k.T) * gamma) @ v
    return o, torch.exp(G[-1]) * state + (torch.exp(G[-1] - G)[:, None] * k).T @ v


ch05.check_gated_linear_chunk(gated_linear_chunk_solution);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 (open question): a constant gate as a sliding window?
#
# You want a memory that keeps what the last 10 tokens wrote at 90 % strength or more, and keeps less than 1 % of
# anything written more than 100 tokens ago, like attention over a window of 100 tokens. Can one constant gate
# $\alpha$ do both? If not, what does a gate that depends on the token (as in Gated DeltaNet) do instead, and what
# would a model need to know to set it well? Write a few sentences; use numbers.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# No. Keeping 90 % after 10 tokens needs $\alpha^{10} \ge 0.9$, so $\alpha \ge 0.9^{1/10} \approx 0.9895$; keeping
# less than 1 % after 100 tokens needs $\alpha^{100} \le 0.01$, so $\alpha \le 0.01^{1/100} \approx 0.955$. The
# two ranges do not meet: an exponential has one time scale, and a window has a sharp edge. With $\alpha = 0.955$
# the last 10 tokens are kept at only 63 %; with $\alpha = 0.99$, 37 % of a write survives 100 tokens. A
# data-dependent gate does not try to forget by age: it keeps $\alpha_t \approx 1$ while the context stays
# relevant and drops towards 0 at a boundary (a new document, a new topic, a reassigned variable), so it
# forgets by *event*. To set it the model must recognise those events from the current token (and, through
# the short convolution, its neighbours), which is what its gate projection learns; a true window needs
# attention, or a recurrence with a state per position. A good answer states the two inequalities, shows they
# are incompatible, and names event-driven forgetting as what the learned gate buys.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What we saw
#
# * The delta rule forgets only what it overwrites. At a context switch the old associations stay:
#   readable when they should be gone, and, past capacity, in the way of the new ones.
# * A scalar decay per token, applied before the delta correction, lets the model clear the memory
#   ($\alpha \to 0$) or keep it ($\alpha = 1$) token by token: $S_t = (I - \beta_t k_t k_t^\top)\alpha_t S_{t-1} + \beta_t k_t v_t^\top$.
# * The decays compose as a prefix sum of log-gates; a write at $i$ read at $r$ carries
#   $\Gamma_{ri} = \exp(G_r - G_i)$, formed from the difference of log sums (the split $e^{G_r} e^{-G_i}$ overflows).
# * Chapter 04's chunked form carries over with $\Gamma$ folded in:
#   $A = \mathrm{StrictTril}(\mathrm{Diag}(\beta)(KK^\top \odot \Gamma))$, $W = T\,\mathrm{Diag}(\beta)(e^{G} \odot K)$,
#   $O = (e^{G} \odot Q)S_0 + (QK^\top \odot \Gamma)V'$, checked against `k3lite.ops.gated_delta_rule.chunked`.
# * What a scalar gate cannot do is keep *some* of the past: it decays every association alike.
#   Chapter 06 gives each key channel its own gate (KDA).
# * Trained (GPU bake-off): the earlier Gated DeltaNet runs began with their decay saturated at retention 1 (an
#   initialisation that did not match the published layer) and their gates barely moved, so they measured the
#   layer without its gate. Trained again as published on MQAR with 16 pairs at width 64, the gate is in use and the
#   layer rarely learns (at chance in the whole learning-rate sweep, a few successes in many more seeds), while
#   DeltaNet and KDA learn on every seed. Swapping its SiLU output gate for a sigmoid makes it learn about as often
#   as they do. Starting its decay with a longer memory let more seeds learn, but not by enough for the test to
#   tell it from chance. One variant per suspect, many seeds, a stated test.
# * On the context switch, trained as published, all three layers learn, DeltaNet included; the gated ones are a
#   little more accurate on average, with too few seeds yet to make that a verdict.

# %% [markdown] tags=["notes"]
# Recap the formula, the prefix sum, the chunk, and the honest trained result. Bridge to chapter 06: a
# scalar gate decays every association alike; KDA gives each key channel its own pace.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. An association is written at step $x$. Which gates multiply it by the time it is read at step $x + t$?
# 2. What does the gated delta rule reduce to with $g_t = 0$ at every token, and with $g_t \to -\infty$ at one
#    token?
# 3. Restarting $G$ at each chunk keeps it from growing over the whole sequence. Why is that not enough?
# 4. How can you tell from a trained model that its decay gate never took part, and what in the initialisation
#    caused it in the stored Gated DeltaNet runs?
#
# <details>
# <summary>Short answers</summary>
#
# 1. $\alpha_{x+1} \cdots \alpha_{x+t}$, $t$ factors, $= \exp(G_{x+t} - G_x)$: the gate of step $x$ acts before the
#    write.
# 2. DeltaNet; and a memory that is cleared at that token, then written with $\beta_t k_t v_t^\top$.
# 3. Inside one chunk strong gates still reach a large $|G|$ (64 gates of $-5$ give $-320$), so $e^{-G_i}$ overflows
#    and $e^{G_r}$ underflows; $\Gamma$ must be formed from the differences $G_r - G_i \le 0$.
# 4. Its retention $e^{g}$ stays at 1 (every stored layer kept over 0.95 per token) and $A_{\log}$ gets almost no
#    gradient. K3's bounded form $-5\,\sigma(A(Wx + b))$ was initialised with the softplus form's $A \in [1, 16]$ and
#    $b = \mathrm{softplus}^{-1}(\Delta t) \le -2.25$, so for most draws $A\,b \ll 0$ and the sigmoid is flat.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Yang, Kautz and Hatamizadeh (2024), *Gated Delta Networks: Improving Mamba2 with Delta Rule*, ICLR 2025:
#   [arXiv:2412.06464](https://arxiv.org/abs/2412.06464): the gated delta rule and the Gated DeltaNet layer;
#   sections 3 and 7.
# - Dao and Gu (2024), *Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State
#   Space Duality* (Mamba-2), ICML 2024: [arXiv:2405.21060](https://arxiv.org/abs/2405.21060): the data-dependent
#   scalar decay $S_t = \alpha_t S_{t-1} + k_t v_t^\top$; section 2.
# - Yang, Wang, Zhang, Shen and Kim (2024), *Parallelizing Linear Transformers with the Delta Rule over Sequence
#   Length*, NeurIPS 2024: [arXiv:2406.06484](https://arxiv.org/abs/2406.06484): the chunked WY/UT form that section
#   6 extends.
# - Songlin Yang, Yu Zhang and contributors, *flash-linear-attention* (fla), the reference Triton implementation of
#   these mixers: [github.com/fla-org/flash-linear-attention](https://github.com/fla-org/flash-linear-attention):
#   the published layer (its SiLU-gated `FusedRMSNormGated` output) that section 7 examines.
# - Goldberg (1991), *What Every Computer Scientist Should Know About Floating-Point Arithmetic*, ACM Computing
#   Surveys 23(1): [doi:10.1145/103162.103163](https://doi.org/10.1145/103162.103163): float32's range and overflow;
#   section 6.
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); section "Gated Delta Net" (the product
#   $\alpha_x\alpha_{x+1}\cdots\alpha_{x+t}$ that section 5 corrects).
