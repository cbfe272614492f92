"""Checkers for chapter 06 (Kimi Delta Attention).

* :func:`check_kda_step` - one token of KDA for one head (a decay per key channel).
* :func:`check_two_timescale_gate` - a per-channel gate that beats every scalar gate on the
  chapter's two-timescale memory task.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite.exercises import ExerciseFailed, attempt, expect_close


def reference_kda_step(state, k, v, g, beta):
    """S ← Diag(exp g)·S (row d of S belongs to key channel d), then the delta correction."""
    decayed = torch.exp(g)[:, None] * state
    return decayed + beta * torch.outer(k, v - decayed.T @ k)


def _step_cases():
    generator = torch.Generator().manual_seed(7)
    cases = []
    for K, V, beta in [(4, 3, 0.6), (6, 6, 1.0), (5, 2, 0.3)]:
        state = torch.randn(K, V, generator=generator, dtype=torch.float64)
        k = F.normalize(torch.randn(K, generator=generator, dtype=torch.float64), dim=0)
        v = torch.randn(V, generator=generator, dtype=torch.float64)
        g = -2.0 * torch.rand(K, generator=generator, dtype=torch.float64)
        cases.append((state, k, v, g, beta))
    return cases


def check_kda_step(kda_step) -> bool:
    """``kda_step(S [K, V], k [K], v [V], g [K], beta: float) -> new S [K, V]``."""

    def check():
        for state, k, v, g, beta in _step_cases():
            got = kda_step(state.clone(), k, v, g.clone(), beta)
            expected = reference_kda_step(state, k, v, g, beta)
            got = torch.as_tensor(got, dtype=torch.float64)
            if got.shape != expected.shape:
                raise ExerciseFailed(f"the new state must have shape {tuple(expected.shape)} = [K, V], got "
                                     f"{tuple(got.shape)}. The decay scales rows (key channels), not columns.")
            K, V = state.shape
            if K == V and torch.allclose(got, _columns_decayed(state, k, v, g, beta)):
                raise ExerciseFailed("you scaled the columns of S. Row d of S is what key channel d stores: "
                                     "multiply row d by exp(g[d]), i.e. exp(g)[:, None] * S.")
            scalar = reference_kda_step(state, k, v, torch.full_like(g, g.mean().item()), beta)
            if torch.allclose(got, scalar):
                raise ExerciseFailed("all channels decayed by the same factor: that is Gated DeltaNet. "
                                     "Use g[d] for channel d.")
            late = torch.exp(g)[:, None] * (state + beta * torch.outer(k, v - state.T @ k))
            if torch.allclose(got, late):
                raise ExerciseFailed("you decay after writing. Decay first, then correct against the decayed S.")
            expect_close(got, expected, what=f"new state for K={K}, V={V}",
                         hint="S ← exp(g)[:, None] * S, then S + beta · k (v − Sᵀk)ᵀ.")

    return attempt("KDA step", check)


def _columns_decayed(state, k, v, g, beta):
    decayed = state * torch.exp(g)[None, :]
    return decayed + beta * torch.outer(k, v - decayed.T @ k)


# ---------------------------------------------------------------- the two-timescale task

TASK = dict(num_channels=32, num_long=4, num_segments=8, per_segment=8, trials=100, seed=11)


def task_layout(num_channels=32, num_long=4, num_segments=8, per_segment=8):
    """Steps and channels of the task: long pairs first, then segments of fast pairs."""
    long_channels = list(range(num_channels // 2))
    switch_steps = [num_long + s * per_segment for s in range(1, num_segments)]
    num_steps = num_long + num_segments * per_segment
    return num_steps, long_channels, switch_steps


def task_sequences(num_channels=32, num_long=4, num_segments=8, per_segment=8, trials=100, seed=11):
    """Unit keys (long ones in the first half of the channels, fast ones in the second) and unit values."""
    generator = torch.Generator().manual_seed(seed)
    half = num_channels // 2
    long_keys = F.normalize(torch.randn(trials, num_long, half, generator=generator), dim=-1)
    fast_keys = F.normalize(torch.randn(trials, num_segments * per_segment, half, generator=generator), dim=-1)
    keys = torch.cat([F.pad(long_keys, (0, half)), F.pad(fast_keys, (half, 0))], dim=1)
    values = F.normalize(torch.randn(trials, keys.shape[1], num_channels, generator=generator), dim=-1)
    return keys, values


def task_errors(gates, keys, values, num_long=4, per_segment=8):
    """Task error for each of ``gates [G, T, K]`` at once: mean squared read error, half on the long
    pairs and half on the last segment's fast pairs (writes with beta = 1)."""
    num_gates, trials = gates.shape[0], keys.shape[0]
    keys_g = keys.repeat(num_gates, 1, 1)                   # [G*trials, T, K]
    values_g = values.repeat(num_gates, 1, 1)
    decays = torch.exp(gates).repeat_interleave(trials, dim=0)  # [G*trials, T, K]
    S = keys.new_zeros(keys_g.shape[0], keys.shape[2], values.shape[2])
    for t in range(keys.shape[1]):
        S = decays[:, t, :, None] * S
        k_t = keys_g[:, t, :, None]                          # [N, K, 1]
        error = values_g[:, t, None, :] - k_t.transpose(1, 2) @ S
        S = S + k_t @ error
    squared = (keys_g @ S - values_g).square().sum(-1).reshape(num_gates, trials, -1)
    return 0.5 * (squared[:, :, :num_long].mean((1, 2)) + squared[:, :, -per_segment:].mean((1, 2)))


def scalar_gates(num_steps, num_channels, switch_steps, alphas):
    """One gate per alpha: log(alpha) on every channel at each switch, 0 elsewhere (floored at -30)."""
    gates = torch.zeros(len(alphas), num_steps, num_channels)
    log_alphas = torch.log(torch.as_tensor(alphas, dtype=torch.float32)).clamp_min(-30.0)
    gates[:, switch_steps] = log_alphas[:, None, None]
    return gates


def check_two_timescale_gate(per_channel_gate) -> bool:
    """``per_channel_gate(num_steps, num_channels, switch_steps, long_channels) -> g [num_steps, num_channels]``."""

    def check():
        num_steps, long_channels, switch_steps = task_layout()
        K = TASK["num_channels"]
        g = torch.as_tensor(per_channel_gate(num_steps, K, list(switch_steps), list(long_channels)),
                            dtype=torch.float32)
        if g.shape != (num_steps, K):
            raise ExerciseFailed(f"g must have shape [num_steps, num_channels] = [{num_steps}, {K}], "
                                 f"got {tuple(g.shape)}.")
        if torch.isnan(g).any() or (g > 0).any():
            raise ExerciseFailed("g is a log-decay: every entry must be <= 0 (and not nan).")
        g = g.clamp_min(-30.0)
        keys, values = task_sequences(**TASK)
        scalars = scalar_gates(num_steps, K, switch_steps, torch.linspace(0.0, 1.0, 21))
        errors = task_errors(torch.cat([g[None], scalars]), keys, values)
        ours, scalar = errors[0].item(), errors[1:].min().item()
        if (g[:, long_channels] < -1e-6).any() and ours >= scalar:
            raise ExerciseFailed(f"error {ours:.3f}, the best scalar gate reaches {scalar:.3f}. Your gate decays "
                                 "some long channels: the pairs written at the start must still be there at the end.")
        if ours >= scalar - 1e-3:
            raise ExerciseFailed(f"error {ours:.3f}, not below the best scalar gate's {scalar:.3f}. Which channels "
                                 "hold stale associations at each switch, and what should happen to them there?")

    return attempt("Two-timescale gate", check)
