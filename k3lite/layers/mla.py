"""Multi-head Latent Attention (DeepSeek-V2/V3 style) with the K3 additions.

Keys and values of every head are rebuilt from one small latent per token,
``c = RMSNorm(W_DKV x)`` (rank ``kv_lora_rank``), plus a ``rope_dim`` key part shared by all heads.
Only ``[c; k_rope]`` is cached: 512 + 64 = 576 numbers per token per layer in K3.

Two ways to compute the same attention:

* *expanded* (training, prefill): ``[k_nope_h; v_h] = W_UKV_h c`` for every cached token, then ordinary
  attention with keys ``[k_nope_h; k_rope]``;
* *absorbed* (decoding): fold the key up-projection into the query, ``q~_h = W_UK_h^T q_nope_h``, score
  the latents directly, ``q~_h . c_s + q_rope_h . k_rope_s``, mix latents, and only then expand
  ``o_h = W_UV_h sum_s p_s c_s``. Nothing per head is ever built for the cached tokens, and since all
  heads read the same rows, they fold into one matrix product per sequence.

The cache (:class:`MLACache`) is a buffer that doubles when full: a decoding step writes one row and
reads the rows once, copying nothing.

K3 uses no positional encoding (NoPE): the ``rope_dim`` channels stay, but are not rotated.
With ``use_rope=True`` they are rotated (decoupled RoPE, as in DeepSeek). K3 also multiplies the
attention output by ``sigmoid(W_g x)`` before the output projection (gated MLA), and the query
goes through a low-rank bottleneck ``W_UQ RMSNorm(W_DQ x)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from k3lite.layers.norms import RMSNorm, upcast

# Rows a CUDA decoding step reads past the cache's end, up to the next multiple of this (masked out, and
# zeros or another branch's tokens, never uninitialised memory: buffers are allocated zeroed). At the
# unaligned key lengths of decoding, cuBLAS picks slow kernels for the two products of the absorbed path, some
# without tensor cores (magma_sgemmEx, gemmSN), and at long contexts those two products then take most of a K3
# decode step; at an aligned length it picks its fast ones. Padding costs a few masked rows.
KEY_ALIGN_CUDA = 64


def key_alignment(device: torch.device) -> int:
    """How many rows the absorbed path rounds the key length up to on ``device`` (1: none)."""
    return KEY_ALIGN_CUDA if device.type == "cuda" else 1


def _room(rows: int, align: int) -> int:
    return -(-rows // align) * align


@dataclass
class _Rows:
    """The buffer ``[B, capacity, kv_lora_rank + rope_dim]`` behind one or more caches. ``filled``: how
    many rows hold tokens, i.e. the length of the longest cache written into it so far."""

    tensor: torch.Tensor
    filled: int


class MLACache(tuple):
    """What an MLA layer keeps per token: ``[c; k_rope]``, the normalised latent and the shared rope key.

    The rows live in one buffer ``[B, capacity, kv_lora_rank + rope_dim]`` that doubles when full, so a
    decoding step writes its own row instead of copying the whole history (``torch.cat`` would). A cache
    is a length into that buffer and, as a tuple, the pair ``(latent [B, length, kv_lora_rank],
    rope_key [B, length, rope_dim])`` of views of its first ``length`` rows (:attr:`entries` is both), so
    ``latent, rope_key = cache`` and ``torch.cat(cache, dim=-1)`` work as they did on the plain pair.

    Caches behave as values, as ``K3.run(tokens, cache)`` expects: :meth:`append` returns a new cache and
    the old one still describes the old prefix. Rows past a cache's end may already belong to another
    continuation of it, so :meth:`append` writes in place only when this cache ends where the buffer's
    written rows end (``length == filled``); a second continuation of the same cache (a branch) copies its
    prefix into a buffer of its own instead of overwriting the first one's tokens.
    """

    def __new__(cls, rows: _Rows, length: int, kv_lora_rank: int):
        entries = rows.tensor[:, :length]
        cache = super().__new__(cls, (entries[..., :kv_lora_rank], entries[..., kv_lora_rank:]))
        cache._rows, cache.length, cache.kv_lora_rank = rows, length, kv_lora_rank
        return cache

    @classmethod
    def from_tensors(cls, latent: torch.Tensor, rope_key: torch.Tensor, *, capacity: int = 0) -> "MLACache":
        """A cache of ``latent [B, S, kv_lora_rank]`` and ``rope_key [B, S, rope_dim]``, copied into a
        buffer with room for ``max(S, capacity)`` tokens (e.g. headroom for the steps to come), rounded up to
        a multiple of :func:`key_alignment` rows (64 on CUDA, 1 elsewhere). The spare rows are zeros."""
        for name, tensor in (("latent", latent), ("rope_key", rope_key)):
            if not isinstance(tensor, torch.Tensor) or tensor.dim() != 3:
                got = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
                raise ValueError(f"{name} must be a [B, S, width] tensor, got {got}")
        if rope_key.shape[:2] != latent.shape[:2] or (rope_key.dtype, rope_key.device) != (latent.dtype, latent.device):
            raise ValueError(f"rope_key must match latent's [B, S] = {tuple(latent.shape[:2])}, dtype {latent.dtype} "
                             f"and device, got {tuple(rope_key.shape)} {rope_key.dtype} on {rope_key.device}")
        if not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
        batch, length, rank = latent.shape
        room = _room(max(length, capacity), key_alignment(latent.device))
        tensor = latent.new_zeros((batch, room, rank + rope_key.shape[-1]))
        tensor[:, :length, :rank] = latent
        tensor[:, :length, rank:] = rope_key
        return cls(_Rows(tensor, length), length, rank)

    @property
    def entries(self) -> torch.Tensor:
        """``[B, length, kv_lora_rank + rope_dim]``: the cached ``[c; k_rope]`` rows (a view)."""
        return self._rows.tensor[:, :self.length]

    def padded_entries(self, align: int) -> torch.Tensor:
        """:attr:`entries` and the rows after them up to a length that is a multiple of ``align`` (as far
        as the buffer goes): ``[B, S_pad, kv_lora_rank + rope_dim]``, a view. The extra rows are not this
        cache's tokens; whoever reads them masks them out."""
        return self._rows.tensor[:, :min(_room(self.length, align), self.capacity)]

    @property
    def latent(self) -> torch.Tensor:
        """``[B, length, kv_lora_rank]`` (a view)."""
        return self[0]

    @property
    def rope_key(self) -> torch.Tensor:
        """``[B, length, rope_dim]`` (a view)."""
        return self[1]

    @property
    def batch_size(self) -> int:
        return self._rows.tensor.shape[0]

    @property
    def capacity(self) -> int:
        """Tokens the buffer has room for before it must grow."""
        return self._rows.tensor.shape[1]

    def nbytes(self) -> int:
        """Bytes of the cached tokens (``length`` rows, not the spare room)."""
        entries = self.entries
        return entries.numel() * entries.element_size()

    def append(self, latent: torch.Tensor, rope_key: torch.Tensor) -> "MLACache":
        """This cache followed by ``latent [B, T, kv_lora_rank]`` and ``rope_key [B, T, rope_dim]``."""
        self._check_new(latent, rope_key)
        new = torch.cat([latent, rope_key], dim=-1)           # only the T new tokens
        tensor = self._rows.tensor
        start, end = self.length, self.length + new.shape[1]
        fits = end <= tensor.shape[1]
        # While autograd records, an earlier step may have saved the buffer for its backward pass, and
        # writing into it would change what that step saw: then copy, as torch.cat would.
        recording = tensor.requires_grad or new.requires_grad
        rows = self._rows
        if not (fits and rows.filled == start and not recording):
            capacity = tensor.shape[1] if fits else max(end, 2 * tensor.shape[1])   # doubling: O(1) per token
            capacity = _room(capacity, key_alignment(tensor.device))
            rows = _Rows(tensor.new_zeros((tensor.shape[0], capacity, tensor.shape[2])), start)
            rows.tensor[:, :start] = tensor[:, :start]
        rows.tensor[:, start:end] = new
        rows.filled = end
        return MLACache(rows, end, self.kv_lora_rank)

    def _check_new(self, latent: torch.Tensor, rope_key: torch.Tensor) -> None:
        tensor = self._rows.tensor
        batch, rank, rope = tensor.shape[0], self.kv_lora_rank, tensor.shape[2] - self.kv_lora_rank
        same = (latent.dim() == rope_key.dim() == 3 and latent.shape[:2] == rope_key.shape[:2]
                and (latent.shape[0], latent.shape[2], rope_key.shape[2]) == (batch, rank, rope)
                and latent.dtype == rope_key.dtype == tensor.dtype
                and latent.device == rope_key.device == tensor.device)
        if not same:
            raise ValueError(f"latent, rope_key must be [B={batch}, T, {rank}] and [B, T, {rope}], {tensor.dtype} on "
                             f"{tensor.device} like the cache, got {tuple(latent.shape)} and {tuple(rope_key.shape)}, "
                             f"{latent.dtype} on {latent.device}")


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
    """Softmax attention, ``q [B, H, T, D]`` against ``k [B, H, S, D]``, ``v [B, H, S, E]``.

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
        if cache is not None and cache.batch_size != batch:
            raise ValueError(f"cache batch must be {batch}, got {cache.batch_size}")
        if absorb is None:
            absorb = cache is not None
        cache = MLACache.from_tensors(latent, rope_key) if cache is None else cache.append(latent, rope_key)
        attend = self._absorbed if absorb else self._expanded
        out = attend(q_nope, q_rope, cache, offset)                           # [B, T, H, v]
        out = out.reshape(batch, length, self.num_heads * self.v_dim)
        if self.gate_proj is not None:
            out = out * torch.sigmoid(self.gate_proj(x))
        return self.o_proj(out), cache

    def _expanded(self, q_nope, q_rope, cache, offset):
        latent, rope_key = cache.latent, cache.rope_key
        batch, total = latent.shape[:2]
        kv = self.kv_up(latent).view(batch, total, self.num_heads, self.nope_dim + self.v_dim)
        k_nope, v = kv[..., :self.nope_dim], kv[..., self.nope_dim:]
        k_rope = rope_key[:, :, None, :].expand(batch, total, self.num_heads, self.rope_dim)
        q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2)
        k = torch.cat([k_nope, k_rope], dim=-1).transpose(1, 2)
        return causal_attention(q, k, v.transpose(1, 2), scale=self.scale, offset=offset).transpose(1, 2)

    def _absorbed(self, q_nope, q_rope, cache, offset):
        """Attention read straight off the cached ``[c; k_rope]`` rows, all heads in one product.

        After absorption every head scores the *same* keys (the cached rows) and mixes the *same*
        values (the latents): decoding MLA is multi-query attention with one shared head of width
        ``kv_lora_rank + rope_dim``. So the heads need no axis of their own; folded into the query
        rows, ``[B, T*H, c + rope]``, each sequence is one matrix product with its cache. Broadcasting
        ``[B, H, T, .]`` queries against a ``[B, 1, S, .]`` cache instead makes ``torch.matmul`` expand
        the cache into H copies, the very reads absorption was meant to save.

        The cache is read in place (a transposed view, no copy) and in its own dtype: the products run
        in it (bf16 ones accumulate in float32; their scores come out rounded to bf16, which a fused
        kernel such as FlashMLA would avoid), and only the small ``[B, T*H, S]`` scores are taken to
        float32 for the softmax. On CUDA the products run over the cache rounded up to
        :data:`KEY_ALIGN_CUDA` rows, the rows past its end masked like future tokens (see there: cuBLAS).
        """
        w_uk, w_uv = self.up_weights()
        batch, steps = q_nope.shape[:2]
        q_latent = torch.einsum("bthn,hnc->bthc", q_nope, w_uk)              # q~ = W_UK^T q_nope
        rows = torch.cat([q_latent, q_rope], dim=-1).reshape(batch, steps * self.num_heads, -1)  # row t*H + h
        entries = cache.padded_entries(key_alignment(rows.device))           # [B, S (+ padding), c + rope]
        scores = upcast(rows @ entries.transpose(1, 2)) * self.scale          # [B, T*H, S (+ padding)]
        if steps > 1 or entries.shape[1] > cache.length:   # one query, the newest token, sees the whole cache
            query_pos = offset + torch.arange(steps, device=scores.device)
            key_pos = torch.arange(entries.shape[1], device=scores.device)
            future = (key_pos[None, :] > query_pos[:, None])[:, None, :]     # [T, 1 (heads), S]: padding too
            scores = scores.view(batch, steps, self.num_heads, -1).masked_fill(future, float("-inf"))
            scores = scores.view(batch, steps * self.num_heads, -1)
        probs = scores.softmax(dim=-1).to(entries.dtype)
        mixed_latent = (probs @ entries[..., :self.kv_lora_rank]).view(batch, steps, self.num_heads, self.kv_lora_rank)
        return torch.einsum("bthc,hvc->bthv", mixed_latent, w_uv)             # o_h = W_UV_h sum p c

