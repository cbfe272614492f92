# %% [markdown] slideshow={"slide_type": "slide"}
# # 11 · Making it fast: k3lite's Triton kernels
#
# Chapters 01–10 told the architecture story, from GPT-2 to Kimi K3. Every mixer there ran as PyTorch operations, and
# whenever a GPU was present, `k3lite.ops` quietly handed the work to Triton kernels (chapter 04 called them, the
# benchmark timed them). This chapter opens those kernels, from the smallest to the largest: (1) Triton's model —
# programs, blocks, masks, `tl.load` / `tl.store`, `tl.dot`; (2) the fused decode step, whose speed is set by memory,
# not arithmetic; (3) the fused SiTU activation, forward and backward; (4) the chunked KDA pipeline: six kernels, which
# parts run in parallel and which in sequence, and where the time goes on a GPU; (5) how the kernels compare with
# the reference library, and five engineering lessons, each taken on its own; (6) exercises: write the decode kernel and the fused SiTU forward,
# predict what breaks without masks, keep the digits of a sum.
#
# **No GPU needed.** Importing `k3lite.kernels` on a machine without CUDA switches on Triton's *interpreter*, which
# runs each `@triton.jit` function as NumPy code on CPU tensors: float32 only, one program after another, slowly — so
# every shape here is tiny. It runs the very kernels the H200 runs. **No listing is retyped**: every kernel shown is
# read from the `k3lite` package by `k3lite.course.listing`, so what you read is what runs.

# %% [markdown] slideshow={"slide_type": "skip"} tags=["reading"]
# ## Before you start
#
# **Study time:** about 5 h 30 min for a motivated student working alone: reading, running every cell, the exercises
# and the questions of "Check yourself" at the end.
#
# **Learning objectives.** When you have worked through this chapter you can
#
# 1. explain Triton's model (programs, blocks, masks, `tl.load`/`tl.store`/`tl.dot`) and count what an unmasked
#    block writes past a tensor's end;
# 2. implement the KDA decode-step kernel and a fused SiTU forward, checked under the interpreter on a CPU;
# 3. compute a kernel's arithmetic intensity, place it on the H200's roofline, and say what limits it;
# 4. describe the six stages of the chunked KDA pipeline: which take all chunks at once, which walks them in order;
# 5. implement a compensated (TwoSum) running sum of log-gates and explain what one float32 sum loses.
#
# **Prerequisites.**
#
# - Chapters 04 (the WY/UT chunk), 06 (KDA's per-channel decay, spans as differences) and 08 (SiTU).
# - The GPU memory hierarchy: NVIDIA's [CUDA C++ Programming Guide](https://docs.nvidia.com/cuda/cuda-c-programming-guide/)
#   or FlashAttention, [arXiv:2205.14135](https://arxiv.org/abs/2205.14135), §2.1.
# - Floating-point rounding: Goldberg (1991), [doi:10.1145/103162.103163](https://doi.org/10.1145/103162.103163).
# - Chapter 11a (seven Triton puzzles, each a piece of this chapter's kernels), or Triton's first tutorials:
#   [triton-lang.org](https://triton-lang.org/main/getting-started/tutorials/index.html).

# %% slideshow={"slide_type": "skip"} tags=["plumbing"]
import itertools
import json
import math
import statistics

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import Rectangle
from myst_nb import glue
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from k3lite import kernels
from k3lite.course import viz
from k3lite.course.checks import expect
from k3lite.course.listing import show

kernels.interpreting()           # on a CPU: switch the interpreter on before triton is imported
import triton
import triton.language as tl

from k3lite.course.runtime import seed_everything
from k3lite.exercises import ch11
from k3lite.kernels import chunk_fwd, recurrent_step, situ
from k3lite.ops import gated_delta_rule, kda
from k3lite.ops import situ as situ_ops

viz.use_style()
_ = seed_everything(0)
DEVICE = ch11.device()            # the CPU under the interpreter, the GPU when there is one
BENCH = json.loads((viz.BENCH_RESULTS_DIR / "bench_h200.json").read_text())
META = BENCH["meta"]
print(f"Triton interpreter on: {kernels.interpreting()}")

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 1. Triton's model: programs, blocks, masks
#
# A Triton kernel is a Python function decorated with `@triton.jit`. It is launched on a **grid**:
# `kernel[(n0, n1)](...)` starts `n0 × n1` **programs**, and each asks `tl.program_id(axis)` which one it is. A
# program never handles one number at a time: it works on a **block**, a small tensor whose shape is a compile-time
# constant (`tl.constexpr`, a power of two), built from `tl.arange`.
#
# * `tl.load(ptr + offsets, mask=m, other=0.0)` reads a block from memory; lanes where the mask is False are not read
#   and get `other` instead.
# * `tl.store(ptr + offsets, x, mask=m)` writes a block; masked lanes are not written.
# * `tl.dot(a, b)` multiplies two blocks (on a GPU: on the tensor cores for 16-bit or TF32 inputs, on the ordinary
#   multiply-add units for exact float32, `input_precision="ieee"`; the shared dimension at least 16).
#
# Pointers are plain addresses: `ptr + offsets` with `offsets = row * stride + column` is how a kernel finds element
# `[row, column]` of a row-major tensor. The **mask** is what makes a block of 8 safe on a tensor of 20: the last
# program's block sticks out, and its outside lanes must neither load nor store.
#
# The first kernel below does nothing but stamp its program number into the tile it owns. Run on a `[20, 28]` array
# with `8 × 8` blocks, the result *is* the picture of who touches what.

# %%
@triton.jit
def stamp_program_id(out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):
    pid_r, pid_c = tl.program_id(0), tl.program_id(1)
    rows = pid_r * BR + tl.arange(0, BR)                  # the BR rows of this program's tile
    cols = pid_c * BC + tl.arange(0, BC)
    inside = (rows[:, None] < R) & (cols[None, :] < C)    # [BR, BC] mask: lanes inside the array
    pid = pid_r * tl.num_programs(1) + pid_c
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], tl.zeros([BR, BC], dtype=tl.int32) + pid, mask=inside)


R, C, BR, BC = 20, 28, 8, 8
grid = (triton.cdiv(R, BR), triton.cdiv(C, BC))
owner = torch.full((R, C), -1, dtype=torch.int32, device=DEVICE)
stamp_program_id[grid](owner, R, C, BR, BC)
owner = owner.cpu()
lanes = grid[0] * grid[1] * BR * BC
print(f"grid {grid}: {grid[0] * grid[1]} programs of {BR}x{BC} lanes = {lanes} lanes for {R * C} elements")
print(f"lanes masked off: {lanes - R * C}; elements no program wrote: {int((owner < 0).sum())}")
for name, value in (("masked_lanes", lanes - R * C), ("programs", grid[0] * grid[1]),
                    ("lane_rect", [grid[0] * BR, grid[1] * BC])):
    glue(f"ch11_{name}", str(value), display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7.5, 5.2))
ax.imshow(owner.numpy() % 6, cmap="Pastel1", vmin=0, vmax=8, extent=(0, C, R, 0))
for i in range(grid[0]):
    for j in range(grid[1]):
        ax.add_patch(Rectangle((j * BC, i * BR), BC, BR, fill=False, lw=1.5, ls="--", ec=viz.PALETTE["black"]))
        ax.text(j * BC + BC / 2, i * BR + BR / 2, f"program\n({i}, {j})", ha="center", va="center", fontsize=8)
ax.add_patch(Rectangle((0, 0), C, R, fill=False, lw=2.5, ec=viz.PALETTE["blue"]))
ax.set(xlim=(0, grid[1] * BC), ylim=(grid[0] * BR, 0), xlabel="column", ylabel="row")
ax.set_title("Which program writes which tile (dashed: its block; outside the blue array the mask stops it)")
plt.show()

# %% [markdown]
# The {glue:text}`ch11_programs` programs cover a {glue:text}`ch11_lane_rect` rectangle of lanes; the mask stops the
# {glue:text}`ch11_masked_lanes` lanes outside the array. On a GPU the programs run at the same time on the streaming
# multiprocessors, in no promised order; the interpreter runs them one after another. The interpreter checks the
# *algorithm*: the indexing, the masks, the arithmetic (in float32; it does not handle bf16). It does not check the
# *compiled program*: on the GPU the compiler chooses layouts, shared-memory buffers and pipelining, and a compiler
# can get those wrong. At head widths outside its tuned ones, k3lite's backward shows it: on an H100 the compiler
# turned one stage into wrong gradients and another into out-of-range shared-memory reads, while the interpreter
# computed the same kernels exactly (the docstring of `chunk_bwd_triton.verified_fast_shape` lists the cases and the
# safer launch settings those shapes take). So a kernel
# needs both: interpreter tests on any machine, and the same checks on a GPU (`tests/test_grid_*_gpu.py` runs the
# reference library's test grids there; `benchmarks/probes/launch_replay.py` replays each GPU launch under the
# interpreter to find the one that differs). Kernels can be written in notebook cells, as here.
#
# `tl.dot` is where a GPU's speed lives, once its inputs are 16-bit (or TF32) and go to the tensor cores; the example
# asks for exact float32 products, which the ordinary units compute, so that the interpreter and a GPU agree. A
# matrix product, one program per `[16, 16]` output tile, walking the shared
# dimension 16 at a time and accumulating in float32:

# %%
@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):                            # the sequential loop inside one program
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


a, b, c = torch.randn(40, 24, device=DEVICE), torch.randn(24, 36, device=DEVICE), torch.empty(40, 36, device=DEVICE)
matmul[(triton.cdiv(40, 16), triton.cdiv(36, 16))](a, b, c, 40, 36, 24, 16, 16, 16)
expect("tl.dot matmul equals torch's a @ b (max |diff| < 1e-4)", (c - a @ b).abs().max().item() < 1e-4)

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 2. The decode step, line by line
#
# Generating one token with KDA updates each head's state $S \in \mathbb{R}^{K \times V}$ (chapter 06):
#
# $$S \leftarrow \mathrm{Diag}(e^{g})\,S, \qquad v' = \beta\,(v - S^\top k), \qquad
#   S \leftarrow S + k\,v'^\top, \qquad o = S^\top (\text{scale}\cdot q).$$
#
# In PyTorch that is several operations, each reading the `[B, H, K, V]` state from memory and writing a result back.
# The fused kernel `k3lite.kernels.recurrent_step._decode_step` reads the state once and writes it once. Here it is,
# straight from the package, in two parts. First the tile and its loads:

# %%
show(recurrent_step._decode_step, "@triton.jit", "b_v = tl.load")

# %% [markdown]
# * **The grid** is `(cdiv(V, BV), B·H)`: one program per head and per block of `BV` value columns. Its tile of the
#   state is `[K, BV]` — all key rows, some value columns. Splitting along $V$ is free: every value column of $S$
#   updates independently ($S^\top k$ is one dot product per column). Splitting along $K$ would not be: $S^\top k$
#   sums over the key rows.
# * **`rk`, `rv`, `mk`, `mv`** are the row and column indices of the tile and their masks: `BK` is $K$ rounded up to a
#   power of two, and the last value block may stick out past $V$.
# * **`off`** addresses the tile inside the contiguous `[B, H, K, V]` state: head `i_bh` starts at `i_bh · K · V`, row
#   `rk` at `rk · V`. (The cast to int64 keeps the product from overflowing at large B.)
#
# Then the update, all in registers, and the two stores:

# %%
show(recurrent_step._decode_step, "bad = False", "tl.store(o_ptr")

# %% [markdown]
# * **Per-channel decay** (`GATE == GATE_CHANNEL`, KDA): one factor $e^{g_d}$ per key channel, i.e. per *row* of the
#   tile — `tl.exp(b_g)[:, None]` broadcasts it along the row. Gated DeltaNet's scalar gate (`GATE_SCALAR`) multiplies
#   the whole tile by one number; linear attention and DeltaNet have no gate.
# * **The delta correction** (`DELTA`): `tl.sum(b_s * b_k[:, None], axis=0)` is $S^\top k$, one number per value
#   column, computed on the *decayed* state; then $v' = \beta(v - S^\top k)$.
# * **Write, then read**: `b_s + b_k[:, None] * b_v[None, :]` is the rank-one write $k v'^\top$; the output reads the
#   *new* state. Both stores are masked like the loads.
# * **The value checks** (`bad`, `CHECK`, `MESSAGE`): the kernel has $g$ and $\beta$ in registers anyway, so it checks
#   them there ($g \le 0$, $0 \le \beta \le 2$, written as `~(g <= 0)` so that a NaN fails too). `tl.device_assert`
#   stops the kernel with `MESSAGE`; the host sees the failure at its next synchronisation, like any CUDA error.
#   Triton compiles device asserts only into a kernel launched with `debug=True`, so on CUDA the launcher passes that
#   (and `sanitize_overflow=False`, which keeps debug mode from adding an overflow check to every integer operation).
#   A check on the host would cost more than the step itself (section 5, lesson d).
#
# The launcher picks the block sizes (`chunk_fwd._block`, which the chunked pipeline uses too: the axis rounded up to
# a power of two, at least 16) and the grid:

# %%
show(recurrent_step.decode_step)

# %% [markdown]
# Run it through the interpreter against the PyTorch step of `k3lite.ops.kda` — at `K = 12`, `V = 20`, where both
# masks matter, with the default value block and with a much narrower one (`block_v = 16`, two programs per head, the
# second 12 lanes short):

# %%
gen = torch.Generator().manual_seed(0)
B, H, K, V = 2, 3, 12, 20
q, k, v, state = (torch.randn(*shape, generator=gen).to(DEVICE) for shape in ((B, H, K), (B, H, K), (B, H, V),
                                                                             (B, H, K, V)))
k, g, beta = (torch.nn.functional.normalize(k, dim=-1), -torch.rand(B, H, K, generator=gen).to(DEVICE),
              torch.rand(B, H, generator=gen).to(DEVICE))
o_ref, s_ref = kda.step(q, k, v, g, beta, state=state, backend="torch")
for block_v in (64, 16):
    o_fused, s_fused = recurrent_step.decode_step("kda", q, k, v, g, beta, state, q.shape[-1] ** -0.5,
                                                  block_v=block_v)
    worst = max((o_fused - o_ref).abs().max().item(), (s_fused - s_ref).abs().max().item())
    expect(f"fused decode step (block_v={block_v}) equals kda.step in PyTorch, max |diff| < 1e-5", worst < 1e-5)

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Why decode is memory-bound: the roofline
#
# Count what one step costs per head. The state is float32: it is read once and written once, $2 \cdot 4 \cdot K V$
# bytes. The arithmetic per state entry is one multiply (decay), one multiply-add ($S^\top k$), one multiply-add (the
# write) and one multiply-add (the read): 7 floating-point operations for 8 bytes moved. The vectors $q, k, v, g$ are
# $O(K + V)$, negligible next to $KV$. The peaks the next cell uses are NVIDIA's published H200 figures
# (dense bf16 tensor cores and HBM3e bandwidth, nvidia.com/en-us/data-center/h200); what one H200 reached in
# practice, a device-to-device copy and an $8192^3$ bf16 matmul, is stored in
# `benchmarks/results/ceilings_h200.json` (`python -m benchmarks.bench --sections ceilings` measures both).

# %%
flops_per_head, bytes_per_head = 7 * 128 * 128, 2 * 4 * 128 * 128        # K = V = 128
intensity = flops_per_head / bytes_per_head
PEAK_TFLOPS, PEAK_TBS = 989.0, 4.8                 # H200 spec sheet: dense bf16 tensor cores, HBM3e
CEILINGS = json.loads((viz.BENCH_RESULTS_DIR / "ceilings_h200.json").read_text())["ceilings"]
MEASURED_TFLOPS, MEASURED_TBS = CEILINGS["matmul_bf16_tflops"], CEILINGS["copy_tb_per_s"]   # measured on one H200
ridge = PEAK_TFLOPS / PEAK_TBS
print(f"per head and step: {flops_per_head:,} FLOPs, {bytes_per_head:,} bytes -> {intensity:.3f} FLOP/byte")
print(f"H200 ridge point (spec): {PEAK_TFLOPS:g} TFLOP/s / {PEAK_TBS:g} TB/s = {ridge:.0f} FLOP/byte")
print(f"decode sits {ridge / intensity:.0f}x below the ridge: memory sets its speed")
glue("ch11_decode_intensity", f"{intensity:.3f}", display=False)
glue("ch11_ridge", f"{ridge:.0f}", display=False)
glue("ch11_decode_below_ridge", f"{ridge / intensity:.0f}", display=False)

# %% [markdown]
# A kernel whose arithmetic intensity is {glue:text}`ch11_decode_intensity` FLOP/byte, against a ridge point of
# {glue:text}`ch11_ridge` FLOP/byte, is limited by memory. (The step does float32 elementwise work, not tensor-core
# products, so its real compute roof is lower than the bf16 tensor-core peak behind that ridge; the ridge of that
# lower roof is still far to the right of this kernel.) Its best possible time is
# the bytes divided by the bandwidth, and the measure of the kernel is how close it gets to that. The stored H200
# benchmark (read below, with its software versions) timed the fused step on a `[B, 16, 128, 128]` float32 state:

# %%
print(f"benchmark: {META['device'].split(' (')[0]}, torch {META['versions']['torch']}, "
      f"triton {META['versions']['triton']}, fla {META['versions']['fla']}\ntiming: {META['timing']}")
print(f"{'B':>4} {'state MB':>9} {'k3lite ms':>10} {'TB/s':>6} {f'of {PEAK_TBS:g}':>7} {'of copy':>8} "
      f"{'fla ms':>8} {'PyTorch ms':>11}")
for row in BENCH["decode"]:
    tbs = row["state_bytes_moved"] / (row["k3lite_default_ms"] * 1e-3) / 1e12
    print(f"{row['B']:>4} {row['state_bytes_moved'] / 1e6:>9.0f} {row['k3lite_default_ms']:>10.4f} {tbs:>6.2f} "
          f"{tbs / PEAK_TBS:>7.0%} {tbs / MEASURED_TBS:>8.0%} {row['fla_ms']:>8.4f} {row['k3lite_torch_ms']:>11.3f}")
small_b, large_b = BENCH["decode"][0], BENCH["decode"][-1]
for name, value in (("tbs_large", f"{large_b['tb_per_s']:.1f}"), ("tbs_small", f"{small_b['tb_per_s']:.1f}"),
                    ("b_large", large_b["B"]), ("b_small", small_b["B"]), ("copy_tbs", f"{MEASURED_TBS:.2f}"),
                    ("vs_torch", f"{small_b['k3lite_torch_ms'] / small_b['k3lite_default_ms']:.0f}")):
    glue(f"ch11_decode_{name}", str(value), display=False)
expect(f"B={large_b['B']}: the fused step reaches > 85 % of the measured copy bandwidth",
       large_b["tb_per_s"] > 0.85 * MEASURED_TBS)

# %% [markdown]
# At B = {glue:text}`ch11_decode_b_large` the fused step moves state at {glue:text}`ch11_decode_tbs_large` TB/s, most
# of what a plain device-to-device copy reaches on an H200 ({glue:text}`ch11_decode_copy_tbs` TB/s): there is
# little left to win inside the kernel. At B = {glue:text}`ch11_decode_b_small` the state is a quarter of the size,
# fixed costs such as the launch weigh more, and the rate drops to {glue:text}`ch11_decode_tbs_small` TB/s. The
# PyTorch step, which passes over the state once per operation, is {glue:text}`ch11_decode_vs_torch`× slower at B =
# {glue:text}`ch11_decode_b_small`. Decoding much faster takes moving fewer bytes: a bf16 state, or several tokens per
# state pass (speculative decoding), both outside this kernel.

# %% tags=["plumbing"]
def roofline(ax, points, title):
    x = torch.logspace(-2, 4, 200)
    for peak, bw, style, label in ((PEAK_TFLOPS, PEAK_TBS, "-", f"H200 spec ({PEAK_TFLOPS:.0f} TFLOP/s, {PEAK_TBS:g} TB/s)"),
                                   (MEASURED_TFLOPS, MEASURED_TBS, "--",
                                    f"measured ({MEASURED_TFLOPS:.0f} TFLOP/s, {MEASURED_TBS:.2f} TB/s)")):
        ax.plot(x, torch.minimum(torch.full_like(x, peak), bw * x), style, color=viz.PALETTE["black"], lw=1.2,
                label=label)
    for (name, ai, tflops), color in zip(points, viz.PALETTE.values()):
        ax.plot([ai], [tflops], "o", color=color, ms=7, label=name.lstrip("_"))   # '_x' labels are hidden
    ax.axvline(ridge, ls=":", color=viz.PALETTE["black"], lw=1)
    ax.text(ridge * 1.15, 2.0, f"ridge point\n{ridge:.0f} FLOP/byte", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left")


decode_points = [(f"fused decode, B={row['B']}", intensity,
                  7 * row["B"] * row["H"] * row["K"] * row["V"] / (row["k3lite_default_ms"] * 1e-3) / 1e12)
                 for row in BENCH["decode"]]
fig, ax = plt.subplots(figsize=(7, 4.5))
roofline(ax, decode_points, "Decode on the roofline (H200)")
plt.show()

# %% [markdown]
# Both points sit on the sloped part of the roof, far to the left of the ridge: there a kernel's speed is set by
# how many bytes it moves, and the question is only how close it comes to the bandwidth line.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. The fused SiTU kernel
#
# Kimi K3's gated MLP activation (chapter 08) is elementwise:
# $h = \beta_1 \tanh(x/\beta_1)\,\sigma(x) \cdot \beta_2 \tanh(u/\beta_2)$ for the gate $x$ and the up projection $u$.
# Eager PyTorch runs each operation — divide, tanh, multiply, sigmoid, … — as its own kernel, and each reads its
# inputs from memory and writes its result back. An elementwise function with cheap arithmetic has almost no work
# per byte, so its time is its memory traffic, and fusion is the whole game (the kernel keeps the arithmetic cheap
# in bf16 with the approximate `tanh` and reciprocal): the fused kernel loads $x$ and $u$ once, keeps every
# intermediate in registers, and stores $h$ once. (The `@cached_launch` line changes nothing the kernel computes;
# section 5, lesson d, says what it saves.)

# %%
show(situ._situ_glu_fwd)

# %% [markdown]
# One program per `BLOCK` elements of the flattened tensors, one mask for the tail: the model of section 1 in one
# dimension. (The helpers `_tanh` and `_sigmoid` use exact formulas under the interpreter and for float32, and on a
# GPU in bf16 the special-function unit's approximate `tanh`.) The backward is fused the same way. Autograd would
# store the intermediates of the forward; the fused backward stores none: it reloads $x$, $u$ and the incoming
# gradient and *recomputes* $\tanh$ and $\sigma$ — arithmetic is cheaper than a round trip to memory.

# %%
show(situ._situ_glu_bwd)

# %% [markdown]
# Checked against the eager reference, values and gradients, at a size that is not a multiple of the block:

# %%
gen = torch.Generator().manual_seed(0)
gate = (6 * torch.randn(3, 1001, generator=gen)).to(DEVICE).requires_grad_()
up = (30 * torch.randn(3, 1001, generator=gen)).to(DEVICE).requires_grad_()
dh = torch.randn(3, 1001, generator=gen).to(DEVICE)
h_fused, h_eager = (situ_ops.situ_glu(gate, up, backend=backend) for backend in ("triton", "torch"))
grads_fused, grads_eager = (torch.autograd.grad(h, (gate, up), dh) for h in (h_fused, h_eager))
expect("fused SiTU forward equals the eager one (max |diff| < 1e-4)", (h_fused - h_eager).abs().max().item() < 1e-4)
expect("fused SiTU gradients equal autograd's (max |diff| < 1e-4)",
       max((a - b).abs().max().item() for a, b in zip(grads_fused, grads_eager)) < 1e-4)

# %% [markdown]
# **Bytes saved, counted.** A dispatch mode sees every PyTorch operation the eager version runs, with its inputs and
# outputs. Charging each operation one read of its tensor inputs and one write of its outputs (views, which move
# nothing, are skipped) gives the eager traffic; the fused kernels move 3 tensors forward (read $x, u$, write $h$) and
# 5 backward (read $x, u, \partial h$, write $\partial x, \partial u$).

# %%
class MemoryTraffic(TorchDispatchMode):
    """Bytes each ATen operation reads (tensor inputs) and writes (outputs); views are skipped."""

    def __init__(self):
        super().__init__()
        self.ops, self.bytes = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out                                    # a view of the same memory: nothing moved
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.ops += 1
        self.bytes += sum(t.numel() * t.element_size() for t in inputs + outputs)
        return out


n_elem = 8192 * 3072                                       # the benchmark's shape (counted on small tensors)
x_small, u_small = torch.randn(64, 48, requires_grad=True), torch.randn(64, 48, requires_grad=True)
tensor_bytes = x_small.numel() * x_small.element_size()
with MemoryTraffic() as fwd_traffic:
    h_small = situ_ops.situ_glu(x_small, u_small, backend="torch")
with MemoryTraffic() as bwd_traffic:
    torch.autograd.grad(h_small, (x_small, u_small), torch.ones_like(h_small))
eager_fwd, eager_bwd = fwd_traffic.bytes / tensor_bytes, bwd_traffic.bytes / tensor_bytes
print(f"eager forward:  {fwd_traffic.ops} operations, {eager_fwd:.0f} tensor-sized reads+writes (fused: 3)")
print(f"eager backward: {bwd_traffic.ops} operations, {eager_bwd:.0f} tensor-sized reads+writes (fused: 5)")
print(f"at 8192 x 3072 in bf16: eager {eager_fwd * n_elem * 2 / 1e6:.0f} MB forward, "
      f"fused {3 * n_elem * 2 / 1e6:.0f} MB")
for name, value in (("eager_fwd", f"{eager_fwd:.0f}"), ("eager_bwd", f"{eager_bwd:.0f}"),
                    ("saving_fwd", f"{eager_fwd / 3:.1f}")):
    glue(f"ch11_situ_{name}", value, display=False)

# %% [markdown]
# The eager forward moves {glue:text}`ch11_situ_eager_fwd` tensors' worth of bytes where the fused one moves 3, a
# factor {glue:text}`ch11_situ_saving_fwd`; the eager backward {glue:text}`ch11_situ_eager_bwd` against 5. On the H200
# (GPU time of the kernels only, from the stored benchmark):

# %%
s = BENCH["situ"]
print(f"shape {s['shape']}, {s['dtype']}")
print(f"forward:         eager {s['situ_eager_fwd_gpu_ms']:.3f} ms, fused {s['situ_fused_fwd_gpu_ms']:.3f} ms "
      f"-> {s['eager_over_fused_fwd_gpu']:.1f}x")
print(f"forward+backward: eager {s['situ_eager_fwd+bwd_gpu_ms']:.3f} ms, fused {s['situ_fused_fwd+bwd_gpu_ms']:.3f} ms "
      f"-> {s['eager_over_fused_fwd+bwd_gpu']:.1f}x")
print(f"fused SiTU vs fused SiLU-and-mul (forward): {s['fused_over_silu_mul_fwd_gpu']:.2f}x the time")
glue("ch11_situ_speedup_fwd", f"{s['eager_over_fused_fwd_gpu']:.1f}", display=False)
glue("ch11_situ_vs_silu", f"{s['fused_over_silu_mul_fwd_gpu']:.2f}", display=False)
expect("the measured forward speed-up is within 25 % of the counted ratio of bytes",
       abs(s["eager_over_fused_fwd_gpu"] / (eager_fwd / 3) - 1) < 0.25)

# %% [markdown]
# The measured speed-up, {glue:text}`ch11_situ_speedup_fwd`× forward, is about the ratio of bytes: fusion did what the
# count says it should. And with the traffic gone, SiTU's extra `tanh`s cost next to nothing: the fused SiTU takes
# {glue:text}`ch11_situ_vs_silu`× the time of a fused SiLU-and-mul, the standard activation it replaces.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The chunked pipeline
#
# Training and prefill process whole sequences. Chapter 04 derived the chunked form: split the sequence into chunks of
# $C = 64$ tokens; inside a chunk, everything is matrix products (parallel); across chunks, only the state is carried
# (sequential):
#
# ![Chunking: parallel inside a chunk, a state across chunks](../figures/diagram_chunk_tiling.svg)
#
# `k3lite.kernels.chunk_fwd` runs it as six kernels. The module's docstring is the map, and the figure after it shows
# which stages take every chunk at once and which one walks along the sequence:

# %%
print(chunk_fwd.__doc__.split("Numerics")[0].strip())

# %% tags=["plumbing"]
blue, orange, green, red, sky = (viz.PALETTE[c] for c in ("blue", "orange", "green", "red", "sky"))
stages = [("1. gate sums", 1), ("2-3. intra-chunk + solve", 1), ("4. WY factors", 1), ("5. state pass", 4),
          ("6. output", 1)]
fig, ax, start = *plt.subplots(figsize=(8, 3.2)), 0
for row, (_, width) in enumerate(stages):
    for c in range(4):
        if width == 1:                                    # all chunks at once: a program per chunk (and head)
            ax.barh(row + 0.2 * c - 0.3, 1, left=start, height=0.17, color=blue, alpha=0.6)
        else:                                             # one chunk after another
            ax.barh(row, 1, left=start + c, height=0.6, color=red, alpha=0.6, ec=viz.PALETTE["black"])
            ax.text(start + c + 0.5, row, f"chunk {c}", ha="center", va="center", fontsize=8)
    start += width
ax.set_yticks(range(len(stages)), [name for name, _ in stages])
ax.set(ylim=(len(stages) - 0.5, -0.5), xlabel="time, in units of one chunk's work (schematic, 4 chunks)")
ax.set_title("The chunked KDA forward: every stage takes all chunks at once, except the state pass", fontsize=9)
plt.show()

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Stage by stage, in the kernels' own lines
#
# **1. Gate cumsum.** Each program owns one chunk of one head (for KDA, one block of its key channels; Gated
# DeltaNet's one gate per head is a single channel) and writes $G_r = \sum_{s \le r} g_s$ inside the chunk, as two
# float32 tensors: the sum rounded, and what the rounding dropped (section 5, lessons a and b, says why). It takes the
# chunk `CUMSUM_ROWS` rows at a time: one tile load, a scan down the tile of (sum, remainder) pairs joined by a
# compensated addition (`_two_sum`), then the pair carried from the tiles before it:

# %%
show(chunk_fwd._chunk_cumsum, "for i_s in tl.static_range", "tl.store(p_lo, lo")

# %% [markdown]
# **2–3. Intra-chunk scores and the triangular solve.** For KDA the decay between tokens $r$ and $i$ is a different
# number per key channel, $e^{G_{r,d} - G_{i,d}}$, so $QK^\top$ cannot be one plain product. Inside the 16-token
# diagonal blocks, `_diagonal_blocks` takes one product per block through an *anchor* row in the block's middle, and
# falls back to walking the rows, with a sum of gates of one sign, where the gates are too strong for that (section 5,
# lesson c). Below them, `_offdiagonal_solve` factors the decay through an anchor row before each block, so each block
# becomes a `tl.dot`, then inverts $(I + A)$ block by block:

# %%
show(chunk_fwd._offdiagonal_pair)

# %%
show(chunk_fwd._invert_diag_block)

# %% [markdown]
# A strictly lower triangular $16 \times 16$ block $L$ is nilpotent ($L^{16} = 0$), so
# $(I + L)^{-1} = (I - L)(I + L^2)(I + L^4)(I + L^8)$: six small block products (on the tensor cores, in TF32, when
# the inputs are bf16) instead of a sixteen-step
# substitution loop — the same trick of turning a sequential algorithm into products.
#
# **4. WY factors**: $W = A_i\,\mathrm{Diag}(\beta)(e^{G} \odot K)$ and $U = A_i\,\mathrm{Diag}(\beta) V$, one
# `tl.dot` per key block (for $W$, below) or value block (for $U$, in `_wy_values`):

# %%
show(chunk_fwd._wy_chunk, "b_w = tl.dot", "tl.store(p_w")

# %% [markdown]
# **5. The state pass** is the only sequential stage. One program owns a `[K, BV]` block of one head's state and walks
# through the chunks, storing the state each chunk starts from (`h`) for the output stage and the backward. Each
# token's contribution must decay from that token to the chunk's end, $e^{G_C - G_r}$. With a gate per key channel
# (KDA) that factor differs per channel, so stage 4 writes the keys already decayed ($K_{dec}$). With one gate per
# head the factor is one number per token, so $K_{dec}^\top V' = K^\top (e^{G_C - G} \odot V')$: the pass scales the
# rows of $V'$ instead and needs no second copy of the keys (the `GATE_SCALAR` lines).

# %%
show(chunk_fwd._state_pass, "for i_t in range(0, NT)", "b_s += tl.dot")

# %% [markdown]
# Its parallelism is only $B \cdot H \cdot V / BV$ programs, however long the sequence, which is why the launcher
# narrows the value block when $B \cdot H$ is small (more programs for the GPU's multiprocessors). **6. The output**
# is parallel again, one program per value block, chunk and head:
# $O = \text{scale}\,(e^{G} \odot Q)\,h_c + A_{qk} V'$:

# %%
show(chunk_fwd._chunk_output, "for i_k in range", "acc += tl.dot(b_a")

# %% [markdown]
# The whole pipeline, through the interpreter, against the token-by-token recurrence of `k3lite.ops` — at 70 tokens,
# so the second chunk is 6 tokens long and every mask along the sequence is used:

# %%
gen = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, 70, 1, 16, generator=gen) for _ in range(3))          # B, T, H, K (V = K)
g, beta = -0.5 * torch.rand(1, 70, 1, 16, generator=gen), torch.rand(1, 70, 1, generator=gen)
q, k, v, g, beta = (x.to(DEVICE) for x in (q, torch.nn.functional.normalize(k, dim=-1), v, g, beta))
for name, op, gate_ in (("kda", kda, g), ("gated_delta_rule", gated_delta_rule, g[..., 0])):
    o_kernel, s_kernel = kernels.chunked(name, q, k, v, gate_, beta)
    o_rec, s_rec = op.recurrent(q, k, v, gate_, beta)
    worst = max((o_kernel - o_rec).abs().max().item(), (s_kernel - s_rec).abs().max().item())
    expect(f"{name}: Triton pipeline equals the recurrence, max |diff| < 1e-5", worst < 1e-5)

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Where the time goes on an H100
#
# The benchmark's profile section (`python -m benchmarks.bench --sections profile`) timed the KDA forward of the
# pipeline listed above at `B = 2, T = 8192, H = 16, K = V = 128` in bf16 on one H100, GPU time per kernel
# (`benchmarks/results/profile_h100.json`, which records the commands and versions it ran with):

# %%
PROFILE = json.loads((viz.BENCH_RESULTS_DIR / "profile_h100.json").read_text())
print(f"{PROFILE['meta']['device']}, torch {PROFILE['meta']['versions']['torch']}, "
      f"triton {PROFILE['meta']['versions']['triton']}")


def ms_by_kernel(rows):
    """{kernel: ms per call}, k3lite's Triton kernels by name and PyTorch's own small kernels (checks, fills) summed."""
    ms = {row["name"]: row["ms_per_call"] for row in rows if row["name"].startswith("_")}
    return {**ms, "PyTorch's own kernels": sum(row["ms_per_call"] for row in rows if not row["name"].startswith("_"))}


fwd_ms = ms_by_kernel(PROFILE["kda_profile_2x8192x16"]["fwd"])
total_fwd = sum(fwd_ms.values())
for name, ms in fwd_ms.items():
    print(f"{name:<22} {ms:6.3f} ms  {ms / total_fwd:5.1%}")
print(f"{'sum':<22} {total_fwd:6.3f} ms")
glue("ch11_state_share", f"{fwd_ms['_state_pass'] / total_fwd:.0%}", display=False)
glue("ch11_intra_share", f"{(fwd_ms['_diagonal_blocks'] + fwd_ms['_offdiagonal_solve']) / total_fwd:.0%}",
     display=False)
both = ms_by_kernel(PROFILE["kda_profile_2x8192x16"]["fwd+bwd"])
print(f"forward + backward: {sum(both.values()):.3f} ms; its largest kernel {max(both, key=both.get)}, "
      f"{max(both.values()) / sum(both.values()):.0%}")
glue("ch11_bwd_intra_share", f"{both['_bwd_intra'] / sum(both.values()):.0%}", display=False)
glue("ch11_bwd_kernels", str(len([name for name in both if name.startswith("_") and name not in fwd_ms])),
     display=False)
expect("the backward's intra-chunk kernel is the largest of forward plus backward",
       max(both, key=both.get) == "_bwd_intra")

# %% [markdown]
# The sequential state pass is {glue:text}`ch11_state_share` of the forward; the intra-chunk stage of KDA (diagonal
# blocks plus the off-diagonal blocks and the solve) is {glue:text}`ch11_intra_share`, the price of the per-channel
# decay, which Gated DeltaNet's single product per chunk does not pay. **The backward**
# (`k3lite.kernels.chunk_bwd_triton`) launches {glue:text}`ch11_bwd_kernels` kernels of its own, and the forward's
# `_wy_factors` once more to recompute $W$ and $K_{dec}$ instead of storing them: a reverse state pass, sequential
# again, and chunk-parallel gradients. There too the per-channel intra-chunk work, `_bwd_intra`, is the largest kernel
# ({glue:text}`ch11_bwd_intra_share` of forward plus backward, in the last line above).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. Against the reference library, and five engineering lessons
#
# The reference implementation of these layers, flash-linear-attention (fla; KDA in `fla/ops/kda/chunk.py`), runs the
# same chunked algorithm in Triton. The benchmark times both in one process on the same inputs; the kernels as listed
# in this chapter were measured on an H100 (`benchmarks/results/bench_h100_latest.json`). The table gives k3lite's
# time through its public API over fla's, to one decimal: below 1, k3lite is faster; above 1, slower.

# %%
H100 = json.loads((viz.BENCH_RESULTS_DIR / "bench_h100_latest.json").read_text())
H100_META = H100["runs"]["fwd"]["meta"]
h100_rows = [r for run in ("fwd", "fwd_bwd", "fwd_bwd_long") for r in H100["runs"][run]["chunked"]]
shapes = sorted({(r["B"], r["T"]) for r in h100_rows}, key=lambda shape: shape[1])
ratios = {(r["kind"], r["mode"], r["B"], r["T"]): r["ratio_ops_vs_fla"] for r in h100_rows}
print(f"{H100_META['device']}, triton {H100_META['versions']['triton']}, fla {H100_META['versions']['fla']}, bf16, "
      f"H = 16, D = 128\n{'ops API / fla':<26}" + "".join(f"{f'B={B} T={T}':>14}" for B, T in shapes))
for kind, mode in itertools.product(("kda", "gated_delta_rule", "delta_rule"), ("fwd", "fwd+bwd")):
    print(f"{kind + ' ' + mode:<26}" + "".join(f"{ratios[kind, mode, B, T]:>14.1f}" for B, T in shapes))
glue("ch11_fla_range", f"{min(ratios.values()):.1f}–{max(ratios.values()):.1f}", display=False)
kda_ratios = [ratio for (kind, *_), ratio in ratios.items() if kind == "kda"]
slowest_backward = max(ratio for (kind, mode, *_), ratio in ratios.items() if kind != "kda" and mode == "fwd+bwd")
glue("ch11_fla_kda", f"{min(kda_ratios):.2f}–{max(kda_ratios):.2f}", display=False)
glue("ch11_fla_slowest_backward", f"{slowest_backward:.2f}", display=False)
expect("every mixer, shape and pass: within a factor of 1.5 of fla's time either way",
       all(1 / 1.5 < ratio < 1.5 for ratio in ratios.values()))

# %% [markdown]
# Every row lies within {glue:text}`ch11_fla_range`× fla's time: the same algorithm, written twice, costs about the
# same. On this card KDA, the layer this course builds, is the faster of the two at every shape
# ({glue:text}`ch11_fla_kda`×); the other two mixers range from parity to {glue:text}`ch11_fla_slowest_backward`×,
# slowest with the backward included. Such margins move with the card and the library versions; `benchmarks/`
# keeps the table of each card. What carries over to your own kernels is how
# they reach the reference's time, and where they can afford more care than it takes.
# Five pieces of engineering are worth learning from, and each explains lines you met in sections 2 to 4. Lessons a
# and b are about accuracy and what it costs, c and e about kernel time, d about the host's time per call. The
# ratios above mix all of them, so below each is taken on its own: measured, or for b bounded by a count.
#
# ### a. Exact gate sums
#
# Every decay in the pipeline is $e^{G_r - G_c}$, the difference of two running sums of log-gates. A float32 number
# carries 24 significant bits (IEEE 754), relative to its own size. After one gate of $-10^4$ (a token that says
# "forget everything") the running sum sits where neighbouring float32 numbers are {glue:text}`ch11_spike_step` apart,
# and each gentle gate after it, $-0.001$, is rounded to a whole step: the decay between two later tokens, which
# should not depend on the spike at all, comes out wrong by up to {glue:text}`ch11_spike_diff_error` (relative). fla
# sums its gates in one float32 tensor (`tl.cumsum` in `chunk_local_cumsum_vector_kernel`, `fla/ops/utils/cumsum.py`).
#
# Float64 would keep the digits, but it doubles every register and every exchange between threads in the scan, and
# GPUs run it at half of float32's rate or less (NVIDIA's H100 datasheet, nvidia.com/en-us/data-center/h100). There
# is a float32 way: the rounding error of a sum of two float32 numbers is itself a float32 number, and a few more
# float32 additions recover it exactly (TwoSum: Knuth, *The Art of Computer Programming*, vol. 2, §4.2.2). Carried
# as a second part, it turns the running sum into a pair `(hi, lo)` with about twice float32's bits. Stage 1 scans
# each tile with it (`tl.associative_scan`, `_two_sum` as the combine function) and stores the parts as $G$ and
# $G_{lo}$; the later stages take every span part by part, $(G_r - G_c) + (G_{lo,r} - G_{lo,c})$ (`_span`). The
# kernel's combine function:

# %%
show(chunk_fwd._two_sum)

# %%
# Only + and -: the kernel's own function runs on PyTorch scalars too. All in float32, with a spike at token 5.
two_sum = chunk_fwd._two_sum.fn


def compensated_cumsum(g):
    """The chunk's running sum of float32 gates as float32 pairs, one gate at a time (floored at -1024)."""
    pairs = itertools.accumulate(((x, torch.zeros(())) for x in g.float().clamp_min(-1024.0)),
                                 lambda a, b: two_sum(*a, *b))
    return tuple(map(torch.stack, zip(*pairs)))


spike_chunk = torch.full((64,), -1e-3).index_fill(0, torch.tensor([5]), -1e4)
one_sum = torch.stack(list(itertools.accumulate(spike_chunk.unbind())))     # one float32 number, one add per gate
decays = {"one float32 sum": ch11.decays_from_parts(one_sum, torch.zeros_like(one_sum)),
          "two float32 parts (TwoSum)": ch11.decays_from_parts(*compensated_cumsum(spike_chunk))}
exact_decay, after = ch11.exact_decays(spike_chunk), torch.arange(6, 64)    # float64; the tokens after the spike
distance = after[:, None] - after[None, :]
worst = {label: [((d - exact_decay).abs() / exact_decay)[after[:, None], after[None, :]][distance == n].max().item()
                 for n in range(1, 58)] for label, d in decays.items()}
glue("ch11_spike_step", f"{(one_sum[20] - torch.nextafter(one_sum[20], torch.zeros(()))).abs().item():.0e}",
     display=False)
for tag, errors in zip(("diff", "pair"), worst.values()):
    glue(f"ch11_spike_{tag}_error", f"{max(errors):.0e}", display=False)
expect("one float32 sum: decays after the spike off by more than 1e-4", max(worst["one float32 sum"]) > 1e-4)
expect("two float32 parts: every decay after the spike within 1e-6", max(worst["two float32 parts (TwoSum)"]) < 1e-6)
for spike in ch11.SPIKES:     # the package's stage 1, under the interpreter, on the exercises' chunks
    hi, lo = chunk_fwd.gate_sums(ch11.spike_gates(spike)[None, :, None, None].expand(1, 64, 1, 16).contiguous(), "kda")
    error = (ch11.decays_from_parts(hi[0, :, 0, 0], lo[0, :, 0, 0]) - ch11.exact_decays(ch11.spike_gates(spike))).abs()
    expect(f"stage 1 with a gate of {spike:.0e}: every decay within 1e-6 of float64", error.max().item() < 1e-6)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 3.8))
for (label, errors), color in zip(worst.items(), (red, blue)):
    ax.semilogy(range(1, 58), [max(e, 1e-9) for e in errors], color=color, label=label)
ax.set(xlabel="tokens between the two ends of a span, both after the spike",
       ylabel="largest relative error of the decay", title="Decays after a gate of -1e4 (0 drawn at 1e-9)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The single sum loses more with every token; the pair stays within {glue:text}`ch11_spike_pair_error` (relative).
# The package's stage 1, run under the interpreter with a spike of $-10^4$, $-10^6$ or $-\infty$, keeps every decay
# within $10^{-6}$ of float64 (absolute; gates are floored at $-1024$ first, so $-\infty - (-\infty)$ never
# appears). The price is a few float32 additions per gate and a second tensor.
#
# ### b. The second tensor, written only where it counts
#
# $G_{lo}$ matters only where $|G|$ is large. Without it a span is the difference of two float32 roundings, off by at
# most one float32 step of the larger $|G|$. Below $|G| =$ {glue:text}`ch11_lo_from` a step is at most
# {glue:text}`ch11_lo_step`, so the decay moves by at most {glue:text}`ch11_lo_bound` (relative),
# {glue:text}`ch11_lo_margin` times less than the bf16 rounding of the output it feeds. So for KDA with bf16 or fp16
# inputs stage 1 writes $G_{lo}$ only where $|G| \ge$ {glue:text}`ch11_lo_from` (`chunk_fwd.gate_lo_from`; float32
# inputs keep it everywhere). With the benchmark's gates, $-5\,\sigma(x - 2)$ per step, that is
# {glue:text}`ch11_lo_share_bench` of the sums; gates uniform in $[-16, 0]$ reach it in
# {glue:text}`ch11_lo_share_strong`, and a spike always does. The later stages that read $G$ should not pay for code
# that handles $G_{lo}$ either: gates are $\le 0$, so a chunk's last row of $G$ holds its largest $|G|$ and tells
# whether the chunk needs $G_{lo}$ at all (`_chunk_has_lo`). Those stages are compiled twice, with `USE_LO` a
# compile-time constant, and chunks without $G_{lo}$ go to the version in which its load (`_lo_tile`) compiles to a
# constant zero, with no memory access and no registers behind it.

# %%
LO_FROM = chunk_fwd.LO_FROM_HALF
step_below = (torch.nextafter(torch.tensor(-LO_FROM), torch.tensor(0.0)) + LO_FROM).abs().item()
decay_bound, bf16_rounding = math.expm1(step_below), torch.finfo(torch.bfloat16).eps / 2
gen = torch.Generator().manual_seed(0)
gate_sets = {"bench": -5 * torch.sigmoid(torch.randn(64, 4096, generator=gen, dtype=torch.float64) - 2),
             "strong": -16 * torch.rand(64, 4096, generator=gen, dtype=torch.float64)}
share = {label: (gates.cumsum(0).abs() >= LO_FROM).double().mean().item() for label, gates in gate_sets.items()}
for name, text in (("lo_from", f"{LO_FROM:.0f}"), ("lo_step", f"2^{math.log2(step_below):.0f}"),
                   ("lo_bound", f"{decay_bound:.1e}"), ("lo_margin", f"{bf16_rounding / decay_bound:.0f}"),
                   ("lo_share_bench", f"{share['bench']:.0%}"), ("lo_share_strong", f"{share['strong']:.0%}")):
    glue(f"ch11_{name}", text, display=False)
expect("below the threshold, dropping G_lo moves a decay at least 100x less than bf16 rounds",
       bf16_rounding / decay_bound >= 100)
expect("the benchmark's gates never reach the threshold within a chunk", share["bench"] == 0)
strong = -16 * torch.rand(1, 64, 1, 16, generator=gen)             # stage 1 under the interpreter, with the rule
(hi_all, lo_all), (hi_rule, lo_rule) = (chunk_fwd.gate_sums(strong, "kda", lo_from=x) for x in (0.0, LO_FROM))
written = hi_rule.abs() >= LO_FROM
expect("with the rule, stage 1 writes the same G, and the same G_lo wherever |G| reaches the threshold",
       torch.equal(hi_rule, hi_all) and torch.equal(lo_rule[written], lo_all[written]))

# %% tags=["plumbing"]
sizes = torch.logspace(0, 4, 400)
spacing = (torch.nextafter(-sizes, torch.tensor(-math.inf)) + sizes).abs()      # one float32 step below -|G|
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.loglog(sizes, torch.expm1(spacing), color=blue, label="decay error without $G_{lo}$ (one float32 step of |G|)")
ax.axhline(bf16_rounding, color=red, ls="--", lw=1.2,
           label=f"bf16 rounding of the output (2^{math.log2(bf16_rounding):.0f})")
ax.axvline(LO_FROM, color=viz.PALETTE["black"], ls=":", lw=1.2)
ax.text(LO_FROM * 1.15, 1e-6, f"stage 1 writes $G_{{lo}}$\nfrom |G| = {LO_FROM:.0f}", fontsize=8)
ax.set(xlabel="|G|, the running sum of log-gates at a span's far end (nats)",
       ylabel="largest relative error of the decay", title="What dropping the second part costs")
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# ### c. Diagonal blocks through an anchor in the middle
#
# Below the diagonal, each $16 \times 16$ block of a chunk factors its decays through an anchor row just above it, so
# both factors are at most 1 and the block is one `tl.dot` (section 4). On the diagonal there is no such row. Walking
# the rows gives each pair its own decay per channel, one exponential per pair and channel
# ({glue:text}`ch11_walk_exps` per row and channel on average) and no tensor cores. `_diagonal_blocks` takes its
# anchor $a$ *inside* the block, in the middle:
# $A_{rc} = \sum_d (k_{rd}\, e^{G_{rd} - G_{ad}})(k_{cd}\, e^{G_{ad} - G_{cd}})$, two exponentials per row and channel
# and one product on the tensor cores. Each kernel alone on one H200 (`B = 2, T = 8192, H = 16`, bf16; an archived
# measurement): anchored blocks {glue:text}`ch11_anchor_alone` ms, one program per token walking its row
# {glue:text}`ch11_walk_alone` ms.
#
# The price is range. For $r < a$ the row factor is $e^{+x}$, $x$ up to the gates summed over half a block, and for
# $c > a$ so is the column factor: a kept pair's product is still its decay, at most 1, but one factor alone can
# overflow float32. An anchor at the block's start would face the whole block's gates; the middle halves that. And the
# kernel keeps the product only where every $|G_r - G_a|$ of the block is at most `DIAGONAL_SPAN_LIMIT` =
# {glue:text}`ch11_span_limit` (every factor below $e$ to that power, every product the `tl.dot` forms below $e$ to
# twice that), which holds for gates up to about {glue:text}`ch11_span_gate` per step. Beyond it (a spike, $-\infty$,
# strong gates) the block walks its rows (`_diagonal_walk`), with sums of gates of one sign:

# %%
show(chunk_fwd._diagonal_blocks, "widest = tl.maximum", "acc_kk = tl.dot(b_k * up")

# %%
def diagonal_block(gate, anchor, width=64, seed=0):
    """One KDA diagonal block (Akk before beta) formed in float32 through an anchor row, gates in [gate, gate + 0.1]
    per step and channel: its largest error against float64, relative to its largest entry, and its largest |x|."""
    gen = torch.Generator().manual_seed(seed)
    keys = torch.nn.functional.normalize(torch.randn(SUB, width, generator=gen, dtype=torch.float64), dim=-1)
    sums = (gate + 0.1 * torch.rand(SUB, width, generator=gen, dtype=torch.float64)).cumsum(0)
    causal = torch.ones(SUB, SUB, dtype=torch.bool).tril()
    span = torch.where(causal[..., None], sums[:, None, :] - sums[None, :, :], 0.0)
    exact = torch.where(causal, (keys[:, None] * keys[None, :] * span.exp()).sum(-1), 0.0)
    x = (sums - sums[anchor]).float()                                  # G_r - G_a
    block = torch.where(causal, (keys.float() * x.exp()) @ (keys.float() * (-x).exp()).T, 0.0)
    return ((block.double() - exact).abs().max() / exact.abs().max()).item(), x.abs().max().item()


SUB, LIMIT, strengths = chunk_fwd.SUB, chunk_fwd.DIAGONAL_SPAN_LIMIT, [0.5 * n for n in range(1, 29)]
anchors = {"anchor at the block's start": 0, "anchor in its middle (the kernel)": SUB // 2}
blocks = {label: [diagonal_block(-s, a) for s in strengths] for label, a in anchors.items()}
overflow_at = [next(s for s, (err, _) in zip(strengths, runs) if not math.isfinite(err)) for runs in blocks.values()]
isolated = viz.archived_measurement("kda_diagonal_forms")["same_machine_isolated"]["results"]
for name, text in (("walk_exps", f"{sum(range(1, SUB + 1)) / SUB:.1f}"), ("span_gate", f"{LIMIT / (SUB // 2):.2f}"),
                   ("span_limit", f"{LIMIT:.0f}"), ("overflow_start", f"{overflow_at[0]:g}"),
                   ("overflow_middle", f"{overflow_at[1]:g}"), ("anchor_alone", f"{isolated['new']['diag_ms']:.3f}"),
                   ("walk_alone", f"{isolated['old']['diag_ms']:.3f}")):
    glue(f"ch11_{name}", text, display=False)
expect("where its factors stay finite, an anchored block matches float64 to 1e-6 of its largest entry",
       max(err for runs in blocks.values() for err, _ in runs if math.isfinite(err)) < 1e-6)
expect("the middle anchor overflows at gates about twice as strong as the start anchor",
       1.6 < overflow_at[1] / overflow_at[0] < 2.4)
expect("on one H200 the anchored blocks took less time than the row walk, in both timings",
       max(isolated["new"]["diag_ms"], isolated["new2"]["diag_ms"]) < isolated["old"]["diag_ms"])

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 3.8))
for (label, runs), color, fails in zip(blocks.items(), (red, blue), overflow_at):
    ax.plot(strengths, [widest for _, widest in runs], color=color, label=f"largest exponent, {label}")
    ax.plot([fails], [dict(zip(strengths, runs))[fails][1]], "x", color=color, ms=9, mew=2)
F32_MAX_EXP = math.log(torch.finfo(torch.float32).max)
ax.axhline(F32_MAX_EXP, color=viz.PALETTE["black"], ls="--", lw=1.2, label=f"float32 overflows: e^{F32_MAX_EXP:.1f}")
ax.axhline(LIMIT, color=green, ls=":", lw=1.5, label="DIAGONAL_SPAN_LIMIT: above it the kernel walks the rows")
ax.set(xlabel="strength of the log-gates, |g| per token (nats)", ylabel="largest |G_r - G_a| in the block (nats)",
       title="A 16-token diagonal block through one anchor row (x: first inf or NaN)")
ax.legend(fontsize=8, loc="upper left")
plt.show()

# %% [markdown]
# Wherever its factors stay finite the anchored block is as accurate as float32 allows; the failure is abrupt, at
# gates of {glue:text}`ch11_overflow_start` per token with the anchor at the start and
# {glue:text}`ch11_overflow_middle` in the middle. The limit ({glue:text}`ch11_span_gate` per token) keeps the kernel
# below both; the walk covers the rest
# (`tests/test_kernels_cpu.py` checks both paths against the blocks' definition).
#
# ### d. Host cost and the cached launch
#
# The host issues kernels and the GPU runs them asynchronously: while the GPU works, Python prepares the next call. A
# call takes the GPU's time only while the host issues work faster than the GPU finishes it, and a decode step is one
# short kernel. So everything the host adds shows: a value check that waits for the GPU (`.item()`) or launches small
# kernels of its own, and Triton's dispatch (`JITFunction.run` in `triton/runtime/jit.py` binds the arguments, works
# out how they specialise the kernel and looks the compiled kernel up, on every call). Two changes took these costs
# out: the value checks moved into kernels that read the values anyway (`tl.device_assert` in the decode step; a flag
# that stage 1 clears when a gate is not $\le 0$), and `@cached_launch` (`k3lite/kernels/_launch.py`) sends a call
# that looks like an earlier one straight to the compiled kernel's launcher. Kernels alone against the public API,
# with the checks on the host (the benchmark file of section 2) and with both changes
# (`benchmarks/results/bench_h200_latest.json`; host time per call, the median over the processes of each launch
# mode):

# %%
LATEST = json.loads((viz.BENCH_RESULTS_DIR / "bench_h200_latest.json").read_text())["runs"]
old_dec = next(r for r in BENCH["decode"] if r["B"] == 64)
old_fwd, new_fwd = (next(r for r in rows if (r["kind"], r["B"], r["T"], r["mode"]) == ("kda", 2, 8192, "fwd"))
                    for rows in (BENCH["chunked"], LATEST["cached"]["chunked"]))
dec64 = {mode: [next(r for r in p["decode"] if r["B"] == 64) for p in LATEST["decode_processes"]
                if p["meta"]["launches"].startswith(launches)]
         for mode, launches in (("cached", "cached"), ("dispatch", "through Triton's dispatch"))}
keys = ("k3lite_default_ms", "ops_step_triton_ms", "k3lite_ops_triton_host_ms")
old, new = "checks on the host", "checks in the kernels, {} launch"
host_rows = [(old, "decode B=64", old_dec[keys[0]], old_dec[keys[1]], None),
             (old, "KDA forward (2, 8192)", old_fwd["k3lite_triton_ms"], old_fwd["k3lite_ops_triton_ms"], None),
             *((new.format(mode), "decode B=64", *(statistics.median(r[key] for r in rows) for key in keys))
               for mode, rows in dec64.items()),
             (new.format("cached"), "KDA forward (2, 8192)", new_fwd["k3lite_triton_ms"],
              new_fwd["k3lite_ops_triton_ms"], new_fwd["k3lite_ops_triton_host_ms"])]
print(f"H200, GPU ms of the kernels alone and of the public API; host ms to issue one API call\n{'code':<40}"
      f"{'call':<24}{'kernels ms':>11}{'API ms':>9}{'API / kernels':>15}{'host ms/call':>14}")
for code, call, kernel_ms, api_ms, host_ms in host_rows:
    host = "-" if host_ms is None else f"{host_ms:.3f}"
    print(f"{code:<40}{call:<24}{kernel_ms:>11.3f}{api_ms:>9.3f}{api_ms / kernel_ms:>15.2f}{host:>14}")
(_, _, old_kernel, old_api, _), (*_, old_fwd_kernel, old_fwd_api, _), cached, dispatch, _ = host_rows
for name, value in (("api_before", f"{old_api / old_kernel:.1f}"), ("host_cached", f"{cached[4]:.3f}"),
                    ("api_before_fwd", f"{old_fwd_api / old_fwd_kernel:.2f}"), ("gpu_decode", f"{cached[2]:.3f}"),
                    ("host_dispatch", f"{dispatch[4]:.3f}")):
    glue(f"ch11_{name}", value, display=False)
expect("after both changes the API takes its kernels' time within 1 % on every row",
       all(abs(api / kern - 1) < 0.01 for code, _, kern, api, _ in host_rows[2:]))
expect("decode B=64, host ms per call: the cached launch below the GPU's time, Triton's dispatch above it",
       cached[4] < cached[2] and dispatch[4] > dispatch[2])

# %% [markdown]
# With the checks on the host, `kda.step` took {glue:text}`ch11_api_before`× its kernel's time at `B = 64`, and even
# the long forward call {glue:text}`ch11_api_before_fwd`×; with the checks inside the kernels the API adds about a
# percent at most on the GPU's clock. The host's clock is the other half. Through Triton's dispatch, issuing one decode step took the
# host {glue:text}`ch11_host_dispatch` ms, more than the {glue:text}`ch11_gpu_decode` ms the GPU needs for it, so a
# loop of steps would run at the host's pace; the cached launch issues it in {glue:text}`ch11_host_cached` ms. (The
# benchmark's GPU timings cannot show this: they put a cache flush between calls, which gives the host time to catch
# up, hence the host column.) For a short kernel, count the host's work per call as carefully as the GPU's.
#
# ### e. Fusions that did not pay
#
# Fusing SiTU paid (section 3) because an elementwise kernel is nothing but memory traffic. In the chunked pipeline,
# three fusions that each removed a launch and some traffic were built, checked against the kernels they replaced, and
# timed against them on an H200 (an archived measurement): stage 1 inside the off-diagonal stage; the output inside
# the state pass (without a gradient nothing else needs $h_c$ and $V'$, and the pass holds both at each chunk); and
# stage 1 beside the diagonal blocks in one launch, so that a multiprocessor could overlap programs that wait on loads
# with programs that stream memory. They were timed on an earlier form of the pipeline, in which stage 1 scanned its
# gates in float64 and the diagonal blocks walked their rows (`_diagonal_rows`), the forms lessons a and c replaced.
# Each comparison below is between kernels of that same code, fused and apart: what it says holds for that code,
# and was not measured again on the kernels listed in section 4.

# %%
FUSIONS = viz.archived_measurement("kda_fusions")
in_order, one_launch = FUSIONS["fusions_in_pipeline_order"]["timings"], FUSIONS["one_launch"]["timings"]
FUSION_SHAPES = ((2, 8192), (1, 32768), (8, 2048))
kernel_ms = lambda row, *names: sum(row["kernels"][name] for name in names)  # noqa: E731
fusions = {}  # name -> (B, T) -> (kernels apart ms, fused kernel ms)
for B, T in FUSION_SHAPES:
    shape, apart = f"({B}, {T}, 16)", one_launch[f"({B}, {T}, 16) fwd overlap=False"]
    unfused, fused = in_order[f"kda {shape} fwd fused=False"], in_order[f"kda {shape} fwd fused=True"]
    fusions.setdefault("stage 1 in the off-diagonal stage", {})[B, T] = (
        kernel_ms(apart, "_chunk_cumsum", "_offdiagonal_solve"), kernel_ms(unfused, "_offdiagonal_solve"))
    fusions.setdefault("output in the state pass", {})[B, T] = (
        kernel_ms(unfused, "_state_pass", "_chunk_output"), kernel_ms(fused, "_state_pass"))
    fusions.setdefault("stage 1 beside the diagonal blocks", {})[B, T] = (
        kernel_ms(apart, "_chunk_cumsum", "_diagonal_rows"),
        kernel_ms(one_launch[f"{shape} fwd overlap=True"], "_diagonal_rows_and_gate_sums"))
print("KDA forward, bf16, H = 16, D = 128, H200: GPU ms of the kernels apart -> the fused kernel\n" + " " * 36
      + "".join(f"{f'B={B} T={T}':>20}" for B, T in FUSION_SHAPES))
for name, by_shape in fusions.items():
    print(f"{name:<36}" + "".join(f"{f'{a:.3f} -> {f:.3f}':>20}" for a, f in by_shape.values()))
programs = {B: B * 16 * math.ceil(128 / chunk_fwd.state_block_v(B * 16, 128, chunk_fwd.VALUE_TILE)) for B in (1, 2, 8)}
for tag, shape in (("", (2, 8192)), ("_long", (1, 32768)), ("_short", (8, 2048))):
    glue(f"ch11_f2{tag}", "{:.3f} -> {:.3f}".format(*fusions["output in the state pass"][shape]), display=False)
for name, value in (("state_programs", programs[2]), ("state_programs_short", programs[8]),
                    ("state_programs_b1", programs[1]),
                    ("sm_count", chunk_fwd.SM_COUNT)):
    glue(f"ch11_{name}", str(value), display=False)
expect(f"state-pass programs: {programs[2]} at B=2, fewer than the H200's {chunk_fwd.SM_COUNT} multiprocessors; "
       f"{programs[8]} at B=8, more", programs[2] < chunk_fwd.SM_COUNT < programs[8])
expect("every fusion was slower than the kernels it replaced at B=2 T=8192 and B=1 T=32768",
       all(f > a for by_shape in fusions.values() for s, (a, f) in by_shape.items() if s != (8, 2048)))
expect("the output inside the state pass was faster at B=8 T=2048",
       fusions["output in the state pass"][8, 2048][1] < fusions["output in the state pass"][8, 2048][0])

# %% [markdown]
# None paid at `B = 2, T = 8192` or `B = 1, T = 32768`, the shapes where the state pass leaves the GPU part idle.
# The clearest case is the output inside the state pass. The pass is a chain: chunk
# $c + 1$ cannot start before chunk $c$'s state is done, so its time is the number of chunks times one step's latency,
# and at `B = 2, T = 8192` its {glue:text}`ch11_state_programs` programs, fewer than the {glue:text}`ch11_sm_count`
# multiprocessors, leave part of the GPU idle. The output in each step lengthens every link of the chain
# ({glue:text}`ch11_f2` ms at `B = 2, T = 8192`, {glue:text}`ch11_f2_long` at `B = 1, T = 32768`), while the separate
# output stage, launched after the pass on the same stream, runs every chunk as an independent program that fills
# the whole GPU and finishes quickly. Only with many (sequence, head) programs
# ({glue:text}`ch11_state_programs_short` at `B = 8, T = 2048`) did the fusion gain
# ({glue:text}`ch11_f2_short` ms). Work that is off the critical path belongs off it. The other two lost as well.
# Both carried stage 1's float64 scan into a larger kernel, a cost lesson a describes; a likely reason for both,
# not measured, is that one kernel is compiled for the larger of its two bodies, so each program holds
# more registers, fewer programs fit on a multiprocessor, and fewer loads are in flight to hide memory's latency.
# Saved bytes are an argument; the clock decides.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Exercises
#
# Exercises 1–3 are checked under the interpreter in float32, at shapes where the last block sticks out of the tensor.
# The checkers put every tensor inside a larger buffer, NaN around the inputs and a sentinel around the outputs: a
# load without a mask reads NaN, a store without a mask changes the sentinel, and the checker says which. Exercise 4
# is stage 1's arithmetic, in PyTorch.
#
# ### Exercise 1: the decode-step kernel
#
# Below is the KDA decode kernel with its loads and stores removed: the indices and the masks are given (with plainer
# names than the package's), the arithmetic as a comment. Write the loads of the state tile `S [BK, BV]`, of `q`, `k`,
# `g` `[BK]`, of `v [BV]` and of the scalar `beta`, and the two stores, with the right masks. (Inputs here are float32
# `[B, H, K]`, `[B, H, V]`, `[B, H]`, and the state `[B, H, K, V]`, all contiguous.) The checker launches it with
# `K = 12, V = 20, BK = 16, BV = 8` and compares with `kda.step`.

# %%
@triton.jit
def kda_decode_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                      K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BK)                                  # key channels
    cols = block * BV + tl.arange(0, BV)                     # value columns of this program
    row_ok, col_ok = rows < K, cols < V  # noqa: F841
    state_at = head * K * V + rows[:, None] * V + cols[None, :]  # noqa: F841
    # load S [BK, BV], q, k, g [BK], v [BV] and the scalar beta here; then the update, as in `_decode_step`:
    #   S = S * tl.exp(g)[:, None];  v = beta * (v - tl.sum(S * k[:, None], axis=0));  S = S + k[:, None] * v[None, :]
    #   o = tl.sum(S * (q * scale)[:, None], axis=0);  and store S into s_out_ptr and o into o_ptr
    raise NotImplementedError


# %%
ch11.check_decode_kernel(kda_decode_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def kda_decode_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                      K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BK)                                  # key channels
    cols = block * BV + tl.arange(0, BV)                     # value columns of this program
    row_ok, col_ok = rows < K, cols < V
    state_at = head * K * V + rows[:, None] * V + cols[None, :]
    tile_ok = row_ok[:, None] & col_ok[None, :]              # both masks: K and V need not be powers of two
    S = tl.load(s_ptr + state_at, mask=tile_ok, other=0.0)
    q = tl.load(q_ptr + head * K + rows, mask=row_ok, other=0.0)
    k = tl.load(k_ptr + head * K + rows, mask=row_ok, other=0.0)   # 0 past K: adds nothing to S^T k
    g = tl.load(g_ptr + head * K + rows, mask=row_ok, other=0.0)
    v = tl.load(v_ptr + head * V + cols, mask=col_ok, other=0.0)
    beta = tl.load(beta_ptr + head)                          # one scalar per head
    S = S * tl.exp(g)[:, None]
    v = beta * (v - tl.sum(S * k[:, None], axis=0))
    S = S + k[:, None] * v[None, :]
    o = tl.sum(S * (q * scale)[:, None], axis=0)
    tl.store(s_out_ptr + state_at, S, mask=tile_ok)
    tl.store(o_ptr + head * V + cols, o, mask=col_ok)


ch11.check_decode_kernel(kda_decode_kernel);

# %% [markdown]
# ### Exercise 2: the fused SiTU forward
#
# Write `situ_kernel(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK)`: program `i` computes
# $h = \beta_1 \tanh(x/\beta_1)\,\sigma(x) \cdot \beta_2 \tanh(u/\beta_2)$ for elements
# `i*BLOCK … i*BLOCK + BLOCK - 1` of the flat float32 tensors. `tl` has `tl.exp` but no `tanh` in every version: use
# $\tanh y = 1 - 2/(e^{2y} + 1)$ and $\sigma(x) = 1/(1 + e^{-x})$, both safe at large $|y|$. The checker runs
# `n = 1000` with `BLOCK = 256` and compares with `k3lite.ops.situ.situ_glu`.

# %%
@triton.jit
def situ_kernel(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    raise NotImplementedError


# %%
ch11.check_situ_forward(situ_kernel);


# %% tags=["solution", "hide-input"]
# Solution
@triton.jit
def situ_kernel(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK: tl.constexpr):
    index = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = index < n                                       # the last program is partly past n
    gate = tl.load(gate_ptr + index, mask=inside, other=0.0)
    up = tl.load(up_ptr + index, mask=inside, other=0.0)
    tanh_gate = 1.0 - 2.0 / (tl.exp(2.0 * gate / beta1) + 1.0)
    tanh_up = 1.0 - 2.0 / (tl.exp(2.0 * up / beta2) + 1.0)
    h = beta1 * tanh_gate / (1.0 + tl.exp(-gate)) * beta2 * tanh_up
    tl.store(out_ptr + index, h, mask=inside)


ch11.check_situ_forward(situ_kernel);

# %% [markdown]
# ### Exercise 3: change the tile size, predict what breaks
#
# Here is a copy kernel with its masks taken out (it lives in `k3lite.exercises.ch11`), and the masked one after it:

# %%
from IPython.display import display

display(show(ch11.copy_unmasked), show(ch11.copy_masked))

# %% [markdown]
# Launched with `cdiv(n, block)` programs, it is right when `block` divides `n` — and when you change the block size
# so that it does not, it writes past the end of its output (into whatever lives there: on a GPU another tensor, or an
# illegal-address crash). Write `predict_overrun(n, block)`: how many elements past the end does it write? The checker
# runs the kernel on guarded buffers at several `(n, block)` and counts. (An unmasked *load* with a masked store is
# quieter, but it reads memory it does not own, a crash on a GPU when the block runs past the allocation: masks on
# both, always.)

# %%
def predict_overrun(n, block):
    raise NotImplementedError


# %%
ch11.check_overrun(predict_overrun);


# %% tags=["solution", "hide-input"]
# Solution
def predict_overrun(n, block):
    return triton.cdiv(n, block) * block - n    # lanes of the grid minus elements of the tensor


ch11.check_overrun(predict_overrun);

# %% [markdown]
# ### Exercise 4: gate sums that keep their digits
#
# Stage 1 turns a chunk's log-gates into running sums $G$, and every later stage forms its decays as $e^{G_r - G_c}$.
# Section 5 (lesson a) showed why one float32 running sum is not enough: after a gate of $-10^4$ the sum sits where
# float32 steps are {glue:text}`ch11_spike_step` apart, and the gentle gates after it are rounded away. Write
# `two_part_cumsum(g)` for one chunk of float32 log-gates `g [64]`. First floor every gate at $-1024$, as the kernels
# do; then return float32 tensors `hi, lo` whose sum is the running sum of the floored gates, such that the decays
# formed from them part by part in float32 (`ch11.decays_from_parts`, as the kernels do) come within $10^{-6}$ of
# float64. The checker's chunks hold a gate of $-10^4$, $-10^6$ or $-\infty$ before gentle ones. Summing in float64
# and splitting the result is allowed; doing it in float32 alone, with TwoSum as in section 5, is the stretch goal.

# %%
def two_part_cumsum(g):
    raise NotImplementedError


# %%
ch11.check_gate_sums(two_part_cumsum);


# %% tags=["solution", "hide-input"]
# Solution
def two_part_cumsum(g):
    total = g.double().clamp_min(-1024.0).cumsum(0)   # float64 keeps every gate; the floor keeps -inf finite
    hi = total.float()
    return hi, (total - hi.double()).float()           # lo: what rounding the sum to float32 dropped


ch11.check_gate_sums(two_part_cumsum);
expect("a decay through the floor, exp(-1024), is exactly 0 in float32 and in float64",
       torch.exp(torch.tensor(-1024.0)).item() == 0.0 and math.exp(-1024.0) == 0.0)

# %% [markdown]
# The floor matters as much as the second part: without it a gate of $-\infty$ makes $-\infty - (-\infty)$, a NaN, in
# every span that starts after it. With it, a decay through the gate is $e^{-1024} = 0$ in float32 and float64 alike,
# exactly what $-\infty$ would give. The kernel reaches the same two parts without float64: section 5's
# `compensated_cumsum` passes this checker too (try `ch11.check_gate_sums(compensated_cumsum)`).

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exercise 5 (open question): a sequence too long for one state pass
#
# The state pass walks the chunks in order: at batch 1 and 16 heads, a 32,768-token prompt gives it 512 steps one after
# another, with only {glue:text}`ch11_state_programs_b1` programs working on them ($B \cdot H \cdot V / BV$, with the
# value block $BV$ already narrowed), fewer than the H200's {glue:text}`ch11_sm_count` multiprocessors however long
# the prompt. Propose a way to expose more parallelism
# over the sequence, say what it costs in extra work, memory or communication, and say where it stops paying.

# %% [markdown] tags=["solution"]
# <details>
# <summary>Model answer (for the lecturer)</summary>
#
# Each chunk maps the incoming state affinely: $S_{\text{out}} = M_c\,S_{\text{in}} + N_c$. For DeltaNet, in chapter 04's
# WY form, $M_c = I - K_c^\top W_c$ (a $K \times K$ matrix; the gated rules multiply their decays in) and
# $N_c = K_c^\top U_c$, the state the chunk writes from zero ($K \times V$). Affine maps compose associatively, so:
#
# 1. **Split the sequence into segments** and run each segment's chunks from a zero state in parallel, keeping each
#    segment's composed map $(M, N)$; then combine the segments' maps in order (few of them, cheap), and finally
#    correct each segment's outputs with the true incoming state, $Q\,M_{<t}\,S_{\text{in}}$. Cost: the composed
#    $M$ is $K \times K$ per head and segment, so extra $O(K^3)$ products per combine and extra memory for the maps;
#    a second, light pass over the outputs.
# 2. **A parallel scan** over all chunks (depth $\log_2 512 = 9$ instead of 512): more total work
#    ($K \times K$ matrix products at every level) for less latency; it pays when the GPU is otherwise idle (batch 1,
#    few heads), and stops paying once batch × heads fills the machine, where the sequential pass is already
#    hidden behind enough parallel programs.
# 3. **Across GPUs** (context parallelism): each GPU owns a segment and passes its final state (or composed map) to
#    the next: one $K \times V$ state per head per boundary, tiny next to a KV cache.
#
# A good answer names the associativity that makes it possible, a concrete extra cost, and the regime (small batch,
# few heads, long $T$) where it helps.
#
# </details>

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What we saw
#
# * A Triton kernel is a grid of programs working on blocks; masks make blocks safe at any shape, and the interpreter
#   runs the same kernels on a CPU. The fused decode step and the fused SiTU move each byte once: memory-bound, they
#   are as fast as their traffic, and at a large batch the decode step moved state at close to copy speed on the
#   H200.
# * The chunked KDA forward is six kernels: five take all chunks at once, the state pass walks them in order.
# * Against the reference library, in one process on an H100, the chunked kernels take
#   {glue:text}`ch11_fla_range`× its time. Five lessons of their engineering, each measured on its own: gate sums
#   kept exact in
#   float32 pairs (TwoSum) instead of float64; their second part written, and its code compiled in, only where bf16
#   can see it; diagonal blocks as tensor-core products through an anchor in the middle, with a walk where the factors
#   would leave float32's range; value checks in the kernels and a launch that skips Triton's dispatch.
# * Fewer launches and bytes did not always make a faster kernel: work added to the sequential state pass lengthened
#   its chain. Count to find candidates, and let the clock decide.

# %% [markdown] tags=["reading"]
# ## Check yourself
#
# Answer each question in a sentence or two, then unfold the answers.
#
# 1. A copy kernel with `BLOCK = 16` and no masks is launched with `cdiv(40, 16)` programs on 40 elements. How many
#    elements does it write past the end?
# 2. The decode step does 7 FLOPs per 8 bytes of state. Against the H200's ridge point of
#    {glue:text}`ch11_ridge` FLOP/byte (section 2), what sets its speed?
# 3. Why is the state pass the only sequential stage, and what limits its parallelism?
# 4. Why does inverting $I + L$ for a strictly lower-triangular $16 \times 16$ block take only four factors?
#
# <details>
# <summary>Short answers</summary>
#
# 1. Three programs cover 48 lanes, so it writes 8 elements past the end.
# 2. Memory: at under 1 FLOP/byte it sits {glue:text}`ch11_decode_below_ridge` times below the ridge, so its best time is the bytes
#    moved divided by the bandwidth.
# 3. Chunk $c + 1$ needs the state chunk $c$ ends with; it has only $B \cdot H \cdot V / BV$ programs, however long
#    the sequence.
# 4. $L$ is nilpotent ($L^{16} = 0$), so $(I + L)^{-1} = \sum_k (-L)^k = (I - L)(I + L^2)(I + L^4)(I + L^8)$.
#
# </details>

# %% [markdown] tags=["reading"]
# ## Sources
#
# - Tillet, Kung and Cox (2019), *Triton: An Intermediate Language and Compiler for Tiled Neural Network
#   Computations*, MAPL 2019, [doi:10.1145/3315508.3329973](https://doi.org/10.1145/3315508.3329973) (section 1);
#   the documentation and interpreter: [triton-lang.org](https://triton-lang.org/).
# - *flash-linear-attention* (fla), [github.com/fla-org/flash-linear-attention](https://github.com/fla-org/flash-linear-attention):
#   the reference KDA kernels (`fla/ops/kda/chunk.py`) that section 5 compares with.
# - Yang et al. (2024), *Parallelizing Linear Transformers with the Delta Rule over Sequence Length*,
#   [arXiv:2406.06484](https://arxiv.org/abs/2406.06484) (the chunked WY/UT algorithm); Kimi Team (2025), *Kimi
#   Linear*, [arXiv:2510.26692](https://arxiv.org/abs/2510.26692) (KDA's chunked form).
# - Dao et al. (2022), *FlashAttention*, [arXiv:2205.14135](https://arxiv.org/abs/2205.14135), §2.1 (memory hierarchy,
#   fusion); Williams, Waterman and Patterson (2009), *Roofline*, CACM 52(4),
#   [doi:10.1145/1498765.1498785](https://doi.org/10.1145/1498765.1498785) (section 2).
# - IEEE 754-2019, [doi:10.1109/IEEESTD.2019.8766229](https://doi.org/10.1109/IEEESTD.2019.8766229), and Knuth, *The
#   Art of Computer Programming*, vol. 2 (3rd ed., 1997), §4.2.2, TwoSum
#   ([the book's page](https://www-cs-faculty.stanford.edu/~knuth/taocp.html)) (section 5).
# - NVIDIA, [H200](https://www.nvidia.com/en-us/data-center/h200/) (4.8 TB/s HBM3e, the bf16 tensor-core peak;
#   section 2) and [H100](https://www.nvidia.com/en-us/data-center/h100/) (float64 and float32 rates; section 5).
