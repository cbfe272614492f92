"""Each mechanism contains the previous one as a special case, and the memories do what the story says."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F

import k3lite
from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

B, T, H, K, V = 2, 45, 2, 8, 5
TOL = 1e-5


def inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    k = F.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    beta = torch.rand(B, T, H, generator=gen)
    g_head = -torch.rand(B, T, H, generator=gen)
    state = torch.randn(B, H, K, V, generator=gen)
    return q, k, v, beta, g_head, state


def assert_same(a, b, tol=TOL):
    (o1, s1), (o2, s2) = a, b
    assert (o1 - o2).abs().max().item() <= tol
    assert (s1 - s2).abs().max().item() <= tol


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_with_zero_gate_is_deltanet(form):
    q, k, v, beta, _, state = inputs()
    zero = torch.zeros(B, T, H, K)
    assert_same(getattr(kda, form)(q, k, v, zero, beta, initial_state=state),
                getattr(delta_rule, form)(q, k, v, beta, initial_state=state))


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_kda_with_equal_channels_is_gated_deltanet(form):
    q, k, v, beta, g_head, state = inputs()
    g_channels = g_head[..., None].expand(B, T, H, K)
    assert_same(getattr(kda, form)(q, k, v, g_channels, beta, initial_state=state),
                getattr(gated_delta_rule, form)(q, k, v, g_head, beta, initial_state=state))


@pytest.mark.parametrize("form", ["recurrent", "chunked"])
def test_gated_deltanet_with_zero_gate_is_deltanet(form):
    q, k, v, beta, _, state = inputs()
    assert_same(getattr(gated_delta_rule, form)(q, k, v, torch.zeros(B, T, H), beta, initial_state=state),
                getattr(delta_rule, form)(q, k, v, beta, initial_state=state))


def test_kda_steps_reduce_the_same_way():
    q, k, v, beta, g_head, state = inputs()
    t = 3
    assert_same(kda.step(q[:, t], k[:, t], v[:, t], g_head[:, t, :, None].expand(B, H, K), beta[:, t], state=state),
                gated_delta_rule.step(q[:, t], k[:, t], v[:, t], g_head[:, t], beta[:, t], state=state))
    assert_same(gated_delta_rule.step(q[:, t], k[:, t], v[:, t], torch.zeros(B, H), beta[:, t], state=state),
                delta_rule.step(q[:, t], k[:, t], v[:, t], beta[:, t], state=state))


def test_delta_rule_with_beta_one_replaces_the_answer_for_a_unit_key():
    """Linear attention piles the new value on the old answer; the delta rule replaces it."""
    q, k, v, _, _, state = inputs()
    key, value = k[:, 0], v[:, 0]
    _, s_delta = delta_rule.step(key, key, value, torch.ones(B, H), state=state)
    _, s_linear = linear_attention.step(key, key, value, state=state)
    read = lambda S: torch.einsum("bhk,bhkv->bhv", key, S)       # noqa: E731  (S^T k)
    assert (read(s_delta) - value).abs().max().item() <= TOL
    assert (read(s_linear) - (read(state) + value)).abs().max().item() <= TOL


def test_beta_zero_writes_nothing():
    q, k, v, _, _, state = inputs()
    o, s = delta_rule.chunked(q, k, v, torch.zeros(B, T, H), initial_state=state, chunk_size=16)
    assert (s - state).abs().max().item() == 0.0
    expected = torch.einsum("bthk,bhkv->bthv", q * K ** -0.5, state)
    assert (o - expected).abs().max().item() <= TOL


@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_a_very_negative_gate_wipes_the_memory(kind):
    q, k, v, beta, g_head, state = inputs()
    g = g_head.clone()
    g[:, 20] = -1e4                         # exp(-1e4) = 0: nothing before token 20 survives
    if kind == "kda":
        g = g[..., None].expand(B, T, H, K)
    module = gated_delta_rule if kind == "gated_delta_rule" else kda
    with_memory = module.chunked(q, k, v, g, beta, initial_state=state, chunk_size=16)
    other_past = module.chunked(q, k, v * (torch.arange(T) >= 20)[:, None, None], g, beta,
                                initial_state=-state, chunk_size=16)
    assert (with_memory[0][:, 20:] - other_past[0][:, 20:]).abs().max().item() <= TOL
    assert (with_memory[1] - other_past[1]).abs().max().item() <= TOL


def test_normalized_linear_attention_averages_the_values():
    q, k, _, _, _, _ = inputs()
    for form in (linear_attention.recurrent, linear_attention.parallel):
        o, _ = form(q, k, torch.ones(B, T, H, V), feature_map="elu1", normalize=True)
        assert (o - 1).abs().max().item() <= TOL        # the weights of every row sum to 1


def test_default_scale_is_inverse_sqrt_key_dim():
    q, k, v, beta, _, _ = inputs()
    default = delta_rule.chunked(q, k, v, beta)
    explicit = delta_rule.chunked(q * K ** -0.5, k, v, beta, scale=1.0)
    assert_same(default, explicit)


# ---------------------------------------------------------------------------------------------
# Backend dispatch (a stand-in kernels package records what it was called with)
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def fake_kernels(monkeypatch):
    calls = []
    fake = types.ModuleType("k3lite.kernels")
    # The ops call the entry points that skip the checks they already ran (run_chunked, run_step).
    fake.run_chunked = lambda kind, *args, **kwargs: calls.append(("chunked", kind, args, kwargs)) or ("o", "S")
    fake.run_step = lambda kind, *args, **kwargs: calls.append(("step", kind, args, kwargs)) or ("o", "S")
    monkeypatch.setitem(sys.modules, "k3lite.kernels", fake)
    monkeypatch.setattr(k3lite, "kernels", fake, raising=False)
    return calls


def test_triton_backend_hands_validated_inputs_to_the_kernels(fake_kernels):
    q, k, v, beta, g_head, state = inputs()
    g = g_head[..., None].expand(B, T, H, K)
    assert kda.chunked(q, k, v, g, beta, chunk_size=32, initial_state=state, backend="triton") == ("o", "S")
    function, kind, args, kwargs = fake_kernels[-1]
    assert (function, kind) == ("chunked", "kda") and args[3] is g and args[4] is beta
    assert kwargs == {"scale": K ** -0.5, "initial_state": state, "chunk_size": 32}
    linear_attention.step(q[:, 0], k[:, 0], v[:, 0], state=state, scale=2, backend="triton")
    function, kind, args, kwargs = fake_kernels[-1]
    assert (function, kind, args[3:], kwargs["scale"]) == ("step", "linear_attention", (None, None), 2.0)
    delta_rule.chunked(q, k, v, beta, backend="triton")
    assert fake_kernels[-1][1] == "delta_rule" and fake_kernels[-1][2][3] is None


def test_auto_backend_stays_on_torch_for_cpu_tensors(fake_kernels):
    q, k, v, beta, g_head, state = inputs()
    o, s = gated_delta_rule.chunked(q, k, v, g_head, beta, backend="auto")
    gated_delta_rule.step(q[:, 0], k[:, 0], v[:, 0], g_head[:, 0], beta[:, 0], state=state)
    assert fake_kernels == [] and isinstance(o, torch.Tensor)


def test_triton_backend_without_kernels_package_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "k3lite.kernels", None)     # makes the import fail
    monkeypatch.delattr(k3lite, "kernels", raising=False)
    q, k, v, beta, _, _ = inputs()
    with pytest.raises(RuntimeError, match="backend='torch'"):
        delta_rule.chunked(q, k, v, beta, backend="triton")


def test_auto_backend_picks_triton_for_cuda_tensors():
    from k3lite._validate import resolve_backend
    assert resolve_backend("auto", types.SimpleNamespace(is_cuda=True)) == "triton"
    assert resolve_backend("auto", torch.zeros(1)) == "torch"
    assert resolve_backend("torch", types.SimpleNamespace(is_cuda=True)) == "torch"


@pytest.mark.parametrize("kind", ["linear_attention", "delta_rule", "gated_delta_rule", "kda"])
def test_triton_backend_agrees_with_torch(kind):
    """The seam to the kernels package, end to end (on a CPU: the Triton interpreter, tiny shapes)."""
    kernels = pytest.importorskip("k3lite.kernels")
    try:
        kernels.interpreting()
    except RuntimeError as err:   # triton was loaded first (torch.utils.flop_counter does that)
        pytest.skip(f"Triton interpreter unavailable in this session: {err}")
    modules = {"linear_attention": linear_attention, "delta_rule": delta_rule,
               "gated_delta_rule": gated_delta_rule, "kda": kda}
    q, k, v, beta, g_head, state = inputs()
    # One sequence of 12 tokens and one head: the interpreter is slow.
    q, k, v, beta, g_head = (x[:1, :12, :1] for x in (q, k, v, beta, g_head))
    state = state[:1, :1]
    args = {"linear_attention": (q, k, v), "delta_rule": (q, k, v, beta),
            "gated_delta_rule": (q, k, v, g_head, beta),
            "kda": (q, k, v, g_head[..., None].expand(1, 12, 1, K).contiguous(), beta)}[kind]
    module = modules[kind]
    for backend_result, torch_result in (
        (module.chunked(*args, initial_state=state, backend="triton"),
         module.chunked(*args, initial_state=state, backend="torch")),
        (module.step(*(x[:, 0] for x in args), state=state, backend="triton"),
         module.step(*(x[:, 0] for x in args), state=state, backend="torch")),
    ):
        assert_same(backend_result, torch_result)


@pytest.mark.parametrize("block", [1, 2, 8, 64])
def test_kda_halving_matches_the_pairwise_table(block):
    """The fast intra-chunk scores equal their definition, even under gates of -20 per step."""
    gen = torch.Generator().manual_seed(block)
    k, q = (F.normalize(torch.randn(3, block, K, generator=gen), dim=-1) for _ in range(2))
    g = -20 * torch.rand(3, block, K, generator=gen)
    g[0] = -0.01 * torch.rand(block, K, generator=gen)          # and gentle ones
    kk, qk, before, after = kda._pairwise_decayed(k, q, g)
    kk_ref, qk_ref = kda._pairwise_decayed_table(k, q, g)
    assert (kk - kk_ref).abs().max().item() <= TOL and (qk - qk_ref).abs().max().item() <= TOL
    g64 = g.double()
    assert torch.allclose(before.double(), g64.cumsum(-2), rtol=1e-6, atol=1e-6)
    assert torch.allclose(after.double(), g64.sum(-2, keepdim=True) - g64.cumsum(-2), rtol=1e-6, atol=1e-5)
