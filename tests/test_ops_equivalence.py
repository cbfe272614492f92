"""The forms of every op agree: recurrent = chunked = a loop of step (= parallel for linear attention).

The recurrent loop is the definition; every faster form is checked against it in float32 at edge
shapes (T = 1, T not a multiple of the chunk, chunk = 1, chunk > T), with and without a starting
memory. Gradients are compared in float64, where the two forms differ only by rounding, so a
relative error of 1e-4 would reveal a wrong term rather than noise.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

MODULES = {
    "linear_attention": linear_attention,
    "delta_rule": delta_rule,
    "gated_delta_rule": gated_delta_rule,
    "kda": kda,
}
B, H, K, V = 1, 2, 8, 4
TS = (1, 7, 64, 65, 200, 1000)
CHUNK_SIZES = (1, 16, 32, 64, 128, 7, 48)   # the last two are not powers of two (KDA pads them)
TOL = 1e-5


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """These ops are thousands of tiny tensor operations; on a shared 2-core machine two intra-op
    threads mostly wait for each other (measured: 20x slower than one), so use one here."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_inputs(kind, T, *, seed=0, gate_low=-0.5, dtype=torch.float32, batch=B, heads=H):
    """Positional arguments of ``kind`` (q, k, v[, g][, beta]) plus a starting memory.

    q and k are L2-normalised as in the field's layers; log-gates are uniform in [gate_low, 0].
    """
    gen = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(batch, T, heads, K, generator=gen, dtype=dtype), dim=-1)
    k = F.normalize(torch.randn(batch, T, heads, K, generator=gen, dtype=dtype), dim=-1)
    v = torch.randn(batch, T, heads, V, generator=gen, dtype=dtype)
    beta = torch.rand(batch, T, heads, generator=gen, dtype=dtype)
    gate_shape = {"gated_delta_rule": (batch, T, heads), "kda": (batch, T, heads, K)}.get(kind)
    args = [q, k, v]
    if gate_shape is not None:
        args.append(gate_low * torch.rand(*gate_shape, generator=gen, dtype=dtype))
    if kind != "linear_attention":
        args.append(beta)
    state = torch.randn(batch, heads, K, V, generator=gen, dtype=dtype)
    return tuple(args), state


def step_loop(kind, args, state):
    """Feed the tokens one at a time through ``step``, as a decoder would."""
    if state is None:
        state = torch.zeros(args[0].shape[0], args[0].shape[2], K, V, dtype=args[0].dtype)
    outputs = []
    for t in range(args[0].shape[1]):
        o, state = MODULES[kind].step(*(x[:, t] for x in args), state=state)
        outputs.append(o)
    return torch.stack(outputs, dim=1), state


@functools.lru_cache(maxsize=None)
def reference(kind, T, with_state):
    """Recurrent result, computed once per (op, T, start) and shared by every chunk size."""
    args, state = make_inputs(kind, T)
    return MODULES[kind].recurrent(*args, initial_state=state if with_state else None)


def assert_close(actual, expected, what, tol=TOL):
    """max |difference| <= tol, measured in units of the reference's size when that exceeds 1.

    The delta-rule family keeps its memory O(1), so this is an absolute 1e-5 there. Plain linear
    attention piles up T outer products: at T = 1000 its state reaches ~30, where one float32
    rounding step (ulp) is already 2e-6, so only a relative 1e-5 is meaningful.
    """
    assert torch.isfinite(actual).all(), f"{what}: not finite"
    size = max(1.0, expected.float().abs().max().item())
    error = (actual.float() - expected.float()).abs().max().item() / size
    assert error <= tol, f"{what}: max |difference| / max(1, max |reference|) = {error:.3g} > {tol:g}"


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("T", TS)
@pytest.mark.parametrize("kind", MODULES)
def test_chunked_matches_recurrent_for_every_chunk_size(kind, T, with_state):
    args, state = make_inputs(kind, T)
    o_ref, s_ref = reference(kind, T, with_state)
    for chunk_size in CHUNK_SIZES:
        o, s = MODULES[kind].chunked(*args, chunk_size=chunk_size,
                                     initial_state=state if with_state else None)
        assert o.shape == o_ref.shape and s.shape == s_ref.shape
        assert_close(o, o_ref, f"output, chunk_size={chunk_size}")
        assert_close(s, s_ref, f"state, chunk_size={chunk_size}")


@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("T", (1, 7, 65, 200))
@pytest.mark.parametrize("kind", MODULES)
def test_loop_of_steps_matches_recurrent(kind, T, with_state):
    args, state = make_inputs(kind, T)
    o, s = step_loop(kind, args, state if with_state else None)
    o_ref, s_ref = reference(kind, T, with_state)
    assert_close(o, o_ref, "output")
    assert_close(s, s_ref, "state")


@pytest.mark.parametrize("T", TS)
def test_linear_attention_parallel_matches_recurrent(T):
    args, _ = make_inputs("linear_attention", T)
    o, s = linear_attention.parallel(*args)
    o_ref, s_ref = reference("linear_attention", T, False)
    assert_close(o, o_ref, "output")
    assert_close(s, s_ref, "state")


@pytest.mark.parametrize("T", (1, 7, 65, 200))
@pytest.mark.parametrize("feature_map,normalize", [(None, False), ("elu1", False), ("elu1", True)])
def test_linear_attention_parallel_matches_recurrent_with_features(T, feature_map, normalize):
    # normalize=True without a positive feature map is rejected (test_ops_validation.py).
    (q, k, v), _ = make_inputs("linear_attention", T)
    kwargs = dict(feature_map=feature_map, normalize=normalize)
    o, s = linear_attention.parallel(q, k, v, **kwargs)
    o_ref, s_ref = linear_attention.recurrent(q, k, v, **kwargs)
    assert_close(o, o_ref, "output")
    assert_close(s, s_ref, "state")


# ---------------------------------------------------------------------------------------------
# Gradients (float64: both forms are exact up to rounding, so 1e-4 catches any wrong term)
# ---------------------------------------------------------------------------------------------

def gradients(function, args, state, *, seed=1):
    """Gradients of a random linear function of (output, final state) w.r.t. every input."""
    leaves = [x.detach().clone().requires_grad_(True) for x in (*args, state)]
    o, s = function(*leaves[:-1], initial_state=leaves[-1])
    gen = torch.Generator().manual_seed(seed)
    loss = (o * torch.randn(o.shape, generator=gen, dtype=o.dtype)).sum() \
        + (s * torch.randn(s.shape, generator=gen, dtype=s.dtype)).sum()
    return torch.autograd.grad(loss, leaves)


ARG_NAMES = {
    "linear_attention": ("q", "k", "v"),
    "delta_rule": ("q", "k", "v", "beta"),
    "gated_delta_rule": ("q", "k", "v", "g", "beta"),
    "kda": ("q", "k", "v", "g", "beta"),
}


@pytest.mark.parametrize("T,chunk_size", [(37, 8), (64, 16), (37, 12)])
@pytest.mark.parametrize("kind", MODULES)
def test_chunked_gradients_match_recurrent_float64(kind, T, chunk_size):
    args, state = make_inputs(kind, T, dtype=torch.float64, gate_low=-2.0)
    module = MODULES[kind]
    chunked = functools.partial(module.chunked, chunk_size=chunk_size)
    grads = gradients(chunked, args, state)
    grads_ref = gradients(module.recurrent, args, state)
    for name, grad, grad_ref in zip((*ARG_NAMES[kind], "initial_state"), grads, grads_ref):
        relative = ((grad - grad_ref).norm() / grad_ref.norm()).item()
        assert relative <= 1e-4, f"d loss / d {name}: relative error {relative:.3g}"


# ---------------------------------------------------------------------------------------------
# Carrying the memory: any split of the sequence gives the same result as the whole
# ---------------------------------------------------------------------------------------------

def run_in_pieces(kind, args, cuts, state, *, chunk_size):
    """Process ``[0, c1), [c1, c2), ...`` one after another, passing the memory along."""
    bounds = [0, *cuts, args[0].shape[1]]
    outputs = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        piece = tuple(x[:, start:stop] for x in args)
        o, state = MODULES[kind].chunked(*piece, chunk_size=chunk_size, initial_state=state)
        outputs.append(o)
    return torch.cat(outputs, dim=1), state


@pytest.mark.parametrize("cuts", [(1,), (33,), (16, 17, 80), (99,)])
@pytest.mark.parametrize("kind", MODULES)
def test_split_anywhere_and_carry_state_equals_whole(kind, cuts):
    args, state = make_inputs(kind, 100, seed=3)
    o_whole, s_whole = MODULES[kind].chunked(*args, chunk_size=16, initial_state=state)
    o, s = run_in_pieces(kind, args, cuts, state, chunk_size=16)
    assert_close(o, o_whole, "output")
    assert_close(s, s_whole, "state")


@pytest.mark.parametrize("kind", MODULES)
def test_prefill_with_chunked_then_decode_with_step(kind):
    args, state = make_inputs(kind, 50, seed=4)
    o_ref, s_ref = MODULES[kind].recurrent(*args, initial_state=state)
    _, memory = MODULES[kind].chunked(*(x[:, :40] for x in args), chunk_size=16, initial_state=state)
    o_tail, s = step_loop(kind, tuple(x[:, 40:] for x in args), memory)
    assert_close(o_tail, o_ref[:, 40:], "decoded output")
    assert_close(s, s_ref, "state")


# ---------------------------------------------------------------------------------------------
# Numerics of strong decay: log-gates down to -20 per step over 4096 tokens
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_extreme_gates_are_finite_and_equal_to_recurrent(kind):
    args, state = make_inputs(kind, 4096, seed=5, gate_low=-20.0, batch=1, heads=1)
    o_ref, s_ref = MODULES[kind].recurrent(*args, initial_state=state)
    for chunk_size in (64, 128):
        o, s = MODULES[kind].chunked(*args, chunk_size=chunk_size, initial_state=state)
        assert_close(o, o_ref, f"output, chunk_size={chunk_size}")
        assert_close(s, s_ref, f"state, chunk_size={chunk_size}")


@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_extreme_gates_give_finite_gradients(kind):
    args, state = make_inputs(kind, 256, seed=6, gate_low=-20.0, batch=1, heads=1)
    grads = gradients(functools.partial(MODULES[kind].chunked, chunk_size=64), args, state)
    for name, grad in zip((*ARG_NAMES[kind], "initial_state"), grads):
        assert torch.isfinite(grad).all(), f"d loss / d {name} is not finite"


# ---------------------------------------------------------------------------------------------
# Dtypes
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", MODULES)
def test_output_keeps_input_dtype_and_state_is_float32(kind):
    args, state = make_inputs(kind, 20, seed=7)
    low = tuple(x.to(torch.bfloat16) for x in args)
    for form in ("recurrent", "chunked"):
        o, s = getattr(MODULES[kind], form)(*low, initial_state=state)
        assert o.dtype == torch.bfloat16 and s.dtype == torch.float32, form
    o, s = MODULES[kind].step(*(x[:, 0] for x in low), state=state)
    assert o.dtype == torch.bfloat16 and s.dtype == torch.float32
