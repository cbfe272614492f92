"""Analytic counts: parameters, cache bytes, bytes moved per decode step.

Every formula here is checked against the real module: :func:`meta_param_count` builds the model
on PyTorch's ``meta`` device (shapes without storage, so even a huge configuration costs no memory)
and counts what was built.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from k3lite.gpt2 import GPT2Config

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def count_parameters(module: nn.Module) -> int:
    """Number of distinct parameters (a tied weight counts once, as ``parameters()`` yields it once)."""
    return sum(p.numel() for p in module.parameters())


def meta_param_count(build: Callable[[], nn.Module]) -> int:
    """Build a module on the meta device with ``build()`` and count its parameters."""
    with torch.device("meta"):
        module = build()
    return count_parameters(module)


def element_bytes(dtype) -> int:
    """Bytes per element for a name in ``BYTES_PER_ELEMENT``, a ``torch.dtype`` or an int."""
    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    if isinstance(dtype, str):
        if dtype not in BYTES_PER_ELEMENT:
            raise ValueError(f"dtype must be one of {sorted(BYTES_PER_ELEMENT)}, got {dtype!r}")
        return BYTES_PER_ELEMENT[dtype]
    if isinstance(dtype, int) and dtype > 0:
        return dtype
    raise ValueError(f"dtype must be a name, a torch.dtype or a positive byte count, got {dtype!r}")


# ----- GPT-2 ----------------------------------------------------------------------------------


def gpt2_block_parameters(config: GPT2Config) -> dict[str, int]:
    """Parameters of one transformer block, by sub-layer (weights plus biases)."""
    d, width = config.n_embd, config.mlp_width
    return {
        "ln_1": 2 * d,
        "attn.c_attn": d * 3 * d + 3 * d,
        "attn.c_proj": d * d + d,
        "ln_2": 2 * d,
        "mlp.c_fc": d * width + width,
        "mlp.c_proj": width * d + d,
    }


def gpt2_parameter_breakdown(config: GPT2Config) -> dict[str, int]:
    """Parameters by component; the output head is tied to ``wte`` and adds nothing."""
    block = sum(gpt2_block_parameters(config).values())
    return {
        "wte": config.vocab_size * config.n_embd,
        "wpe": config.n_ctx * config.n_embd,
        "each block": block,
        "all blocks": config.n_layer * block,
        "ln_f": 2 * config.n_embd,
    }


def gpt2_parameter_count(config: GPT2Config) -> int:
    parts = gpt2_parameter_breakdown(config)
    return parts["wte"] + parts["wpe"] + parts["all blocks"] + parts["ln_f"]


def gpt2_meta_parameter_count(config: GPT2Config) -> int:
    """The same number, counted on the module itself (built on the meta device)."""
    from k3lite.gpt2 import GPT2

    return meta_param_count(lambda: GPT2(config))


def gpt2_kv_bytes_per_token(config: GPT2Config, dtype="bf16") -> int:
    """Multi-head attention caches a key and a value per layer, head and head dimension."""
    return 2 * config.n_layer * config.n_head * config.head_dim * element_bytes(dtype)


def gpt2_kv_bytes_per_sequence(config: GPT2Config, seq_len: int, dtype="bf16", batch_size: int = 1) -> int:
    """Cache bytes after ``seq_len`` tokens for ``batch_size`` sequences: it grows linearly."""
    if seq_len < 0 or seq_len > config.n_ctx:
        raise ValueError(f"seq_len must be in [0, n_ctx={config.n_ctx}], got {seq_len}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return batch_size * seq_len * gpt2_kv_bytes_per_token(config, dtype)


def gpt2_weight_bytes_per_decode_step(config: GPT2Config, dtype="bf16") -> int:
    """Weights read from HBM to decode one token: every matrix once (``wte`` in full, as the output
    head), but only one row of ``wpe``. Shared by the whole batch."""
    parts = gpt2_parameter_breakdown(config)
    read = parts["wte"] + config.n_embd + parts["all blocks"] + parts["ln_f"]
    return read * element_bytes(dtype)


def gpt2_decode_bytes_read(config: GPT2Config, position: int, dtype="bf16", batch_size: int = 1) -> dict[str, int]:
    """HBM bytes read to decode the token at ``position`` (``position`` tokens already cached).

    Returns the weights, the cache (every earlier key and value, per sequence) and their total.
    Activations are left out: they are a few vectors of width ``n_embd`` per layer.
    """
    if position < 0 or position >= config.n_ctx:
        raise ValueError(f"position must be in [0, n_ctx={config.n_ctx}), got {position}")
    weights = gpt2_weight_bytes_per_decode_step(config, dtype)
    cache = gpt2_kv_bytes_per_sequence(config, position, dtype, batch_size)
    return {"weights": weights, "kv_cache": cache, "total": weights + cache}


def gpt2_forward_flops(config: GPT2Config, new_tokens: int, past_tokens: int = 0) -> int:
    """Matrix-multiply FLOPs (2 per multiply-add) for one forward pass over ``new_tokens`` tokens that
    follow ``past_tokens`` cached ones, with logits for every new token.

    Per token and layer: 24 d^2 for the projections (q, k, v, out: 8 d^2; MLP: 16 d^2) and 4 d n for
    the scores and the weighted sum over the n keys it can see; per token 2 d V for the logits.
    Decoding with a cache is ``gpt2_forward_flops(c, 1, t)``; without, ``gpt2_forward_flops(c, t + 1)``.
    """
    if new_tokens < 1 or past_tokens < 0 or past_tokens + new_tokens > config.n_ctx:
        raise ValueError(f"new_tokens >= 1 and past_tokens >= 0 with a sum <= n_ctx={config.n_ctx}, "
                         f"got new_tokens={new_tokens}, past_tokens={past_tokens}")
    d = config.n_embd
    # Token i of the new ones sees past_tokens + i + 1 keys; summed over i:
    keys_seen = new_tokens * past_tokens + new_tokens * (new_tokens + 1) // 2
    per_layer = 24 * d * d * new_tokens + 4 * d * keys_seen
    return config.n_layer * per_layer + 2 * d * config.vocab_size * new_tokens


# ===== Kimi K3 =====
