"""Triton kernels on a CUDA GPU in bf16 and fp16 at realistic shapes, against the float32 `recurrent`.

Tolerances are the field's, as relative RMS error (||x - ref|| / ||ref||): output and state 5e-3,
dq/dk/dv 8e-3, dg/dbeta 2e-2. float32 inputs must do much better (exact, non-TF32 products): 1e-4.
Skipped without CUDA.
"""

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
pytest.importorskip("triton")

import torch.nn.functional as F

from k3lite import kernels
from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention
from k3lite.ops.situ import situ_glu

OPS = {"linear_attention": linear_attention, "delta_rule": delta_rule,
       "gated_delta_rule": gated_delta_rule, "kda": kda}
H, D = 4, 128
TOL = {"o": 5e-3, "state": 5e-3, "q": 8e-3, "k": 8e-3, "v": 8e-3, "g": 2e-2, "beta": 2e-2, "h0": 8e-3}


def rel_err(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def make_inputs(kind, B, T, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, device="cuda", generator=gen)  # noqa: E731
    q = rnd(B, T, H, D)
    k = F.normalize(rnd(B, T, H, D), dim=-1)
    v = rnd(B, T, H, D)
    beta = torch.sigmoid(rnd(B, T, H)) if kind != "linear_attention" else None
    g = None
    if kind == "gated_delta_rule":
        g = F.logsigmoid(rnd(B, T, H) + 4.0)
    if kind == "kda":
        g = -5.0 * torch.sigmoid(rnd(B, T, H, D) - 2.0)   # K3's bounded gate, in [-5, 0]
    h0 = 0.1 * rnd(B, H, D, D)
    cast = lambda x: x.to(dtype) if x is not None else None  # noqa: E731
    return cast(q), cast(k), cast(v), cast(g), cast(beta), h0


def call(kind, fn_name, q, k, v, g, beta, **kw):
    args = [q, k, v] + ([g] if g is not None else []) + ([beta] if beta is not None else [])
    return getattr(OPS[kind], fn_name)(*args, **kw)


@pytest.mark.parametrize("T,dtype", [(1, torch.bfloat16), (1, torch.float16), (1000, torch.bfloat16),
                                     (1000, torch.float16), (2100, torch.bfloat16)])
@pytest.mark.parametrize("kind", list(OPS))
def test_chunked_against_float32_recurrent(kind, T, dtype):
    B = 2
    inputs = make_inputs(kind, B, T, dtype, seed=T)
    leaves = [x.clone().requires_grad_(True) if x is not None else None for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    assert o.dtype == dtype and state.dtype == torch.float32
    refs = [x.detach().float().requires_grad_(True) if x is not None else None for x in inputs]
    o_ref, state_ref = call(kind, "recurrent", *refs[:5], initial_state=refs[5])
    errors = {"o": rel_err(o, o_ref), "state": rel_err(state, state_ref)}
    d_o = torch.randn_like(o_ref)
    d_state = torch.randn_like(state_ref) * 0.1
    torch.autograd.backward([o, state], [d_o.to(dtype), d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.to(dtype).float(), d_state])
    for name, x, ref in zip(["q", "k", "v", "g", "beta", "h0"], leaves, refs):
        if x is not None:
            errors[name] = rel_err(x.grad, ref.grad)
    bad = {n: f"{e:.2e}" for n, e in errors.items() if not e <= TOL[n]}
    assert not bad, f"relative RMS errors over tolerance: {bad} (all: { {n: f'{e:.1e}' for n, e in errors.items()} })"


@pytest.mark.parametrize("kind", ["delta_rule", "kda"])
def test_float32_inputs_get_exact_products(kind):
    # float32 inputs run every tl.dot with input_precision="ieee"; TF32 products would leave errors
    # around 1e-3, two orders of magnitude above this tolerance.
    inputs = make_inputs(kind, 2, 1000, torch.float32, seed=3)
    leaves = [x.clone().requires_grad_(True) if x is not None else None for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    refs = [x.detach().double().requires_grad_(True) if x is not None else None for x in inputs]
    o_ref, state_ref = call(kind, "recurrent", *refs[:5], initial_state=refs[5])
    errors = {"o": rel_err(o, o_ref), "state": rel_err(state, state_ref)}
    d_o, d_state = torch.randn_like(o), torch.randn_like(state)
    torch.autograd.backward([o, state], [d_o, d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.double(), d_state.double()])
    for name, x, ref in zip(["q", "k", "v", "g", "beta", "h0"], leaves, refs):
        if x is not None:
            errors[name] = rel_err(x.grad, ref.grad)
    bad = {n: f"{e:.2e}" for n, e in errors.items() if not e <= 1e-4}
    assert not bad, f"float32 relative errors over 1e-4: {bad}"


@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_mixed_dtypes_as_kda_layer_makes_them(kind):
    # KDALayer under bf16 autocast hands the op bf16 q, k, v with float32 g and beta (and a float32 state).
    q, k, v, g, beta, h0 = make_inputs(kind, 2, 1000, torch.float32, seed=6)
    inputs = [q.bfloat16(), k.bfloat16(), v.bfloat16(), g, beta, h0]
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    assert o.dtype == torch.bfloat16 and state.dtype == torch.float32
    refs = [x.detach().float().requires_grad_(True) for x in inputs]
    o_ref, state_ref = call(kind, "recurrent", *refs[:5], initial_state=refs[5])
    errors = {"o": rel_err(o, o_ref), "state": rel_err(state, state_ref)}
    d_o = torch.randn_like(o_ref)
    torch.autograd.backward([o, state], [d_o.bfloat16(), 0.1 * torch.ones_like(state)])
    torch.autograd.backward([o_ref, state_ref], [d_o.bfloat16().float(), 0.1 * torch.ones_like(state_ref)])
    for name, x, ref in zip(["q", "k", "v", "g", "beta", "h0"], leaves, refs):
        assert x.grad.dtype == x.dtype, name
        errors[name] = rel_err(x.grad, ref.grad)
    bad = {n: f"{e:.2e}" for n, e in errors.items() if not e <= TOL[n]}
    assert not bad, f"relative RMS errors over tolerance: {bad}"
    sq = lambda x: x[:, 0]  # noqa: E731
    o1, s1 = call(kind, "step", *(sq(x) for x in inputs[:5]), state=h0, backend="triton")
    o1_ref, s1_ref = call(kind, "recurrent", *(x[:, :1].float() for x in inputs[:5]), initial_state=h0)
    assert o1.dtype == torch.bfloat16 and rel_err(o1, o1_ref[:, 0]) < 5e-3 and rel_err(s1, s1_ref) < 1e-5


SPIKES = [(kind, spike) for kind in ("gated_delta_rule", "kda") for spike in (-1e4, -1e6, float("-inf"))]


@pytest.mark.parametrize("kind,spike", SPIKES)
def test_gate_spike_before_gentle_gates_float32(kind, spike):
    # One huge (or -inf) gate, then gentle ones: its running sum must not swamp the gentle gates after it.
    q, k, v, g, beta, h0 = make_inputs(kind, 2, 300, torch.float32, seed=7)
    g = torch.full_like(g, -0.001)
    g[:, [5, 70, 200]] = spike
    inputs = [q, k, v, g, beta, h0]
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    refs = [x.detach().double().requires_grad_(True) for x in inputs]
    o_ref, state_ref = call(kind, "recurrent", *refs[:5], initial_state=refs[5])
    errors = {"o": rel_err(o, o_ref), "state": rel_err(state, state_ref)}
    d_o, d_state = torch.randn_like(o), torch.randn_like(state)
    torch.autograd.backward([o, state], [d_o, d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.double(), d_state.double()])
    for name, x, ref in zip(["q", "k", "v", "g", "beta", "h0"], leaves, refs):
        assert torch.isfinite(x.grad).all(), name
        errors[name] = rel_err(x.grad, ref.grad)
    bad = {n: f"{e:.2e}" for n, e in errors.items() if not e <= 1e-5}
    assert not bad, f"float32 relative errors over 1e-5: {bad}"


@pytest.mark.parametrize("spike", [-1e4, float("-inf")])
def test_gate_spike_in_bf16_keeps_the_low_part_where_it_counts(spike, monkeypatch):
    # bf16 q/k/v with float32 gates (as KDALayer makes them): stage 1 keeps G_lo only where |G| >= 256
    # (chunk_fwd.gate_lo_from). The spike's sums pass 256, so the gentle gates after it keep their digits; the rest
    # drop G_lo, which may move an exponent by 2^-16, far below bf16's rounding. Against G_lo kept everywhere the
    # output must be the same to well within bf16's tolerance, and both within it of the float64 recurrence.
    from k3lite.kernels import chunk_fwd

    # The spikes put G_lo in chunks 0, 1, 3 and 4: the USE_LO launches' first group of chunks (LO_GROUP = 4) holds
    # one without it, the second group starts with one.
    q, k, v, g, beta, h0 = make_inputs("kda", 2, 300, torch.bfloat16, seed=7)
    g = torch.full(g.shape, -0.001, device="cuda")
    g[:, [5, 70, 200, 260]] = spike
    o_rule = kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")[0]
    monkeypatch.setattr(chunk_fwd, "gate_lo_from", lambda kind, dtype: 0.0)
    o_all = kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")[0]
    o_ref = kda.recurrent(*(x.double() for x in (q, k, v, g, beta)), initial_state=h0.double())[0]
    assert rel_err(o_rule, o_all) < 1e-3
    assert rel_err(o_rule, o_ref) < TOL["o"] and rel_err(o_all, o_ref) < TOL["o"]


def _same_weights(make, backend):
    torch.manual_seed(0)
    return make(backend).cuda()


@pytest.mark.parametrize("autocast", [False, True])
def test_kda_layer_triton_backend_against_torch_backend(autocast):
    from k3lite.layers.kda_layer import KDALayer

    make = lambda backend: KDALayer(256, 2, 128, backend=backend)  # noqa: E731
    x = torch.randn(2, 200, 256, device="cuda")
    outputs, grads = {}, {}
    for backend in ("triton", "torch"):
        layer = _same_weights(make, backend)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            y, cache = layer(x)
        y.float().square().mean().backward()
        outputs[backend], grads[backend] = (y.float(), cache.recurrent_state), {
            n: p.grad for n, p in layer.named_parameters() if p.grad is not None}
    tol = 2e-2 if autocast else 1e-4
    assert rel_err(outputs["triton"][0], outputs["torch"][0]) < tol
    assert rel_err(outputs["triton"][1], outputs["torch"][1]) < tol
    assert grads["triton"].keys() == grads["torch"].keys()
    bad = {n: rel_err(g, grads["torch"][n]) for n, g in grads["triton"].items()
           if not rel_err(g, grads["torch"][n]) < 2 * tol}
    assert not bad, bad


def test_k3_triton_backend_against_torch_backend_and_generate():
    from k3lite.models.k3 import K3, K3Config

    idx = torch.randint(0, K3Config.tiny().vocab_size, (2, 100), device="cuda")
    logits, grads = {}, {}
    for backend in ("triton", "torch"):
        torch.manual_seed(0)
        model = K3(K3Config.tiny(backend=backend, init_std=0.1)).cuda()
        out = model(idx)
        out.float().logsumexp(-1).mean().backward()
        logits[backend] = out.float()
        grads[backend] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        if backend == "triton":
            tokens = model.generate(idx[:, :20], 8, temperature=0)
            tokens_uncached = model.generate(idx[:, :20], 8, temperature=0, use_cache=False)
            assert torch.equal(tokens, tokens_uncached)
    assert rel_err(logits["triton"], logits["torch"]) < 1e-4
    bad = {n: rel_err(g, grads["torch"][n]) for n, g in grads["triton"].items()
           if not rel_err(g, grads["torch"][n]) < 1e-3}
    assert not bad, bad


def test_ops_api_never_synchronises_the_host():
    # The value checks are device-side asserts on CUDA: "error" makes any synchronising call raise.
    q, k, v, g, beta, h0 = make_inputs("kda", 2, 300, torch.bfloat16, seed=8)
    sq = lambda x: x[:, 0]  # noqa: E731
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")
        kda.step(sq(q), sq(k), sq(v), sq(g), sq(beta), state=h0.clone(), backend="triton", inplace=True)
        gated_delta_rule.step(sq(q), sq(k), sq(v), sq(g)[..., 0], sq(beta), state=h0, backend="triton")
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _good_then_bad_call(op, call, heads, bad, *, setup="", kwargs=""):
    """Code for a fresh Python: ``k3lite.ops.<op>.<call>`` on CUDA with good values, then 'good call passed'
    printed, then the same call with ``bad`` ("g", "g_nan", "beta", "beta_nan"; for beta only the last head of the
    last token is bad). ``heads``: the leading axes of beta, x is ``heads + (16,)``, g like beta (one gate per
    head) or like x (KDA)."""
    gate_shape = {"kda": heads + (16,), "gated_delta_rule": heads}.get(op)

    def one_call(g_value, beta):
        gate = f", torch.full({gate_shape}, {g_value}, device='cuda')" if gate_shape else ""
        return f"m.{call}(x, x, x{gate}, {beta}{kwargs}, backend='triton'); torch.cuda.synchronize()"

    bad_g = {"g": "0.5", "g_nan": "float('nan')"}.get(bad, "-0.1")
    bad_beta = {"beta": "2.5", "beta_nan": "float('nan')"}.get(bad, "0.5")
    return (f"import torch; from k3lite.ops import {op} as m; x = torch.randn({heads + (16,)}, device='cuda'); {setup}"
            f"good_beta = torch.full({heads}, 0.5, device='cuda'); b = good_beta.clone(); b.view(-1)[-1] = {bad_beta}; "
            f"{one_call('-0.1', 'good_beta')}; print('good call passed', flush=True); {one_call(bad_g, 'b')}")


def _assert_fails_after_a_good_call(code, bad):
    """Run ``code`` (from _good_then_bad_call) in its own Python process (a failed device-side assert leaves the
    CUDA context unusable): it must print 'good call passed', then fail with a report naming the bad argument."""
    import subprocess
    import sys

    named = "beta must lie in [0, 2]" if bad.startswith("beta") else "g is a log-space decay"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    report = result.stdout + result.stderr   # the device prints the assert's message; the host raises
    assert "good call passed" in result.stdout, report[-2000:]
    assert result.returncode != 0 and named in report, report[-2000:]


@pytest.mark.parametrize("op,bad", [("kda", "g"), ("kda", "g_nan"), ("kda", "beta"), ("gated_delta_rule", "g"),
                                    ("gated_delta_rule", "beta_nan"), ("delta_rule", "beta")])
def test_bad_value_in_chunked_fails_the_process_with_its_message(op, bad):
    # The chunked pipeline checks g in its stage 1 and beta in its stage 4, as it reads them: one flag, one assert,
    # no extra pass. A failed device-side assert leaves the CUDA context unusable, so this runs in its own process;
    # a good call must pass first. Where the error surfaces is up to CUDA: the assert is sticky, so a launch later
    # in the same call may report it before the call returns (seen on the H200). That the call never waits for
    # the GPU is test_ops_api_never_synchronises_the_host's to show; here: the process fails, naming the argument.
    # 70 tokens: the bad beta sits in the last, partial chunk.
    _assert_fails_after_a_good_call(_good_then_bad_call(op, "chunked", (1, 70, 2), bad), bad)


@pytest.mark.parametrize("op,bad", [("kda", "g"), ("kda", "g_nan"), ("kda", "beta"),
                                    ("gated_delta_rule", "g"), ("delta_rule", "beta")])
def test_bad_value_in_decode_step_fails_the_process_with_its_message(op, bad):
    # The fused step checks g and beta inside its kernel, with a device assert. A bad value must end the process
    # with a message naming it, and a good call before it must pass. For the gated kinds one message names both
    # g and beta (the assert does not say which of them was out of range); for DeltaNet it names beta.
    code = _good_then_bad_call(op, "step", (2, 4), bad, setup="s = torch.zeros(2, 4, 16, 16, device='cuda'); ",
                               kwargs=", state=s")
    _assert_fails_after_a_good_call(code, bad)


@pytest.mark.parametrize("kind", list(OPS))
def test_step_against_recurrent(kind):
    q, k, v, g, beta, h0 = make_inputs(kind, 64, 1, torch.bfloat16, seed=5)
    sq = lambda x: x[:, 0] if x is not None else None  # noqa: E731
    o, state = call(kind, "step", sq(q), sq(k), sq(v), sq(g), sq(beta), state=h0, backend="triton")
    refs = [x.float() if x is not None else None for x in (q, k, v, g, beta)]
    o_ref, state_ref = call(kind, "recurrent", *refs, initial_state=h0)
    assert rel_err(o, o_ref[:, 0]) < 5e-3
    assert rel_err(state, state_ref) < 1e-5
    if kind == "kda":   # in place: the same numbers, written into the given state
        in_place = h0.clone()
        o2, state2 = kda.step(sq(q), sq(k), sq(v), sq(g), sq(beta), state=in_place, backend="triton", inplace=True)
        assert state2.data_ptr() == in_place.data_ptr() and torch.equal(state2, state) and torch.equal(o2, o)


def test_extreme_gates_stay_finite():
    q, k, v, _, beta, h0 = make_inputs("kda", 1, 300, torch.bfloat16, seed=9)
    g = (-20.0 * torch.rand(1, 300, H, D, device="cuda")).to(torch.bfloat16)
    o, state = kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")
    o_ref, state_ref = kda.recurrent(q.float(), k.float(), v.float(), g.float(), beta.float(), initial_state=h0)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    assert rel_err(o, o_ref) < 5e-3 and rel_err(state, state_ref) < 5e-3


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_situ_glu_fused(dtype):
    gate = (3 * torch.randn(1024, 3072, device="cuda")).to(dtype).requires_grad_(True)
    up = (10 * torch.randn(1024, 3072, device="cuda")).to(dtype).requires_grad_(True)
    h = situ_glu(gate, up, backend="triton")
    g32, u32 = gate.detach().float().requires_grad_(True), up.detach().float().requires_grad_(True)
    h_ref = situ_glu(g32, u32, backend="torch")
    assert rel_err(h, h_ref) < 5e-3
    dh = torch.randn_like(h_ref)
    h.backward(dh.to(dtype))
    h_ref.backward(dh.to(dtype).float())
    assert rel_err(gate.grad, g32.grad) < 8e-3 and rel_err(up.grad, u32.grad) < 8e-3


def test_silu_and_mul_kernel():
    gate, up = torch.randn(4096, 1024, device="cuda"), torch.randn(4096, 1024, device="cuda")
    assert rel_err(kernels.silu_and_mul(gate, up), F.silu(gate) * up) < 1e-5


def test_situ_glu_float32_takes_the_exact_path():
    # The approximate tanh/reciprocal path is for 16-bit tensors only; float32 must stay IEEE-accurate.
    gate, up = 3 * torch.randn(4096, 1024, device="cuda"), 10 * torch.randn(4096, 1024, device="cuda")
    assert rel_err(situ_glu(gate, up, backend="triton"), situ_glu(gate, up, backend="torch")) < 1e-5


def _forward_backward(kind, inputs):
    leaves = [x.clone().requires_grad_(True) if x is not None else None for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    (o.float().square().mean() + state.square().mean()).backward()
    return [o, state] + [x.grad for x in leaves if x is not None]


@pytest.mark.parametrize("kind", list(OPS))
def test_cached_launch_gives_the_numbers_of_tritons_dispatch(kind, monkeypatch):
    # k3lite.kernels._launch: a call like an earlier one launches the compiled kernel directly. Every output and
    # gradient must be bit for bit what Triton's own dispatch gives, and the shortcut must have been taken.
    from k3lite.kernels import chunk_bwd_triton, chunk_fwd, recurrent_step

    inputs = make_inputs(kind, 2, 300, torch.bfloat16, seed=21)
    from k3lite.kernels import _launch

    monkeypatch.setattr(_launch, "ENABLED", False)
    through_triton = _forward_backward(kind, inputs)
    monkeypatch.setattr(_launch, "ENABLED", True)
    for stage in (chunk_fwd._state_pass, chunk_fwd._chunk_output, chunk_bwd_triton._bwd_state_grads):
        stage.launchers.clear()
    _forward_backward(kind, inputs)   # compiles or finds each kernel through Triton and keeps its launcher
    direct = _forward_backward(kind, inputs)
    assert all(len(stage.launchers) > 0 for stage in (chunk_fwd._state_pass, chunk_fwd._chunk_output,
                                                      chunk_bwd_triton._bwd_state_grads))
    for x, y in zip(direct, through_triton):
        assert torch.equal(x, y)
    q, k, v, g, beta, h0 = make_inputs(kind, 64, 1, torch.bfloat16, seed=22)
    sq = lambda x: x[:, 0] if x is not None else None  # noqa: E731
    steps = []
    for enabled in (False, True, True):
        monkeypatch.setattr(_launch, "ENABLED", enabled)
        steps.append(call(kind, "step", sq(q), sq(k), sq(v), sq(g), sq(beta), state=h0, backend="triton"))
    assert len(recurrent_step._decode_step.launchers) > 0
    assert all(torch.equal(a, b) for a, b in zip(steps[0], steps[2]))


def test_cached_launch_sends_a_tensor_off_16_bytes_through_tritons_dispatch(monkeypatch):
    # A kernel compiled for aligned pointers may assume them; a q that starts 2 bytes into its storage must get a
    # kernel compiled for it, and the same numbers (to bf16 rounding) as an aligned copy.
    from k3lite.kernels import _launch, chunk_fwd

    monkeypatch.setattr(_launch, "ENABLED", True)

    q, k, v, g, beta, h0 = make_inputs("kda", 2, 300, torch.bfloat16, seed=23)
    aligned = kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")
    kept = len(chunk_fwd._chunk_output.launchers)
    assert kept > 0
    storage = torch.empty(q.numel() + 8, device="cuda", dtype=q.dtype)
    shifted = storage[1:1 + q.numel()].view(q.shape)
    shifted.copy_(q)
    assert shifted.is_contiguous() and shifted.data_ptr() % 16 != 0
    for _ in range(2):
        o, state = kda.chunked(shifted, k, v, g, beta, initial_state=h0, backend="triton")
        assert rel_err(o, aligned[0]) < 1e-3 and rel_err(state, aligned[1]) < 1e-5
    assert len(chunk_fwd._chunk_output.launchers) == kept
