"""Small language models that differ only in their token mixer, for multi-query associative recall.

Chapter 06 trains one model per mechanism on MQAR (``k3lite.data.mqar_batch``) and compares how
many key-value pairs each can recall. Everything except the mixer is shared, so the comparison is
about the mixer:

    tokens -> embedding -> num_layers x [RMSNorm -> mixer -> +, RMSNorm -> MLP -> +] -> RMSNorm -> logits

Every mixer projects q, k, v from its input and passes each through a short causal depthwise
convolution (kernel ``conv_size``), which is how the published linear-attention layers see the
previous token (MQAR needs "the key just before this value"). Then:

* ``softmax``: causal softmax attention (the quadratic baseline);
* ``linear_attention``: ``S = S + k vᵀ`` (``k3lite.ops.linear_attention``);
* ``delta_rule``: ``S = S + β k (v − Sᵀk)ᵀ`` (``k3lite.ops.delta_rule``);
* ``gated_delta_rule``: a scalar decay per head first, ``S = α S`` (``k3lite.ops.gated_delta_rule``);
* ``kda``: a decay per key channel, ``S = Diag(α) S`` (``k3lite.ops.kda``).

The recurrent mixers follow the published KDA layer: ``q, k = L2Norm(SiLU(conv(W x)))``,
``v = SiLU(conv(W x))``, ``β = sigmoid(W_β x)``, a log-decay bounded below as in K3,
``g = −5 · sigmoid(W_g x + b)``, and an RMSNorm on each head's output before the output projection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from k3lite.layers.conv import ShortConv
from k3lite.layers.norms import RMSNorm
from k3lite.ops import KINDS, RECURRENT_KINDS

MECHANISMS = ("softmax", *KINDS)
RECURRENT = KINDS

# K3 bounds each step's log-decay below by -5. The bias starts the decay close to 1,
# exp(-5·sigmoid(-7)) ≈ 0.995 per token, so at initialisation an association survives a few hundred
# tokens. (Starting at sigmoid(-4), 0.91 per token, an MQAR answer 100 tokens away arrives multiplied by
# 1e-4 and the gated models never learned to keep it: see figures/mqar_sweep.json, "earlier_run".)
LOG_DECAY_FLOOR = -5.0
DECAY_BIAS_INIT = -7.0


@dataclass
class MixerConfig:
    mechanism: str
    vocab_size: int = 256
    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 2
    conv_size: int = 4
    mlp_ratio: int = 2
    chunk_size: int = 64
    backend: str = "auto"

    def __post_init__(self):
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {self.mechanism!r}")
        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "conv_size", "mlp_ratio", "chunk_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by num_heads={self.num_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads


def norm(size: int) -> RMSNorm:
    """The RMSNorm of these models and the bake-off's: ``torch.nn.RMSNorm``'s numerics (see ``RMSNorm``)."""
    return RMSNorm(size, eps=None, upcast=False)


def short_conv(channels: int, conv_size: int) -> ShortConv:
    """The short convolution of these models and the bake-off's: the ``conv1d`` form, no activation (the
    mixers apply SiLU to the recurrent mechanisms' q, k, v themselves; softmax attention takes them as they are)."""
    return ShortConv(channels, conv_size, silu=False, form="conv1d")


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch, time, width = x.shape
    return x.reshape(batch, time, num_heads, width // num_heads)


class TokenMixer(nn.Module):
    """One mixer layer: projections, short convolutions, the mechanism, the output projection."""

    def __init__(self, config: MixerConfig):
        super().__init__()
        self.config = config
        d, heads, head_dim = config.d_model, config.num_heads, config.head_dim
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.conv_q, self.conv_k, self.conv_v = (short_conv(d, config.conv_size) for _ in range(3))
        self.out = nn.Linear(d, d, bias=False)
        mechanism = config.mechanism
        if mechanism in ("delta_rule", "gated_delta_rule", "kda"):
            self.beta = nn.Linear(d, heads)
        if mechanism in ("gated_delta_rule", "kda"):
            width = heads if mechanism == "gated_delta_rule" else heads * head_dim
            self.decay = nn.Linear(d, width)
            nn.init.constant_(self.decay.bias, DECAY_BIAS_INIT)
        if mechanism in RECURRENT:
            self.head_norm = norm(head_dim)

    def log_decay(self, x: torch.Tensor) -> torch.Tensor:
        """The log-space decay g ≤ 0: ``[B, T, H]`` for Gated DeltaNet, ``[B, T, H, K]`` for KDA."""
        if not hasattr(self, "decay"):
            raise ValueError(f"mechanism {self.config.mechanism!r} has no decay gate")
        g = LOG_DECAY_FLOOR * torch.sigmoid(self.decay(x))
        if self.config.mechanism == "kda":
            g = _split_heads(g, self.config.num_heads)
        return g

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        config = self.config
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self.conv_q(q)[0], self.conv_k(k)[0], self.conv_v(v)[0]
        q, k, v = (_split_heads(t, config.num_heads) for t in (q, k, v))
        if config.mechanism == "softmax":
            mixed = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                   is_causal=True).transpose(1, 2)
        else:
            q = F.normalize(F.silu(q), dim=-1)
            k = F.normalize(F.silu(k), dim=-1)
            v = F.silu(v)
            mixed = self.head_norm(self._recurrent(q, k, v, x))
        return self.out(mixed.flatten(2))

    def _recurrent(self, q, k, v, x):
        config = self.config
        chunked = RECURRENT_KINDS[config.mechanism].module.chunked
        options = {"chunk_size": config.chunk_size, "backend": config.backend}
        if config.mechanism == "linear_attention":
            return chunked(q, k, v, **options)[0]
        beta = torch.sigmoid(self.beta(x))
        if config.mechanism == "delta_rule":
            return chunked(q, k, v, beta, **options)[0]
        return chunked(q, k, v, self.log_decay(x), beta, **options)[0]


class MLP(nn.Module):
    def __init__(self, config: MixerConfig):
        super().__init__()
        hidden = config.mlp_ratio * config.d_model
        self.up = nn.Linear(config.d_model, hidden)
        self.down = nn.Linear(hidden, config.d_model)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """``x + mixer(RMSNorm(x))``, then ``+ mlp(RMSNorm(.))``: one layer of these models and the bake-off's."""

    def __init__(self, mixer: nn.Module, mlp: nn.Module, d_model: int):
        super().__init__()
        self.mixer_norm = norm(d_model)
        self.mixer = mixer
        self.mlp_norm = norm(d_model)
        self.mlp = mlp

    def forward(self, x):
        x = x + self.mixer(self.mixer_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class MixerLM(nn.Module):
    """Token ids ``[B, T]`` -> logits ``[B, T, vocab_size]``; the mechanism is ``config.mechanism``."""

    def __init__(self, config: MixerConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(TokenMixer(config), MLP(config), config.d_model)
                                    for _ in range(config.num_layers))
        self.final_norm = norm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        nn.init.normal_(self.embed.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 2:
            raise ValueError(f"ids must be [B, T] token ids, got shape {tuple(ids.shape)}")
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))

    @torch.no_grad()
    def log_decays(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """The log-decay g each layer applies while reading ``ids`` (only for gated mechanisms)."""
        x = self.embed(ids)
        decays = []
        for block in self.blocks:
            decays.append(block.mixer.log_decay(block.mixer_norm(x)))
            x = block(x)
        return decays


def build(mechanism: str, **overrides) -> MixerLM:
    """A :class:`MixerLM` for ``mechanism`` with the default small sizes, changed by ``overrides``."""
    return MixerLM(MixerConfig(mechanism=mechanism, **overrides))


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass
class MQARResult:
    mechanism: str
    num_pairs: int
    seed: int
    accuracy: float
    final_loss: float
    steps: int
    seconds: float
    parameters: int


def train_on_mqar(mechanism: str, num_pairs: int, *, steps: int, batch_size: int = 64, lr: float = 3e-3,
                  seed: int = 0, eval_size: int = 256, device=None, **config) -> tuple[MixerLM, MQARResult]:
    """Train a fresh :class:`MixerLM` on MQAR with ``num_pairs`` pairs; accuracy on a held-out batch.

    Training batches come from one generator seeded with ``seed``, the evaluation batch from another
    (``seed + 10_000``), so a run is reproducible and never evaluated on a batch it trained on.
    """
    from k3lite.data import mqar_batch
    from k3lite.train import accuracy, train

    device = torch.device("cpu") if device is None else torch.device(device)
    torch.manual_seed(seed)
    model = build(mechanism, **config).to(device)
    vocab_size = model.config.vocab_size
    train_generator = torch.Generator().manual_seed(seed)
    eval_generator = torch.Generator().manual_seed(seed + 10_000)

    def next_batch(step):
        inputs, targets = mqar_batch(batch_size, num_pairs, vocab_size=vocab_size, generator=train_generator)
        return inputs.to(device), targets.to(device)

    history = train(model, next_batch, steps=steps, lr=lr, warmup=max(1, steps // 10))
    inputs, targets = mqar_batch(eval_size, num_pairs, vocab_size=vocab_size, generator=eval_generator)
    result = MQARResult(mechanism=mechanism, num_pairs=num_pairs, seed=seed,
                        accuracy=accuracy(model, inputs.to(device), targets.to(device)),
                        final_loss=history.train_loss[-1], steps=steps, seconds=history.seconds,
                        parameters=num_parameters(model))
    return model, result
