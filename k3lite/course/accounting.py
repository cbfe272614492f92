"""Analytic counts: parameters, cache bytes, bytes moved per decode step.

Every formula here is checked against the real module: :func:`meta_param_count` builds the model
on PyTorch's ``meta`` device (shapes without storage, so even a huge configuration costs no memory)
and counts what was built.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn as nn

from k3lite.models.gpt2 import GPT2Config

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
    from k3lite.models.gpt2 import GPT2

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

# What "active" means here: the parameters that take part in computing one token's output. All
# routed experts but the ``top_k`` selected ones are idle, and the input embedding table is only
# looked up (one row of ``hidden_size`` numbers is read), so both are left out. The output head,
# the router, the shared experts and every attention weight count. (With tied embeddings the
# table is the output head and counts.) This is the convention under which K3's published
# "about 104B active" comes out; the embedding table adds another 1.17B if one counts it.


def k3_kda_layer_parameters(config) -> int:
    """One KDA token mixer: q/k/v projections and convolutions, decay and beta gates, output path."""
    d, heads, key = config.hidden_size, config.num_heads, config.head_dim
    key_size = value_size = heads * key  # value head size = key head size in K3
    gate_rank = key                      # decay projection rank = head dim
    if config.kda_output_gate_rank is None:
        output_gate = d * value_size
    else:
        output_gate = d * config.kda_output_gate_rank + config.kda_output_gate_rank * value_size
    return (d * (2 * key_size + value_size)                  # W_q, W_k, W_v
            + config.conv_size * (2 * key_size + value_size)  # depthwise short convolutions
            + d * gate_rank + gate_rank * key_size            # low-rank decay projection
            + heads + key_size                                # A_log, dt_bias
            + d * heads                                       # W_beta
            + output_gate + key                               # output gate, per-head RMSNorm
            + value_size * d)                                 # W_o


def k3_mla_layer_parameters(config) -> int:
    """One MLA token mixer: query LoRA, KV latent, up-projection, output gate and projection."""
    d, heads = config.hidden_size, config.mla_num_heads
    qk_head = config.nope_dim + config.rope_dim
    if config.q_lora_rank is None:
        query = d * heads * qk_head
    else:
        query = d * config.q_lora_rank + config.q_lora_rank + config.q_lora_rank * heads * qk_head
    latent = d * (config.kv_lora_rank + config.rope_dim) + config.kv_lora_rank
    up = config.kv_lora_rank * heads * (config.nope_dim + config.v_dim)
    gate = d * heads * config.v_dim if config.mla_output_gate else 0
    return query + latent + up + gate + heads * config.v_dim * d


def k3_expert_parameters(config) -> int:
    """One routed expert (a gated MLP on the latent, or on the hidden state without a latent)."""
    size = config.hidden_size if config.latent_size is None else config.latent_size
    return 3 * size * config.expert_width


def k3_moe_layer_parameters(config) -> dict[str, int]:
    """One MoE feed-forward, split into the routed experts and everything every token uses."""
    d = config.hidden_size
    always = config.num_experts * d                                      # router
    always += 3 * d * config.num_shared_experts * config.expert_width    # shared experts (one MLP)
    if config.latent_size is not None:
        always += 2 * d * config.latent_size + config.latent_size       # W_down, W_up, latent RMSNorm
    return {"routed": config.num_experts * k3_expert_parameters(config), "always": always}


def k3_parameter_breakdown(config) -> dict[str, int]:
    """Parameters by component, summed over the whole model."""
    d = config.hidden_size
    moe = k3_moe_layer_parameters(config)
    attnres_per_layer = 2 * d if config.attnres_block_size is not None else 0
    return {
        "embedding": config.vocab_size * d,
        "output head": 0 if config.tie_embeddings else config.vocab_size * d,
        "kda mixers": config.num_kda_layers * k3_kda_layer_parameters(config),
        "mla mixers": config.num_mla_layers * k3_mla_layer_parameters(config),
        "dense mlps": config.num_dense_layers * 3 * d * config.dense_width,
        "routed experts": config.num_moe_layers * moe["routed"],
        "moe router, shared, latent": config.num_moe_layers * moe["always"],
        "norms and attnres": config.num_layers * (2 * d + attnres_per_layer) + d
                             + (d if config.attnres_block_size is not None else 0),
    }


def k3_param_counts(config) -> dict[str, int]:
    """``{"total", "active", "embedding", "routed_experts"}`` for a :class:`k3lite.models.k3.K3Config`.

    ``active`` leaves out the unselected routed experts and the input embedding table (see the note
    above). Published K3: total 2,779,483,053,152 (2.78e12), active 104,188,189,792 (1.04e11).
    """
    parts = k3_parameter_breakdown(config)
    total = sum(parts.values())
    idle_experts = config.num_moe_layers * (config.num_experts - config.top_k) * k3_expert_parameters(config)
    lookup_only = 0 if config.tie_embeddings else parts["embedding"]
    return {"total": total, "active": total - idle_experts - lookup_only,
            "embedding": parts["embedding"], "routed_experts": parts["routed experts"]}


def k3_meta_param_counts(config) -> dict[str, int]:
    """The same two numbers counted on the module built on the meta device (no memory used).

    ``active`` is counted from the modules themselves: each :class:`RoutedExperts` contributes
    ``top_k / num_experts`` of its parameters, the embedding table nothing unless tied.
    """
    from k3lite.layers.moe import RoutedExperts
    from k3lite.models.k3 import K3

    with torch.device("meta"):
        model = K3(config)
    total = count_parameters(model)
    idle = 0
    for module in model.modules():
        if isinstance(module, RoutedExperts):
            per_expert = count_parameters(module) // module.num_experts
            idle += (module.num_experts - config.top_k) * per_expert
    lookup_only = 0 if config.tie_embeddings else model.embed.weight.numel()
    return {"total": total, "active": total - idle - lookup_only}


def k3_mla_cache_bytes_per_token_per_layer(config, dtype="bf16") -> int:
    """An MLA layer caches the normalised KV latent and the shared rope key: K3 (512 + 64) x 2 = 1,152."""
    return (config.kv_lora_rank + config.rope_dim) * element_bytes(dtype)


def k3_mla_cache_bytes_per_token(config, dtype="bf16", *, all_layers_mla: bool = False) -> int:
    """Cache bytes per token over the model's MLA layers: K3 24 x 576 x 2 = 27,648.

    ``all_layers_mla=True`` prices the same latent in every layer (K3: 93 x 576 x 2 = 107,136), the
    cost the KDA layers avoid.
    """
    layers = config.num_layers if all_layers_mla else config.num_mla_layers
    return layers * k3_mla_cache_bytes_per_token_per_layer(config, dtype)


def k3_kda_state_bytes_per_layer(config, dtype="fp32") -> int:
    """One KDA layer's recurrent state per sequence: ``H x K x V`` numbers, independent of length."""
    return config.num_heads * config.head_dim * config.head_dim * element_bytes(dtype)


def k3_kda_state_bytes_per_sequence(config, dtype="fp32") -> int:
    """All KDA states of one sequence: K3 69 x 96 x 128 x 128 x 4 = 434,110,464 bytes (414 MiB)."""
    return config.num_kda_layers * k3_kda_state_bytes_per_layer(config, dtype)


def k3_conv_state_bytes_per_sequence(config, dtype="bf16") -> int:
    """The short convolutions' tails: the last ``conv_size - 1`` inputs of q, k and v per KDA layer."""
    channels = 3 * config.num_heads * config.head_dim
    return config.num_kda_layers * (config.conv_size - 1) * channels * element_bytes(dtype)


def k3_cache_bytes(config, seq_len: int, *, batch_size: int = 1, cache_dtype="bf16",
                   state_dtype="fp32") -> dict[str, int]:
    """Decoding memory after ``seq_len`` tokens: MLA latents grow with length, KDA states do not."""
    if seq_len < 0:
        raise ValueError(f"seq_len must be >= 0, got {seq_len}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    parts = {
        "mla_latents": batch_size * seq_len * k3_mla_cache_bytes_per_token(config, cache_dtype),
        "kda_states": batch_size * k3_kda_state_bytes_per_sequence(config, state_dtype),
        "conv_tails": batch_size * k3_conv_state_bytes_per_sequence(config, cache_dtype),
    }
    parts["total"] = sum(parts.values())
    return parts
