"""What the kernel grids (tests/test_grid_*.py) judge against: a naive recurrence and the reference library's rule.

The grids port the parameter lists of flash-linear-attention's own chunk-kernel tests (its ``tests/ops/test_kda.py``,
``test_gdn.py`` and ``test_delta.py``) to ``k3lite.kernels.chunked``. Each case runs the Triton path forward and
backward and the token loop below on the same (rounded) inputs, in float64 unless a test asks for float32, and
compares every tensor by that library's rule (``fla.utils.assert_close``): the relative RMS error

    ratio = rms(ref - tri) / (rms(ref) + 1e-8)

must stay below a ratio stated per tensor, unless the largest absolute difference is at most 1e-6 (a tensor that
is all but zero, such as the gradient of a masked gate, has no meaningful ratio). The library's CI leniency (a
warning instead of a failure below 1e-2) is not ported: here every ratio is a hard bound.

The recurrence is written out here, from the papers' update rules, rather than taken from ``k3lite.ops``: the grids
check the kernels against something that shares no code with them. Per head, memory ``S [K, V]``:

    linear attention  S_t = S_{t-1} + k_t v_t^T
    DeltaNet          S_t = S_{t-1} + k_t beta_t (v_t - S_{t-1}^T k_t)^T
    Gated DeltaNet    S_t = exp(g_t) S_{t-1}, then the DeltaNet step          (g_t a scalar per head)
    KDA               S_t = diag(exp(g_t)) S_{t-1}, then the DeltaNet step    (g_t a vector over the K channels)
    o_t = S_t^T (scale q_t)

(Schlag et al. 2021, "Linear Transformers Are Secretly Fast Weight Programmers", sec. 4.2; Yang et al. 2024,
"Gated Delta Networks", sec. 3; Kimi Team 2025, "Kimi Linear", sec. 3.)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

# The per-tensor ratios the reference library's chunk tests state, by name of the compared tensor.
GDN_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.008, "dk": 0.008, "dv": 0.008, "dbeta": 0.02, "dg": 0.02,
              "dh0": 0.008}
KDA_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.008, "dk": 0.008, "dv": 0.008, "dg": 0.02, "dbeta": 0.02,
              "dh0": 0.008}
KDA_VARLEN_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.007, "dk": 0.008, "dv": 0.007, "dg": 0.015,
                     "dbeta": 0.015, "dh0": 0.007}
DELTA_FP16_RATIOS = {"o": 0.006, "state": 0.006, "dq": 0.008, "dk": 0.008, "dv": 0.008, "dbeta": 0.008,
                     "dh0": 0.008}
DELTA_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.008, "dk": 0.008, "dv": 0.008, "dbeta": 0.008, "dh0": 0.008}
# Below this largest absolute difference a tensor passes whatever its ratio (the reference's err_atol).
ABSOLUTE_FLOOR = 1e-6

GATED = ("gated_delta_rule", "kda")
DELTA = ("delta_rule", "gated_delta_rule", "kda")


def error_ratio(ref: torch.Tensor, tri: torch.Tensor) -> float:
    """rms(ref - tri) / (rms(ref) + 1e-8), in float64."""
    ref, tri = ref.detach().double(), tri.detach().double()
    return ((ref - tri).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-8)).item()


def largest_difference(ref: torch.Tensor, tri: torch.Tensor) -> float:
    return (ref.detach().double() - tri.detach().double()).abs().max().item()


def compare(name: str, ref: torch.Tensor, tri: torch.Tensor, ratio: float) -> str | None:
    """None when tri passes the rule against ref, else a line saying by how much it failed."""
    if ref.shape != tri.shape:
        return f"{name}: shape {tuple(tri.shape)}, expected {tuple(ref.shape)}"
    if not torch.isfinite(tri).all():
        return f"{name}: not finite"
    if largest_difference(ref, tri) <= ABSOLUTE_FLOOR:
        return None
    got = error_ratio(ref, tri)
    if got < ratio:
        return None
    return f"{name}: error ratio {got:.3e} >= {ratio:g} (largest |diff| {largest_difference(ref, tri):.3e})"


def assert_all_close(results: dict[str, tuple[torch.Tensor, torch.Tensor]], ratios: dict[str, float]) -> None:
    """Every tensor of ``results`` (name -> (ref, tri)) judged by its ratio; one assertion listing all failures."""
    failures = [line for name, (ref, tri) in results.items()
                if (line := compare(name, ref, tri, ratios[name])) is not None]
    assert not failures, "; ".join(failures)


def naive_recurrence(kind, q, k, v, g=None, beta=None, *, scale, initial_state=None, dtype=torch.float64):
    """The token loop of ``kind`` in ``dtype``: ``(o [B, T, H, V], final_state [B, H, K, V])``, both in ``dtype``.

    q, k ``[B, T, H, K]``, v ``[B, T, H, V]``, g ``[B, T, H]`` (gated_delta_rule) or ``[B, T, H, K]`` (kda),
    beta ``[B, T, H]``; differentiable, so the gradients of the reference come from autograd through the loop."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    q, k, v = (x.to(dtype) for x in (q, k, v))
    S = (initial_state.to(dtype) if initial_state is not None
         else torch.zeros(B, H, K, V, dtype=dtype, device=q.device))
    outputs = []
    for t in range(T):
        k_t = k[:, t]
        if kind == "gated_delta_rule":
            S = torch.exp(g[:, t].to(dtype))[..., None, None] * S
        elif kind == "kda":
            S = torch.exp(g[:, t].to(dtype))[..., None] * S
        if kind == "linear_attention":
            write = v[:, t]
        else:
            write = beta[:, t].to(dtype)[..., None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", k_t, S))
        S = S + k_t[..., :, None] * write[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", scale * q[:, t], S))
    if not outputs:   # an empty sequence of a packed batch: no output, the state passes through
        return v.new_zeros(B, 0, H, V), S
    return torch.stack(outputs, dim=1), S


def naive_packed(kind, q, k, v, g, beta, *, scale, initial_state, cu_seqlens, dtype=torch.float64):
    """:func:`naive_recurrence` once per sequence of a packed batch (B = 1, offsets ``cu_seqlens``); outputs
    concatenated along T, final states stacked ``[N, H, K, V]``. Empty sequences keep their initial state."""
    offsets = [int(x) for x in cu_seqlens]
    outputs, states = [], []
    for n, (start, end) in enumerate(zip(offsets[:-1], offsets[1:])):
        h0 = initial_state[n:n + 1] if initial_state is not None else None
        part = slice(start, end)
        o, s = naive_recurrence(kind, q[:, part], k[:, part], v[:, part], None if g is None else g[:, part],
                                None if beta is None else beta[:, part], scale=scale, initial_state=h0, dtype=dtype)
        outputs.append(o)
        states.append(s)
    return torch.cat(outputs, dim=1), torch.cat(states, dim=0)


def kernels_take_cu_seqlens() -> bool:
    """Whether ``k3lite.kernels.chunked`` accepts variable-length batches (a ``cu_seqlens`` keyword)."""
    from k3lite import kernels

    return "cu_seqlens" in inspect.signature(kernels.chunked).parameters


def skip_without_cu_seqlens():
    import pytest

    if not kernels_take_cu_seqlens():
        pytest.skip("k3lite.kernels.chunked takes no cu_seqlens yet (variable-length batches)")


@dataclass
class Case:
    """One grid case: its inputs (leaves: what the gradients are taken of) and what to call the kernels with."""
    kind: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    g: torch.Tensor | None
    beta: torch.Tensor | None
    h0: torch.Tensor | None
    scale: float
    d_o: torch.Tensor
    d_state: torch.Tensor
    cu_seqlens: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    def leaves(self):
        return {"q": self.q, "k": self.k, "v": self.v, "g": self.g, "beta": self.beta, "h0": self.h0}


def make_case(kind, B, T, H, D, dtype, *, scale=None, qk="rand", v_dist="rand", gate="logsigmoid_rand",
              gate_normalizer=1.0, mask_p=0.0, g_dtype=torch.float32, beta_dtype=torch.float32, h0="zeros",
              h0_dtype=torch.float32, d_o="randn", d_state="randn", cu_seqlens=None, device="cuda",
              seed=42) -> Case:
    """Inputs drawn as the reference's tests draw them.

    qk: "rand" (uniform in [0, 1), then L2-normalised: keys all in one orthant, the harder case for the delta
    rule) or "randn_keys" (q standard normal, k normalised standard normal, as its DeltaNet test). The normalised
    q and k are the leaves (the reference normalises inside its graph; here the kernels' own gradients are judged).
    v_dist, d_o, d_state: "rand" (uniform in [0, 1)) or "randn". h0: "zeros", "randn" or "none".
    gate: "logsigmoid_rand" (logsigmoid(U[0,1)), Gated DeltaNet's), "logsigmoid_randn" (KDA's), or
    "kda_gate" (-exp(A_log) softplus(x + dt_bias), KDA's gate computed outside the kernel); divided by
    gate_normalizer, then each gate zeroed with probability mask_p.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def uniform(*shape):
        return torch.rand(*shape, generator=gen)

    def normal(*shape):
        return torch.randn(*shape, generator=gen)

    n_seq = len(cu_seqlens) - 1 if cu_seqlens is not None else B
    if qk == "rand":
        q = F.normalize(uniform(B, T, H, D), dim=-1)
        k = F.normalize(uniform(B, T, H, D), dim=-1)
    else:
        q = normal(B, T, H, D)
        k = F.normalize(normal(B, T, H, D), dim=-1)
    v = uniform(B, T, H, D) if v_dist == "rand" else normal(B, T, H, D)
    g = None
    if kind in GATED:
        shape = (B, T, H, D) if kind == "kda" else (B, T, H)
        if gate == "kda_gate":
            a_log, dt_bias = normal(H), normal(H, D)
            g = -torch.exp(a_log)[:, None] * F.softplus(normal(*shape) + dt_bias)
        else:
            raw = uniform(*shape) if gate == "logsigmoid_rand" else normal(*shape)
            g = F.logsigmoid(raw) / gate_normalizer
        g = g * (uniform(*shape) >= mask_p)
    beta = None
    if kind in DELTA:
        beta = torch.sigmoid(uniform(B, T, H) if kind != "kda" else normal(B, T, H))
    state = None
    if h0 == "randn":
        state = normal(n_seq, H, D, D)
    elif h0 == "zeros":
        state = torch.zeros(n_seq, H, D, D)
    grad_o = (normal if d_o == "randn" else uniform)(B, T, H, D)
    grad_state = (normal if d_state == "randn" else uniform)(n_seq, H, D, D)

    def put(x, dt):
        return None if x is None else x.to(device=device, dtype=dt).requires_grad_(True)

    return Case(kind=kind, q=put(q, dtype), k=put(k, dtype), v=put(v, dtype), g=put(g, g_dtype),
                beta=put(beta, beta_dtype), h0=put(state, h0_dtype),
                scale=D ** -0.5 if scale is None else float(scale),
                d_o=grad_o.to(device=device, dtype=dtype), d_state=grad_state.to(device=device),
                cu_seqlens=None if cu_seqlens is None else torch.tensor(cu_seqlens, dtype=torch.int64, device=device))


def _grads(outputs, case: Case):
    o, state = outputs
    loss = (o.float() * case.d_o.float()).sum() + (state.float() * case.d_state.float()).sum()
    names = [name for name, x in case.leaves().items() if x is not None]
    grads = torch.autograd.grad(loss, [case.leaves()[n] for n in names], allow_unused=True)
    return {name: grad for name, grad in zip(names, grads)}


def run_kernels(case: Case, chunk_size=64):
    """``k3lite.kernels.chunked`` forward and backward: (o, final_state, {leaf name: gradient})."""
    from k3lite import kernels

    kwargs = dict(scale=case.scale, initial_state=case.h0, chunk_size=chunk_size)
    if case.cu_seqlens is not None:
        kwargs["cu_seqlens"] = case.cu_seqlens
    outputs = kernels.chunked(case.kind, case.q, case.k, case.v, case.g, case.beta, **kwargs)
    return outputs[0], outputs[1], _grads(outputs, case)


def run_reference(case: Case, dtype=torch.float64):
    """The naive recurrence on the same inputs, in ``dtype``: (o, final_state, {leaf name: gradient})."""
    args = (case.kind, case.q, case.k, case.v, case.g, case.beta)
    if case.cu_seqlens is not None:
        outputs = naive_packed(*args, scale=case.scale, initial_state=case.h0, cu_seqlens=case.cu_seqlens,
                               dtype=dtype)
    else:
        outputs = naive_recurrence(*args, scale=case.scale, initial_state=case.h0, dtype=dtype)
    return outputs[0], outputs[1], _grads(outputs, case)


def check_case(case: Case, ratios: dict[str, float], *, reference_dtype=torch.float64, chunk_size=64,
               report=None) -> dict[str, float]:
    """Run both paths and assert every tensor by the rule; returns {name: error ratio} (also on failure, into
    ``report`` when given, so a grid can print them)."""
    o, state, grads = run_kernels(case, chunk_size=chunk_size)
    ref_o, ref_state, ref_grads = run_reference(case, dtype=reference_dtype)
    results = {"o": (ref_o, o), "state": (ref_state, state)}
    for name, grad in grads.items():
        ref = ref_grads[name]
        label = {"beta": "dbeta", "h0": "dh0"}.get(name, "d" + name)
        if ref is None and grad is None:
            continue
        zeros = torch.zeros_like(case.leaves()[name], dtype=torch.float64)
        results[label] = (zeros if ref is None else ref, zeros if grad is None else grad)
    ratios_found = {name: error_ratio(ref, tri) for name, (ref, tri) in results.items()}
    if report is not None:
        report.update(ratios_found)
    assert_all_close(results, ratios)
    return ratios_found


def check_or_refused(case: Case, ratios: dict[str, float], D: int) -> None:
    """The reference runs head widths up to 256; k3lite's chunked kernels stop at 128 and must say so by name."""
    import pytest

    from k3lite.kernels import MAX_CHUNKED_HEAD_WIDTH

    if D > MAX_CHUNKED_HEAD_WIDTH:
        with pytest.raises(ValueError, match="head width must be at most"):
            check_case(case, ratios)
    else:
        check_case(case, ratios)
