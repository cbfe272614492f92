"""Mixture of experts as in Kimi K3: sigmoid router, shared experts, latent experts, SiTU.

A token's hidden state ``x`` is scored against every routed expert with a sigmoid; the ``top_k``
best experts (chosen after adding a per-expert *selection bias*, which steers load without an
auxiliary loss and never enters the mixing weights) process it, and their outputs are mixed with
the selected sigmoid scores renormalised to sum to one. Shared experts see every token.

In the *latent* variant the routed experts live in a smaller space: ``z = W_down x``,
``y = W_up(RMSNorm(sum_e w_e E_e(z))) + Shared(x)``. Routing still looks at the full ``x``.

Two ways to compute the routed experts, equal up to rounding:

* on a CPU, grouped by expert (:meth:`RoutedExperts.forward_grouped`): the (token, slot) pairs are sorted
  by expert id and each expert that received tokens runs one matrix multiply over its contiguous slice.
  Only the chosen (token, expert) pairs are computed, but slicing needs the loads *on the host*;
* elsewhere (CUDA), every expert over every token with the unchosen pairs masked out
  (:meth:`RoutedExperts.forward_all_experts`): shapes depend only on the input's shape, so nothing waits
  for the GPU. Reading the loads back (``.tolist()``) would stop the host in every MoE layer of every
  step until the GPU caught up. The price is ``num_experts / top_k`` times the expert FLOPs, fine at
  this course's sizes; at K3's 896 experts a grouped GEMM with device-side offsets is the tool.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from k3lite.layers.norms import RMSNorm, upcast
from k3lite.ops.situ import situ_glu

ACTIVATIONS = ("situ", "silu")
SITU_BETAS = (4.0, 25.0)


def gated_activation(gate: torch.Tensor, up: torch.Tensor, activation: str,
                     situ_betas: tuple[float, float] = SITU_BETAS) -> torch.Tensor:
    """The GLU nonlinearity: ``SiLU(gate) * up`` or ``SiTU_b1(gate) * b2 * tanh(up / b2)``."""
    if activation == "silu":
        return F.silu(gate) * up
    if activation == "situ":
        return situ_glu(gate, up, beta1=situ_betas[0], beta2=situ_betas[1])
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


class GatedMLP(nn.Module):
    """``W_down(act(W_gate x, W_up x))``: the dense MLP, a shared expert, or (batched) a routed one."""

    def __init__(self, size: int, width: int, *, activation: str = "situ",
                 situ_betas: tuple[float, float] = SITU_BETAS):
        super().__init__()
        _check_positive(size=size, width=width)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation, self.situ_betas = activation, situ_betas
        self.gate_proj = nn.Linear(size, width, bias=False)
        self.up_proj = nn.Linear(size, width, bias=False)
        self.down_proj = nn.Linear(width, size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = gated_activation(self.gate_proj(x), self.up_proj(x), self.activation, self.situ_betas)
        return self.down_proj(hidden)


class SigmoidRouter(nn.Module):
    """Sigmoid scores, top-k selection on ``score + selection_bias``, renormalised mixing weights."""

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, *, routed_scaling: float = 1.0):
        super().__init__()
        _check_positive(hidden_size=hidden_size, num_experts=num_experts, top_k=top_k)
        if top_k > num_experts:
            raise ValueError(f"top_k must be <= num_experts={num_experts}, got {top_k}")
        self.top_k, self.routed_scaling = top_k, routed_scaling
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size))
        nn.init.normal_(self.weight, std=0.02)
        # A buffer, not a parameter: it is nudged by update_bias, never by gradients.
        self.register_buffer("selection_bias", torch.zeros(num_experts))

    def forward(self, x: torch.Tensor):
        """``x [N, D]`` -> ``(weights [N, top_k], indices [N, top_k], scores [N, E])``."""
        wide = upcast(x)
        scores = torch.sigmoid(F.linear(wide, self.weight.to(wide.dtype)))
        _, indices = torch.topk(scores + self.selection_bias.to(scores.dtype), self.top_k, dim=-1)
        selected = scores.gather(-1, indices)
        weights = selected / selected.sum(dim=-1, keepdim=True) * self.routed_scaling
        return weights, indices, scores

    @torch.no_grad()
    def update_bias(self, load: torch.Tensor, rate: float = 1e-3) -> None:
        """Auxiliary-loss-free balancing: raise the bias of under-loaded experts, lower the others."""
        load = load.float().to(self.selection_bias.device)
        self.selection_bias += rate * torch.sign(load.mean() - load)


class RoutedExperts(nn.Module):
    """``num_experts`` gated MLPs stored as stacked weights ``[E, width, size]`` / ``[E, size, width]``."""

    def __init__(self, num_experts: int, size: int, width: int, *, activation: str = "situ",
                 situ_betas: tuple[float, float] = SITU_BETAS):
        super().__init__()
        _check_positive(num_experts=num_experts, size=size, width=width)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation, self.situ_betas = activation, situ_betas
        self.gate_proj = nn.Parameter(torch.empty(num_experts, width, size))
        self.up_proj = nn.Parameter(torch.empty(num_experts, width, size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, size, width))
        for weight in (self.gate_proj, self.up_proj, self.down_proj):
            nn.init.normal_(weight, std=0.02)

    @property
    def num_experts(self) -> int:
        return self.gate_proj.shape[0]

    def expert(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Expert ``index`` applied to ``x [..., size]``."""
        gate = x @ self.gate_proj[index].T
        up = x @ self.up_proj[index].T
        return gated_activation(gate, up, self.activation, self.situ_betas) @ self.down_proj[index].T

    def forward(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor):
        """``x [N, size]``, ``weights/indices [N, k]`` -> ``(sum_j weights[:, j] * E_indices[:, j](x), load [E])``.

        On a CPU the grouped loop (it computes only the chosen pairs); on any other device the
        masked form, which never synchronises the host with the device.
        """
        if x.device.type == "cpu":
            return self.forward_grouped(x, weights, indices)
        return self.forward_all_experts(x, weights, indices)

    def forward_grouped(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor):
        """Sort the (token, slot) pairs by expert; one matmul per expert that received tokens.

        Reads the loads on the host (``.tolist()``) to slice: cheap on a CPU, a full stop on a GPU.
        """
        num_tokens, top_k = indices.shape
        flat_experts = indices.reshape(-1)
        order = torch.argsort(flat_experts, stable=True)
        token_of_slot = order // top_k
        load = torch.bincount(flat_experts, minlength=self.num_experts)
        sorted_inputs = x[token_of_slot]
        ends = load.cumsum(0).tolist()
        outputs = []
        for expert_id in torch.nonzero(load).flatten().tolist():
            end = ends[expert_id]
            start = end - int(load[expert_id])
            outputs.append(self.expert(expert_id, sorted_inputs[start:end]))
        if not outputs:  # no tokens at all
            return torch.zeros_like(x), load
        sorted_outputs = torch.cat(outputs) * weights.reshape(-1)[order, None].to(x.dtype)
        mixed = torch.zeros_like(x).index_add(0, token_of_slot, sorted_outputs)
        return mixed, load

    def forward_all_experts(self, x: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor):
        """Every expert over every token, the pairs the router did not choose masked to zero.

        No ``.item()``, ``.tolist()``, ``nonzero`` or boolean indexing: every shape follows from the
        shapes of the inputs, so on a GPU the host queues the whole layer without waiting.
        """
        num_tokens = x.shape[0]
        # times_chosen[n, e]: how often token n picked expert e (0 or 1 from a router; a count for any
        # index tensor), and mixing[n, e] its summed mixing weight: scatter_add, so repeats add up as
        # they do in the grouped loop.
        times_chosen = torch.zeros(num_tokens, self.num_experts, dtype=torch.long, device=x.device)
        times_chosen.scatter_add_(1, indices, torch.ones_like(indices))
        mixing = torch.zeros(num_tokens, self.num_experts, dtype=weights.dtype, device=x.device)
        mixing = mixing.scatter_add(1, indices, weights)
        load = times_chosen.sum(0)
        # [N, size] @ [E, size, width] broadcasts to [E, N, width]: one batched matmul per projection.
        gate = x @ self.gate_proj.transpose(1, 2)
        up = x @ self.up_proj.transpose(1, 2)
        expert_outputs = gated_activation(gate, up, self.activation, self.situ_betas) @ self.down_proj.transpose(1, 2)
        weighted = expert_outputs * mixing.T[..., None].to(x.dtype)                       # [E, N, size]
        # where, not just the zero weight: an unchosen pair whose output overflowed (inf * 0 = nan)
        # must not reach the sum, nor send gradient back.
        chosen = (times_chosen > 0).T[..., None]
        mixed = torch.where(chosen, weighted, torch.zeros((), dtype=x.dtype, device=x.device)).sum(0)
        return mixed, load


class MoE(nn.Module):
    """Routed experts (optionally in a latent space) plus shared experts.

    ``forward(x [..., D]) -> (y [..., D], load [num_experts])`` where ``load`` counts how many
    tokens each routed expert received in this call (for plots and bias balancing).
    """

    def __init__(self, hidden_size: int, num_experts: int, top_k: int, expert_width: int, *,
                 num_shared_experts: int = 0, latent_size: int | None = None, activation: str = "situ",
                 situ_betas: tuple[float, float] = SITU_BETAS, routed_scaling: float = 1.0,
                 norm_eps: float = 1e-6):
        super().__init__()
        if num_shared_experts < 0:
            raise ValueError(f"num_shared_experts must be >= 0, got {num_shared_experts}")
        if latent_size is not None:
            _check_positive(latent_size=latent_size)
        self.router = SigmoidRouter(hidden_size, num_experts, top_k, routed_scaling=routed_scaling)
        self.latent_size = latent_size
        expert_size = hidden_size if latent_size is None else latent_size
        if latent_size is not None:
            self.latent_down = nn.Linear(hidden_size, latent_size, bias=False)
            self.latent_norm = RMSNorm(latent_size, eps=norm_eps)
            self.latent_up = nn.Linear(latent_size, hidden_size, bias=False)
        self.experts = RoutedExperts(num_experts, expert_size, expert_width, activation=activation,
                                     situ_betas=situ_betas)
        self.shared = (GatedMLP(hidden_size, num_shared_experts * expert_width, activation=activation,
                                situ_betas=situ_betas) if num_shared_experts else None)

    def forward(self, x: torch.Tensor):
        hidden_size = self.router.weight.shape[1]
        if x.shape[-1] != hidden_size:
            raise ValueError(f"x must end in hidden_size={hidden_size}, got shape {tuple(x.shape)}")
        flat = x.reshape(-1, hidden_size)
        weights, indices, _ = self.router(flat)
        expert_input = flat if self.latent_size is None else self.latent_down(flat)
        routed, load = self.experts(expert_input, weights, indices)
        if self.latent_size is not None:
            routed = self.latent_up(self.latent_norm(routed))
        if self.shared is not None:
            routed = routed + self.shared(flat)
        return routed.reshape(x.shape), load
