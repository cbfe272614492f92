"""KDA's Triton path on packed batches (``cu_seqlens``) of the reference library's grid (flash-linear-attention,
tests/ops/test_kda.py, its varlen cases): parameters, distributions and per-tensor ratios as that file states them,
judged by its rule against a float64 token loop per sequence (tests/grid_reference.py). Skipped without CUDA, and
while ``k3lite.kernels.chunked`` takes no ``cu_seqlens``.
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import grid_reference as ref  # noqa: E402

KIND = "kda"

# (H, D, mask_p, cu_seqlens); fp16, q and v standard normal, k normalised standard normal.
VARLEN_CASES = [
    (4, 60, 0, [0, 15]),
    (4, 64, 0, [0, 256, 500, 1000]),
    (4, 128, 0.5, [0, 256, 500, 1000]),
    (4, 100, 0, [0, 15, 100, 300, 1200, 2000]),
    (4, 256, 0, [0, 100, 300, 1200, 3000, 4096]),
]


@pytest.mark.parametrize("H,D,mask_p,cu_seqlens",
                         [pytest.param(*c, id="H{}-D{}-mask{}-cu{}".format(*c)) for c in VARLEN_CASES])
def test_chunk_varlen(H, D, mask_p, cu_seqlens):
    ref.skip_without_cu_seqlens()
    case = ref.make_case(KIND, 1, cu_seqlens[-1], H, D, torch.float16, qk="randn_keys", v_dist="randn",
                         gate="logsigmoid_randn", mask_p=mask_p, beta_dtype=torch.float16, h0="randn",
                         d_state="rand", cu_seqlens=cu_seqlens)
    ref.check_or_refused(case, ref.KDA_VARLEN_RATIOS, D)
