"""A small subset of the reference library's kernel grids (tests/test_grid_*_gpu.py) under the Triton interpreter.

The same rule and per-tensor ratios as the GPU grids (tests/grid_reference.py), at tiny shapes and in float32 (the
interpreter's only dtype): each family with the reference's input distributions, gates masked to zero or halved
or strong, initial states, and packed batches with an empty and a one-token sequence. In float32 the ratios are
far from binding; what these cases catch on a machine without a GPU is a wrong result (a misplaced decay, a
dropped gradient, a sequence leaking into the next), which the rule reports at order one.
"""

import pytest
import torch

from k3lite import kernels  # noqa: F401  (first: it switches on the Triton interpreter before triton is imported)

pytest.importorskip("triton")
if torch.cuda.is_available():  # the interpreter tests are for machines without CUDA
    pytest.skip("interpreter tests run only without CUDA", allow_module_level=True)

import grid_reference as ref

F32 = torch.float32
CPU = dict(device="cpu")

CASES = {
    # Gated DeltaNet: every gate masked (DeltaNet on keys in one orthant), strong gates, half the gates masked.
    "gdn-T70-D16-gates0": dict(kind="gated_delta_rule", B=1, T=70, H=2, D=16, scale=0.1, mask_p=1.0,
                               ratios=ref.GDN_RATIOS),
    "gdn-T63-D16-norm0.01": dict(kind="gated_delta_rule", B=1, T=63, H=1, D=16, scale=1, gate_normalizer=0.01,
                                 ratios=ref.GDN_RATIOS),
    "gdn-T65-D16-mask0.5-h0": dict(kind="gated_delta_rule", B=1, T=65, H=1, D=16, scale=0.1, mask_p=0.5,
                                   h0="randn", ratios=ref.GDN_RATIOS),
    # KDA: its gate distribution with half the gates masked, and the gate KDA computes in its layer.
    "kda-T63-D16-mask0.5": dict(kind="kda", B=1, T=63, H=1, D=16, scale=0.1, gate="logsigmoid_randn", mask_p=0.5,
                                h0="randn", ratios=ref.KDA_RATIOS),
    "kda-T70-D16-layer-gate": dict(kind="kda", B=1, T=70, H=1, D=16, scale=1, gate="kda_gate", h0="randn",
                                   ratios=ref.KDA_RATIOS),
    # DeltaNet: the reference's DeltaNet distributions (q, v standard normal, keys normalised standard normal).
    "delta-T56-D20": dict(kind="delta_rule", B=2, T=56, H=1, D=20, qk="randn_keys", v_dist="randn", h0="randn",
                          d_o="rand", d_state="rand", ratios=ref.DELTA_FP16_RATIOS),
}


@pytest.mark.parametrize("name", list(CASES))
def test_grid_case(name):
    spec = dict(CASES[name])
    kind, B, T, H, D, ratios = (spec.pop(key) for key in ("kind", "B", "T", "H", "D", "ratios"))
    case = ref.make_case(kind, B, T, H, D, F32, **spec, **CPU)
    ref.check_case(case, ratios)


# Packed batches: sequences not multiples of the chunk, an empty one and a one-token one, each from its own state.
VARLEN = {
    "gdn": dict(kind="gated_delta_rule", H=1, D=16, cu_seqlens=[0, 15, 15, 16, 80], ratios=ref.GDN_RATIOS),
    "kda": dict(kind="kda", H=2, D=16, cu_seqlens=[0, 1, 1, 40], gate="logsigmoid_randn",
                ratios=ref.KDA_VARLEN_RATIOS),
    "delta": dict(kind="delta_rule", H=2, D=16, cu_seqlens=[0, 0, 40, 41, 70], ratios=ref.DELTA_RATIOS),
}


@pytest.mark.parametrize("name", list(VARLEN))
def test_grid_varlen_case(name):
    ref.skip_without_cu_seqlens()
    spec = dict(VARLEN[name])
    kind, H, D, cu_seqlens, ratios = (spec.pop(key) for key in ("kind", "H", "D", "cu_seqlens", "ratios"))
    case = ref.make_case(kind, 1, cu_seqlens[-1], H, D, F32, qk="randn_keys", v_dist="randn", h0="randn",
                         d_state="rand", cu_seqlens=cu_seqlens, **spec, **CPU)
    ref.check_case(case, ratios)


def test_the_rule_fails_a_wrong_result():
    """The rule is not vacuous: the reference against itself with one decay dropped fails it."""
    case = ref.make_case("gated_delta_rule", 1, 20, 1, 16, F32, gate_normalizer=0.1, **CPU)
    o, state = ref.naive_recurrence("gated_delta_rule", case.q, case.k, case.v, case.g, case.beta,
                                    scale=case.scale, initial_state=case.h0)
    no_decay = case.g.clone()
    no_decay[:, 7] = 0.0
    o_wrong, _ = ref.naive_recurrence("gated_delta_rule", case.q, case.k, case.v, no_decay, case.beta,
                                      scale=case.scale, initial_state=case.h0)
    assert ref.compare("o", o, o, 0.005) is None
    assert ref.compare("o", o, o_wrong, 0.005) is not None
    assert ref.compare("state", state, torch.zeros_like(state) + 1e-7 * state, 0.005) is not None
