"""Variable-length batches (``cu_seqlens``): every form equals one call per sequence.

The convention is flash-linear-attention's: batch size 1, N sequences packed along T, ``cu_seqlens`` their
``[N + 1]`` cumulative offsets (int32 or int64), ``initial_state`` and the final state ``[N, H, K, V]``. Each form
(the recurrent reference, the PyTorch chunks, the Triton pipeline) is compared, forward and backward, with a plain
loop that calls the recurrent op once per sequence, at lengths that are not multiples of the chunk, with an empty
and a one-token sequence, with and without initial states. Then every malformed ``cu_seqlens`` must fail with a
ValueError naming it.

Float32 at tiny shapes (H = 1, K = V = 16): without CUDA the Triton kernels run through the interpreter.
"""

import pytest
import torch
import torch.nn.functional as F

from k3lite import kernels  # first: it switches on the Triton interpreter before triton is imported
from k3lite.ops import delta_rule, gated_delta_rule, kda

MODULES = {"delta_rule": delta_rule, "gated_delta_rule": gated_delta_rule, "kda": kda}
H, K, V = 1, 16, 16
# Not multiples of any chunk size used here; an empty sequence and a one-token one in between.
LENGTHS = (5, 0, 1, 13)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = dict(atol=1e-4, rtol=1e-4)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Many tiny tensor operations: on a shared 2-core machine one intra-op thread is the faster."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def offsets_of(lengths, dtype=torch.int32):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=dtype, device=DEVICE)


def packed_inputs(kind, lengths, *, seed=0):
    """Positional arguments of ``kind`` for N sequences packed along T (B = 1), and one memory per sequence."""
    gen = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    q = torch.randn(1, T, H, K, generator=gen)
    k = F.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1)
    v = torch.randn(1, T, H, V, generator=gen)
    beta = torch.rand(1, T, H, generator=gen)
    args = [q, k, v]
    if kind == "gated_delta_rule":
        args.append(-torch.rand(1, T, H, generator=gen))
    if kind == "kda":
        args.append(-torch.rand(1, T, H, K, generator=gen))
    args.append(beta)
    state = torch.randn(len(lengths), H, K, V, generator=gen)
    return [x.to(DEVICE) for x in args], state.to(DEVICE)


def one_call_per_sequence(kind, args, initial_state, lengths):
    """The definition: the recurrent op on each sequence alone, outputs concatenated, final states stacked."""
    outputs, finals, start = [], [], 0
    for n, length in enumerate(lengths):
        state = None if initial_state is None else initial_state[n:n + 1]
        if length == 0:
            finals.append(torch.zeros(1, H, K, V, device=DEVICE) if state is None else state.float())
            continue
        o, state = MODULES[kind].recurrent(*(x[:, start:start + length] for x in args), initial_state=state)
        outputs.append(o)
        finals.append(state)
        start += length
    return torch.cat(outputs, dim=1), torch.cat(finals)


def forward_and_gradients(form, args, initial_state, seed=1):
    """``form(*args, initial_state)``'s outputs and the gradients of a random projection of them."""
    leaves = [x.detach().clone().requires_grad_() for x in args]
    state = None if initial_state is None else initial_state.detach().clone().requires_grad_()
    o, final = form(leaves, state)
    gen = torch.Generator().manual_seed(seed)
    d_o, d_final = (torch.randn(x.shape, generator=gen).to(DEVICE) for x in (o, final))
    inputs = leaves + ([state] if state is not None else [])
    grads = torch.autograd.grad((o * d_o).sum() + (final * d_final).sum(), inputs)
    return o.detach(), final.detach(), grads


def assert_matches_one_call_per_sequence(kind, form, lengths, *, with_state, exact=False):
    args, state = packed_inputs(kind, lengths)
    state = state if with_state else None
    o, final, grads = forward_and_gradients(form, args, state)
    o_ref, final_ref, grads_ref = forward_and_gradients(
        lambda xs, s: one_call_per_sequence(kind, xs, s, lengths), args, state)
    assert o.shape == (1, sum(lengths), H, V) and final.shape == (len(lengths), H, K, V)
    assert final.dtype == torch.float32
    names = ["q", "k", "v", *(["g"] if len(args) == 5 else []), "beta", *(["initial_state"] if with_state else [])]
    compare = torch.testing.assert_close if not exact else (lambda a, b, **_: assert_equal(a, b))
    compare(o, o_ref, **TOL, msg=lambda m: f"output: {m}")
    compare(final, final_ref, **TOL, msg=lambda m: f"final state: {m}")
    for name, grad, grad_ref in zip(names, grads, grads_ref, strict=True):
        assert torch.isfinite(grad).all(), f"d{name}: not finite"
        compare(grad, grad_ref, **TOL, msg=lambda m, name=name: f"d{name}: {m}")


def assert_equal(actual, expected):
    assert torch.equal(actual, expected), f"max |difference| {(actual - expected).abs().max().item():.3g}"


# --- the recurrent reference -----------------------------------------------------------------------------------

@pytest.mark.parametrize("offset_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("kind", MODULES)
def test_recurrent_runs_each_sequence_from_its_own_state(kind, with_state, offset_dtype):
    cu_seqlens = offsets_of(LENGTHS, offset_dtype)

    def form(xs, s):
        return MODULES[kind].recurrent(*xs, initial_state=s, cu_seqlens=cu_seqlens)

    assert_matches_one_call_per_sequence(kind, form, LENGTHS, with_state=with_state, exact=True)


@pytest.mark.parametrize("kind", MODULES)
def test_an_empty_sequence_keeps_its_initial_state(kind):
    args, state = packed_inputs(kind, LENGTHS)
    cu_seqlens = offsets_of(LENGTHS)
    empty = LENGTHS.index(0)
    for form in (MODULES[kind].recurrent, MODULES[kind].chunked):
        _, final = form(*args, initial_state=state, cu_seqlens=cu_seqlens)
        assert torch.equal(final[empty], state[empty])
        _, final = form(*args, cu_seqlens=cu_seqlens)
        assert torch.equal(final[empty], torch.zeros_like(state[empty]))


def test_one_sequence_is_the_plain_call():
    args, state = packed_inputs("kda", (21,))
    o, final = kda.chunked(*args, initial_state=state, chunk_size=8, cu_seqlens=offsets_of((21,)))
    o_plain, final_plain = kda.chunked(*args, initial_state=state, chunk_size=8)
    torch.testing.assert_close(o, o_plain, **TOL)
    torch.testing.assert_close(final, final_plain, **TOL)


# --- the PyTorch chunked form ----------------------------------------------------------------------------------

@pytest.mark.parametrize("chunk_size", [4, 16])
@pytest.mark.parametrize("with_state", [False, True], ids=["zero_state", "initial_state"])
@pytest.mark.parametrize("kind", MODULES)
def test_torch_chunked_matches_one_call_per_sequence(kind, with_state, chunk_size):
    # int64 offsets for one chunk size, int32 for the other.
    cu_seqlens = offsets_of(LENGTHS, torch.int64 if chunk_size == 4 else torch.int32)

    def form(xs, s):
        return MODULES[kind].chunked(*xs, initial_state=s, chunk_size=chunk_size, backend="torch",
                                     cu_seqlens=cu_seqlens)

    assert_matches_one_call_per_sequence(kind, form, LENGTHS, with_state=with_state)


# --- the Triton pipeline ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", MODULES)
def test_triton_chunked_matches_one_call_per_sequence(kind):
    """Forward and backward through the op (backend="triton"), int32 offsets, one memory per sequence."""
    pytest.importorskip("triton")
    cu_seqlens = offsets_of(LENGTHS, torch.int32)

    def form(xs, s):
        return MODULES[kind].chunked(*xs, initial_state=s, backend="triton", cu_seqlens=cu_seqlens)

    assert_matches_one_call_per_sequence(kind, form, LENGTHS, with_state=True)


@pytest.mark.parametrize("kind", MODULES)
def test_kernels_entry_point_matches_one_call_per_sequence(kind):
    """``k3lite.kernels.chunked`` itself, forward only: int64 offsets, no initial state, an empty sequence first."""
    pytest.importorskip("triton")
    lengths = (0, 7, 1)
    args, _ = packed_inputs(kind, lengths, seed=2)
    g, beta = (args[3], args[4]) if len(args) == 5 else (None, args[3])
    o, final = kernels.chunked(kind, *args[:3], g, beta, cu_seqlens=offsets_of(lengths, torch.int64))
    o_ref, final_ref = one_call_per_sequence(kind, args, None, lengths)
    assert o.shape == o_ref.shape and final.shape == final_ref.shape
    torch.testing.assert_close(o, o_ref, **TOL)
    torch.testing.assert_close(final, final_ref, **TOL)


def test_triton_sequence_across_two_chunks():
    """A sequence longer than the pipeline's 64-token chunk carries its memory across the chunk boundary."""
    pytest.importorskip("triton")
    lengths = (67, 1)

    def form(xs, s):
        return delta_rule.chunked(*xs, initial_state=s, backend="triton", cu_seqlens=offsets_of(lengths))

    assert_matches_one_call_per_sequence("delta_rule", form, lengths, with_state=True)


# --- validation ------------------------------------------------------------------------------------------------

def _bad_offsets(T):
    """(id, cu_seqlens, what the error says) for offsets that are no packing of T tokens."""
    return [
        ("float", torch.tensor([0.0, 2.0, float(T)]), "dtype"),
        ("int16", torch.tensor([0, 2, T], dtype=torch.int16), "dtype"),
        ("list", [0, 2, T], "torch.Tensor"),
        ("2d", torch.tensor([[0, 2, T]]), "1-D"),
        ("one_offset", torch.tensor([0]), "1-D"),
        ("not_from_0", torch.tensor([1, 2, T]), "start at 0"),
        ("decreasing", torch.tensor([0, 4, 2, T]), "non-decreasing"),
        ("short_of_T", torch.tensor([0, 2, T - 1]), f"end at T = {T}"),
        ("past_T", torch.tensor([0, 2, T + 1]), f"end at T = {T}"),
    ]


T_SMALL = 6
BAD = _bad_offsets(T_SMALL)


def _entry_points(kind):
    module = MODULES[kind]

    def through_kernels(*args, **kwargs):
        g, beta = (args[3], args[4]) if len(args) == 5 else (None, args[3])
        return kernels.chunked(kind, *args[:3], g, beta, **kwargs)

    return {
        "recurrent": module.recurrent,
        "chunked_torch": lambda *a, **kw: module.chunked(*a, backend="torch", **kw),
        "chunked_triton": lambda *a, **kw: module.chunked(*a, backend="triton", **kw),
        "kernels": through_kernels,
    }


ENTRY_POINTS = ("recurrent", "chunked_torch", "chunked_triton", "kernels")


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("case", BAD, ids=[case[0] for case in BAD])
def test_malformed_offsets_are_rejected_by_name(case, entry):
    _, cu_seqlens, says = case
    args, _ = packed_inputs("gated_delta_rule", (2, T_SMALL - 2))
    with pytest.raises(ValueError, match="cu_seqlens") as raised:
        _entry_points("gated_delta_rule")[entry](*args, cu_seqlens=cu_seqlens)
    assert says in str(raised.value)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", MODULES)
def test_a_batch_of_more_than_one_is_rejected(kind, entry):
    args, _ = packed_inputs(kind, (3, 3))
    batched = [torch.cat((x, x)) for x in args]
    with pytest.raises(ValueError, match=r"cu_seqlens.*batch size must be 1.*B = 2"):
        _entry_points(kind)[entry](*batched, cu_seqlens=offsets_of((3, 3)))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", MODULES)
def test_one_initial_state_per_sequence_is_required(kind, entry):
    lengths = (2, 0, 4)
    args, state = packed_inputs(kind, lengths)
    for wrong in (state[:2], state[:1], torch.cat((state, state))):
        with pytest.raises(ValueError, match=r"initial_state must have shape \[N, H, K, V\].*cu_seqlens.*N = .* = 3"):
            _entry_points(kind)[entry](*args, initial_state=wrong, cu_seqlens=offsets_of(lengths))
