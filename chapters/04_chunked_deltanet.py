# %% [markdown] slideshow={"slide_type": "slide"}
# # 04 · Chunking DeltaNet: the WY/UT form
#
# Chapter 03 gave the delta rule, $S_t = S_{t-1} + \beta_t k_t (v_t - S_{t-1}^\top k_t)^\top$: a memory that
# overwrites instead of piling up. Decoding with it is cheap (one $D\times D$ update per token). But a
# model is *trained*, and a prompt is *prefilled*, on thousands of tokens at once, and a loop of $T$
# rank-one updates, each waiting for the one before, leaves a GPU's matrix units idle.
#
# Chapter 02 solved this for linear attention with chunks: attention inside a chunk, a state across chunks,
# all of it matrix products. This chapter
#
# 1. shows that the same trick, applied naively to the delta rule, gives wrong answers, and why;
# 2. derives the reparameterisation of Yang et al. (2024, *Parallelizing Linear Transformers with the Delta
#    Rule over Sequence Length*, [arXiv:2406.06484](https://arxiv.org/abs/2406.06484), §3), the **WY representation** computed by the
#    **UT transform**, that makes the whole chunk a few matrix products and one triangular solve;
# 3. builds it step by step on a 16-token example with chunks of 4, with pictures of every matrix;
# 4. checks it against the recurrence and `k3lite.ops.delta_rule.chunked`, and computes the two limits
#    $C = 1$ and $C = L$ ($L$ the sequence length);
# 5. prices the choice of $C$ in FLOPs (with a slider) and in measured time.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 4 h for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. explain why chunking the delta rule like linear attention gives wrong outputs: each correction reads the state
#    that the corrections before it wrote;
# 2. derive a chunk's unit-lower-triangular system $(I + A)V' = \mathrm{Diag}(\beta)(V - KS_0)$ and its WY/UT
#    solution $V' = U - WS_0$;
# 3. implement the UT transform by forward substitution, also for a rule with a decay, and trace one chunk of
#    DeltaNet computed with matrix products only;
# 4. compute the FLOPs of the chunked form's state part and intra-chunk part as functions of $L$, $C$ and $d$, and
#    explain why hardware, not arithmetic, sets $C = 64$;
# 5. read a GPU benchmark table: how softmax attention's time and a chunked mixer's time grow with the sequence
#    length.
#
# **Prerequisites.**
#
# - Chapter 02 (the chunked form of linear attention) and chapter 03 (the delta rule and its Householder form).
# - Triangular systems and forward substitution: Golub and Van Loan, *Matrix Computations* (4th ed., 2013), §3.1, or
#   Trefethen and Bau, *Numerical Linear Algebra*, lecture 17.
# - Products of Householder matrices and their WY representation: Bischof and Van Loan (1987),
#   [doi:10.1137/0908009](https://doi.org/10.1137/0908009).
# - For sections 6–7: what a GPU's tensor cores multiply, in NVIDIA's [CUDA C++ Programming
#   Guide](https://docs.nvidia.com/cuda/cuda-c-programming-guide/) (warp matrix functions).

# %% tags=["plumbing"]
import json
import time

import matplotlib.pyplot as plt
import torch
from myst_nb import glue

import k3lite.kernels  # noqa: F401  (first: on a CPU it switches Triton's interpreter on before triton loads)
from k3lite.course import viz, widgets
from k3lite.course.checks import expect
from k3lite.ops import delta_rule
from k3lite.course.runtime import device, pick, seed_everything

viz.use_style()
generator = seed_everything(0)
torch.set_default_dtype(torch.float64)  # exact comparisons in the lesson; k3lite's check below uses float32


def agree(a, b, tol=1e-12) -> str:
    """Whether two results agree to `tol` (the raw gap differs in its last bits between machines)."""
    gap = (torch.as_tensor(a).double() - torch.as_tensor(b).double()).abs().max().item()
    return f"agree to {tol:.0e}: {gap < tol}"


def unit(x):
    return x / x.norm(dim=-1, keepdim=True)


# %% [markdown]
# The reference we must reproduce: DeltaNet token by token, for one head, `q, k [T, K]`, `v [T, V]`,
# `beta [T]`, reading after writing (no query scale in this chapter's own code, so the algebra stays bare).

# %%
def delta_rule_one_head(q, k, v, beta, state=None):
    """The definition: one rank-one correction per token, each needing the state before it."""
    state = torch.zeros(k.shape[1], v.shape[1]) if state is None else state
    outputs = []
    for q_t, k_t, v_t, b_t in zip(q, k, v, beta):
        state = state + b_t * torch.outer(k_t, v_t - state.T @ k_t)
        outputs.append(state.T @ q_t)
    return torch.stack(outputs), state


T, C, K, V = 16, 4, 6, 5
q = torch.randn(T, K, generator=generator)
k = unit(torch.randn(T, K, generator=generator))
v = torch.randn(T, V, generator=generator)
beta = torch.rand(T, generator=generator)
o_reference, state_reference = delta_rule_one_head(q, k, v, beta)
print(f"example: T={T} tokens, chunks of C={C}, key dim {K}, value dim {V}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. The failure: chunking the delta rule like linear attention
#
# Linear attention's chunk step was $O = QS + (QK^\top\odot M)V$, $S \leftarrow S + K^\top V$: every token adds a
# known $k_t v_t^\top$. The delta rule adds $k_t u_t^\top$ with
#
# $$ u_t = \beta_t\,\big(v_t - S_{t-1}^\top k_t\big), $$
#
# and $u_t$ depends on $S_{t-1}$, i.e. on every $u_i$ before it. Try the obvious shortcut: compute every $u_t$ of a
# chunk from the state at the chunk's start, $u_t = \beta_t (v_t - S_0^\top k_t)$, blind to what the chunk's
# earlier tokens wrote, and then take chapter 02's chunk step. With one token per chunk that *is* the delta rule;
# with more, it is not:

# %% [markdown] tags=["notes"]
# Recall chapter 02's chunk step and ask the room what changes for the delta rule: the value a
# token writes depends on the state, and so on every write before it. Run the naive chunking and
# show that it is wrong; the error is the motivation for the next twenty minutes.

# %%
def chunked_from_chunk_start(q, k, v, beta, chunk_size):
    """Chapter 02's chunk step, with each token's value u_t corrected against the state at its chunk's start."""
    state = torch.zeros(k.shape[1], v.shape[1])
    outputs = []
    for start in range(0, len(q), chunk_size):
        q_c, k_c, v_c, b_c = (x[start:start + chunk_size] for x in (q, k, v, beta))
        u_c = b_c[:, None] * (v_c - k_c @ state)          # blind to what this chunk's earlier tokens wrote
        outputs.append(q_c @ state + (q_c @ k_c.T).tril() @ u_c)
        state = state + k_c.T @ u_c
    return torch.cat(outputs), state


naive_error = {}
for chunk_size in (1, 2, C):
    o_naive, _ = chunked_from_chunk_start(q, k, v, beta, chunk_size)
    naive_error[chunk_size] = ((o_naive - o_reference).norm() / o_reference.norm()).item()
    print(f"chunks of {chunk_size}, values corrected at the chunk's start: relative error vs the delta rule "
          f"{naive_error[chunk_size]:.2f}")
expect("one token per chunk reproduces the delta rule", naive_error[1] < 1e-5)
expect(f"chunks of {C} do not", naive_error[C] > 0.05)

# %% [markdown]
# The sequential dependence is real: each correction reads the memory that all earlier corrections wrote, those
# of its own chunk included.
# To chunk, we need the chunk's $u_t$ *all at once*, from quantities known at the start of the chunk.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The fix as math: solve for all the $u$ of a chunk at once
#
# Inside one chunk, let $S_0$ be the state it starts from and number its tokens $r = 1,\dots,C$.
# Every state in the chunk is the start state plus the chunk's own writes so far:
#
# $$ S_{r-1} = S_0 + \sum_{i<r} k_i u_i^\top . $$
#
# Put that into the definition of $u_r$:
#
# $$ u_r = \beta_r\Big(v_r - S_0^\top k_r - \sum_{i<r} (k_i^\top k_r)\, u_i\Big)
#    \quad\Longleftrightarrow\quad
#    u_r + \sum_{i<r} \beta_r (k_r^\top k_i)\, u_i = \beta_r\big(v_r - S_0^\top k_r\big). $$
#
# That is one linear system for the whole chunk. With $A = \mathrm{StrictTril}\big(\mathrm{Diag}(\beta)\,KK^\top\big)$
# ($A_{ri} = \beta_r k_r^\top k_i$ for $i<r$, zero elsewhere):
#
# $$ (I + A)\,V' = \mathrm{Diag}(\beta)\,(V - K S_0). $$
#
# $I + A$ is unit lower-triangular, so it is always invertible and forward substitution solves it. With
# $T = (I+A)^{-1}$ (the **UT transform** of Joffrain et al. 2006; the field calls this matrix $T$, not to be
# confused with the sequence length, which this chapter's prose calls $L$ and its code `T`) the solution splits into a part that does not need $S_0$ and a part
# that does:
#
# $$ V' = \underbrace{T\,\mathrm{Diag}(\beta)\,V}_{U} \;-\; \underbrace{T\,\mathrm{Diag}(\beta)\,K}_{W}\; S_0 . $$
#
# ($K$ and $W$ are the **WY representation** of Bischof and Van Loan (1987) of the product of the chunk's
# Householder-like transitions: $(I - \beta_C k_C k_C^\top)\cdots(I - \beta_1 k_1 k_1^\top) = I - K^\top W$, because
# the chunk's end state $S_0 + K^\top V' = (I - K^\top W)S_0 + K^\top U$ must equal that product applied to $S_0$
# plus terms without $S_0$. $U$ is Yang et al.'s extension of the form to the values.) Then the chunk is exactly linear attention with the corrected values $V' = U - W S_0$:
#
# $$ O = Q S_0 + (QK^\top\odot M)\,V', \qquad S \leftarrow S_0 + K^\top V' . $$
#
# $A$, $T$, $W$, $U$ of every chunk can be computed in parallel before any state is known; only the cheap
# $V' = U - WS_0$ and the state update remain sequential, once per chunk instead of once per token.

# %% [markdown]
# ![Chunk tiling: the diagonal tiles are solved by the UT transform, the off-diagonal ones are summarised by the state](../figures/diagram_chunk_tiling.svg)

# %% [markdown] tags=["notes"]
# This is the derivation to do at the board, line by line: write every state inside the chunk
# as the start state plus the chunk's own writes, and the corrections become one unit
# lower-triangular system. Ask why $I + A$ is always invertible. Then point at the diagram: the
# diagonal tiles are computed in parallel, the off-diagonal ones never exist, and only the small
# update $V' = U - WS_0$ stays sequential, once per chunk.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. Step by step on the example (chunk 2 of 4)
#
# First $A$, then $T$ by forward substitution, row by row: row $r$ of $(I+A)T = I$ says
# $T_{r,:} = e_r - \sum_{i<r} A_{ri} T_{i,:}$.

# %% [markdown] tags=["notes"]
# Walk through one chunk of the example with the heatmaps: $A$ strictly lower-triangular, $T$
# unit lower-triangular, and the chunk's outputs equal to the token loop's. Ask the room which of
# these matrices need the state $S_0$ (only the last step does).

# %%
def strict_a(k_c, beta_c):
    """A[r, i] = β_r k_r·k_i for i < r: how much token r's correction sees of token i's."""
    return torch.tril(beta_c[:, None] * (k_c @ k_c.T), diagonal=-1)


def forward_substitution_inverse(a):
    """T = (I + A)^-1 for strictly lower-triangular A, one row at a time (no general inverse needed)."""
    size = a.shape[0]
    t = torch.eye(size)
    for r in range(1, size):
        t[r] = t[r] - a[r, :r] @ t[:r]
    return t


chunk = slice(4, 8)  # the second chunk of four tokens
q_c, k_c, v_c, beta_c = q[chunk], k[chunk], v[chunk], beta[chunk]
A = strict_a(k_c, beta_c)
T_ut = forward_substitution_inverse(A)
W = T_ut @ (beta_c[:, None] * k_c)
U = T_ut @ (beta_c[:, None] * v_c)
print(f"T·(I + A) = I: {agree(T_ut @ (torch.eye(C) + A), torch.eye(C))}")
print(f"T by forward substitution and torch.linalg.inv {agree(T_ut, torch.linalg.inv(torch.eye(C) + A))}")
print(f"shapes: A {tuple(A.shape)}, T {tuple(T_ut.shape)}, W {tuple(W.shape)}, U {tuple(U.shape)}")

# %% tags=["plumbing"]
fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.2))
viz.heatmap(axes[0], A, title="A = StrictTril(Diag(β) K Kᵀ)", xlabel="earlier token i", ylabel="token r", signed=True)
viz.heatmap(axes[1], T_ut, title="T = (I + A)⁻¹", xlabel="token i", ylabel="token r", signed=True)
fig.suptitle("Chunk 2 (tokens 4–7): the triangular system and its inverse")
fig.tight_layout()
plt.show()

# %% [markdown]
# $T$ turns the chunk's keys and values into the two WY factors, one row per token:

# %% tags=["plumbing"]
fig, axes = plt.subplots(1, 2, figsize=(7.0, 3.2))
viz.heatmap(axes[0], W, title="W = T Diag(β) K", xlabel="key channel", ylabel="token r", signed=True)
viz.heatmap(axes[1], U, title="U = T Diag(β) V", xlabel="value channel", ylabel="token r", signed=True)
fig.suptitle("Chunk 2 (tokens 4–7): the WY factors")
fig.tight_layout()
plt.show()

# %% [markdown]
# $A$ is strictly lower-triangular (a token's correction only sees earlier tokens of the chunk), $T$ is
# lower-triangular with ones on its diagonal. Now check the claim of section 2: with $S_0$ the true state
# after chunk 1, $U - WS_0$ must be exactly the $u_r$ that the recurrence adds.

# %%
_, state_after_chunk_1 = delta_rule_one_head(q[:4], k[:4], v[:4], beta[:4])
corrected = U - W @ state_after_chunk_1

true_u, state = [], state_after_chunk_1
for k_t, v_t, b_t in zip(k_c, v_c, beta_c):
    u_t = b_t * (v_t - state.T @ k_t)
    true_u.append(u_t)
    state = state + torch.outer(k_t, u_t)
print(f"U - W·S0 and the recurrence's u_r {agree(corrected, torch.stack(true_u))}")
print(f"WY form of the transitions: Π(I - β k kᵀ) = I - Kᵀ W: "
      f"{agree(torch.linalg.multi_dot([torch.eye(K) - b * torch.outer(kk, kk) for kk, b in zip(k_c.flip(0), beta_c.flip(0))]), torch.eye(K) - k_c.T @ W)}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The whole chunked forward pass
#
# Put the pieces in a loop over chunks. Everything before `corrected = ...` could run for all chunks at once.

# %% [markdown] tags=["notes"]
# The loop over chunks is short; read it with the room and point at the line where the state
# enters. Everything before it could run for all chunks at once, which is what the library and
# its Triton kernels do.

# %%
def delta_rule_chunked(q, k, v, beta, chunk_size, state=None):
    """DeltaNet in chunks: UT transform, WY factors, then linear attention on the corrected values."""
    state = torch.zeros(k.shape[1], v.shape[1]) if state is None else state
    outputs = []
    for start in range(0, len(q), chunk_size):
        q_c, k_c, v_c, b_c = (x[start:start + chunk_size] for x in (q, k, v, beta))
        t_c = forward_substitution_inverse(strict_a(k_c, b_c))
        w_c, u_c = t_c @ (b_c[:, None] * k_c), t_c @ (b_c[:, None] * v_c)   # independent of the state
        corrected = u_c - w_c @ state                                       # the only state-dependent step
        outputs.append(q_c @ state + (q_c @ k_c.T).tril() @ corrected)
        state = state + k_c.T @ corrected
    return torch.cat(outputs), state


for chunk_size in (1, 3, 4, 5, 16):
    o_chunked, s_chunked = delta_rule_chunked(q, k, v, beta, chunk_size)
    print(f"C={chunk_size:>2}: outputs {agree(o_chunked, o_reference)}, final state {agree(s_chunked, state_reference)}")

# %% [markdown]
# Chunk sizes that do not divide $L$ work too (the last chunk is shorter). Now the library, in the
# field's layout and in float32: `k3lite.ops.delta_rule.chunked` against `recurrent`, and against our code.

# %%
B, T_lib, H, K_lib, V_lib = 2, 50, 3, 16, 8
q_lib = torch.randn(B, T_lib, H, K_lib, generator=generator).float()
k_lib = unit(torch.randn(B, T_lib, H, K_lib, generator=generator)).float()
v_lib = torch.randn(B, T_lib, H, V_lib, generator=generator).float()
beta_lib = torch.rand(B, T_lib, H, generator=generator).float()

o_rec, s_rec = delta_rule.recurrent(q_lib, k_lib, v_lib, beta_lib)
for chunk_size in (1, 7, 16, 64):
    o_chk, s_chk = delta_rule.chunked(q_lib, k_lib, v_lib, beta_lib, chunk_size=chunk_size, backend="torch")
    print(f"k3lite chunked C={chunk_size:>2} and recurrent: outputs {agree(o_chk, o_rec, 1e-4)}, states {agree(s_chk, s_rec, 1e-4)}")

ours, _ = delta_rule_chunked(q_lib[1, :, 2].double() * K_lib ** -0.5, k_lib[1, :, 2].double(), v_lib[1, :, 2].double(),
                             beta_lib[1, :, 2].double(), chunk_size=16)
print(f"our chunked code (sequence 1, head 2, q scaled by K^-0.5) and k3lite {agree(ours, o_rec[1, :, 2], 1e-4)}")

# %% [markdown]
# `k3lite.kernels` runs the same algorithm as a pipeline of Triton kernels on 64-token chunks (tensor-core
# tiles), split exactly as section 2 suggests: $A$ and $T$ for every chunk at once, then $W$ and $U$ for every
# chunk at once, then the one sequential pass over chunks ($V' = U - WS$ and the state), then the outputs of
# every chunk at once. On a GPU it is compiled; on this CPU Triton's interpreter runs it (slowly, so the shapes
# are small; $L = 150$ tokens make two full chunks and a partial one, so the sequential pass carries a nonzero
# state into the later chunks). Same algorithm, same numbers:

# %% tags=["requires-triton"]
# Its own generator: where Triton is missing (macOS) this cell is skipped, and the cells after it must not notice.
triton_generator = torch.Generator().manual_seed(4)
q_tri, k_tri, v_tri = (torch.randn(1, 150, 2, 16, generator=triton_generator).float() for _ in range(3))
k_tri, beta_tri = unit(k_tri), torch.rand(1, 150, 2, generator=triton_generator).float()
o_tri_ref, s_tri_ref = delta_rule.recurrent(q_tri, k_tri, v_tri, beta_tri)
o_tri, s_tri = delta_rule.chunked(*(x.to(device()) for x in (q_tri, k_tri, v_tri, beta_tri)), backend="triton")
print(f"Triton chunked kernels (T=150) and recurrent: outputs {agree(o_tri.cpu(), o_tri_ref, 1e-4)}, "
      f"states {agree(s_tri.cpu(), s_tri_ref, 1e-4)}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. The two limits, computed
#
# **$C = 1$.** A one-token chunk has no earlier token: $A = 0$, $T = 1$, $W = \beta k^\top$, $U = \beta v^\top$, and
# the chunk step becomes $u = \beta(v - S^\top k)$, $S \leftarrow S + k u^\top$: the recurrence itself, token by token.
#
# **$C = L$.** One chunk holds the whole sequence and starts from $S_0 = 0$, so $V' = U$ and
# $O = (QK^\top\odot M)\,T\,\mathrm{Diag}(\beta)\,V$: a quadratic, attention-like form with an $L\times L$ score matrix
# and an $L\times L$ triangular solve, and no state at all until the end.

# %% [markdown] tags=["notes"]
# Two limits to check understanding: ask the room what a one-token chunk is (the recurrence) and
# what a single chunk holding the whole sequence is (a quadratic, attention-like form). The chunk
# size moves between the two.

# %%
single = slice(7, 8)
a_one = strict_a(k[single], beta[single])
print(f"C = 1: A = {a_one.tolist()}, T = {forward_substitution_inverse(a_one).tolist()}")
print(f"C = 1: chunked and recurrent {agree(delta_rule_chunked(q, k, v, beta, 1)[0], o_reference)}")

t_full = forward_substitution_inverse(strict_a(k, beta))
o_quadratic = (q @ k.T).tril() @ (t_full @ (beta[:, None] * v))
print(f"C = L = {T}: the quadratic form (QKᵀ ⊙ M) T Diag(β) V and the recurrence {agree(o_quadratic, o_reference)}")
print(f"C = L = {T}: it needs a {T}×{T} score matrix and a {T}×{T} solve; C = 1 needs {T} sequential state updates")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. What the chunk size costs: FLOPs
#
# For one head with head dimension $d$ and $L$ tokens, chunked linear attention splits its work in two:
#
# * the **state** part: every token reads the $d\times d$ state ($QS$) and folds into it ($K^\top V$):
#   $Ld^2$ multiply-adds per product, $2Ld^2$ for both, *independent of $C$*;
# * the **intra-chunk** part: the $C\times C$ score blocks on the diagonal ($QK^\top$, then scores times $V$):
#   $C^2d$ multiply-adds per product and chunk, $2LCd$ for both over the $L/C$ chunks.
#
# The article (chapter 00's *From GPT-2 to Kimi K3* worklog, section "DeltaNet (Parallelizing Linear Transformers
# with Delta Rule)") gives "$2Ld^2$ state, $2LCd$ intra": these multiply-adds. In FLOPs (2 per multiply-add), as
# `k3lite.course.flops` counts them and as its tests check against PyTorch's `FlopCounterMode`, they are $4Ld^2$
# and $4LCd$. Either way: $C = L$ turns the intra part into dense full attention ($4L^2d$ FLOPs), and $C = 1$
# leaves (almost) only the recurrence.

# %% [markdown] tags=["notes"]
# The FLOP split is the practical lesson: a state part independent of the chunk size and an
# intra-chunk part that grows with it. Ask the room why, if $C = 1$ is cheapest in FLOPs, nobody
# uses it (tensor-core tiles and per-chunk overhead); the grid of slider positions makes the
# point without a live kernel.

# %%
from k3lite.course import flops

L, d = 4096, 128
print(f"{'C':>5} {'state (GFLOP)':>14} {'intra (GFLOP)':>14} {'intra share':>12}")
for chunk_size in (1, 16, 64, 128, 1024, L):
    split = widgets.chunk_flop_split(L, chunk_size, d)
    print(f"{chunk_size:>5} {split.state / 1e9:>14.3f} {split.intra / 1e9:>14.3f} {split.intra / split.total:>12.1%}")
print(f"C = L: intra part {widgets.chunk_flop_split(L, L, d).intra / 1e9:.3f} GFLOP, "
      f"dense full attention {flops.full_attention(L, d) / 1e9:.3f} GFLOP")
print(f"the two parts are equal at C = d = {d}")

# %% [markdown]
# DeltaNet's chunk has two more products: $KK^\top$ for $A$ (intra kind) and $WS_0$ (state kind). The matrix
# products cost $6Ld^2 + 6LCd$ FLOPs, which is what PyTorch's counter sees; the triangular solves for $W$ and $U$
# add about $2LCd$ more (below). Count what `k3lite.ops.delta_rule.chunked` multiplies:

# %%
from torch.utils.flop_counter import FlopCounterMode

L_count, d_count = 256, 32
q_count = torch.randn(1, L_count, 1, d_count, generator=generator).float()
k_count = unit(torch.randn(1, L_count, 1, d_count, generator=generator)).float()
v_count = torch.randn(1, L_count, 1, d_count, generator=generator).float()
beta_count = torch.rand(1, L_count, 1, generator=generator).float()
for chunk_size in (1, 32, 64, L_count):
    with FlopCounterMode(display=False) as counter:
        delta_rule.chunked(q_count, k_count, v_count, beta_count, chunk_size=chunk_size, backend="torch")
    predicted = 6 * L_count * d_count ** 2 + 6 * L_count * chunk_size * d_count
    print(f"C={chunk_size:>3}: counted {counter.get_total_flops():>10,} FLOPs, 6Ld² + 6LCd = {predicted:>10,}")

# %% [markdown]
# The solves are missing from that count. The library's PyTorch backend (`backend="torch"`, the one counted here)
# never forms $T = (I + A)^{-1}$ as this notebook did: it solves $(I + A)\,W = \mathrm{Diag}(\beta)K$ and $(I + A)\,U = \mathrm{Diag}(\beta)V$ with
# `torch.linalg.solve_triangular` (`k3lite/ops/_common.py`), which is not a matrix product, so the counter does
# not see it. Forward substitution on a $C\times C$ unit-lower-triangular system with $d$
# right-hand sides subtracts, for row $r$, the $r-1$ rows already solved: $C(C-1)d/2$ multiply-adds per chunk,
# $C(C-1)d$ FLOPs. Write it out as products and the counter sees it (one chunk, $C = d = 32$):

# %%
def forward_substitution(unit_lower, rhs):
    """Solve unit_lower @ X = rhs row by row (unit diagonal, so no division)."""
    solution = rhs.clone()
    for r in range(1, rhs.shape[0]):
        solution[r] = rhs[r] - unit_lower[r, :r] @ solution[:r]
    return solution


solve_generator = torch.Generator().manual_seed(11)
C_solve, d_solve = 32, 32
system = torch.eye(C_solve) + 0.1 * torch.randn(C_solve, C_solve, generator=solve_generator).tril(-1)
rhs = torch.randn(C_solve, d_solve, generator=solve_generator)
with FlopCounterMode(display=False) as library_counter:
    by_library = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
with FlopCounterMode(display=False) as written_out_counter:
    by_rows = forward_substitution(system, rhs)
print(f"solve_triangular: counted {library_counter.get_total_flops():,} FLOPs")
print(f"forward substitution: counted {written_out_counter.get_total_flops():,} FLOPs, "
      f"C(C−1)d = {C_solve * (C_solve - 1) * d_solve:,}; same solution: {torch.allclose(by_rows, by_library, atol=1e-5)}")
for chunk_size in (32, 64):
    solves = 2 * (L_count // chunk_size) * chunk_size * (chunk_size - 1) * d_count
    print(f"C={chunk_size}, L={L_count}, d={d_count}: two solves {solves:,} FLOPs, 2LCd = {2 * L_count * chunk_size * d_count:,}")

# %% [markdown]
# Two solves over $L/C$ chunks are $2L(C-1)d \approx 2LCd$ FLOPs, so the whole DeltaNet chunk costs about
# $6Ld^2 + 8LCd$ FLOPs against linear attention's $4Ld^2 + 4LCd$: the same shape in $C$, with the intra-chunk
# part twice as large.

# %% [markdown]
# Move the sliders: $L$ and $C$ in powers of two, and the head dimension. The red dot is the chosen $C$;
# the dashed line is full attention at that $L$.

# %%
# NBVAL_IGNORE_OUTPUT
widgets.chunk_flops_explorer()

# %% [markdown]
# The same view for a few slider positions (rows: sequence length; columns: chunk size), for readers
# without a live kernel:

# %%
fig = widgets.chunk_flops_grid(seq_lens=(1024, 65536), chunk_sizes=(1, 64, 1024), head_dim=128)
plt.show()

# %% [markdown]
# In FLOPs, smaller $C$ is always cheaper, and $C = 1$ is cheapest. The catch: the state part at small $C$
# is a long sequence of small products, while tensor-core matrix instructions work on $16 \times 16$ tiles, and a
# chunk of 64 or 128 gives each of its products several whole tiles to keep those units busy. Hardware, not
# arithmetic, picks $C$.

# %% [markdown] slideshow={"slide_type": "slide"} tags=["reading"]
# ## 7. What the chunk size costs: time
#
# (This section names the sequence length $T$, as the code and the benchmark tables do.) Time
# `k3lite.ops.delta_rule.chunked` (PyTorch backend) on this CPU for $C$ from 4 up to $T$, and the token
# loop for comparison (it stands in for the smallest chunks, where Python's per-chunk overhead is all there
# is). The numbers depend on the machine and its load, so this cell's output is not compared by the tests.

# %% [markdown] tags=["notes"]
# Reading: CPU timings of the chunk sizes and the H200 benchmark table. Mention the conclusion
# only: the chunked kernels beat softmax attention at long sequences, and their time grows
# linearly where softmax attention's grows with the square.

# %%
# NBVAL_IGNORE_OUTPUT
timing_device = device()  # the CPU here; a GPU, with the full profile's longer sequence, where there is one


def best_time(fn, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if timing_device.type == "cuda":
            torch.cuda.synchronize()  # GPU work is asynchronous: wait for it before reading the clock
        times.append(time.perf_counter() - start)
    return min(times)


B_t, T_t, H_t, d_t = 1, pick(512, 8192), 4, 64
q_t = torch.randn(B_t, T_t, H_t, d_t, generator=generator).float().to(timing_device)
k_t = unit(torch.randn(B_t, T_t, H_t, d_t, generator=generator)).float().to(timing_device)
v_t = torch.randn(B_t, T_t, H_t, d_t, generator=generator).float().to(timing_device)
beta_t = torch.rand(B_t, T_t, H_t, generator=generator).float().to(timing_device)

chunk_sizes = [2 ** i for i in range(2, 14) if 2 ** i <= T_t]  # C = 1, 2: see the token loop
seconds = [best_time(lambda c=c: delta_rule.chunked(q_t, k_t, v_t, beta_t, chunk_size=c, backend="torch"))
           for c in chunk_sizes]
recurrent_seconds = best_time(lambda: delta_rule.recurrent(q_t, k_t, v_t, beta_t), repeats=1)

fig, ax = plt.subplots()
ax.loglog(chunk_sizes, [s * 1e3 for s in seconds], marker="o", color=viz.MECHANISM_COLORS["delta_rule"],
          label="chunked (torch)")
ax.axhline(recurrent_seconds * 1e3, color=viz.PALETTE["black"], linestyle="--", label="token loop (recurrent)")
ax.set_xscale("log", base=2)
ax.set(xlabel="chunk size C (tokens)", ylabel="time (ms)", title=f"DeltaNet forward ({timing_device.type}): T={T_t}, H={H_t}, d={d_t}")
ax.legend(loc="lower left")
plt.show()
fastest = chunk_sizes[min(range(len(seconds)), key=seconds.__getitem__)]
print(f"fastest chunk size here: C={fastest} ({min(seconds) * 1e3:.1f} ms); token loop {recurrent_seconds * 1e3:.1f} ms")
print(f"C={chunk_sizes[0]}: {seconds[0] / recurrent_seconds:.2f}x the token loop's time; "
      f"the fastest C: {recurrent_seconds / min(seconds):.1f}x faster than the loop; "
      f"C={chunk_sizes[-1]}: {seconds[-1] / min(seconds):.1f}x the fastest C's time")

# %% [markdown]
# Read the three printed ratios. Small chunks pay Python and per-call overhead for every chunk: at $C = 4$ a
# chunk runs a dozen small operations for four tokens, so it saves far less over the plain token loop than a
# larger chunk does. The best $C$ is somewhere between, and beyond it the intra-chunk work ($C^2 d$ per chunk, so
# growing with $C$ in total) makes the time rise again. (Timings on a shared machine are noisy, and the ratios differ from one CPU to another; run the cell
# yourself.)
#
# On a GPU the Triton kernels of `k3lite.kernels` run whole 64-token chunks as tiles. The H200 measurements of
# `python -m benchmarks.bench` are stored in `benchmarks/results/bench_h200.json`: per mechanism and shape, the
# k3lite Triton kernels, the *same* chunked algorithm run as PyTorch operations ("k3lite torch"), the field's
# reference library flash-linear-attention ("fla", github.com/fla-org/flash-linear-attention) and PyTorch's fused
# softmax attention (SDPA, FlashAttention backend: Dao et al. 2022,
# [arXiv:2205.14135](https://arxiv.org/abs/2205.14135)).

# %% tags=["plumbing"]
BENCH = viz.BENCH_RESULTS_DIR / "bench_h200.json"


def milliseconds(value):
    return "-" if value is None else f"{value:.3f}"


QUOTED_ROWS = {("delta_rule", 8192): ("triton", "sdpa"), ("kda", 8192): ("triton", "sdpa"),
               ("kda", 32768): ("triton", "sdpa"), ("linear_attention", 32768): ("vs_fla",)}


def glue_bench_row(row):
    """Glue the times the prose quotes: keys ch04_<kind>_<fwd|fwdbwd>_<T>_<triton|sdpa|vs_fla>."""
    key = f"ch04_{row.get('kind')}_{str(row.get('mode')).replace('+', '')}_{row.get('T')}"
    fields = {"triton": "k3lite_triton_ms", "sdpa": "sdpa_ms", "vs_fla": "ratio_vs_fla"}
    for name in QUOTED_ROWS.get((row.get("kind"), row.get("T")), ()):
        if row.get(fields[name]) is not None:
            glue(f"{key}_{name}", f"{row[fields[name]]:.2f}", display=False)


def show_bench_table(path, first=("delta_rule", "linear_attention")):
    """The chunked-forward rows of `python -m benchmarks.bench`: this chapter's mechanisms first, then the gated ones."""
    data = json.loads(path.read_text(encoding="utf-8"))
    meta = data.get("meta", {})
    print(f"device: {meta.get('device', '?').split(' (')[0]}")
    print(f"timing: {meta.get('timing', '?')}")
    rows = sorted(data.get("chunked", []), key=lambda row: (row.get("kind") not in first, str(row.get("kind"))))
    print(f"{'mechanism':>17} {'B x T x H':>11} {'D':>4} {'pass':>8} {'k3lite Triton':>14} {'k3lite torch':>13} "
          f"{'fla':>8} {'SDPA':>8} {'Triton/fla':>11}   (ms)")
    for row in rows:
        shape = f"{row.get('B')}x{row.get('T')}x{row.get('H')}"
        ratio = row.get("ratio_vs_fla")
        print(f"{row.get('kind', '?'):>17} {shape:>11} {row.get('D', '-'):>4} {row.get('mode', '?'):>8} "
              f"{milliseconds(row.get('k3lite_triton_ms')):>14} {milliseconds(row.get('k3lite_torch_ms')):>13} "
              f"{milliseconds(row.get('fla_ms')):>8} {milliseconds(row.get('sdpa_ms')):>8} "
              f"{'-' if ratio is None else f'{ratio:.2f}x':>11}")
        glue_bench_row(row)
    if any(row.get("mode") == "fwd+bwd" for row in rows) and meta.get("backward"):
        print(f"backward: {meta['backward']}")
    missing = [kind for kind in first if kind not in {row.get("kind") for row in rows}]
    if missing:
        print(f"not measured in this file: {', '.join(missing)} (the gated rows use the same WY/UT chunking)")
    print(f"sequence lengths measured: {', '.join(str(T) for T in sorted({row.get('T') for row in rows}))}")
    for row in rows:
        triton_ms, sdpa_ms, fla_ms = (row.get(key) for key in ("k3lite_triton_ms", "sdpa_ms", "fla_ms"))
        if None in (triton_ms, sdpa_ms, fla_ms):
            continue
        print(f"{row.get('kind')} {row.get('mode')}, T={row.get('T')}: SDPA faster than k3lite Triton: {sdpa_ms < triton_ms} "
              f"({sdpa_ms:.3f} vs {triton_ms:.3f} ms); k3lite Triton / fla = {triton_ms / fla_ms:.1f}x")
        if "not re-measured" in str(row.get("measured_on_commit", "")):
            print(f"    measured on {row['measured_on_commit']}")
    if meta.get("not_measured"):
        print(f"why rows are missing: {meta['not_measured']}")


if BENCH.exists():
    show_bench_table(BENCH)
else:
    print("benchmarks/results/bench_h200.json is not there yet: the H200 table appears here once `python -m benchmarks.bench` "
          "has been run on the GPU and the chapter re-executed.")

# %% [markdown]
# Read the table across a row: the gap between "k3lite torch" and "k3lite Triton" is what tiling and fusing the
# same arithmetic buys on a GPU; "Triton/fla" says how far the course's kernels are from the production ones;
# SDPA is the softmax attention that a chunked linear form competes with.
#
# What the stored file shows, and no more. Take two of the shapes measured, $(B, T) = (2, 8192)$ and
# $(1, 32768)$, with $H = 16$, $d = 128$: one sequence four times longer than each of the two, so twice the
# tokens. Softmax attention pays per sequence for $T^2$ pairs, so its time should grow by
# $32768^2 / (2 \cdot 8192^2)$ between the two; the chunked form pays per token, so its time should only double.
# The cell below computes both predictions and reads both growth factors off the file.

# %% tags=["plumbing"]
def growth(path, kind="delta_rule", mode="fwd", shapes=((2, 8192), (1, 32768))):
    """Time at the second shape over time at the first, for SDPA and for one k3lite Triton kernel."""
    rows = {(r["B"], r["T"]): r for r in json.loads(path.read_text(encoding="utf-8")).get("chunked", [])
            if r.get("kind") == kind and r.get("mode") == mode}
    if not all(shape in rows for shape in shapes):
        return None
    first, second = rows[shapes[0]], rows[shapes[1]]
    return {"SDPA": second["sdpa_ms"] / first["sdpa_ms"],
            f"k3lite {kind}": second["k3lite_triton_ms"] / first["k3lite_triton_ms"]}


(B1, T1), (B2, T2) = (2, 8192), (1, 32768)
pairs_ratio, tokens_ratio = (B2 * T2**2) / (B1 * T1**2), (B2 * T2) / (B1 * T1)
glue("ch04_pairs_ratio", f"{pairs_ratio:.0f}", display=False)
glue("ch04_tokens_ratio", f"{tokens_ratio:.0f}", display=False)
glue("ch04_chunks_long", str(T2 // 64), display=False)       # the Triton kernels' 64-token chunks
glue("ch04_chunks_short", str(T1 // 64), display=False)
for kind in ("delta_rule", "kda"):
    for mode in ("fwd", "fwd+bwd"):
        factors = growth(BENCH, kind, mode, shapes=((B1, T1), (B2, T2))) if BENCH.exists() else None
        if factors:
            print(f"{mode:>7}, ({B1}, {T1}) -> ({B2}, {T2}): "
                  + ", ".join(f"{name} x{f:.1f}" for name, f in factors.items())
                  + f"   (T^2 per sequence predicts x{pairs_ratio:.1f}, linear in tokens x{tokens_ratio:.1f})")
            if mode == "fwd":
                glue(f"ch04_{kind}_growth_fwd", f"{factors[f'k3lite {kind}']:.1f}", display=False)
            if mode == "fwd" and kind == "delta_rule":     # the prose compares DeltaNet with SDPA's row beside it
                glue("ch04_sdpa_growth_fwd", f"{factors['SDPA']:.1f}", display=False)

# %% [markdown]
# This chapter's DeltaNet is already ahead of softmax attention at $T = 8192$: its forward takes
# {glue:text}`ch04_delta_rule_fwd_8192_triton` ms against SDPA's {glue:text}`ch04_delta_rule_fwd_8192_sdpa` ms, and
# {glue:text}`ch04_delta_rule_fwdbwd_8192_triton` ms against {glue:text}`ch04_delta_rule_fwdbwd_8192_sdpa` ms with the
# backward pass.
#
# From $(2, 8192)$ to $(1, 32768)$ SDPA's forward time grows {glue:text}`ch04_sdpa_growth_fwd`-fold (the $T^2$ count
# says {glue:text}`ch04_pairs_ratio`), while DeltaNet's grows {glue:text}`ch04_delta_rule_growth_fwd`-fold, near the
# {glue:text}`ch04_tokens_ratio`-fold of a cost linear in tokens. A likely reason for what it pays beyond that (the
# table does not isolate it): the chunk-to-chunk pass is sequential, and one sequence of 32768 tokens is
# {glue:text}`ch04_chunks_long` chunks of 64 in a row, against {glue:text}`ch04_chunks_short` for each of two
# sequences of 8192, with half as many (sequence, head) pairs to run side by side on the GPU. At $T = 32768$ every
# Triton kernel in the table (k3lite's and fla's) beats SDPA, forward and backward; that crossover is the whole
# case for the linear form. (The "k3lite torch" column, the readable PyTorch form, is a reference, not a kernel.)
#
# A preview of chapter 06: KDA gives every key channel its own decay, which must be applied inside the
# intra-chunk products, so its chunk costs more. It about ties SDPA's forward at $T = 8192$
# ({glue:text}`ch04_kda_fwd_8192_triton` ms against {glue:text}`ch04_kda_fwd_8192_sdpa` ms) and loses once the
# backward is added ({glue:text}`ch04_kda_fwdbwd_8192_triton` ms against {glue:text}`ch04_kda_fwdbwd_8192_sdpa` ms),
# yet its time also grows only {glue:text}`ch04_kda_growth_fwd`-fold, so at $T = 32768$ its forward takes
# {glue:text}`ch04_kda_fwd_32768_triton` ms against SDPA's {glue:text}`ch04_kda_fwd_32768_sdpa` ms, and
# {glue:text}`ch04_kda_fwdbwd_32768_triton` ms against {glue:text}`ch04_kda_fwdbwd_32768_sdpa` ms with the backward.
#
# The last column says how far the course's kernels are from the production ones. fla's own timings vary between
# runs, so read a ratio near 1 as a tie. The clearest gap where the course's kernels are slower is linear
# attention at $T = 32768$ ({glue:text}`ch04_linear_attention_fwd_32768_vs_fla`× forward,
# {glue:text}`ch04_linear_attention_fwdbwd_32768_vs_fla`× with the backward); in the rows with a ratio well below
# 1 they are the faster ones. The history of these ratios lives in
# `benchmarks/`, not here.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Exercises
#
# Three kinds: a **prediction** (write down what you expect, then run the measurement; the checker accepts
# a range and explains the gap), a **transfer** (the chapter's idea on a case it did not show) and an
# **open question** (a paragraph; the model answer for the lecturer is folded below it).
#
# ### Exercise 1 (prediction): one key, written four times
# A chunk of four tokens writes the *same* unit key four times, each with $\beta = 1$ (four values for one
# key). Before running the cell below, write down $T = (I + A)^{-1}$ for this chunk as a $4\times4$ nested
# list. Hint: what is $A$ here, and what does token $r$'s correction $u_r$ have to be, given what the state
# returns for that key after token $r-1$? The checker accepts your matrix when every entry is within 0.05.

# %% [markdown] tags=["notes"]
# The prediction is quick at the board: A is all ones below the diagonal, and most people write I − A.
# The overwrite reading gives the right answer in one line. Exercise 2 transfers the derivation of section
# 2 to a constant decay, the step before chapter 05's learned gate: give it as homework, with the hint to
# write the states inside the chunk first. The open question is about why nobody uses C = L.

# %%
from k3lite.exercises import ch04


def predicted_t():
    raise NotImplementedError  # return a 4 x 4 nested list, e.g. [[1, 0, 0, 0], [...], [...], [...]]


# %%
one_key = torch.zeros(4, K)
one_key[:, 0] = 1.0                                                 # the same unit key, four times
t_one_key = forward_substitution_inverse(strict_a(one_key, torch.ones(4)))
ch04.check_repeated_key_prediction(predicted_t, measured=t_one_key);


# %% tags=["solution"]
# Solution: A has ones below the diagonal. The state returns v_(r−1) for the key after token r − 1, so at
# β = 1 token r writes u_r = v_r − v_(r−1): T is I with −1 on the first subdiagonal.
def predicted_t_solution():
    return [[1, 0, 0, 0], [-1, 1, 0, 0], [0, -1, 1, 0], [0, 0, -1, 1]]


ch04.check_repeated_key_prediction(predicted_t_solution, measured=t_one_key);


# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 2 (transfer): the UT transform with a decay
# Give the delta rule a constant decay $\gamma \in (0, 1]$ that shrinks the whole state before each write:
#
# $$ S_t = \gamma\,(I - \beta_t k_t k_t^\top)\,S_{t-1} + \beta_t k_t v_t^\top
#    \quad\Longleftrightarrow\quad
#    u_t = \beta_t\big(v_t - \gamma\, S_{t-1}^\top k_t\big),\qquad S_t = \gamma S_{t-1} + k_t u_t^\top . $$
#
# Redo section 2's derivation for one chunk: write $S_{r-1}$ inside the chunk as the decayed start state plus
# the chunk's earlier writes, each decayed since it was made, put it into $u_r$, and read off the new
# strictly lower-triangular $A$. Then write `ut_transform(k, beta, decay)` for one chunk, `k [C, K]`,
# `beta [C]`, returning $T = (I + A)^{-1}$ by forward substitution. With `decay = 1` it must give the
# chapter's $T$.

# %%
def ut_transform(k, beta, decay):
    raise NotImplementedError


# %%
ch04.check_ut_transform(ut_transform);


# %% tags=["solution"]
# Solution: S_(r−1) = γ^r S_0 + Σ_(i<r) γ^(r−1−i) k_i u_iᵀ (tokens counted from 0 inside the chunk), so
# u_r + Σ_(i<r) β_r γ^(r−i) (k_r·k_i) u_i = β_r (v_r − γ^(r+1) S_0ᵀ k_r): A[r, i] = β_r γ^(r−i) k_r·k_i.
def ut_transform_solution(k, beta, decay):
    positions = torch.arange(len(k), dtype=k.dtype)
    decays = decay ** (positions[:, None] - positions[None, :]).clamp(min=0)
    a = torch.tril(beta[:, None] * decays * (k @ k.T), diagonal=-1)
    t = torch.eye(len(k), dtype=k.dtype)
    for r in range(1, len(k)):
        t[r] = t[r] - a[r, :r] @ t[:r]
    return t


ch04.check_ut_transform(ut_transform_solution);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 3 (open question): why not one big chunk?
# Section 6 showed that in FLOPs $C = 1$ is cheapest, and section 5 that $C = L$ turns the chunk into an
# attention-like quadratic form. Argue which chunk size you would pick for training on a GPU with
# matrix units that work on $16\times16$ tiles, and name two things, other than FLOPs, that grow when $C$ grows.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# Pick the smallest $C$ that keeps the matrix units busy: a multiple of the tile (16) and, in practice, 64
# (what `k3lite.kernels` uses), so that $QK^\top$, $KK^\top$ and the products with $T$ are real tensor-core
# matrix products and the number of sequential state updates, $L/C$, is small. $C = 1$ is cheapest in FLOPs
# but is $L$ tiny dependent steps (no parallelism, no tensor cores, launch and memory traffic per token).
# What grows with $C$, besides the intra-chunk FLOPs ($\propto LCd$): (1) the on-chip memory per chunk
# ($C\times C$ score and $T$ tiles next to $C\times d$ blocks), which limits occupancy; (2) the sequential
# depth of the forward substitution ($C$ dependent row steps per chunk); (3) the numerical error of the
# triangular solve: with many similar keys the entries of $T$ can grow, and float32 or bf16 rounding grows
# with them. A strong answer names the trade-off (parallel work inside a chunk against sequential steps
# across chunks) and says that hardware, not arithmetic, sets $C$.
#
# </details>

# %% [markdown]
# ## Summary
#
# * The delta rule's corrections depend on each other inside a chunk, so chapter 02's chunking is wrong for it
#   (measured above).
# * Writing the chunk's states as $S_0 + \sum_{i<r}k_iu_i^\top$ turns the corrections into one unit-lower-triangular
#   system, $(I+A)V' = \mathrm{Diag}(\beta)(V - KS_0)$; the UT transform $T = (I+A)^{-1}$ gives the WY factors $W$, $U$,
#   and then $V' = U - WS_0$ is fed to ordinary chunked linear attention.
# * $C = 1$ is the recurrence, $C = L$ a quadratic attention-like form; in between, the state part is fixed and the
#   intra-chunk part grows with $C$: $4Ld^2$ and $4LCd$ FLOPs for linear attention (the article's $2Ld^2$ and
#   $2LCd$ count multiply-adds), about $6Ld^2$ and $8LCd$ for DeltaNet. Tensor cores work on $16 \times 16$ tiles, and
#   $C = 64$ or $128$ gives each product enough of them: the practical choice.
# * DeltaNet still cannot forget on purpose. Chapter 05 adds a gate and, in its section 6, redoes this derivation with the gate in.

# %% [markdown] tags=["notes"]
# End on the system $(I+A)V' = \mathrm{Diag}(\beta)(V - KS_0)$: it is the one formula to remember.
# Ask what is still missing from DeltaNet (forgetting on purpose), which is chapter 05's gate.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. Why is $I + A$ always invertible, whatever the keys and write strengths?
# 2. Which of $A$, $T$, $W$, $U$ and $V'$ need the state $S_0$ that the chunk starts from?
# 3. What do $C = 1$ and $C = L$ reduce to?
# 4. For chunked linear attention with $L = 4096$, $d = 128$, $C = 64$: how many FLOPs has each part, and at which
#    $C$ are they equal?
#
# <details>
# <summary>Short answers</summary>
#
# 1. It is unit lower-triangular ($A$ is strictly lower-triangular), so its determinant is 1; forward substitution
#    solves it.
# 2. Only $V' = U - WS_0$ (and the outputs and the state update after it); $A$, $T$, $W$ and $U$ of every chunk can
#    be computed in parallel before any state is known.
# 3. $C = 1$ is the token-by-token recurrence; $C = L$ is one quadratic, attention-like chunk with an $L \times L$
#    score matrix and triangular solve, and no state until the end.
# 4. State part $4Ld^2 = 268{,}435{,}456$, intra-chunk part $4LCd = 134{,}217{,}728$; they are equal at
#    $C = d = 128$.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Yang, Wang, Zhang, Shen and Kim (2024), *Parallelizing Linear Transformers with the Delta Rule over Sequence
#   Length*, NeurIPS 2024: [arXiv:2406.06484](https://arxiv.org/abs/2406.06484): §3, the WY representation, the UT
#   transform and the chunkwise parallel form; this chapter's sections 2–5.
# - Joffrain, Low, Quintana-Ortí, van de Geijn and Van Zee (2006), *Accumulating Householder transformations,
#   revisited*, ACM Trans. Math. Softw. 32(2): [doi:10.1145/1141885.1141886](https://doi.org/10.1145/1141885.1141886):
#   the UT transform; section 2.
# - Bischof and Van Loan (1987), *The WY Representation for Products of Householder Matrices*, SIAM J. Sci. Stat.
#   Comput. 8(1): [doi:10.1137/0908009](https://doi.org/10.1137/0908009): the WY representation of a product of
#   Householder matrices (section 2).
# - Schlag, Irie and Schmidhuber (2021), *Linear Transformers Are Secretly Fast Weight Programmers*, ICML 2021:
#   [arXiv:2102.11174](https://arxiv.org/abs/2102.11174): the delta rule being chunked.
# - Tillet, Kung and Cox (2019), *Triton: An Intermediate Language and Compiler for Tiled Neural Network
#   Computations*, MAPL 2019: [doi:10.1145/3315508.3329973](https://doi.org/10.1145/3315508.3329973): the language
#   of `k3lite.kernels` (section 4 and chapter 11).
# - Songlin Yang, Yu Zhang and contributors, *flash-linear-attention* (fla), the reference Triton implementation of
#   these mixers: [github.com/fla-org/flash-linear-attention](https://github.com/fla-org/flash-linear-attention):
#   the reference kernels the benchmark compares with (section 7).
# - Dao, Fu, Ermon, Rudra and Ré (2022), *FlashAttention: Fast and Memory-Efficient Exact Attention with
#   IO-Awareness*, NeurIPS 2022: [arXiv:2205.14135](https://arxiv.org/abs/2205.14135): the fused softmax attention
#   behind PyTorch's SDPA in the benchmark (section 7).
# - *From GPT-2 to Kimi K3, Explained* (the worklog "22580-From GPT2.0 to Kimi3.0, Explained", unsigned, 2026), read
#   with its annotated Chinese translation *从 GPT-2 到 Kimi K3：注意力架构演进全解*; no stable public address is recorded for
#   it (the course's bibliography page describes it); section "DeltaNet (Parallelizing Linear Transformers with
#   Delta Rule)" (the $2Ld^2$ and $2LCd$ split, and $C = 64$ or $128$ for tensor cores).
