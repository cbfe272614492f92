"""Triton kernels run through the interpreter on CPU, float32, checked against the ops `recurrent`.

Tiny shapes (the interpreter costs milliseconds per tile operation): T = 1, T not a multiple of the
64-token chunk, several chunks, log-gates down to -20 per step. Each case checks the output, the final
state and the gradients of every input from one call (the all-Triton backward, chunk_bwd_triton.py).
"""

import math

import pytest
import torch

from k3lite import kernels  # first: it switches on the Triton interpreter before triton is imported

pytest.importorskip("triton")
if torch.cuda.is_available():  # the GPU file covers CUDA machines
    pytest.skip("interpreter tests run only without CUDA", allow_module_level=True)

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention

B, H, K, V = 1, 2, 16, 32
OPS = {"linear_attention": linear_attention, "delta_rule": delta_rule,
       "gated_delta_rule": gated_delta_rule, "kda": kda}


def rel_err(x, ref):
    return ((x.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def gate_values(shape, gate_min, gen):
    """Log-gates: uniform in [gate_min, 0], for ("band", lo, hi) uniform in [lo, hi], or for ("spike", x): gentle
    gates (-0.001) with x at tokens 5 and 40.

    A spike's huge running sum used to swamp the gentle gates after it, inside the same chunk (the kernels
    subtracted running sums of log-gates); -inf must give exact zeros, not NaN.
    """
    if isinstance(gate_min, tuple) and gate_min[0] == "band":
        low, high = gate_min[1:]
        return low + (high - low) * torch.rand(*shape, generator=gen)
    if isinstance(gate_min, tuple):
        g = torch.full(shape, -0.001)
        g[:, [5, 40]] = gate_min[1]
        return g
    return gate_min * torch.rand(*shape, generator=gen)


# KDA's diagonal blocks take products through an anchor row while half a sub-chunk's gates (8 of them) sum to at most
# chunk_fwd.DIAGONAL_SPAN_LIMIT (30): these gates sit just inside that range.
EDGE_OF_THE_ANCHORS = ("band", -3.74, -3.64)


def make_inputs(kind, T, gate_min, seed, batch=B):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(batch, T, H, K, generator=gen), dim=-1)
    v = torch.randn(batch, T, H, V, generator=gen)
    beta = torch.rand(batch, T, H, generator=gen) if kind != "linear_attention" else None
    g = None
    if kind == "gated_delta_rule":
        g = gate_values((batch, T, H), gate_min, gen)
    if kind == "kda":
        g = gate_values((batch, T, H, K), gate_min, gen)
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
SPIKE_GATES = [("spike", spike) for spike in (-1e4, -1e6, float("-inf"))]
SPIKES = [(kind, 70, gates) for kind in ("gated_delta_rule", "kda") for gates in SPIKE_GATES]
CASES += SPIKES + [("kda", 130, EDGE_OF_THE_ANCHORS)]


def gates_id(gate_min):
    """A readable test id for a gate setting: -20.0, spike-1e+04, band-3.74..-3.64."""
    if isinstance(gate_min, tuple):
        return f"{gate_min[0]}{'..'.join(f'{x:g}' for x in gate_min[1:])}"
    return f"{gate_min:g}"


@pytest.mark.parametrize("kind,T,gate_min", CASES, ids=[f"{kind}-T{T}-{gates_id(g)}" for kind, T, g in CASES])
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
        assert rel_err(x.grad, ref.grad) < (1e-5 if gate_min in SPIKE_GATES else 1e-4), name


@pytest.mark.parametrize("kind", ["gated_delta_rule", "kda"])
def test_strong_gates_leave_dg_an_absolute_error_of_float32s_size(kind):
    # Gates of -20 per step: the state forgets almost everything every token, and the true dg is tiny (about 1e-8 here).
    # The backward finds dG from q dq and k dk, signed by the direction of each decay (chunk_bwd_triton stages 3-5), and
    # dg as its reverse sum over the chunk (stage 6): terms of order one that cancel. In float32 that leaves dg an
    # absolute error of a few float32 steps of those terms, far above dg itself (a relative error of about 1e2 here),
    # while every other gradient keeps its 1e-5. So dg is held to 1e-6 of the largest |q dq| + |k dk| (summed over the
    # channels for one gate per head): an error of the formula's own size, not of float32's, would fail it.
    inputs = make_inputs(kind, 70, ("band", -20.0, -19.9), seed=70, batch=2)
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    o, state = call(kind, "chunked", *leaves[:5], initial_state=leaves[5], backend="triton")
    ref = [x.detach().double().requires_grad_(True) for x in inputs]
    o_ref, state_ref = call(kind, "recurrent", *ref[:5], initial_state=ref[5])
    d_o, d_state = torch.randn_like(o), torch.randn_like(state)
    torch.autograd.backward([o, state], [d_o, d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.double(), d_state.double()])
    for name, i in (("q", 0), ("k", 1), ("v", 2), ("beta", 4), ("h0", 5)):
        assert rel_err(leaves[i].grad, ref[i].grad) < 1e-5, name
    q, k = ref[0].detach(), ref[1].detach()
    terms = (q * ref[0].grad).abs() + (k * ref[1].grad).abs()
    terms = terms.sum(-1) if kind == "gated_delta_rule" else terms
    dg_error = (leaves[3].grad.double() - ref[3].grad).abs().max()
    assert ref[3].grad.abs().max() < 1e-6 * terms.max()   # the case: dg below float32's reach of the terms
    assert dg_error < 1e-6 * terms.max()
    # The PyTorch chunked form differentiates its decays directly: there dg keeps a relative error.
    plain = [x.clone().requires_grad_(True) for x in inputs]
    torch.autograd.backward(call(kind, "chunked", *plain[:5], initial_state=plain[5], backend="torch"), [d_o, d_state])
    assert rel_err(plain[3].grad, ref[3].grad) < 1e-5


@pytest.mark.parametrize("kind,T,K", [("kda", 1, 16), ("kda", 70, 12), ("kda", 130, 40),
                                      ("gated_delta_rule", 70, 16)])
def test_gate_sums_are_the_exact_chunk_cumsum_in_two_float32_parts(kind, T, K):
    # Stage 1 alone: per chunk of 64 tokens, hi + lo = the running sum (to float64's precision; the kernel sums
    # float32 pairs with compensation), hi its float32 rounding, gates floored at -1024 first; a -1e4 spike, a -inf
    # and gentle gates in one chunk.
    from k3lite.kernels import chunk_fwd

    gen = torch.Generator().manual_seed(3)
    shape = (2, T, 3, K) if kind == "kda" else (2, T, 3)
    g = -3.0 * torch.rand(*shape, generator=gen)
    g[:, T // 3] = -1e4
    g[:, T // 2] = -float("inf")
    g[:, T // 2 + 1:] *= 1e-3
    G, G_lo = chunk_fwd.gate_sums(g, kind)
    chunks = g.double().clamp_min(-1024.0).split(chunk_fwd.CHUNK, dim=1)
    ref = torch.cat([c.cumsum(dim=1) for c in chunks], dim=1)
    assert G.dtype == G_lo.dtype == torch.float32
    assert (G.double() + G_lo.double() - ref).abs().max().item() < 1e-12 * ref.abs().max().item()
    # hi is the pair rounded to float32: the low part is at most half a float32 step of hi
    assert torch.equal(G, (G.double() + G_lo.double()).float())
    assert torch.equal(G, ref.float())


def half_precision_rule(monkeypatch, lo_from):
    """Make float32 runs follow the rule bf16/fp16 KDA inputs get (chunk_fwd.gate_lo_from), with G_lo's memory
    filled with NaN first: an entry stage 1 did not write and some stage read anyway would show."""
    from k3lite.kernels import chunk_fwd

    monkeypatch.setattr(chunk_fwd, "gate_lo_from", lambda kind, dtype: lo_from)
    monkeypatch.setattr(chunk_fwd, "_allocate_lo", lambda x: torch.full_like(x, float("nan")))


def test_gate_sums_write_the_low_part_only_from_lo_from(monkeypatch):
    # G_lo is written, exactly, where |G| >= lo_from and not at all below; G itself does not change. Gates of
    # about -8 per step cross 256 inside every chunk, so both sides are present.
    from k3lite.kernels import chunk_fwd

    g = -16.0 * torch.rand(2, 70, 3, 12, generator=torch.Generator().manual_seed(5))
    G_all, lo_all = chunk_fwd.gate_sums(g, "kda")
    half_precision_rule(monkeypatch, chunk_fwd.LO_FROM_HALF)
    G, lo = chunk_fwd.gate_sums(g, "kda", lo_from=chunk_fwd.LO_FROM_HALF)
    kept = G.abs() >= chunk_fwd.LO_FROM_HALF
    assert kept.any() and (~kept).any()
    assert torch.equal(G, G_all)
    assert torch.equal(lo[kept], lo_all[kept])
    assert lo[~kept].isnan().all() and (lo_all[~kept] != 0).any()


@pytest.mark.parametrize("spike", [-1e4, float("-inf")])
def test_kda_spikes_stay_exact_under_the_half_precision_rule(spike, monkeypatch):
    # A spike's sum passes 256, so the rows after it keep G_lo and the gentle gates there keep their digits
    # (1e-5, as with G_lo everywhere). The check can fail: with no G_lo at all (lo_from = inf) it misses that bound.
    from k3lite.kernels import chunk_fwd

    q, k, v, g, beta, h0 = make_inputs("kda", 70, ("spike", spike), seed=70)
    o_ref = kda.recurrent(q.double(), k.double(), v.double(), g.double(), beta.double(), initial_state=h0.double())[0]
    for lo_from, holds in ((chunk_fwd.LO_FROM_HALF, True), (float("inf"), False)):
        half_precision_rule(monkeypatch, lo_from)
        o = kda.chunked(q, k, v, g, beta, initial_state=h0, backend="triton")[0]
        assert (rel_err(o, o_ref) < 1e-5) == holds, (lo_from, rel_err(o, o_ref))


def assert_kda_kernels_match_recurrence(inputs, output_tol, grad_tol=1e-4):
    """KDA through the Triton pipeline against the float64 recurrence: output and final state within output_tol,
    all six gradients finite and within grad_tol (relative)."""
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    refs = [x.detach().double().requires_grad_(True) for x in inputs]
    o, state = kda.chunked(*leaves[:5], initial_state=leaves[5], backend="triton")
    o_ref, state_ref = kda.recurrent(*refs[:5], initial_state=refs[5])
    assert rel_err(o, o_ref) < output_tol and rel_err(state, state_ref) < output_tol
    d_o, d_state = torch.randn_like(o), torch.randn_like(state)
    torch.autograd.backward([o, state], [d_o, d_state])
    torch.autograd.backward([o_ref, state_ref], [d_o.double(), d_state.double()])
    for name, x, ref in zip("q k v g beta h0".split(), leaves, refs):
        assert torch.isfinite(x.grad).all() and rel_err(x.grad, ref.grad) < grad_tol, name


@pytest.mark.parametrize("lo_group", [1, 4])
def test_kda_chunks_with_g_lo_spread_over_several_groups(lo_group, monkeypatch):
    # The USE_LO launches of _offdiagonal_solve and _wy_factors take LO_GROUP chunks per program and work on those
    # with G_lo. Ten chunks (the last one partial) and a -1e4 gate in chunks 1, 5 and 9 only: with groups of four,
    # the first, second and third group each hold one such chunk at a different place, beside chunks without G_lo
    # and, in the last group, positions past the end. Forward and backward against the recurrence, as the spikes'
    # test does, with no unwritten G_lo read (NaN).
    from k3lite.kernels import chunk_fwd

    T = 9 * chunk_fwd.CHUNK + 24
    q, k, v, _, beta, h0 = make_inputs("kda", T, -1.0, seed=600, batch=1)
    g = torch.full((1, T, H, K), -0.001)
    g[:, [70, 5 * chunk_fwd.CHUNK + 11, 9 * chunk_fwd.CHUNK + 3], 1] = -1e4
    half_precision_rule(monkeypatch, chunk_fwd.LO_FROM_HALF)
    monkeypatch.setattr(chunk_fwd, "LO_GROUP", lo_group)
    G, _ = chunk_fwd.gate_sums(g, "kda", lo_from=chunk_fwd.LO_FROM_HALF)
    last_rows = G[:, torch.arange(chunk_fwd.CHUNK - 1, T, chunk_fwd.CHUNK).tolist() + [T - 1]]
    assert (last_rows.abs().amax(dim=(0, 2, 3)) >= chunk_fwd.LO_FROM_HALF).nonzero().flatten().tolist() == [1, 5, 9]
    assert_kda_kernels_match_recurrence((q, k, v, g, beta, h0), output_tol=1e-5)


def test_kda_strong_gates_forward_and_backward_under_the_half_precision_rule(monkeypatch):
    # Gates of -8 per step on average: sums below 256 lose G_lo, which may move an exponent by one float32 step of
    # |G| < 256 (2^-16), 1.5e-5 relative; the output must stay within that of the recurrence, the gradients within
    # the float32 tolerance of test_chunked_matches_recurrent, and no stage may read an unwritten G_lo (NaN).
    from k3lite.kernels import chunk_fwd

    inputs = make_inputs("kda", 130, -16.0, seed=130)
    half_precision_rule(monkeypatch, chunk_fwd.LO_FROM_HALF)
    assert_kda_kernels_match_recurrence(inputs, output_tol=1.5e-5)


def diagonal_blocks(q, k, g, beta, span_limit, width=16):
    """KDA's diagonal 16x16 blocks of Aqk and Akk as chunk_fwd._diagonal_blocks writes them (entries outside the
    blocks stay NaN)."""
    from k3lite.kernels import chunk_fwd

    B, T, H, K = q.shape
    G, G_lo = chunk_fwd.gate_sums(g, "kda")
    aqk = torch.full((B, T, H, chunk_fwd.CHUNK), float("nan"))
    akk = torch.full_like(aqk, float("nan"))
    grid = (-(-T // chunk_fwd.SUB), B * H)
    chunk_fwd._diagonal_blocks[grid](q, k, g, G, G_lo, beta, aqk, akk, K ** -0.5, 0.0, T, H, K, chunk_fwd.CHUNK,
                                     chunk_fwd.SUB, width, span_limit, "ieee")
    return aqk, akk


def diagonal_blocks_reference(q, k, g, beta):
    """The same blocks in float64 from their definition: decay exp(sum of the gates between the two tokens)."""
    from k3lite.kernels import chunk_fwd

    B, T, H, K = q.shape
    q, k, g, beta = (x.double() for x in (q, k, g, beta))
    G = torch.cat([c.cumsum(1) for c in g.clamp_min(-1024.0).split(chunk_fwd.SUB, dim=1)], dim=1)
    aqk = torch.full((B, T, H, chunk_fwd.CHUNK), float("nan"), dtype=torch.float64)
    akk = aqk.clone()
    for t in range(T):
        j0 = t - t % chunk_fwd.SUB
        for j in range(j0, j0 + chunk_fwd.SUB):   # zeros above the diagonal, past T too
            decay = torch.exp((G[:, t] - G[:, j]).clamp_max(0.0)) if j <= t else torch.zeros_like(G[:, t])
            col = j % chunk_fwd.CHUNK
            k_j = k[:, min(j, T - 1)]
            aqk[:, t, :, col] = K ** -0.5 * (q[:, t] * k_j * decay).sum(-1)
            akk[:, t, :, col] = beta[:, t] * (k[:, t] * k_j * decay).sum(-1) if j < t else 0.0
    return aqk, akk


ALL_SUB_CHUNKS = set(range(6))   # the full sub-chunks of T = 100 (the seventh holds 4 tokens)


@pytest.mark.parametrize("gate_min,anchored", [(-1.0, ALL_SUB_CHUNKS), (-4.0, ALL_SUB_CHUNKS), (-20.0, set()),
                                               (("spike", -1e4), ALL_SUB_CHUNKS - {0, 2}),
                                               (EDGE_OF_THE_ANCHORS, ALL_SUB_CHUNKS)])
def test_kda_diagonal_blocks_by_anchors_and_by_walk(gate_min, anchored):
    # Where half a sub-chunk's gates sum to at most DIAGONAL_SPAN_LIMIT, _diagonal_blocks forms its block as products
    # through an anchor row; elsewhere (gates of -20, a spike) the sub-chunk walks its rows. Both must give the
    # blocks' definition (1e-6 of the largest entry, float32), and each path must be the one expected: the anchored
    # path rounds differently from the walk, so its results differ in their last bits, while a sub-chunk with strong
    # gates gives the walk's numbers bit for bit. T = 100 ends mid-sub-chunk; the spikes (-1e4 at tokens 5 and 40)
    # make sub-chunks 0 and 2 walk.
    # At the top of the anchored range (EDGE_OF_THE_ANCHORS) an adjacent pair, an entry of the largest size, is the
    # product of factors near e^+30 and e^-30, and each exponent G_r - G_a is a float32 number near 30, off by up to
    # half a float32 step there: the pair is off by up to one step of the limit, relative (1.9e-6; the walk's span
    # of such a pair is one gate, exact). So there the anchored blocks are held to two steps of the limit.
    from k3lite.kernels import chunk_fwd

    q, k, v, g, beta, h0 = make_inputs("kda", 100, gate_min, seed=11, batch=2)
    limit = chunk_fwd.DIAGONAL_SPAN_LIMIT
    anchored_tol = 1e-6
    if gate_min == EDGE_OF_THE_ANCHORS:
        assert 0.9 * limit < -gate_min[1] * chunk_fwd.SUB // 2 < limit
        step = torch.finfo(torch.float32).eps * 2.0 ** math.floor(math.log2(limit))
        anchored_tol = 2 * step
    ref = diagonal_blocks_reference(q, k, g, beta)
    default = diagonal_blocks(q, k, g, beta, limit)
    walked = diagonal_blocks(q, k, g, beta, -1.0)
    sliced = diagonal_blocks(q, k, g, beta, limit, width=8)   # two channel slices
    for got, tol in ((default, anchored_tol), (walked, 1e-6), (sliced, anchored_tol)):
        for x, r in zip(got, ref):
            assert torch.equal(x.isnan(), r.isnan())
            kept = ~r.isnan()
            assert (x[kept].double() - r[kept]).abs().max() < tol * r[kept].abs().max()
    for sub in sorted(ALL_SUB_CHUNKS):
        rows = slice(sub * chunk_fwd.SUB, (sub + 1) * chunk_fwd.SUB)
        same = all(torch.allclose(a[:, rows], b[:, rows], rtol=0.0, atol=0.0, equal_nan=True)
                   for a, b in zip(default, walked))
        assert same != (sub in anchored), sub


@pytest.mark.parametrize("kind,bad", [("kda", None), ("kda", "g"), ("kda", "g_nan"), ("kda", "g_inf"),
                                      ("kda", "beta"), ("gated_delta_rule", None), ("gated_delta_rule", "g"),
                                      ("gated_delta_rule", "beta_nan"), ("delta_rule", None), ("delta_rule", "beta"),
                                      ("delta_rule", "beta_low")])
def test_chunked_kernels_check_values_as_they_read_them(kind, bad):
    # On CUDA the pipeline's stage 1 (gates) and stage 4 (beta) clear a flag when a value is out of range, and the
    # launcher asserts on it (the GPU file checks the assert). Here the flag itself, under the interpreter: one bad
    # value in the last, partial chunk (token 69 of 70, head 1) must clear it; good inputs must leave it set.
    from k3lite.kernels import chunk_fwd

    q, k, v, g, beta, _ = make_inputs(kind, 70, -1.0, seed=12)
    where = (0, 69, 1)
    if bad is not None and bad.startswith("g"):
        g[where] = {"g": 0.5, "g_nan": float("nan"), "g_inf": float("inf")}[bad]
    if bad is not None and bad.startswith("beta"):
        beta[where] = {"beta": 2.5, "beta_nan": float("nan"), "beta_low": -0.1}[bad]
    ok = torch.ones((), dtype=torch.int32)
    chunk_fwd.chunk_forward(kind, q, k, v, g, beta, K ** -0.5, None, values_ok=ok)
    assert ok.item() == (1 if bad is None else 0)


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


@pytest.mark.parametrize("halves", [True, False], ids=["halves", "whole"])
@pytest.mark.parametrize("kind,K,V", [("delta_rule", 64, 64), ("delta_rule", 24, 20), ("gated_delta_rule", 64, 48),
                                      ("kda", 32, 100), ("linear_attention", 64, 64)])
def test_both_forms_of_the_reverse_state_pass(kind, K, V, halves, monkeypatch):
    # The GPU picks a form by dtype and shape (chunk_bwd_triton.use_state_pass_halves); the interpreter runs float32,
    # which alone would leave the halves untested here. Both forms, forced, against the token loop.
    from k3lite.kernels import chunk_bwd_triton

    monkeypatch.setattr(chunk_bwd_triton, "use_state_pass_halves", lambda *shape: halves)
    gen = torch.Generator().manual_seed(6)
    T, heads = 130, 2
    q = torch.randn(1, T, heads, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(1, T, heads, K, generator=gen), dim=-1)
    v = torch.randn(1, T, heads, V, generator=gen)
    g = {"gated_delta_rule": -2 * torch.rand(1, T, heads, generator=gen),
         "kda": -2 * torch.rand(1, T, heads, K, generator=gen)}.get(kind)
    beta = torch.rand(1, T, heads, generator=gen) if kind != "linear_attention" else None
    h0 = torch.randn(1, heads, K, V, generator=gen)
    inputs = [x for x in (q, k, v, g, beta) if x is not None] + [h0]
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    o, s = OPS[kind].chunked(*leaves[:-1], initial_state=leaves[-1], backend="triton")
    refs = [x.double().requires_grad_(True) for x in inputs]
    o_ref, s_ref = OPS[kind].recurrent(*refs[:-1], initial_state=refs[-1])
    d_o, d_s = torch.randn(o.shape, generator=gen), torch.randn(s.shape, generator=gen)
    torch.autograd.backward([o, s], [d_o, d_s])
    torch.autograd.backward([o_ref, s_ref], [d_o.double(), d_s.double()])
    for n, (x, ref) in enumerate(zip(leaves, refs)):
        assert rel_err(x.grad, ref.grad) < 1e-4, f"input {n}"


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


@pytest.mark.parametrize("kind,K", [("kda", 24), ("kda", 72), ("gated_delta_rule", 72), ("delta_rule", 24),
                                    ("delta_rule", 72)])
def test_odd_head_count_and_partial_key_block(kind, K):
    # Three heads and T = 70: the last sub-chunk has 6 tokens. K = 24 and 72 leave the key tiles partly masked,
    # including the second half of the ungated reverse state pass; at K = 72 the backward's stage 3 has two key
    # blocks, so a gate per head gets its dG as two partial sums. Batch 2, so tokens of the second sequence
    # are indexed from the flat B*T grid.
    gen = torch.Generator().manual_seed(5)
    batch, T, heads, V = 2, 70, 3, 20
    q = torch.randn(batch, T, heads, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(batch, T, heads, K, generator=gen), dim=-1)
    v = torch.randn(batch, T, heads, V, generator=gen)
    g = None
    if kind == "kda":
        g = -4 * torch.rand(batch, T, heads, K, generator=gen)
    if kind == "gated_delta_rule":
        g = -4 * torch.rand(batch, T, heads, generator=gen)
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


def _kernel_inputs(kind, T=5):
    q, k, v, g, beta, h0 = make_inputs(kind, T, -1.0, seed=3)
    return dict(q=q, k=k, v=v, g=g, beta=beta), h0


BAD_CHUNKED = [  # (kind, argument replaced, bad value builder, words the error must contain)
    ("kda", "g", lambda x: x.abs() + 0.1, "g .*<= 0"),
    ("gated_delta_rule", "g", lambda x: x + 1.0, "g .*<= 0"),
    ("kda", "g", lambda x: x.masked_fill(torch.zeros_like(x, dtype=torch.bool).index_fill(1, torch.tensor([2]), True),
                                         float("nan")), "g .*<= 0"),
    ("kda", "beta", lambda x: torch.full_like(x, 5.0), r"beta must lie in \[0, 2\]"),
    ("kda", "k", lambda x: x[:, :-1], r"k must have the same shape as q"),
    ("kda", "v", lambda x: x[:, :, 0], r"v must have shape \[B, T, H, V\]"),
    ("kda", "g", lambda x: x[..., 0], r"g must have shape \[B, T, H, K\]"),
    ("gated_delta_rule", "g", lambda x: x[..., None].expand(*x.shape, K), r"g must have shape \[B, T, H\]"),
    ("delta_rule", "beta", lambda x: x[:, :, :1], r"beta must have shape \[B, T, H\]"),
    ("kda", "q", lambda x: x.double(), "q, k, v must share one dtype"),
    ("kda", "k", lambda x: x.long(), "k must have a floating-point dtype"),
    ("kda", "beta", lambda x: None, "needs beta"),
    ("linear_attention", "g", lambda x: torch.zeros(1, 5, H), "takes no g"),
]


@pytest.mark.parametrize("kind,name,make_bad,message", BAD_CHUNKED)
def test_chunked_entry_point_rejects_bad_arguments(kind, name, make_bad, message):
    args, h0 = _kernel_inputs(kind)
    args[name] = make_bad(args[name])
    with pytest.raises(ValueError, match=message):
        kernels.chunked(kind, args["q"], args["k"], args["v"], args["g"], args["beta"], scale=0.25,
                        initial_state=h0)


@pytest.mark.parametrize("kind", ["kda", "delta_rule"])
def test_chunked_without_grad_runs_the_same_kernels_without_an_autograd_node(kind):
    args, h0 = _kernel_inputs(kind, T=70)
    o, state = kernels.chunked(kind, **args, initial_state=h0)
    assert o.grad_fn is None and state.grad_fn is None
    leaves = {name: x.clone().requires_grad_() if x is not None else None for name, x in args.items()}
    o_grad, state_grad = kernels.chunked(kind, **leaves, initial_state=h0)
    assert o_grad.grad_fn is not None
    assert torch.equal(o, o_grad.detach()) and torch.equal(state, state_grad.detach())


@pytest.mark.parametrize("bad_state,message", [
    (lambda h0: h0[:, :, :, 0], r"initial_state must have shape \[B, H, K, V\]"),
    (lambda h0: h0.transpose(-1, -2), r"initial_state must have shape \[B, H, K, V\]"),
])
def test_chunked_entry_point_rejects_bad_state(bad_state, message):
    args, h0 = _kernel_inputs("kda")
    with pytest.raises(ValueError, match=message):
        kernels.chunked("kda", *args.values(), scale=0.25, initial_state=bad_state(h0))


def _step_inputs(kind):
    args, h0 = _kernel_inputs(kind, T=1)
    return {n: (x[:, 0] if x is not None else None) for n, x in args.items()}, h0


@pytest.mark.parametrize("name,make_bad,message", [
    ("state", lambda h0: h0[:, :, :, 0], r"state must have shape \[B, H, K, V\]"),  # used to abort the process
    ("state", lambda h0: h0[:1, :1], r"state must have shape \[B, H, K, V\]"),
    ("g", lambda g: g.abs() + 0.5, "g .*<= 0"),
    ("beta", lambda b: b + 3.0, r"beta must lie in \[0, 2\]"),
    ("v", lambda v: v[:, 0], r"v must have shape \[B, H, V\]"),
    ("k", lambda k: k[:, :, :-1], "k must have the same shape as q"),
])
def test_step_entry_point_rejects_bad_arguments(name, make_bad, message):
    args, h0 = _step_inputs("kda")
    if name == "state":
        h0 = make_bad(h0)
    else:
        args[name] = make_bad(args[name])
    with pytest.raises(ValueError, match=message):
        kernels.step("kda", *args.values(), state=h0, scale=0.25)


@pytest.mark.parametrize("kind", list(OPS))
def test_step_without_state_starts_from_zeros(kind):
    args, h0 = _step_inputs(kind)
    o, state = kernels.step(kind, *args.values(), state=None, scale=0.25)
    o_zero, state_zero = kernels.step(kind, *args.values(), state=torch.zeros_like(h0), scale=0.25)
    assert torch.equal(o, o_zero) and torch.equal(state, state_zero)
    o_ops, state_ops = call(kind, "step", *args.values(), state=None, scale=0.25, backend="triton")
    assert torch.equal(o_ops, o) and torch.equal(state_ops, state)


def test_step_with_grad_raises_in_kernels_and_differentiates_through_ops():
    args, h0 = _step_inputs("kda")
    leaves = {n: x.clone().requires_grad_(True) for n, x in args.items()}
    state = h0.clone().requires_grad_(True)
    with pytest.raises(ValueError, match="requires grad"):
        kernels.step("kda", *leaves.values(), state=state, scale=0.25)
    o, new_state = kda.step(*leaves.values(), state=state, backend="triton")
    assert o.grad_fn is not None and new_state.grad_fn is not None
    (o.sum() + new_state.sum()).backward()
    refs = {n: x.detach().double().requires_grad_(True) for n, x in args.items()}
    ref_state = h0.double().requires_grad_(True)
    o_ref, s_ref = kda.recurrent(*(x[:, None] for x in refs.values()), initial_state=ref_state)
    (o_ref.sum() + s_ref.sum()).backward()
    for name in args:
        assert rel_err(leaves[name].grad, refs[name].grad) < 1e-5, name
    assert rel_err(state.grad, ref_state.grad) < 1e-5


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_kda_step_in_place_reuses_the_state(backend):
    args, h0 = _step_inputs("kda")
    o, expected = kda.step(*args.values(), state=h0, backend=backend)
    state = h0.clone()
    storage = state.untyped_storage().data_ptr()
    o_in_place, result = kda.step(*args.values(), state=state, backend=backend, inplace=True)
    assert result.untyped_storage().data_ptr() == storage
    assert torch.equal(state, result)
    torch.testing.assert_close(o_in_place, o, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(result, expected, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="inplace=True needs a contiguous"):
        kda.step(*args.values(), state=h0.transpose(-1, -2).contiguous().transpose(-1, -2), backend=backend,
                 inplace=True)


def test_interpreter_refuses_half_precision():
    q = torch.randn(1, 4, 1, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        kernels.chunked("linear_attention", q, q, q, scale=0.25)
    with pytest.raises(ValueError, match="float32"):
        kernels.situ_glu(q, q)


def _last_number_printed_by_a_fresh_python(code):
    # This process imported k3lite.kernels, which set TRITON_INTERPRET=1; a child inheriting it would import
    # triton interpreted from the start, and the cases below would pass without testing anything.
    import os
    import subprocess
    import sys

    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    return float(result.stdout.strip().splitlines()[-1])


def test_interpreter_works_when_triton_was_imported_first():
    # torch.utils.flop_counter imports triton in compiled mode; the kernels must still interpret.
    code = ("import torch.utils.flop_counter, sys; assert 'triton' in sys.modules; "
            "import torch; from k3lite import kernels; q = torch.randn(1, 3, 1, 16); "
            "o, s = kernels.chunked('linear_attention', q, q, q, scale=1.0); x = q[0, :, 0]; "
            "print(float((o[0, :, 0] - (x @ x.T).tril() @ x).abs().max()))")
    assert _last_number_printed_by_a_fresh_python(code) < 1e-4


def test_a_kernel_module_imported_directly_after_triton_still_interprets():
    # benchmarks.bench imports k3lite.kernels.recurrent_step itself to time the kernel alone. After
    # `import k3lite.models.gpt2` (torch.nn.attention imports triton in compiled mode) and no call through the entry
    # points yet, that module used to mix interpreted kernels with compiled-mode helpers (tl.max) and fail: "Cannot
    # call @triton.jit'd outside of the scope of a kernel". Every kernel module now switches the interpreter on as it
    # is imported.
    code = ("import k3lite.models.gpt2, sys; assert 'triton' in sys.modules; import torch; "
            "from k3lite.kernels import recurrent_step; from k3lite import ops; "
            "q, k, v = torch.randn(3, 2, 1, 16).unbind(0); g = -torch.rand(2, 1, 16); beta = torch.rand(2, 1); "
            "s = torch.randn(2, 1, 16, 16); o, _ = recurrent_step.decode_step('kda', q, k, v, g, beta, s, 0.25); "
            "ref, _ = ops.kda.step(q, k, v, g, beta, state=s, scale=0.25, backend='torch'); "
            "print(float((o - ref).abs().max()))")
    assert _last_number_printed_by_a_fresh_python(code) < 1e-5


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


def test_host_cdiv_and_next_power_of_2_agree_with_tritons():
    # The launchers use plain-Python copies (Triton's are constexpr functions, slow to call from the host); the
    # grids and tile widths they give must be Triton's.
    import triton

    from k3lite.kernels import chunk_fwd

    for n in range(1, 1100):
        assert chunk_fwd.next_power_of_2(n) == triton.next_power_of_2(n), n
        for d in (1, 3, 16, 64, 128):
            assert chunk_fwd.cdiv(n, d) == triton.cdiv(n, d), (n, d)
