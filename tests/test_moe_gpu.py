"""On CUDA the MoE's routed experts never synchronise the host (skipped without a GPU).

``torch.cuda.set_sync_debug_mode("error")`` turns every device-to-host synchronisation (``.item()``,
``.tolist()``, ``nonzero``, a data-dependent ``bincount``) into a RuntimeError.
"""

import pytest
import torch

from k3lite.layers.moe import MoE, RoutedExperts

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture
def restore_sync_mode():
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _moe_and_input(dtype=torch.float32):
    torch.manual_seed(0)
    moe = MoE(64, 16, 4, 32, num_shared_experts=1, latent_size=32).cuda().to(dtype)
    x = torch.randn(3, 37, 64, device="cuda", dtype=dtype, requires_grad=True)
    moe(x)[0].sum().backward()    # first call outside the check: lazy CUDA initialisation may synchronise
    return moe, x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_forward_and_backward_do_not_synchronise(restore_sync_mode, dtype):
    moe, x = _moe_and_input(dtype)
    torch.cuda.set_sync_debug_mode("error")
    y, load = moe(x)
    y.float().pow(2).sum().backward()
    torch.cuda.set_sync_debug_mode("default")
    assert int(load.sum()) == 3 * 37 * 4 and torch.isfinite(x.grad).all()


def test_the_grouped_loop_would_synchronise(restore_sync_mode):
    # The check can fail: the CPU path, run on CUDA tensors, reads the loads back to the host.
    moe, x = _moe_and_input()
    flat = x.detach().reshape(-1, 64)
    weights, indices, _ = moe.router(flat)
    torch.cuda.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match="synchroniz"):
        moe.experts.forward_grouped(moe.latent_down(flat), weights, indices)


def test_cuda_result_equals_the_grouped_loop_on_cpu():
    moe, x = _moe_and_input()
    flat = x.detach().reshape(-1, 64)
    weights, indices, _ = moe.router(flat)
    z = moe.latent_down(flat)
    got = RoutedExperts.forward(moe.experts, z, weights, indices)
    cpu = moe.experts.to("cpu")
    expected = cpu.forward_grouped(z.cpu(), weights.cpu(), indices.cpu())
    torch.testing.assert_close(got[0].cpu(), expected[0], atol=1e-4, rtol=1e-4)   # TF32 matmuls may differ
    assert torch.equal(got[1].cpu(), expected[1])
