"""``k3lite.kernels.chunked``'s ``chunk_size``: the Triton pipeline runs 64-token chunks only and says so.

The kernels' tiles, their four 16-row sub-chunks and the 4 x 4 block inverse of the triangular solve are sized
for 64-token chunks (``chunk_fwd.CHUNK``), so the entry point accepts ``kernels.CHUNK_SIZES = (64,)`` and raises
a ValueError naming ``chunk_size`` and the accepted values for anything else, also for a variable-length batch
(``cu_seqlens``). The ops (``k3lite.ops``) document any chunk size with one result: their PyTorch chunked forms
honour 16, 32 and 64 (checked here against the recurrent reference; ``test_ops_equivalence.py`` runs more sizes),
and on the Triton path their chunk size does not reach the kernels (``run_chunked``).

Interpreter runs (CPU, float32) at tiny shapes: T <= 40, K = V = 16.
"""

import pytest
import torch

from k3lite import kernels  # first: it switches on the Triton interpreter before triton is imported

pytest.importorskip("triton")
if torch.cuda.is_available():  # the interpreter tests are for machines without CUDA
    pytest.skip("interpreter tests run only without CUDA", allow_module_level=True)

from k3lite.ops import RECURRENT_KINDS, kda

B, H, K, V = 1, 2, 16, 16


def _inputs(kind, T, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, K, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, generator=gen)
    g = {"gated_delta_rule": lambda: -torch.rand(B, T, H, generator=gen),
         "kda": lambda: -torch.rand(B, T, H, K, generator=gen)}.get(kind, lambda: None)()
    beta = torch.rand(B, T, H, generator=gen) if kind != "linear_attention" else None
    return q, k, v, g, beta


def test_accepted_chunk_sizes_are_the_pipelines_chunk():
    from k3lite.kernels import chunk_fwd

    assert kernels.CHUNK_SIZES == (chunk_fwd.CHUNK,)


@pytest.mark.parametrize("chunk_size", [1, 16, 32, 63, 128])
def test_chunk_sizes_the_kernels_cannot_run_are_rejected(chunk_size):
    q, k, v, g, beta = _inputs("kda", 5)
    with pytest.raises(ValueError, match=r"chunk_size must be one of \(64,\).*got " + str(chunk_size)):
        kernels.chunked("kda", q, k, v, g, beta, chunk_size=chunk_size)


@pytest.mark.parametrize("chunk_size", [0, -64, 64.0, True, None])
def test_chunk_sizes_that_are_no_chunk_size_are_rejected(chunk_size):
    q, k, v, g, beta = _inputs("delta_rule", 5)
    with pytest.raises(ValueError, match="chunk_size"):
        kernels.chunked("delta_rule", q, k, v, g, beta, chunk_size=chunk_size)


@pytest.mark.parametrize("kind", list(RECURRENT_KINDS))
def test_chunk_size_64_matches_the_recurrent_reference(kind):
    q, k, v, g, beta = _inputs(kind, 40)
    args = [x for x in (g, beta) if x is not None]
    o_ref, s_ref = RECURRENT_KINDS[kind].module.recurrent(q, k, v, *args)
    o, s = kernels.chunked(kind, q, k, v, g, beta, chunk_size=64)
    torch.testing.assert_close(o, o_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s, s_ref, atol=1e-4, rtol=1e-4)
    o_default, s_default = kernels.chunked(kind, q, k, v, g, beta)
    assert torch.equal(o, o_default) and torch.equal(s, s_default)


def test_an_ops_chunk_size_does_not_reach_the_kernels():
    """The ops take any chunk size (same result); on the Triton path the kernels keep their 64-token chunks."""
    q, k, v, g, beta = _inputs("kda", 40, seed=1)
    o16, s16 = kda.chunked(q, k, v, g, beta, chunk_size=16, backend="triton")
    o64, s64 = kda.chunked(q, k, v, g, beta, chunk_size=64, backend="triton")
    assert torch.equal(o16, o64) and torch.equal(s16, s64)
    o_torch, s_torch = kda.chunked(q, k, v, g, beta, chunk_size=16, backend="torch")
    torch.testing.assert_close(o16, o_torch, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s16, s_torch, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", list(RECURRENT_KINDS))
def test_torch_chunked_honours_16_32_and_64(kind):
    """T = 70 spans two 64-token chunks and is a multiple of none of the sizes: every chunk ends somewhere else."""
    q, k, v, g, beta = _inputs(kind, 70, seed=2)
    args = [x for x in (g, beta) if x is not None]
    state = torch.randn(B, H, K, V, generator=torch.Generator().manual_seed(3))
    o_ref, s_ref = RECURRENT_KINDS[kind].module.recurrent(q, k, v, *args, initial_state=state)
    for chunk_size in (16, 32, 64):
        o, s = RECURRENT_KINDS[kind].module.chunked(q, k, v, *args, initial_state=state, chunk_size=chunk_size,
                                                    backend="torch")
        torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5, msg=lambda m, c=chunk_size: f"chunk {c}: {m}")
        torch.testing.assert_close(s, s_ref, atol=1e-5, rtol=1e-5, msg=lambda m, c=chunk_size: f"chunk {c}: {m}")


def test_a_variable_length_batch_keeps_the_chunk_size_rules():
    """With ``cu_seqlens`` too, the kernels reject sizes they cannot run and the ops' size does not reach them."""
    q, k, v, g, beta = _inputs("gated_delta_rule", 11, seed=4)
    cu_seqlens = torch.tensor([0, 4, 11])
    with pytest.raises(ValueError, match=r"chunk_size must be one of \(64,\).*got 16"):
        kernels.chunked("gated_delta_rule", q, k, v, g, beta, chunk_size=16, cu_seqlens=cu_seqlens)
    from k3lite.ops import gated_delta_rule

    o16, s16 = gated_delta_rule.chunked(q, k, v, g, beta, chunk_size=16, backend="triton", cu_seqlens=cu_seqlens)
    o64, s64 = kernels.chunked("gated_delta_rule", q, k, v, g, beta, cu_seqlens=cu_seqlens)
    assert torch.equal(o16, o64) and torch.equal(s16, s64)
    o_torch, s_torch = gated_delta_rule.chunked(q, k, v, g, beta, chunk_size=2, backend="torch", cu_seqlens=cu_seqlens)
    torch.testing.assert_close(o16, o_torch, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s16, s_torch, atol=1e-4, rtol=1e-4)


def test_head_widths_beyond_the_kernels_shared_memory_are_refused_by_name():
    q = torch.randn(1, 8, 1, 160)
    k = torch.nn.functional.normalize(torch.randn(1, 8, 1, 160), dim=-1)
    v = torch.randn(1, 8, 1, 16)
    beta = torch.rand(1, 8, 1)
    with pytest.raises(ValueError, match=r"q, k head width must be at most 128.*got 160"):
        kernels.chunked("delta_rule", q, k, v, None, beta)
    with pytest.raises(ValueError, match=r"v head width must be at most 128.*got 160"):
        kernels.chunked("delta_rule", k[..., :16], k[..., :16], torch.randn(1, 8, 1, 160), None, beta)
