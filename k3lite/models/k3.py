"""Kimi K3: the KDA + MLA hybrid with latent MoE, SiTU and block Attention Residuals.

The stack repeats a macrocycle of ``layers_per_cycle - 1`` KDA layers followed by one MLA layer
(K3: 3 + 1, 23 times) and, when the layer count leaves one over, ends with one more MLA layer
(K3: 93 = 23 x 4 + 1). Every decoder layer is two sub-layers, a token mixer (KDA or MLA) and a
feed-forward one (a dense gated MLP for the first ``num_dense_layers``, a latent MoE elsewhere),
each behind an RMSNorm.

What feeds each sub-layer: with ``attnres_block_size=None`` the usual pre-norm residual stream;
with an integer ``N`` block Attention Residuals, where a learned softmax over
``[embedding, finished blocks of N decoder layers, the current partial block]`` replaces the
equal-weight residual sum (before every sub-layer and once before the final norm).

``K3.run`` is the one forward pass; ``forward(idx)`` returns logits (what ``k3lite.train`` wants),
``run(idx, cache, collect=True)`` also returns the caches, the AttnRes weights and the MoE loads.
Decoding continues from a :class:`K3Cache`: a ``[B, H, K, V]`` state and convolution tails per KDA
layer, the latents ``[B, S, 576]`` per MLA layer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn

from k3lite._validate import check_token_ids, token_id_tensor
from k3lite.layers.kda_layer import GATE_FORMS, KDACache, KDALayer
from k3lite.layers.mla import MLA, MLACache
from k3lite.layers.moe import ACTIVATIONS, GatedMLP, MoE, RoutedExperts, SigmoidRouter
from k3lite.layers.norms import RMSNorm
from k3lite.models import sampling


@dataclass(frozen=True)
class K3Config:
    """Every size of the model. ``K3Config.published()`` is Kimi K3; ``tiny()``/``small()`` run on a CPU."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 5
    layers_per_cycle: int = 4            # (layers_per_cycle - 1) KDA layers, then one MLA layer
    # KDA
    num_heads: int = 4
    head_dim: int = 16
    conv_size: int = 4
    gate_form: str = "k3"                # "k3": lower_bound * sigmoid(...); "kimi_linear": -exp(A) softplus(...)
    gate_lower_bound: float = -5.0
    kda_output_gate_rank: int | None = None   # None: full-rank output gate (K3)
    # MLA
    mla_num_heads: int = 4
    q_lora_rank: int | None = 32
    kv_lora_rank: int = 16
    nope_dim: int = 16
    rope_dim: int = 8
    v_dim: int = 16
    use_rope: bool = False               # K3: NoPE, the rope channels are kept but not rotated
    rope_theta: float = 10000.0
    mla_output_gate: bool = True
    # Feed-forward
    num_dense_layers: int = 1
    dense_width: int = 128
    num_experts: int = 8
    top_k: int = 2
    num_shared_experts: int = 1
    expert_width: int = 32
    latent_size: int | None = 32         # None: experts run on the hidden state itself
    activation: str = "situ"
    situ_betas: tuple[float, float] = (4.0, 25.0)
    routed_scaling: float = 1.0
    # Residuals, embeddings, numerics
    attnres_block_size: int | None = 2   # decoder layers per AttnRes block; None: plain residuals
    tie_embeddings: bool = False
    context_length: int = 1024           # informational: NoPE has no position table to size
    norm_eps: float = 1e-6
    init_std: float = 0.02
    chunk_size: int = 16
    backend: str = "auto"

    def __post_init__(self):
        positive = ("vocab_size", "hidden_size", "num_layers", "layers_per_cycle", "num_heads", "head_dim",
                    "conv_size", "mla_num_heads", "kv_lora_rank", "nope_dim", "v_dim", "dense_width",
                    "num_experts", "top_k", "expert_width", "context_length", "chunk_size")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("q_lora_rank", "latent_size", "kda_output_gate_rank", "attnres_block_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be None or a positive integer, got {value!r}")
        for name in ("rope_dim", "num_dense_layers", "num_shared_experts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.num_layers % self.layers_per_cycle not in (0, 1):
            raise ValueError(
                f"num_layers must be a whole number of {self.layers_per_cycle}-layer macrocycles, optionally "
                f"plus one final MLA layer (a multiple of {self.layers_per_cycle}, or one more), got {self.num_layers}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k must be <= num_experts={self.num_experts}, got {self.top_k}")
        if self.num_dense_layers > self.num_layers:
            raise ValueError(f"num_dense_layers must be <= num_layers={self.num_layers}, got {self.num_dense_layers}")
        if self.use_rope and self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even when use_rope=True (pairs are rotated), got {self.rope_dim}")
        if self.gate_form not in GATE_FORMS:
            raise ValueError(f"gate_form must be one of {GATE_FORMS}, got {self.gate_form!r}")
        if not self.gate_lower_bound < 0:
            raise ValueError(f"gate_lower_bound must be < 0, got {self.gate_lower_bound}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if len(self.situ_betas) != 2 or min(self.situ_betas) <= 0:
            raise ValueError(f"situ_betas must be two positive numbers (beta1, beta2), got {self.situ_betas!r}")

    # ----- presets ------------------------------------------------------------------------------

    @classmethod
    def published(cls) -> "K3Config":
        """Kimi K3 as published (July 2026)."""
        return cls(vocab_size=163_840, hidden_size=7168, num_layers=93, layers_per_cycle=4,
                   num_heads=96, head_dim=128, conv_size=4, gate_form="k3", gate_lower_bound=-5.0,
                   kda_output_gate_rank=None, mla_num_heads=96, q_lora_rank=1536, kv_lora_rank=512,
                   nope_dim=128, rope_dim=64, v_dim=128, use_rope=False, mla_output_gate=True,
                   num_dense_layers=1, dense_width=33_792, num_experts=896, top_k=16, num_shared_experts=2,
                   expert_width=3072, latent_size=3584, activation="situ", attnres_block_size=12,
                   tie_embeddings=False, context_length=1_048_576, chunk_size=64)

    @classmethod
    def tiny(cls, **changes) -> "K3Config":
        """Five layers (one macrocycle and the final MLA), width 64: trains on a CPU in seconds."""
        return dataclasses.replace(cls(), **changes)

    @classmethod
    def small(cls, **changes) -> "K3Config":
        """Nine layers (two macrocycles and the final MLA), width 128: a CPU model for chapter 10."""
        base = cls(hidden_size=128, num_layers=9, num_heads=4, head_dim=32, mla_num_heads=4, q_lora_rank=64,
                   kv_lora_rank=32, nope_dim=32, rope_dim=16, v_dim=32, dense_width=256, num_experts=16,
                   top_k=4, num_shared_experts=2, expert_width=64, latent_size=64, attnres_block_size=3,
                   chunk_size=32)
        return dataclasses.replace(base, **changes)

    # ----- derived ------------------------------------------------------------------------------

    @property
    def has_final_mla(self) -> bool:
        return self.num_layers % self.layers_per_cycle == 1 and self.layers_per_cycle > 1

    @property
    def num_macrocycles(self) -> int:
        return self.num_layers // self.layers_per_cycle

    @property
    def layer_types(self) -> tuple[str, ...]:
        """``"kda"`` or ``"mla"`` for each layer, bottom to top."""
        last = self.layers_per_cycle - 1
        return tuple("mla" if i % self.layers_per_cycle == last or (self.has_final_mla and i == self.num_layers - 1)
                     else "kda" for i in range(self.num_layers))

    @property
    def num_kda_layers(self) -> int:
        return self.layer_types.count("kda")

    @property
    def num_mla_layers(self) -> int:
        return self.layer_types.count("mla")

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers

    def ffn_type(self, index: int) -> str:
        return "dense" if index < self.num_dense_layers else "moe"


@dataclass
class K3Cache:
    """Per-layer decoding state: a :class:`KDACache` or an :class:`MLACache` for each layer."""

    layers: list
    num_tokens: int

    def nbytes(self, kind: str | None = None) -> int:
        """Bytes held (per kind: ``"kda"`` states and conv tails, ``"mla"`` latents; ``None``: all)."""
        total = 0
        for layer_cache in self.layers:
            if isinstance(layer_cache, MLACache) and kind in (None, "mla"):
                total += sum(t.numel() * t.element_size() for t in layer_cache)
            if isinstance(layer_cache, KDACache) and kind in (None, "kda"):
                tensors = list(layer_cache.conv_states) + [layer_cache.recurrent_state]
                total += sum(t.numel() * t.element_size() for t in tensors)
        return total

    @property
    def batch_size(self) -> int | None:
        """The batch size the cached states were built for (None if no layer holds a state)."""
        for layer_cache in self.layers:
            if isinstance(layer_cache, MLACache):
                return layer_cache.latent.shape[0]
            if isinstance(layer_cache, KDACache):
                return layer_cache.recurrent_state.shape[0]
        return None


@dataclass
class K3Output:
    logits: torch.Tensor
    cache: K3Cache
    attnres_weights: list = field(default_factory=list)   # per mixing point: [S, B, T] (collect=True)
    moe_loads: dict = field(default_factory=dict)         # layer index -> tokens per expert [E] (collect=True)


class K3Layer(nn.Module):
    """One decoder layer: norm + token mixer, norm + feed-forward, and their AttnRes mixers."""

    def __init__(self, config: K3Config, index: int, attnres_mixer: type[nn.Module] | None):
        super().__init__()
        d = config.hidden_size
        self.kind = config.layer_types[index]
        self.mixer_norm = RMSNorm(d, eps=config.norm_eps)
        if self.kind == "kda":
            self.mixer = KDALayer(d, config.num_heads, config.head_dim, conv_size=config.conv_size,
                                  gate_form=config.gate_form, gate_lower_bound=config.gate_lower_bound,
                                  output_gate_rank=config.kda_output_gate_rank, norm_eps=config.norm_eps,
                                  chunk_size=config.chunk_size, backend=config.backend)
        else:
            self.mixer = MLA(d, config.mla_num_heads, q_lora_rank=config.q_lora_rank,
                             kv_lora_rank=config.kv_lora_rank, nope_dim=config.nope_dim, rope_dim=config.rope_dim,
                             v_dim=config.v_dim, use_rope=config.use_rope, rope_theta=config.rope_theta,
                             output_gate=config.mla_output_gate, norm_eps=config.norm_eps)
        self.ffn_norm = RMSNorm(d, eps=config.norm_eps)
        if config.ffn_type(index) == "dense":
            self.ffn = GatedMLP(d, config.dense_width, activation=config.activation, situ_betas=config.situ_betas)
        else:
            self.ffn = MoE(d, config.num_experts, config.top_k, config.expert_width,
                           num_shared_experts=config.num_shared_experts, latent_size=config.latent_size,
                           activation=config.activation, situ_betas=config.situ_betas,
                           routed_scaling=config.routed_scaling, norm_eps=config.norm_eps)
        if attnres_mixer is not None:
            self.mixer_res = attnres_mixer(d)
            self.ffn_res = attnres_mixer(d)

    def token_mixer(self, x: torch.Tensor, cache):
        return self.mixer(self.mixer_norm(x), cache)

    def feed_forward(self, x: torch.Tensor):
        """``(output, load or None)``."""
        if isinstance(self.ffn, MoE):
            return self.ffn(self.ffn_norm(x))
        return self.ffn(self.ffn_norm(x)), None


class _ResidualStream:
    """The plain pre-norm residual stream, with the same interface as the AttnRes sources."""

    def __init__(self, embedding: torch.Tensor):
        self.hidden = embedding

    def read(self, mixer):
        return self.hidden, None

    def add(self, output: torch.Tensor) -> None:
        self.hidden = self.hidden + output


class _AttnResStream:
    """Block AttnRes: each read is a learned softmax mix over the stored sources."""

    def __init__(self, embedding: torch.Tensor, sublayers_per_block: int):
        from k3lite.layers.attnres import AttnResSources
        self.sources = AttnResSources(embedding, sublayers_per_block=sublayers_per_block)

    def read(self, mixer):
        return mixer(self.sources.sources())

    def add(self, output: torch.Tensor) -> None:
        self.sources.add(output)


class K3(nn.Module):
    """The K3 language model. ``attnres_mixer``: the AttnRes module class (default ``AttnResMixer``)."""

    def __init__(self, config: K3Config, *, attnres_mixer: type[nn.Module] | None = None):
        super().__init__()
        self.config = config
        if config.attnres_block_size is not None and attnres_mixer is None:
            from k3lite.layers.attnres import AttnResMixer
            attnres_mixer = AttnResMixer
        if config.attnres_block_size is None:
            attnres_mixer = None
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(K3Layer(config, i, attnres_mixer) for i in range(config.num_layers))
        self.final_res = attnres_mixer(config.hidden_size) if attnres_mixer is not None else None
        self.norm = RMSNorm(config.hidden_size, eps=config.norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self._init_weights()
        if config.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def _init_weights(self) -> None:
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, RoutedExperts):
                for weight in (module.gate_proj, module.up_proj, module.down_proj):
                    nn.init.normal_(weight, std=std)
            elif isinstance(module, SigmoidRouter):
                nn.init.normal_(module.weight, std=std)

    def _stream(self, embedding: torch.Tensor):
        if self.final_res is None:
            return _ResidualStream(embedding)
        return _AttnResStream(embedding, 2 * self.config.attnres_block_size)  # two sub-layers per layer

    def run(self, idx: torch.Tensor, cache: K3Cache | None = None, *, collect: bool = False) -> K3Output:
        """The forward pass over ``idx [B, T]``, continuing ``cache`` when given."""
        idx = self._check_idx(idx)
        check_token_ids(idx, self.config.vocab_size)
        if cache is not None:
            self._check_cache(cache)
        if cache is not None and cache.batch_size not in (None, idx.shape[0]):
            raise ValueError(f"cache holds batch size {cache.batch_size}, idx has {idx.shape[0]}")
        layer_caches = [None] * len(self.layers) if cache is None else cache.layers
        stream = self._stream(self.embed(idx))
        output = K3Output(logits=None, cache=None)
        new_caches = []
        for index, (layer, layer_cache) in enumerate(zip(self.layers, layer_caches)):
            x, weights = stream.read(getattr(layer, "mixer_res", None))
            mixed, new_cache = layer.token_mixer(x, layer_cache)
            stream.add(mixed)
            new_caches.append(new_cache)
            x, ffn_weights = stream.read(getattr(layer, "ffn_res", None))
            out, load = layer.feed_forward(x)
            stream.add(out)
            if collect:
                output.attnres_weights += [w.detach() for w in (weights, ffn_weights) if w is not None]
                if load is not None:
                    output.moe_loads[index] = load.detach()
        x, weights = stream.read(self.final_res)
        if collect and weights is not None:
            output.attnres_weights.append(weights.detach())
        output.logits = self.lm_head(self.norm(x))
        previous = 0 if cache is None else cache.num_tokens
        output.cache = K3Cache(new_caches, previous + idx.shape[1])
        return output

    @staticmethod
    def _check_idx(idx) -> torch.Tensor:
        """``idx`` checked (any integer dtype, as GPT-2 takes it: ``_validate.token_id_tensor``) and returned as
        torch.long."""
        return token_id_tensor(idx)

    def _check_cache(self, cache) -> None:
        """A K3Cache of this model's layout: one layer cache per layer, each of its layer's kind (or None)."""
        if not isinstance(cache, K3Cache):
            raise ValueError(f"cache must be a K3Cache (the .cache of an earlier K3.run) or None, got "
                             f"{type(cache).__name__}")
        if len(cache.layers) != len(self.layers):
            raise ValueError(f"cache must hold {len(self.layers)} layer caches, got {len(cache.layers)}")
        for index, (layer, layer_cache) in enumerate(zip(self.layers, cache.layers)):
            expected = KDACache if layer.kind == "kda" else MLACache
            if layer_cache is not None and not isinstance(layer_cache, expected):
                raise ValueError(f"cache.layers[{index}] must be a {expected.__name__} or None for this model's "
                                 f"{layer.kind} layer {index}, got {type(layer_cache).__name__}")

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, T, vocab]``."""
        return self.run(idx).logits

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> torch.Tensor:
        """Append ``max_new_tokens`` tokens to ``idx [B, T]``; the same options as ``GPT2.generate``.

        ``temperature=0`` is greedy (arg-max); otherwise sample from the softmax of ``logits / temperature``,
        restricted to the ``top_k`` most likely tokens if given. With ``use_cache`` the prompt is processed
        once and every new token costs one step per layer (a KDA state update or an MLA read of the cached
        latents); without it the whole sequence is recomputed for each token. Both give the same tokens.
        """
        sampling.check_options(max_new_tokens, temperature, top_k, self.config.vocab_size)
        idx = self._check_idx(idx)
        check_token_ids(idx, self.config.vocab_size)   # also when no token is generated (the prompt is returned)
        was_training = self.training
        self.eval()
        # The loop owns its caches, so each KDA step may overwrite the cached state: no state allocation
        # per token and layer (the prompt's chunked pass still returns a fresh state).
        kda_mixers = [layer.mixer for layer in self.layers if isinstance(layer.mixer, KDALayer)]
        for mixer in kda_mixers:
            mixer.update_state_in_place = use_cache
        try:
            tokens, cache = idx, None
            next_input = idx
            for _ in range(max_new_tokens):
                if use_cache:
                    result = self.run(next_input, cache)
                    cache = result.cache
                    logits = result.logits[:, -1]
                else:
                    logits = self.run(tokens).logits[:, -1]
                next_token = sampling.choose_next(logits, temperature, top_k, generator)
                tokens = torch.cat([tokens, next_token], dim=1)
                next_input = next_token
        finally:
            self.train(was_training)   # also after an error, so a failed call leaves the mode as it was
            for mixer in kda_mixers:
                mixer.update_state_in_place = False
        return tokens

