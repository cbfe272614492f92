"""The bake-off models: one backbone, six token mixers (or a learner's own), parameter counts matched.

    tokens -> embedding -> num_layers x [RMSNorm -> mixer -> +, RMSNorm -> MLP -> +] -> RMSNorm -> logits

Every model has ``num_layers`` (default 4) layers. ``k3_hybrid`` is K3's 3 KDA : 1 MLA: layers 4, 8, ...
are MLA (NoPE, gated output, as K3), the others KDA, so 4 layers give KDA, KDA, KDA, MLA.

The recurrent mixers are ``k3lite.models.mixers.TokenMixer`` (projections, short convolution on q, k, v,
``L2Norm(SiLU(.))`` on q and k, a per-head RMSNorm on the output) plus what each published layer adds:
Gated DeltaNet a SiLU output gate (fla's ``FusedRMSNormGated``), KDA a sigmoid output gate (K3), and
both the K3 decay ``g = -5 sigmoid(exp(A_log) (W x + dt_bias))`` with Mamba's initialisation (A in
[1, 16] per head, dt log-uniform in [1e-3, 1e-1]), one rate per head (Gated DeltaNet) or per key
channel (KDA). Linear attention and DeltaNet keep the norm without a gate (fla's defaults). Softmax
attention is Transformer++ style: RoPE on q and k, SDPA, with the same short convolution as the others.

Parameter counts are matched by widening each model's MLP until it has as many parameters as the
largest of the six built-in models at the base width (``matched_mlp_hidden``).
"""

from __future__ import annotations

import importlib
import math
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

from k3lite.layers.mla import MLA, rotate
from k3lite.models.mixers import Block, MixerConfig, TokenMixer, _split_heads, norm
from k3lite.ops import KINDS, RECURRENT_KINDS

BUILTIN = ("softmax", *KINDS, "k3_hybrid")
HYBRID_PERIOD = 4          # K3: every 4th layer is MLA
MLP_RATIO = 2
ROPE_THETA = 10000.0
OUTPUT_GATE = {"gated_delta_rule": F.silu, "kda": torch.sigmoid}


def load_custom(spec: str):
    """``"package.module:function"`` -> the function (called like ``ops.kda.chunked``)."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"mixer must be a built-in {BUILTIN} or 'module:function', got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"mixer {spec!r} could not be loaded: {err}") from err
    if not callable(function):
        raise ValueError(f"mixer {spec!r} is not callable")
    return function


def check_mixer(mixer: str) -> None:
    if mixer not in BUILTIN:
        load_custom(mixer)


class BakeoffMixer(TokenMixer):
    """A ``TokenMixer`` with its published layer's output gate and decay; ``op`` replaces the recurrence.

    A custom ``op`` gets KDA's inputs and must return ``(o [B, T, H, V], state)``:
    ``op(q, k, v, g [B, T, H, K] <= 0, beta [B, T, H], chunk_size=..., backend=...)``.
    """

    def __init__(self, config: MixerConfig, op=None, op_kind: str | None = None):
        super().__init__(config)
        self.op, self.op_kind = op, op_kind or config.mechanism
        d, heads = config.d_model, config.num_heads
        if config.mechanism in OUTPUT_GATE:
            self.out_gate = nn.Linear(d, d, bias=False)
        if hasattr(self, "decay"):
            self._init_k3_decay(heads, self.decay.out_features)

    def _init_k3_decay(self, heads: int, width: int) -> None:
        self.A_log = nn.Parameter(torch.empty(heads).uniform_(1.0, 16.0).log())
        dt = torch.empty(width).uniform_(math.log(1e-3), math.log(1e-1)).exp()
        with torch.no_grad():
            self.decay.bias.copy_(dt + torch.log(-torch.expm1(-dt)))   # dt_bias = softplus^-1(dt)

    def log_decay(self, x):
        heads = self.config.num_heads
        f = self.decay(x).float()
        f = f.unflatten(-1, (heads, -1)) * self.A_log.float().exp()[:, None]
        g = -5.0 * torch.sigmoid(f)
        return g if self.config.mechanism == "kda" else g[..., 0]

    def forward(self, x):
        config = self.config
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (_split_heads(conv(t)[0], config.num_heads) for conv, t in
                   ((self.conv_q, q), (self.conv_k, k), (self.conv_v, v)))
        if config.mechanism == "softmax":
            positions = torch.arange(x.shape[1], device=x.device)
            q, k = rotate(q, positions, ROPE_THETA), rotate(k, positions, ROPE_THETA)
            mixed = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=True).transpose(1, 2)
            return self.out(mixed.flatten(2))
        q, k = F.normalize(F.silu(q), dim=-1), F.normalize(F.silu(k), dim=-1)
        mixed = self.head_norm(self._mix(q, k, F.silu(v), x).to(x.dtype))
        if hasattr(self, "out_gate"):
            mixed = mixed * _split_heads(OUTPUT_GATE[config.mechanism](self.out_gate(x)), config.num_heads)
        return self.out(mixed.flatten(2))

    def _mix(self, q, k, v, x):
        config = self.config
        beta = torch.sigmoid(self.beta(x)) if hasattr(self, "beta") else None
        g = self.log_decay(x) if hasattr(self, "decay") else None
        if q.is_cuda:   # the tested Triton path: every input in the activations' dtype (bf16 under autocast)
            dtype = torch.bfloat16 if torch.is_autocast_enabled("cuda") else q.dtype
            q, k, v, g, beta = (t.to(dtype) if t is not None else None for t in (q, k, v, g, beta))
        options = {"chunk_size": config.chunk_size, "backend": config.backend}
        if self.op is not None:
            return self.op(q, k, v, g, beta, **options)[0]
        function = RECURRENT_KINDS[config.mechanism].module.chunked
        args = [t for t in (q, k, v, g, beta) if t is not None]
        return function(*args, **options)[0]


class MLAMixer(nn.Module):
    """K3's MLA at bake-off size: NoPE, full-rank queries, a latent of d/2, sigmoid output gate; SDPA."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        head_dim = d_model // num_heads
        self.mla = MLA(d_model, num_heads, q_lora_rank=None, kv_lora_rank=max(1, d_model // 2),
                       nope_dim=head_dim, rope_dim=0, v_dim=head_dim, output_gate=True)

    def forward(self, x):
        mla = self.mla
        batch, length, _ = x.shape
        q, _ = mla.queries(x)
        latent, _ = mla.latents(x)
        kv = mla.kv_up(latent).view(batch, length, mla.num_heads, mla.nope_dim + mla.v_dim)
        k, v = kv[..., :mla.nope_dim], kv[..., mla.nope_dim:]
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, scale=mla.scale).transpose(1, 2)
        out = out.reshape(batch, length, -1) * torch.sigmoid(mla.gate_proj(x))
        return mla.o_proj(out)


def _mlp(d_model: int, mlp_hidden: int) -> nn.Sequential:
    """The bake-off's MLP; a ``Sequential`` (parameters ``0.*`` and ``2.*``), as the stored models were built."""
    return nn.Sequential(nn.Linear(d_model, mlp_hidden), nn.GELU(), nn.Linear(mlp_hidden, d_model))


class BakeoffLM(nn.Module):
    def __init__(self, mixers: list[nn.Module], vocab_size: int, d_model: int, mlp_hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(Block(m, _mlp(d_model, mlp_hidden), d_model) for m in mixers)
        self.final_norm = norm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))

    def recurrent_layers(self) -> int:
        """Layers that go through a ``k3lite.ops`` recurrence (the ones the Triton check counts)."""
        return sum(isinstance(b.mixer, BakeoffMixer) and b.mixer.op is None and b.mixer.config.mechanism != "softmax"
                   for b in self.blocks)


def _layer_mixers(mixer: str, config: MixerConfig, num_layers: int) -> list[nn.Module]:
    if mixer == "k3_hybrid":
        if num_layers % HYBRID_PERIOD:
            raise ValueError(f"num_layers must be a multiple of {HYBRID_PERIOD} for k3_hybrid, got {num_layers}")
        kda_config = MixerConfig(**{**config.__dict__, "mechanism": "kda"})
        return [MLAMixer(config.d_model, config.num_heads) if (i + 1) % HYBRID_PERIOD == 0
                else BakeoffMixer(kda_config) for i in range(num_layers)]
    if mixer in BUILTIN:
        return [BakeoffMixer(MixerConfig(**{**config.__dict__, "mechanism": mixer})) for _ in range(num_layers)]
    op = load_custom(mixer)
    kda_config = MixerConfig(**{**config.__dict__, "mechanism": "kda"})
    return [BakeoffMixer(kda_config, op=op, op_kind=mixer) for _ in range(num_layers)]


def build_model(mixer: str, *, vocab_size: int, d_model: int, num_layers: int = 4, num_heads: int = 2,
                mlp_hidden: int | None = None, backend: str = "auto", chunk_size: int = 64) -> BakeoffLM:
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    config = MixerConfig(mechanism="softmax", vocab_size=vocab_size, d_model=d_model, num_heads=num_heads,
                         chunk_size=chunk_size, backend=backend)
    hidden = MLP_RATIO * d_model if mlp_hidden is None else mlp_hidden
    if hidden < 1:
        raise ValueError(f"mlp_hidden must be >= 1, got {hidden}")
    return BakeoffLM(_layer_mixers(mixer, config, num_layers), vocab_size, d_model, hidden)


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@lru_cache(maxsize=None)
def _base_count(mixer: str, vocab_size: int, d_model: int, num_layers: int, num_heads: int) -> int:
    return num_parameters(build_model(mixer, vocab_size=vocab_size, d_model=d_model, num_layers=num_layers,
                                      num_heads=num_heads, backend="torch"))


def matched_mlp_hidden(mixer: str, *, vocab_size: int, d_model: int, num_layers: int = 4, num_heads: int = 2) -> int:
    """The MLP width that brings ``mixer``'s model to the parameter count of the largest built-in model."""
    dims = (vocab_size, d_model, num_layers, num_heads)
    target = max(_base_count(m, *dims) for m in BUILTIN if m != "k3_hybrid" or num_layers % HYBRID_PERIOD == 0)
    per_unit = num_layers * (2 * d_model + 1)   # one more hidden unit: a row, a column and a bias per layer
    extra = max(0, round((target - _base_count(mixer, *dims)) / per_unit))
    return MLP_RATIO * d_model + extra
