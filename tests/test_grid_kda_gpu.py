"""KDA's Triton path on the reference library's own grid (flash-linear-attention, tests/ops/test_kda.py).

A port of its chunk-kernel cases (parameters, input distributions and per-tensor ratios as that file states them),
judged by its rule against a float64 token loop (tests/grid_reference.py): output, final state and the gradients
of q, k, v, g, beta and the initial state. Where the reference computes KDA's gate inside its kernel
(``use_gate_in_kernel``: g = -exp(A_log) softplus(x + dt_bias)), the same gate is computed before the call, and
only its gradient with respect to g is compared (k3lite's kernels take the gate, not its parameters); its
``use_qk_l2norm_in_kernel`` likewise becomes a normalisation before the call. Its ``tma`` switch selects a copy
engine of its own kernels and has no counterpart. Its packed-batch cases are in test_grid_kda_varlen_gpu.py
(one file each, so that each finishes within a few minutes). Skipped without CUDA.
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import grid_reference as ref  # noqa: E402

KIND = "kda"

# (B, T, H, D, scale, gate normaliser, mask_p, q/k normalised in the kernel there, gate computed in the kernel
# there); all fp16, q, k, v uniform in [0, 1) (q and k then normalised), initial state standard normal.
CHUNK_CASES = [
    (1, 63, 1, 64, 1, 1, 0, False, False),
    (2, 500, 3, 60, 1, 1, 0, False, False),
    (2, 1000, 3, 64, 0.1, 1, 0.5, False, False),
    (3, 1024, 4, 100, 1, 0.1, 0, False, False),
    (4, 1024, 4, 128, 0.1, 1, 0, False, False),
    (4, 1024, 4, 128, 0.1, 1, 0, True, False),
    (2, 1500, 4, 128, 0.1, 10, 0, False, True),
    (4, 2048, 8, 64, 0.1, 1, 0, False, True),
]


@pytest.mark.parametrize("B,T,H,D,scale,normaliser,mask_p,l2_in_kernel,gate_in_kernel",
                         [pytest.param(*c, id="B{}-T{}-H{}-D{}-scale{}-norm{}-mask{}-l2{}-gate{}".format(*c))
                          for c in CHUNK_CASES])
def test_chunk(B, T, H, D, scale, normaliser, mask_p, l2_in_kernel, gate_in_kernel):
    case = ref.make_case(KIND, B, T, H, D, torch.float16, scale=scale,
                         gate="kda_gate" if gate_in_kernel else "logsigmoid_randn", gate_normalizer=normaliser,
                         mask_p=mask_p, beta_dtype=torch.float16, h0="randn")
    ref.check_case(case, ref.KDA_RATIOS)
