"""The bake-off models: one backbone, six token mixers (or a learner's own), parameter counts matched.

    tokens -> embedding -> num_layers x [RMSNorm -> mixer -> +, RMSNorm -> MLP -> +] -> RMSNorm -> logits

Every model has ``num_layers`` (default 4) layers. ``k3_hybrid`` is K3's 3 KDA : 1 MLA: layers 4, 8, ...
are MLA (NoPE, gated output, as K3), the others KDA, so 4 layers give KDA, KDA, KDA, MLA.

The recurrent mixers are ``k3lite.models.mixers.TokenMixer`` (projections, short convolution on q, k, v,
``L2Norm(SiLU(.))`` on q and k, ``SiLU`` on v, ``beta = sigmoid(W_beta x)``, a per-head RMSNorm on the
output) plus what each published layer adds (fla: ``fla/layers/gated_deltanet.py``, ``fla/layers/kda.py``,
``fla/ops/kda/gate.py``; github.com/fla-org/flash-linear-attention):

* **Gated DeltaNet** (Yang, Kautz and Hatamizadeh 2024): one decay per head, Mamba-2's parametrisation
  ``g = -exp(A_log) * softplus(W_a x + dt_bias)`` with ``A ~ U(0, 16)``, ``A_log = log A``, and
  ``dt_bias = softplus^-1(dt)``, ``dt`` log-uniform in [1e-3, 1e-1] (floored at 1e-4), per head; a SiLU
  output gate ``RMSNorm(o) * SiLU(W_g x)`` (fla's ``FusedRMSNormGated``). At initialisation the median
  retention ``exp(g)`` per token is well below 1 (``tests/test_faithful_layers.py`` checks < 0.99), so the
  decay takes part, and receives gradient, from the first step.
* **KDA** (Kimi Team 2025, *Kimi Linear*): one decay per head *and key channel* through fla's low-rank ``f_proj``
  (``W_up W_down x``, rank = head size) plus ``dt_bias`` per channel (same ``dt`` recipe), a sigmoid
  output gate, and one of two gate forms (``KDA_FORMS``):

  - ``"k3"`` (the default, mixer ``kda``): K3's bounded form, fla's ``safe_gate``/``lower_bound``,
    ``g = -5 * sigmoid(exp(A_log) * (W_up W_down x + dt_bias))`` with ``A_log = 0`` (fla initialises
    ``A_log`` to zeros when ``safe_gate`` is on), and K3's full-rank output gate;
  - ``"kimi_linear"`` (mixer ``kda_kimi_linear``): Kimi Linear's released form,
    ``g = -exp(A_log) * softplus(W_up W_down x + dt_bias)`` with ``A ~ U(1, 16)``, and its low-rank output
    gate with a bias on the up-projection (fla's ``g_proj``).

  The default is K3's form because the course builds K3: ``k3_hybrid`` and ``k3lite.models.k3`` use it, and
  its bound ``g >= -5`` is what K3's chunked kernels rely on (fla's ``safe_gate``). Initialised as the
  reference initialises it (``A_log = 0``), it starts unsaturated too: ``A = 1`` leaves
  ``sigmoid(dt_bias)`` between about 1e-3 and 0.1, so ``g`` starts between about -0.005 and -0.5.

Named variants (``VARIANTS``, accepted wherever a mixer name is): ``kda_kimi_linear`` (above);
``gated_delta_rule_sigmoid_gate``, Gated DeltaNet's layer with a sigmoid output gate in place of SiLU, so
the output gate can be tested on its own; and ``gated_delta_rule_unit_a``, Gated DeltaNet's layer with
``A_log = 0`` (``A = 1``) in place of ``A ~ U(0, 16)``, so the starting decay can be tested on its own: at zero
input the median retention starts near ``exp(-0.01) = 0.99`` per token (a memory of about 100 tokens) instead of
about 0.92 (about 12 tokens); on real inputs both are lower (chapter 05 measures them). Neither is a published
layer. ``gate_form(mixer)`` names the decay a mixer name builds.

Linear attention and DeltaNet keep the norm without a gate (fla's defaults). Softmax attention is
Transformer++ style: RoPE on q and k, SDPA, with the same short convolution as the others.

Deliberate differences from the published layers (fla), all shared by every mixer unless named:

=============================  ============================================  ==========================================
what                           fla                                           here, and why
=============================  ============================================  ==========================================
q, k, v projections            three ``Linear`` maps                         one ``Linear`` to ``3d`` (``qkv``): the
                                                                             same function, one matrix
value width                    Gated DeltaNet ``expand_v = 2`` (V = 2K)      V = K for every mixer: one projection
                                                                             shape for all; parameters are matched
                                                                             through the MLP instead
head count and size            GDN 6 x 256, KDA 16 x 128 (defaults)          ``num_heads`` (2) x ``d / num_heads``:
                                                                             the bake-off's widths
``beta`` projection            no bias                                       a bias (``TokenMixer``'s, shared with
                                                                             DeltaNet; the stored runs' parameter
                                                                             names). It starts within
                                                                             ±1/sqrt(d), so beta starts near 0.5
                                                                             either way
``dt_bias``                    its own parameter                             the decay projection's bias
                                                                             (``decay.bias``): the same function;
                                                                             same initialisation
Linear weights and biases      fla's models re-initialise them               PyTorch's defaults (Kaiming-uniform)
                               N(0, 0.02), biases 0                          for every mixer, so the comparison
                                                                             does not hinge on one init scale
norm epsilon                   1e-5 (layer), 1e-6 (KDA model)                ``torch.nn.RMSNorm``'s default (the
                                                                             dtype's eps), as the stored runs
KDA output gate (``"k3"``)     low-rank ``g_proj`` with a bias               full rank, no bias: K3's layer
                                                                             (``k3lite.layers.kda_layer``)
KDA lower bound                a parameter (``lower_bound``, -5 suggested)   ``KDA_LOWER_BOUND = -5``, K3's value
gate and l2-norm placement     fused into the kernels                        computed eagerly in ``log_decay``,
                                                                             then ``k3lite.ops``: same function
=============================  ============================================  ==========================================

Not different: short convolutions (kernel 4, no bias, SiLU), L2-normalised q and k, ``scale = K**-0.5``,
``beta = sigmoid(.)`` without ``allow_neg_eigval``, the output RMSNorm per head with a weight, no bias on
q, k, v and the output projection.

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
KDA_FORMS = ("k3", "kimi_linear")
DEFAULT_KDA_FORM = "k3"
# Named layer variants beyond the six built-ins: mixer name -> the mechanism and BakeoffMixer's options.
VARIANTS = {"kda_kimi_linear": ("kda", {"kda_form": "kimi_linear"}),
            "gated_delta_rule_sigmoid_gate": ("gated_delta_rule", {"output_gate": "sigmoid"}),
            "gated_delta_rule_unit_a": ("gated_delta_rule", {"A_log_init": "zeros"})}
HYBRID_PERIOD = 4          # K3: every 4th layer is MLA
MLP_RATIO = 2
ROPE_THETA = 10000.0
OUTPUT_GATES = {"silu": F.silu, "sigmoid": torch.sigmoid}
OUTPUT_GATE = {"gated_delta_rule": "silu", "kda": "sigmoid"}   # each published layer's

# The published initialisation of the decay (Mamba-2's, kept by fla's Gated DeltaNet and KDA layers).
DT_MIN, DT_MAX, DT_FLOOR = 1e-3, 1e-1, 1e-4
GDN_A_RANGE = (0.0, 16.0)          # fla/layers/gated_deltanet.py
KIMI_LINEAR_A_RANGE = (1.0, 16.0)  # fla/layers/kda.py without safe_gate
KDA_LOWER_BOUND = -5.0             # K3; fla's recommended lower_bound


def softplus_inverse(y: torch.Tensor) -> torch.Tensor:
    """``x`` with ``softplus(x) = y`` for ``y > 0``, in the form that stays accurate for small ``y``."""
    return y + torch.log(-torch.expm1(-y))


def initial_dt_bias(width: int) -> torch.Tensor:
    """``softplus^-1(dt)`` with ``dt`` log-uniform in [``DT_MIN``, ``DT_MAX``], floored at ``DT_FLOOR``."""
    dt = (torch.rand(width) * (math.log(DT_MAX) - math.log(DT_MIN)) + math.log(DT_MIN)).exp()
    return softplus_inverse(dt.clamp(min=DT_FLOOR))


def softplus_gate(f: torch.Tensor, A_log: torch.Tensor) -> torch.Tensor:
    """Gated DeltaNet and Kimi Linear: ``g = -exp(A_log) * softplus(f)``, ``f [..., H, K]`` (bias included),
    ``A_log [H]``; unbounded below."""
    return -A_log.exp()[:, None] * F.softplus(f)


def lower_bound_gate(f: torch.Tensor, A_log: torch.Tensor, lower_bound: float = KDA_LOWER_BOUND) -> torch.Tensor:
    """K3 (fla's ``safe_gate``): ``g = lower_bound * sigmoid(exp(A_log) * f)``, in ``(lower_bound, 0)``."""
    return lower_bound * torch.sigmoid(A_log.exp()[:, None] * f)


def load_custom(spec: str):
    """``"package.module:function"`` -> the function (called like ``ops.kda.chunked``)."""
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"mixer must be a built-in {BUILTIN}, a variant {tuple(VARIANTS)} or 'module:function', "
                         f"got {spec!r}")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"mixer {spec!r} could not be loaded: {err}") from err
    if not callable(function):
        raise ValueError(f"mixer {spec!r} is not callable")
    return function


def check_mixer(mixer: str) -> None:
    if mixer not in BUILTIN and mixer not in VARIANTS:
        load_custom(mixer)


def gate_form(mixer: str) -> str | None:
    """The decay a mixer name builds, for records and labels; ``None`` for the ungated mixers."""
    if mixer == "gated_delta_rule":
        return "softplus, A ~ U(0, 16)"
    if mixer in ("softmax", "linear_attention", "delta_rule"):
        return None
    if mixer in VARIANTS and VARIANTS[mixer][0] == "gated_delta_rule":
        return "softplus, A = 1" if VARIANTS[mixer][1].get("A_log_init") == "zeros" else gate_form("gated_delta_rule")
    form = VARIANTS[mixer][1]["kda_form"] if mixer in VARIANTS else DEFAULT_KDA_FORM   # kda, k3_hybrid, custom
    return {"k3": "lower bound -5, A_log = 0", "kimi_linear": "softplus, A ~ U(1, 16)"}[form]


class LowRankProjection(nn.Module):
    """``x -> W_up (W_down x) + bias``: fla's two-matrix ``f_proj``; for the decay, ``bias`` is ``dt_bias``."""

    def __init__(self, in_features: int, rank: int, out_features: int):
        super().__init__()
        self.down = nn.Linear(in_features, rank, bias=False)
        self.up = nn.Linear(rank, out_features, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x):
        return self.up(self.down(x)) + self.bias


class BakeoffMixer(TokenMixer):
    """A ``TokenMixer`` with its published layer's output gate and decay; ``op`` replaces the recurrence.

    ``kda_form`` (``KDA_FORMS``) picks KDA's decay form and the initialisation that goes with it;
    ``output_gate`` (``"silu"`` or ``"sigmoid"``) replaces the published layer's output gate activation;
    ``A_log_init="zeros"`` starts Gated DeltaNet's ``A_log`` at 0 instead of its published ``log U(0, 16)``.
    A custom ``op`` gets KDA's inputs and must return ``(o [B, T, H, V], state)``:
    ``op(q, k, v, g [B, T, H, K] <= 0, beta [B, T, H], chunk_size=..., backend=...)``.
    """

    def __init__(self, config: MixerConfig, op=None, op_kind: str | None = None, kda_form: str = DEFAULT_KDA_FORM,
                 output_gate: str | None = None, A_log_init: str = "published"):
        super().__init__(config)
        if kda_form not in KDA_FORMS:
            raise ValueError(f"kda_form must be one of {KDA_FORMS}, got {kda_form!r}")
        if output_gate is not None and output_gate not in OUTPUT_GATES:
            raise ValueError(f"output_gate must be None or one of {tuple(OUTPUT_GATES)}, got {output_gate!r}")
        allowed = ("published", "zeros") if config.mechanism == "gated_delta_rule" else ("published",)
        if A_log_init not in allowed:
            raise ValueError(f"A_log_init must be 'published', or 'zeros' for gated_delta_rule, got {A_log_init!r} "
                             f"for {config.mechanism!r}")
        self.output_activation = output_gate or OUTPUT_GATE.get(config.mechanism)
        self.op, self.op_kind = op, op_kind or config.mechanism
        d, heads, head_dim = config.d_model, config.num_heads, config.head_dim
        self.gate_form = {"gated_delta_rule": "softplus", "kda": kda_form}.get(config.mechanism)
        if config.mechanism == "gated_delta_rule":
            self.A_log = nn.Parameter(torch.empty(heads).uniform_(*GDN_A_RANGE).log())
            with torch.no_grad():
                self.decay.bias.copy_(initial_dt_bias(heads))
                if A_log_init == "zeros":   # after the draw, so every other weight matches the published layer's
                    self.A_log.zero_()
            self.out_gate = nn.Linear(d, d, bias=False)
        elif config.mechanism == "kda":
            self.decay = LowRankProjection(d, head_dim, heads * head_dim)
            if kda_form == "k3":
                self.A_log = nn.Parameter(torch.zeros(heads))
                self.out_gate = nn.Linear(d, d, bias=False)
            else:
                self.A_log = nn.Parameter(torch.empty(heads).uniform_(*KIMI_LINEAR_A_RANGE).log())
                self.out_gate = nn.Sequential(nn.Linear(d, head_dim, bias=False), nn.Linear(head_dim, d))
            with torch.no_grad():
                self.decay.bias.copy_(initial_dt_bias(heads * head_dim))

    def log_decay(self, x):
        """The log-space decay ``g <= 0`` in float32: ``[B, T, H]`` (Gated DeltaNet) or ``[B, T, H, K]`` (KDA)."""
        f = self.decay(x).float().unflatten(-1, (self.config.num_heads, -1))
        A_log = self.A_log.float()
        g = lower_bound_gate(f, A_log) if self.gate_form == "k3" else softplus_gate(f, A_log)
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
            gate = OUTPUT_GATES[self.output_activation](self.out_gate(x))
            mixed = mixed * _split_heads(gate, config.num_heads)
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
    kda_config = MixerConfig(**{**config.__dict__, "mechanism": "kda"})
    if mixer == "k3_hybrid":
        if num_layers % HYBRID_PERIOD:
            raise ValueError(f"num_layers must be a multiple of {HYBRID_PERIOD} for k3_hybrid, got {num_layers}")
        return [MLAMixer(config.d_model, config.num_heads) if (i + 1) % HYBRID_PERIOD == 0
                else BakeoffMixer(kda_config) for i in range(num_layers)]
    if mixer in BUILTIN:
        return [BakeoffMixer(MixerConfig(**{**config.__dict__, "mechanism": mixer})) for _ in range(num_layers)]
    if mixer in VARIANTS:
        mechanism, options = VARIANTS[mixer]
        variant_config = MixerConfig(**{**config.__dict__, "mechanism": mechanism})
        return [BakeoffMixer(variant_config, **options) for _ in range(num_layers)]
    op = load_custom(mixer)
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
