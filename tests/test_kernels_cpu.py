"""Triton kernels run through the interpreter on CPU, float32, checked against the ops `recurrent`.

Tiny shapes (the interpreter costs milliseconds per tile operation): T = 1, T not a multiple of the
64-token chunk, several chunks, log-gates down to -20 per step. Each case checks the output, the final
state and the gradients of every input from one call (the all-Triton backward, chunk_bwd_triton.py).
"""

import pytest
import torch

from k3lite import kernels  # first: it switches on the Triton interpreter before triton is imported

pytest.importorskip("triton")
if torch.cuda.is_available():  # the GPU file covers CUDA machines
    pytest.skip("interpreter tests run only without CUDA", allow_module_level=True)

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention  # noqa: E402

B, H, K, V = 1, 2, 16, 32
OPS = {"linear_attention": linear_attention, "delta_rule": delta_rule,
       "gated_delta_rule": gated_delta_rule, "kda": kda}


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def make_inputs(kind, T, gate_min, seed, batch=B):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(batch, T, H, K, generator=gen), dim=-1)
    v = torch.randn(batch, T, H, V, generator=gen)
    beta = torch.rand(batch, T, H, generator=gen) if kind != "linear_attention" else None
    g = None
    if kind == "gated_delta_rule":
        g = gate_min * torch.rand(batch, T, H, generator=gen)
    if kind == "kda":
        g = gate_min * torch.rand(batch, T, H, K, generator=gen)
    h0 = torch.randn(batch, H, K, V, generator=gen)
    return q, k, v, g, beta, h0


def call(kind, fn_name, q, k, v, g, beta, **kw):
    fn = getattr(OPS[kind], fn_name)
    args = [q, k, v] + ([g] if g is not None else []) + ([beta] if beta is not None else [])
    return fn(*args, **kw)


CASES = [("linear_attention", 1, 0.0), ("linear_attention", 130, 0.0),
         ("delta_rule", 1, 0.0), ("delta_rule", 70, 0.0), ("delta_rule", 128, 0.0),
         ("gated_delta_rule", 1, -1.0), ("gated_delta_rule", 70, -1.0), ("gated_delta_rule", 130, -20.0),
         ("kda", 1, -1.0), ("kda", 70, -1.0), ("kda", 130, -20.0)]


@pytest.mark.parametrize("kind,T,gate_min", CASES)
def test_chunked_matches_recurrent(kind, T, gate_min):
    torch.manual_seed(0)
    inputs = make_inputs(kind, T, gate_min, seed=T, batch=2 if T == 70 else 1)  # batch 2 once per kind
    leaves = [x.clone().requires_grad_(True) if x is not None else None for x in inputs]
    q, k, v, g, beta, h0 = leaves
    o, state = call(kind, "chunked", q, k, v, g, beta, initial_state=h0, backend="triton")
    assert o.dtype == torch.float32 and state.dtype == torch.float32
    ref_leaves = [x.detach().double().requires_grad_(True) if x is not None else None for x in inputs]
    rq, rk, rv, rg, rb, rh0 = ref_leaves
    o_ref, state_ref = call(kind, "recurrent", rq, rk, rv, rg, rb, initial_state=rh0)
    assert rel_err(o, o_ref) < 1e-5
    assert rel_err(state, state_ref) < 1e-5
    d_o = torch.randn_like(o)
    d_state = torch.randn_like(state)
    torch.autograd.backward([o, state], [d_o, d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.double(), d_state.double()])
    for name, x, ref in zip("q k v g beta h0".split(), leaves, ref_leaves):
        if x is None:
            continue
        assert torch.isfinite(x.grad).all(), name
        assert rel_err(x.grad, ref.grad) < 1e-4, name


@pytest.mark.parametrize("kind", list(OPS))
def test_step_matches_recurrent_one_token(kind):
    q, k, v, g, beta, h0 = make_inputs(kind, 1, -3.0, seed=7, batch=3)
    sq = lambda x: x[:, 0] if x is not None else None  # noqa: E731
    o, new_state = call(kind, "step", sq(q), sq(k), sq(v), sq(g), sq(beta), state=h0, backend="triton")
    o_ref, state_ref = call(kind, "recurrent", q.double(), k.double(), v.double(),
                            g.double() if g is not None else None, beta.double() if beta is not None else None,
                            initial_state=h0.double())
    assert rel_err(o, o_ref[:, 0]) < 1e-6
    assert rel_err(new_state, state_ref) < 1e-6
    assert torch.equal(h0, make_inputs(kind, 1, -3.0, seed=7, batch=3)[-1])  # the input state is untouched


def test_head_dims_below_one_tile():
    # K = 8 and V = 12 are padded up to 16-wide tiles inside the kernels; gradients included.
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 20, 1, 8, generator=gen), torch.randn(1, 20, 1, 8, generator=gen)
    v, g = torch.randn(1, 20, 1, 12, generator=gen), -torch.rand(1, 20, 1, 8, generator=gen)
    beta = torch.rand(1, 20, 1, generator=gen)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
    o, s = kda.chunked(*leaves, backend="triton")
    refs = [x.double().requires_grad_(True) for x in (q, k, v, g, beta)]
    o_ref, s_ref = kda.recurrent(*refs)
    assert rel_err(o, o_ref) < 1e-5 and rel_err(s, s_ref) < 1e-5
    d_o = torch.randn(o.shape, generator=gen)
    o.backward(d_o)
    o_ref.backward(d_o.double())
    for name, x, ref in zip("q k v g beta".split(), leaves, refs):
        assert rel_err(x.grad, ref.grad) < 1e-4, name


@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_gradients_with_several_key_and_value_blocks(kind):
    # K = 72 and V = 80 span two 64-wide key/value blocks in the backward kernels, the second one partial.
    gen = torch.Generator().manual_seed(4)
    T, K, V = 70, 72, 80
    q = torch.randn(1, T, 1, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(1, T, 1, K, generator=gen), dim=-1)
    v = torch.randn(1, T, 1, V, generator=gen)
    g = -3 * torch.rand(1, T, 1, K, generator=gen) if kind == "kda" else -3 * torch.rand(1, T, 1, generator=gen)
    beta, h0 = torch.rand(1, T, 1, generator=gen), torch.randn(1, 1, K, V, generator=gen)
    leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta, h0)]
    o, s = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    refs = [x.double().requires_grad_(True) for x in (q, k, v, g, beta, h0)]
    o_ref, s_ref = call(kind, "recurrent", *refs[:5], initial_state=refs[5])
    d_o, d_s = torch.randn(o.shape, generator=gen), torch.randn(s.shape, generator=gen)
    torch.autograd.backward([o, s], [d_o, d_s])
    torch.autograd.backward([o_ref, s_ref], [d_o.double(), d_s.double()])
    for name, x, ref in zip("q k v g beta h0".split(), leaves, refs):
        assert rel_err(x.grad, ref.grad) < 1e-4, name


@pytest.mark.parametrize("kind,K", [("kda", 24), ("delta_rule", 24), ("delta_rule", 72)])
def test_odd_head_count_and_partial_key_block(kind, K):
    # Three heads: KDA's diagonal-rows kernel takes heads in groups (DIAGONAL_HEADS), so the last group is
    # partial. K = 24 and 72 leave the key tiles partly masked, including the second half of the ungated
    # reverse state pass. Batch 2, so tokens of the second sequence are indexed from the flat B*T grid.
    gen = torch.Generator().manual_seed(5)
    batch, T, heads, V = 2, 70, 3, 20
    q = torch.randn(batch, T, heads, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(batch, T, heads, K, generator=gen), dim=-1)
    v = torch.randn(batch, T, heads, V, generator=gen)
    g = -4 * torch.rand(batch, T, heads, K, generator=gen) if kind == "kda" else None
    beta = torch.rand(batch, T, heads, generator=gen)
    inputs = [x for x in (q, k, v, g, beta) if x is not None]
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    o, s = OPS[kind].chunked(*leaves, backend="triton")
    refs = [x.double().requires_grad_(True) for x in inputs]
    o_ref, s_ref = OPS[kind].recurrent(*refs)
    assert rel_err(o, o_ref) < 1e-5 and rel_err(s, s_ref) < 1e-5
    d_o, d_s = torch.randn(o.shape, generator=gen), torch.randn(s.shape, generator=gen)
    torch.autograd.backward([o, s], [d_o, d_s])
    torch.autograd.backward([o_ref, s_ref], [d_o.double(), d_s.double()])
    for x, ref in zip(leaves, refs):
        assert rel_err(x.grad, ref.grad) < 1e-4


def test_hybrid_backward_agrees_with_triton_backward():
    # The hybrid (Triton state pass + PyTorch autograd) path stays selectable; only the output is used
    # and there is no initial state, so d_state arrives as zeros and no state gradient is asked for.
    q, k, v, g, beta, _ = make_inputs("kda", 40, -2.0, seed=11)
    grads = {}
    for backward in ("triton", "hybrid"):
        leaves = [x.clone().requires_grad_(True) for x in (q, k, v, g, beta)]
        o, _ = kernels.chunked("kda", *leaves, scale=K ** -0.5, backward=backward)
        (o * torch.linspace(-1, 1, V)).sum().backward()
        grads[backward] = [x.grad for x in leaves]
    for name, a, b in zip("q k v g beta".split(), grads["triton"], grads["hybrid"]):
        assert rel_err(a, b) < 1e-5, name
    with pytest.raises(ValueError, match="backward"):
        kernels.chunked("kda", q, k, v, g, beta, scale=0.25, backward="torch")


def test_interpreter_refuses_half_precision():
    q = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        kernels.chunked("linear_attention", q, q, q, scale=0.25)
    with pytest.raises(ValueError, match="float32"):
        kernels.situ_glu(q, q)


def test_interpreter_works_when_triton_was_imported_first():
    # torch.utils.flop_counter imports triton in compiled mode; the kernels must still interpret.
    import subprocess
    import sys

    code = ("import torch.utils.flop_counter, sys; assert 'triton' in sys.modules; "
            "import torch; from k3lite import kernels; q = torch.randn(1, 3, 1, 16); "
            "o, s = kernels.chunked('linear_attention', q, q, q, scale=1.0); x = q[0, :, 0]; "
            "print(float((o[0, :, 0] - (x @ x.T).tril() @ x).abs().max()))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert float(result.stdout.strip().splitlines()[-1]) < 1e-4


def test_unknown_kind_is_rejected():
    q = torch.randn(1, 4, 1, 16)
    with pytest.raises(ValueError, match="kind"):
        kernels.chunked("softmax", q, q, q, scale=0.25)


def test_situ_kernel_forward_and_backward():
    from k3lite.ops.situ import situ_glu

    gen = torch.Generator().manual_seed(0)
    gate = (6 * torch.randn(3, 1000, generator=gen)).requires_grad_(True)
    up = (40 * torch.randn(3, 1000, generator=gen)).requires_grad_(True)
    h = situ_glu(gate, up, backend="triton")
    g64, u64 = gate.detach().double().requires_grad_(True), up.detach().double().requires_grad_(True)
    h_ref = situ_glu(g64, u64, backend="torch")
    assert rel_err(h, h_ref) < 1e-6
    dh = torch.randn_like(h)
    h.backward(dh)
    h_ref.backward(dh.double())
    assert rel_err(gate.grad, g64.grad) < 1e-5
    assert rel_err(up.grad, u64.grad) < 1e-5


def test_silu_and_mul_kernel():
    gen = torch.Generator().manual_seed(1)
    gate = torch.randn(5000, generator=gen).requires_grad_(True)
    up = torch.randn(5000, generator=gen).requires_grad_(True)
    out = kernels.silu_and_mul(gate, up)
    g64, u64 = gate.detach().double().requires_grad_(True), up.detach().double().requires_grad_(True)
    ref = torch.nn.functional.silu(g64) * u64
    assert rel_err(out, ref) < 1e-6
    dh = torch.randn(5000, generator=gen)
    out.backward(dh)
    ref.backward(dh.double())
    assert rel_err(gate.grad, g64.grad) < 1e-5 and rel_err(up.grad, u64.grad) < 1e-5
