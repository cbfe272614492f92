"""The K3 layers: KDA layer, MLA (expanded vs absorbed), MoE (grouped vs per token), norms."""

import ast
import inspect
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F

from k3lite.layers.kda_layer import KDALayer, ShortConv
from k3lite.layers.mla import MLA
from k3lite.layers.moe import MoE, RoutedExperts, SigmoidRouter, gated_activation
from k3lite.layers.norms import GatedRMSNorm, RMSNorm


def _randomise(module, std=0.3, seed=0):
    """Move every weight away from its (often trivial) initial value so tests see real mixing."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(std * torch.randn(p.shape, generator=generator))
    return module


# ----- norms ---------------------------------------------------------------------------------------

def test_rms_norm_matches_formula_and_rejects_wrong_width():
    norm = _randomise(RMSNorm(8))
    x = torch.randn(3, 5, 8)
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm.weight
    torch.testing.assert_close(norm(x), expected)
    with pytest.raises(ValueError, match="8 channels"):
        norm(torch.randn(3, 7))
    gated = GatedRMSNorm(8)
    gate = torch.randn(3, 5, 8)
    torch.testing.assert_close(gated(x, gate), RMSNorm(8)(x) * torch.sigmoid(gate))


# ----- short convolution and KDA layer -------------------------------------------------------------

def test_short_conv_is_causal_and_streams():
    torch.manual_seed(0)
    conv = ShortConv(6, 4)
    x = torch.randn(2, 11, 6)
    full, _ = conv(x)
    changed = x.clone()
    changed[:, 7:] += 1.0
    torch.testing.assert_close(conv(changed)[0][:, :7], full[:, :7])       # the future does not leak
    assert not torch.allclose(conv(changed)[0][:, 7:], full[:, 7:])
    first, state = conv(x[:, :5])
    pieces = [first]
    for t in range(5, 11):
        y, state = conv(x[:, t:t + 1], state)
        pieces.append(y)
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-6, rtol=0)
    # position t mixes exactly x[t-3..t] with the kernel, then SiLU
    t = 6
    window = x[:, t - 3:t + 1].transpose(1, 2)                              # [B, C, 4]
    torch.testing.assert_close(full[:, t], F.silu((window * conv.weight).sum(-1)))
    with pytest.raises(ValueError, match=r"conv cache state must be \[B, C, kernel_size-1\] = \(2, 6, 3\)"):
        conv(x, state[:1])


def _kda(gate_form="k3", **kwargs):
    torch.manual_seed(1)
    return _randomise(KDALayer(24, 3, 8, gate_form=gate_form, chunk_size=8, **kwargs), std=0.2).eval()


@pytest.mark.parametrize("gate_form", ["k3", "kimi_linear"])
def test_kda_chunked_equals_recurrent(gate_form):
    layer = _kda(gate_form)
    x = torch.randn(2, 21, 24)   # 21 tokens: two full chunks of 8 and a ragged one
    chunked, s_chunked = layer(x)
    recurrent, s_recurrent = layer(x, mode="recurrent")
    assert (chunked - recurrent).abs().max() <= 1e-5
    assert (s_chunked.recurrent_state - s_recurrent.recurrent_state).abs().max() <= 1e-5


def test_kda_decoding_with_cache_equals_full_pass():
    layer = _kda(output_gate_rank=4)
    x = torch.randn(2, 17, 24)
    full, full_cache = layer(x)
    y, cache = layer(x[:, :9])                       # prefill (chunked)
    pieces = [y]
    y, cache = layer(x[:, 9:12], cache)              # a second prompt piece, chunked from a state
    pieces.append(y)
    for t in range(12, 17):                          # then one token at a time (ops.kda.step)
        y, cache = layer(x[:, t:t + 1], cache)
        pieces.append(y)
    assert (torch.cat(pieces, 1) - full).abs().max() <= 1e-5
    assert (cache.recurrent_state - full_cache.recurrent_state).abs().max() <= 1e-5
    assert cache.recurrent_state.shape == (2, 3, 8, 8) and cache.recurrent_state.dtype == torch.float32


def _known_decay_parameters(layer):
    """f = dt_bias exactly (up-projection zeroed), A = (1, 2, 0.5) per head, b from -2 to 2 per channel."""
    A = torch.tensor([1.0, 2.0, 0.5])
    b = torch.linspace(-2.0, 2.0, 8).repeat(3)            # 8 channels per head, 3 heads
    b[::8] = 0.0                                          # channel 0 of each head: b = 0
    with torch.no_grad():
        layer.decay_up.weight.zero_()
        layer.A_log.copy_(A.log())
        layer.dt_bias.copy_(b)
    return A.view(3, 1), b.view(3, 8)


@pytest.mark.parametrize("gate_form", ["k3", "kimi_linear"])
def test_kda_gate_gates_at_initialisation(gate_form):
    """Both forms start with a spread of retentions below 1 and a live A_log gradient.

    With Mamba's A in U(1, 16) in K3's bounded form the sigmoid saturates: every channel starts at retention
    1.0000 and A_log's gradient is of order 1e-7 or smaller. A_log = 0 (the reference's safe gate) avoids it.
    """
    torch.manual_seed(0)
    layer = KDALayer(64, 2, 32, gate_form=gate_form, backend="torch")
    x = torch.randn(4, 64, 64)
    retention = layer.decay(x).exp()
    assert retention.median() < 0.99 and (retention >= 0.99).float().mean() < 0.5
    y, _ = layer(x)
    y.square().mean().backward()
    qkv_grad = torch.cat([layer.q_proj.weight.grad.abs().flatten(), layer.k_proj.weight.grad.abs().flatten(),
                          layer.v_proj.weight.grad.abs().flatten()]).mean()
    assert (layer.A_log.grad.abs() > 1e-3 * qkv_grad).all()
    if gate_form == "k3":
        assert torch.equal(layer.A_log.detach(), torch.zeros(2))


def test_kda_gates_follow_the_published_formulas():
    x = torch.randn(2, 5, 24)
    k3 = _kda("k3", gate_lower_bound=-5.0)
    A, b = _known_decay_parameters(k3)
    g = k3.decay(x)
    assert g.shape == (2, 5, 3, 8)
    torch.testing.assert_close(g, (-5.0 * torch.sigmoid(A * b)).expand(2, 5, 3, 8))
    torch.testing.assert_close(g[..., 0], torch.full((2, 5, 3), -2.5))           # -5 * sigmoid(0)
    kimi = _kda("kimi_linear")
    A, b = _known_decay_parameters(kimi)
    g = kimi.decay(x)
    torch.testing.assert_close(g, (-A * F.softplus(b)).expand(2, 5, 3, 8))
    torch.testing.assert_close(g[0, 0, :, 0], -torch.tensor([1.0, 2.0, 0.5]) * math.log(2.0))  # softplus(0) = ln 2
    fresh = _kda("k3", gate_lower_bound=-5.0)
    assert fresh.decay(100 * x).min() >= -5.0 and fresh.decay(x).max() <= 0       # bounded by construction
    assert _kda("kimi_linear").decay(100 * x).min() < -5.0                       # unbounded below
    q, k, v, g, beta, _ = fresh.mixer_inputs(x)
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(2, 5, 3))
    torch.testing.assert_close(k.norm(dim=-1), torch.ones(2, 5, 3))
    assert beta.shape == (2, 5, 3) and 0 < beta.min() and beta.max() < 1
    assert g.shape == (2, 5, 3, 8)


def test_kda_layer_rejects_bad_input():
    layer = _kda()
    with pytest.raises(ValueError, match="x must be"):
        layer(torch.randn(2, 5, 23))
    with pytest.raises(ValueError, match="gate_form"):
        KDALayer(24, 3, 8, gate_form="mamba")
    with pytest.raises(ValueError, match="gate_lower_bound"):
        KDALayer(24, 3, 8, gate_lower_bound=0.0)
    with pytest.raises(ValueError, match="mode"):
        layer(torch.randn(1, 2, 24), mode="fast")


# ----- MLA -----------------------------------------------------------------------------------------

def _mla(use_rope=False, q_lora_rank=12, output_gate=True):
    torch.manual_seed(2)
    layer = MLA(32, 4, q_lora_rank=q_lora_rank, kv_lora_rank=10, nope_dim=6, rope_dim=4, v_dim=5,
                use_rope=use_rope, output_gate=output_gate)
    return _randomise(layer, std=0.2).eval()


@pytest.mark.parametrize("use_rope", [False, True])
@pytest.mark.parametrize("q_lora_rank", [12, None])
def test_mla_absorbed_equals_expanded(use_rope, q_lora_rank):
    layer = _mla(use_rope, q_lora_rank)
    x = torch.randn(2, 13, 32)
    expanded, _ = layer(x, absorb=False)
    absorbed, _ = layer(x, absorb=True)
    assert (expanded - absorbed).abs().max() <= 1e-5
    _, cache = layer(x[:, :9])
    step_expanded, _ = layer(x[:, 9:10], cache, absorb=False)
    step_absorbed, _ = layer(x[:, 9:10], cache, absorb=True)
    assert (step_expanded - step_absorbed).abs().max() <= 1e-5


@pytest.mark.parametrize("use_rope", [False, True])
def test_mla_decoding_from_latent_cache_equals_full_pass(use_rope):
    layer = _mla(use_rope)
    x = torch.randn(2, 11, 32)
    full, _ = layer(x)
    y, cache = layer(x[:, :6])
    pieces = [y]
    for t in range(6, 11):
        y, cache = layer(x[:, t:t + 1], cache)
        pieces.append(y)
    assert (torch.cat(pieces, 1) - full).abs().max() <= 1e-5
    assert cache.latent.shape == (2, 11, 10) and cache.rope_key.shape == (2, 11, 4)   # 14 numbers a token


def test_mla_expanded_path_equals_sdpa_on_the_expanded_heads():
    layer = _mla(output_gate=False)
    x = torch.randn(2, 7, 32)
    q_nope, q_rope = layer.queries(x)
    latent, rope_key = layer.latents(x)
    kv = layer.kv_up(latent).view(2, 7, 4, 11)
    k = torch.cat([kv[..., :6], rope_key[:, :, None].expand(2, 7, 4, 4)], -1)
    q = torch.cat([q_nope, q_rope], -1)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), kv[..., 6:].transpose(1, 2),
                                       is_causal=True, scale=10 ** -0.5)
    expected = layer.o_proj(o.transpose(1, 2).reshape(2, 7, 20))
    assert (layer(x)[0] - expected).abs().max() <= 1e-5


def test_mla_output_gate_and_causality():
    layer = _mla()
    x = torch.randn(1, 8, 32)
    y, _ = layer(x)
    changed = x.clone()
    changed[:, 5:] = torch.randn(1, 3, 32)
    torch.testing.assert_close(layer(changed)[0][:, :5], y[:, :5])
    with torch.no_grad():
        layer.gate_proj.weight.zero_()                                     # gate = 1/2 everywhere
    ungated = _mla(output_gate=False)
    ungated.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("gate_proj")})
    with torch.no_grad():
        ungated.o_proj.weight.mul_(0.5)
    torch.testing.assert_close(layer(x)[0], ungated(x)[0])
    with pytest.raises(ValueError, match="x must be"):
        layer(torch.randn(8, 32))


# ----- MoE -----------------------------------------------------------------------------------------

def _per_token_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The obvious (slow) loop over tokens, written straight from the formula."""
    rows = []
    for token in x.reshape(-1, x.shape[-1]):
        scores = torch.sigmoid(moe.router.weight @ token)
        chosen = torch.topk(scores + moe.router.selection_bias, moe.router.top_k).indices
        weights = scores[chosen] / scores[chosen].sum() * moe.router.routed_scaling
        z = token if moe.latent_size is None else moe.latent_down(token)
        routed = sum(w * moe.experts.expert(int(e), z) for w, e in zip(weights, chosen))
        if moe.latent_size is not None:
            routed = moe.latent_up(moe.latent_norm(routed))
        rows.append(routed + (moe.shared(token) if moe.shared is not None else 0))
    return torch.stack(rows).reshape(x.shape)


@pytest.mark.parametrize("latent_size", [None, 8])
@pytest.mark.parametrize("activation", ["situ", "silu"])
def test_moe_grouped_equals_per_token_loop(latent_size, activation):
    torch.manual_seed(3)
    moe = _randomise(MoE(16, 6, 2, 12, num_shared_experts=2, latent_size=latent_size, activation=activation,
                         routed_scaling=1.5))
    with torch.no_grad():
        moe.router.selection_bias.copy_(torch.randn(6))
    x = torch.randn(3, 9, 16)
    y, load = moe(x)
    assert (y - _per_token_reference(moe, x)).abs().max() <= 1e-5
    assert load.shape == (6,) and int(load.sum()) == 3 * 9 * 2


def _expected_routing(x, weight, bias, top_k, scaling):
    """Sigmoid scores, top-k of score + bias, the chosen scores renormalised and scaled; sorted by expert."""
    scores = torch.sigmoid(x @ weight.T)
    chosen = torch.topk(scores + bias, top_k, dim=-1).indices.sort(dim=-1).values
    picked = scores.gather(-1, chosen)
    return picked / picked.sum(-1, keepdim=True) * scaling, chosen


def _sorted_by_expert(weights, indices):
    order = indices.argsort(dim=-1)
    return weights.gather(-1, order), indices.gather(-1, order)


def test_router_bias_steers_selection_but_not_weights():
    torch.manual_seed(4)
    router = SigmoidRouter(8, 5, 2, routed_scaling=2.5)
    x = torch.randn(20, 8)
    weight = router.weight.detach().clone()
    for bias in (torch.zeros(5), torch.tensor([0.0, 0.0, 0.0, 10.0, 0.0])):
        with torch.no_grad():
            router.selection_bias.copy_(bias)
        weights, indices = _sorted_by_expert(*router(x)[:2])
        expected_weights, expected_indices = _expected_routing(x, weight, bias, 2, 2.5)
        assert torch.equal(indices, expected_indices)
        torch.testing.assert_close(weights, expected_weights)
        torch.testing.assert_close(weights.sum(-1), torch.full((20,), 2.5))
    assert (indices == 3).any(dim=-1).all()                 # the bias made every token pick expert 3 ...
    plain = torch.sigmoid(x @ weight.T).gather(-1, indices)
    torch.testing.assert_close(weights, 2.5 * plain / plain.sum(-1, keepdim=True))  # ... weighted by score only
    router.update_bias(torch.tensor([0, 0, 0, 20, 20]), rate=0.5)
    torch.testing.assert_close(router.selection_bias, torch.tensor([0.5, 0.5, 0.5, 9.5, -0.5]))


def test_moe_gradients_reach_only_the_chosen_experts():
    torch.manual_seed(5)
    moe = MoE(16, 8, 2, 12, latent_size=8)
    x = torch.randn(1, 1, 16)
    y, load = moe(x)
    y.sum().backward()
    used = moe.experts.gate_proj.grad.flatten(1).abs().sum(-1) > 0
    assert torch.equal(used, load > 0) and int(used.sum()) == 2


def test_situ_activation_is_bounded_and_tends_to_silu():
    gate, up = torch.randn(1000) * 50, torch.randn(1000) * 50
    h = gated_activation(gate, up, "situ", (4.0, 25.0))
    assert h.abs().max() <= 100.0
    expected = 4 * torch.tanh(gate / 4) * torch.sigmoid(gate) * 25 * torch.tanh(up / 25)
    torch.testing.assert_close(h, expected)
    small_gate, small_up = torch.randn(100), torch.randn(100)
    large = gated_activation(small_gate, small_up, "situ", (1e4, 1e4))
    torch.testing.assert_close(large, F.silu(small_gate) * small_up, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="activation"):
        gated_activation(gate, up, "relu")


def test_moe_rejects_bad_configuration_and_input():
    with pytest.raises(ValueError, match="top_k"):
        MoE(16, 4, 5, 8)
    with pytest.raises(ValueError, match="num_shared_experts"):
        MoE(16, 4, 2, 8, num_shared_experts=-1)
    with pytest.raises(ValueError, match="hidden_size=16"):
        MoE(16, 4, 2, 8)(torch.randn(2, 3, 15))


# ----- MoE without host synchronisation -----------------------------------------------------------

def _experts_and_routing(num_tokens, num_experts, top_k, activation, seed=0, size=10, width=12):
    torch.manual_seed(seed)
    experts = _randomise(RoutedExperts(num_experts, size, width, activation=activation), seed=seed)
    router = SigmoidRouter(size, num_experts, top_k, routed_scaling=1.5)
    x = torch.randn(num_tokens, size, requires_grad=True)
    weights, indices, _ = router(x)
    return experts, router, x, weights, indices


def _output_and_gradients(method, experts, router, x, weights, indices):
    """The routed output, the load, and the gradients w.r.t. x, the router and every expert weight."""
    for tensor in [x, *experts.parameters(), *router.parameters()]:
        tensor.grad = None
    mixed, load = method(x, weights, indices)
    probe = torch.randn(mixed.shape, generator=torch.Generator().manual_seed(7))  # not a plain sum
    (mixed * probe).sum().backward(retain_graph=True)
    grads = [t.grad.clone() for t in [x, router.weight, experts.gate_proj, experts.up_proj, experts.down_proj]]
    return mixed, load, grads


@pytest.mark.parametrize("num_tokens, num_experts, top_k, activation", [
    (7, 6, 2, "situ"), (1, 8, 1, "silu"), (13, 5, 3, "situ"), (3, 16, 4, "silu"), (9, 4, 4, "situ")])
def test_all_experts_masked_equals_grouped_loop_with_gradients(num_tokens, num_experts, top_k, activation):
    experts, router, x, weights, indices = _experts_and_routing(num_tokens, num_experts, top_k, activation)
    grouped = _output_and_gradients(experts.forward_grouped, experts, router, x, weights, indices)
    masked = _output_and_gradients(experts.forward_all_experts, experts, router, x, weights, indices)
    torch.testing.assert_close(masked[0], grouped[0])
    assert masked[1].dtype == grouped[1].dtype and torch.equal(masked[1], grouped[1])
    for got, expected in zip(masked[2], grouped[2]):
        torch.testing.assert_close(got, expected)
    if num_tokens * top_k < num_experts:   # some experts received no token: their gradient is exactly zero
        idle = grouped[1] == 0
        assert idle.any() and (masked[2][2][idle] == 0).all() and (masked[2][4][idle] == 0).all()


def test_all_experts_masked_handles_no_tokens_repeats_and_overflow_of_unchosen_experts():
    experts, _, _, _, _ = _experts_and_routing(1, 4, 2, "silu")
    empty = torch.zeros(0, 10)
    mixed, load = experts.forward_all_experts(empty, torch.zeros(0, 2), torch.zeros(0, 2, dtype=torch.long))
    assert mixed.shape == (0, 10) and torch.equal(load, torch.zeros(4, dtype=torch.long))
    x = torch.randn(3, 10)
    repeated = torch.tensor([[1, 1], [0, 2], [3, 0]])       # an index tensor may name one expert twice
    weights = torch.rand(3, 2)
    for got, expected in zip(experts.forward_all_experts(x, weights, repeated),
                             experts.forward_grouped(x, weights, repeated)):
        torch.testing.assert_close(got, expected)
    with torch.no_grad():
        experts.gate_proj[3].fill_(1e30)                    # expert 3 overflows to inf on every token ...
        experts.up_proj[3].fill_(1e30)
    chosen = torch.tensor([[0, 1], [1, 2], [2, 0]])          # ... but no token chose it
    torch.testing.assert_close(experts.forward_all_experts(x, weights, chosen)[0],
                               experts.forward_grouped(x, weights, chosen)[0])


def test_moe_on_the_sync_free_path_equals_per_token_loop(monkeypatch):
    # The whole MoE (latent space, shared experts, selection bias) with the CUDA path forced on a CPU.
    monkeypatch.setattr(RoutedExperts, "forward", RoutedExperts.forward_all_experts)
    torch.manual_seed(3)
    moe = _randomise(MoE(16, 6, 2, 12, num_shared_experts=2, latent_size=8, routed_scaling=1.5))
    with torch.no_grad():
        moe.router.selection_bias.copy_(torch.randn(6))
    x = torch.randn(3, 7, 16)
    y, load = moe(x)
    torch.testing.assert_close(y, _per_token_reference(moe, x))
    assert int(load.sum()) == 3 * 7 * 2


def test_sync_free_path_has_no_data_dependent_shapes():
    # FakeTensorMode runs the ops on shapes alone and raises on any op whose output shape (or a Python
    # value) depends on the data: exactly the ops that would make the host wait for a GPU.
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException, FakeTensorMode

    with FakeTensorMode():
        experts = RoutedExperts(6, 10, 12)
        x, weights, indices = torch.randn(7, 10), torch.rand(7, 2), torch.randint(0, 6, (7, 2))
        mixed, load = experts.forward_all_experts(x, weights, indices)
        assert mixed.shape == (7, 10) and load.shape == (6,)
        with pytest.raises((DynamicOutputShapeException, DataDependentOutputException)):  # the check can fail
            experts.forward_grouped(x, weights, indices)
    function = ast.parse(textwrap.dedent(inspect.getsource(RoutedExperts.forward_all_experts))).body[0]
    function.body = function.body[1:]                     # the docstring names the ops it avoids
    code = ast.unparse(function)                          # comments dropped too
    for sync in (".item(", ".tolist(", "nonzero", "bincount", "int(", ".cpu(", "unique"):
        assert sync not in code, sync


def test_routed_experts_pick_the_sync_free_path_off_the_cpu():
    # On the meta device (no data at all, like CUDA it is not "cpu") the forward must still run.
    experts = RoutedExperts(6, 10, 12).to("meta")
    mixed, load = experts(torch.empty(5, 10, device="meta"), torch.empty(5, 2, device="meta"),
                          torch.empty(5, 2, dtype=torch.long, device="meta"))
    assert mixed.shape == (5, 10) and load.shape == (6,)
