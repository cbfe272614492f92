"""DeltaNet's Triton path on the reference library's own grid (flash-linear-attention, tests/ops/test_delta.py).

Two versions of that file are ported (parameters, input distributions and per-tensor ratios as each states them):
an fp16 grid (B 2, H 3, T 56 / 211 / 400, D 60 / 110 / 200, scale D^-1/2, and one packed batch of five sequences
up to T = 2,000) and a bf16 grid (B 2, H 2, T 15 / 63 / 300 / 512, D 32 / 64 / 100 / 256, scale 1, and packed
batches of four sequences at random offsets). Each case is judged by the rule against a float64 token loop
(tests/grid_reference.py): output, final state and the gradients of q, k, v, beta and the initial state.
The reference's ``head_first`` layout switch has no counterpart (k3lite takes [B, T, H, D] only). Skipped without CUDA.
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

import grid_reference as ref  # noqa: E402

KIND = "delta_rule"
CASE = dict(qk="randn_keys", v_dist="randn", h0="randn")


@pytest.mark.parametrize("T,D", [(56, 60), (211, 110), (400, 200)])
def test_chunk_fp16(T, D):
    case = ref.make_case(KIND, 2, T, 3, D, torch.float16, beta_dtype=torch.float16, d_o="rand", d_state="rand",
                         **CASE)
    ref.check_or_refused(case, ref.DELTA_FP16_RATIOS, D)


def test_chunk_varlen_fp16():
    ref.skip_without_cu_seqlens()
    cu_seqlens = [0, 15, 100, 300, 1203, 2000]
    case = ref.make_case(KIND, 1, cu_seqlens[-1], 2, 64, torch.float16, scale=1.0, beta_dtype=torch.float16,
                         h0_dtype=torch.float16, d_state="rand", cu_seqlens=cu_seqlens, **CASE)
    ref.check_case(case, ref.DELTA_RATIOS)


@pytest.mark.parametrize("D", [64, 32, 100, 256])
@pytest.mark.parametrize("T", [15, 63, 300, 512])
def test_chunk_bf16(T, D):
    case = ref.make_case(KIND, 2, T, 2, D, torch.bfloat16, scale=1.0, beta_dtype=torch.bfloat16, d_o="rand",
                         d_state="rand", **CASE)
    ref.check_or_refused(case, ref.DELTA_FP16_RATIOS, D)


def random_offsets(T, n_seq, seed=42):
    """0, n_seq - 1 distinct cut points in [16, T), T: the reference's random split of a packed batch."""
    gen = torch.Generator().manual_seed(seed)
    cuts = torch.arange(16, T)[torch.randperm(T - 16, generator=gen)[:n_seq - 1]]
    return [0, *sorted(int(c) for c in cuts), T]


@pytest.mark.parametrize("D", [64, 32, 100, 256])
@pytest.mark.parametrize("T", [63, 286, 300, 512])
def test_chunk_varlen_bf16(T, D):
    ref.skip_without_cu_seqlens()
    cu_seqlens = random_offsets(T, 4)
    case = ref.make_case(KIND, 1, T, 2, D, torch.bfloat16, scale=1.0, beta_dtype=torch.bfloat16,
                         h0_dtype=torch.bfloat16, d_state="rand", cu_seqlens=cu_seqlens, **CASE)
    ref.check_or_refused(case, ref.DELTA_RATIOS, D)
