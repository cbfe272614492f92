"""The short causal convolution in front of q, k and v of every linear-attention layer in k3lite.

``ShortConv`` is a depthwise convolution over time: output ``t`` of channel ``c`` mixes the inputs
``t - kernel_size + 1 .. t`` of that channel (zeros before the start of the sequence, or the cached
inputs of the previous tokens), optionally followed by SiLU. It is how a linear-attention layer sees
the previous token (an induction head needs "the key just before this value").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

FORMS = ("taps", "conv1d")


class ShortConv(nn.Module):
    """Causal depthwise convolution over time, then SiLU (``silu=False``: no activation).

    ``forward(x [B, T, C], state [B, C, kernel_size - 1] | None) -> (y [B, T, C], new_state)``;
    the state holds the inputs of the previous tokens (zeros at the start of a sequence).

    Two forms of the same convolution. They differ in parameter names and in the last bits of the
    result (the order of the ``kernel_size``-term sum), and saved weights and stored results depend on
    both, so both are kept:

    * ``form="taps"`` (the KDA layer, K3): parameter ``weight [C, kernel_size]``, each output the sum of
      its window times the taps. Every output is the same arithmetic whatever the number of tokens, so a
      prompt in one call and the same tokens one decode step at a time give identical bits.
    * ``form="conv1d"`` (the MQAR and bake-off models of ``k3lite.models.mixers`` and ``k3lite.bakeoff``):
      an ``nn.Conv1d`` named ``conv`` (``conv.weight [C, 1, kernel_size]``), as those models were trained
      and their stored results produced.

    Both start from ``nn.Conv1d``'s initialisation, uniform in ``±1/sqrt(kernel_size)``.
    """

    def __init__(self, channels: int, kernel_size: int = 4, *, silu: bool = True, form: str = "taps"):
        super().__init__()
        if channels < 1 or kernel_size < 1:
            raise ValueError(f"channels and kernel_size must be >= 1, got {channels} and {kernel_size}")
        if form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.kernel_size, self.silu, self.form = kernel_size, silu, form
        if form == "conv1d":
            self.conv = nn.Conv1d(channels, channels, kernel_size, groups=channels, bias=False)
        else:
            self.weight = nn.Parameter(torch.empty(channels, kernel_size))
            bound = 1.0 / math.sqrt(kernel_size)  # nn.Conv1d's default for a depthwise kernel
            nn.init.uniform_(self.weight, -bound, bound)

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None):
        batch, _, channels = x.shape
        history = self.kernel_size - 1
        if state is None:
            padded = F.pad(x.transpose(1, 2), (history, 0))                     # [B, C, history + T]
        elif state.shape != (batch, channels, history):
            raise ValueError(f"conv cache state must be [B, C, kernel_size-1] = {(batch, channels, history)}, "
                             f"got {tuple(state.shape)}")
        else:
            padded = torch.cat([state.to(x.dtype), x.transpose(1, 2)], dim=-1)
        if self.form == "conv1d":
            y = self.conv(padded)
        else:
            windows = padded.unfold(-1, self.kernel_size, 1)                    # [B, C, T, kernel]
            y = (windows * self.weight.to(x.dtype)[:, None, :]).sum(-1)         # last tap = current token
        if self.silu:
            y = F.silu(y)
        return y.transpose(1, 2), padded[..., padded.shape[-1] - history:]

    def extra_repr(self) -> str:
        channels = (self.conv.weight if self.form == "conv1d" else self.weight).shape[0]
        return f"{channels}, kernel_size={self.kernel_size}, silu={self.silu}, form={self.form!r}"
