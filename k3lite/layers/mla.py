"""Multi-head Latent Attention (DeepSeek-V2/V3 style) with the K3 additions.

Keys and values of every head are rebuilt from one small latent per token,
``c = RMSNorm(W_DKV x)`` (rank ``kv_lora_rank``), plus a ``rope_dim`` key part shared by all heads.
Only ``[c; k_rope]`` is cached: 512 + 64 = 576 numbers per token per layer in K3.

Two ways to compute the same attention:

* *expanded* (training, prefill): ``[k_nope_h; v_h] = W_UKV_h c`` for every cached token, then ordinary
  attention with keys ``[k_nope_h; k_rope]``;
* *absorbed* (decoding): fold the key up-projection into the query, ``q~_h = W_UK_h^T q_nope_h``, score
  the latents directly, ``q~_h . c_s + q_rope_h . k_rope_s``, mix latents, and only then expand
  ``o_h = W_UV_h sum_s p_s c_s``. Nothing per head is ever built for the cached tokens.

K3 uses no positional encoding (NoPE): the ``rope_dim`` channels stay, but are not rotated.
With ``use_rope=True`` they are rotated (decoupled RoPE, as in DeepSeek). K3 also multiplies the
attention output by ``sigmoid(W_g x)`` before the output projection (gated MLA), and the query
goes through a low-rank bottleneck ``W_UQ RMSNorm(W_DQ x)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from k3lite.layers.norms import RMSNorm, upcast


class MLACache(NamedTuple):
    """What an MLA layer keeps per token: the normalised latent and the shared rope key."""

    latent: torch.Tensor    # [B, S, kv_lora_rank]
    rope_key: torch.Tensor  # [B, S, rope_dim]

    @property
    def length(self) -> int:
        return self.latent.shape[1]


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of ``x [B, T, ..., R]`` at ``positions [T]`` (rotate-half layout)."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]          # [T, half]
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 3) + (half,)
    cos, sin = angles.cos().view(shape), angles.sin().view(shape)
    x1, x2 = upcast(x)[..., :half], upcast(x)[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
                     offset: int) -> torch.Tensor:
    """Softmax attention, ``q [B, H, T, D]`` against ``k [B, H|1, S, D]``, ``v [B, H|1, S, E]``.

    Query ``t`` sits at position ``offset + t`` and sees keys ``0 .. offset + t``.
    """
    scores = (upcast(q) @ upcast(k).transpose(-1, -2)) * scale
    query_pos = offset + torch.arange(q.shape[2], device=q.device)
    key_pos = torch.arange(k.shape[2], device=q.device)
    scores = scores.masked_fill(key_pos[None, :] > query_pos[:, None], float("-inf"))
    return (scores.softmax(dim=-1) @ upcast(v)).to(q.dtype)


class MLA(nn.Module):
    """``forward(x [B, T, D], cache=None, *, absorb=None) -> (y [B, T, D], MLACache)``.

    ``absorb=None`` picks the absorbed path when a cache is passed (decoding) and the expanded
    path otherwise; both give the same result up to rounding.
    """

    def __init__(self, hidden_size: int, num_heads: int, *, q_lora_rank: int | None = 1536,
                 kv_lora_rank: int = 512, nope_dim: int = 128, rope_dim: int = 64, v_dim: int = 128,
                 use_rope: bool = False, rope_theta: float = 10000.0, output_gate: bool = True,
                 norm_eps: float = 1e-6):
        super().__init__()
        for name, value in dict(hidden_size=hidden_size, num_heads=num_heads, kv_lora_rank=kv_lora_rank,
                                nope_dim=nope_dim, v_dim=v_dim).items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if rope_dim < 0 or (use_rope and rope_dim % 2):
            raise ValueError(f"rope_dim must be >= 0 (and even with use_rope), got {rope_dim}")
        if q_lora_rank is not None and q_lora_rank < 1:
            raise ValueError(f"q_lora_rank must be None or >= 1, got {q_lora_rank}")
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.kv_lora_rank, self.nope_dim, self.rope_dim, self.v_dim = kv_lora_rank, nope_dim, rope_dim, v_dim
        self.use_rope, self.rope_theta = use_rope, rope_theta
        self.scale = (nope_dim + rope_dim) ** -0.5
        q_width = num_heads * (nope_dim + rope_dim)
        if q_lora_rank is None:
            self.q_proj = nn.Linear(hidden_size, q_width, bias=False)
        else:
            self.q_down = nn.Linear(hidden_size, q_lora_rank, bias=False)
            self.q_norm = RMSNorm(q_lora_rank, eps=norm_eps)
            self.q_up = nn.Linear(q_lora_rank, q_width, bias=False)
        self.kv_down = nn.Linear(hidden_size, kv_lora_rank + rope_dim, bias=False)
        self.kv_norm = RMSNorm(kv_lora_rank, eps=norm_eps)
        self.kv_up = nn.Linear(kv_lora_rank, num_heads * (nope_dim + v_dim), bias=False)
        self.gate_proj = nn.Linear(hidden_size, num_heads * v_dim, bias=False) if output_gate else None
        self.o_proj = nn.Linear(num_heads * v_dim, hidden_size, bias=False)

    def queries(self, x: torch.Tensor):
        """``(q_nope [B, T, H, nope], q_rope [B, T, H, rope])`` before any rotation."""
        if hasattr(self, "q_proj"):
            q = self.q_proj(x)
        else:
            q = self.q_up(self.q_norm(self.q_down(x)))
        q = q.view(*x.shape[:2], self.num_heads, self.nope_dim + self.rope_dim)
        return q[..., :self.nope_dim], q[..., self.nope_dim:]

    def latents(self, x: torch.Tensor):
        """``(c [B, T, kv_lora_rank], k_rope [B, T, rope])``: exactly what the cache stores."""
        compressed = self.kv_down(x)
        return self.kv_norm(compressed[..., :self.kv_lora_rank]), compressed[..., self.kv_lora_rank:]

    def up_weights(self):
        """``(W_UK [H, nope, kv_lora_rank], W_UV [H, v, kv_lora_rank])`` split out of ``kv_up``."""
        weight = self.kv_up.weight.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        return weight[:, :self.nope_dim], weight[:, self.nope_dim:]

    def forward(self, x: torch.Tensor, cache: MLACache | None = None, *, absorb: bool | None = None):
        if x.dim() != 3 or x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must be [B, T, {self.hidden_size}], got shape {tuple(x.shape)}")
        batch, length, _ = x.shape
        offset = 0 if cache is None else cache.length
        q_nope, q_rope = self.queries(x)
        latent, rope_key = self.latents(x)
        if self.use_rope and self.rope_dim:
            positions = torch.arange(offset, offset + length, device=x.device)
            q_rope = rotate(q_rope, positions, self.rope_theta)
            rope_key = rotate(rope_key, positions, self.rope_theta)
        if cache is not None:
            if cache.latent.shape[0] != batch:
                raise ValueError(f"cache batch must be {batch}, got {cache.latent.shape[0]}")
            latent = torch.cat([cache.latent, latent], dim=1)
            rope_key = torch.cat([cache.rope_key, rope_key], dim=1)
        if absorb is None:
            absorb = cache is not None
        attend = self._absorbed if absorb else self._expanded
        out = attend(q_nope, q_rope, latent, rope_key, offset)                # [B, T, H, v]
        out = out.reshape(batch, length, self.num_heads * self.v_dim)
        if self.gate_proj is not None:
            out = out * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(out), MLACache(latent, rope_key)

    def _expanded(self, q_nope, q_rope, latent, rope_key, offset):
        batch, total = latent.shape[:2]
        kv = self.kv_up(latent).view(batch, total, self.num_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv[..., :self.nope_dim], kv[..., self.nope_dim:]
        k_rope = rope_key[:, :, None, :].expand(batch, total, self.num_heads, self.rope_dim)
        q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2)
        k = torch.cat([k_nope, k_rope], dim=-1).transpose(1, 2)
        return causal_attention(q, k, v.transpose(1, 2), scale=self.scale, offset=offset).transpose(1, 2)

    def _absorbed(self, q_nope, q_rope, latent, rope_key, offset):
        w_uk, w_uv = self.up_weights()
        q_latent = torch.einsum("bthn,hnc->bthc", q_nope, w_uk)              # q~ = W_UK^T q_nope
        q = torch.cat([q_latent, q_rope], dim=-1).transpose(1, 2)             # [B, H, T, c + rope]
        k = torch.cat([latent, rope_key], dim=-1)[:, None]                    # [B, 1, S, c + rope]
        mixed_latent = causal_attention(q, k, latent[:, None], scale=self.scale, offset=offset)
        return torch.einsum("bhtc,hvc->bthv", mixed_latent, w_uv)             # o_h = W_UV_h sum p c

