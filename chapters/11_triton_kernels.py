# %% [markdown] slideshow={"slide_type": "slide"}
# # 11 · Making it fast: k3lite's Triton kernels
#
# Chapters 01–10 told the architecture story, from GPT-2 to Kimi K3. Every mixer there ran as PyTorch
# operations, and whenever a GPU was present, `k3lite.ops` quietly handed the work to Triton kernels
# (chapter 04 called them, the benchmark timed them). This chapter opens those kernels. It is the
# engineering track that runs alongside the story, so it comes last: it needs chapters 04 (the chunked
# WY/UT form), 06 (KDA's per-channel decay) and 08 (SiTU), and placing it at the end leaves the numbers of
# chapters 07–10 and every link to them as they were.
#
# We go from the smallest kernel to the largest:
#
# 1. Triton's model — programs, blocks, masks, `tl.load` / `tl.store`, `tl.dot` — run on this CPU.
# 2. The fused decode step: one token of KDA, and why its speed is set by memory, not arithmetic.
# 3. The fused SiTU activation: elementwise fusion, forward and backward.
# 4. The chunked KDA pipeline: six kernels, which parts run in parallel and which in sequence, and where
#    the time goes on an H200.
# 5. What the reference library (flash-linear-attention) and FlashKDA do differently, by measurement.
# 6. Exercises: write the decode kernel, write the fused SiTU forward, predict what breaks without masks.
#
# **No GPU needed.** Importing `k3lite.kernels` on a machine without CUDA switches on Triton's
# *interpreter*, which runs each `@triton.jit` function as NumPy code on CPU tensors: float32 only, one
# program after another, slowly — so every shape here is tiny. It runs the very kernels the H200 runs.
# **No listing is retyped**: every kernel shown is read from the `k3lite` package by `k3lite.course.listing`,
# so what you read is what runs.

# %% slideshow={"slide_type": "skip"} tags=["plumbing"]
import json
import math
import statistics
import textwrap

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, Rectangle
from myst_nb import glue
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from k3lite import kernels
from k3lite.course import viz
from k3lite.course.checks import expect
from k3lite.course.listing import show

kernels.interpreting()           # on a CPU: switch the interpreter on before triton is imported
import triton                    # noqa: E402
import triton.language as tl     # noqa: E402

from k3lite.exercises import ch11                       # noqa: E402
from k3lite.kernels import chunk_fwd, recurrent_step, situ  # noqa: E402
from k3lite.ops import gated_delta_rule, kda            # noqa: E402
from k3lite.ops import situ as situ_ops                 # noqa: E402
from k3lite.course.runtime import seed_everything              # noqa: E402

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
# `kernel[(n0, n1)](...)` starts `n0 × n1` **programs**, and each asks `tl.program_id(axis)` which one
# it is. A program never handles one number at a time: it works on a **block**, a small tensor whose
# shape is a compile-time constant (`tl.constexpr`, a power of two), built from `tl.arange`.
#
# * `tl.load(ptr + offsets, mask=m, other=0.0)` reads a block from memory; lanes where the mask is False
#   are not read and get `other` instead.
# * `tl.store(ptr + offsets, x, mask=m)` writes a block; masked lanes are not written.
# * `tl.dot(a, b)` multiplies two blocks (on a GPU: on the tensor cores; every side at least 16).
#
# Pointers are plain addresses: `ptr + offsets` with `offsets = row * stride + column` is how a kernel
# finds element `[row, column]` of a row-major tensor. The **mask** is what makes a block of 8 safe on a
# tensor of 20: the last program's block sticks out, and its outside lanes must neither load nor store.
#
# The first kernel below does nothing but stamp its program number into the tile it owns. Run on a
# `[20, 28]` array with `8 × 8` blocks, the result *is* the picture of who touches what.

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
glue("ch11_masked_lanes", f"{lanes - R * C}", display=False)
glue("ch11_programs", f"{grid[0] * grid[1]}", display=False)
glue("ch11_lane_rect", f"[{grid[0] * BR}, {grid[1] * BC}]", display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7.5, 5.2))
ax.imshow(owner.numpy() % 6, cmap="Pastel1", vmin=0, vmax=8, extent=(0, C, R, 0))
for i in range(grid[0]):
    for j in range(grid[1]):
        ax.add_patch(Rectangle((j * BC, i * BR), BC, BR, fill=False, lw=1.5, ls="--", ec=viz.PALETTE["black"]))
        ax.text(j * BC + BC / 2, i * BR + BR / 2, f"program\n({i}, {j})", ha="center", va="center", fontsize=8)
ax.add_patch(Rectangle((0, 0), C, R, fill=False, lw=2.5, ec=viz.PALETTE["blue"]))
ax.set_xlim(0, grid[1] * BC)
ax.set_ylim(grid[0] * BR, 0)
ax.set_xlabel("column")
ax.set_ylabel("row")
ax.set_title("Which program writes which tile: [20, 28] array, 8x8 blocks\n"
             "(dashed: the block each program computes; outside the blue array the mask stops it)")
plt.show()

# %% [markdown]
# The {glue:text}`ch11_programs` programs cover a {glue:text}`ch11_lane_rect` rectangle of lanes; the mask stops the
# {glue:text}`ch11_masked_lanes` lanes outside the array. On a GPU the programs run at the same time on
# the streaming multiprocessors, in no promised order; the interpreter runs them one after another.
# Nothing else distinguishes the two: a kernel that is right under the interpreter computes the same
# thing on the GPU (up to the order of float additions, and bf16, which the interpreter does not handle).
# Kernels can be written in notebook cells, as here: `@triton.jit` reads the function's source, and
# IPython keeps each cell's source where Python's `inspect` finds it.
#
# `tl.dot` is where a GPU's speed lives. A matrix product, one program per `[16, 16]` output tile,
# walking the shared dimension 16 at a time and accumulating in float32:

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


a = torch.randn(40, 24, device=DEVICE)
b = torch.randn(24, 36, device=DEVICE)
c = torch.empty(40, 36, device=DEVICE)
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
# In PyTorch that is several operations, each reading the `[B, H, K, V]` state from memory and
# writing a result back. The fused kernel `k3lite.kernels.recurrent_step._decode_step` reads the state
# once and writes it once. Here it is, straight from the package, in two parts. First the tile and its loads:

# %%
show(recurrent_step._decode_step, "@triton.jit", "b_v = tl.load")

# %% [markdown]
# * **The grid** is `(cdiv(V, BV), B·H)`: one program per head and per block of `BV` value columns.
#   Its tile of the state is `[K, BV]` — all key rows, some value columns. Splitting along $V$ is free:
#   every value column of $S$ updates independently ($S^\top k$ is one dot product per column).
#   Splitting along $K$ would not be: $S^\top k$ sums over the key rows.
# * **`rk`, `rv`, `mk`, `mv`** are the row and column indices of the tile and their masks: `BK` is $K$
#   rounded up to a power of two, and the last value block may stick out past $V$.
# * **`off`** addresses the tile inside the contiguous `[B, H, K, V]` state: head `i_bh` starts at
#   `i_bh · K · V`, row `rk` at `rk · V`. (The cast to int64 keeps the product from overflowing at large B.)
#
# Then the update, all in registers, and the two stores:

# %%
show(recurrent_step._decode_step, "bad = False", "tl.store(o_ptr")

# %% [markdown]
# * **Per-channel decay** (`GATE == GATE_CHANNEL`, KDA): one factor $e^{g_d}$ per key channel, i.e. per
#   *row* of the tile — `tl.exp(b_g)[:, None]` broadcasts it along the row. Gated DeltaNet's scalar gate
#   (`GATE_SCALAR`) multiplies the whole tile by one number; linear attention and DeltaNet have no gate.
# * **The delta correction** (`DELTA`): `tl.sum(b_s * b_k[:, None], axis=0)` is $S^\top k$, one number per
#   value column, computed on the *decayed* state; then $v' = \beta(v - S^\top k)$.
# * **Write, then read**: `b_s + b_k[:, None] * b_v[None, :]` is the rank-one write $k v'^\top$; the
#   output reads the *new* state. Both stores are masked like the loads.
# * **The value checks** (`bad`, `CHECK`, `MESSAGE`): the kernel has $g$ and $\beta$ in registers anyway,
#   so it checks them there ($g \le 0$, $0 \le \beta \le 2$, written as `~(g <= 0)` so that a NaN fails too).
#   `tl.device_assert` stops the kernel with `MESSAGE`, which names the arguments it covers; the host sees the
#   failure at its next synchronisation, like any CUDA error. Triton compiles device asserts only into a
#   kernel launched with `debug=True`, so on CUDA the launcher passes that (and `sanitize_overflow=False`,
#   which keeps debug mode from adding an overflow check to every integer operation). Checking on the host
#   instead would take a reduction per tensor and would wait for the GPU with `.item()`; the asynchronous
#   host-side form (a max, an aminmax, comparisons, two asserts) is eight small launches per token. Here the
#   step stays one launch.
#
# The launcher picks the block sizes (`chunk_fwd._block`, which the chunked pipeline uses too: the axis rounded up
# to a power of two, at least 16) and the grid:

# %%
show(recurrent_step.decode_step)

# %% [markdown]
# Run it through the interpreter against the PyTorch step of `k3lite.ops.kda` — at `K = 12`, `V = 20`,
# where both masks matter, with the default value block and with a much narrower one (`block_v = 16`,
# two programs per head, the second 12 lanes short):

# %%
def decode_inputs(B=2, H=3, K=12, V=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, H, K, generator=gen), dim=-1)
    v = torch.randn(B, H, V, generator=gen)
    g = -torch.rand(B, H, K, generator=gen)
    beta = torch.rand(B, H, generator=gen)
    state = torch.randn(B, H, K, V, generator=gen)
    return [x.to(DEVICE) for x in (q, k, v, g, beta, state)]


q, k, v, g, beta, state = decode_inputs()
o_ref, s_ref = kda.step(q, k, v, g, beta, state=state, backend="torch")
for block_v in (64, 16):
    o_fused, s_fused = recurrent_step.decode_step("kda", q, k, v, g, beta, state, q.shape[-1] ** -0.5,
                                                  block_v=block_v)
    worst = max((o_fused - o_ref).abs().max().item(), (s_fused - s_ref).abs().max().item())
    expect(f"fused decode step (block_v={block_v}) equals kda.step in PyTorch, max |diff| < 1e-5", worst < 1e-5)

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Why decode is memory-bound: the roofline
#
# Count what one step costs per head. The state is float32: it is read once and written once,
# $2 \cdot 4 \cdot K V$ bytes. The arithmetic per state entry is one multiply (decay), one multiply-add
# ($S^\top k$), one multiply-add (the write) and one multiply-add (the read): 7 floating-point operations
# for 8 bytes moved. The vectors $q, k, v, g$ are $O(K + V)$, negligible next to $KV$.

# %%
K_DEC, V_DEC = 128, 128
flops_per_head = 7 * K_DEC * V_DEC
bytes_per_head = 2 * 4 * K_DEC * V_DEC
intensity = flops_per_head / bytes_per_head
PEAK_TFLOPS, PEAK_TBS = 989.0, 4.8                 # H200 spec sheet: dense bf16 tensor cores, HBM3e
ANCHOR_TFLOPS, ANCHOR_TBS = 683.0, 4.27           # measured on this H200: 8192^3 bf16 matmul, device copy
ridge = PEAK_TFLOPS / PEAK_TBS
print(f"per head and step: {flops_per_head:,} FLOPs, {bytes_per_head:,} bytes -> {intensity:.3f} FLOP/byte")
print(f"H200 ridge point (spec): {PEAK_TFLOPS:g} TFLOP/s / {PEAK_TBS:g} TB/s = {ridge:.0f} FLOP/byte")
print(f"decode sits {ridge / intensity:.0f}x below the ridge: memory sets its speed")
glue("ch11_decode_intensity", f"{intensity:.3f}", display=False)
glue("ch11_ridge", f"{ridge:.0f}", display=False)

# %% [markdown]
# A kernel whose arithmetic intensity is {glue:text}`ch11_decode_intensity` FLOP/byte, against a ridge
# point of {glue:text}`ch11_ridge` FLOP/byte, can use a fraction of a percent of the tensor cores. Its
# best possible time is the bytes divided by the bandwidth, and the measure of the kernel is how close
# it gets to that. The stored H200 benchmark (read below, with its provenance) timed the fused step on a
# `[B, 16, 128, 128]` float32 state:

# %%
print(f"benchmark: {META['device']}")
print(f"commit {META['commit']}, {META['date_utc']}, torch {META['versions']['torch']}, "
      f"triton {META['versions']['triton']}, fla {META['versions']['fla']}")
print(f"timing: {META['timing']}")
print("k3lite rows: decode_step's default launch (block_v=64, 4 warps), as the package runs it")
print(f"{'B':>4} {'state MB':>9} {'k3lite ms':>10} {'TB/s':>6} {'of 4.8':>7} {'of 4.27':>8} "
      f"{'fla ms':>8} {'PyTorch ms':>11}")
for row in BENCH["decode"]:
    moved = 2 * 4 * row["B"] * row["H"] * row["K"] * row["V"]
    assert moved == row["state_bytes_moved"]
    tbs = moved / (row["k3lite_default_ms"] * 1e-3) / 1e12
    assert abs(tbs - row["tb_per_s"]) < 1e-9 * tbs
    print(f"{row['B']:>4} {moved / 1e6:>9.0f} {row['k3lite_default_ms']:>10.4f} {tbs:>6.2f} {tbs / PEAK_TBS:>7.0%} "
          f"{tbs / ANCHOR_TBS:>8.0%} {row['fla_ms']:>8.4f} {row['k3lite_torch_ms']:>11.3f}")
small_b, large_b = BENCH["decode"][0], BENCH["decode"][-1]
glue("ch11_decode_tbs_large", f"{large_b['tb_per_s']:.1f}", display=False)
glue("ch11_decode_tbs_small", f"{small_b['tb_per_s']:.1f}", display=False)
glue("ch11_decode_b_large", f"{large_b['B']}", display=False)
glue("ch11_decode_b_small", f"{small_b['B']}", display=False)
glue("ch11_decode_vs_torch", f"{small_b['k3lite_torch_ms'] / small_b['k3lite_default_ms']:.0f}", display=False)
expect(f"B={large_b['B']}: the fused step reaches > 85 % of the measured copy bandwidth",
       large_b["tb_per_s"] > 0.85 * ANCHOR_TBS)

# %% [markdown]
# At B = {glue:text}`ch11_decode_b_large` the fused step moves state at {glue:text}`ch11_decode_tbs_large`
# TB/s — most of what a plain device-to-device copy reaches on the same GPU (4.27 TB/s): there is little
# left to win inside the kernel. At B = {glue:text}`ch11_decode_b_small` the state is a quarter of the
# size, fixed costs such as the launch weigh more, and the rate drops to
# {glue:text}`ch11_decode_tbs_small` TB/s. The PyTorch step, which passes over the state once per
# operation, is {glue:text}`ch11_decode_vs_torch`× slower at B = {glue:text}`ch11_decode_b_small`. The only
# way to decode much faster is to move fewer bytes: a bf16 state, or several tokens per state pass
# (speculative decoding) — both outside this kernel.

# %% tags=["plumbing"]
def roofline(ax, points, title):
    x = torch.logspace(-2, 4, 200)
    for peak, bw, style, label in ((PEAK_TFLOPS, PEAK_TBS, "-", "H200 spec (989 TFLOP/s, 4.8 TB/s)"),
                                   (ANCHOR_TFLOPS, ANCHOR_TBS, "--", "measured (683 TFLOP/s, 4.27 TB/s)")):
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
roofline(ax, decode_points, f"Decode on the roofline (H200, commit {META['commit']}, {META['date_utc'][:10]})")
plt.show()

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 3. The fused SiTU kernel
#
# Kimi K3's gated MLP activation (chapter 08) is elementwise:
# $h = \beta_1 \tanh(x/\beta_1)\,\sigma(x) \cdot \beta_2 \tanh(u/\beta_2)$ for the gate $x$ and the up
# projection $u$. Eager PyTorch runs each operation — divide, tanh, multiply, sigmoid, … — as its own
# kernel, and each reads its inputs from memory and writes its result back. An elementwise function has
# almost no arithmetic per byte, so its time is its memory traffic, and fusion is the whole game: the
# fused kernel loads $x$ and $u$ once, keeps every intermediate in registers, and stores $h$ once.
#
# (The `@cached_launch` line above `@triton.jit` changes nothing the kernel computes. On a GPU it can let a call
# that repeats an earlier one skip Triton's per-call dispatch, which matters when the GPU's work is shorter than the
# host's time to issue it; `k3lite/kernels/_launch.py` says what it checks. Under the CPU interpreter it does nothing.)

# %%
show(situ._situ_glu_fwd)

# %% [markdown]
# One program per `BLOCK` elements of the flattened tensors, one mask for the tail — the model of
# section 1 in one dimension. The helpers `_tanh` and `_sigmoid` have two paths: on the interpreter (and
# for float32) exact formulas, on a GPU in bf16 the special-function unit's approximate `tanh`:

# %%
show(situ._tanh)

# %% [markdown]
# The backward is fused the same way. Autograd would store the intermediates of the forward; the fused
# backward stores none: it reloads $x$, $u$ and the incoming gradient and *recomputes* $\tanh$ and
# $\sigma$ — arithmetic is cheaper than a round trip to memory.

# %%
show(situ._situ_glu_bwd)

# %% [markdown]
# Checked against the eager reference, values and gradients, at a size that is not a multiple of the block:

# %%
gen = torch.Generator().manual_seed(0)
gate = (6 * torch.randn(3, 1001, generator=gen)).to(DEVICE).requires_grad_()
up = (30 * torch.randn(3, 1001, generator=gen)).to(DEVICE).requires_grad_()
dh = torch.randn(3, 1001, generator=gen).to(DEVICE)
h_fused = situ_ops.situ_glu(gate, up, backend="triton")
h_eager = situ_ops.situ_glu(gate, up, backend="torch")
grads_fused = torch.autograd.grad(h_fused, (gate, up), dh)
grads_eager = torch.autograd.grad(h_eager, (gate, up), dh)
expect("fused SiTU forward equals the eager one (max |diff| < 1e-4)", (h_fused - h_eager).abs().max().item() < 1e-4)
expect("fused SiTU gradients equal autograd's (max |diff| < 1e-4)",
       max((a - b).abs().max().item() for a, b in zip(grads_fused, grads_eager)) < 1e-4)

# %% [markdown]
# **Bytes saved, counted.** A dispatch mode sees every PyTorch operation the eager version runs, with
# its inputs and outputs. Charging each operation one read of its tensor inputs and one write of its
# outputs (views, which move nothing, are skipped) gives the eager traffic; the fused kernels move
# 3 tensors forward (read $x, u$, write $h$) and 5 backward (read $x, u, \partial h$, write
# $\partial x, \partial u$).

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
x_small = torch.randn(64, 48, requires_grad=True)
u_small = torch.randn(64, 48, requires_grad=True)
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
glue("ch11_situ_eager_fwd", f"{eager_fwd:.0f}", display=False)
glue("ch11_situ_eager_bwd", f"{eager_bwd:.0f}", display=False)
glue("ch11_situ_saving_fwd", f"{eager_fwd / 3:.1f}", display=False)

# %% [markdown]
# The eager forward moves {glue:text}`ch11_situ_eager_fwd` tensors' worth of bytes where the fused one moves
# 3, a factor {glue:text}`ch11_situ_saving_fwd`; the eager backward {glue:text}`ch11_situ_eager_bwd` against 5. On the
# H200 (GPU time of the kernels only, from the stored benchmark):

# %%
s = BENCH["situ"]
print(f"shape {s['shape']}, {s['dtype']}")
print(f"forward:         eager {s['situ_eager_fwd_gpu_ms']:.3f} ms, fused {s['situ_fused_fwd_gpu_ms']:.3f} ms "
      f"-> {s['eager_over_fused_fwd_gpu']:.1f}x")
print(f"forward+backward: eager {s['situ_eager_fwd+bwd_gpu_ms']:.3f} ms, fused {s['situ_fused_fwd+bwd_gpu_ms']:.3f} ms "
      f"-> {s['eager_over_fused_fwd+bwd_gpu']:.1f}x")
print(f"fused SiTU vs fused SiLU-and-mul (forward): {s['fused_over_silu_mul_fwd_gpu']:.2f}x the time")
print(f"fused forward moves {3 * n_elem * 2 / (s['situ_fused_fwd_gpu_ms'] * 1e-3) / 1e12:.2f} TB/s")
glue("ch11_situ_speedup_fwd", f"{s['eager_over_fused_fwd_gpu']:.1f}", display=False)
glue("ch11_situ_vs_silu", f"{s['fused_over_silu_mul_fwd_gpu']:.2f}", display=False)
expect("the measured forward speed-up is within 25 % of the counted ratio of bytes",
       abs(s["eager_over_fused_fwd_gpu"] / (eager_fwd / 3) - 1) < 0.25)

# %% [markdown]
# The measured speed-up, {glue:text}`ch11_situ_speedup_fwd`× forward, is about the ratio of bytes: fusion
# did what the count says it should. And with the traffic gone, SiTU's extra `tanh`s cost next to
# nothing: the fused SiTU takes {glue:text}`ch11_situ_vs_silu`× the time of a fused SiLU-and-mul, the
# standard activation it replaces.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 4. The chunked pipeline
#
# Training and prefill process whole sequences. Chapter 04 derived the chunked form: split the sequence
# into chunks of $C = 64$ tokens; inside a chunk, everything is matrix products (parallel); across chunks,
# only the state is carried (sequential):
#
# ![Chunking: parallel inside a chunk, a state across chunks](../figures/diagram_chunk_tiling.svg)
#
# `k3lite.kernels.chunk_fwd` runs it as six kernels. The module's docstring is the map:

# %%
print(chunk_fwd.__doc__.split("Numerics")[0].strip())

# %% [markdown]
# What each stage's programs own, as tiles (one head, $C = 64$, sub-chunks of 16); only the state pass
# walks along the sequence:

# %% tags=["plumbing"]
def tile(ax, x, y, w, h, label, color, alpha=0.35):
    ax.add_patch(Rectangle((x, y), w, h, fc=color, ec=viz.PALETTE["black"], alpha=alpha, lw=1))
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center", fontsize=8)


def arrow(ax, x0, y0, x1, y1):
    ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle="-|>", mutation_scale=12, color=viz.PALETTE["black"]))


blue, orange, green, red, sky = (viz.PALETTE[c] for c in ("blue", "orange", "green", "red", "sky"))
fig, axes = plt.subplots(2, 3, figsize=(12, 8.2))
for ax in axes.flat:
    ax.set_xlim(0, 10)
    ax.set_ylim(10, 0)
    ax.axis("off")

ax = axes[0, 0]
ax.set_title("1. _chunk_cumsum\nprogram = (channels, chunk, head): parallel", fontsize=9)
for c_i in range(4):
    tile(ax, 1, 0.5 + 2.2 * c_i, 3, 2, f"g, chunk {c_i}", sky)
    arrow(ax, 4.4, 0.7 + 2.2 * c_i, 4.4, 2.3 + 2.2 * c_i)
    tile(ax, 5, 0.5 + 2.2 * c_i, 3, 2, "G = cumsum", blue)
ax.text(5, 9.6, "the sum restarts in every chunk", fontsize=8, ha="center")

ax = axes[0, 1]
ax.set_title("2-3. intra-chunk scores and (I + A)^-1\nKDA: diagonal blocks row by row, the rest by tl.dot",
             fontsize=9)
for i in range(4):
    for j in range(i + 1):
        diag = i == j
        tile(ax, 1 + 2 * j, 1 + 2 * i, 2, 2, "rows" if diag else "dot", orange if diag else green)
ax.text(5, 9.6, "A, one 64x64 chunk in 16x16 blocks", fontsize=8, ha="center")

ax = axes[0, 2]
ax.set_title("4. _wy_factors\nprogram = (chunk, head): parallel", fontsize=9)
tile(ax, 0.3, 1, 3, 3, "Ai\n64x64", green)
tile(ax, 4, 1, 2, 3, "βe^G K\n64xK", sky)
tile(ax, 7, 1, 2, 3, "W", blue)
tile(ax, 0.3, 5.5, 3, 3, "Ai", green)
tile(ax, 4, 5.5, 2, 3, "βV\n64xV", sky)
tile(ax, 7, 5.5, 2, 3, "U", blue)
for y in (2.5, 7):
    ax.text(3.65, y, "@", ha="center", va="center")
    ax.text(6.5, y, "=", ha="center", va="center")

ax = axes[1, 0]
ax.set_title("5. _state_pass\nprogram = (value block, head)\nSEQUENTIAL over chunks", fontsize=9)
for c_i in range(4):
    tile(ax, 0.3 + 2.4 * c_i, 3, 1.8, 2, f"chunk {c_i}\nW, U, K", sky)
    tile(ax, 0.3 + 2.4 * c_i, 6.5, 1.8, 1.5, f"S_{c_i + 1}", red)
    if c_i:
        arrow(ax, 2.1 + 2.4 * (c_i - 1), 7.25, 0.3 + 2.4 * c_i, 7.25)
    arrow(ax, 1.2 + 2.4 * c_i, 5, 1.2 + 2.4 * c_i, 6.5)
ax.text(5, 9.3, "V' = U - W S;  S = e^{G_C} S + K_dec^T V'", fontsize=8, ha="center")

ax = axes[1, 1]
ax.set_title("6. _chunk_output\nprogram = (value block, chunk, head)\nparallel", fontsize=9)
tile(ax, 0.2, 2, 2, 3, "e^G Q\n64xK", sky)
tile(ax, 2.6, 2, 1.6, 2, "h_c\nKxBV", red)
tile(ax, 4.9, 2, 2.4, 3, "Aqk\n64x64", green)
tile(ax, 7.6, 2, 1.6, 3, "V'", orange)
ax.text(4.55, 3.5, "+", ha="center", va="center", fontsize=12)
ax.text(5, 7, "O [64, BV] = scale (e^G Q) h_c + Aqk V'", fontsize=8, ha="center")

ax = axes[1, 2]
ax.set_title("what runs when", fontsize=9)
stages = ["cumsum", "intra + solve", "WY", "state pass", "output"]
for s_i, name in enumerate(stages):
    ax.text(0, 1 + 1.8 * s_i, name, fontsize=8, va="center")
    for c_i in range(4):
        if name == "state pass":                          # one chunk after another
            tile(ax, 3.2 + 1.6 * c_i, 0.75 + 1.8 * s_i, 1.5, 0.5, f"c{c_i}", red, alpha=0.4)
        else:                                             # all chunks at once
            tile(ax, 3.2, 0.2 + 1.8 * s_i + 0.4 * c_i, 1.5, 0.38, f"c{c_i}", blue, alpha=0.4)
ax.text(5, 9.6, "stacked: chunks at once; in a row: one after another", fontsize=8, ha="center")
fig.suptitle("The chunked KDA forward: what each kernel's programs own", fontsize=11)
plt.show()

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Stage by stage, in the kernels' own lines
#
# **1. Gate cumsum.** Each program owns one chunk of one head (for KDA, one block of its key channels;
# Gated DeltaNet's one gate per head is a single channel) and writes $G_r = \sum_{s \le r} g_s$ inside the
# chunk — as two float32 tensors, a high part and what its rounding dropped, so that decays over long spans keep
# their digits (for KDA in bf16 the second only where a sum is large enough to need it; section 5 says when).
# It takes the chunk `CUMSUM_ROWS` rows at a time: one tile load, a scan down the tile of (sum, remainder) pairs
# joined by a compensated addition (`_two_sum`), then the pair carried from the tiles before it. Section 5 follows this stage through four forms, each measured, the last one this:

# %%
show(chunk_fwd._chunk_cumsum)

# %% [markdown]
# **2–3. Intra-chunk scores and the triangular solve.** For KDA the decay between tokens $r$ and $i$ is
# a different number per key channel, $e^{G_{r,d} - G_{i,d}}$, so $QK^\top$ cannot be one plain product.
# Inside the 16-token diagonal blocks, `_diagonal_blocks` takes one product per block through an *anchor*
# row in the block's middle, and falls back to walking the rows, with a sum of gates of one sign, where the
# gates are too strong for that (section 5 ends with how it got there). Below them, `_offdiagonal_solve`
# factors the decay through an anchor row before each block, so each block becomes a `tl.dot`, then inverts
# $(I + A)$ block by block:

# %%
show(chunk_fwd._offdiagonal_pair)

# %%
show(chunk_fwd._invert_diag_block)

# %% [markdown]
# A strictly lower triangular $16 \times 16$ block $L$ is nilpotent ($L^{16} = 0$), so
# $(I + L)^{-1} = (I - L)(I + L^2)(I + L^4)(I + L^8)$: six small tensor-core products instead of a
# sixteen-step substitution loop — the same trick of turning a sequential algorithm into products.
#
# **4. WY factors**: $W = A_i\,\mathrm{Diag}(\beta)(e^{G} \odot K)$ and $U = A_i\,\mathrm{Diag}(\beta) V$,
# one `tl.dot` per key or value block:

# %%
show(chunk_fwd._wy_chunk, "b_w = tl.dot", "tl.store(p_w")

# %%
show(chunk_fwd._wy_values, "b_u = tl.dot", "tl.store(p_u")

# %% [markdown]
# **5. The state pass** is the only sequential stage. One program owns a `[K, BV]` block of one head's
# state and walks through the chunks, storing the state each chunk starts from (`h`) for the output
# stage and the backward. Each token's contribution must decay from that token to the chunk's end,
# $e^{G_C - G_r}$. With a gate per key channel (KDA) that factor differs per channel, so stage 4 writes the
# keys already decayed ($K_{dec}$). With one gate per head it is a single number per token, and the same
# product $K_{dec}^\top V' = K^\top (e^{G_C - G} \odot V')$ needs no second copy of the keys: the pass scales
# the rows of $V'$ instead (the `GATE_SCALAR` lines).

# %%
show(chunk_fwd._state_pass, "for i_t in range(0, NT)", "b_s += tl.dot")

# %%
# The identity behind the GATE_SCALAR lines, on random numbers (16 tokens, 8 key and 8 value channels): a factor per
# token moves from the keys to the values; a factor per token and key channel (KDA) cannot, since a scaling of V'
# rows carries no channel index. The best per-token scaling, by least squares over the 64 entries, still misses.
gen = torch.Generator().manual_seed(11)
keys, values = torch.randn(16, 8, generator=gen), torch.randn(16, 8, generator=gen)
per_token = torch.rand(16, 1, generator=gen)          # e^{G_C - G_r}, one per token
per_channel = torch.rand(16, 8, generator=gen)        # KDA: one per token and key channel
expect("K_dec^T V' = K^T (e^(G_C - G) * V') for one factor per token",
       torch.allclose((per_token * keys).T @ values, keys.T @ (per_token * values), atol=1e-5))
target = ((per_channel * keys).T @ values).reshape(-1)                      # KDA's K_dec^T V', 64 entries
columns = torch.stack([torch.outer(keys[r], values[r]).reshape(-1) for r in range(16)], dim=1)   # d/d(scale of row r)
best = torch.linalg.lstsq(columns, target[:, None]).solution
miss = ((columns @ best).squeeze(1) - target).norm() / target.norm()
expect("the best per-token scaling of V' misses KDA's K_dec^T V' by more than 10 %", miss.item() > 0.1)

# %% [markdown]
# Its parallelism is only $B \cdot H \cdot V / BV$ programs, however long the sequence — which is why the
# launcher narrows the value block when $B \cdot H$ is small (more programs for the GPU's 132
# multiprocessors). **6. The output** is parallel again, one program per value block, chunk and head:
# $O = \text{scale}\,(e^{G} \odot Q)\,h_c + A_{qk} V'$:

# %%
show(chunk_fwd._chunk_output, "for i_k in range", "acc += tl.dot(b_a")

# %% [markdown]
# The whole pipeline, through the interpreter, against the token-by-token recurrence of `k3lite.ops` —
# at 70 tokens, so the second chunk is 6 tokens long and every mask along the sequence is used:

# %%
gen = torch.Generator().manual_seed(1)
B_, T_, H_, K_, V_ = 1, 70, 1, 16, 16
q = torch.randn(B_, T_, H_, K_, generator=gen)
k = torch.nn.functional.normalize(torch.randn(B_, T_, H_, K_, generator=gen), dim=-1)
v = torch.randn(B_, T_, H_, V_, generator=gen)
g = -0.5 * torch.rand(B_, T_, H_, K_, generator=gen)
beta = torch.rand(B_, T_, H_, generator=gen)
q, k, v, g, beta = (x.to(DEVICE) for x in (q, k, v, g, beta))
for name, op, gate_ in (("kda", kda, g), ("gated_delta_rule", gated_delta_rule, g[..., 0])):
    o_kernel, s_kernel = kernels.chunked(name, q, k, v, gate_, beta)
    o_rec, s_rec = op.recurrent(q, k, v, gate_, beta)
    worst = max((o_kernel - o_rec).abs().max().item(), (s_kernel - s_rec).abs().max().item())
    expect(f"{name}: Triton pipeline equals the recurrence, max |diff| < 1e-5", worst < 1e-5)

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Where the time goes on an H200
#
# The stored benchmark profiled the KDA forward at `B = 2, T = 8192, H = 16, K = V = 128` in bf16, GPU
# time per kernel (from the same run as above):

# %%
profile = BENCH["kda_profile_2x8192x16"]
fwd_ms = {row["name"]: row["ms_per_call"] for row in profile["fwd"]}
total_fwd = sum(fwd_ms.values())
for name, ms in fwd_ms.items():
    print(f"{name:<20} {ms:6.3f} ms  {ms / total_fwd:5.1%}")
print(f"{'sum':<20} {total_fwd:6.3f} ms")
parallel_ms = total_fwd - fwd_ms["_state_pass"]
glue("ch11_state_share", f"{fwd_ms['_state_pass'] / total_fwd:.0%}", display=False)
glue("ch11_intra_share", f"{(fwd_ms['_diagonal_rows'] + fwd_ms['_offdiagonal_solve']) / total_fwd:.0%}",
     display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(8, 3.6))
names = list(fwd_ms)
colors = [red if name == "_state_pass" else blue for name in names]
ax.barh(names[::-1], [fwd_ms[n] for n in names[::-1]], color=colors[::-1], alpha=0.8)
ax.set_xlabel("GPU time per call (ms)")
ax.set_title(f"KDA forward, B=2 T=8192 H=16 D=128 bf16, per kernel\n"
             f"H200, commit {META['commit']}, {META['date_utc'][:10]}, triton {META['versions']['triton']} "
             f"(highlighted: the sequential stage)", fontsize=9)
plt.show()

# %% [markdown]
# The sequential state pass is {glue:text}`ch11_state_share` of the forward; the intra-chunk stage of KDA
# (diagonal rows plus the off-diagonal blocks and the solve) is {glue:text}`ch11_intra_share` — the price
# of the per-channel decay, which Gated DeltaNet's single product per chunk does not pay.
#
# **The backward** (`k3lite.kernels.chunk_bwd_triton`) is six more kernels (and a small helper) in the same
# style: a reverse state pass (sequential again, from the last chunk to the first) and chunk-parallel
# gradients through the output, the WY factors, the triangular solve and the intra-chunk products. The
# same profile, forward plus backward:

# %%
both = {row["name"]: row["ms_per_call"] for row in profile["fwd+bwd"]}
total_both = sum(both.values())
backward_kernels = {n: ms for n, ms in both.items() if n.startswith("_") and n not in fwd_ms}
pytorch_side = sum(ms for n, ms in both.items() if not n.startswith("_"))
print(f"forward + backward: {total_both:.3f} ms of GPU time, {total_both / total_fwd:.1f}x the forward")
print(f"  forward kernels {sum(both[n] for n in fwd_ms):.3f} ms (_wy_factors twice: the backward recomputes W, U)")
print(f"  backward kernels {sum(backward_kernels.values()):.3f} ms; PyTorch casts and fills {pytorch_side:.3f} ms")
for name, ms in sorted(backward_kernels.items(), key=lambda item: -item[1]):
    print(f"    {name:<24} {ms:6.3f} ms")
glue("ch11_bwd_intra_share", f"{both['_bwd_intra'] / total_both:.0%}", display=False)
expect("_bwd_intra is the largest kernel of forward + backward", max(both, key=both.get) == "_bwd_intra")

# %% [markdown]
# As in the forward, the per-channel intra-chunk work is the largest single kernel
# ({glue:text}`ch11_bwd_intra_share` of forward plus backward).
#
# **Against the peaks.** A lower bound on each stage: the FLOPs of its products and the bytes it must read
# and write at least once (inputs bf16; $G$, $A_{qk}$, $A_i$ float32 as the code allocates them; re-reads
# that the caches serve are not counted). The profile was taken at the commit named above, where $G$ was
# one float32 tensor; the code shown in this chapter has since added its low-order part $G_{lo}$ (4 more
# bytes per gate), and its diagonal rows now read the raw gates instead, so the model is evaluated for the
# profiled code. The time the H200 needs at its peaks
# is the larger of FLOPs / 989 TFLOP/s and bytes / 4.8 TB/s:

# %%
def stage_costs(B, T, H, K, V, C=64, S=16, b_in=2, b_gsum=4):
    """FLOPs and minimal bytes of each forward kernel (KDA): products counted as 2 FLOPs per multiply-add;
    b_in bytes per input element, b_gsum bytes per element of the gate cumsum (4: G alone; 8: G and G_lo)."""
    heads, chunks, tokens = B * H, B * H * T // C, B * H * T
    return {
        "_chunk_cumsum": (tokens * K, tokens * K * (b_in + b_gsum)),
        "_diagonal_rows": (tokens * (S + 1) / 2 * 4 * K, tokens * (K * (2 * b_in + b_gsum) + 2 * S * 4)),
        "_offdiagonal_solve": (chunks * (6 * 2 * 2 * S * S * K + 40 * 2 * S ** 3),
                               tokens * K * (2 * b_in + b_gsum)
                               + chunks * (4 * S * S * 4 + 6 * S * S * 4 + C * C * 4)),
        "_wy_factors": (chunks * 2 * C * C * (K + V), tokens * (K * (b_in + b_gsum + 2 * b_in) + 2 * V * b_in)
                        + chunks * C * C * 4),
        "_state_pass": (chunks * 4 * C * K * V, tokens * (2 * K + 2 * V) * b_in + chunks * K * V * b_in
                        + heads * K * V * 4),
        "_chunk_output": (chunks * (2 * C * K * V + 2 * C * C * V),
                          tokens * (K * (b_in + 4) + 2 * V * b_in) + chunks * (K * V * b_in + C * C * 4)),
    }


costs = stage_costs(2, 8192, 16, 128, 128)
print(f"{'kernel':<20} {'GFLOP':>7} {'MB':>7} {'FLOP/B':>7} {'bound':>8} {'floor ms':>9} {'H200 ms':>8} "
      f"{'TFLOP/s':>8} {'TB/s':>6}")
stage_points = []
for name, (flops, nbytes) in costs.items():
    floor = max(flops / (PEAK_TFLOPS * 1e12), nbytes / (PEAK_TBS * 1e12)) * 1e3
    ms = fwd_ms[name]
    bound = "compute" if flops / nbytes > ridge else "memory"
    print(f"{name:<20} {flops / 1e9:>7.2f} {nbytes / 1e6:>7.1f} {flops / nbytes:>7.1f} {bound:>8} {floor:>9.3f} "
          f"{ms:>8.3f} {flops / (ms * 1e-3) / 1e12:>8.1f} {nbytes / (ms * 1e-3) / 1e12:>6.2f}")
    stage_points.append((name, flops / nbytes, flops / (ms * 1e-3) / 1e12))
floors = {name: max(f / (PEAK_TFLOPS * 1e12), b / (PEAK_TBS * 1e12)) * 1e3 for name, (f, b) in costs.items()}
floor_total = sum(floors.values())
print(f"sum of floors {floor_total:.3f} ms against {total_fwd:.3f} ms measured: {total_fwd / floor_total:.1f}x")
farthest = sorted(floors, key=lambda name: fwd_ms[name] / floors[name], reverse=True)[:3]
print("furthest from their floor: " + ", ".join(f"{n} ({fwd_ms[n] / floors[n]:.1f}x)" for n in farthest))
expect("no stage beats its floor (the model is a lower bound)", all(fwd_ms[n] >= floors[n] for n in floors))
glue("ch11_floor_ratio", f"{total_fwd / floor_total:.1f}", display=False)
glue("ch11_farthest", ", ".join(f"`{n}`" for n in farthest), display=False)
others = [n for n in costs if n not in farthest]
expect("the other stages move their bytes at > 70 % of the measured copy bandwidth",
       all(costs[n][1] / (fwd_ms[n] * 1e-3) / 1e12 > 0.7 * ANCHOR_TBS for n in others))
expect("every stage of the KDA forward is below the ridge point (memory-bound by this count)",
       all(f / b < ridge for f, b in costs.values()))

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7.5, 4.8))
roofline(ax, stage_points + decode_points[-1:], "KDA forward stages (and decode) on the H200 roofline")
plt.show()

# %% [markdown]
# Every stage sits left of the ridge: with $C = 64$ and $K = V = 128$ the products are small and the
# float32 intermediates large, so even the "matrix" stages are bound by memory, and the measured pipeline
# is {glue:text}`ch11_floor_ratio`× its bytes-and-FLOPs floor. The count also says where to look next: the
# stages furthest from their floor are {glue:text}`ch11_farthest` — the per-channel intra-chunk work and
# the sequential pass, which has only $B \cdot H \cdot V / BV$ programs however long the sequence. The
# others already move their bytes at most of the copy bandwidth; for them, only moving fewer bytes
# between stages would help.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 5. What the reference library and FlashKDA do differently
#
# The field's reference implementation, flash-linear-attention (fla), solves the same problem with the same
# chunked algorithm in Triton. The stored benchmark measured both in one process (ratio < 1: k3lite faster):

# %%
print(f"{'kind':<18} {'B':>2} {'T':>6} {'mode':<8} {'k3lite ms':>10} {'fla ms':>8} {'k3lite / fla':>13}")
for row in BENCH["chunked"]:
    if row["kind"] in ("kda", "gated_delta_rule"):
        print(f"{row['kind']:<18} {row['B']:>2} {row['T']:>6} {row['mode']:<8} {row['k3lite_triton_ms']:>10.3f} "
              f"{row['fla_ms']:>8.3f} {row['ratio_vs_fla']:>13.2f}")
for row in BENCH["decode"]:
    print(f"decode step, B={row['B']}: k3lite {row['k3lite_default_ms']:.4f} ms, fla {row['fla_ms']:.4f} ms "
          f"(fla / k3lite = {row['fla_ms'] / row['k3lite_default_ms']:.2f})")
print("the run's notes on noise:", *textwrap.wrap(META["noise"], 110), sep="\n  ")
glue("ch11_fla_decode_ratio", f"{small_b['fla_ms'] / small_b['k3lite_default_ms']:.1f}", display=False)
kda_rows = [row for row in BENCH["chunked"] if row["kind"] == "kda"]
longest = max(row["T"] for row in BENCH["chunked"])
shortest = min(row["T"] for row in BENCH["chunked"])
expect("k3lite faster than fla on every KDA fwd+bwd row",
       all(r["ratio_vs_fla"] < 1 for r in kda_rows if r["mode"] == "fwd+bwd"))
expect(f"k3lite faster than fla on every row at T = {shortest}",
       all(r["ratio_vs_fla"] < 1 for r in BENCH["chunked"] if r["T"] == shortest))
expect(f"fla faster on every forward at T = {longest}",
       all(r["ratio_vs_fla"] > 1 for r in BENCH["chunked"] if r["T"] == longest and r["mode"] == "fwd"))
expect("decode: at the larger batch k3lite and fla within 5 %",
       abs(large_b["fla_ms"] / large_b["k3lite_default_ms"] - 1) < 0.05)

# %% [markdown]
# In that run the two are close on most rows (the run's own notes say a ratio near 1 means "about there"):
# k3lite is ahead on every KDA forward+backward row and at the shortest sequences, fla at the longest
# sequence. The last part of this section measures the kernels as they are now.
# Both run the same chunked algorithm; the differences that can be named are of engineering:
#
# * **Launch settings.** fla autotunes its kernels' launch settings on first use in each process (the
#   benchmark's notes record that its times move between runs); k3lite fixes a few numbers per stage (the
#   `LAUNCH` table in `chunk_fwd`), picked once on an H200 with `benchmarks/probes/gpu_profile.py`. Autotuning
#   adapts to other GPUs and shapes; fixed settings start at once and are the same on every run.
# * **Decode.** At the smaller batch k3lite's fused step was {glue:text}`ch11_fla_decode_ratio`× faster
#   than fla's; at the larger batch both reached about the same bandwidth — the ceiling of section 2 for
#   any kernel that reads and writes the state once.
# * **FlashKDA** is a KDA kernel written in CUDA rather than Triton. CUDA leaves to the programmer what
#   Triton's compiler decides for a kernel written in blocks: the layout of shared memory, the
#   asynchronous copies that feed the tensor cores, how the warps split a tile. It was published as
#   running about 2× faster than fla's Triton KDA at T = 8192, H = 96. That number is theirs: it is not in
#   our benchmark, which measured fla and k3lite only.
#
# No code of either is used or copied here; the comparison is by measurement.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### What exactness cost, measured again
#
# Every number so far comes from the stored run of the commit named in the plots. Since then the gate sums
# became two float32 parts (stage 1), so that one gate of −1e4 before gentle gates no longer rounds their
# decays away. That is a second float32 number per gate, and every stage that forms a decay reads it. The
# KDA rows were measured again on the H200 with the same harness (fla in the same process, before and after),
# and in a second run the row-by-row cumsum was timed against the tile-wide float64 scan it replaced:

# %%
NEW = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_kda_2026-12-01.json").read_text())
NEW_META = NEW["meta"]
FORMS = NEW["cumsum_forms_2x8192x16"]
two_part = {row["name"]: row["ms_per_call"] for row in NEW["kda_profile_2x8192x16"]["fwd"]}
scan_runs = [{row["name"]: row["ms_per_call"] for row in run["kernels"]} for run in FORMS["scan"]]
# At that commit the row-by-row kernel ran beside the scan under its own name; it is _chunk_cumsum now.
rows_run = {row["name"].replace("_chunk_cumsum_rows", "_chunk_cumsum"): row["ms_per_call"]
            for row in FORMS["rows"][0]["kernels"]}
bytes_one = {name: nbytes for name, (_, nbytes) in stage_costs(2, 8192, 16, 128, 128, b_gsum=4).items()}
bytes_two = {name: nbytes for name, (_, nbytes) in stage_costs(2, 8192, 16, 128, 128, b_gsum=8).items()}
print("KDA forward, B=2 T=8192 H=16 D=128 bf16, GPU ms per kernel (H200)")
print(f"{'kernel':<20} {'G alone':>8} {'G + G_lo':>9} {'  rows':>7} {'bytes x':>8}")
print(f"{'':<20} {META['commit']:>8} {NEW_META['commit']:>9} {FORMS['commit']:>7} {'(model)':>8}")
for name in fwd_ms:
    print(f"{name:<20} {fwd_ms[name]:>8.3f} {two_part[name]:>9.3f} {rows_run[name]:>7.3f} "
          f"{bytes_two[name] / bytes_one[name]:>8.2f}")
totals = [sum(x.values()) for x in (fwd_ms, two_part, rows_run)]
print(f"{'sum':<20} {totals[0]:>8.3f} {totals[1]:>9.3f} {totals[2]:>7.3f}")
scan_walls = ", ".join(f"{run['ops_fwd_ms']:.3f}" for run in FORMS["scan"])
print(f"ops API forward in the second run: scan {scan_walls} ms (first and last), "
      f"rows {FORMS['rows'][0]['ops_fwd_ms']:.3f} ms; fla {FORMS['fla_fwd_ms']:.3f} ms")
grew = {name: two_part[name] - fwd_ms[name] for name in fwd_ms}
readers = [name for name in fwd_ms if bytes_two[name] > bytes_one[name]]
glue("ch11_exact_old_ms", f"{totals[0]:.2f}", display=False)
glue("ch11_exact_new_ms", f"{totals[1]:.2f}", display=False)
glue("ch11_exact_growth", f"{totals[1] / totals[0] - 1:.0%}", display=False)
glue("ch11_exact_readers_share", f"{sum(grew[n] for n in readers) / sum(grew.values()):.0%}", display=False)
glue("ch11_cumsum_scan_ms", f"{two_part['_chunk_cumsum']:.3f}", display=False)
glue("ch11_cumsum_rows_ms", f"{rows_run['_chunk_cumsum']:.3f}", display=False)
glue("ch11_cumsum_old_ms", f"{fwd_ms['_chunk_cumsum']:.3f}", display=False)
glue("ch11_readers_count", str(len(readers)), display=False)
cumsum_time_x = two_part["_chunk_cumsum"] / fwd_ms["_chunk_cumsum"]
cumsum_bytes_x = bytes_two["_chunk_cumsum"] / bytes_one["_chunk_cumsum"]
glue("ch11_cumsum_time_x", f"{cumsum_time_x:.1f}", display=False)
glue("ch11_cumsum_bytes_x", f"{cumsum_bytes_x:.2f}", display=False)
expect("the cumsum's time grew more than its bytes", cumsum_time_x > cumsum_bytes_x)
glue("ch11_rows_fwd_vs_fla", f"{FORMS['rows'][0]['ops_fwd_ms'] / FORMS['fla_fwd_ms']:.2f}", display=False)
expect("the two-part sums made the KDA forward more than 10 % slower", totals[1] > 1.1 * totals[0])
expect("the cumsum grew the most", max(grew, key=grew.get) == "_chunk_cumsum")
expect("the stages that read no G_lo (state pass, output) moved by less than 5 %",
       all(abs(grew[n]) < 0.05 * fwd_ms[n] for n in fwd_ms if n not in readers))
expect("row by row, the cumsum is faster than the scan in both of the scan's timings of the same run",
       all(rows_run["_chunk_cumsum"] < run["_chunk_cumsum"] for run in scan_runs))

# %% [markdown]
# The forward went from {glue:text}`ch11_exact_old_ms` to {glue:text}`ch11_exact_new_ms` ms of GPU time
# ({glue:text}`ch11_exact_growth` more), and {glue:text}`ch11_exact_readers_share` of the growth is in the
# {glue:text}`ch11_readers_count` stages whose bytes the model says grow with $G_{lo}$ (the "bytes ×"
# column); the state pass and the output stage, which read $G$ but not $G_{lo}$, did not move. The largest
# jump was the cumsum itself, and not for its bytes: they grew {glue:text}`ch11_cumsum_bytes_x`×, its time
# {glue:text}`ch11_cumsum_time_x`×. A float64 `tl.cumsum` is a scan across threads, and it took
# {glue:text}`ch11_cumsum_scan_ms` ms where the float32 one had taken {glue:text}`ch11_cumsum_old_ms` ms.
# Walking the chunk's rows in order, one float64 running sum per channel and no communication between
# threads, took {glue:text}`ch11_cumsum_rows_ms` ms; that form was kept until the last subsection of this
# section replaced it.
#
# Against the reference, in the same runs:

# %%
old_rows = {(r["B"], r["T"], r["mode"]): r for r in BENCH["chunked"] if r["kind"] == "kda"}
print(f"{'B':>2} {'T':>6} {'mode':<8} {'then: kernels/fla':>18} {'now: kernels/fla':>17} {'ops API/fla':>12} "
      f"{'ops/kernels':>12}")
for row in NEW["chunked"]:
    then = old_rows[(row["B"], row["T"], row["mode"])]
    print(f"{row['B']:>2} {row['T']:>6} {row['mode']:<8} {then['ratio_vs_fla']:>18.2f} {row['ratio_vs_fla']:>17.2f} "
          f"{row['ratio_ops_vs_fla']:>12.2f} {row['ops_over_kernels']:>12.3f}")
for row in NEW["decode"]:
    print(f"decode step B={row['B']}: kernel {row['tb_per_s']:.2f} TB/s, through kda.step {row['ops_tb_per_s']:.2f} TB/s, "
          f"fla {row['fla_tb_per_s']:.2f} TB/s")
print("scope:", *textwrap.wrap(NEW_META["scope"], 110), sep="\n  ")
then_ratios = [old_rows[(r["B"], r["T"], r["mode"])]["ratio_vs_fla"] for r in NEW["chunked"]]
glue("ch11_then_range", f"{min(then_ratios):.2f}–{max(then_ratios):.2f}", display=False)
new_fwd = [r for r in NEW["chunked"] if r["mode"] == "fwd"]
new_both = [r for r in NEW["chunked"] if r["mode"] == "fwd+bwd"]
glue("ch11_now_fwd_range", f"{min(r['ratio_vs_fla'] for r in new_fwd):.2f}–{max(r['ratio_vs_fla'] for r in new_fwd):.2f}",
     display=False)
glue("ch11_now_both_range", f"{min(r['ratio_vs_fla'] for r in new_both):.2f}–{max(r['ratio_vs_fla'] for r in new_both):.2f}",
     display=False)
glue("ch11_ops_overhead_max", f"{max(r['ops_over_kernels'] for r in NEW['chunked']) - 1:.1%}", display=False)
small_new = NEW["decode"][0]
glue("ch11_decode_ops_small", f"{small_new['ops_step_triton_ms'] / small_new['k3lite_default_ms']:.1f}", display=False)
expect("now fla is faster on every KDA row", all(r["ratio_vs_fla"] > 1 for r in NEW["chunked"]))
expect("the ops API costs at most 5 % over the kernels on every chunked row",
       all(r["ops_over_kernels"] <= 1.05 for r in NEW["chunked"]))

# %% [markdown]
# Exactness moved the course's KDA kernels from {glue:text}`ch11_then_range`× fla's time on these rows to
# behind it: the forward is now {glue:text}`ch11_now_fwd_range`×, forward plus backward
# {glue:text}`ch11_now_both_range`×
# (the row-by-row cumsum brings the forward at $T = 8192$ to {glue:text}`ch11_rows_fwd_vs_fla`×). The
# argument checks in front of the kernels, which no longer wait for the GPU, add at most
# {glue:text}`ch11_ops_overhead_max` to a chunked call. A single decode step is another matter: at the
# smaller batch the GPU work is so short that the checks' launches make `kda.step`
# {glue:text}`ch11_decode_ops_small`× the kernel's time.
#
# Where the rest could come from is a question of bytes, by the model above: $G_{lo}$ needs only the few
# bits that the rounding of $G$ dropped, so it could travel in bfloat16; or no stage reads $G$ from memory
# at all and each recomputes its chunk's sums from $g$. The next run tried the second idea.
#
# ### Sums of one sign, measured
#
# A decay between two tokens needs no difference at all if it is summed from the gates between them:
# $\sum_{i < m \le r} g_m$ has terms of one sign, so float32 keeps it to its last bit whatever came before.
# Here is the failure it avoids, on one channel of one chunk: a gate of −1e4 at token 5, gentle gates of
# −0.001 everywhere else, and the decay from token 20 to token 40.

# %%
spike_gates = torch.full((64,), -1e-3, dtype=torch.float64)
spike_gates[5] = -1e4
i_from, r_to = 20, 40
true_span = spike_gates[i_from + 1:r_to + 1].sum().item()                   # float64: the reference


def float32_running_sums(values):
    """Running sums added one float32 step at a time, as a kernel's loop adds them."""
    total, sums = torch.zeros((), dtype=torch.float32), []
    for value in values.float():
        total = total + value
        sums.append(total)
    return torch.stack(sums)


running = float32_running_sums(spike_gates)                                  # G, from the chunk start
as_difference = (running[r_to] - running[i_from]).item()                     # G_r - G_i
as_sum = float32_running_sums(spike_gates[i_from + 1:r_to + 1])[-1].item()   # the gates between, one sign
two_part_hi = spike_gates.cumsum(0).float()                                  # stage 1: G and G_lo
two_part_lo = (spike_gates.cumsum(0) - two_part_hi.double()).float()
as_two_parts = ((two_part_hi[r_to] - two_part_hi[i_from]) + (two_part_lo[r_to] - two_part_lo[i_from])).item()
step = (running[r_to] - torch.nextafter(running[r_to], torch.zeros(()))).abs().item()
print(f"float32 step size near G = {running[r_to].item():.1f}: {step:.2e}")
for label, span in (("true (float64)", true_span), ("G_r - G_i (float32)", as_difference),
                    ("one-sign sum (float32)", as_sum), ("two parts (float32)", as_two_parts)):
    decay_error = abs(math.exp(span - true_span) - 1)
    print(f"{label:<24} span {span:+.7f}  relative error of exp(span) {decay_error:.1e}")
glue("ch11_spike_diff_error", f"{abs(math.exp(as_difference - true_span) - 1):.0e}", display=False)
glue("ch11_spike_sum_error", f"{abs(math.exp(as_sum - true_span) - 1):.0e}", display=False)
glue("ch11_spike_n_gates", str(r_to - i_from), display=False)
glue("ch11_spike_step", f"{step:.0e}", display=False)
expect("the difference of float32 running sums is off by more than 1e-4 in the decay",
       abs(math.exp(as_difference - true_span) - 1) > 1e-4)
expect("the one-sign float32 sum and the two-part difference are within 1e-6",
       abs(math.exp(as_sum - true_span) - 1) < 1e-6 and abs(math.exp(as_two_parts - true_span) - 1) < 1e-6)

# %% [markdown]
# The difference of two running sums gets the decay wrong by {glue:text}`ch11_spike_diff_error`; the
# sum of the {glue:text}`ch11_spike_n_gates` gates between the two tokens, in the same float32, by
# {glue:text}`ch11_spike_sum_error`.
# Three designs of the KDA forward were profiled on the H200 (same shape, GPU ms per kernel): the diagonal
# blocks built per 16-token sub-chunk instead of per token; every stage summing the raw gates itself with
# `tl.cumsum`, with no stage 1 and no $G_{lo}$; and what the package keeps, the diagonal rows on raw gates and
# the two-part sums elsewhere. The last one was then timed through the public API against fla:

# %%
RUN3 = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02.json").read_text())
designs = RUN3["kda_fwd_designs"]
blocks = {r["name"]: r["ms_per_call"] for r in designs["diagonal_blocks_809c14d"]["kda fwd k3lite"]["kernels"]}
raw = {r["name"]: r["ms_per_call"] for r in designs["raw_gate_sums_17a6faf"]["kda fwd k3lite"]["kernels"]}
print("KDA forward, B=2 T=8192: GPU ms per kernel")
print(f"{'kernel':<20} {'two-part':>9} {'per sub-chunk':>14} {'raw, cumsum':>12}")
for name in sorted(set(rows_run) | set(blocks) | set(raw), key=lambda n: -rows_run.get(n, 0)):
    cells = [d.get(name) for d in (rows_run, blocks, raw)]
    print(f"{name:<20} " + " ".join(f"{c:>{w}.3f}" if c is not None else f"{'-':>{w}}"
                                   for c, w in zip(cells, (9, 14, 12))))
print(f"{'sum':<20} {sum(rows_run.values()):>9.3f} {sum(blocks.values()):>14.3f} {sum(raw.values()):>12.3f}")
print("through the API (kernels as kept):")
for row in RUN3["chunked"]:
    print(f"  {row['kind']:<17} B={row['B']} T={row['T']:<6} {row['mode']:<8} ops/fla {row['ratio_ops_vs_fla']:.2f}  "
          f"kernels/fla {row['ratio_vs_fla']:.2f}  ops/kernels {row['ops_over_kernels']:.3f}")
for row in RUN3["decode"]:
    print(f"  decode step B={row['B']}: through kda.step {row['ops_tb_per_s']:.2f} TB/s, kernel {row['tb_per_s']:.2f} TB/s")
kda_now = [r for r in RUN3["chunked"] if r["kind"] == "kda"]
kept_fwd = next(r for r in kda_now if (r["B"], r["T"], r["mode"]) == (2, 8192, "fwd"))
glue("ch11_diag_two_part_ms", f"{rows_run['_diagonal_rows']:.3f}", display=False)
glue("ch11_diag_raw_ms", f"{raw['_diagonal_rows']:.3f}", display=False)
glue("ch11_diag_blocks_ms", f"{blocks['_diagonal_blocks']:.3f}", display=False)
glue("ch11_raw_total_ms", f"{sum(raw.values()):.3f}", display=False)
scan_stages = ("_offdiagonal_solve", "_wy_factors", "_chunk_output")
scans_cost = sum(raw[n] - rows_run[n] for n in scan_stages)
glue("ch11_raw_scans_cost_ms", f"{scans_cost:.3f}", display=False)
glue("ch11_stage1_ms", f"{rows_run['_chunk_cumsum']:.3f}", display=False)
expect("the scans together cost more than the stage-1 kernel they replace", scans_cost > rows_run["_chunk_cumsum"])
glue("ch11_two_part_total_ms", f"{sum(rows_run.values()):.3f}", display=False)
glue("ch11_kept_kernels_ms", f"{kept_fwd['k3lite_triton_ms']:.3f}", display=False)
glue("ch11_kept_fwd_range", f"{min(r['ratio_ops_vs_fla'] for r in kda_now if r['mode'] == 'fwd'):.2f}–"
     f"{max(r['ratio_ops_vs_fla'] for r in kda_now if r['mode'] == 'fwd'):.2f}", display=False)
glue("ch11_kept_both_range", f"{min(r['ratio_ops_vs_fla'] for r in kda_now if r['mode'] == 'fwd+bwd'):.2f}–"
     f"{max(r['ratio_ops_vs_fla'] for r in kda_now if r['mode'] == 'fwd+bwd'):.2f}", display=False)
big = max(RUN3["decode"], key=lambda r: r["B"])
glue("ch11_decode_api_tbs", f"{big['ops_tb_per_s']:.2f}", display=False)
glue("ch11_decode_api_small", f"{RUN3['decode'][0]['ops_step_triton_ms'] / RUN3['decode'][0]['k3lite_default_ms']:.2f}",
     display=False)
expect("raw-gate diagonal rows are faster than the two-part ones", raw["_diagonal_rows"] < rows_run["_diagonal_rows"])
expect("building the diagonal per sub-chunk was slower than per token", blocks["_diagonal_blocks"] > rows_run["_diagonal_rows"])
expect("summing raw gates in every stage was slower in all than the two-part sums with their stage 1",
       sum(raw.values()) > sum(rows_run.values()))
expect("each stage that took over a tl.cumsum got slower",
       all(raw[n] > rows_run[n] for n in scan_stages))
expect("the kept forward's kernels beat the two-part forward of the run before",
       kept_fwd["k3lite_triton_ms"] < sum(rows_run.values()))
expect("KDA forward+backward through the API is within 1.1x of fla on every shape",
       all(r["ratio_ops_vs_fla"] <= 1.1 for r in kda_now if r["mode"] == "fwd+bwd"))
expect("the KDA forward is still slower than fla on every shape",
       all(r["ratio_ops_vs_fla"] > 1 for r in kda_now if r["mode"] == "fwd"))

# %% [markdown]
# Summed from raw gates, the diagonal rows took {glue:text}`ch11_diag_raw_ms` ms against
# {glue:text}`ch11_diag_two_part_ms`: they read one gate row per pair instead of two float32 parts. The
# same idea carried into every stage lost: a `tl.cumsum` over a tile is a scan across threads, and the
# off-diagonal, WY and output stages together paid more for theirs ({glue:text}`ch11_raw_scans_cost_ms` ms
# more) than stage 1 costs once ({glue:text}`ch11_stage1_ms` ms); the whole forward took
# {glue:text}`ch11_raw_total_ms` ms against {glue:text}`ch11_two_part_total_ms`. Building the diagonal per
# sub-chunk, with the tiles loaded once, was slower still ({glue:text}`ch11_diag_blocks_ms` ms). Our reading,
# not measured: a program per token keeps many more loads in flight, and the rows it re-reads come from the
# cache. Loading less is not the same as finishing sooner.
#
# With the raw-gate diagonal kept, the forward's kernels take {glue:text}`ch11_kept_kernels_ms` ms at
# $T = 8192$, and through the API the KDA forward is {glue:text}`ch11_kept_fwd_range`× fla's time, forward plus
# backward {glue:text}`ch11_kept_both_range`×. The decode step now checks $g$ and $\beta$ inside its kernel
# (section 2): `kda.step` moves the state at {glue:text}`ch11_decode_api_tbs` TB/s at the larger batch, and
# at the smaller one takes {glue:text}`ch11_decode_api_small`× the kernel's own time.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Tiles, TF32 and half-width A matrices, measured
#
# Three more settings of `chunk_fwd.py` were profiled one at a time, each against the defaults of that commit in
# the same process, with the error of each against the float32 pipeline on the same inputs
# (`benchmarks/probes/gpu_profile.py --sections variants`): stage 1 in tiles of a few rows instead of a loop over single
# rows; TF32 products inside the triangular solve for bf16 inputs instead of exact float32; and $A_{qk}$ and
# $A^{-1}$ stored in bf16 instead of float32, since the forward rounds both to bf16 anyway where it multiplies them
# with $V'$ and $K$:

# %%
VARIANTS = RUN3["forward_variants_2x8192x16"]["results"]
for shape_key, by_variant in VARIANTS.items():
    base = by_variant["defaults"]
    print(f"{shape_key}: forward kernels, GPU ms (H200, bf16); "
          "error = worst relative RMS over output, state, gradients")
    for name, row in by_variant.items():
        changed = {k.replace("_chunk_cumsum_tiles", "_chunk_cumsum"): v for k, v in row["fwd"].items()
                   if not k.startswith("void")}
        moved = ", ".join(f"{k} {base['fwd'][k]:.3f}->{v:.3f}" for k, v in changed.items()
                          if k in base["fwd"] and abs(v - base["fwd"][k]) > 0.005)
        worst = max(row["rel_rms_vs_float32_pipeline"].values())
        print(f"  {name:<17} fwd {row['fwd_total_ms']:.3f}  fwd+bwd {row['fwd+bwd_total_ms']:.3f}  "
              f"error {worst:.1e}  {moved}")
kda_variants, gdn_variants = VARIANTS["kda (2, 8192, 16)"], VARIANTS["gated_delta_rule (2, 8192, 16)"]
glue("ch11_var_kda_before", f"{kda_variants['defaults']['fwd_total_ms']:.3f}", display=False)
glue("ch11_var_kda_after", f"{kda_variants['all_three']['fwd_total_ms']:.3f}", display=False)
glue("ch11_var_gdn_before", f"{gdn_variants['defaults']['fwd_total_ms']:.3f}", display=False)
glue("ch11_var_gdn_after", f"{gdn_variants['all_three']['fwd_total_ms']:.3f}", display=False)
glue("ch11_var_gdn_solve", f"{gdn_variants['defaults']['fwd']['_solve_unit_lower']:.3f} -> "
     f"{gdn_variants['solve_tf32']['fwd']['_solve_unit_lower']:.3f}", display=False)
tiles8_ms = kda_variants[f"cumsum_tiles{chunk_fwd.CUMSUM_ROWS}"]["fwd"]["_chunk_cumsum_tiles"]   # the kept form
glue("ch11_tile_rows", str(chunk_fwd.CUMSUM_ROWS), display=False)
glue("ch11_var_tiles8", f"{tiles8_ms:.3f}", display=False)
glue("ch11_var_rows", f"{kda_variants['defaults']['fwd']['_chunk_cumsum']:.3f}", display=False)
# Both stage-1 forms of this run also check every gate (the value check of g moved into stage 1 before it);
# the row loop of the run before (rows_run, section 5 above) did not.
glue("ch11_var_check_cost", f"{kda_variants['defaults']['fwd']['_chunk_cumsum'] - rows_run['_chunk_cumsum']:.3f}",
     display=False)
glue("ch11_var_tiles_vs_unchecked", f"{tiles8_ms - rows_run['_chunk_cumsum']:.3f}", display=False)
expect("with the check inside, the row loop got slower than it was without it",
       kda_variants["defaults"]["fwd"]["_chunk_cumsum"] > rows_run["_chunk_cumsum"])
solve_ms = [gdn_variants[n]["fwd"]["_solve_unit_lower"] for n in ("defaults", "solve_tf32")]
expect("TF32 about halves Gated DeltaNet's solve (to at most 55 % of its time)", solve_ms[1] <= 0.55 * solve_ms[0])
dv_errors = [kda_variants[n]["rel_rms_vs_float32_pipeline"]["dv"] for n in ("defaults", "a_in_input_dtype")]
glue("ch11_var_dv", f"{dv_errors[0]:.1e} -> {dv_errors[1]:.1e}", display=False)
errors_of = lambda row: row["rel_rms_vs_float32_pipeline"]  # noqa: E731
expect("TF32 in the solve changed no error of either kind at the printed two digits",
       all(f"{errors_of(v['solve_tf32'])[n]:.1e}" == f"{errors_of(v['defaults'])[n]:.1e}"
           for v in VARIANTS.values() for n in errors_of(v["defaults"])))
expect("each of the three settings made the forward faster, for both kinds",
       all(v[n]["fwd_total_ms"] < v["defaults"]["fwd_total_ms"]
           for v in VARIANTS.values() for n in ("cumsum_tiles8", "solve_tf32", "a_in_input_dtype")))
SECOND = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02b.json").read_text())["chunked"]
api_gap = max(abs(r["ops_over_kernels"] - 1) for r in SECOND)
kda_second = next(r for r in SECOND if (r["kind"], r["mode"]) == ("kda", "fwd"))
glue("ch11_second_api_gap", f"{api_gap:.1%}", display=False)
glue("ch11_second_kda_vs_fla", f"{kda_second['ratio_ops_vs_fla']:.2f}", display=False)
print(f"second run, through the API: ops / kernels within {api_gap:.2%} on {len(SECOND)} rows; "
      f"KDA forward B={kda_second['B']} T={kda_second['T']}: {kda_second['ratio_ops_vs_fla']:.2f}x fla")
expect("bf16 A matrices raised the largest error by less than 20 %",
       all(max(errors_of(v["a_in_input_dtype"]).values()) < 1.2 * max(errors_of(v["defaults"]).values())
           for v in VARIANTS.values()))

# %% [markdown]
# Stage 1 first. Before these runs, the value check of g moved into stage 1, so both forms here also test every
# gate. The check made the row loop {glue:text}`ch11_var_check_cost` ms slower than it was in section 5's run
# ({glue:text}`ch11_var_rows` ms against {glue:text}`ch11_cumsum_rows_ms`); in tiles of {glue:text}`ch11_tile_rows` rows stage 1 takes
# {glue:text}`ch11_var_tiles8` ms, {glue:text}`ch11_var_tiles_vs_unchecked` ms more than the unchecked loop, and in
# exchange the API no longer reads all of g once more for its own check. Why the row loop suffered more from the
# check than the tiles did was not measured; a tile issues all its rows' loads at once, where the loop issues one
# row at a time. TF32 halves Gated DeltaNet's solve ({glue:text}`ch11_var_gdn_solve` ms) and leaves every error
# where it was: next to the bf16 rounding of the inputs, W and U, its rounding does not show. bf16 A matrices cost
# the backward a little accuracy in the gradients that read them (KDA's dv: {glue:text}`ch11_var_dv`). Together,
# the KDA forward went from {glue:text}`ch11_var_kda_before` to {glue:text}`ch11_var_kda_after` ms of GPU time and
# Gated DeltaNet's from {glue:text}`ch11_var_gdn_before` to {glue:text}`ch11_var_gdn_after`; the package keeps all
# three. Through the public API the forward now takes what its kernels take, to within
# {glue:text}`ch11_second_api_gap` (`benchmarks/README.md`, second run of 2026-12-02). The KDA forward is still
# {glue:text}`ch11_second_kda_vs_fla`× fla's.

# %% [markdown]
# ### A fusion that did not pay
#
# Stages 1, 3 and 4 of KDA read the same rows: the gates, the keys, the values of one chunk. One kernel for all
# three would load each row once and never write $G$ out only to read it back: stage 1's sums would happen on the
# tiles `_offdiagonal_solve` loads anyway, and stage 4 would follow in the same program, reading back the $A^{-1}$
# that program has just written. Fewer bytes, fewer launches: the argument for fusing sounds complete. It was built
# (commit d94d144, with a CPU test against the separate kernels) and measured against the three
# kernels in one process:

# %%
FUSED = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02c.json").read_text())["kda_fused_stages_experiment"]
fused_runs = FUSED["results"]["kda (2, 8192, 16)"]
separate_stages = {k: v for k, v in fused_runs["kda_stages_separate"]["fwd"].items()
                   if k in ("_chunk_cumsum", "_offdiagonal_solve", "_wy_factors")}
separate_ms = sum(separate_stages.values())
fused_ms = {warps: fused_runs[name]["fwd"]["_offdiagonal_solve"]
            for warps, name in ((2, "fused_warps2"), (4, "defaults"), (8, "fused_warps8"))}
print("KDA, B=2 T=8192 H=16, bf16, H200: GPU ms")
print("  three kernels: " + " + ".join(f"{k} {v:.3f}" for k, v in separate_stages.items()) + f" = {separate_ms:.3f}")
for warps, ms in fused_ms.items():
    print(f"  one fused kernel, {warps} warps: {ms:.3f}")
print(f"  whole forward: {fused_runs['kda_stages_separate']['fwd_total_ms']:.3f} separate, "
      f"{fused_runs['defaults']['fwd_total_ms']:.3f} fused (4 warps)")
glue("ch11_fused_ms", f"{min(fused_ms.values()):.3f}", display=False)
glue("ch11_separate_ms", f"{separate_ms:.3f}", display=False)
expect("every fused form was slower than the three kernels it replaced", min(fused_ms.values()) > separate_ms)
expect("4 warps was the fastest fused form: fewer and more were both slower", min(fused_ms, key=fused_ms.get) == 4)

# %% [markdown]
# The best fused form took {glue:text}`ch11_fused_ms` ms against {glue:text}`ch11_separate_ms` for the three kernels,
# and the package keeps the three. Why it lost was not profiled further. A plausible cause, not measured: a program
# that holds the solve's 16×16 blocks, the running sums and then stage 4's $[64, 64]$ tiles needs many registers,
# so fewer programs fit on a multiprocessor at once, and a memory-bound kernel needs many programs in flight to hide
# the latency of its loads. Fewer warps and more warps were both slower still, which that alone does not explain. Saved
# bytes are an argument, not a measurement.

# %% [markdown]
# ### Two loads on the sequential chain
#
# The backward has its own sequential stage, the reverse state pass: chunk by chunk, from the last to the first,
# it forms $dV' = dV'_o + K_{dec} D$ and then $D \leftarrow e^{G_C} D + \text{scale}\,\tilde Q^\top dO - W^\top dV'$.
# Its time is the time of one chunk's step times the number of chunks, so what matters is the latency of the
# step, not its bytes. Triton's pipeliner fetches the operands of `tl.dot` a few iterations ahead, but two loads
# of each step feed no product: $dV'_o$, which is added, and the chunk's decay $e^{G_C}$, which scales $D$. Issued
# in the step that uses them, each waited a full trip to memory inside the chain. The fix is to issue them one
# chunk early, in plain code: load chunk $c-1$'s values while chunk $c$ computes. A sweep of that switch against the
# pipeline depth and the value-block width, the pass's GPU time alone:

# %%
FOURTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02d.json").read_text())
pass_ms = FOURTH["state_pass_sweep"]["ms"]
LONG = "(1, 32768, 16)"
before_key, after_key = "prefetch=0 warps=4 stages=2 BV=auto", "prefetch=1 warps=4 stages=3 BV=16"
pass_rows = {kind: (pass_ms[f"{kind} {LONG}"][before_key], pass_ms[f"{kind} {LONG}"][after_key])
             for kind in ("gated_delta_rule", "delta_rule", "kda")}
print("reverse state pass, B=1 T=32768 H=16 D=128 bf16, H200: GPU ms")
for kind, (before, after) in pass_rows.items():
    print(f"  {kind:<17} loads in the step, 2 stages {before:.3f}   one chunk ahead, 3 stages {after:.3f}")
gdn_sweep = pass_ms[f"gated_delta_rule {LONG}"]
print("Gated DeltaNet, every setting tried (ms):")
for setting, ms in sorted(gdn_sweep.items(), key=lambda kv: kv[1]):
    print(f"  {ms:6.3f}  {setting}")
gated_rows = FOURTH["chunked"]
worst_gated = max(gated_rows, key=lambda r: r["ratio_ops_vs_fla"])
glue("ch11_pass_gdn_before", f"{pass_rows['gated_delta_rule'][0]:.2f}", display=False)
glue("ch11_pass_gdn_after", f"{pass_rows['gated_delta_rule'][1]:.2f}", display=False)
glue("ch11_pass_best_without", f"{min(v for k, v in gdn_sweep.items() if 'prefetch=0' in k):.2f}", display=False)
glue("ch11_gated_worst", f"{worst_gated['ratio_ops_vs_fla']:.2f}", display=False)
glue("ch11_gated_rows", f"{len(gated_rows)}", display=False)
expect("loading one chunk ahead made the pass faster for all three kinds at T = 32768",
       all(after < before for before, after in pass_rows.values()))
expect("no setting without the early loads came within 40 % of the chosen one (Gated DeltaNet, T = 32768)",
       min(v for k, v in gdn_sweep.items() if "prefetch=0" in k) > 1.4 * gdn_sweep[after_key])
expect("3 stages and 16-wide value blocks were the fastest setting tried (Gated DeltaNet, T = 32768)",
       min(gdn_sweep, key=gdn_sweep.get) == after_key)
SHORT = "(2, 8192, 16)"
short_gaps = [pass_ms[f"{kind} {SHORT}"]["prefetch=1 warps=4 stages=3 BV=32"]
              - pass_ms[f"{kind} {SHORT}"]["prefetch=1 warps=4 stages=2 BV=16"] for kind in ("gated_delta_rule", "kda")]
print(f"B=2 T=8192, gated kinds, early loads: 3 stages (BV 32, what state_block_v picks there) minus "
      f"2 stages (BV 16): {', '.join(f'{gap:+.3f}' for gap in short_gaps)} ms")
glue("ch11_pass_short_gap", f"{max(short_gaps):.2f}", display=False)
expect("at B = 2, T = 8192 2 stages were faster for both gated kinds, by less than 0.05 ms",
       all(0 < gap < 0.05 for gap in short_gaps))
expect("every Gated DeltaNet and DeltaNet row of the run is within 1.1x of fla through the public API",
       all(r["ratio_ops_vs_fla"] <= 1.1 for r in gated_rows))

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 4.0))
labels = {"gated_delta_rule": "Gated DeltaNet", "delta_rule": "DeltaNet", "kda": "KDA"}
viz.grouped_barh(ax, [labels[k] for k in pass_rows],
                 [("loads in the step that uses them, 2 stages", [b for b, _ in pass_rows.values()], red),
                  ("dV'_o and the decay one chunk ahead, 3 stages", [a for _, a in pass_rows.values()], blue)])
ax.set_xlabel("GPU time of the reverse state pass (ms)")
ax.set_title("Reverse state pass, B=1 T=32768 H=16 D=128 bf16, H200 (2026-12-02)", fontsize=9)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# For Gated DeltaNet the pass went from {glue:text}`ch11_pass_gdn_before` to {glue:text}`ch11_pass_gdn_after` ms,
# and no setting of warps, stages and width without the early loads did better than
# {glue:text}`ch11_pass_best_without` ms: launch settings could not buy what one moved load did. The settings
# interact, though. With the early loads, 3 stages and 16-wide value blocks were best at this length, while at
# `B = 2, T = 8192` 2 stages with 16-wide blocks were faster for the gated kinds, by up to
# {glue:text}`ch11_pass_short_gap` ms; the package keeps one setting.
# The same run also stopped a small waste: the backward wrote float32 gradients that a separate cast then turned
# into bf16, a full extra pass over dq, dk and dv; the stage that finishes a gradient now writes it in its
# input's dtype. With both changes, all {glue:text}`ch11_gated_rows` Gated DeltaNet and DeltaNet rows of the
# benchmark came within {glue:text}`ch11_gated_worst`× of fla through the public API.

# %% [markdown]
# ### Launch settings, and a narrower remainder that did not pay
#
# After the backward, the KDA forward was the one row still well behind fla. Two of its stages, the off-diagonal
# blocks with the solve and the WY factors, do most of their work in `tl.dot` on small tiles, and for such
# kernels two launch numbers matter: how many warps share a program, and how many loop iterations the pipeliner
# keeps in flight (`num_stages`). A sweep tried each stage under a grid of both, one stage at a time, in
# forward-only calls. Before it, one idea about bytes was measured too: stage 1's remainder $G_{lo}$ is at most
# half a float32 step of $G$, so a bf16 copy of it would keep $G + G_{lo}$ within $2^{-33}|G|$ of the float64
# sum and halve what the off-diagonal and WY stages read of it.

# %%
FIFTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02e.json").read_text())
variant_rows = FIFTH["g_lo_bf16_experiment"]["results"]["kda (2, 8192, 16)"]
old_fwd = variant_rows["g_lo_float32"]["fwd"]       # float32 G_lo: the defaults before this run
bf16_fwd = variant_rows["defaults"]["fwd"]          # the same code with a bf16 G_lo
confirm = FIFTH["confirm_sweeps"]["results"]
kda_short = confirm["kda (2, 8192, 16)"]["per_kernel"]
kda_long = confirm["kda (1, 32768, 16)"]["per_kernel"]
print("bf16 G_lo against float32 G_lo, KDA forward at B=2 T=8192 H=16, GPU ms per kernel:")
for name in ("_chunk_cumsum", "_offdiagonal_solve", "_wy_factors"):
    print(f"  {name:<20} float32 {old_fwd[name]:.3f}   bf16 {bf16_fwd[name]:.3f}")
print(f"  forward in all      float32 {variant_rows['g_lo_float32']['fwd_total_ms']:.3f}   "
      f"bf16 {variant_rows['defaults']['fwd_total_ms']:.3f}")
print("\nsweep (w = warps, s = pipeline stages), GPU ms:")
for shape, table in (("B=2 T=8192", kda_short), ("B=1 T=32768", kda_long)):
    for name in ("_offdiagonal_solve", "_wy_factors"):
        cells = "  ".join(f"{k}={v:.3f}" for k, v in sorted(table[name].items(), key=lambda kv: kv[1]))
        print(f"  {shape:<12} {name:<19} {cells}")
gdn_wy = confirm["gated_delta_rule (1, 32768, 16)"]["per_kernel"]["_wy_factors"]
print(f"  Gated DeltaNet _wy_factors, B=1 T=32768: 1 stage {gdn_wy['w4s1']:.3f}, 3 stages {gdn_wy['w4s3']:.3f}")

spike_sums = spike_gates.cumsum(0)                                 # section 5's chunk, float64
spike_hi = spike_sums.float()
spike_lo_bf16 = (spike_sums - spike_hi.double()).float().bfloat16()
bf16_remainder_error = ((spike_hi.double() + spike_lo_bf16.double() - spike_sums).abs() / spike_sums.abs()).max()
print(f"\nG + G_lo with G_lo in bf16, section 5's spike chunk: largest error {bf16_remainder_error:.1e} |G| "
      f"(2^-33 = {2 ** -33:.1e})")
expect("a bf16 G_lo keeps G + G_lo within 2^-33 |G| of the float64 sum on the spike chunk",
       bf16_remainder_error <= 2 ** -33)
cumsum_cost = bf16_fwd["_chunk_cumsum"] - old_fwd["_chunk_cumsum"]
read_gain = sum(old_fwd[name] - bf16_fwd[name] for name in ("_offdiagonal_solve", "_wy_factors"))
milliseconds = {"glo_cumsum_f32": old_fwd["_chunk_cumsum"], "glo_cumsum_bf16": bf16_fwd["_chunk_cumsum"],
                "glo_read_gain": read_gain, "offdiag_old": old_fwd["_offdiagonal_solve"],
                "offdiag_new": kda_short["_offdiagonal_solve"]["w1s2"], "wy_old": kda_short["_wy_factors"]["w4s3"],
                "wy_new": kda_short["_wy_factors"]["w4s1"], "gdn_wy_s1": gdn_wy["w4s1"], "gdn_wy_s3": gdn_wy["w4s3"]}
for name, ms in milliseconds.items():
    glue(f"ch11_{name}", f"{ms:.3f}", display=False)
expect("a bf16 G_lo cost stage 1 more than it saved in the two stages that read it",
       cumsum_cost > read_gain > 0)
expect("a bf16 G_lo made the forward slower in all",
       variant_rows["defaults"]["fwd_total_ms"] > variant_rows["g_lo_float32"]["fwd_total_ms"])
expect("one warp and 2 stages were the fastest off-diagonal setting at both lengths",
       all(min(t["_offdiagonal_solve"], key=t["_offdiagonal_solve"].get) == "w1s2" for t in (kda_short, kda_long)))
expect("one stage was the fastest WY setting for KDA at both lengths",
       all(min(t["_wy_factors"], key=t["_wy_factors"].get) == "w4s1" for t in (kda_short, kda_long)))
expect("Gated DeltaNet's WY stage was not faster at one stage (so it keeps three)", gdn_wy["w4s1"] >= gdn_wy["w4s3"])

# %% [markdown]
# The remainder in bf16 did what it promised in the stages that read it, {glue:text}`ch11_glo_read_gain` ms
# together, but stage 1, which writes it, went from {glue:text}`ch11_glo_cumsum_f32` to
# {glue:text}`ch11_glo_cumsum_bf16` ms, so it was not kept. A byte count predicts a kernel's time only while
# nothing else limits it; writing bf16 slowed stage 1 for a reason the count does not see, and we have not
# found which. The launch settings paid without any such trade. The off-diagonal stage went from
# {glue:text}`ch11_offdiag_old` ms (32-wide channel slices, 2 warps) to {glue:text}`ch11_offdiag_new` ms with
# 16-wide slices on one warp and 2 stages. A likely reason, which we have not checked in the compiled code: the
# stage keeps twelve 16×16 accumulators live through its whole loop, and a narrower slice leaves them more of
# the registers. KDA's WY stage went from {glue:text}`ch11_wy_old` to {glue:text}`ch11_wy_new` ms at one stage,
# while Gated DeltaNet's WY stage, the same kernel compiled for a scalar gate, was a little slower that way at
# `T = 32768` ({glue:text}`ch11_gdn_wy_s1` against {glue:text}`ch11_gdn_wy_s3` ms) and keeps three: a setting belongs to a
# kernel *and* the constants it is compiled with. Here is the forward, stage by stage, before and after, beside
# fla's kernels for the same stages (fla's profile from the first run of the day, `bench_h200_2026-12-02.json`):

# %%
FIRST = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02.json").read_text())
fla_profile = FIRST["kda_fwd_designs"]["diagonal_blocks_809c14d"]["kda fwd fla"]
fla_kernels = {r["name"]: r["ms_per_call"] for r in fla_profile["kernels"]}
STAGES = [("gate sums", "_chunk_cumsum", "chunk_local_cumsum_vector_kernel"),
          ("diagonal blocks", "_diagonal_rows", "chunk_kda_fwd_kernel_intra_token_parallel"),
          ("off-diagonal + solve", "_offdiagonal_solve", "chunk_kda_fwd_kernel_inter_solve_fused"),
          ("WY factors", "_wy_factors", "recompute_w_u_fwd_kda_kernel"),
          ("state pass", "_state_pass", "chunk_gated_delta_rule_fwd_kernel_h_blockdim64"),
          ("output", "_chunk_output", "chunk_gla_fwd_kernel_o")]
new_fwd = dict(old_fwd, _offdiagonal_solve=kda_short["_offdiagonal_solve"]["w1s2"],
               _wy_factors=kda_short["_wy_factors"]["w4s1"])
print(f"{'stage':<22}{'before':>8}{'after':>8}{'fla':>8}   (GPU ms, KDA forward, B=2 T=8192 H=16 D=128 bf16)")
for label, ours, theirs in STAGES:
    print(f"{label:<22}{old_fwd[ours]:8.3f}{new_fwd[ours]:8.3f}{fla_kernels[theirs]:8.3f}")
fla_other = sum(fla_kernels.values()) - sum(fla_kernels[t] for _, _, t in STAGES)
print(f"{'fla: tensor fills':<22}{'':>8}{'':>8}{fla_other:8.3f}")
sum_new = sum(new_fwd[o] for _, o, _ in STAGES)
print(f"{'sum':<22}{sum(old_fwd[o] for _, o, _ in STAGES):8.3f}{sum_new:8.3f}{sum(fla_kernels.values()):8.3f}")

rows5 = {(r["B"], r["T"], r["mode"]): r for r in FIFTH["chunked"]}
print("\nbenchmark, same process, public ops API / fla 0.6.0 (Triton 3.7.1, bf16):")
for (B, T, mode), r in rows5.items():
    print(f"  {mode:<8} B={B} T={T:<6} {r['k3lite_ops_triton_ms']:.3f} ms  "
          f"fla {r['fla_before_ms']:.3f}/{r['fla_after_ms']:.3f}"
          f"  ratio {r['ratio_ops_vs_fla']:.2f}")
fwd_long = [r["ratio_ops_vs_fla"] for (B, T, mode), r in rows5.items() if mode == "fwd" and T >= 8192]
fwd_short = rows5[(8, 2048, "fwd")]
bwd_rows = [r["ratio_ops_vs_fla"] for (B, T, mode), r in rows5.items() if mode == "fwd+bwd"]
gap_cumsum = new_fwd["_chunk_cumsum"] - fla_kernels["chunk_local_cumsum_vector_kernel"]
fla_faster_short = min(fwd_short["fla_before_ms"], fwd_short["fla_after_ms"])
ratios = {"kda_fwd_long_best": min(fwd_long), "kda_fwd_long_worst": max(fwd_long),
          "kda_fwd_short": fwd_short["ratio_ops_vs_fla"],
          "kda_fwd_short_vs_faster": fwd_short["k3lite_ops_triton_ms"] / fla_faster_short,
          "kda_bwd_worst": max(bwd_rows), "kda_bwd_best": min(bwd_rows),
          "sum_new": sum_new, "sum_fla": sum(fla_kernels.values())}
for name, value in ratios.items():
    glue(f"ch11_{name}", f"{value:.2f}", display=False)
glue("ch11_kda_short_drift", f"{fwd_short['fla_drift']:.0%}", display=False)
glue("ch11_gap_cumsum", f"{gap_cumsum:.3f}", display=False)
expect("the stages' sum after the change matches the benchmark's kernels-alone forward within 3 %",
       abs(sum_new / rows5[(2, 8192, "fwd")]["k3lite_triton_ms"] - 1) < 0.03)
expect("KDA forward+backward is faster than fla at every shape", max(bwd_rows) < 1.0)
expect("the KDA forward at T >= 8192 is still slower than fla (the 0.9x target is not met)", min(fwd_long) > 1.0)
expect("the KDA forward at B = 8, T = 2048 is within 1.1x even of fla's faster timing",
       fwd_short["k3lite_ops_triton_ms"] / fla_faster_short <= 1.1)
stage_gaps = {label: new_fwd[o] - fla_kernels[t] for label, o, t in STAGES}
expect("the diagonal blocks and the WY stage are within 0.05 ms of fla's, the state pass and output within 0.01",
       all(0 < stage_gaps[s] < 0.05 for s in ("diagonal blocks", "WY factors"))
       and all(abs(stage_gaps[s]) < 0.01 for s in ("state pass", "output")))
expect("stage 1 is the largest remaining gap to fla's stage", max(
    new_fwd[o] - fla_kernels[t] for _, o, t in STAGES) == gap_cumsum)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 4.2))
viz.grouped_barh(ax, [label for label, _, _ in STAGES],
                 [("k3lite before (d76577e)", [old_fwd[o] for _, o, _ in STAGES], red),
                  ("k3lite after (39e7873)", [new_fwd[o] for _, o, _ in STAGES], blue),
                  ("fla 0.6.0", [fla_kernels[t] for _, _, t in STAGES], sky)])
ax.set_xlabel("GPU time per call (ms)")
ax.set_title("KDA forward by stage, B=2 T=8192 H=16 D=128 bf16, H200", fontsize=9)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# The stages now sum to {glue:text}`ch11_sum_new` ms against fla's {glue:text}`ch11_sum_fla`. Through the public
# API the forward is {glue:text}`ch11_kda_fwd_long_best`–{glue:text}`ch11_kda_fwd_long_worst`× fla at
# `T ≥ 8192` and {glue:text}`ch11_kda_fwd_short`× at `B = 8, T = 2048` (fla's two timings of that row
# differed by {glue:text}`ch11_kda_short_drift`; against the faster one,
# {glue:text}`ch11_kda_fwd_short_vs_faster`×), and the forward with the backward is faster than fla at every
# shape ({glue:text}`ch11_kda_bwd_best`–{glue:text}`ch11_kda_bwd_worst`×). The target we set ourselves for the
# forward alone, 0.9× at `T ≥ 8192`, is not met. The figure says where the rest sits: the
# largest gap is stage 1, {glue:text}`ch11_gap_cumsum` ms, which is the price of the exact gate sums (then a
# float64 scan, and a second float32 tensor); the diagonal blocks and the WY stage are a few hundredths behind, and
# the state pass and output are level. Beating fla by a tenth here would take more than settings; the next section
# tries three fusions, and the one after it takes the float64 out.

# %% [markdown]
# ### Three fusions, measured and not kept
#
# Each of these removes a launch and some memory traffic. Each was built, checked against the kernels it
# replaced under the interpreter (float32, the same numbers bit for bit; the second and third also on the GPU in
# bf16), and timed against them in forward-only calls on the H200:
#
# 1. **Stage 1 inside the off-diagonal stage**, a narrower form of the fusion above that leaves stage 4 apart.
#    `_offdiagonal_solve` reads every $G$ of its chunk anyway; it could make the float64 sums itself, per
#    {glue:text}`ch11_sub`-row block and {glue:text}`ch11_offdiagonal_bk`-wide channel slice, write
#    $G + G_{lo}$ for the later stages, and take its anchors from the running sums instead of loading them.
# 2. **The output inside the state pass.** When no gradient is wanted, nothing needs the per-chunk states $h_c$
#    or $V'$ after the output is made. The state pass holds both in registers at each chunk, so it could form
#    $O = \text{scale}\,(e^{G} Q) h_c + A_{qk} V'$ there and write neither.
# 3. **Stage 1 beside the diagonal blocks, in one launch.** The two stages are independent (the diagonal blocks
#    sum the raw gates) and unlike: a row program waits on a chain of loads, a gate-sum program streams memory.
#    One 1-D launch, with one program in every {glue:text}`ch11_every_nth` doing gate sums (at `B = 2,
#    T = 8192`), would let each multiprocessor overlap the two.

# %%
SIXTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02f.json").read_text())
in_order = SIXTH["fusions_in_pipeline_order"]["timings"]
one_launch = SIXTH["one_launch"]["timings"]
FUSION_SHAPES = ("(2, 8192, 16)", "(1, 32768, 16)", "(8, 2048, 16)")


def kernel_ms(row, *names):
    return sum(row["kernels"][name] for name in names)


fusions = {}  # name -> shape -> (separate kernels ms, fused kernel ms)
for shape in FUSION_SHAPES:
    apart = one_launch[f"{shape} fwd overlap=False"]          # today's kernels, each on its own
    fusions.setdefault("1. stage 1 in _offdiagonal_solve", {})[shape] = (
        kernel_ms(apart, "_chunk_cumsum", "_offdiagonal_solve"),
        kernel_ms(in_order[f"kda {shape} fwd fused=False"], "_offdiagonal_solve"))
    for kind, label in (("kda", "KDA"), ("gated_delta_rule", "Gated DeltaNet"), ("delta_rule", "DeltaNet")):
        fusions.setdefault(f"2. output in _state_pass, {label}", {})[shape] = (
            kernel_ms(in_order[f"{kind} {shape} fwd fused=False"], "_state_pass", "_chunk_output"),
            kernel_ms(in_order[f"{kind} {shape} fwd fused=True"], "_state_pass"))
    fusions.setdefault("3. stage 1 beside the diagonal rows", {})[shape] = (
        kernel_ms(apart, "_chunk_cumsum", "_diagonal_rows"),
        kernel_ms(one_launch[f"{shape} fwd overlap=True"], "_diagonal_rows_and_gate_sums"))
print("GPU ms, bf16, H = 16, D = 128, H200:    kernels apart -> fused kernel")
print(f"{'':<40}" + "".join(f"{s:>22}" for s in FUSION_SHAPES))
for name, by_shape in fusions.items():
    print(f"{name:<40}" + "".join(f"{a:>10.3f} -> {f:.3f}" for a, f in by_shape.values()))
sweeps = SIXTH["fusions_in_pipeline_order"]["sweep"]
best_offdiag = min(v["_offdiagonal_solve"] for k, v in sweeps.items()
                   if k.startswith("(2, 8192, 16) offdiagonal_solve"))
best_state = min(v["_state_pass"] for k, v in sweeps.items() if k.startswith("(2, 8192, 16) state_output"))
best_one = min(kernel_ms(v, "_diagonal_rows_and_gate_sums") for k, v in one_launch.items()
               if k.startswith("(2, 8192, 16) fwd overlap heads"))
print(f"best launch setting of each fused kernel at B=2 T=8192: {best_offdiag:.3f}, {best_state:.3f}, "
      f"{best_one:.3f} ms")
LONG_SHAPES = FUSION_SHAPES[:2]
expect("every fusion was slower than the kernels it replaced at B=2 T=8192 and B=1 T=32768",
       all(f > a for by_shape in fusions.values() for s, (a, f) in by_shape.items() if s in LONG_SHAPES))
expect("even at its best launch setting, each fused kernel stayed slower at B=2 T=8192",
       best_offdiag > fusions["1. stage 1 in _offdiagonal_solve"]["(2, 8192, 16)"][0]
       and best_state > fusions["2. output in _state_pass, KDA"]["(2, 8192, 16)"][0]
       and best_one > fusions["3. stage 1 beside the diagonal rows"]["(2, 8192, 16)"][0])
short_wins = {name: by_shape["(8, 2048, 16)"] for name, by_shape in fusions.items() if name.startswith("2.")}
expect("the output inside the state pass was faster at B=8 T=2048, for all three kinds",
       all(f < a for a, f in short_wins.values()))
expect("the second and third fusions gave the same output as the kernels apart (bf16, H200)",
       all(v == 0.0 for row in SIXTH["one_launch"]["accuracy"].values() for v in row.values())
       and all(row["o_fused_vs_unfused_maxabs"] == 0.0
               for row in SIXTH["fusions_in_pipeline_order"]["accuracy"].values()))
for tag, name in (("f1", "1. stage 1 in _offdiagonal_solve"), ("f2", "2. output in _state_pass, KDA"),
                  ("f3", "3. stage 1 beside the diagonal rows")):
    apart_ms, fused_ms_ = fusions[name]["(2, 8192, 16)"]
    glue(f"ch11_{tag}_apart", f"{apart_ms:.3f}", display=False)
    glue(f"ch11_{tag}_fused", f"{fused_ms_:.3f}", display=False)
glue("ch11_f2_long", "{:.3f} -> {:.3f}".format(*fusions["2. output in _state_pass, KDA"]["(1, 32768, 16)"]),
     display=False)
glue("ch11_f2_short_gdn", "{:.3f} -> {:.3f}".format(*short_wins["2. output in _state_pass, Gated DeltaNet"]),
     display=False)
glue("ch11_f2_short_kda", "{:.3f} -> {:.3f}".format(*short_wins["2. output in _state_pass, KDA"]), display=False)
glue("ch11_f_best_offdiag", f"{best_offdiag:.3f}", display=False)
glue("ch11_f_best_state", f"{best_state:.3f}", display=False)
glue("ch11_f_best_one", f"{best_one:.3f}", display=False)
best_one_setting = min((k for k in one_launch if k.startswith("(2, 8192, 16) fwd overlap heads")),
                       key=lambda k: kernel_ms(one_launch[k], "_diagonal_rows_and_gate_sums"))
glue("ch11_f_best_one_heads", best_one_setting.split("heads=")[1].split()[0], display=False)

# The facts the explanation below leans on, from the package's own settings at B=2 T=8192 H=16 D=128:
B_, T_, H_, D_ = 2, 8192, 16, 128
state_programs = B_ * H_ * math.ceil(D_ / chunk_fwd.state_block_v(B_ * H_, D_, chunk_fwd.VALUE_TILE))
ROW_HEADS = 2   # heads per program of _diagonal_rows in the sixth run (the tenth replaced that kernel)
row_programs = B_ * T_ * math.ceil(H_ / ROW_HEADS)
sum_programs = math.ceil(T_ / chunk_fwd.CHUNK) * B_ * H_
print(f"state-pass programs {state_programs} on {chunk_fwd.SM_COUNT} multiprocessors; "
      f"chunks per program {T_ // chunk_fwd.CHUNK} (B=2 T=8192) and {32768 // chunk_fwd.CHUNK} (B=1 T=32768)")
print(f"one launch: {row_programs} row programs and {sum_programs} gate-sum programs -> "
      f"1 program in every {math.ceil(row_programs / sum_programs) + 1} sums gates")
print(f"gate-sum tiles: stage 1 {chunk_fwd.CUMSUM_ROWS} x {chunk_fwd.CUMSUM_KEY_TILE}, inside the off-diagonal stage "
      f"{chunk_fwd.SUB} x {chunk_fwd.OFFDIAGONAL_BK}")
glue("ch11_state_programs", str(state_programs), display=False)
glue("ch11_chain_ratio", str((32768 // chunk_fwd.CHUNK) // (T_ // chunk_fwd.CHUNK)), display=False)
glue("ch11_every_nth", f"{math.ceil(row_programs / sum_programs) + 1}", display=False)
for name in ("CUMSUM_ROWS", "CUMSUM_KEY_TILE", "SUB", "OFFDIAGONAL_BK"):
    glue(f"ch11_{name.lower()}", str(getattr(chunk_fwd, name)), display=False)
state_programs_short = 8 * H_ * math.ceil(D_ / chunk_fwd.state_block_v(8 * H_, D_, chunk_fwd.VALUE_TILE))
print(f"state-pass programs at B=8 T=2048: {state_programs_short}")
glue("ch11_state_programs_short", str(state_programs_short), display=False)
expect("the state pass has fewer programs than the H200 has multiprocessors at B=2 T=8192, more at B=8 T=2048",
       state_programs < chunk_fwd.SM_COUNT < state_programs_short)

# %% [markdown]
# None paid where the forward is furthest behind. The clearest case is the second. The state pass is a chain:
# chunk $c+1$ cannot start before chunk $c$'s state is done, so its time is the number of chunks times the
# latency of one step, and at `B = 2, T = 8192` its {glue:text}`ch11_state_programs` programs, at most one per
# multiprocessor, leave most of the GPU's warps idle. Putting the output in the step lengthens every link of the
# chain: the pass went from {glue:text}`ch11_f2_apart` ms for the two kernels to {glue:text}`ch11_f2_fused` ms
# ({glue:text}`ch11_f_best_state` at its best setting), and at `T = 32768`, a chain
# {glue:text}`ch11_chain_ratio` times longer, {glue:text}`ch11_f2_long` ms. The separate output stage, by
# contrast, is fully parallel over chunks and hides inside a GPU that has room. Only with many heads, when the
# pass's programs already outnumber the multiprocessors ({glue:text}`ch11_state_programs_short` at `B = 8,
# T = 2048`), did the fusion gain (KDA {glue:text}`ch11_f2_short_kda`, Gated DeltaNet
# {glue:text}`ch11_f2_short_gdn` ms). Work that is off the critical path belongs off it.
#
# The other two we can describe but not fully explain. Stage 1 inside the off-diagonal stage took that kernel from
# {glue:text}`ch11_f1_apart` ms (its time plus stage 1's) to {glue:text}`ch11_f1_fused` ms
# ({glue:text}`ch11_f_best_offdiag` at its best setting): its float64 scans, on tiles of {glue:text}`ch11_sub`
# rows by {glue:text}`ch11_offdiagonal_bk` channels, cost far more than stage 1's own, on tiles of
# {glue:text}`ch11_cumsum_rows` rows by {glue:text}`ch11_cumsum_key_tile` channels; why, we did not profile.
# The one launch for stage 1 and the diagonal rows took {glue:text}`ch11_f3_fused` ms against
# {glue:text}`ch11_f3_apart` for the two kernels ({glue:text}`ch11_f_best_one` with
# {glue:text}`ch11_f_best_one_heads` heads per row program). A likely part of it, not checked: one kernel is
# compiled for the larger of its two bodies, so every program of both kinds gets that many registers.
#
# The overlap the third fusion wanted can also be asked of the GPU without touching a kernel: launch stage 1 on a
# second CUDA stream while the diagonal rows run on the first, and join the two before the off-diagonal stage.
# Timed through the public API this time: when kernels overlap, their times no longer add up to the call's.

# %%
streams = SIXTH["second_stream"]["timings"]
stream_ms = {shape: {variant: statistics.median(streams[f"{shape} fwd {variant}"]["do_bench_ms"])
                     for variant in ("apart", "side first", "side first, high priority")}
             for shape in FUSION_SHAPES}
print("KDA forward through k3lite.ops.kda.chunked, ms (median of 3 do_bench medians), H200 bf16:")
for shape, by_variant in stream_ms.items():
    print(f"  {shape:<15}" + "   ".join(f"{v}: {ms:.3f}" for v, ms in by_variant.items()))
stream_gain = {shape: 1 - v["side first, high priority"] / v["apart"] for shape, v in stream_ms.items()}
glue("ch11_stream_best_gain", f"{max(stream_gain.values()):.1%}", display=False)
short = stream_ms["(2, 8192, 16)"]
glue("ch11_stream_short_ms", f"{short['apart']:.3f} -> {short['side first, high priority']:.3f}", display=False)
expect("a second stream (high priority) saved at most 3 % of the forward at any shape",
       0 < min(stream_gain.values()) and max(stream_gain.values()) < 0.03)
expect("at high priority the second stream saved more than at default priority, at every shape",
       all(v["side first, high priority"] < v["side first"] < v["apart"] for v in stream_ms.values()))
high = streams["(2, 8192, 16) fwd side first, high priority"]
overlap_ms = high["sum"] - statistics.median(high["do_bench_ms"])
print(f"B=2 T=8192, high priority: the kernels' GPU times sum to {high['sum']:.3f} ms, the call takes "
      f"{statistics.median(high['do_bench_ms']):.3f}: kernels overlapped by about {overlap_ms:.3f} ms")
glue("ch11_stream_overlap_ms", f"{overlap_ms:.3f}", display=False)
expect("with the second stream the kernels' times sum to more than the call's time (they overlapped)",
       overlap_ms > 0)

# %% [markdown]
# It helped, a little: at most {glue:text}`ch11_stream_best_gain` of the forward
# (`B = 2, T = 8192`: {glue:text}`ch11_stream_short_ms` ms), most with the second stream at high priority, where
# the kernels overlapped by about {glue:text}`ch11_stream_overlap_ms` ms (probably because the scheduler then hands
# free slots to stage 1 first; we did not check). That is too little to move any target, and the path was not
# kept: its GPU test did not get device time in the session that measured it. The package keeps its six kernels
# and one stream; the numbers are in `bench_h200_2026-12-02f.json`.

# %% [markdown] slideshow={"slide_type": "subslide"}
# ### Exact sums without float64
#
# That left stage 1 as the largest gap to fla's kernels, and its float64 scan as the suspect: fla sums its gates
# in plain float32 and gives up exactly the digits that stage 1 exists to keep. The float64 can go without the
# digits going with it. When two float32 numbers are added, the rounding error of the sum is itself a float32
# number, and six float32 additions and subtractions recover it *exactly* (Knuth's TwoSum). Carry that error
# along as a second float32 part, and a running sum of pairs `(hi, lo)` holds about twice float32's 24 bits: as
# many as stage 1 ever stored, since it wrote the float64 sum as two float32 tensors anyway. Here it is in
# PyTorch, every operation in float32, in the form the kernel uses to join two pairs:

# %%
def two_sum(a_hi, a_lo, b_hi, b_lo):
    """(a_hi + a_lo) + (b_hi + b_lo) as a float32 pair: hi its float32 rounding, lo what that rounding dropped."""
    s = a_hi + b_hi
    b_virtual = s - a_hi                                  # the part of b_hi that made it into s
    err = (a_hi - (s - b_virtual)) + (b_hi - b_virtual)   # exactly a_hi + b_hi - s
    lo = err + (a_lo + b_lo)
    hi = s + lo
    return hi, lo - (hi - s)


a = torch.tensor(-10000.0081)                             # a running sum just after the spike
b = torch.tensor(-0.0013)                                 # a gentle gate
hi, lo = two_sum(a, torch.zeros(()), b, torch.zeros(()))
exact = a.double() + b.double()                           # two float32 numbers add exactly in float64
print(f"a + b in float32 alone:    {(a + b).item():.10f}  (off by {((a + b).double() - exact).item():+.2e})")
print(f"hi + lo from two float32s: {hi.double().item() + lo.double().item():.10f}  "
      f"(off by {(hi.double() + lo.double() - exact).item():+.2e})")
expect("TwoSum's pair is the exact sum of two float32 numbers", (hi.double() + lo.double()) == exact)
expect("a float32 sum alone drops part of the gentle gate", (a + b).double() != exact)

# %% [markdown]
# Summed down a chunk one gate at a time, the pairs keep every gentle gate after a spike, and the decays formed
# from them part by part (as `_span` forms them) come within $10^{-6}$ of float64. The kernel does the same with
# `tl.associative_scan`, which takes any associative combine function, tuples included, and scans a tile of rows
# in a tree across threads. TwoSum is associative up to the last bits of `lo`, which is all a scan needs here.
# The kernel is the one shown in section 4; its combine function:

# %%
def compensated_cumsum(g):
    """The chunk's running sum of float32 gates as float32 pairs, one gate at a time."""
    hi, lo, his, los = torch.zeros(()), torch.zeros(()), [], []
    for gate in g.float().clamp_min(-1024.0):
        hi, lo = two_sum(hi, lo, gate, torch.zeros(()))
        his.append(hi)
        los.append(lo)
    return torch.stack(his), torch.stack(los)


for spike in ch11.SPIKES:
    chunk = ch11.spike_gates(spike)
    exact_sums = chunk.double().clamp_min(-1024.0).cumsum(0)
    pair_hi, pair_lo = compensated_cumsum(chunk)
    pair_ok = ((pair_hi.double() + pair_lo.double() - exact_sums).abs() <= 1e-12 * exact_sums.abs().max()).all()
    # The package's stage 1 under the interpreter: one chunk, one head, 16 key channels all holding this chunk.
    kernel_hi, kernel_lo = chunk_fwd.gate_sums(chunk[None, :, None, None].expand(1, 64, 1, 16).contiguous(), "kda")
    kernel_ok = ((kernel_hi[0, :, 0].double() + kernel_lo[0, :, 0].double() - exact_sums[:, None]).abs()
                 <= 1e-12 * exact_sums.abs().max()).all()
    decays_ok = ((ch11.decays_from_parts(pair_hi, pair_lo) - ch11.exact_decays(chunk)).abs() <= 1e-6).all()
    one_sum = chunk.clamp_min(-1024.0).cumsum(0)
    one_sum_error = (ch11.decays_from_parts(one_sum, torch.zeros_like(one_sum)) - ch11.exact_decays(chunk)).abs().max()
    print(f"spike {spike:>8.0e}: pairs = float64 sum to 1e-12: {bool(pair_ok)}; kernel the same: {bool(kernel_ok)}; "
          f"decays within 1e-6: {bool(decays_ok)}; one float32 sum's decays off by > 1e-4: {bool(one_sum_error > 1e-4)}")
    expect(f"compensated float32 sums keep the chunk with a {spike:.0e} gate exact",
           bool(pair_ok and kernel_ok and decays_ok and one_sum_error > 1e-4))
show(chunk_fwd._two_sum)

# %% [markdown]
# What it bought, measured on the H200 (`benchmarks/probes/gpu_stage1_probe.py`, stage 1 alone, KDA's gates in float32
# with a −1e4, a −1e6 and a −∞ gate, each form timed twice in one process; `bench_h200_2026-12-02g.json`). Beside
# the kept form: the float64 form it replaced, on the same tiles and on its own best tiles from a sweep; a first
# compensated form that picked the carry out of the scan's last row (about it, below); and the floor, a plain
# float32 scan that writes the same two tensors without compensating anything, so not exact:

# %%
SEVENTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-02g.json").read_text())
PROBE = SEVENTH["stage1_probe"]["second_run"]
STAGE1_FORMS = {"kept: compensated float32 (d4c10f6)": "module BK128 BS8 w1",
                "first compensated form (b366cd8)": "df_masked BK128 BS8 w1",
                "float64, same tiles (before)": "f64 BK128 BS8 w1",
                "float64, its best tiles": "f64 BK32 BS16 w1"}
PROBE_SHAPES = ("(2, 8192, 16)", "(1, 32768, 16)")


def probe_ms(shape, key):
    return statistics.median(run["ms"] for run in PROBE["results"][shape][key])


stage1_ms = {label: {s: probe_ms(s, key) for s in PROBE_SHAPES} for label, key in STAGE1_FORMS.items()}
floor_ms = {s: min(probe_ms(s, k) for k in PROBE["results"][s] if k.startswith("f32floor")) for s in PROBE_SHAPES}
print(f"{'stage 1, GPU ms (H200)':<40}" + "".join(f"{s:>16}" for s in PROBE_SHAPES))
for label, by_shape in stage1_ms.items():
    print(f"{label:<40}" + "".join(f"{by_shape[s]:>16.3f}" for s in PROBE_SHAPES))
print(f"{'floor: float32, no compensation':<40}" + "".join(f"{floor_ms[s]:>16.3f}" for s in PROBE_SHAPES))
exact_everywhere = all(run["max_abs_err_vs_f64"] == 0.0 for shape in PROBE["results"].values()
                       for key, runs in shape.items() if not key.startswith("f32floor") for run in runs)
print(f"every exact form: hi + lo equal to the float64 sums on the probe's gates: {exact_everywhere}")
kept, before = stage1_ms["kept: compensated float32 (d4c10f6)"], stage1_ms["float64, same tiles (before)"]
best64 = stage1_ms["float64, its best tiles"]
for tag, s in (("short", PROBE_SHAPES[0]), ("long", PROBE_SHAPES[1])):
    glue(f"ch11_s1_kept_{tag}", f"{kept[s]:.3f}", display=False)
    glue(f"ch11_s1_f64_{tag}", f"{before[s]:.3f}", display=False)
    glue(f"ch11_s1_best64_{tag}", f"{best64[s]:.3f}", display=False)
    glue(f"ch11_s1_floor_{tag}", f"{floor_ms[s]:.3f}", display=False)
glue("ch11_s1_saving", f"{max(1 - kept[s] / before[s] for s in PROBE_SHAPES):.0%}", display=False)
expect("every exact form matched the float64 sums on the probe's gates", exact_everywhere)
expect("the compensated float32 scan is faster than float64 on its own tiles and on float64's best, at both shapes",
       all(kept[s] < min(before[s], best64[s]) for s in PROBE_SHAPES))
expect("the kept form is closer to the uncompensated floor than to the float64 form, at both shapes",
       all(kept[s] - floor_ms[s] < before[s] - kept[s] for s in PROBE_SHAPES))

# %% [markdown]
# At `B = 2, T = 8192` stage 1 went from {glue:text}`ch11_s1_f64_short` to {glue:text}`ch11_s1_kept_short` ms
# (float64 at its best tiles: {glue:text}`ch11_s1_best64_short`), at `B = 1, T = 32768` from
# {glue:text}`ch11_s1_f64_long` to {glue:text}`ch11_s1_kept_long`, with the same sums to the bit. The floor,
# {glue:text}`ch11_s1_floor_short` and {glue:text}`ch11_s1_floor_long` ms, is what writing two float32 tensors costs
# at all; compensation now costs less than float64 did on top of it. The rest of the gap to fla's stage 1 is that
# second tensor, and the stages that read it.
#
# The first compensated form was as fast, and it did not land. It took the pair carried to the next tile out of
# the scan's last row with masked sums. Triton 3.7.1 compiled that; Triton 3.6.0, the one installed on the GPU
# machine, failed to compile it for bf16 and fp16 gates ("operand #1 does not dominate this use"), and a GPU test
# found it. The kept form reduces the tile's gates to one pair with `tl.reduce` and the same TwoSum instead. A
# compiler bug that depends on the version and the dtype is cheap to find without a GPU: Triton's compiler runs
# on any machine down to PTX and `ptxas`, and `benchmarks/probes/compile_sm90.py` compiles stage 1 for Hopper at every gate
# dtype and width under whichever Triton is importable. Both versions compile the kept form.
#
# ### The whole table, in one run
#
# Finally, every row of the benchmark in one call of `python -m benchmarks.bench` (on the commit before the carry fix;
# the KDA forward then timed again on the fix), through the public API and through the kernels alone, fla
# before and after in the same process. The last two columns compare against fla's mean and against its faster
# timing, since fla's first timing of some rows was far slower than its second:

# %%
print(f"{'kind':<17}{'B':>2}{'T':>6} {'mode':<8}{'ops ms':>8}{'kernels':>8}{'fla 1st/2nd':>14}"
      f"{'ops/kernels':>12}{'vs mean':>8}{'vs faster':>10}")
table_rows = SEVENTH["chunked"]
for r in table_rows:
    faster = min(r["fla_before_ms"], r["fla_after_ms"])
    print(f"{r['kind']:<17}{r['B']:>2}{r['T']:>6} {r['mode']:<8}{r['k3lite_ops_triton_ms']:>8.3f}"
          f"{r['k3lite_triton_ms']:>8.3f}{r['fla_before_ms']:>7.3f}/{r['fla_after_ms']:.3f}"
          f"{r['ops_over_kernels']:>12.3f}{r['ratio_ops_vs_fla']:>8.2f}{r['k3lite_ops_triton_ms'] / faster:>10.2f}")
recheck = {(r["B"], r["T"]): r for r in SEVENTH["kda_forward_recheck"]["chunked"]}
print(f"KDA forward on {SEVENTH['kda_forward_recheck']['commit']}: " + ", ".join(
    f"B={B} T={T} {r['k3lite_ops_triton_ms']:.3f} ms ({r['ratio_ops_vs_fla']:.2f}x)" for (B, T), r in recheck.items()))
for r in SEVENTH["decode"]:
    print(f"decode B={r['B']}: kda.step {r['ops_step_triton_ms']:.4f} ms = {r['ops_tb_per_s']:.2f} TB/s of state "
          f"(kernel alone {r['tb_per_s']:.2f}, in place {r['ops_inplace_tb_per_s']:.2f})")
api_cost = {(r["kind"], r["B"], r["T"], r["mode"]): r["ops_over_kernels"] for r in table_rows}
over = {key: v for key, v in api_cost.items() if v > 1.05}
print("rows where the API cost more than 5 % over the kernels: " + ", ".join(
    f"{kind} B={B} T={T} {mode} {value:.3f}" for (kind, B, T, mode), value in over.items()))
kda_fwd_long = [r["ratio_ops_vs_fla"] for r in recheck.values() if r["T"] >= 8192]
big_decode = max(SEVENTH["decode"], key=lambda r: r["B"])
glue("ch11_t7_rows", str(len(table_rows)), display=False)
glue("ch11_t7_over_rows", str(len(over)), display=False)
(over_kind, over_B, over_T, over_mode), over_value = next(iter(over.items()))
glue("ch11_t7_over_row", f"{over_kind.replace('_', ' ')} {over_mode} at B = {over_B}, T = {over_T}", display=False)
glue("ch11_t7_over_value", f"{over_value:.3f}", display=False)
glue("ch11_t7_api_worst_other", f"{max(v for k, v in api_cost.items() if k not in over):.3f}", display=False)
glue("ch11_t7_kda_fwd_long", f"{min(kda_fwd_long):.2f}–{max(kda_fwd_long):.2f}", display=False)
glue("ch11_t7_decode_tbs", f"{big_decode['ops_tb_per_s']:.2f}", display=False)
glue("ch11_t7_kda_both", "{:.2f}–{:.2f}".format(*(f([r["ratio_ops_vs_fla"] for r in table_rows if r["kind"] == "kda"
                                                      and r["mode"] == "fwd+bwd"]) for f in (min, max))), display=False)
expect("every row but one: the API within 5 % of the kernels alone", len(over) == 1)
expect("KDA forward at T >= 8192 still slower than fla on the carry fix (the 0.9x target is not met)",
       min(kda_fwd_long) > 1.0)
expect("KDA forward+backward faster than fla at every shape",
       all(r["ratio_ops_vs_fla"] < 1 for r in table_rows if r["kind"] == "kda" and r["mode"] == "fwd+bwd"))
expect("decode through kda.step moves the state at >= 3.6 TB/s at the larger batch", big_decode["ops_tb_per_s"] >= 3.6)

# %% [markdown]
# Of the {glue:text}`ch11_t7_rows` rows, the public API costs at most {glue:text}`ch11_t7_api_worst_other` of the
# kernels' time in all but {glue:text}`ch11_t7_over_rows`: {glue:text}`ch11_t7_over_row`, at
# {glue:text}`ch11_t7_over_value`, where the API does nothing the other rows do not. One timing is not enough to
# call it a cost or noise, and the session ran out of device time before a second. Decode through `kda.step` moves
# the state at {glue:text}`ch11_t7_decode_tbs` TB/s; KDA forward+backward takes {glue:text}`ch11_t7_kda_both`× fla's
# time. The KDA forward at `T ≥ 8192` is {glue:text}`ch11_t7_kda_fwd_long`× fla's: still short of
# the 0.9× we aimed for. That target asked for exact gate sums *and* a forward a tenth faster than a
# library that does not keep them; after the float64 went, what stands between the two is the second float32
# tensor, written once and read by two stages.

# %% [markdown]
# ### The second tensor, written only where it counts
#
# Does a bf16 run need that second tensor at all? Drop $G_{lo}$ from both ends of a span and the span is the
# difference of two float32 roundings, each off by at most half a float32 step of its own $|G|$. Below a threshold
# (`chunk_fwd.LO_FROM_HALF`, {glue:text}`ch11_lo_from`) a float32 step is at most {glue:text}`ch11_lo_step`, so the
# exponent moves by at most that and the decay by a relative $e^{\text{step}} - 1$. The output it feeds is rounded
# to bf16 anyway. Computed, then tried on gates:

# %%
LO_FROM = chunk_fwd.LO_FROM_HALF
step_below = (torch.nextafter(torch.tensor(-LO_FROM), torch.tensor(0.0)) + LO_FROM).abs().item()  # spacing just below 256
decay_bound = math.expm1(step_below)
bf16_rounding = torch.finfo(torch.bfloat16).eps / 2
fp16_rounding = torch.finfo(torch.float16).eps / 2
print(f"float32 step just below |G| = {LO_FROM:.0f}: 2^{math.log2(step_below):.0f}; decay moves by at most "
      f"{decay_bound:.2e} relative; bf16 rounds by {bf16_rounding:.2e} ({bf16_rounding / decay_bound:.0f}x more), "
      f"fp16 by {fp16_rounding:.2e} ({fp16_rounding / decay_bound:.0f}x)")


def worst_decay_error_without_lo(g):
    """Largest relative error of exp(G_r - G_c), c <= r, both sums below LO_FROM, over one chunk of gates when only
    the float32 rounding of the sums is kept (G_lo dropped), against float64."""
    exact = g.double().clamp_min(-1024.0).cumsum(0)
    rounded = exact.float().double()
    r, c = torch.tril_indices(len(g), len(g))
    below = (exact[r].abs() < LO_FROM) & (exact[c].abs() < LO_FROM)
    err = ((rounded[r] - rounded[c]) - (exact[r] - exact[c])).abs()
    return torch.expm1(err[below]).max().item()


seed_everything(0)
gate_sets = {"benchmark's KDA gates, -5 sigmoid(randn - 2)": -5 * torch.sigmoid(torch.randn(64, 128) - 2),
             "strong gates, -16 rand": -16 * torch.rand(64, 128)}
worst_error = {label: max(worst_decay_error_without_lo(gates[:, ch]) for ch in range(gates.shape[1]))
               for label, gates in gate_sets.items()}
share_kept = {label: (gates.clamp_min(-1024).cumsum(0).abs() >= LO_FROM).float().mean().item()
              for label, gates in gate_sets.items()}

# %%
# NBVAL_IGNORE_OUTPUT
# The raw numbers (the last digits of random gates may differ between processors' float paths; the checks below
# are what the notebook tests compare).
for label in gate_sets:
    print(f"{label:<46} worst decay error without G_lo below {LO_FROM:.0f}: {worst_error[label]:.1e};  "
          f"sums that reach {LO_FROM:.0f} (keep G_lo): {share_kept[label]:.0%}")

# %%
for label in gate_sets:
    expect(f"{label}: dropping G_lo below {LO_FROM:.0f} stays within the computed bound",
           worst_error[label] <= decay_bound)
expect("the benchmark's gates never reach the threshold within a chunk; the strong ones in a third to two thirds",
       share_kept["benchmark's KDA gates, -5 sigmoid(randn - 2)"] == 0
       and 1 / 3 < share_kept["strong gates, -16 rand"] < 2 / 3)
glue("ch11_lo_bound", f"{decay_bound:.1e}", display=False)
glue("ch11_lo_from", f"{LO_FROM:.0f}", display=False)
glue("ch11_lo_step", f"2^{math.log2(step_below):.0f}", display=False)
glue("ch11_lo_margin", f"{bf16_rounding / decay_bound:.0f}", display=False)
expect("the bound is at least 100x below bf16's rounding", bf16_rounding / decay_bound >= 100)

# %% [markdown]
# The decay moves by at most {glue:text}`ch11_lo_bound`, {glue:text}`ch11_lo_margin` times less than bf16's own
# rounding. So since 111a155, for KDA with bf16 or fp16 inputs, stage 1 writes $G_{lo}$ only where
# $|G| \ge$ {glue:text}`ch11_lo_from` (`chunk_fwd.gate_lo_from`); a spike of −1e4, a −∞ floored to −1024, or
# strong gates over a chunk still get it, and the spans through them stay exact. Float32 inputs keep it
# everywhere, and so does Gated DeltaNet, whose $G_{lo}$ is one number per head and token. The rule lives in one
# function, `_lo_kept`: stage 1 writes where it holds, every stage that reads $G_{lo}$ takes it only there (most
# through `_load_lo`, shown below), and the forward hands its threshold to the backward. The CPU tests fill $G_{lo}$'s memory with
# NaN before stage 1 runs, so a stage that read an entry stage 1 skipped would show. The rule, run in float32 under
# the interpreter:

# %%
strong = -16 * torch.rand(1, 64, 1, 16)
hi_all, lo_all = chunk_fwd.gate_sums(strong, "kda")
hi_rule, lo_rule = chunk_fwd.gate_sums(strong, "kda", lo_from=LO_FROM)
written = hi_rule.abs() >= LO_FROM
print(f"entries with |G| >= {LO_FROM:.0f}: {written.sum().item()} of {written.numel()}; G the same: "
      f"{torch.equal(hi_rule, hi_all)}; G_lo the same where written: {torch.equal(lo_rule[written], lo_all[written])}")
expect("the rule changes nothing stage 1 writes", torch.equal(hi_rule, hi_all)
       and torch.equal(lo_rule[written], lo_all[written]) and 0 < written.sum().item() < written.numel())
show(chunk_fwd._lo_kept)

# %%
show(chunk_fwd._load_lo_whole)

# %% [markdown]
# The readers came in two forms, both measured (`bench_h200_2026-12-04.json`: three calls of
# `python -m benchmarks.bench --kinds kda --sections profile,fwd,fwd+bwd`, each on a freshly started H200). The first
# masked the load by $|G|$ itself, so skipped entries are never fetched; the form kept that day loads the tile whole
# and selects, as above (today the backward's form, `_load_lo_whole`; the next section says why). GPU ms per call
# of the stages that changed, at `B = 2, T = 8192`, then the whole calls through the public API at every shape:

# %%
EIGHTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04.json").read_text())["runs"]
FORMS = {"before (87b96dc)": "before", "masked loads (not kept)": "masked_loads", "whole tile, select (kept)": "kept"}
CHANGED = ["_chunk_cumsum", "_offdiagonal_solve", "_wy_factors", "_bwd_intra"]


def stage_ms(run, mode, name):
    return next(r["ms_per_call"] for r in EIGHTH[run]["kda_profile_2x8192x16"][mode] if r["name"] == name)


def kda_row8(run, shape, mode):
    return next(r for r in EIGHTH[run]["chunked"] if r["kind"] == "kda" and (r["B"], r["T"]) == shape
                and r["mode"] == mode)


SHAPES8 = [(2, 8192), (1, 32768), (8, 2048)]
print(f"{'':<28}" + "".join(f"{n + (' (fwd)' if n != '_bwd_intra' else ''):>26}" for n in CHANGED))
for label, run in FORMS.items():
    print(f"{label:<28}" + "".join(f"{stage_ms(run, 'fwd+bwd' if n == '_bwd_intra' else 'fwd', n):>26.3f}"
                                   for n in CHANGED))
print(f"\n{'public API, ms (x fla)':<28}" + "".join(f"{f'{m} B={B} T={T}':>21}" for B, T in SHAPES8
                                                   for m in ("fwd", "fwd+bwd")))
for label, run in FORMS.items():
    print(f"{label:<28}" + "".join(f"{kda_row8(run, s, m)['k3lite_ops_triton_ms']:>13.3f} "
                                   f"({kda_row8(run, s, m)['ratio_ops_vs_fla']:.2f}x)"
                                   for s in SHAPES8 for m in ("fwd", "fwd+bwd")))
fla_second = [kda_row8(run, (2, 8192), "fwd")["fla_after_ms"] for run in FORMS.values()]
print(f"\nfla's second forward timing at B=2 T=8192 in the three calls: "
      + ", ".join(f"{x:.3f}" for x in fla_second) + " ms")


def change(run, mode, name):
    return stage_ms(run, mode, name) - stage_ms("before", mode, name)


for run in ("masked_loads", "kept"):
    glue(f"ch11_lo_s1_{run}", f"{stage_ms(run, 'fwd', '_chunk_cumsum'):.3f}", display=False)
    glue(f"ch11_lo_intra_{run}", f"{stage_ms(run, 'fwd+bwd', '_bwd_intra'):.3f}", display=False)
glue("ch11_lo_s1_before", f"{stage_ms('before', 'fwd', '_chunk_cumsum'):.3f}", display=False)
glue("ch11_lo_intra_before", f"{stage_ms('before', 'fwd+bwd', '_bwd_intra'):.3f}", display=False)
glue("ch11_lo_readers_kept", f"{change('kept', 'fwd', '_offdiagonal_solve') + change('kept', 'fwd', '_wy_factors'):+.3f}",
     display=False)
kept_fwd = {s: kda_row8("kept", s, "fwd")["ratio_ops_vs_fla"] for s in SHAPES8}
kept_both = [kda_row8("kept", s, "fwd+bwd")["ratio_ops_vs_fla"] for s in SHAPES8]
before_both = [kda_row8("before", s, "fwd+bwd")["ratio_ops_vs_fla"] for s in SHAPES8]
glue("ch11_lo_fwd_long", f"{kept_fwd[(2, 8192)]:.2f}× / {kept_fwd[(1, 32768)]:.2f}×", display=False)
glue("ch11_lo_both_before", f"{min(before_both):.2f}–{max(before_both):.2f}", display=False)
glue("ch11_lo_both_kept", f"{min(kept_both):.2f}–{max(kept_both):.2f}", display=False)
glue("ch11_lo_fla_spread", f"{(max(fla_second) - min(fla_second)) / min(fla_second):.1%}", display=False)
expect("stage 1 wrote faster in both forms than before",
       all(change(run, "fwd", "_chunk_cumsum") < 0 for run in ("masked_loads", "kept")))
expect("masked loads made the backward's intra-chunk stage slower, and forward+backward slower at every shape",
       change("masked_loads", "fwd+bwd", "_bwd_intra") > 0 and all(
           kda_row8("masked_loads", s, "fwd+bwd")["k3lite_ops_triton_ms"]
           > kda_row8("before", s, "fwd+bwd")["k3lite_ops_triton_ms"] for s in SHAPES8))
expect("the kept form made forward+backward faster at every shape",
       all(kda_row8("kept", s, "fwd+bwd")["k3lite_ops_triton_ms"] < kda_row8("before", s, "fwd+bwd")["k3lite_ops_triton_ms"]
           for s in SHAPES8))
expect("the kept form's forward is within 1 % of before at every shape (no gain)",
       all(abs(kda_row8("kept", s, "fwd")["k3lite_ops_triton_ms"] / kda_row8("before", s, "fwd")["k3lite_ops_triton_ms"]
               - 1) < 0.01 for s in SHAPES8))
expect("the KDA forward at T >= 8192 is still slower than fla (the 0.9x target is not met)",
       min(kept_fwd[(2, 8192)], kept_fwd[(1, 32768)]) > 1.0)
expect("fla's second timing agreed within 1 % across the three calls", max(fla_second) / min(fla_second) < 1.01)
expect("masked loads made the forward faster than before at every shape",
       all(kda_row8("masked_loads", s, "fwd")["k3lite_ops_triton_ms"] < kda_row8("before", s, "fwd")["k3lite_ops_triton_ms"]
           for s in SHAPES8))
readers_kept = change("kept", "fwd", "_offdiagonal_solve") + change("kept", "fwd", "_wy_factors")
expect("in the kept form the two reading stages lost within 0.01 ms of what stage 1 gained",
       abs(readers_kept + change("kept", "fwd", "_chunk_cumsum")) < 0.01)

# %% [markdown]
# How far apart are two calls on two machines? The kernels that this change did not touch give the answer:

# %%
UNTOUCHED = ["_diagonal_rows", "_state_pass", "_chunk_output"]
spread = max(abs(change(run, "fwd", n)) for run in ("masked_loads", "kept") for n in UNTOUCHED)
kept_profile = sorted(EIGHTH["kept"]["kda_profile_2x8192x16"]["fwd"], key=lambda r: -r["ms_per_call"])
print("untouched kernels, GPU ms (before / masked loads / kept): " + "; ".join(
    f"{n} " + " / ".join(f"{stage_ms(run, 'fwd', n):.3f}" for run in FORMS.values()) for n in UNTOUCHED))
print("the kept forward's largest kernels: " + ", ".join(f"{r['name']} {r['ms_per_call']:.3f}" for r in kept_profile[:3]))
glue("ch11_lo_spread", f"{spread:.3f}", display=False)
glue("ch11_lo_offdiag_kept", f"{change('kept', 'fwd', '_offdiagonal_solve'):+.3f}", display=False)
expect("the untouched kernels moved by less than 0.005 ms between the calls", spread < 0.005)
expect("the kept form's off-diagonal stage slowed by more than that spread",
       change("kept", "fwd", "_offdiagonal_solve") > 2 * spread)
expect("the three largest forward kernels are the diagonal blocks, the off-diagonal products and the state pass",
       {r["name"] for r in kept_profile[:3]} == {"_diagonal_rows", "_offdiagonal_solve", "_state_pass"})

# %% [markdown]
# Stage 1 did what was asked of it: with the benchmark's gates no sum reaches the threshold, nothing of $G_{lo}$ is
# written, and the stage went from {glue:text}`ch11_lo_s1_before` to {glue:text}`ch11_lo_s1_kept` ms. The forward as a whole
# did not move. With masked loads it gained a little, but the backward's intra-chunk stage, which reads $G_{lo}$ for
# every block and anchor, went from {glue:text}`ch11_lo_intra_before` to {glue:text}`ch11_lo_intra_masked_loads` ms. A mask that
# depends on the loaded data differs from element to element, so the compiler cannot merge neighbouring loads
# into one wide load. The kept form keeps the wide loads. Its forward lost
# {glue:text}`ch11_lo_readers_kept` ms in the two stages that read $G_{lo}$, about what stage 1 gained (the
# off-diagonal stage alone {glue:text}`ch11_lo_offdiag_kept`), and its
# intra-chunk backward came down to {glue:text}`ch11_lo_intra_kept` ms. We have not found why; reading the compiled
# code is the next step. So the training step got faster, forward+backward from {glue:text}`ch11_lo_both_before` to
# {glue:text}`ch11_lo_both_kept`× fla's time, and the forward at `T ≥ 8192` stayed at
# {glue:text}`ch11_lo_fwd_long` fla's. The three calls ran on freshly started machines, but they are comparable:
# fla's own second timing differed by {glue:text}`ch11_lo_fla_spread` between them, and the kernels the change
# did not touch by at most {glue:text}`ch11_lo_spread` ms, so the readers' losses are real. The gap that remains is
# not the bytes of the gate sums. It is in the three largest kernels, the ones that do the work: the diagonal
# blocks, the off-diagonal products and the state pass.

# %% [markdown]
# ### Each reader in the form that won, measured on one machine
#
# The two forms above each won on one side: masked loads in the forward, the whole tile and a select in the
# backward's intra-chunk stage. So now each side has its own: `_load_lo` masks the load by the rule (the forward's
# off-diagonal and WY stages), `_load_lo_whole` is the form above (the backward). Stage 1's value check changed
# too: it counted the gates that are not $\le 0$, now it keeps the largest gate seen in each tile position,
# NaN kept, one `max.NaN` instruction per gate; a count needs a compare, a convert and an add.
#
# The gains we hope for are about a hundredth of a millisecond per kernel. Is that more than the difference between
# two machines? This time every form was timed beside the old code on the same machine (`benchmarks/probes/gpu_ab.py`: the
# package of 887e6db, copied, then a candidate, each in its own process, fla timed before and after), in three
# calls on three machines. So the old code's own kernels answer the question: timed on three machines, and twice on
# one.

# %%
show(chunk_fwd._load_lo)

# %%
NINTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04b.json").read_text())
AB = NINTH["same_machine_ab"]
base9, kept9 = AB["call_3"]["base_887e6db"], AB["call_3"]["kept_form"]
S8 = "(2, 8192, 16)"
AB_SHAPES = ["(2, 8192, 16)", "(1, 32768, 16)", "(8, 2048, 16)"]


def ab_ms(form, shape, mode, kernel=None):
    row = form["rows"][f"{shape} {mode}"]
    return row["api_ms"] if kernel is None else row["kernels"][kernel]


OLD_KERNELS = sorted(base9["rows"][f"{S8} fwd"]["kernels"])
OLD_KERNELS = [n for n in OLD_KERNELS if n.startswith("_")]   # the package's own kernels, not PyTorch's assert
calls = ["call_1", "call_2", "call_3"]
across = {n: [ab_ms(AB[c]["base_887e6db"], S8, "fwd", n) for c in calls] for n in OLD_KERNELS}
twice = {n: max(abs(ab_ms(AB[c]["base_887e6db"], S8, "fwd", n) - ab_ms(AB[c]["base_887e6db_again"], S8, "fwd", n))
                for c in calls[:2]) for n in OLD_KERNELS}
print(f"{'887e6db, forward kernels, GPU ms (B=2 T=8192)':<46}{'three machines':>24}"
      f"{'one machine, twice: largest gap':>34}")
for n in OLD_KERNELS:
    print(f"{n:<46}{' / '.join(f'{x:.3f}' for x in across[n]):>24}{twice[n]:>34.4f}")
spread_across = max(max(v) - min(v) for v in across.values())
spread_twice = max(twice.values())
widest = max(across, key=lambda n: max(across[n]) - min(across[n]))
expect("the same code moved more than five times as much between machines as between two timings on one machine",
       spread_across > 5 * spread_twice)
gains = [ab_ms(base9, S8, "fwd", n) - ab_ms(kept9, S8, "fwd", n) for n in ("_offdiagonal_solve", "_wy_factors")]
expect("between machines the same code moved by more than half of the smaller reader's gain",
       spread_across > min(gains) / 2)
glue("ch11_ab_across", f"{spread_across:.3f}", display=False)
glue("ch11_ab_across_kernel", widest, display=False)
glue("ch11_ab_twice", f"{spread_twice:.4f}", display=False)

# %% [markdown]
# The same kernels moved by up to {glue:text}`ch11_ab_across` ms from machine to machine
# ({glue:text}`ch11_ab_across_kernel`), the size of the gains below; timed twice on one machine, by at most
# {glue:text}`ch11_ab_twice` ms. So each comparison below is between two forms timed in the same call.

# %%

CHANGED9 = [("_chunk_cumsum", "fwd"), ("_offdiagonal_solve", "fwd"), ("_wy_factors", "fwd"), ("_bwd_intra", "fwd+bwd")]
print("GPU ms at B=2 T=8192:" + "".join(f"{n:>20}" for n, _ in CHANGED9))
for label, form in (("887e6db", base9), ("now", kept9)):
    print(f"{label:<21}" + "".join(f"{ab_ms(form, S8, m, n):>20.3f}" for n, m in CHANGED9))
print("\npublic API, ms:" + "".join(f"{s[1:-5] + ' ' + m:>22}" for s in AB_SHAPES for m in ("fwd", "fwd+bwd")))
for label, form in (("887e6db", base9), ("now", kept9)):
    print(f"{label:<15}" + "".join(f"{ab_ms(form, s, m):>22.3f}" for s in AB_SHAPES for m in ("fwd", "fwd+bwd")))
fla9 = {s: (kept9["fla_fwd"][s]["before"] + kept9["fla_fwd"][s]["after"]) / 2 for s in AB_SHAPES}
fwd_ratio9 = {s: ab_ms(kept9, s, "fwd") / fla9[s] for s in AB_SHAPES}
print("\nforward / fla, same machine: " + ", ".join(f"{s[1:-5]} {r:.2f}x" for s, r in fwd_ratio9.items()))
stage1_count, stage1_max = AB["call_2"]["candidate"]["stage1"], kept9["stage1"]
UNCHECKED, CHECKED = "check=False lo_from=256.0", "check=True lo_from=256.0"   # bf16's rule: no G_lo written
print(f"stage 1 alone, ms: no check {stage1_count[UNCHECKED]:.3f}, count {stage1_count[CHECKED]:.3f} (one call); "
      f"no check {stage1_max[UNCHECKED]:.3f}, largest gate {stage1_max[CHECKED]:.3f} (another)")
check_cost = {"count": stage1_count[CHECKED] - stage1_count[UNCHECKED],
              "max": stage1_max[CHECKED] - stage1_max[UNCHECKED]}
expect("the new form is faster through the public API at every shape, forward and forward+backward",
       all(ab_ms(kept9, s, m) < ab_ms(base9, s, m) for s in AB_SHAPES for m in ("fwd", "fwd+bwd")))
expect("the masked loads made both forward readers faster, and the backward's stage did not change by more than 1 %",
       all(ab_ms(kept9, S8, "fwd", n) < ab_ms(base9, S8, "fwd", n) for n in ("_offdiagonal_solve", "_wy_factors"))
       and abs(ab_ms(kept9, S8, "fwd+bwd", "_bwd_intra") / ab_ms(base9, S8, "fwd+bwd", "_bwd_intra") - 1) < 0.01)
expect("the new check costs less than a third of what the count did", check_cost["max"] < check_cost["count"] / 3)
expect("outputs and gradients are exactly as accurate as before (bf16 against the float32 pipeline)",
       kept9["accuracy"] == base9["accuracy"])
expect("the forward at T >= 8192 is still behind fla on the same machine",
       min(fwd_ratio9[s] for s in AB_SHAPES[:2]) > 1)
latest9 = {(r["B"], r["T"], r["mode"]): r for r in NINTH["runs"]["kept"]["chunked"]}
both9 = [latest9[(B, T, "fwd+bwd")]["ratio_ops_vs_fla"] for B, T in [(2, 8192), (1, 32768), (8, 2048)]]
glue("ch11_ab_fwd_gain", f"{ab_ms(base9, S8, 'fwd'):.3f} -> {ab_ms(kept9, S8, 'fwd'):.3f}", display=False)
glue("ch11_ab_fwd_long", f"{fwd_ratio9[S8]:.2f}", display=False)
glue("ch11_ab_fwd_32k", f"{fwd_ratio9['(1, 32768, 16)']:.2f}", display=False)
glue("ch11_ab_both", f"{min(both9):.2f}–{max(both9):.2f}", display=False)
glue("ch11_ab_check_count", f"{check_cost['count']:.3f}", display=False)
glue("ch11_ab_check_max", f"{check_cost['max']:.3f}", display=False)

# %% [markdown]
# Each reader gained, the backward stayed where it was, and the check now costs
# {glue:text}`ch11_ab_check_max` ms instead of {glue:text}`ch11_ab_check_count`. The forward at `B = 2, T = 8192`
# went from {glue:text}`ch11_ab_fwd_gain` ms: {glue:text}`ch11_ab_fwd_long`× fla's time on the same machine
# ({glue:text}`ch11_ab_fwd_32k`× at `T = 32768`), still short of the 0.9× we set ourselves. The largest stage
# left is the diagonal blocks. The same calls tried three ways to make it faster, and one more way to skip $G_{lo}$:

# %%
TRIED = [("G_lo switched per tile", AB["call_1"], "candidate", "_wy_factors", "_wy_factors"),
         ("diagonal rows stored once", AB["call_1"], "candidate", "_diagonal_rows", "_diagonal_rows"),
         ("diagonal blocks by levels", AB["call_2"], "candidate", "_diagonal_rows", "_diagonal_blocks"),
         ("... on channel slices", AB["call_3"], "diagonal_levels_sliced", "_diagonal_rows", "_diagonal_blocks")]
print(f"{'candidate':<28}{'kernel before, ms':>20}{'candidate, ms':>16}{'best setting, ms':>18}")
slower = {}
for label, call, key, before_name, name in TRIED:
    before = ab_ms(call["base_887e6db"], S8, "fwd", before_name)
    after = ab_ms(call[key], S8, "fwd", name)
    best = min(call[key]["diagonal"].values()) if name != "_wy_factors" else after
    slower[label] = best / before
    print(f"{label:<28}{before:>20.3f}{after:>16.3f}{best:>18.3f}")
row_exps = sum(p + 1 for p in range(chunk_fwd.SUB)) / chunk_fwd.SUB
level_exps = math.log2(chunk_fwd.SUB)
print(f"exponentials per row and channel: walking the row {row_exps:.1f} on average, by levels {level_exps:.0f}")
expect("every candidate was slower than the kernel it replaced, even at its best launch setting",
       all(r > 1 for r in slower.values()))
expect("the levels need about half the exponentials of the row walk", 1.5 < row_exps / level_exps < 2.5)
glue("ch11_levels_slower", f"{min(slower['diagonal blocks by levels'], slower['... on channel slices']):.1f}–"
     f"{max(slower['diagonal blocks by levels'], slower['... on channel slices']):.1f}", display=False)
glue("ch11_row_exps", f"{row_exps:.1f}", display=False)
glue("ch11_level_exps", f"{level_exps:.0f}", display=False)

# %% [markdown]
# Switching the $G_{lo}$ load on or off per tile (on when any entry of the tile was written) kept the loads wide,
# but each reader must first reduce its tile to that one answer, and it lost more than the bytes saved. Storing a
# row of the diagonal block once, instead of one store per pair, was slower too. The last two are the more
# interesting failure. They compute the diagonal blocks as the backward does: four levels of pairs, each level's
# pairs through one anchor row, {glue:text}`ch11_level_exps` exponentials per row and channel instead of
# {glue:text}`ch11_row_exps`, and the sums on tensor cores. On paper that is less work; measured, it was
# {glue:text}`ch11_levels_slower` times slower at its best setting. Why? The compiler can tell us without a GPU:
# `benchmarks/probes/kernel_registers.py` compiles both forms for the H200 (sm90) and asks `ptxas`, NVIDIA's assembler,
# how many registers each thread needs. A multiprocessor has 65,536 registers; the more each thread takes, the
# fewer warps fit on it at once, and a kernel that mostly waits on loads needs many warps to hide the wait.

# %%
COUNTS = NINTH["diagonal_registers"]["rows"]
print(f"{'kernel':<40}{'warps':>6}{'registers':>11}{'spilled, B':>12}{'warps per SM':>14}")
for r in COUNTS:
    print(f"{r['kernel']:<40}{r['num_warps']:>6}{r['registers']:>11}{r['spill_store_bytes']:>12}"
          f"{r['resident_warps_by_registers']:>14}")
walk = [r for r in COUNTS if r["kernel"].startswith("_diagonal_rows")]
levels = [r for r in COUNTS if r["kernel"].startswith("by levels")]
expect("the levels' fewest registers are more than the row walk's most",
       min(r["registers"] for r in levels) > max(r["registers"] for r in walk))
expect("the levels spill at one warp; the row walk never spills",
       all(r["spill_store_bytes"] > 0 for r in levels if r["num_warps"] == 1)
       and all(r["spill_store_bytes"] == 0 for r in walk))
expect("by registers, the levels leave fewer warps per multiprocessor than the row walk in every setting",
       max(r["resident_warps_by_registers"] for r in levels) < min(r["resident_warps_by_registers"] for r in walk))
tile_numbers = chunk_fwd.SUB * 128                 # one [16, 128] float32 tile at D = 128
glue("ch11_tile_numbers", f"{tile_numbers:,}", display=False)
glue("ch11_tile_regs", str(tile_numbers // 32), display=False)   # 32 threads in a warp, one float32 per register
for name, rows_ in (("walk", walk), ("levels", levels)):
    for key, tag in (("registers", "regs"), ("resident_warps_by_registers", "warps")):
        values = [r[key] for r in rows_]
        glue(f"ch11_{name}_{tag}", f"{min(values)}–{max(values)}", display=False)

# %% [markdown]
# The levels take {glue:text}`ch11_levels_regs` registers per thread, the row walk
# {glue:text}`ch11_walk_regs`. At full width each $[16, 128]$ float32 tile of a level ($q$, $k$, $G$, $G_{lo}$,
# the anchors, the decays) is {glue:text}`ch11_tile_numbers` numbers, {glue:text}`ch11_tile_regs` registers per
# thread of a single warp, and a level holds several at once; the row walk holds two heads' rows of 128. On
# narrower slices the count stays high (the four levels are unrolled, and the tensor-core operands take layouts
# of their own; we did not break it down further). At one warp the levels spill to memory; where they do not,
# their registers leave room for {glue:text}`ch11_levels_warps` warps per multiprocessor against
# {glue:text}`ch11_walk_warps`. That the missing warps are what made it slow is the likely reading, not a
# measured one. Counting operations picks candidates; the compiler's counts and the clock pick winners.

# %% [markdown]
# ### One anchor inside the block, and a walk where it is not safe
#
# The levels lost on registers; the row walk pays in exponentials ({glue:text}`ch11_walk_exps` per row and
# channel on average). The tenth run tried the plainest product instead: one anchor row $a$ in the *middle* of each
# {glue:text}`ch11_sub`-token sub-chunk and one `tl.dot` for the whole block,
# $A_{rc} = \sum_d \big(k_{rd}\, e^{G_{rd} - G_{ad}}\big)\big(k_{cd}\, e^{G_{ad} - G_{cd}}\big)$,
# two exponentials per row and channel. The price: for $r < a$ the first factor is $e^{+x}$ with $x$ up to the
# gates summed over half a sub-chunk, and for $c > a$ so is the second. The product of a kept pair is still its
# decay, at most 1, but a factor alone can overflow. So each program looks at its largest $|G_r - G_a|$ first:
# up to `DIAGONAL_SPAN_LIMIT` = {glue:text}`ch11_span_limit` (each factor below $e$ to that power; gates of about
# {glue:text}`ch11_span_gate` per step on average stay within it) it keeps the product; beyond it (a gate of $-10^4$,
# $-\infty$, strong gates everywhere) the sub-chunk walks its rows as before, all {glue:text}`ch11_sub` at once. A CPU test checks both
# paths against the blocks' definition, and checks which one ran: the two round differently, so an anchored
# sub-chunk differs from the walk in its last bits, and a walked one matches it exactly.

# %%
show(chunk_fwd._diagonal_blocks, "anchor = tl.minimum", "acc_kk = tl.dot(b_k * up")

# %%
TENTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04c.json").read_text())
forms, iso = TENTH["diagonal_forms"], TENTH["same_machine_isolated"]["results"]
kept10 = TENTH["runs"]["kept"]
prof10 = {r["name"]: r["ms_per_call"] for r in kept10["kda_profile_2x8192x16"]["fwd"]}
prof9 = {r["name"]: r["ms_per_call"] for r in NINTH["runs"]["kept"]["kda_profile_2x8192x16"]["fwd"]}
sweep2 = forms["call_2_sweep"]["ms"]
best_key = min(sweep2, key=sweep2.get)
chunk_wide = forms["call_1_ab"]
print("same machine, each kernel alone (do_bench, ms): row walk per token "
      f"{iso['old']['diag_ms']:.3f}, one anchor per sub-chunk {iso['new']['diag_ms']:.3f} (again {iso['new2']['diag_ms']:.3f})")
print("first candidate, a program per chunk of 64 rows (same call as 3ae7a05's row walk): "
      f"{chunk_wide['candidate_chunk_rows']['(2, 8192, 16) fwd']['kernels']['_diagonal_blocks']:.3f} against "
      f"{chunk_wide['base_3ae7a05']['(2, 8192, 16) fwd']['kernels']['_diagonal_rows']:.3f}")
print("settings of call 2 (rows per program, channels per slice, warps), GPU ms:")
for key, ms in sorted(sweep2.items(), key=lambda kv: kv[1])[:6]:
    print(f"  {key.split(') ', 1)[1]:<26} {ms:.3f}")
print("kept call, forward stages at (2, 8192), GPU ms (ninth run -> tenth):")
for name9, name10 in (("_diagonal_rows", "_diagonal_blocks"), ("_offdiagonal_solve",) * 2, ("_state_pass",) * 2,
                      ("_wy_factors",) * 2, ("_chunk_output",) * 2, ("_chunk_cumsum",) * 2):
    print(f"  {name10:<20} {prof9[name9]:.3f} -> {prof10[name10]:.3f}")
rows10 = {(r["B"], r["T"], r["mode"]): r for r in kept10["chunked"]}
for (B, T) in ((2, 8192), (1, 32768), (8, 2048)):
    r = rows10[(B, T, "fwd")]
    print(f"  KDA forward ({B}, {T}): {r['k3lite_ops_triton_ms']:.3f} ms through the API, fla "
          f"{r['fla_before_ms']:.3f}/{r['fla_after_ms']:.3f} -> {r['ratio_ops_vs_fla']:.2f}x")
walk_exps = sum(range(1, chunk_fwd.SUB + 1)) / chunk_fwd.SUB       # pairs per row, each one exponential per channel
glue("ch11_walk_exps", f"{walk_exps:.1f}", display=False)
glue("ch11_span_limit", f"{chunk_fwd.DIAGONAL_SPAN_LIMIT:.0f}", display=False)
glue("ch11_span_gate", f"{-chunk_fwd.DIAGONAL_SPAN_LIMIT / (chunk_fwd.SUB // 2):.1f}", display=False)
glue("ch11_anchor_alone", f"{iso['new']['diag_ms']:.3f}", display=False)
glue("ch11_walk_alone", f"{iso['old']['diag_ms']:.3f}", display=False)
glue("ch11_anchor_kept", f"{prof10['_diagonal_blocks']:.3f}", display=False)
glue("ch11_chunk_wide", f"{chunk_wide['candidate_chunk_rows']['(2, 8192, 16) fwd']['kernels']['_diagonal_blocks']:.3f}",
     display=False)
glue("ch11_tenth_fwd", " / ".join(f"{rows10[(B, T, 'fwd')]['ratio_ops_vs_fla']:.2f}×"
                                  for B, T in ((2, 8192), (1, 32768), (8, 2048))), display=False)
glue("ch11_tenth_fwd_ms", " / ".join(f"{rows10[(B, T, 'fwd')]['k3lite_ops_triton_ms']:.3f}"
                                     for B, T in ((2, 8192), (1, 32768), (8, 2048))), display=False)
glue("ch11_tenth_best", best_key.split(") ", 1)[1], display=False)
expect("on one machine, the anchored blocks take less time than the row walk, twice over",
       max(iso["new"]["diag_ms"], iso["new2"]["diag_ms"]) < iso["old"]["diag_ms"])
expect("the two forms' blocks agree to bf16's rounding (Aqk, stored in bf16, within one step at its largest entry)",
       iso["aqk"] <= 2 ** -9 and iso["akk"] < 1e-3)
expect("a program per 64-row chunk was not faster than the row walk", chunk_wide["candidate_chunk_rows"][
    "(2, 8192, 16) fwd"]["kernels"]["_diagonal_blocks"] >= chunk_wide["base_3ae7a05"]["(2, 8192, 16) fwd"]["kernels"][
    "_diagonal_rows"])
expect("the best setting of call 2 is one sub-chunk per program at full width", best_key.endswith("rows=16 BK=128 warps=2"))
expect("in the kept call the diagonal blocks are no longer the forward's largest kernel",
       max(prof10, key=prof10.get) != "_diagonal_blocks")
expect("the forward is within 2 % of fla at (2, 8192) and faster than fla at (1, 32768) and (8, 2048)",
       abs(rows10[(2, 8192, "fwd")]["ratio_ops_vs_fla"] - 1) < 0.02
       and rows10[(1, 32768, "fwd")]["ratio_ops_vs_fla"] < 1 and rows10[(8, 2048, "fwd")]["ratio_ops_vs_fla"] < 1)
expect("the KDA forward at T >= 8192 is still above 0.9x fla: the target is not met",
       min(rows10[(2, 8192, "fwd")]["ratio_ops_vs_fla"], rows10[(1, 32768, "fwd")]["ratio_ops_vs_fla"]) > 0.9)

# %% [markdown]
# Alone on one machine the anchored blocks took {glue:text}`ch11_anchor_alone` ms against
# {glue:text}`ch11_walk_alone` for the row walk; in the kept call, {glue:text}`ch11_anchor_kept` ms. The shape of
# the program mattered as much as the arithmetic: the first try, one program per chunk with one masked product over
# the whole chunk, took {glue:text}`ch11_chunk_wide` ms, no better than the walk. One sub-chunk per program with all
# channels in one tile won ({glue:text}`ch11_tenth_best`: rows per program, channels per slice, warps). The forward
# then took
# {glue:text}`ch11_tenth_fwd_ms` ms, {glue:text}`ch11_tenth_fwd` fla at (2, 8192) / (1, 32768) / (8, 2048): level
# with the reference at 8192, a little ahead at 32768 and 2048, and still short of the issue's 0.9×.

# %% [markdown]
# ### Code without the second part where a chunk has none
#
# For bf16 inputs stage 1 writes $G_{lo}$ only where $|G| \ge 256$, and with the benchmark's gates that is
# nowhere. The stages that read it paid all the same: loads masked by the $G$ tile beside them, and every span in
# two parts. Where does that cost sit, in the bytes or in the instructions? The eleventh run
# (`bench_h200_2026-12-04d.json`) asked both ways. Masking every $G_{lo}$ load off in chunks without one, so that
# no byte moves, saved nothing (call 1, below); a copy of `_wy_factors` with no $G_{lo}$ code at all was faster
# (call 2). The instructions, then. So each chunk's need is now read off its last row of $G$: gates are $\le 0$, so
# $G$ falls down a chunk and its last row holds every channel's largest $|G|$. Then the code is chosen per chunk:
# the same kernel is launched twice with `USE_LO` a compile-time constant, and each program works only if its
# chunk's need is the launch's. The chunks without $G_{lo}$ run code that never mentions it. (Since the thirteenth
# run, a program of the launch with $G_{lo}$ looks after `LO_GROUP` chunks, reading their last rows in one load:
# where no chunk needs $G_{lo}$ those programs only look and end, and fewer of them end sooner; section 5 closes
# with what that saved.)

# %%
show(chunk_fwd._chunk_has_lo)

# %%
show(chunk_fwd._offdiagonal_solve, "i_t, i_bh = tl.program_id")

# %%
ELEVENTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04d.json").read_text())
calls = {n: ELEVENTH[k] for n, k in ((1, "call_1_masked_off"), (2, "call_2_probe"), (3, "call_3_branch_inside"),
                                     (4, "call_4_two_launches"))}
S8 = "(2, 8192, 16) fwd"
SHAPES11 = ((2, 8192), (1, 32768), (8, 2048))


def stage_ms(call, form, name):
    return calls[call][form]["rows"][S8]["kernels"][name]


def api_ms(call, form):
    return [calls[call][form]["rows"][f"({B}, {T}, 16) fwd"]["api_ms"] for B, T in SHAPES11]


STAGES11 = ("_diagonal_blocks", "_offdiagonal_solve", "_wy_factors", "_chunk_output")
print(f"call 4, one machine, GPU ms at (2, 8192, 16); forward through the API at {SHAPES11}:")
print(f"  {'form':<44}" + "".join(f"{n:>20}" for n in STAGES11) + "   API ms")
for form, label in (("base", "fd1a445"), ("mid", "kept"), ("new", "two launches for the diagonal blocks too")):
    print(f"  {label:<44}" + "".join(f"{stage_ms(4, form, n):>20.3f}" for n in STAGES11)
          + "   " + " / ".join(f"{t:.3f}" for t in api_ms(4, form)))
probe = calls[2]["ms"]
wy_plain = probe["wy variant v_first=1 lo=0 i64=0 w4s1 (same=True)"]
print(f"call 1, G_lo loads masked off where a chunk has none: _offdiagonal_solve {stage_ms(1, 'new', '_offdiagonal_solve'):.3f}"
      f" (before {stage_ms(1, 'base', '_offdiagonal_solve'):.3f}), _wy_factors {stage_ms(1, 'new', '_wy_factors'):.3f}"
      f" (before {stage_ms(1, 'base', '_wy_factors'):.3f}), stage 1 {stage_ms(1, 'new', '_chunk_cumsum'):.3f}"
      f" (before {stage_ms(1, 'base', '_chunk_cumsum'):.3f})")
print(f"call 2, alone: the package's _wy_factors {probe['wy ours w4s1']:.3f} ms, a copy without G_lo {wy_plain:.3f}, "
      f"fla's on the same inputs {probe['wy fla (autotuned)']:.3f}")
print(f"call 3, the choice as a branch inside each program: _offdiagonal_solve {stage_ms(3, 'new', '_offdiagonal_solve'):.3f}"
      f", _wy_factors {stage_ms(3, 'new', '_wy_factors'):.3f} (fd1a445: {stage_ms(3, 'base', '_offdiagonal_solve'):.3f}, "
      f"{stage_ms(3, 'base', '_wy_factors'):.3f})")
kept11 = {(r["B"], r["T"]): r for r in ELEVENTH["runs"]["kept"]["chunked"] if r["mode"] == "fwd"}


def faster_ratio(r):
    return r["k3lite_ops_triton_ms"] / min(r["fla_before_ms"], r["fla_after_ms"])


for B, T in SHAPES11:
    r = kept11[(B, T)]
    print(f"call 5, kept code, KDA forward ({B}, {T}): {r['k3lite_ops_triton_ms']:.3f} ms; fla "
          f"{r['fla_before_ms']:.3f}/{r['fla_after_ms']:.3f} -> {r['ratio_ops_vs_fla']:.2f}x the mean, "
          f"{faster_ratio(r):.2f}x the faster")
ptx_old, ptx_new = ELEVENTH["ptxas_sm90"]["fd1a445"], ELEVENTH["ptxas_sm90"]["kept"]
for name in ("_offdiagonal_solve", "_wy_factors"):
    for label, row in (("fd1a445", ptx_old[name]), ("kept, no G_lo", ptx_new[f"{name}, USE_LO=False"]),
                       ("kept, G_lo", ptx_new[f"{name}, USE_LO=True"])):
        print(f"ptxas sm90: {name:<20} {label:<14} {row['registers']} registers, spills {row['spill_store_bytes']} B")
glue("ch11_eleventh_off_spill", f"{ptx_old['_offdiagonal_solve']['spill_store_bytes']}", display=False)
glue("ch11_eleventh_wy_regs_old", f"{ptx_old['_wy_factors']['registers']}", display=False)
glue("ch11_eleventh_wy_regs_new", f"{ptx_new['_wy_factors, USE_LO=False']['registers']}", display=False)
expect("without G_lo code, _offdiagonal_solve has no spills and _wy_factors needs fewer registers",
       ptx_new["_offdiagonal_solve, USE_LO=False"]["spill_store_bytes"] == 0 < ptx_old["_offdiagonal_solve"]["spill_store_bytes"]
       and ptx_new["_wy_factors, USE_LO=False"]["registers"] < ptx_old["_wy_factors"]["registers"])
glue("ch11_eleventh_masked", f"{stage_ms(1, 'new', '_wy_factors'):.3f}", display=False)
glue("ch11_eleventh_masked_base", f"{stage_ms(1, 'base', '_wy_factors'):.3f}", display=False)
glue("ch11_eleventh_plain", f"{wy_plain:.3f}", display=False)
glue("ch11_eleventh_wy_package", f"{probe['wy ours w4s1']:.3f}", display=False)
glue("ch11_eleventh_fwd_ms", " / ".join(f"{kept11[s]['k3lite_ops_triton_ms']:.3f}" for s in SHAPES11), display=False)
glue("ch11_eleventh_fwd", " / ".join(f"{kept11[s]['ratio_ops_vs_fla']:.2f}×" for s in SHAPES11), display=False)
glue("ch11_eleventh_fla8k", f"{kept11[(2, 8192)]['fla_before_ms']:.3f} / {kept11[(2, 8192)]['fla_after_ms']:.3f}",
     display=False)
glue("ch11_eleventh_faster8k", f"{faster_ratio(kept11[(2, 8192)]):.2f}×", display=False)
glue("ch11_eleventh_faster32k", f"{faster_ratio(kept11[(1, 32768)]):.2f}×", display=False)
glue("ch11_eleventh_miss", f"{faster_ratio(kept11[(2, 8192)]) / 0.9 - 1:.0%}".replace("%", " %"), display=False)
expect("masking the G_lo loads off changed _offdiagonal_solve and _wy_factors by less than 1 %",
       all(abs(stage_ms(1, "new", n) / stage_ms(1, "base", n) - 1) < 0.01 for n in ("_offdiagonal_solve", "_wy_factors")))
expect("a copy of _wy_factors without G_lo code was faster than the package's", wy_plain < probe["wy ours w4s1"])
expect("a branch inside each program made both larger stages slower",
       all(stage_ms(3, "new", n) > stage_ms(3, "base", n) for n in ("_offdiagonal_solve", "_wy_factors")))
expect("two launches made both larger stages faster (call 4)",
       all(stage_ms(4, "mid", n) < stage_ms(4, "base", n) for n in ("_offdiagonal_solve", "_wy_factors")))
expect("for the diagonal blocks the branch beat two launches",
       stage_ms(4, "mid", "_diagonal_blocks") < stage_ms(4, "new", "_diagonal_blocks"))
expect("the kept form is faster than fd1a445 through the API at every shape",
       all(k < b for k, b in zip(api_ms(4, "mid"), api_ms(4, "base"))))
expect("and exactly as accurate (bf16 against the float32 pipeline, every output and gradient)",
       calls[4]["mid"]["accuracy_bf16_vs_float32_pipeline"] == calls[4]["base"]["accuracy_bf16_vs_float32_pipeline"])
expect("the kept call meets 0.9x at (1, 32768) against either fla timing, and misses it at (2, 8192) against the faster",
       faster_ratio(kept11[(1, 32768)]) <= 0.9 < faster_ratio(kept11[(2, 8192)]))

# %% [markdown]
# With the loads masked off `_wy_factors` took {glue:text}`ch11_eleventh_masked` ms (before:
# {glue:text}`ch11_eleventh_masked_base`); with no $G_{lo}$ code in it, {glue:text}`ch11_eleventh_plain` against
# {glue:text}`ch11_eleventh_wy_package`. A predicated-off load is still an instruction, with its address and its
# mask to compute, and the two-part spans still cost their adds. Choosing per chunk also cut registers (ptxas for
# sm90, counted on the CPU machine by `benchmarks/probes/kernel_registers.py`): `_offdiagonal_solve` lost its
# {glue:text}`ch11_eleventh_off_spill` bytes of spills and `_wy_factors` went from
# {glue:text}`ch11_eleventh_wy_regs_old` to {glue:text}`ch11_eleventh_wy_regs_new` registers per thread, so more
# programs fit on a multiprocessor. The first try put the choice inside each program, as a branch; the compiler then keeps
# both paths' registers, and both stages got slower. Only the diagonal blocks, one small tile per program, liked
# the branch better than a second launch.
#
# The kept code's forward: {glue:text}`ch11_eleventh_fwd_ms` ms, {glue:text}`ch11_eleventh_fwd` over the mean of
# fla's two timings. At (2, 8192) those two timings disagreed ({glue:text}`ch11_eleventh_fla8k` ms), and against the
# faster the forward is {glue:text}`ch11_eleventh_faster8k`; at (1, 32768) it is {glue:text}`ch11_eleventh_faster32k`
# either way. The issue's 0.9× is met at 32768 and missed, by about {glue:text}`ch11_eleventh_miss`, at 8192. A ratio over a reference that
# drifted is not a result to lean on, so the README marked the target unmet.

# %% [markdown]
# ### The last half percent
#
# The twelfth run left the forward at (2, 8192) {glue:text}`ch11_twelfth_miss` above 0.9× fla's faster timing. Three
# small costs remained, each a few microseconds, and the thirteenth run (`bench_h200_2026-12-04f.json`) measured all
# three on one machine.
#
# * **Launch gaps.** Programmatic dependent launch lets the GPU schedule a kernel's programs before the kernel
#   ahead of it ends; each program then waits for it before touching memory. It gives the same bits, and it was
#   slower (below), so it is not in the package.
# * **The value check in stage 1.** Stage 1 reads every gate, so it also checks that each is $\le 0$. It kept the
#   largest gate of every tile position, a {glue:text}`ch11_cumsum_tile` tile per program, and summed it into one
#   count at the end.
#   Now it keeps one largest gate per channel, and a bad one clears the flag with a masked store: no reduction,
#   and fewer registers.
# * **The empty launch.** The launch with $G_{lo}$ of `_offdiagonal_solve` and `_wy_factors` had one program per
#   chunk. With the benchmark's gates, every one of those programs only read its chunk's last row and ended. But
#   the launch's registers let few programs share a multiprocessor, so that took several waves. One program per
#   `LO_GROUP` = {glue:text}`ch11_lo_group` chunks cuts the number of those programs by that factor.

# %%
THIRTEENTH = json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04f.json").read_text())
c1 = THIRTEENTH["call_1"]
S8K = "(2, 8192, 16)"


def mean(xs):
    return sum(xs) / len(xs)


print("call 1, forward through the API, ms (two timings each), programmatic dependent launch off / on:")
for key, row in c1["pipeline"]["new"].items():
    print(f"  {key:<28} off {' '.join(f'{t:.3f}' for t in row['api_ms_pdl_off'])}   "
          f"on {' '.join(f'{t:.3f}' for t in row['api_ms_pdl_on'])}   same bits: {row['same_bits_pdl_on_off']}")
stage1_new = c1["stage1_alone"]["new"][f"{S8K} rows=8 warps=1"]
stage1_old = c1["stage1_alone"]["base"][f"{S8K} rows=8 warps=1"]
regs = {name: {r["kernel"]: r for r in THIRTEENTH["ptxas_sm90"][name]} for name in ("6197768", "kept")}
print(f"stage 1 alone at {S8K}: old check {stage1_old['check_ms']:.4f} ms, new check {stage1_new['check_ms']:.4f}, "
      f"no check {stage1_new['no_check_ms']:.4f}; registers per thread "
      f"{regs['6197768']['_chunk_cumsum']['registers']} -> {regs['kept']['_chunk_cumsum']['registers']}")
c4 = THIRTEENTH["call_4_lo_group"]["new"]
print("call 4, forward through the API, ms, LO_GROUP = 4 / 1 (one program per chunk):")
for key, row in c4.items():
    print(f"  {key:<16} {mean(row['api_ms']['4']):.4f} / {mean(row['api_ms']['1']):.4f}   kernels "
          f"{row['kernels']['4']['sum_ms']:.3f} / {row['kernels']['1']['sum_ms']:.3f}   same bits: {row['same_bits']}")
strong = THIRTEENTH["call_2_strong_gates"]["ms"][S8K]
print(f"every chunk with G_lo, {S8K}: LO_GROUP = 4 {mean(strong['new LO_GROUP=4']):.3f} ms, "
      f"LO_GROUP = 1 {mean(strong['new LO_GROUP=1']):.3f}")
runs13 = {name: {(r["B"], r["T"]): r for r in THIRTEENTH["runs"][name]["chunked"] if r["kind"] == "kda"}
          for name in ("kept", "kda_repeat")}
for name, rows in runs13.items():
    for B, T in SHAPES11:
        r = rows[(B, T)]
        print(f"{name:<10} KDA forward ({B}, {T}): {r['k3lite_ops_triton_ms']:.3f} ms; fla "
              f"{r['fla_before_ms']:.3f}/{r['fla_after_ms']:.3f} -> {r['ratio_ops_vs_fla']:.3f}x the mean, "
              f"{faster_ratio(r):.3f}x the faster")
pdl8 = c1["pipeline"]["new"]["kda (2, 8192, 16)"]
pdl32_gdn = c1["pipeline"]["new"]["gated_delta_rule (1, 32768, 16)"]
twelfth_long = {(r["B"], r["T"]): r for r in json.loads((viz.BENCH_ARCHIVE_DIR / "bench_h200_2026-12-04e.json").read_text())[
    "runs"]["kept"]["chunked"] if r["kind"] == "kda" and r["mode"] == "fwd"}[(2, 8192)]
glue("ch11_twelfth_miss", f"{faster_ratio(twelfth_long) / 0.9 - 1:.1%}".replace("%", " %"), display=False)
glue("ch11_cumsum_tile", f"[{chunk_fwd.CUMSUM_ROWS}, {chunk_fwd.CUMSUM_KEY_TILE}]", display=False)
glue("ch11_lo_group", f"{chunk_fwd.LO_GROUP}", display=False)
glue("ch11_pdl_off", f"{mean(pdl8['api_ms_pdl_off']):.3f}", display=False)
glue("ch11_pdl_on", f"{mean(pdl8['api_ms_pdl_on']):.3f}", display=False)
glue("ch11_pdl_gdn_off", f"{mean(pdl32_gdn['api_ms_pdl_off']):.3f}", display=False)
glue("ch11_pdl_gdn_on", f"{mean(pdl32_gdn['api_ms_pdl_on']):.3f}", display=False)
glue("ch11_check_old", f"{stage1_old['check_ms']:.4f}", display=False)
glue("ch11_check_new", f"{stage1_new['check_ms']:.4f}", display=False)
glue("ch11_check_none", f"{stage1_new['no_check_ms']:.4f}", display=False)
glue("ch11_check_regs_old", f"{regs['6197768']['_chunk_cumsum']['registers']}", display=False)
glue("ch11_check_regs_new", f"{regs['kept']['_chunk_cumsum']['registers']}", display=False)
glue("ch11_group_api4", f"{mean(c4[S8K]['api_ms']['4']):.4f}", display=False)
glue("ch11_group_api1", f"{mean(c4[S8K]['api_ms']['1']):.4f}", display=False)
glue("ch11_group_strong4", f"{mean(strong['new LO_GROUP=4']):.2f}", display=False)
glue("ch11_group_strong1", f"{mean(strong['new LO_GROUP=1']):.2f}", display=False)
glue("ch11_group_strong_cost", f"{mean(strong['new LO_GROUP=4']) / mean(strong['new LO_GROUP=1']) - 1:.1%}"
     .replace("%", " %"), display=False)
glue("ch11_thirteenth_ms", f"{runs13['kept'][(2, 8192)]['k3lite_ops_triton_ms']:.3f}", display=False)
glue("ch11_thirteenth_fla", f"{runs13['kept'][(2, 8192)]['fla_before_ms']:.3f} / "
     f"{runs13['kept'][(2, 8192)]['fla_after_ms']:.3f}", display=False)
glue("ch11_thirteenth_faster", f"{faster_ratio(runs13['kept'][(2, 8192)]):.3f}×", display=False)
glue("ch11_repeat_faster", f"{faster_ratio(runs13['kda_repeat'][(2, 8192)]):.3f}×", display=False)
glue("ch11_thirteenth_32k", " and ".join(f"{faster_ratio(runs13[n][(1, 32768)]):.2f}×" for n in runs13),
     display=False)
expect("programmatic dependent launch gives the same bits and is slower for KDA at every shape",
       all(row["same_bits_pdl_on_off"] for row in c1["pipeline"]["new"].values())
       and all(min(row["api_ms_pdl_on"]) > max(row["api_ms_pdl_off"])
               for key, row in c1["pipeline"]["new"].items() if key.startswith("kda")))
expect("stage 1 with the new check is as fast as with none (within 1 %), and faster than with the old check",
       abs(stage1_new["check_ms"] / stage1_new["no_check_ms"] - 1) < 0.01 and stage1_new["check_ms"] < stage1_old["check_ms"])
expect("four chunks per program is faster through the API at every shape, with the same bits",
       all(max(row["api_ms"]["4"]) < min(row["api_ms"]["1"]) and row["same_bits"] for row in c4.values()))
expect("and slower where every chunk has G_lo", min(strong["new LO_GROUP=4"]) > max(strong["new LO_GROUP=1"]))
expect("in both runs the KDA forward is at most 0.9x the faster fla timing at (2, 8192) and (1, 32768)",
       all(faster_ratio(rows[(B, T)]) <= 0.9 for rows in runs13.values() for B, T in ((2, 8192), (1, 32768))))

# %% [markdown]
# Programmatic dependent launch made the forward slower: {glue:text}`ch11_pdl_on` ms against
# {glue:text}`ch11_pdl_off` at (2, 8192), and Gated DeltaNet's {glue:text}`ch11_pdl_gdn_on` against
# {glue:text}`ch11_pdl_gdn_off` at (1, 32768). Why was not found here; a guess, not checked, is that the
# waiting programs hold places on the multiprocessors that the stage ahead of them could still use.
#
# The new check costs nothing that could be measured. Stage 1 alone took {glue:text}`ch11_check_new` ms with it,
# {glue:text}`ch11_check_none` with no check at all, and {glue:text}`ch11_check_old` with the old check. ptxas
# counts {glue:text}`ch11_check_regs_new` registers per thread where the old check needed
# {glue:text}`ch11_check_regs_old`.
#
# {glue:text}`ch11_lo_group` chunks per program took the forward from {glue:text}`ch11_group_api1` to
# {glue:text}`ch11_group_api4` ms at (2, 8192). The saving is not free. Where every chunk has $G_{lo}$ (one channel
# per head with gates of −6), each program now works through its chunks in turn, and the forward takes
# {glue:text}`ch11_group_strong4` ms against
# {glue:text}`ch11_group_strong1`, {glue:text}`ch11_group_strong_cost` more. The package takes that trade because
# the benchmark's gates, like ordinary ones, leave $G_{lo}$ empty. A model whose gates are that strong would want
# the opposite choice, and a bigger cost to fix first: with gates that strong the diagonal blocks walk their
# rows as well.
#
# Together: {glue:text}`ch11_thirteenth_ms` ms at (2, 8192), while fla took {glue:text}`ch11_thirteenth_fla` ms.
# That is {glue:text}`ch11_thirteenth_faster` against the faster of fla's two timings, and
# {glue:text}`ch11_repeat_faster` in a second run. At (1, 32768) the two runs gave
# {glue:text}`ch11_thirteenth_32k`. The issue's 0.9× now holds at T ≥ 8192, against either of fla's timings, in
# both runs.

# %% [markdown]
# ### The gates' gradient where the gates are strong
#
# The backward needs $\partial L/\partial g$, and it gets it without differentiating a single exponential. Inside a
# chunk the gates enter only through $G_r = \sum_{s \le r} g_s$, and every use of $G_r$ scales a vector: the query
# $q_r$, and the key $k_r$ where token $r$ is the later one of a pair, by $e^{G_r}$; the key $k_r$ where it is the
# earlier one by $e^{-G_r}$ (through the anchors, but the exponents are those). Move $G_r$ by $\epsilon$ and the
# first kind is scaled by $e^{\epsilon}$, the second by $e^{-\epsilon}$. So, writing $dk^{\text{later}}_r$ and
# $dk^{\text{earlier}}_r$ for the two parts of $k_r$'s gradient,
#
# $$\frac{\partial L}{\partial G_r} = q_r \odot dq_r + k_r \odot dk^{\text{later}}_r - k_r \odot dk^{\text{earlier}}_r
# \;(+\text{ the chunk's last row, which also decays the state}),\qquad
# \frac{\partial L}{\partial g_s} = \sum_{r \ge s} \frac{\partial L}{\partial G_r},$$
#
# with the sum over the rows of the chunk. The backward has dq and dk anyway, so this costs one multiply-add per
# entry and a reverse cumulative sum (stages 3 to 6 of `chunk_bwd_triton.py`; fla does the same). The catch is the
# size of the terms. They are of order one, and with strong gates
# $\partial L/\partial g$ is tiny: each token's state is almost forgotten by the next, so moving a gate changes
# almost nothing. The identity then reaches a tiny number by cancelling terms of order one, and float32 keeps only
# an *absolute* accuracy, a few float32 steps of those terms. The cell below takes KDA through the Triton backward
# and through the PyTorch chunked form (whose autograd differentiates the exponentials themselves), against the
# float64 recurrence, at gates held near one value per step.

# %%
def gate_gradient_errors(gate, T=64, heads=2, width=16, seed=0):
    """KDA, gates in [gate, gate + 0.1]: dg against the float64 recurrence through the Triton backward and through
    the PyTorch chunked form, the largest |q dq| + |k dk|, and the worst relative error of the other gradients."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, T, heads, width, generator=gen) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    g = gate + 0.1 * torch.rand(1, T, heads, width, generator=gen)
    beta = torch.rand(1, T, heads, generator=gen)
    d_o = torch.randn(1, T, heads, width, generator=gen)

    def grads(dtype, **how):
        leaves = [x.detach().clone().to(dtype).requires_grad_(True) for x in (q, k, v, g, beta)]
        run = kda.recurrent if not how else kda.chunked
        o, _ = run(*leaves, **how)
        o.backward(d_o.to(dtype))
        return [x.grad.double() for x in leaves]

    exact = grads(torch.float64)
    fused, plain = grads(torch.float32, backend="triton"), grads(torch.float32, backend="torch")
    rel = lambda got, ref: ((got - ref).norm() / ref.norm()).item()  # noqa: E731
    terms = (q.double() * exact[0]).abs() + (k.double() * exact[1]).abs()
    return {"dg": exact[3].abs().max().item(), "terms": terms.max().item(),
            "triton_rel": rel(fused[3], exact[3]), "triton_abs": (fused[3] - exact[3]).abs().max().item(),
            "torch_rel": rel(plain[3], exact[3]),
            "others_rel": max(rel(fused[i], exact[i]) for i in (0, 1, 2, 4))}


STRENGTHS = (-0.5, -2.0, -5.0, -10.0, -20.0)
dg_errors = {gate: gate_gradient_errors(gate) for gate in STRENGTHS}

# %%
# NBVAL_IGNORE_OUTPUT
# The raw numbers (their last digits depend on the processor's float path; the checks below are compared).
print(f"{'gate':>6} {'largest |dg|':>13} {'Triton dg rel.':>15} {'Triton dg abs. / terms':>23} {'PyTorch dg rel.':>16} "
      f"{'other grads rel.':>17}")
for gate, e in dg_errors.items():
    print(f"{gate:>6} {e['dg']:>13.1e} {e['triton_rel']:>15.1e} {e['triton_abs'] / e['terms']:>23.1e} "
          f"{e['torch_rel']:>16.1e} {e['others_rel']:>17.1e}")

# %%
strongest = dg_errors[STRENGTHS[-1]]
expect("the true dg shrinks with the gates: at -20 per step below 1e-6 of the largest |q dq| + |k dk|",
       strongest["dg"] < 1e-6 * strongest["terms"])
expect("Triton's dg: absolute error within 1e-6 of those terms at every strength",
       all(e["triton_abs"] < 1e-6 * e["terms"] for e in dg_errors.values()))
expect("so its relative error grows as dg shrinks, past 1e-2 at -20", strongest["triton_rel"] > 1e-2)
expect("the PyTorch chunked form's dg stays within 1e-5 relative at every strength",
       all(e["torch_rel"] < 1e-5 for e in dg_errors.values()))
expect("and the Triton backward's other gradients within 1e-5 relative at every strength",
       all(e["others_rel"] < 1e-5 for e in dg_errors.values()))
expect("at -5, the strongest gate K3 allows, Triton's dg is still within 1e-3 relative",
       dg_errors[-5.0]["triton_rel"] < 1e-3)
glue("ch11_dg_gate", f"{STRENGTHS[-1]:.0f}", display=False)

# %% tags=["plumbing"]
fig, ax = plt.subplots(figsize=(7, 4.0))
ax.semilogy(STRENGTHS, [e["triton_rel"] for e in dg_errors.values()], "o-", color=red,
            label="Triton backward: dG from q dq and k dk, summed over the chunk")
ax.semilogy(STRENGTHS, [e["torch_rel"] for e in dg_errors.values()], "s-", color=blue,
            label="PyTorch chunked form: autograd through the exponentials")
ax.set_xlabel("log-gate g per step, nats (each channel within 0.1 of it)")
ax.set_ylabel("relative error of dg against float64")
ax.invert_xaxis()
ax.set_title("KDA in float32, T = 64, H = 2, K = V = 16 (Triton interpreter)", fontsize=9)
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
fig.tight_layout()
plt.show()

# %% [markdown]
# Nothing is wrong with the kernels here: at {glue:text}`ch11_dg_gate` per step the absolute error of dg is the same
# few float32 steps as at gentle gates; only dg has shrunk under it. What it means in practice: in a model whose gates
# are that strong, the gradient a channel's gate parameters receive is mostly rounding, though a small one, since dg
# itself is tiny there. K3's gates stop at −5 ($g = -5\,\sigma(\cdot)$), where the relative error stays below
# $10^{-3}$ (checked above). A
# backward that wanted dg's relative accuracy back would differentiate the decays where it forms them, as autograd
# does in the PyTorch form, at the price of more products; the identity is what fla and k3lite pay for speed.

# %% [markdown] slideshow={"slide_type": "slide"}
# ## 6. Exercises
#
# Exercises 1–3 are checked under the interpreter in float32, at shapes where the last block sticks out
# of the tensor. The checkers put every tensor inside a larger buffer, NaN around the inputs and a
# sentinel around the outputs: a load without a mask reads NaN, a store without a mask changes the
# sentinel, and the checker says which. Exercise 4 is stage 1's arithmetic, in PyTorch.
#
# ### Exercise 1: the decode-step kernel
#
# Below is the KDA decode kernel with its loads and stores removed: the indices, the masks and the
# arithmetic are given (with plainer names than the package's). Write the loads of the state tile
# `S [BK, BV]`, of `q`, `k`, `g` `[BK]`, of `v [BV]` and of the scalar `beta`, and the two stores, with
# the right masks. (Inputs here are float32 `[B, H, K]`, `[B, H, V]`, `[B, H]`, and the state
# `[B, H, K, V]`, all contiguous.) The checker launches it with `K = 12, V = 20, BK = 16, BV = 8` and
# compares with `kda.step`.

# %%
@triton.jit
def kda_decode_kernel(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale,
                      K: tl.constexpr, V: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    block, head = tl.program_id(0), tl.program_id(1)
    rows = tl.arange(0, BK)                                  # key channels
    cols = block * BV + tl.arange(0, BV)                     # value columns of this program
    row_ok, col_ok = rows < K, cols < V
    state_at = head * K * V + rows[:, None] * V + cols[None, :]
    raise NotImplementedError  # load S [BK, BV], q, k, g [BK], v [BV] and the scalar beta here
    S = S * tl.exp(g)[:, None]
    v = beta * (v - tl.sum(S * k[:, None], axis=0))
    S = S + k[:, None] * v[None, :]
    o = tl.sum(S * (q * scale)[:, None], axis=0)
    # store S into s_out_ptr and o into o_ptr here


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
# `i*BLOCK … i*BLOCK + BLOCK - 1` of the flat float32 tensors. `tl` has `tl.exp` but no `tanh` in every
# version: use $\tanh y = 1 - 2/(e^{2y} + 1)$ and $\sigma(x) = 1/(1 + e^{-x})$, both safe at large $|y|$.
# The checker runs `n = 1000` with `BLOCK = 256` and compares with `k3lite.ops.situ.situ_glu`.

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
# Here is a copy kernel with its masks taken out (it lives in `k3lite.exercises.ch11`), next to the
# masked one:

# %%
show(ch11.copy_unmasked)

# %% [markdown]
# Launched with `cdiv(n, block)` programs, it is right when `block` divides `n` — and when you change the
# block size so that it does not, it writes past the end of its output (into whatever lives there: on a
# GPU another tensor, or an illegal-address crash). Write `predict_overrun(n, block)`: how many elements
# past the end does it write? The checker runs the kernel on guarded buffers at several `(n, block)`
# and counts.

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
for n, block in ((80, 16), (80, 32), (80, 64)):
    print(f"n={n:>3} block={block:>2}: unmasked copy writes {ch11.measure_overrun(n, block):>2} past the end, "
          f"masked copy {ch11.measure_overrun(n, block, ch11.copy_masked)}")

# %% [markdown]
# An unmasked *load* followed by a masked store is quieter: the numbers come out right, but the program
# has read memory it does not own — harmless here, a crash on a GPU when the block runs past the
# allocation. Masks on both, always.

# %% [markdown]
# ### Exercise 4: gate sums that keep their digits
#
# Stage 1 turns a chunk's log-gates into running sums $G$, and every later stage forms its decays as
# $e^{G_r - G_c}$. Section 5 showed why one float32 running sum is not enough: after a gate of $-10^4$ the sum
# sits where float32 steps are {glue:text}`ch11_spike_step` apart, and the gentle gates after it are rounded away. Write
# `two_part_cumsum(g)` for one chunk of float32 log-gates `g [64]`: return float32 tensors `hi, lo` whose sum is
# the running sum of `g`, such that the decays formed from them part by part in float32, as the kernels do
# (`ch11.decays_from_parts`), come within $10^{-6}$ of float64. The checker's chunks hold a gate of $-10^4$,
# $-10^6$ or $-\infty$ before gentle ones.

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
spike_chunk = ch11.spike_gates(-1e4)
one_sum = spike_chunk.clamp_min(-1024.0).cumsum(0)
for label, (hi, lo) in (("one float32 sum", (one_sum, torch.zeros_like(one_sum))),
                        ("two float32 parts", two_part_cumsum(spike_chunk))):
    error = (ch11.decays_from_parts(hi, lo) - ch11.exact_decays(spike_chunk)).abs().max().item()
    print(f"{label:<18} every decay within 1e-6 of float64: {error < 1e-6}")
expect("a decay through the floor, exp(-1024), is exactly 0 in float32 and in float64",
       torch.exp(torch.tensor(-1024.0)).item() == 0.0 and math.exp(-1024.0) == 0.0)

# %% [markdown]
# The floor matters as much as the second part: without it a gate of $-\infty$ makes $-\infty - (-\infty)$,
# a NaN, in every span that starts after it. With it, a decay through the gate is $e^{-1024} = 0$ in float32 and
# float64 alike, exactly what $-\infty$ would give.
#
# The kernel reaches the same two parts without float64: `compensated_cumsum` in section 5 passes this checker too
# (try `ch11.check_gate_sums(compensated_cumsum)`).

# %% [markdown] slideshow={"slide_type": "slide"}
# ## What we saw
#
# * A Triton kernel is a grid of programs, each working on blocks; masks make blocks safe at any shape.
#   The interpreter runs the same kernels on a CPU, one program after another, in float32.
# * The fused decode step reads and writes the float32 state once. At about one FLOP per byte it is
#   memory-bound by two orders of magnitude; on the H200 it moved state at close to copy speed.
# * Fusing SiTU cut its memory traffic by the counted factor, and its H200 time by about the same; with the
#   traffic gone, its extra `tanh`s cost almost nothing.
# * The chunked KDA forward is six kernels: five parallel (over chunks or tokens), one (the state pass)
#   sequential over chunks.
#   By a count of FLOPs and bytes every stage is memory-bound at $D = 128$; the per-channel decay makes
#   the intra-chunk stage the largest.
# * Against the reference library, measured in one process, k3lite's KDA forward+backward is ahead at every
#   benchmark shape ({glue:text}`ch11_ab_both`× its time, in the last run) and its forward alone behind at
#   long sequences ({glue:text}`ch11_ab_fwd_long`× on one machine), a gap no longer in the gate sums' bytes. Both
#   run the same algorithm, k3lite with a few launch settings fixed after a sweep, fla with autotuning; a setting
#   belongs to a kernel and the constants it is compiled with.
# * Fewer launches and fewer bytes did not make a faster forward here: each fusion tried was slower where the
#   forward is behind, most plainly work added to the sequential state pass, whose time is the latency of its
#   chain. Work that is off the critical path belongs off it.
# * Exact gate sums need no float64: TwoSum recovers each float32 addition's rounding error exactly, and a scan of
#   (sum, error) pairs kept stage 1 exact while taking it from {glue:text}`ch11_s1_f64_short` to
#   {glue:text}`ch11_s1_kept_short` ms at `B = 2, T = 8192`. A kernel that compiles under one Triton can fail
#   under another; the compiler runs without a GPU, so check there first.
# * Bytes saved are not time saved. Writing the second part of the gate sums only where bf16 can see it made
#   stage 1 faster, and the forward no faster; how a load is masked changed the backward by more than the bytes
#   did. Measure the whole call, not the stage you changed, and compare two forms on one machine: a rerun of the
#   old form beside the new one is what tells a gain from the spread between machines.
