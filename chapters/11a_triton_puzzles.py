# %% [markdown] slideshow={"slide_type": "slide"}
# # 11a · Triton puzzles: seven kernels before the real ones
#
# Chapter 11 opens k3lite's production kernels: a fused decode step, a fused SiTU, and the six-stage chunked KDA
# pipeline with its compensated sums. Read cold, that is a cliff. This chapter is the ramp up to it: seven short
# kernels, each written by you, each checked under Triton's interpreter on a CPU, and each one a piece that
# chapter 11's kernels are built from:
#
# 1. a vector add with masks (every kernel's first and last lines);
# 2. a row-wise softmax (a reduction along one axis of a block);
# 3. a tiled matrix product with `tl.dot` (every stage of the chunked pipeline after the gate sums);
# 4. running sums of log-gates that restart at every chunk (the pipeline's stage 1);
# 5. SiLU(gate) · up, fused (the shape of the fused SiTU kernel);
# 6. one decode step of the delta rule on a state tile (the decode kernel, without its gate);
# 7. the causal, decayed scores of one chunk (the pipeline's stage 2).
#
# The puzzles follow the spirit of Sasha Rush's *Triton-Puzzles* (listed under Sources): short kernels, each with a
# checker, getting harder one step at a time, but they end at the kernels of this course.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 2 h for a motivated student working alone: reading, running every cell, the exercises and
# the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. write a Triton kernel whose loads and stores are masked, so that it is right for any length with any
#    power-of-two block, and launch it on the right grid;
# 2. implement a reduction along one axis of a block (a row softmax) and a tiled matrix product with `tl.dot`;
# 3. implement chunk-local running sums with `tl.cumsum` and a fused elementwise kernel that reads its input once;
# 4. implement one decode step of the delta rule on a `[K, BV]` state tile, and explain why the grid splits the
#    value axis but not the key axis;
# 5. apply a causal mask with `tl.where` so that a decay that overflows above the diagonal never reaches the output.
#
# **Prerequisites.**
#
# - Chapter 03 (the delta rule and its one-token step) and chapter 05 (log-space gates and their running sums).
# - Row-major layout and strides of PyTorch tensors: *PyTorch documentation*,
#   [Tensor Views](https://pytorch.org/docs/stable/tensor_view.html).
# - Optional: how a GPU is organised (threads, registers, shared memory, main memory): the "Programming Model" and
#   "Memory Hierarchy" sections of NVIDIA's *CUDA C++ Programming Guide*.
# - Optional: Triton's first tutorials, vector addition and fused softmax, at
#   [triton-lang.org](https://triton-lang.org/main/getting-started/tutorials/index.html).

# %% slideshow={"slide_type": "skip"} tags=["plumbing"]
import torch

from k3lite import kernels

kernels.interpreting()           # on a CPU: switch the interpreter on before triton is imported
import triton
import triton.language as tl

from k3lite.course.runtime import seed_everything
from k3lite.exercises import ch11a

_ = seed_everything(0)
DEVICE = ch11a.device()           # the CPU under the interpreter, the GPU when there is one
print(f"Triton interpreter on: {kernels.interpreting()}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## How a Triton kernel works, in one cell
#
# A kernel is a Python function decorated with `@triton.jit`, launched on a **grid**: `kernel[(n0, n1)](...)` starts
# `n0 × n1` **programs**, and each asks `tl.program_id(axis)` which one it is. A program works on a **block**: a small
# tensor whose shape is a compile-time constant (`tl.constexpr`, a power of two), built with `tl.arange`. Tensors
# arrive as pointers to their first element; `ptr + offsets` addresses a block of them, `tl.load` reads it and
# `tl.store` writes it. A **lane** is one element position of a block, and a **tile** is a 2-D block, such as one
# program's piece of a matrix. A **mask** says which lanes of a block are inside the tensor: the others neither load
# (they get `other` instead) nor store.
#
# The kernel below stamps each element with the number of the program that owns it: ten elements, blocks of four.

# %%
@triton.jit
def stamp_owner(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)   # the BLOCK elements this program owns
    inside = offsets < n                                        # the last block sticks out past n
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.int32) + tl.program_id(0), mask=inside)


n, BLOCK = 10, 4
owner = torch.full((n,), -1, dtype=torch.int32, device=DEVICE)
grid = (triton.cdiv(n, BLOCK),)                                 # enough programs to cover n
stamp_owner[grid](owner, n, BLOCK)
print(f"grid {grid}, {grid[0] * BLOCK} lanes for {n} elements; owner of each element: {owner.tolist()}")

# %% [markdown]
# On a GPU the programs run at the same time, in no promised order; under the interpreter (`TRITON_INTERPRET=1`,
# which `k3lite.kernels` switches on when there is no GPU) they run one after another as NumPy code, in the
# tensors' own dtypes (this course uses float32, since the interpreter mishandles bf16), slowly, which is why every
# shape here is tiny. The interpreter checks your indexing, masks and arithmetic, not the
# program the compiler makes for a GPU: precision (TF32 in `tl.dot`, bf16) and, rarely, compiler bugs can still make
# the GPU differ (chapter 11, section 1, meets two), so a kernel is tested on a GPU too.
#
# **How the checkers work.** Each puzzle has a kernel to write, a cell that calls its checker from
# `k3lite.exercises.ch11a`, and a folded solution. The checker launches your kernel at several shapes, always
# including one where the last block sticks out of the tensor, and compares with PyTorch. It puts every tensor inside
# a larger buffer, NaN around the inputs and a sentinel around the outputs, so a load without a mask reads NaN and a
# store without a mask overwrites the sentinel; the checker says which. Until you replace the
# `raise NotImplementedError`, it says "not attempted yet".

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 1: a masked add
#
# **Why.** Every kernel of chapter 11 starts by computing its block's offsets and masks and ends by storing under
# them; its exercise 3 counts what breaks without them. Get them right once here.
#
# **Spec.** `add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK)`: `out = x + y` for flat float32 tensors of `n` elements,
# launched on `cdiv(n, BLOCK)` programs; program `i` owns elements `i·BLOCK … i·BLOCK + BLOCK − 1`. The checker
# tries `n` of 37, 64, 1 and 1000 with blocks of 16 to 128.

# %%
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # TODO: offsets of this program's block, a mask for the lanes inside n, two masked loads, one masked store
    raise NotImplementedError


# %%
ch11a.check_add(add_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside, other=0.0)
    y = tl.load(y_ptr + offsets, mask=inside, other=0.0)
    tl.store(out_ptr + offsets, x + y, mask=inside)


ch11a.check_add(add_kernel);

# %% [markdown]
# The load masks cannot show in the values here: a lane outside `n` that loads garbage is never stored. They still
# matter: on a GPU a load past the end of an allocation can fault. The next puzzle's reduction does see them.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 2: a row softmax
#
# **Why.** A reduction folds a block along one axis: `tl.sum(x, axis=0)`, `tl.max(x, axis=0)`. The decode step of
# chapter 11 reduces its state tile over the key axis to get $S^\top k$, one number per value column; softmax
# attention (the MLA layers of chapter 07) reduces each row of scores. Softmax also shows the two traps of a
# reduction: the lanes outside the row must be neutral for the reduction (0 for a sum, $-\infty$ for a max and for
# an exponent), and $e^x$ overflows float32 above $x \approx 88$.
#
# **Spec.** `softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK)`: for a contiguous float32 `x [rows, n_cols]`, one program
# per row writes $\mathrm{softmax}(x_r)_j = e^{x_{rj} - m_r} / \sum_i e^{x_{ri} - m_r}$ with $m_r = \max_i x_{ri}$;
# `BLOCK` is `n_cols` rounded up to a power of two. The checker tries `[4, 37]`, `[3, 16]` and `[5, 100]`, some with
# scores of several tens.

# %%
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    # TODO: load row tl.program_id(0) (it starts at row * n_cols), with other=float("-inf") past n_cols;
    # subtract its maximum, exponentiate, divide by the sum, store
    raise NotImplementedError


# %%
ch11a.check_softmax(softmax_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=float("-inf"))   # exp(-inf) = 0: no weight
    e = tl.exp(x - tl.max(x, axis=0))                                           # every exponent <= 0
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=inside)


ch11a.check_softmax(softmax_kernel);

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 3: a tiled matrix product
#
# **Why.** `tl.dot(a, b)` multiplies two blocks; on a GPU it runs on the tensor cores for 16-bit inputs or TF32
# (float32 with `input_precision="ieee"`, as here, runs on the ordinary fused multiply-add units). It is where a
# GPU's arithmetic lives. Every stage of chapter 11's chunked pipeline after the gate sums is a few of them: $QK^\top$ within a chunk, the WY factors, the state
# update $K^\top V'$. A program owns one output tile and walks the shared dimension one block at a time, accumulating
# in float32.
#
# **Spec.** `matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK)`: `c = a @ b` for contiguous float32 `a [M, K]`,
# `b [K, N]`, `c [M, N]`, on a `(cdiv(M, BM), cdiv(N, BN))` grid, program `(i, j)` owning rows `i·BM …` and
# columns `j·BN …` of `c`. Element `[r, c]` of a row-major `[R, C]` tensor sits at `r·C + c`. The checker uses
# 16 × 16 × 16 blocks (on a GPU `tl.dot` has minimum tile sizes, 16 along the shared dimension for 16-bit inputs;
# we keep every side at least 16) on `(M, N, K)` of `(20, 24, 40)`,
# `(16, 16, 16)` and `(33, 17, 5)`. Pass `input_precision="ieee"` to `tl.dot`: on a GPU float32 products
# otherwise run in TF32, with about three decimal digits.

# %%
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # TODO: rows and columns of this program's tile; acc = tl.zeros([BM, BN], dtype=tl.float32);
    # for k0 in range(0, K, BK): load a [BM, BK] and b [BK, BN], masked on both sides, acc += tl.dot(a, b, ...);
    # store acc under a mask
    raise NotImplementedError


# %%
ch11a.check_matmul(matmul_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):                   # the sequential loop inside one program
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")   # lanes past K hold 0 on both sides: they add nothing
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


ch11a.check_matmul(matmul_kernel);

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Prediction: how often is each element of `a` read?
#
# Run the kernel on `M = N = K = 256` with `BM = BN = BK = 32`: an `(8, 8)` grid of programs. Before running the cell
# after the next, write down how many times each element of `a` is loaded from memory in total, over all programs
# and loop steps. The kernel below counts it: it walks the same loop as yours but adds 1 to a counter at every
# position of `a` it would load (`tl.atomic_add`, safe when programs touch the same element).

# %%
def predicted_reads_of_a():
    raise NotImplementedError  # return your prediction, a whole number


# %%
@triton.jit
def count_reads_of_a(count_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        inside = (rows[:, None] < M) & (ks[None, :] < K)
        tl.atomic_add(count_ptr + rows[:, None] * K + ks[None, :], tl.full([BM, BK], 1, tl.int32), mask=inside)


reads = torch.zeros(256, 256, dtype=torch.int32, device=DEVICE)
count_reads_of_a[(triton.cdiv(256, 32), triton.cdiv(256, 32))](reads, 256, 256, 256, 32, 32, 32)
measured_reads = int(reads.min())
print(f"every element of a was read between {int(reads.min())} and {int(reads.max())} times")
ch11a.check_reload_prediction(predicted_reads_of_a, measured=measured_reads);


# %% tags=["solution"]
# Solution: program (i, j) reads all of row block i of a; the 8 programs of that grid row each read it once.
def predicted_reads_of_a_solution():
    return 256 // 32


ch11a.check_reload_prediction(predicted_reads_of_a_solution, measured=measured_reads);

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 4: running sums that restart at every chunk
#
# **Why.** The chunked form of Gated DeltaNet and KDA (chapters 05 and 06) needs, inside each chunk, the running sum
# of the log-gates, $G_t = \sum_{s \le t} g_s$ over the chunk's own steps: every decay within the chunk is then
# $e^{G_r - G_c}$. It is stage 1 of chapter 11's pipeline (`_chunk_cumsum`). Triton has a scan for it,
# `tl.cumsum(x, axis=0)`, a parallel scan along one axis of a block.
#
# **Spec.** `chunk_cumsum_kernel(g_ptr, out_ptr, T, CHUNK)`: for contiguous float32 log-gates `g [rows, T]`, write the
# inclusive running sum within each chunk of `CHUNK` steps, restarting at 0 at every chunk, on a
# `(cdiv(T, CHUNK), rows)` grid: program `(c, r)` owns steps `c·CHUNK …` of row `r`. The checker tries
# `[3, 40]` with chunks of 16, `[2, 64]` with one chunk of 64 and `[1, 5]` with a chunk of 8.

# %%
@triton.jit
def chunk_cumsum_kernel(g_ptr, out_ptr, T, CHUNK: tl.constexpr):
    # TODO: which chunk and which row; load the chunk's steps (masked past T), tl.cumsum along the block, store
    raise NotImplementedError


# %%
ch11a.check_chunk_cumsum(chunk_cumsum_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def chunk_cumsum_kernel(g_ptr, out_ptr, T, CHUNK: tl.constexpr):
    chunk, row = tl.program_id(0), tl.program_id(1)
    steps = chunk * CHUNK + tl.arange(0, CHUNK)
    inside = steps < T
    g = tl.load(g_ptr + row * T + steps, mask=inside, other=0.0)   # 0: adds nothing to the sums after it
    tl.store(out_ptr + row * T + steps, tl.cumsum(g, axis=0), mask=inside)


ch11a.check_chunk_cumsum(chunk_cumsum_kernel);

# %% [markdown]
# The production stage keeps each sum as two float32 parts, because after one strong gate a single float32 sum
# rounds the gentle gates after it away; chapter 11's section 5 shows why, and its exercise 4 asks you to fix it.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 5: SiLU(gate) · up, fused
#
# **Why.** A gated MLP computes a gate $g = W_g x$ and an up projection $u = W_u x$, then
# $\mathrm{SiLU}(g) \cdot u$ (chapter 08). Some implementations merge $W_g$ and $W_u$ into one projection whose
# output holds the two side by side; this puzzle uses that layout, for practice with 2-D addressing (k3lite keeps two
# projections, and chapter 11's fused SiTU kernel reads two flat tensors with the same kind of arithmetic). In
# PyTorch the product is a SiLU and a multiplication (the slices are views and move nothing): two kernels, and one
# intermediate tensor written and read back. One kernel reads each input once and writes the result once.
#
# **Spec.** `silu_mul_kernel(x_ptr, out_ptr, D, BLOCK)`: `x [rows, 2D]` (contiguous, float32) holds the gate in its
# first `D` columns and the up projection in its last `D`; write `out [rows, D]` $= \mathrm{SiLU}(\text{gate}) \cdot
# \text{up}$, with $\mathrm{SiLU}(a) = a\,\sigma(a)$, on a `(rows, cdiv(D, BLOCK))` grid. Some gates are $\pm 100$,
# where $e^{100}$ is infinite in float32: written as $e^a / (1 + e^a)$, $\sigma$ gives $\infty / \infty$ = NaN there,
# while $1 / (1 + e^{-a})$ (which becomes $1 / \infty = 0$) and the form through $e^{-|a|}$ are safe. The checker tries
# `D` of 20, 64 and 7.

# %%
@triton.jit
def silu_mul_kernel(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    # TODO: row r of x starts at r * 2 * D, its up half D further; load both halves of this program's columns,
    # compute gate * sigmoid(gate) * up, store into row r of out (which starts at r * D)
    raise NotImplementedError


# %%
ch11a.check_silu_mul(silu_mul_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def silu_mul_kernel(x_ptr, out_ptr, D, BLOCK: tl.constexpr):
    row, block = tl.program_id(0), tl.program_id(1)
    cols = block * BLOCK + tl.arange(0, BLOCK)
    inside = cols < D
    gate = tl.load(x_ptr + row * 2 * D + cols, mask=inside, other=0.0)
    up = tl.load(x_ptr + row * 2 * D + D + cols, mask=inside, other=0.0)
    small = tl.exp(-tl.abs(gate))                                           # in (0, 1]: cannot overflow
    sigmoid = tl.where(gate >= 0, 1.0 / (1.0 + small), small / (1.0 + small))
    tl.store(out_ptr + row * D + cols, gate * sigmoid * up, mask=inside)


ch11a.check_silu_mul(silu_mul_kernel);

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 6: one decode step of the delta rule
#
# **Why.** Generating one token updates each head's state $S \in \mathbb{R}^{K \times V}$ (chapter 03):
#
# $$v' = \beta\,(v - S^\top k), \qquad S \leftarrow S + k\,v'^\top, \qquad o = S^\top (\text{scale}\cdot q).$$
#
# In PyTorch (`k3lite.ops.delta_rule.step`) each of these reads the `[B, H, K, V]` state from memory and writes a
# result back; a fused kernel reads the state once and writes it once. This is chapter 11's decode kernel without its
# gate. Its grid is `(cdiv(V, BV), B·H)`: a program owns one head's `[K, BV]` tile, all key rows and `BV` value
# columns. Every value column updates on its own ($S^\top k$ is one dot product per column), so splitting $V$ is
# free; splitting $K$ would split those sums across programs.
#
# **Spec.** `delta_step_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV)` for
# contiguous float32 `q, k [B, H, K]`, `v [B, H, V]`, `beta [B, H]` and the state `[B, H, K, V]`, writing
# `o [B, H, V]` and the new state. The loads are written for you; write the arithmetic and the two stores. The
# checker tries `K, V` of `(12, 20)`, `(16, 16)` and `(5, 3)` against `delta_rule.step`.

# %%
@triton.jit
def delta_step_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                      BK: tl.constexpr, BV: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)       # head runs over B * H
    rows = tl.arange(0, BK)                                  # key channels, all of them (BK >= K)
    cols = block * BV + tl.arange(0, BV)                     # this program's value columns
    row_ok, col_ok = rows < K, cols < V
    state_at = head * K * V + rows[:, None] * V + cols[None, :]
    tile_ok = row_ok[:, None] & col_ok[None, :]
    S = tl.load(s_ptr + state_at, mask=tile_ok, other=0.0)   # [BK, BV]  # noqa: F841
    q = tl.load(q_ptr + head * K + rows, mask=row_ok, other=0.0)  # noqa: F841
    k = tl.load(k_ptr + head * K + rows, mask=row_ok, other=0.0)  # noqa: F841
    v = tl.load(v_ptr + head * V + cols, mask=col_ok, other=0.0)  # noqa: F841
    beta = tl.load(beta_ptr + head)                          # one scalar per head  # noqa: F841
    # TODO: S^T k is tl.sum(S * k[:, None], axis=0); k v'^T is k[:, None] * v'[None, :];
    # then store the new S at s_out_ptr + state_at and o at o_ptr + head * V + cols, with their masks
    raise NotImplementedError


# %%
ch11a.check_delta_step(delta_step_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def delta_step_kernel(q_ptr, k_ptr, v_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V,
                      BK: tl.constexpr, BV: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BK)
    cols = block * BV + tl.arange(0, BV)
    row_ok, col_ok = rows < K, cols < V
    state_at = head * K * V + rows[:, None] * V + cols[None, :]
    tile_ok = row_ok[:, None] & col_ok[None, :]
    S = tl.load(s_ptr + state_at, mask=tile_ok, other=0.0)
    q = tl.load(q_ptr + head * K + rows, mask=row_ok, other=0.0)
    k = tl.load(k_ptr + head * K + rows, mask=row_ok, other=0.0)   # 0 past K: adds nothing to S^T k
    v = tl.load(v_ptr + head * V + cols, mask=col_ok, other=0.0)
    beta = tl.load(beta_ptr + head)
    v_new = beta * (v - tl.sum(S * k[:, None], axis=0))      # [BV]: the correction, one per value column
    S = S + k[:, None] * v_new[None, :]                      # the rank-one write k v'^T
    o = tl.sum(S * (q * scale)[:, None], axis=0)             # read after the write
    tl.store(s_out_ptr + state_at, S, mask=tile_ok)
    tl.store(o_ptr + head * V + cols, o, mask=col_ok)


ch11a.check_delta_step(delta_step_kernel);

# %% [markdown]
# Chapter 11's `_decode_step` is this kernel plus a decay of the state before the correction (one factor per head
# for Gated DeltaNet, one per key channel for KDA), value checks, and int64 offsets for large batches. Its exercise 1
# gives you the arithmetic and asks for the loads and the two stores, with their masks.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## Puzzle 7: the causal, decayed scores of one chunk
#
# **Why.** Inside a chunk of $C$ tokens, the chunked form of Gated DeltaNet (chapter 05) needs every score of a query
# with an earlier key, decayed by the gates between them:
#
# $$A_{rc} = (q_r \cdot k_c)\, e^{G_r - G_c} \ \text{ for } c \le r, \qquad A_{rc} = 0 \ \text{ for } c > r,$$
#
# with $G$ the chunk's running gate sums of puzzle 4. It is Gated DeltaNet's stage 2 in chapter 11's pipeline
# (`_intra_chunk_dense`, named in the pipeline's docstring there; section 4 walks KDA's kernels instead).
#
# ![Chunking: parallel inside a chunk, a state across chunks](../figures/diagram_chunk_tiling.svg)
#
# In the diagram, this puzzle computes one of the $C \times C$ tiles on the diagonal; the tiles below it are never
# formed: the state carried from chunk to chunk (chapter 11) stands in for them.
#
# Above the diagonal $G_r - G_c > 0$, and with strong gates $e^{G_r - G_c}$ is infinite in float32; multiplied by a
# mask of 0 it gives NaN ($\infty \cdot 0$). A causal kernel *chooses* with `tl.where` and keeps every exponent it
# takes at or below 0.
#
# **Spec.** `chunk_scores_kernel(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC, BK)` for contiguous float32
# `q, k [N, C, K]` and `G [N, C]`: one program per chunk writes `out [N, C, C]`. `BC` and `BK` are `C` and `K`
# rounded up to powers of two (at least 16, for `tl.dot`); `tl.trans(k)` transposes a block. Pass
# `input_precision="ieee"` to `tl.dot`, as in puzzle 3. The checker tries
# `C, K` of `(16, 16)` and `(20, 12)`, with gates down to −12 per step.

# %%
@triton.jit
def chunk_scores_kernel(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    # TODO: load q and k [BC, BK] and G [BC] of chunk tl.program_id(0);
    # scores = tl.dot(q, tl.trans(k), input_precision="ieee");
    # causal = c <= r; keep (q_r . k_c) exp(G_r - G_c) where causal, 0 elsewhere; store the [C, C] tile
    raise NotImplementedError


# %%
ch11a.check_chunk_scores(chunk_scores_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def chunk_scores_kernel(q_ptr, k_ptr, G_ptr, out_ptr, C, K, BC: tl.constexpr, BK: tl.constexpr):
    chunk = tl.program_id(0)
    tokens = tl.arange(0, BC)
    channels = tl.arange(0, BK)
    at = chunk * C * K + tokens[:, None] * K + channels[None, :]
    tile_ok = (tokens[:, None] < C) & (channels[None, :] < K)
    q = tl.load(q_ptr + at, mask=tile_ok, other=0.0)
    k = tl.load(k_ptr + at, mask=tile_ok, other=0.0)
    G = tl.load(G_ptr + chunk * C + tokens, mask=tokens < C, other=0.0)
    # c <= r, on real rows only: a padded row's G loads as 0, which would put a positive span under exp
    causal = (tokens[None, :] <= tokens[:, None]) & (tokens[:, None] < C)
    span = tl.where(causal, G[:, None] - G[None, :], 0.0)   # <= 0 where kept: exp cannot overflow
    scores = tl.dot(q, tl.trans(k), input_precision="ieee") * tl.exp(span)
    scores = tl.where(causal, scores, 0.0)
    out_ok = (tokens[:, None] < C) & (tokens[None, :] < C)
    tl.store(out_ptr + chunk * C * C + tokens[:, None] * C + tokens[None, :], scores, mask=out_ok)


ch11a.check_chunk_scores(chunk_scores_kernel);

# %% [markdown]
# The production stage does the same on 64-token chunks, scales the scores, and takes each span part by part from
# the two float32 parts of puzzle 4's sums. KDA's per-channel gates put the decay inside the product, which is why
# chapter 11's pipeline has other kernels for them.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Open question: what Triton decides for you
#
# In every puzzle you wrote what one program does with its blocks. Triton decided the rest: which of the GPU's
# threads holds which element, whether a block lives in registers (each thread's own fast storage) or in shared
# memory (a small fast memory shared by a group of threads), and how loads from the GPU's main memory overlap with
# arithmetic. Pick one puzzle limited by memory traffic (say 1 or 5) and one limited by arithmetic (3). For each,
# say which resource limits it, and whether a kernel written by hand in CUDA, where you decide all of the above,
# could lift that limit.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# - **Masked add, SiLU gate, decode step** are memory-bound: each byte is read and written once, so the best any
#   kernel can do is run at the copy bandwidth. Triton already issues wide, coalesced loads, so CUDA has little
#   left to gain there, unless the kernel is so small that launch overhead dominates, which is fixed by fusing more
#   work or CUDA graphs, not by the language.
# - **Tiled matmul** is compute-bound only with large tiles (about 128 × 128) and 16-bit or TF32 inputs; puzzle 3's
#   16 × 16 float32 tiles do a few FLOPs per byte loaded. At that scale, on Hopper, the fastest kernels use TMA
#   (Tensor Memory Accelerator) bulk copies and warp-group matrix instructions with deep software pipelining and
#   warp specialisation. Triton generates much of this but not all, so hand-written CUTLASS-style kernels can still
#   be faster at some shapes.
# - **Row softmax and the running sums** are reductions: CUDA lets you pick warp shuffles versus shared memory and
#   how many rows a warp owns; Triton picks for you from the block shape, usually well.
#
# A good answer separates memory-bound from compute-bound, knows that the first is capped by bandwidth whatever the
# language, and names a concrete hardware feature for the second.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## From the puzzles to chapter 11
#
# | Puzzle | Where it returns in chapter 11 |
# | --- | --- |
# | 1. masked add | every kernel's offsets and masks; exercise 3 (what breaks without masks) |
# | 2. row softmax | the reductions `tl.sum(..., axis=0)` of the decode step |
# | 3. tiled matmul | `tl.dot` in every stage of the chunked pipeline after stage 1 (section 4) |
# | 4. chunk-local sums | stage 1, `_chunk_cumsum`; exercise 4 (sums that keep their digits) |
# | 5. SiLU(gate) · up | the fused SiTU forward (section 3; exercise 2) |
# | 6. delta-rule step | the fused decode step (section 2; exercise 1 adds the decay) |
# | 7. causal scores | Gated DeltaNet's stage 2, `_intra_chunk_dense` (the pipeline's docstring, section 4) |
#
# Chapter 11 reads the kernels themselves from the package, so you can now follow them line by line.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. In puzzle 2, why must the lanes past `n_cols` load $-\infty$ rather than 0, and why does subtracting the row
#    maximum not change the softmax?
# 2. In puzzle 3, why may the loop's last block of the shared dimension stick out past `K` without changing the
#    product?
# 3. In puzzle 6, a program owns all `K` rows and `BV` columns of the state. What would go wrong if the grid also
#    split the key axis into blocks of `BK < K`?
# 4. In puzzle 7, why is `tl.exp(span) * mask` wrong where `tl.where(mask, ..., 0.0)` is right?
#
# <details>
# <summary>Short answers</summary>
#
# 1. A loaded 0 is a real score with weight $e^{0 - m}$, which enters the sum; $-\infty$ gives weight 0. Subtracting
#    $m$ multiplies every $e^{x_j}$ and their sum by the same $e^{-m}$, which cancels, and keeps every exponent at
#    or below 0.
# 2. Its masked lanes load 0 from both `a` and `b`, so each adds a product of zeros to the accumulator.
# 3. $S^\top k$ sums over all key rows: each program would hold only part of each column's sum, and the correction
#    $v - S^\top k$ would need the programs to exchange partial sums before anyone could write.
# 4. Above the diagonal the span is positive and can overflow to $\infty$; $\infty \cdot 0$ is NaN, while
#    `tl.where` only picks one of two values. Keeping the span at 0 there also avoids computing $\infty$ at all.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Sasha Rush, *Triton-Puzzles*, [github.com/srush/Triton-Puzzles](https://github.com/srush/Triton-Puzzles): the
#   idea of a ramp of small kernels, each with a checker, run under the interpreter.
# - The Triton documentation, [triton-lang.org](https://triton-lang.org/): the tutorials
#   [vector addition, fused softmax and matrix multiplication](https://triton-lang.org/main/getting-started/tutorials/index.html)
#   (puzzles 1–3) and the `triton.language` reference for `tl.cumsum`, `tl.where` and `tl.dot` (puzzles 4–7).
# - Tillet, Kung and Cox (2019), *Triton: An Intermediate Language and Compiler for Tiled Neural Network
#   Computations*, MAPL 2019, [doi:10.1145/3315508.3329973](https://doi.org/10.1145/3315508.3329973) (the
#   tile-level programming model behind blocks and programs).
# - Yang et al. (2024), *Parallelizing Linear Transformers with the Delta Rule over Sequence Length*,
#   [arXiv:2406.06484](https://arxiv.org/abs/2406.06484) (the delta rule's recurrent form; puzzle 6).
# - Yang, Kautz and Hatamizadeh (2024), *Gated Delta Networks: Improving Mamba2 with Delta Rule*,
#   [arXiv:2412.06464](https://arxiv.org/abs/2412.06464) (the gated delta rule and its chunked form, whose decays
#   puzzles 4 and 7 compute).
# - Shazeer (2020), *GLU Variants Improve Transformer*, [arXiv:2002.05202](https://arxiv.org/abs/2002.05202)
#   (SiLU-gated MLPs; puzzle 5).
