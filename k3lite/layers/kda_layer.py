"""The Kimi Delta Attention layer: projections, short convolutions, gates and output around ``ops.kda``.

Per token ``x`` (``H`` heads of key size ``K`` and value size ``V``):

* ``q, k = L2Norm(SiLU(ShortConv(W_q x)))``, ``L2Norm(SiLU(ShortConv(W_k x)))`` per head,
  ``v = SiLU(ShortConv(W_v x))``: a causal depthwise convolution over the last ``conv_size`` tokens;
* one log-decay per head *and key channel* through a rank-``gate_rank`` projection ``f = W_up W_down x``:
  Kimi Linear ``g = -exp(A_log) * softplus(f + dt_bias)`` (unbounded below), or
  K3 ``g = lower_bound * sigmoid(exp(A_log) * (f + dt_bias))`` (in ``(lower_bound, 0)``, K3: -5);
* ``beta = sigmoid(W_beta x)`` per head;
* ``o = W_o(RMSNorm(KDA(q, k, v, g, beta)) * sigmoid(W_gate x))``, the norm per head. K3 uses a
  full-rank output gate; Kimi Linear a rank-``V`` one (``output_gate_rank``).

``forward(x, cache=None)`` returns ``(y, KDACache)``. The cache is everything needed to continue:
the last ``conv_size - 1`` projected inputs of each convolution and the ``[B, H, K, V]`` state.
A prompt goes through ``ops.kda.chunked``, one new token through ``ops.kda.step``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from k3lite.layers.conv import ShortConv
from k3lite.layers.norms import GatedRMSNorm, upcast
from k3lite.ops import kda

GATE_FORMS = ("k3", "kimi_linear")
MODES = ("auto", "chunked", "recurrent")


class KDACache(NamedTuple):
    conv_states: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # q, k, v: [B, channels, conv_size - 1]
    recurrent_state: torch.Tensor                                 # [B, H, K, V], float32


class KDALayer(nn.Module):
    """A Kimi Delta Attention token mixer (see the module docstring for the equations)."""

    def __init__(self, hidden_size: int, num_heads: int, head_dim: int = 128, *, value_head_dim: int | None = None,
                 conv_size: int = 4, gate_form: str = "k3", gate_lower_bound: float = -5.0,
                 gate_rank: int | None = None, output_gate_rank: int | None = None, norm_eps: float = 1e-6,
                 chunk_size: int = 64, backend: str = "auto"):
        super().__init__()
        value_head_dim = head_dim if value_head_dim is None else value_head_dim
        gate_rank = head_dim if gate_rank is None else gate_rank
        for name, value in dict(hidden_size=hidden_size, num_heads=num_heads, head_dim=head_dim,
                                value_head_dim=value_head_dim, conv_size=conv_size, gate_rank=gate_rank,
                                chunk_size=chunk_size).items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if gate_form not in GATE_FORMS:
            raise ValueError(f"gate_form must be one of {GATE_FORMS}, got {gate_form!r}")
        if gate_form == "k3" and not gate_lower_bound < 0:
            raise ValueError(f"gate_lower_bound must be < 0, got {gate_lower_bound}")
        if output_gate_rank is not None and output_gate_rank < 1:
            raise ValueError(f"output_gate_rank must be None (full rank) or >= 1, got {output_gate_rank}")
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_dim, self.value_head_dim = head_dim, value_head_dim
        self.gate_form, self.gate_lower_bound = gate_form, gate_lower_bound
        self.chunk_size, self.backend = chunk_size, backend
        # A decode loop that owns its cache (K3.generate) sets this: each one-token step then writes the new
        # state over the cached one instead of allocating a new [B, H, K, V] tensor. Off by default, since
        # a caller may keep the old cache and expect it unchanged.
        self.update_state_in_place = False
        key_size, value_size = num_heads * head_dim, num_heads * value_head_dim

        self.q_proj = nn.Linear(hidden_size, key_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, key_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, value_size, bias=False)
        self.q_conv = ShortConv(key_size, conv_size)
        self.k_conv = ShortConv(key_size, conv_size)
        self.v_conv = ShortConv(value_size, conv_size)
        self.decay_down = nn.Linear(hidden_size, gate_rank, bias=False)
        self.decay_up = nn.Linear(gate_rank, key_size, bias=False)
        # Kimi Linear keeps Mamba's A = exp(A_log) in U(1, 16) per head. K3's bounded form starts from
        # A_log = 0 as the reference's safe gate does: with A up to 16, A * dt_bias reaches -110, the
        # sigmoid saturates and every channel starts (and stays) at retention 1. A is drawn for both forms
        # so that the other parameters start from the same values whichever form is chosen.
        A = torch.empty(num_heads).uniform_(1.0, 16.0)
        self.A_log = nn.Parameter(A.log() if gate_form == "kimi_linear" else torch.zeros(num_heads))
        # dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] per channel (floored at 1e-4 as the
        # reference does).
        dt = torch.empty(key_size).uniform_(math.log(1e-3), math.log(1e-1)).exp().clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.beta_proj = nn.Linear(hidden_size, num_heads, bias=False)
        if output_gate_rank is None:
            self.gate_proj = nn.Linear(hidden_size, value_size, bias=False)
        else:
            self.gate_proj = nn.Sequential(nn.Linear(hidden_size, output_gate_rank, bias=False),
                                           nn.Linear(output_gate_rank, value_size, bias=False))
        self.o_norm = GatedRMSNorm(value_head_dim, eps=norm_eps)
        self.o_proj = nn.Linear(value_size, hidden_size, bias=False)

    def decay(self, x: torch.Tensor) -> torch.Tensor:
        """Log-space decay ``g [B, T, H, K]`` (at least float32, <= 0) in the configured form."""
        f = upcast(self.decay_up(self.decay_down(x))).unflatten(-1, (self.num_heads, self.head_dim))
        f = f + self.dt_bias.to(f.dtype).view(self.num_heads, self.head_dim)
        rate = self.A_log.to(f.dtype).exp().view(self.num_heads, 1)
        if self.gate_form == "kimi_linear":
            return -rate * F.softplus(f)
        return self.gate_lower_bound * torch.sigmoid(rate * f)

    def mixer_inputs(self, x: torch.Tensor, cache: KDACache | None = None):
        """``(q, k, v, g, beta, conv_states)`` exactly as handed to ``ops.kda``."""
        conv_states = (None, None, None) if cache is None else cache.conv_states
        heads = (self.num_heads, self.head_dim)
        q, q_state = self.q_conv(self.q_proj(x), conv_states[0])
        k, k_state = self.k_conv(self.k_proj(x), conv_states[1])
        v, v_state = self.v_conv(self.v_proj(x), conv_states[2])
        q = F.normalize(q.unflatten(-1, heads), dim=-1)
        k = F.normalize(k.unflatten(-1, heads), dim=-1)
        v = v.unflatten(-1, (self.num_heads, self.value_head_dim))
        beta = torch.sigmoid(upcast(self.beta_proj(x)))
        return q, k, v, self.decay(x), beta, (q_state, k_state, v_state)

    def forward(self, x: torch.Tensor, cache: KDACache | None = None, *, mode: str = "auto"):
        """``x [B, T, hidden]`` -> ``(y [B, T, hidden], KDACache)``.

        ``mode="auto"``: the single-token step when continuing from a cache with one token, otherwise
        the chunked form; ``"recurrent"`` forces the token-by-token reference (for tests and lessons).
        """
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must be [B, T, {self.hidden_size}], got shape {tuple(x.shape)}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        q, k, v, g, beta, conv_states = self.mixer_inputs(x, cache)
        state = None if cache is None else cache.recurrent_state
        if mode == "recurrent":
            o, state = kda.recurrent(q, k, v, g, beta, initial_state=state)
        elif mode == "auto" and state is not None and x.shape[1] == 1:
            o, state = kda.step(q[:, 0], k[:, 0], v[:, 0], g[:, 0], beta[:, 0], state=state, backend=self.backend,
                                inplace=self.update_state_in_place)
            o = o[:, None]
        else:
            o, state = kda.chunked(q, k, v, g, beta, initial_state=state, chunk_size=self.chunk_size,
                                   backend=self.backend)
        gate = self.gate_proj(x).unflatten(-1, (self.num_heads, self.value_head_dim))
        o = self.o_norm(o, gate).flatten(-2)
        return self.o_proj(o), KDACache(conv_states, state)
