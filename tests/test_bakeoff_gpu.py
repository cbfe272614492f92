"""The bake-off's CUDA-graph training step against the eager one (skipped without a GPU).

A replayed graph must train exactly as the step launched from Python: same losses step by step (up to the
run-to-run spread of two eager runs), every step after the warm-up replayed, no capture error.
"""

import dataclasses

import pytest
import torch

from k3lite.bakeoff.models import BUILTIN
from k3lite.bakeoff.runs import EAGER_STEPS, RunSpec, run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

STEPS = 40
SPEC = dict(task="rebind", d_model=64, lr=3e-3, seed=0, steps=STEPS, batch_size=16, eval_batch=16)


def _losses(record):
    return torch.tensor(record["curve"]["loss"])


@pytest.mark.parametrize("mixer", BUILTIN)
def test_graphed_step_trains_as_the_eager_step(mixer):
    eager = run(RunSpec(mixer=mixer, cuda_graph=False, **SPEC), "cuda", timing_only=True)
    again = run(RunSpec(mixer=mixer, cuda_graph=False, **SPEC), "cuda", timing_only=True)
    graphed = run(RunSpec(mixer=mixer, cuda_graph=True, **SPEC), "cuda", timing_only=True)
    assert "cuda_graph_error" not in graphed, graphed.get("cuda_graph_error")
    assert graphed["graphed_steps"] == STEPS - EAGER_STEPS and eager["graphed_steps"] == 0
    spread = (_losses(eager) - _losses(again)).abs().max().item()
    gap = (_losses(eager) - _losses(graphed)).abs().max().item()
    # Triton's backward accumulates some gradients with atomics, so two eager runs may differ in the last bits;
    # the graph may differ by as much as that, plus bf16 rounding of one step (1e-2 of a loss near 6).
    assert gap <= max(4 * spread, 1e-2), f"{mixer}: graph vs eager {gap:.3g}, eager vs eager {spread:.3g}"
    assert _losses(graphed)[-1] < _losses(graphed)[0]


def test_spec_key_ignores_how_the_step_is_launched():
    spec = RunSpec(mixer="kda", cuda_graph=True, **SPEC)
    assert spec.key() == dataclasses.replace(spec, cuda_graph=False).key()


@pytest.mark.parametrize("cuda_graph", [False, True])
def test_every_periodic_evaluation_runs_on_either_launch_path(cuda_graph):
    # The graphed loop once skipped the periodic evaluations: a run kept only its final one.
    spec = RunSpec(mixer="delta_rule", cuda_graph=cuda_graph, evals=4, **SPEC)
    record = run(spec, "cuda")
    assert [point["step"] for point in record["evaluations"]] == [10, 20, 30, 40]
    assert record["graphed_steps"] == (STEPS - EAGER_STEPS if cuda_graph else 0)
