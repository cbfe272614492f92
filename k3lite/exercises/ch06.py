"""Checkers for chapter 06 (Kimi Delta Attention).

* :func:`check_readback_prediction` - a prediction: what a key spread over fast and slow channels reads back.
* :func:`check_two_timescale_gate` - a per-channel gate that beats every scalar gate on the
  chapter's two-timescale memory task.
* :func:`check_gla_chunk` - transfer: the per-channel pairwise decay in gated linear attention (no delta rule).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from k3lite.exercises import ExerciseFailed, attempt, expect_close

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


# ---------------------------------------------------------------- prediction: a read through fast and slow channels

def check_readback_prediction(predict, measured_fraction, *, kept_decay: float, fast_decay: float,
                              steps: int) -> bool:
    """``predict() -> float``: the fraction of v read back after ``steps`` tokens from a key spread evenly over
    channels that decay by ``kept_decay`` and ``fast_decay`` per token (half each); right within 0.1 of the
    measurement."""

    def check():
        prediction = predict()
        try:
            predicted = float(prediction)
        except (TypeError, ValueError):
            raise ExerciseFailed("return your prediction as one number between 0 and 1, e.g. 0.3.") from None
        why = (f"Reading with q = k gives Σ_d k_d² α_d^{steps} · v: each channel keeps its own share of the "
               f"association, so half of the key's weight keeps {kept_decay}^{steps} and half "
               f"{fast_decay}^{steps}: 0.5 · {kept_decay ** steps:.3g} + 0.5 · {fast_decay ** steps:.3g}.")
        if abs(predicted - measured_fraction) > 0.1:
            mean_gate = ((kept_decay + fast_decay) / 2) ** steps
            if abs(predicted - mean_gate) < 0.05 and abs(mean_gate - measured_fraction) > 0.1:
                gap = "You averaged the gates first: a mean gate is what a scalar gate would do, not KDA. "
            elif predicted < measured_fraction:
                gap = "The slow channels keep their half of the association: it is not lost with the fast half. "
            else:
                gap = "The fast channels forget their half of the association within a few tokens. "
            raise ExerciseFailed(f"you predicted {predicted:g}, the run read back {measured_fraction:.3f}. {gap}{why}")
        print(f"Predicted {predicted:g}, read back {measured_fraction:.3f}. {why}")

    return attempt("Read-back prediction", check)


# ---------------------------------------------------------------- transfer: gated linear attention's chunk

def _gla_by_tokens(q, k, v, g):
    """Gated linear attention from a zero state: S_t = Diag(exp g_t) S_{t-1} + k_t v_tᵀ, o_t = S_tᵀ q_t."""
    q, k, v, g = (x.double() for x in (q, k, v, g))
    state = q.new_zeros(q.shape[1], v.shape[1])
    outputs = []
    for t in range(q.shape[0]):
        state = torch.exp(g[t])[:, None] * state + torch.outer(k[t], v[t])
        outputs.append(state.T @ q[t])
    return torch.stack(outputs)


def _gla_cases():
    """(name, q, k, v, g) in float32: mild gates, and K3's strongest gate (-5) at every token of 32."""
    generator = torch.Generator().manual_seed(9)
    cases = []
    for name, chunk, strongest in (("mild gates", 6, False), ("g = -5 on every channel and token", 32, True)):
        q = torch.randn(chunk, 4, generator=generator)
        k = F.normalize(torch.randn(chunk, 4, generator=generator), dim=-1)
        v = torch.randn(chunk, 3, generator=generator)
        g = torch.full((chunk, 4), -5.0) if strongest else -torch.rand(chunk, 4, generator=generator)
        cases.append((name, q, k, v, g))
    return cases


def check_gla_chunk(gla_chunk) -> bool:
    """``gla_chunk(q [C,K], k [C,K], v [C,V], g [C,K]) -> o [C,V]`` from a zero state, no scale, float32 inputs."""

    def check():
        for name, q, k, v, g in _gla_cases():
            expected = _gla_by_tokens(q, k, v, g)
            got = torch.as_tensor(gla_chunk(q.clone(), k.clone(), v.clone(), g.clone())).double()
            if got.shape != expected.shape:
                raise ExerciseFailed(f"{name}: the outputs must have shape {tuple(expected.shape)} = [C, V], "
                                     f"got {tuple(got.shape)}.")
            if not torch.isfinite(got).all():
                raise ExerciseFailed(f"{name}: inf or nan in your outputs. In float32, e^(−G_i) overflows once "
                                     "|G| passes about 88: form exp(G_r − G_i) per channel, masked for i > r, "
                                     "before you sum over the channels.")
            if name == "mild gates":
                G = torch.cumsum(g.double(), dim=0)
                decay = torch.exp(G[:, None, :] - G[None, :, :])            # [r, i, K]
                scores = torch.einsum("rd,id,rid->ri", q.double(), k.double(), decay)
                if torch.allclose(got, torch.tril(scores, -1) @ v.double(), atol=1e-4):
                    raise ExerciseFailed("token r reads its own write: with no delta correction the diagonal "
                                         "(i = r, decay 1) belongs to the scores; mask only i > r.")
                scalar = _gla_by_tokens(q, k, v, g.mean(-1, keepdim=True).expand_as(g))
                if torch.allclose(got, scalar, atol=1e-4):
                    raise ExerciseFailed("every channel decayed alike: the decay belongs inside the sum over "
                                         "channels, P[r, i] = Σ_d q_rd k_id exp(G_rd − G_id).")
            expect_close(got, expected, what=f"{name}: outputs of the chunk", atol=1e-4, rtol=1e-3,
                         hint="O = P V with P[r, i] = Σ_d q_rd k_id exp(G_rd − G_id) for i ≤ r, G = cumsum(g).")

    return attempt("Gated linear attention chunk", check)
