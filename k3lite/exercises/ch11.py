"""Checkers for chapter 11 (k3lite's Triton kernels), run under the Triton interpreter on a CPU.

1. :func:`check_decode_kernel` — the loads and stores of the fused KDA decode step.
2. :func:`check_situ_forward` — the fused SiTU-GLU forward, one element per lane.
3. :func:`check_overrun` — how many elements a kernel without masks writes past the end of its output.
4. :func:`check_gate_sums` — stage 1's gate sums in two float32 parts, in PyTorch: small gates after a huge one
   must keep their digits in every decay of the chunk.

Every tensor a learner's kernel touches lies inside a larger buffer: inputs are surrounded by NaN, outputs
by a sentinel. A load without a mask then reads NaN into the result, and a store without a mask changes
the sentinel, so a missing mask is caught as such instead of reading or writing someone else's memory.
Shapes are chosen so that the last block of every launch is partly outside the tensor.
"""

from __future__ import annotations

import torch

from k3lite import kernels
from k3lite.exercises import ExerciseFailed, attempt, expect_close, expect_equal

kernels.interpreting()  # switches the interpreter on (no GPU) before triton is imported below
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from k3lite.ops import kda  # noqa: E402
from k3lite.ops import situ as situ_ops  # noqa: E402

GUARD = 128          # elements of padding on each side of a guarded tensor; more than any block used here
SENTINEL = -12345.0  # what the padding around an output holds


def device() -> torch.device:
    """Where the checkers put their tensors: the CPU under the interpreter, the GPU otherwise."""
    return torch.device("cpu" if kernels.interpreting() else "cuda")


def guarded(values: torch.Tensor, fill: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``values`` copied into the middle of a flat buffer padded with ``fill``: (buffer, contiguous view)."""
    flat = values.reshape(-1)
    buffer = torch.full((flat.numel() + 2 * GUARD,), fill, dtype=values.dtype, device=values.device)
    buffer[GUARD:GUARD + flat.numel()] = flat
    return buffer, buffer[GUARD:GUARD + flat.numel()].view(values.shape)


def overwritten_guard(buffer: torch.Tensor) -> int:
    """How many padding elements around a guarded output no longer hold the sentinel."""
    pad = torch.cat([buffer[:GUARD], buffer[-GUARD:]])
    return int((pad != SENTINEL).sum())


def _run(launch):
    """Call a launch; a stub kernel that raises NotImplementedError reaches us wrapped by Triton."""
    try:
        launch()
    except NotImplementedError:
        raise
    except Exception as err:
        if isinstance(err.__cause__, NotImplementedError) or "NotImplementedError" in str(err):
            raise NotImplementedError from err
        raise


def _check_guard(buffer, what):
    written = overwritten_guard(buffer)
    if written:
        raise ExerciseFailed(f"{what}: {written} elements past the end of the tensor were written. A store "
                             "without a mask writes the lanes outside the tensor too: pass mask= to tl.store.")


def _check_no_nan(x, what):
    if torch.isnan(x).any():
        raise ExerciseFailed(f"{what} holds NaN: a load without a mask read past the end of an input (the "
                             "checker surrounds every input with NaN). Pass mask= and other=0.0 to tl.load.")


# ------------------------------------------------------------------------------- 1. decode step

DECODE_SHAPE = dict(B=2, H=2, K=12, V=20)   # K and V not powers of two: both masks are needed
DECODE_BLOCKS = dict(BK=16, BV=8)            # three value blocks, the last one 4 lanes short


def _decode_inputs(seed):
    s = DECODE_SHAPE
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(s["B"], s["H"], s["K"], generator=gen)
    k = torch.nn.functional.normalize(torch.randn(s["B"], s["H"], s["K"], generator=gen), dim=-1)
    v = torch.randn(s["B"], s["H"], s["V"], generator=gen)
    g = -torch.rand(s["B"], s["H"], s["K"], generator=gen)          # log-decays in (-1, 0]
    beta = torch.rand(s["B"], s["H"], generator=gen)
    state = torch.randn(s["B"], s["H"], s["K"], s["V"], generator=gen)
    return q, k, v, g, beta, state


def launch_decode(kernel, q, k, v, g, beta, state, scale, *, block_k, block_v):
    """Launch a decode-step kernel with k3lite's signature on guarded copies; (o, new state, guards)."""
    B, H, K = q.shape
    V = v.shape[-1]
    dev = device()
    ins = [guarded(x.to(dev).contiguous(), float("nan"))[1] for x in (q, k, v, g, beta, state)]
    o_buffer, o = guarded(torch.empty(B, H, V, device=dev), SENTINEL)
    s_buffer, new_state = guarded(torch.empty(B, H, K, V, device=dev), SENTINEL)
    o.fill_(SENTINEL)
    new_state.fill_(SENTINEL)
    _run(lambda: kernel[(triton.cdiv(V, block_v), B * H)](*ins, o, new_state, scale, K, V, block_k, block_v))
    return o.cpu(), new_state.cpu(), (o_buffer, s_buffer)


def check_decode_kernel(kernel) -> bool:
    """``kernel`` is a @triton.jit function, ``k3lite.kernels.recurrent_step._decode_step`` for KDA alone (no gate
    kinds, no value flag): ``(q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s_ptr, o_ptr, s_out_ptr, scale, K, V, BK, BV)``."""

    def check():
        q, k, v, g, beta, state = _decode_inputs(0)
        scale = q.shape[-1] ** -0.5
        o, new_state, (o_buffer, s_buffer) = launch_decode(kernel, q, k, v, g, beta, state, scale,
                                                           block_k=DECODE_BLOCKS["BK"], block_v=DECODE_BLOCKS["BV"])
        _check_guard(s_buffer, "the new state")
        _check_guard(o_buffer, "the output")
        _check_no_nan(new_state, "the new state")
        _check_no_nan(o, "the output")
        if (new_state == SENTINEL).any() or (o == SENTINEL).any():
            raise ExerciseFailed("some entries were never stored: every program must store its whole [K, BV] "
                                 "state block and its BV outputs.")
        expected_o, expected_state = kda.step(q, k, v, g, beta, state=state, scale=scale, backend="torch")
        _, undecayed = kda.step(q, k, v, torch.zeros_like(g), beta, state=state, scale=scale, backend="torch")
        if torch.allclose(new_state, undecayed, atol=1e-5):
            raise ExerciseFailed("the state was not decayed: multiply the state tile by exp(g) (one factor per "
                                 "key channel, i.e. per row of the tile) before the delta correction.")
        expect_close(new_state, expected_state, what="new state", atol=1e-5,
                     hint="S = exp(g)[:, None] * S; v' = beta (v - S^T k); S = S + k v'^T.")
        expect_close(o, expected_o, what="output", atol=1e-5, hint="o = S^T (scale q), read after the write.")

    return attempt("Exercise 1 (decode-step kernel)", check)


# ------------------------------------------------------------------------------- 2. fused SiTU

SITU_N, SITU_BLOCK = 1000, 256   # four programs, the last one 24 lanes short


def check_situ_forward(kernel) -> bool:
    """``kernel(gate_ptr, up_ptr, out_ptr, n, beta1, beta2, BLOCK)`` writes h = SiTU_beta1(gate) beta2 tanh(up / beta2)
    for the n elements of flat float32 tensors, one program per BLOCK elements."""

    def check():
        gen = torch.Generator().manual_seed(1)
        gate = 8 * torch.randn(SITU_N, generator=gen)      # large enough that both caps bite
        up = 40 * torch.randn(SITU_N, generator=gen)
        beta1, beta2 = 4.0, 25.0
        dev = device()
        gate_in = guarded(gate.to(dev), float("nan"))[1]
        up_in = guarded(up.to(dev), float("nan"))[1]
        out_buffer, out = guarded(torch.full((SITU_N,), SENTINEL, device=dev), SENTINEL)
        _run(lambda: kernel[(triton.cdiv(SITU_N, SITU_BLOCK),)](gate_in, up_in, out, SITU_N, beta1, beta2,
                                                                SITU_BLOCK))
        out = out.cpu()
        _check_guard(out_buffer, "h")
        _check_no_nan(out, "h")
        if (out == SENTINEL).any():
            raise ExerciseFailed("some outputs were never stored: program i owns elements i*BLOCK ... i*BLOCK+BLOCK-1.")
        expected = situ_ops.situ_glu(gate, up, beta1, beta2, backend="torch")
        silu_glu = torch.nn.functional.silu(gate) * up
        if torch.allclose(out, silu_glu, atol=1e-3):
            raise ExerciseFailed("that is SiLU(gate) * up: SiTU caps both factors, beta1 tanh(gate / beta1) "
                                 "sigmoid(gate) and beta2 tanh(up / beta2).")
        expect_close(out, expected, what="h", atol=1e-4, rtol=1e-4,
                     hint="tanh(y) = 1 - 2 / (exp(2y) + 1) and sigmoid(x) = 1 / (1 + exp(-x)) avoid overflow.")

    return attempt("Exercise 2 (fused SiTU forward)", check)


# ------------------------------------------------------------------------------- 3. masks

@triton.jit
def copy_unmasked(x_ptr, y_ptr, BLOCK: tl.constexpr):
    # Every lane of every program loads and stores, inside the tensor or not.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def copy_masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # The lanes past n neither load nor store.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def measure_overrun(n: int, block: int, kernel=copy_unmasked) -> int:
    """Launch cdiv(n, block) programs of a copy kernel on an n-element guarded tensor; count the elements
    written past its end."""
    if not (0 < block <= GUARD and block & (block - 1) == 0):
        raise ValueError(f"block must be a power of two in [1, {GUARD}], got {block}")
    if n < 1:
        raise ValueError(f"n must be a positive number of elements, got {n}")
    dev = device()
    x = guarded(torch.arange(n, dtype=torch.float32, device=dev), float("nan"))[1]
    y_buffer, y = guarded(torch.zeros(n, device=dev), SENTINEL)
    grid = (triton.cdiv(n, block),)
    if kernel is copy_masked:
        kernel[grid](x, y, n, block)
    else:
        kernel[grid](x, y, block)
    return overwritten_guard(y_buffer)


OVERRUN_CASES = ((20, 16), (64, 16), (65, 16), (100, 32), (5, 64))


def check_overrun(predict) -> bool:
    """``predict(n, block) -> int``: elements that ``copy_unmasked`` writes past the end of an n-element tensor
    when launched with cdiv(n, block) programs of block lanes. Checked against the interpreter's own run."""

    def check():
        for n, block in OVERRUN_CASES:
            got = int(predict(n, block))
            measured = measure_overrun(n, block)
            if got == n % block and got != measured:
                raise ExerciseFailed(f"n % block = {n % block} counts the lanes of the last program that are "
                                     "inside the tensor; the question is about the others.")
            expect_equal(got, measured, what=f"predict({n}, {block})",
                         hint="The grid covers cdiv(n, block) * block lanes; the tensor has n elements.")

    return attempt("Exercise 3 (what breaks without masks)", check)


# ------------------------------------------------------------------------------- exercise 4

SPIKES = (-1e4, -1e6, -float("inf"))  # one huge log-gate, then gentle ones: the cases of the kernels' tests
CHUNK_LEN = 64


def spike_gates(spike: float, seed: int = 0) -> torch.Tensor:
    """One chunk of float32 log-gates: gentle ones (-1e-3 and smaller), ordinary ones (down to -2), and ``spike``
    at token 10."""
    gen = torch.Generator().manual_seed(seed)
    g = -1e-3 * torch.rand(CHUNK_LEN, generator=gen)
    g[30:40] = -2.0 * torch.rand(10, generator=gen)
    g[10] = spike
    return g


def decays_from_parts(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """exp(G_r - G_c) for every c <= r of the chunk, each span taken part by part in float32 as the kernels do
    (``k3lite.kernels.chunk_fwd._span``); zeros above the diagonal."""
    span = (hi[:, None] - hi[None, :]) + (lo[:, None] - lo[None, :])
    return torch.tril(torch.exp(torch.clamp(span, max=0.0)))


def exact_decays(g: torch.Tensor) -> torch.Tensor:
    """The same decays from a float64 running sum (what float32 parts should reproduce). Gates are raised to -1024
    first, as in the kernels: every decay through such a gate is 0 in float64 either way, and -inf gives no NaN."""
    sums = g.double().clamp_min(-1024.0).cumsum(0)
    span = sums[:, None] - sums[None, :]
    causal = torch.ones(len(g), len(g), dtype=torch.bool).tril()
    return torch.where(causal, torch.exp(torch.where(causal, span, 0.0)), 0.0)


def check_gate_sums(two_part_cumsum) -> bool:
    """``two_part_cumsum(g) -> (hi, lo)``: float32 tensors shaped like ``g`` (one chunk of log-gates, float32) with
    hi + lo the running sum of g. Checked on chunks with a spike of -1e4, -1e6 and -inf before gentle gates: every
    decay exp(G_r - G_c), formed part by part in float32 (:func:`decays_from_parts`), within 1e-6 of float64."""

    def check():
        for spike in SPIKES:
            g = spike_gates(spike)
            hi, lo = two_part_cumsum(g.clone())
            for name, part in (("hi", hi), ("lo", lo)):
                if not isinstance(part, torch.Tensor) or part.dtype != torch.float32 or part.shape != g.shape:
                    raise ExerciseFailed(f"{name} must be a float32 tensor of shape {tuple(g.shape)}, got "
                                         f"{getattr(part, 'dtype', type(part))} {tuple(getattr(part, 'shape', ()))}.")
            decays = decays_from_parts(hi, lo)
            if not torch.isfinite(decays).all():
                raise ExerciseFailed(f"With a gate of {spike} some decays are NaN: -inf - (-inf) is NaN. Raise every "
                                     "gate to a floor first (the kernels use -1024: exp(-1024) is already 0, so "
                                     "no decay changes).")
            expect_close(decays, exact_decays(g), what=f"the decays of a chunk with a gate of {spike}", atol=1e-6,
                         rtol=0.0, hint="After the spike a float32 running sum sits near -1024 or below, where "
                                        "float32 steps are larger than the gentle gates, so they are rounded away. "
                                        "Sum in float64, keep its float32 rounding as hi and what that rounding "
                                        "dropped as lo.")

    return attempt("Exercise 4 (gate sums that keep their digits)", check)
