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
# delta update. That is the gated delta rule of Gated DeltaNet.

# %% slideshow={"slide_type": "skip"}
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from k3lite import viz
from k3lite.ops import delta_rule, gated_delta_rule
from k3lite.runtime import seed_everything

viz.use_style()
seed_everything(0)
torch.set_printoptions(precision=3)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The delta rule at a context switch
#
# A small memory experiment, no training. Keys are random unit vectors in $K = 16$ dimensions, values
# random unit vectors. We store a set **A** of associations, then the context switches and we store a
# set **B** of 8 new ones, with new keys. At the end we read every key back, $\hat v = S^\top k$, and
# call a read *recalled* when the stored value closest in direction to $\hat v$ (among all values of A
# and B) is the right one. We use $\beta = 0.5$ for every write, a typical value for a trained model's
# write strength.
#
# First the memory loop for one head, written for a batch of independent trials. It already takes a
# log-decay `g` per token; for the plain delta rule we pass `g = 0` (a decay factor of 1).

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

# %% [markdown]
# The stale part of A does not only linger: it takes room from B. With nothing before it, B is
# recalled 98 % of the time; after 64 stale associations, 90 %. The delta rule has no instruction for
# "forget all of that": it can only correct the answer under the key it is writing now, and each
# correction only partly removes what the stale content contributed along that key ($\beta < 1$).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. Forgetting by decay: Mamba-2
#
# For purely additive linear attention the cure is well known. Mamba-2 multiplies the memory by a
# data-dependent scalar before adding the new association:
#
# $$S_t = \alpha_t\, S_{t-1} + k_t v_t^\top, \qquad \alpha_t = e^{g_t} \in (0, 1].$$
#
# An association written at step $x$ and read at step $x + t$ has been multiplied by
# $\alpha_{x+1}\alpha_{x+2}\cdots\alpha_{x+t}$ on the way. With a constant $\alpha$ every association
# fades the same way, whatever it holds:

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
# chapter 04 with the decay folded in (`chunked`). Random inputs at an awkward length (T = 37, not a
# multiple of the chunk size 16), unit keys, gates anywhere in $[-3, 0]$:

# %%
generator = torch.Generator().manual_seed(1)
B, T, H, K, V = 2, 37, 3, 8, 5
q = torch.randn(B, T, H, K, generator=generator)
k = F.normalize(torch.randn(B, T, H, K, generator=generator), dim=-1)
v = torch.randn(B, T, H, V, generator=generator)
g = -3 * torch.rand(B, T, H, generator=generator)
beta = torch.rand(B, T, H, generator=generator)


def agreement(got, expected, tol):
    """'agree within tol', or by how much they differ (the assert below would then fail too)."""
    worst = (got - expected).abs().max().item()
    return f"agree within {tol:.0e}" if worst < tol else f"DIFFER by {worst:.1e}"


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
# B ($g = -30$, a decay of $e^{-30} \approx 10^{-13}$). A trained model would produce that drop from
# the input (a separator token, say); here we set it by hand to see what the mechanism can do.

# %%
print(f"{'|A|':>4} {'rule':<12} {'recall A':>9} {'recall B':>9}")
table = {}
for num_a in (8, 64):
    for rule, switch in (("delta", 0.0), ("gated delta", -30.0)):
        table[num_a, rule] = run_switch(num_a, switch_log_decay=switch)
        recall_a, recall_b = table[num_a, rule]
        print(f"{num_a:>4} {rule:<12} {recall_a:>9.2f} {recall_b:>9.2f}")

# %% [markdown]
# Each rule gets something wrong, and the table shows what:
#
# * **Gated delta forgets A, by design.** Its recall of A is near zero (0.02 and 0.01): an A key now
#   reads B content, which points to a B value. If the task after the switch still needed A, this is
#   a failure, and a scalar gate cannot avoid it: it decays everything together. (Chapter 06 is
#   about exactly that.)
# * **Delta keeps stale A.** Under capacity, A stays largely readable (0.75 at |A| = 8): stale
#   answers to questions that no longer apply. Over capacity, the stale associations crowd B: B drops
#   to 0.90 while the gated rule, with an empty memory at the switch, recalls B 0.96 of the time.
#
# The gap on B is real but modest at $\beta = 0.5$: the delta rule's own correction removes part of
# the stale content along each key it writes. How much depends on the write strength $\beta$:

# %%
for beta_value in (0.3, 0.5, 1.0):
    delta_b = run_switch(64, 0.0, beta=beta_value)[1]
    gated_b = run_switch(64, -30.0, beta=beta_value)[1]
    print(f"beta = {beta_value:.1f}, |A| = 64: recall of B, delta {delta_b:.2f}, gated delta {gated_b:.2f}")

# %% [markdown]
# Weak writes ($\beta = 0.3$) leave most of the stale content in place and the delta rule falls to
# 0.77 on B against 0.98; full-strength writes ($\beta = 1$) replace the answer along each written
# key exactly, yet the gap stays (0.84 against 0.89), because each later B key overlaps the earlier
# ones and its correction drags stale A content along. (Both rules are lower at $\beta = 1$: eight
# full-strength writes of overlapping keys overwrite each other.)

# %% [markdown] slideshow={"slide_type": "subslide"}
# The same comparison for every size of A: the picture of what each rule keeps.

# %%
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
# $$D_{r,i} = \prod_{j=i+1}^{r} \alpha_j = \exp\Big(\sum_{j=i+1}^{r} g_j\Big) = \exp(G_r - G_i),
# \qquad G_t = \sum_{j \le t} g_j .$$
#
# One prefix sum $G$ gives every entry; the chunked form of chapter 04 uses exactly this matrix
# inside each chunk (with $G$ restarted at the chunk's start), multiplying the causal mask $M$ into
# $D \odot M$. Taking the difference of log sums, never $e^{G_r} \cdot e^{-G_i}$, keeps it finite:
# $G$ falls by 30 at one switch alone, and $e^{30}$ times a tiny number is how overflow starts.
#
# The worked article in the seeds writes the product as $\alpha_x \alpha_{x+1} \cdots \alpha_{x+t}$,
# starting at the writing step $x$. The recurrence says otherwise: the gate of step $x$ acts *before*
# $k_x v_x^\top$ is added. Compute it: write one association at $x$, read it at $x + t$.

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
print(f"α_x ··· α_(x+t) (the seeds)   {from_write_step:.4f}")

# %% [markdown]
# The product starts at $\alpha_{x+1}$, as in the reference formula; the seeds' version has one gate
# too many. Now the whole matrix, for a gate that stays near 1 and drops once, at a switch at step 24:

# %%
steps = 48
g_switch = torch.full((steps,), -0.03)
g_switch[24] = -4.0
G = torch.cumsum(g_switch, dim=0)
below = torch.ones(steps, steps, dtype=torch.bool).tril()
decay = torch.exp((G[:, None] - G[None, :]).masked_fill(~below, float("-inf")))
print(f"D[23, 0] = {decay[23, 0].item():.3f} (before the switch)   "
      f"D[47, 0] = {decay[47, 0].item():.4f} (across it)   D[47, 24] = {decay[47, 24].item():.3f} (after it)")

fig, ax = plt.subplots(figsize=(5.6, 4.6))
viz.heatmap(ax, decay, title="Cumulative decay exp(G_r − G_i)", xlabel="written at step i",
            ylabel="read at step r", colorbar_label="factor the association is multiplied by")
ax.axvline(23.5, color="white", lw=1, ls="--")
ax.axhline(23.5, color="white", lw=1, ls="--")
plt.show()

# %% [markdown]
# Below the diagonal, the triangle written and read before the switch (top left) and the one written
# and read after it (bottom right) stay bright; the rectangle of associations written before step 24
# and read after it is dark. One gate, one step, one cut through the whole past.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Exercises
#
# ### Exercise 1: one step of the gated delta rule
#
# Write `gated_delta_step(S, k, v, g, beta)` for one head: `S` is `[K, V]`, `k` `[K]`, `v` `[V]`,
# `g` a float (the log of the decay) and `beta` a float. Return the new state. The order matters.

# %%
from k3lite.exercises import ch05


def gated_delta_step(S, k, v, g, beta):
    raise NotImplementedError


ch05.check_gated_delta_step(gated_delta_step)


# %% tags=["hide-input"]
# Solution
def gated_delta_step(S, k, v, g, beta):
    S = math.exp(g) * S                          # forget first
    return S + beta * torch.outer(k, v - S.T @ k)  # then correct the answer under k


ch05.check_gated_delta_step(gated_delta_step)

# %% [markdown]
# ### Exercise 2: the decay matrix
#
# Write `cumulative_decay(g)` for a 1-D tensor of log-gates `g [T]`: return `D [T, T]` with
# `D[r, i]` the factor an association written at step `i` carries when read at step `r`, and 0 where
# `i > r`. It must stay finite when one gate is −1000 (a full wipe).

# %%
def cumulative_decay(g):
    raise NotImplementedError


ch05.check_cumulative_decay(cumulative_decay)


# %% tags=["hide-input"]
# Solution
def cumulative_decay(g):
    G = torch.cumsum(g, dim=0)
    lower = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.exp((G[:, None] - G[None, :]).masked_fill(~lower, float("-inf")))


ch05.check_cumulative_decay(cumulative_decay)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What we saw
#
# * The delta rule forgets only what it overwrites. At a context switch the old associations stay:
#   readable when they should be gone, and, past capacity, in the way of the new ones.
# * A scalar decay per token, applied before the delta correction, lets the model clear the memory
#   ($\alpha \to 0$) or keep it ($\alpha = 1$) token by token: $S_t = (I - \beta_t k_t k_t^\top)\alpha_t S_{t-1} + \beta_t k_t v_t^\top$.
# * The decays compose as a prefix sum of log-gates; a write at $i$ read at $r$ carries
#   $\exp(G_r - G_i)$, which the chunked form computes as a matrix per chunk.
# * What a scalar gate cannot do is keep *some* of the past: it decays every association alike.
#   Chapter 06 gives each key channel its own gate (KDA).
