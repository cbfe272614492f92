"""GPT-2, read top to bottom: the baseline every later chapter improves on.

A decoder-only transformer: token and learned position embeddings, a stack of pre-LayerNorm
blocks (causal multi-head softmax attention, then a GELU-tanh MLP four times as wide, each
added back to the residual stream), a final LayerNorm, and logits through the transposed token
embedding (input and output embeddings are tied).

Incremental decoding keeps every layer's keys and values in a :class:`KVCache`, so a new token
costs one row of projections instead of recomputing the whole history. The cache is preallocated:
a step writes its own keys and values and reads the history once, copying none of it. Weights load
from, and export to, the Hugging Face naming used by real GPT-2 checkpoints (:meth:`GPT2.from_hf`,
:meth:`GPT2.to_hf_state_dict`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from k3lite._validate import check_token_ids, token_id_tensor
from k3lite.models import sampling


@dataclass(frozen=True)
class GPT2Config:
    """Hyper-parameters; the defaults are GPT-2 small (124,439,808 parameters)."""

    vocab_size: int = 50257
    n_ctx: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        for name in ("vocab_size", "n_ctx", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def mlp_width(self) -> int:
        return 4 * self.n_embd

    @classmethod
    def small(cls) -> "GPT2Config":
        return cls()

    @classmethod
    def medium(cls) -> "GPT2Config":
        return cls(n_layer=24, n_head=16, n_embd=1024)

    @classmethod
    def large(cls) -> "GPT2Config":
        return cls(n_layer=36, n_head=20, n_embd=1280)

    @classmethod
    def xl(cls) -> "GPT2Config":
        return cls(n_layer=48, n_head=25, n_embd=1600)

    @classmethod
    def tiny(cls, **overrides) -> "GPT2Config":
        """A byte-level model of about a million parameters that trains on a laptop CPU in seconds."""
        settings = dict(vocab_size=256, n_ctx=128, n_layer=4, n_head=4, n_embd=128)
        settings.update(overrides)
        return cls(**settings)


class KVCache:
    """Every layer's keys and values so far, each ``[B, T, H, head_dim]`` (the course's layout).

    Each layer writes into its own preallocated buffer ``[B, capacity, H, head_dim]``, and
    ``keys[layer]``, ``values[layer]`` are views of the first ``length`` rows. Growing the history by
    ``torch.cat`` would copy all of it at every step (a sequence of ``T`` tokens would cost ``O(T^2)``
    copying); a buffer that doubles when full copies each token about once on average, amortised O(1)
    per step. ``capacity`` reserves room up front (``generate`` reserves prompt + new tokens, so its
    loop never grows a buffer).
    """

    def __init__(self, n_layer: int, *, capacity: int = 0):
        if not isinstance(n_layer, int) or n_layer < 1:
            raise ValueError(f"n_layer must be a positive int, got {n_layer!r}")
        if not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be a non-negative int, got {capacity!r}")
        self.n_layer, self.reserved = n_layer, capacity
        self._key_buffers: list[torch.Tensor | None] = [None] * n_layer
        self._value_buffers: list[torch.Tensor | None] = [None] * n_layer
        self._lengths = [0] * n_layer   # per layer: during a forward pass, layer 0 is ahead of the rest

    @property
    def keys(self) -> list[torch.Tensor | None]:
        """Per layer, the cached keys ``[B, length, H, head_dim]`` (a view of the buffer), or None."""
        return [_history(buffer, n) for buffer, n in zip(self._key_buffers, self._lengths)]

    @property
    def values(self) -> list[torch.Tensor | None]:
        """Per layer, the cached values ``[B, length, H, head_dim]`` (a view of the buffer), or None."""
        return [_history(buffer, n) for buffer, n in zip(self._value_buffers, self._lengths)]

    @property
    def length(self) -> int:
        """Number of tokens already cached (the position the next token will take)."""
        return self._lengths[0]

    @property
    def batch_size(self) -> int | None:
        return None if self._key_buffers[0] is None else self._key_buffers[0].shape[0]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Write this step's keys and values ``[B, T, H, head_dim]`` for ``layer`` after the cached
        ones; return the whole history of both (views of the buffers: nothing cached is copied)."""
        start = self._lengths[layer]
        end = start + k.shape[1]
        for buffers, new, name in ((self._key_buffers, k, "k"), (self._value_buffers, v, "v")):
            buffer = _room_for(buffers[layer], new, start, end, self.reserved, name)
            buffer[:, start:end] = new
            buffers[layer] = buffer
        self._lengths[layer] = end
        return self._key_buffers[layer][:, :end], self._value_buffers[layer][:, :end]

    def nbytes(self) -> int:
        """Bytes of the cached keys and values (``length`` tokens; see :meth:`capacity_nbytes`)."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)

    def capacity_nbytes(self) -> int:
        """Bytes allocated for keys and values, spare room included."""
        buffers = self._key_buffers + self._value_buffers
        return sum(t.numel() * t.element_size() for t in buffers if t is not None)


def _history(buffer: torch.Tensor | None, length: int) -> torch.Tensor | None:
    return None if buffer is None else buffer[:, :length]


def _room_for(buffer: torch.Tensor | None, new: torch.Tensor, start: int, end: int, reserved: int,
              name: str) -> torch.Tensor:
    """``buffer`` if rows ``start:end`` of it can be written in place, else a larger buffer holding its
    first ``start`` rows: at least twice as large, so growing stays amortised O(1) per token."""
    if buffer is None:
        return new.new_empty((new.shape[0], max(end, reserved), *new.shape[2:]))
    if (new.shape[0], new.shape[2:], new.dtype, new.device) != (buffer.shape[0], buffer.shape[2:], buffer.dtype,
                                                                 buffer.device):
        raise ValueError(f"{name} must be [B={buffer.shape[0]}, T, {', '.join(map(str, buffer.shape[2:]))}] "
                         f"{buffer.dtype} on {buffer.device} like the cache, got {tuple(new.shape)} {new.dtype} "
                         f"on {new.device}")
    # While autograd records, an earlier step may have saved this buffer for its backward pass:
    # writing into it would change what that step saw. Then copy, as torch.cat would.
    recording = buffer.requires_grad or new.requires_grad
    fits = end <= buffer.shape[1]
    if fits and not recording:
        return buffer
    capacity = buffer.shape[1] if fits else max(end, 2 * buffer.shape[1])
    larger = buffer.new_empty((buffer.shape[0], capacity, *buffer.shape[2:]))
    larger[:, :start] = buffer[:, :start]
    return larger


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Softmax attention where query ``i`` sees keys ``0 .. past + i``.

    ``q`` is ``[B, Tq, H, D]``; ``k`` and ``v`` are ``[B, Tk, H, D]`` with ``Tk >= Tq``: the last
    ``Tq`` keys belong to the queries themselves, the ``Tk - Tq`` before them come from a cache.
    """
    q_len, k_len = q.shape[1], k.shape[1]
    past = k_len - q_len
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    query_pos = torch.arange(q_len, device=q.device)[:, None] + past
    key_pos = torch.arange(k_len, device=q.device)[None, :]
    scores = scores.masked_fill(key_pos > query_pos, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", weights, v)


# The SDPA backends the model lets PyTorch choose from: every one but cuDNN's. cuDNN's backend builds a new
# execution plan for every new key length, and in decode the key length grows by one at every step: each call
# then spends far more host time building a plan than GPU time running it, and a decode step with cuDNN allowed
# is an order of magnitude slower than without. Choosing costs host time too (entering sdpa_kernel, once per
# layer), which on a slow host is not negligible.
SDPA_BACKENDS = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)


def sdpa_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                          backends: tuple[SDPBackend, ...] | None = SDPA_BACKENDS) -> torch.Tensor:
    """:func:`causal_attention` through ``F.scaled_dot_product_attention``: one fused kernel on CUDA.

    SDPA wants ``[B, H, T, D]``; the transposes are views, so the kernel reads the cache buffers in
    place, with their strides, where ``einsum`` would first make contiguous copies of K and V (the
    whole cache, every step). The causal mask has to be aligned to the bottom-right corner, query
    ``t`` at position ``past + t``, which SDPA's ``is_causal`` (top-left) is not once a cache is in
    front; a single query token is the last position and sees every key, so it needs no mask.

    ``backends``: the SDPA backends allowed during the call (``torch.nn.attention.sdpa_kernel``, which
    overrides the global ``torch.backends.cuda.enable_*_sdp`` flags while it lasts and restores them
    after). The default, :data:`SDPA_BACKENDS`, is flash, memory-efficient and math attention, leaving out
    cuDNN's backend, which plans anew for every key length (see the comment above :data:`SDPA_BACKENDS`);
    ``None`` lets PyTorch pick by its global flags, cuDNN included where enabled (what this function did
    before, kept to measure the difference). On a CPU only the flash and math backends exist, both allowed
    by the default and by PyTorch's default flags, so with those flags a CPU picks, and computes, the same.
    """
    q_len, k_len = q.shape[1], k.shape[1]
    mask = None if q_len == 1 else causal_lower_right(q_len, k_len)
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if backends is None:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        with sdpa_kernel(list(backends)):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.n_head, self.head_dim = config.n_head, config.head_dim
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        batch, steps, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=-1)
        q, k, v = (t.view(batch, steps, self.n_head, self.head_dim) for t in (q, k, v))
        if cache is not None:
            k, v = cache.append(layer, k, v)
        # On a CPU the formula as written: it is what the chapters print, to the last bit.
        attend = sdpa_causal_attention if q.is_cuda else causal_attention
        out = attend(q, k, v)
        return self.proj(out.reshape(batch, steps, width))


class MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.mlp_width)
        self.proj = nn.Linear(config.mlp_width, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LayerNorm: each sub-layer reads a normalised copy and adds its output to the stream."""

    def __init__(self, config: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, layer)
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, config: GPT2Config | None = None):
        super().__init__()
        self.config = config = config or GPT2Config()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.n_ctx, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """GPT-2's initialisation: N(0, 0.02), with the residual projections shrunk by 1/sqrt(2 L)
        so the residual stream's variance does not grow with depth."""
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layer)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = residual_std if name.endswith(".proj") else 0.02
                nn.init.normal_(module.weight, std=std)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def new_cache(self, *, capacity: int = 0) -> KVCache:
        """An empty cache to pass to :meth:`forward` for incremental decoding, with room for
        ``capacity`` tokens reserved (it grows past that when needed)."""
        return KVCache(self.config.n_layer, capacity=capacity)

    def _check_input(self, idx: torch.Tensor, cache: KVCache | None) -> torch.Tensor:
        """``idx`` checked (any integer dtype, see ``_validate.token_id_tensor``) and returned as torch.long."""
        idx = token_id_tensor(idx)
        vocab = self.config.vocab_size
        check_token_ids(idx, vocab)
        past = 0
        if cache is not None:
            if not isinstance(cache, KVCache) or cache.n_layer != self.config.n_layer:
                raise ValueError(f"cache must be a KVCache with {self.config.n_layer} layers (use model.new_cache())")
            past = cache.length
            if cache.batch_size not in (None, idx.shape[0]):
                raise ValueError(f"cache holds batch size {cache.batch_size}, idx has {idx.shape[0]}")
        if past + idx.shape[1] > self.config.n_ctx:
            raise ValueError(f"idx: {past} cached + {idx.shape[1]} new tokens exceed n_ctx={self.config.n_ctx}")
        return idx

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None):
        """Logits ``[B, T, vocab]`` for token ids ``idx [B, T]``.

        With ``cache`` (from :meth:`new_cache`), ``idx`` continues the cached sequence, the cache
        is extended in place, and ``(logits, cache)`` is returned.
        """
        idx = self._check_input(idx, cache)
        past = 0 if cache is None else cache.length
        positions = torch.arange(past, past + idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for layer, block in enumerate(self.blocks):
            x = block(x, cache, layer)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return logits if cache is None else (logits, cache)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Append ``max_new_tokens`` tokens to ``idx [B, T]``.

        ``temperature=0`` is greedy (arg-max); otherwise sample from the softmax of
        ``logits / temperature``, restricted to the ``top_k`` most likely tokens if given.
        ``use_cache=False`` recomputes the whole sequence at every step (same tokens, more work).
        """
        sampling.check_options(max_new_tokens, temperature, top_k, self.config.vocab_size)
        idx = self._check_input(idx, None)
        if idx.shape[1] + max_new_tokens > self.config.n_ctx:
            raise ValueError(f"max_new_tokens: {idx.shape[1]} prompt + {max_new_tokens} new tokens "
                             f"exceed n_ctx={self.config.n_ctx}")
        was_training = self.training
        self.eval()
        try:
            cache = self.new_cache(capacity=idx.shape[1] + max_new_tokens) if use_cache else None
            sequence, pending = idx, idx
            for _ in range(max_new_tokens):
                if use_cache:
                    logits, cache = self(pending, cache)
                else:
                    logits = self(sequence)
                pending = sampling.choose_next(logits[:, -1, :], temperature, top_k, generator)
                sequence = torch.cat([sequence, pending], dim=1)
        finally:
            self.train(was_training)   # also after an error, so a failed call leaves the mode as it was
        return sequence

    # ----- Hugging Face weights ---------------------------------------------------------------

    @classmethod
    def from_hf(cls, state_dict: dict, config: GPT2Config | None = None) -> "GPT2":
        """Build a model from a Hugging Face GPT-2 state dict (``transformer.`` prefix optional).

        Hugging Face stores ``c_attn``, ``c_proj`` and ``c_fc`` as Conv1D, whose weight is
        ``[in, out]``: the transpose of ``nn.Linear``. Without ``config`` the sizes are read from
        the tensors' shapes, and the head count is GPT-2's rule of 64 dimensions per head.
        """
        weights = {_strip_prefix(name): tensor for name, tensor in state_dict.items()}
        config = config or _config_from_shapes(weights)
        model = cls(config)
        ours = {}
        for name, tensor in weights.items():
            if name.endswith((".attn.bias", ".attn.masked_bias")):
                continue  # old checkpoints store the causal mask as a buffer
            if name == "lm_head.weight":
                if not torch.equal(tensor, weights["wte.weight"]):
                    raise ValueError("state_dict: lm_head.weight differs from wte.weight, but GPT-2 ties them")
                continue
            target = _hf_to_ours(name)
            ours[target] = tensor.t() if _is_conv1d_weight(name) else tensor
        expected = set(model.state_dict())
        if set(ours) != expected:
            missing, unexpected = sorted(expected - set(ours)), sorted(set(ours) - expected)
            raise ValueError(f"state_dict does not match {config}: missing {missing[:4]}, unexpected {unexpected[:4]}")
        for name, tensor in model.state_dict().items():
            if ours[name].shape != tensor.shape:
                raise ValueError(f"state_dict: {name} has shape {tuple(ours[name].shape)}, "
                                 f"expected {tuple(tensor.shape)} for {config}")
        model.load_state_dict({name: tensor.contiguous() for name, tensor in ours.items()})
        return model

    def to_hf_state_dict(self) -> dict:
        """This model's weights under Hugging Face names (``transformer.`` prefix, Conv1D layout)."""
        exported = {}
        for name, tensor in self.state_dict().items():
            hf_name = _ours_to_hf(name)
            tensor = tensor.detach().clone()
            exported[f"transformer.{hf_name}"] = tensor.t().contiguous() if _is_conv1d_weight(hf_name) else tensor
        exported["lm_head.weight"] = exported["transformer.wte.weight"]
        return exported


# Our module names on the left, Hugging Face's on the right (inside ``transformer.h.{i}``).
_BLOCK_NAMES = {
    "attn.qkv": "attn.c_attn",
    "attn.proj": "attn.c_proj",
    "mlp.fc": "mlp.c_fc",
    "mlp.proj": "mlp.c_proj",
}


def _strip_prefix(name: str) -> str:
    return name[len("transformer."):] if name.startswith("transformer.") else name


def _is_conv1d_weight(hf_name: str) -> bool:
    return hf_name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight"))


def _hf_to_ours(name: str) -> str:
    name = re.sub(r"^h\.(\d+)\.", r"blocks.\1.", name)
    for ours, theirs in _BLOCK_NAMES.items():
        name = name.replace(f".{theirs}.", f".{ours}.")
    return name


def _ours_to_hf(name: str) -> str:
    name = re.sub(r"^blocks\.(\d+)\.", r"h.\1.", name)
    for ours, theirs in _BLOCK_NAMES.items():
        name = name.replace(f".{ours}.", f".{theirs}.")
    return name


def _config_from_shapes(weights: dict) -> GPT2Config:
    for required in ("wte.weight", "wpe.weight"):
        if required not in weights:
            raise ValueError(f"state_dict has no {required!r} (nor 'transformer.{required}')")
    vocab_size, n_embd = weights["wte.weight"].shape
    n_ctx = weights["wpe.weight"].shape[0]
    layers = {int(m.group(1)) for name in weights if (m := re.match(r"h\.(\d+)\.", name))}
    if n_embd % 64:
        raise ValueError(f"state_dict: width {n_embd} is not a multiple of 64; pass config= with n_head")
    return GPT2Config(vocab_size=vocab_size, n_ctx=n_ctx, n_layer=len(layers), n_head=n_embd // 64, n_embd=n_embd)
