# %% [markdown] slideshow={"slide_type": "slide"}
# # 00 · Introduction: seven years in one lineage
#
# In 2019 GPT-2 small had 124 million parameters (chapter 01 counts them exactly; the GPT-2 paper's Table 2 says
# 117 million, a miscount that OpenAI corrected in the README of its `openai/gpt-2` repository). In 2026
# Kimi K3 has about 2.8 trillion (its published configuration, July 2026). This course starts from an unsigned
# worklog, *From GPT-2 to Kimi K3, Explained*, which every chapter calls "the article" (it and two published
# summaries of it are listed under Sources at the end of this chapter). The article opens with the ratio of the
# two sizes, 22,580, and asks whether the seven years in between were *just* scale. They were not: almost every
# part of the model that mixes tokens has been replaced, each time to fix a specific failure of the part before
# it.
#
# This course rebuilds that lineage step by step, in code that runs on a laptop. Each chapter
# shows the failure of the previous step with an experiment, writes the fix as math, builds it,
# and checks it against the `k3lite` package.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 45 min for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. compute the GPT-2-to-K3 parameter ratio from rounded and from exact counts, and explain why the article's
#    22,580 is right to about one percent only;
# 2. explain why a mixture-of-experts model's *active* parameters per token are far fewer than its total;
# 3. name, for each step of the lineage (linear attention, DeltaNet, Gated DeltaNet, KDA, K3), the failure of the
#    step before it that it fixes;
# 4. run a chapter in the small (CPU) and the full (GPU) profile, and explain what the notebook tests check about
#    every stored output.
#
# **Prerequisites.**
#
# - Python and PyTorch tensors (shapes, indexing, matrix products): the [PyTorch
#   tutorials](https://pytorch.org/tutorials/).
# - Running a Jupyter notebook cell by cell: the [JupyterLab documentation](https://jupyterlab.readthedocs.io/).
# - What a transformer language model computes, at the level of a diagram: Vaswani et al. (2017),
#   [arXiv:1706.03762](https://arxiv.org/abs/1706.03762), §3; chapter 01 builds it in detail.

# %% tags=["plumbing"]
import math

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
from myst_nb import glue

from k3lite.course import accounting, runtime, viz
from k3lite.exercises import ch00
from k3lite.models.gpt2 import GPT2Config
from k3lite.models.k3 import K3Config

viz.use_style()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The ratio, computed
#
# Claims in this course are printed by a cell, never just quoted. Here is GPT-2 small's exact
# parameter count (chapter 01 derives it) and Kimi K3's total from its published configuration
# (chapter 10 builds it):

# %% [markdown] tags=["notes"]
# Open with the question the article asks: were the seven years *just* scale? Let the room guess
# the ratio before the cell prints it, then point out that the answer depends on which totals one
# divides: total parameters, or the ones a token actually uses. Keep the mixture of experts for
# later; here it only explains why "active" is so much smaller than "total".

# %%
gpt2_exact = accounting.gpt2_parameter_count(GPT2Config())
k3_total = accounting.k3_param_counts(K3Config.published())["total"]
print(f"GPT-2 small, exact: {gpt2_exact:,} parameters")
print(f"Kimi K3, from its configuration: {k3_total:,} parameters ({k3_total / 1e12:.2f}e12)")

# %% [markdown]
# The ratio depends on which two totals one divides:

# %%
ratios = [
    ("2.8e12 / 124e6 (both rounded)", 2.8e12 / 124e6),
    ("2.8e12 / GPT-2's exact count", 2.8e12 / gpt2_exact),
    ("K3's configured total / GPT-2's exact count", k3_total / gpt2_exact),
]
for label, ratio in ratios:
    print(f"{label:<46}{ratio:>12,.1f}")
spread = (ratios[0][1] - ratios[-1][1]) / ratios[-1][1]
print(f"largest over smallest: {spread:.1%} apart")
for key, (_, ratio) in zip(("rounded", "exact_gpt2", "exact"), ratios):
    glue(f"ch00_ratio_{key}", f"{ratio:,.1f}", display=False)
glue("ch00_k3_total", f"{k3_total / 1e12:.2f}e12", display=False)
glue("ch00_spread", f"{spread:.1%}", display=False)

# %% [markdown]
# The article's 22,580 comes from the rounded numbers: 2.8 trillion divided by a GPT-2 of
# exactly 124 million gives {glue:text}`ch00_ratio_rounded`. With GPT-2's exact size the same 2.8e12 gives
# {glue:text}`ch00_ratio_exact_gpt2`, and K3's total as configured (about {glue:text}`ch00_k3_total`) gives
# {glue:text}`ch00_ratio_exact`. The three readings are {glue:text}`ch00_spread` apart: the
# headline is right to about one percent, and only its first two digits (about 22 thousand) are reliable.
# Nor is K3 22,580 copies of GPT-2 at work on every token. Its MLPs are a *mixture of experts*: each layer's MLP
# is split into many small MLPs ("experts"), and a router sends each token to 16 of its 896 routed experts, plus
# 2 shared experts that every token uses (chapter 08). Most of K3's parameters sit in the routed experts, so the
# parameters that work on any one token, the *active* ones, are far fewer. Active means the parameters that take
# part in computing one token: the selected experts and every other layer, but not the unselected experts, and not
# the input embedding table, of which a token only looks up one row:

# %%
k3_config = K3Config.published()
k3_counts = accounting.k3_param_counts(k3_config)
print(f"routed experts: {k3_counts['routed_experts'] / k3_total:.0%} of K3's parameters; "
      f"each token uses {k3_config.top_k} of {k3_config.num_experts}")
print(f"active per token: {k3_counts['active']:,} ({k3_counts['active'] / 1e9:.0f}e9), "
      f"{k3_counts['active'] / gpt2_exact:,.0f} GPT-2 smalls")
glue("ch00_decades_total", f"{math.log10(k3_total / gpt2_exact):.1f}", display=False)
glue("ch00_decades_active", f"{math.log10(k3_counts['active'] / gpt2_exact):.1f}", display=False)
glue("ch00_active_gpt2s", f"{k3_counts['active'] / gpt2_exact:,.0f}", display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(6.4, 3.6))
models = [(f"GPT-2 {size}", accounting.gpt2_parameter_count(getattr(GPT2Config, size)()), viz.MECHANISM_COLORS["gpt2"])
          for size in ("small", "medium", "large", "xl")]
models += [("K3, active per token", k3_counts["active"], viz.PALETTE["sky"]),
           ("K3, total", k3_total, viz.MECHANISM_COLORS["k3"])]
ax.barh([name for name, _, _ in models], [count for _, count, _ in models], color=[c for _, _, c in models])
ax.set_xscale("log")
ax.set_xlim(1e7, 3e13)
for row, (_, count, _) in enumerate(models):
    ax.text(count * 1.3, row, f"{count:.3g}", va="center", fontsize=9)
ax.invert_yaxis()
ax.set_xlabel("parameters (log scale)")
ax.set_title("Parameter counts: GPT-2 (2019) and Kimi K3 (2026)")
plt.show()

# %% [markdown]
# Each step on the logarithmic axis is a factor of ten: K3's total sits {glue:text}`ch00_decades_total` steps
# beyond GPT-2 small ($\log_{10}$ of their ratio), and even the part of K3 that works on one token sits
# {glue:text}`ch00_decades_active` steps beyond it.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The lineage: what each step fixes
#
# The course follows one thread: **how a model remembers the tokens it has read**.
#
# * **GPT-2** keeps every key and value (the KV cache). Exact recall, but memory and reading
#   time grow with every token.
# * **Linear attention** folds the history into a fixed-size matrix $S_t = S_{t-1} + k_t v_t^\top$.
#   Constant memory, but writes only *add*: associations pile up and interfere.
# * **DeltaNet** first reads what the key already retrieves and writes only the correction,
#   $S_t = S_{t-1} + \beta_t k_t (v_t - S_{t-1}^\top k_t)^\top$, with a learned write strength
#   $\beta_t \in (0, 1)$: targeted overwrites.
#   But nothing fades unless it is overwritten.
# * **Gated DeltaNet** decays the whole state by a learned $\alpha_t \in (0, 1]$ each step, so
#   stale memories can be cleared in bulk. One rate per head, though, forgets every channel alike.
# * **KDA** (Kimi Delta Attention) gives every key channel its own decay rate, $\mathrm{Diag}(\alpha_t)$.
#   Still a fixed-size state, so exact recall of distant tokens is lost.
# * **Kimi K3** interleaves three KDA layers with one MLA layer (softmax attention over a
#   compressed cache) for exact retrieval, adds a latent mixture of experts with the SiTU
#   activation, and Attention Residuals that retrieve across *depth*.

# %% [markdown] tags=["notes"]
# This is the map of the whole course: one thread, how a model remembers what it has read. Ask
# the room what each step gives up to fix the failure before it (constant memory costs exact
# recall; overwrites cost nothing but need a chunked form to be fast). Point at the stack diagram
# last: every box in it is a chapter.

# %% tags=["plumbing"]
LINEAGE = [
    ("GPT-2", "2019", "01", "softmax attention + KV cache", "the baseline"),
    ("Linear attention", "2020", "02", "S += k vᵀ (fixed-size state)", "cache grows with every token"),
    ("DeltaNet", "2021", "03-04", "S += β k (v − Sᵀk)ᵀ", "additive writes interfere"),
    ("Gated DeltaNet", "2024", "05", "S ← α S, then the delta write", "nothing fades"),
    ("KDA (Kimi Linear)", "2025", "06", "S ← Diag(α) S, α per channel", "one decay per head is too coarse"),
    ("Kimi K3", "2026", "07-10", "3 KDA : 1 MLA, latent MoE, AttnRes", "a fixed state forgets exact tokens"),
]
# K3 gets the MLA colour here: next to KDA, its own blue would not stand out.
COLORS = [viz.MECHANISM_COLORS[key] for key in ("gpt2", "linear_attention", "delta_rule", "gated_delta_rule", "kda", "mla")]


def draw_lineage(ax):
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.6, len(LINEAGE) * 1.2)
    ax.axis("off")
    for row, ((name, year, chapter, rule, fixes), color) in enumerate(zip(LINEAGE, COLORS)):
        y = (len(LINEAGE) - 1 - row) * 1.2
        ax.add_patch(FancyBboxPatch((0.1, y - 0.35), 3.6, 0.7, boxstyle="round,pad=0.05",
                                    facecolor=color, edgecolor=viz.INK, alpha=0.9))
        text_color = "white" if color not in (viz.PALETTE["sky"], viz.PALETTE["orange"]) else viz.INK
        ax.text(1.9, y + 0.08, name, ha="center", va="center", fontsize=11, weight="bold", color=text_color)
        ax.text(1.9, y - 0.2, f"{year} · chapter {chapter}", ha="center", va="center", fontsize=8, color=text_color)
        ax.text(4.0, y + 0.12, rule, ha="left", va="center", fontsize=9.5)
        if row:
            ax.text(4.0, y - 0.2, f"fixes: {fixes}", ha="left", va="center", fontsize=9, style="italic",
                    color=viz.PALETTE["red"])
            ax.add_patch(FancyArrowPatch((1.9, y + 0.82), (1.9, y + 0.42), arrowstyle="-|>",
                                         mutation_scale=14, color=viz.INK))
        else:
            ax.text(4.0, y - 0.2, fixes, ha="left", va="center", fontsize=9, style="italic")


fig, ax = plt.subplots(figsize=(8.0, 6.2))
draw_lineage(ax)
ax.set_title("From GPT-2 to Kimi K3: each step fixes a failure of the one before")
plt.show()

# %% [markdown]
# The end of the lineage, as one picture: 23 macrocycles, each of three KDA layers and one MLA layer, then a final
# MLA layer (93 layers, chapter 10 builds them); every layer but the first is followed by a latent mixture of
# experts (the first by a dense MLP), and Attention Residuals read across depth.
#
# ![Kimi K3: the whole stack, KDA and MLA mixers with latent MoE, read across depth by AttnRes](../figures/diagram_k3_stack.svg)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. How to run the course
#
# **Two commands.** From the repository root, `make book` creates a virtual environment,
# installs `k3lite`, executes every chapter and builds the static site in `_build/html`;
# `make test` runs the unit tests of `k3lite` and checks every chapter notebook. `make lab` opens
# the chapters in JupyterLab.
#
# **CPU or GPU.** Everything runs on a CPU (the two Triton chapters, 11a and 11, need Triton, which has wheels
# only for Linux; elsewhere their kernel cells are skipped). Each chapter asks `k3lite.course.runtime.profile()` for a
# size: `"small"` on a CPU (it fits the chapter's time budget on a two-core laptop) and `"full"`
# on a GPU (bigger models, longer training). The environment variable `K3LITE_PROFILE=small`
# or `=full` overrides the choice, for instance to reproduce the stored notebooks on a GPU.
# Triton kernels run natively on a GPU and, slowly, in Triton's interpreter on a CPU.
#
# **How the notebooks are tested.** Each chapter is a pair: `chapters/NN_slug.py` (the source,
# in the py:percent format) and `NN_slug.ipynb` (executed, with its outputs stored). `make test`
# re-runs every notebook under `nbval` and compares each cell's new output with the stored one,
# so every printed number in the book is re-derived on every test run. That is why printed
# numbers are rounded and every random draw is seeded; the few cells whose output genuinely
# varies (timings, the machine's name) are marked `# NBVAL_IGNORE_OUTPUT`, like the next one.

# %% [markdown] tags=["notes"]
# Keep this short in a lecture: two commands, two profiles, and why every printed number is
# rounded and seeded (nbval re-derives them on every test run). Show the printed profile line and
# ask who will run the course on a GPU.

# %%
# NBVAL_IGNORE_OUTPUT
print(runtime.describe())
print(f"profile on this machine: {runtime.profile()}; a size chosen by pick(small, full): {runtime.pick('small', 'full')}")

# %% [markdown]
# `book.yml` at the repository root lists the chapters in reading order with the time each must
# execute within on a two-core CPU; `make timings` measures them.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# Besides plain checked exercises, every chapter has exercises of three kinds. In a **prediction** you write down what you expect
# before a cell measures it; the checker accepts a prediction within a stated range and explains the gap.
# In a **transfer** you apply the chapter's idea to a case the chapter did not show. An **open question**
# has no checker: write a paragraph; a model answer for the lecturer is folded below it. A checker from
# `k3lite.exercises` says *correct*, *not attempted yet*, or what is wrong. The solution cell below each
# exercise is folded in the book and empty in the student edition; try first.
#
# ### Exercise 1: what each step fixes
#
# Map every step of the lineage after GPT-2 to the failure (of the step before it) that it fixes.
# The failures below are in no particular order, and one of them is fixed by no step. Return a dict whose
# keys are exactly the five steps printed below and whose values are letters, for example
# `{"linear attention": "x", ...}`.

# %% [markdown] tags=["notes"]
# Do the first exercise together in the room: it is the lineage slide again, as a quiz, with a decoy
# failure. Then take the prediction as a show of hands (how much of K3 are its mixers?) before anyone
# runs the cell: most guesses are far too high. The transfer and the 22,580 count are homework.

# %%
print("steps:", ", ".join(repr(step) for step in ch00.STEPS))
for letter, failure in ch00.FAILURES.items():
    print(f"({letter}) {failure}")


# %%
def match():
    """Return {step: letter}, one entry for each of the five steps in ch00.STEPS."""
    raise NotImplementedError


# %%
ch00.check_lineage(match);


# %% tags=["solution"]
# Solution
def match_solution():
    return {
        "linear attention": "c",
        "DeltaNet": "e",
        "Gated DeltaNet": "a",
        "KDA": "d",
        "K3 (KDA + MLA hybrid)": "b",
    }


ch00.check_lineage(match_solution);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 (prediction): how much of K3 mixes tokens?
#
# Most chapters of this course (01 to 07) are about the token mixers, the layers that decide what a token can
# remember; in K3 these are the KDA and MLA layers. What fraction of K3's parameters sit in them? Use what section 1 printed, write
# your prediction as a fraction (0.05 for 5 %), then run the measurement. The checker accepts a
# prediction within a factor of three.

# %%
def predicted_mixer_share():
    raise NotImplementedError  # return your prediction, e.g. 0.05


# %%
k3_parts = accounting.k3_parameter_breakdown(k3_config)
measured_mixer_share = (k3_parts["kda mixers"] + k3_parts["mla mixers"]) / sum(k3_parts.values())
glue("ch00_mixer_share", f"{measured_mixer_share:.1%}", display=False)
ch00.check_mixer_share_prediction(predicted_mixer_share, measured=measured_mixer_share);


# %% tags=["solution"]
# Solution: the routed experts hold almost everything (section 1), so the mixers' share must be below the
# small rest; a few KDA and MLA projection matrices per layer against 896 experts per layer.
def predicted_mixer_share_solution():
    return 0.01


ch00.check_mixer_share_prediction(predicted_mixer_share_solution, measured=measured_mixer_share);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 (transfer): a router that picks a different number of experts
#
# Section 1 counted K3's *active* parameters for its router's choice of 16 experts per token. Write
# `active_with_top_k(top_k)`: the active parameters per token of a K3 that is the same in every respect
# except that its router picks `top_k` routed experts. Use `k3_config` and `k3_counts` from section 1;
# the checker tries `top_k` = 1, 8, 16, 32 and 896.

# %%
def active_with_top_k(top_k):
    raise NotImplementedError


# %%
ch00.check_active_with_top_k(active_with_top_k);


# %% tags=["solution"]
# Solution: only the routed experts scale with top_k; the rest of the active count stays.
def active_with_top_k_solution(top_k):
    routed_expert_size = k3_counts["routed_experts"] // (k3_config.num_experts)  # one expert, all MoE layers
    return k3_counts["active"] + (top_k - k3_config.top_k) * routed_expert_size


ch00.check_active_with_top_k(active_with_top_k_solution);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 4: the GPT-2 behind 22,580
#
# Taking the article's 2.8e12 for K3, what GPT-2 parameter count makes the ratio exactly 22,580?
# Return that count as a number (an int or a float; the checker accepts it to within one
# parameter), then compare it with GPT-2 small's exact count, `gpt2_exact`, printed in section 1.

# %%
def implied_count():
    raise NotImplementedError


# %%
ch00.check_implied_gpt2_count(implied_count);


# %% tags=["solution"]
# Solution
def implied_count_solution():
    return 2.8e12 / 22_580


ch00.check_implied_gpt2_count(implied_count_solution);
print(f"implied: {implied_count_solution():,.0f}; exact: {gpt2_exact:,}; "
      f"the implied count is {gpt2_exact - implied_count_solution():,.0f} smaller")

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 5 (open question): just scale?
#
# The article asks whether the seven years from GPT-2 to K3 were *just* scale. Using the numbers of this
# chapter (the ratio of totals, the active parameters, the mixers' share from Exercise 2) argue one side
# in a paragraph. Then name one measurement that would change your mind, and say which chapter of the
# course could make it.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# A strong answer separates *how many* parameters from *what they do*. In totals K3 is
# {glue:text}`ch00_decades_total` orders of magnitude larger, but a token uses only its active parameters,
# {glue:text}`ch00_active_gpt2s` GPT-2 smalls' worth, because routing was added (a change of architecture, not of
# size). The token mixers hold only {glue:text}`ch00_mixer_share` of the parameters and were replaced almost entirely (softmax attention with a growing cache became three
# KDA layers with a fixed-size state for every MLA layer with a compressed cache), so "the parameters
# grew" and "the architecture changed" are both true and measure different things. A measurement that
# would decide it: train models of equal size and data that differ only in their mixer and compare loss,
# recall and decode memory per token (chapters 03, 05, 06 and 10 do this at toy size on the bake-off tasks,
# chapters 01, 02 and 07 count the memory). Good answers also note what a parameter count hides: memory
# read per generated token, context length and training data are not in the ratio. Give credit for a
# clear position with a number from the chapter behind it; the side taken does not matter.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Next
#
# Chapter 01 builds GPT-2 from its pieces and measures the structure the whole lineage is about:
# the KV cache, which grows by a fixed number of bytes for every token GPT-2 small reads (printed below, in bf16:
# 16-bit floats of 2 bytes each).

# %% [markdown] tags=["notes"]
# Close with the number chapter 01 starts from: the bytes GPT-2 small adds to its cache for every
# token. Ask the room to estimate the cache for a 1,000-token prompt before the next lecture.

# %%
print(f"GPT-2 small KV cache, bf16: {accounting.gpt2_kv_bytes_per_token(GPT2Config(), 'bf16'):,} bytes per token")

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. Why does section 1 print three different GPT-2-to-K3 ratios, and how far apart are they?
# 2. K3 has about 2.8 trillion parameters. Why does one token use only a small fraction of them?
# 3. Which failure does DeltaNet fix, and which does Gated DeltaNet fix?
# 4. Why do a few cells start with `# NBVAL_IGNORE_OUTPUT`?
#
# <details>
# <summary>Short answers</summary>
#
# 1. The article's 22,580 divides two rounded headline numbers (2.8e12 over 124e6). GPT-2's exact count and K3's
#    configured total move the ratio by {glue:text}`ch00_spread`, so only its first two digits mean anything.
# 2. Most parameters sit in 896 routed experts per layer, of which the router picks 16 for each token (plus 2 shared
#    experts); the input embedding table is only looked up. The parameters that work on a token are the *active*
#    ones.
# 3. DeltaNet fixes the interference of purely additive writes (a key cannot be given a new value); Gated DeltaNet
#    fixes the delta rule's inability to let many stale associations fade at once.
# 4. Their output genuinely varies between machines (timings, device names, library versions). Every other output is
#    compared with the stored one on each test run, so every printed number is re-derived.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# Each step of the lineage is cited, with its paper and section, in the chapter that builds it; the course's
# bibliography page lists them all. This chapter's own sources:
#
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); its opening section (the 22,580 ratio and the question "is it
#   just scale?").
# - 机器之心 (Synced), *From GPT-2 to Kimi K3: Seven Years of Architecture Upgrades That Go Far Beyond Parameter Count*
#   (29 July 2026, published on juejin.cn), and a bilingual (Chinese and English) abstract of the worklog; no stable
#   public address is recorded for them.
# - Radford, Wu, Child, Luan, Amodei and Sutskever (2019), *Language Models are Unsupervised Multitask Learners*,
#   OpenAI: [the report (PDF)](https://cdn.openai.com/better-language-models/language_models_are_unsupervised_multitask_learners.pdf):
#   GPT-2's configuration (§2.3, Table 2).
# - OpenAI, [the `openai/gpt-2` repository](https://github.com/openai/gpt-2), README: the corrected parameter
#   counts (124M for the model Table 2 lists as 117M).
# - Moonshot AI, the published configuration of Kimi K3 (July 2026), transcribed field by field in
#   `k3lite.models.k3.K3Config.published()`; no stable public address is recorded for it in the course's sources:
#   K3's total and active parameters.
# - Vaswani et al. (2017), *Attention Is All You Need*, NeurIPS 2017:
#   [arXiv:1706.03762](https://arxiv.org/abs/1706.03762): the Transformer the lineage starts from.
