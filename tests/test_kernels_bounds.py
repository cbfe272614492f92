"""Every Triton kernel of k3lite, under the interpreter with a bounds check (tests/interpreter_bounds.py): no load or
store that a mask lets through may land outside the launch's tensors.

The shapes are the ones where masks do the work: one token, a sequence that ends inside a chunk and inside a
16-row sub-block, head widths that fill no tile (20, 24) or span two (72, 80), three heads, batch 2, a packed
batch with an empty and a one-token sequence, and both forms of the reverse state pass. On a GPU such an access
faults or reads a neighbour's bytes; under the interpreter it would read host memory silently. CPU only.
"""

import pytest
import torch

from k3lite import kernels  # noqa: F401  (first: it switches on the Triton interpreter before triton is imported)

pytest.importorskip("triton")
if torch.cuda.is_available():
    pytest.skip("interpreter tests run only without CUDA", allow_module_level=True)

import interpreter_bounds as bounds

from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention
from k3lite.ops.situ import situ_glu

if not bounds.available():
    pytest.skip("this Triton's interpreter lacks the pieces the bounds check wraps", allow_module_level=True)

OPS = {"linear_attention": linear_attention, "delta_rule": delta_rule, "gated_delta_rule": gated_delta_rule,
       "kda": kda}


@pytest.fixture
def checked():
    with bounds.checking():
        yield


def inputs(kind, B, T, H, K, V, seed=0):
    gen = torch.Generator().manual_seed(seed)
    named = {"q": torch.randn(B, T, H, K, generator=gen),
             "k": torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1),
             "v": torch.randn(B, T, H, V, generator=gen)}
    if kind == "gated_delta_rule":
        named["g"] = -2 * torch.rand(B, T, H, generator=gen)
    if kind == "kda":
        named["g"] = -2 * torch.rand(B, T, H, K, generator=gen)
    if kind != "linear_attention":
        named["beta"] = torch.rand(B, T, H, generator=gen)
    return named


def test_the_check_catches_a_mask_one_lane_too_wide(checked):
    import triton
    import triton.language as tl

    @triton.jit
    def copy_one_too_many(src, dst, n, BLOCK: tl.constexpr):
        lanes = tl.arange(0, BLOCK)
        tl.store(dst + lanes, tl.load(src + lanes, mask=lanes < n + 1), mask=lanes < n)

    src, dst = torch.arange(8.0), torch.zeros(8)
    with pytest.raises(Exception, match="copy_one_too_many: 1 masked-in load"):
        copy_one_too_many[(1,)](src, dst, 8, 16)


SHAPES = [(2, 1, 1, 16, 16), (1, 70, 3, 24, 20), (1, 100, 1, 72, 80)]
# Both forms of the reverse state pass (it is the same kernel for every kind; KDA, the slowest to interpret, takes
# the form its float32 inputs take).
CASES = [(kind, shape, halves) for kind in OPS for shape in SHAPES for halves in (True, False)
         if kind != "kda" or not halves]


@pytest.mark.parametrize("kind,shape,halves", CASES,
                         ids=["{}-B{}-T{}-H{}-K{}-V{}-{}".format(kind, *shape, "halves" if halves else "whole")
                              for kind, shape, halves in CASES])
def test_chunked_forward_and_backward_stay_in_bounds(kind, shape, halves, checked, monkeypatch):
    from k3lite.kernels import chunk_bwd_triton

    B, T, H, K, V = shape
    monkeypatch.setattr(chunk_bwd_triton, "use_state_pass_halves", lambda *_: halves)
    leaves = {n: x.requires_grad_(True) for n, x in inputs(kind, B, T, H, K, V).items()}
    h0 = torch.randn(B, H, K, V, requires_grad=True)
    o, state = OPS[kind].chunked(*leaves.values(), initial_state=h0, backend="triton")
    (o.square().sum() + state.sum()).backward()
    assert all(torch.isfinite(x.grad).all() for x in [*leaves.values(), h0])


@pytest.mark.parametrize("kind", ["delta_rule", "gated_delta_rule", "kda"])
def test_packed_sequences_stay_in_bounds(kind, checked):
    cu_seqlens = torch.tensor([0, 15, 15, 16, 80])
    leaves = {n: x.requires_grad_(True) for n, x in inputs(kind, 1, 80, 2, 16, 16).items()}
    h0 = torch.randn(4, 2, 16, 16, requires_grad=True)
    o, state = OPS[kind].chunked(*leaves.values(), initial_state=h0, cu_seqlens=cu_seqlens, backend="triton")
    (o.square().sum() + state.sum()).backward()


@pytest.mark.parametrize("kind", list(OPS))
def test_decode_step_stays_in_bounds(kind, checked):
    named = {n: x[:, 0] for n, x in inputs(kind, 3, 1, 2, 24, 20).items()}
    OPS[kind].step(*named.values(), state=torch.randn(3, 2, 24, 20), backend="triton")


def test_fused_situ_stays_in_bounds(checked):
    gate, up = torch.randn(5, 37), torch.randn(5, 37)
    situ_glu(gate, up, backend="triton")
