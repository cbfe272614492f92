"""Gated DeltaNet's Triton path on the reference library's own grid (flash-linear-attention, tests/ops/test_gdn.py).

A port of its chunk-kernel cases (parameters, input distributions and per-tensor ratios as that file states them),
each judged by its rule against a float64 token loop (tests/grid_reference.py): forward, final state and the
gradients of q, k, v, g, beta and the initial state. Cases with grouped value heads (HV > H: several value heads
sharing one query/key head) are listed and skipped, since k3lite's mixers give every value head its own keys.
The reference's ``use_qk_l2norm_in_kernel`` normalises q and k inside its kernel; here they are normalised before
the call (the same numbers reach the kernels). Skipped without CUDA.
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import grid_reference as ref  # noqa: E402

KIND = "gated_delta_rule"
GROUPED = pytest.mark.skip(reason="grouped value heads (HV > H) are not a k3lite layout")

# (B, T, H, HV, D, scale, gate normaliser, mask_p, q/k normalised in the kernel there); all fp16.
CHUNK_CASES = [
    (4, 1024, 4, 4, 128, 0.1, 1, 1.0, False),
    (2, 75, 4, 4, 64, 1, 0.01, 0, False),
    (2, 500, 3, 3, 60, 1, 1, 0, False),
    (2, 1000, 3, 3, 64, 0.1, 1, 0.5, False),
    (3, 1024, 4, 4, 100, 1, 0.1, 0, False),
    (4, 1024, 4, 4, 128, 0.1, 1, 0, True),
    (2, 1500, 4, 4, 128, 0.1, 10, 0, False),
    (4, 2048, 8, 8, 64, 0.1, 1, 0, False),
    (2, 256, 2, 4, 64, 1, 1, 0, False),
    (2, 512, 2, 8, 64, 1, 0.1, 0, True),
    (2, 1024, 4, 8, 128, 0.1, 1, 0, False),
]


def _params(cases, fmt, heads_at):
    """pytest params of ``cases``, those whose key and value head counts (at positions ``heads_at``) differ
    skipped."""
    h, hv = heads_at
    return [pytest.param(*case, id=fmt.format(*case), marks=[GROUPED] if case[hv] != case[h] else [])
            for case in cases]


@pytest.mark.parametrize("B,T,H,HV,D,scale,normaliser,mask_p,l2_in_kernel",
                         _params(CHUNK_CASES, "B{}-T{}-H{}-HV{}-D{}-scale{}-norm{}-mask{}-l2{}", (2, 3)))
def test_chunk(B, T, H, HV, D, scale, normaliser, mask_p, l2_in_kernel):
    case = ref.make_case(KIND, B, T, H, D, torch.float16, scale=scale, gate_normalizer=normaliser, mask_p=mask_p,
                         h0="zeros")
    ref.check_case(case, ref.GDN_RATIOS)


# The reference's chunk-size case is (B 1, T 64, H 2, HV 4, D 32, scale 0.1, float32); with ungrouped heads here
# (H = HV = 4). A chunk size the kernels cannot run must be refused by name.
CHUNK_SIZE_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.005, "dk": 0.005, "dv": 0.005, "dbeta": 0.01, "dg": 0.01,
                     "dh0": 0.005}


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_chunk_size(chunk_size):
    from k3lite import kernels

    case = ref.make_case(KIND, 1, 64, 4, 32, torch.float32, scale=0.1, h0="zeros")
    if chunk_size not in kernels.CHUNK_SIZES:
        with pytest.raises(ValueError, match="chunk_size"):
            ref.run_kernels(case, chunk_size=chunk_size)
        return
    ref.check_case(case, CHUNK_SIZE_RATIOS, chunk_size=chunk_size)


# (H, HV, D, mask_p, cu_seqlens); fp16, q and v standard normal, k normalised standard normal, g in fp16,
# initial states standard normal in fp16.
VARLEN_CASES = [
    (4, 4, 60, 0, [0, 15]),
    (4, 4, 64, 0, [0, 256, 500, 1000]),
    (4, 4, 64, 0.5, [0, 256, 500, 1000]),
    (4, 4, 100, 0, [0, 15, 100, 300, 1200, 2000]),
    (2, 4, 64, 0, [0, 256, 500, 1000]),
    (2, 8, 64, 0, [0, 256, 500, 1000]),
]
VARLEN_RATIOS = {"o": 0.005, "state": 0.005, "dq": 0.007, "dk": 0.008, "dv": 0.007, "dbeta": 0.015, "dg": 0.015,
                 "dh0": 0.007}


@pytest.mark.parametrize("H,HV,D,mask_p,cu_seqlens", _params(VARLEN_CASES, "H{}-HV{}-D{}-mask{}-cu{}", (0, 1)))
def test_chunk_varlen(H, HV, D, mask_p, cu_seqlens):
    ref.skip_without_cu_seqlens()
    case = ref.make_case(KIND, 1, cu_seqlens[-1], H, D, torch.float16, qk="randn_keys", v_dist="randn",
                         mask_p=mask_p, g_dtype=torch.float16, h0="randn", h0_dtype=torch.float16, d_state="rand",
                         cu_seqlens=cu_seqlens)
    ref.check_case(case, VARLEN_RATIOS)
