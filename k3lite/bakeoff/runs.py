"""One bake-off run: build the model, train it (bf16 autocast + Triton on CUDA), measure, return a record.

On CUDA no step synchronises: the losses stay on the GPU in one buffer and are read once at the end.
The first step checks that every recurrent layer went through the Triton forward AND backward
(``TritonPathError`` otherwise). After a few eager steps the whole training step (forward, backward,
clipping, AdamW) is captured once as a CUDA graph and replayed: these models are small enough that
launching some 500 kernels per step from Python, not the GPU, sets the pace. A replay runs the very
kernels the eager step ran; if capture fails the run goes on eagerly and records why.

Held-out evaluation: ``spec.evals`` times in a run (every 10 % of its steps by default, the last at the end)
the model is scored on the same ``2 x eval_batch`` held-out sequences, drawn from a generator seeded with
:data:`EVAL_SEED` (no training run uses that seed; ``lm`` evaluates on the corpus's validation split). Every run
of every mixer and seed is therefore scored on the same data, and the record's ``evaluations`` answer
"accuracy after N steps" for each evaluated N; ``steps_to_learn`` is the first evaluated step whose accuracy
reaches ``stats.SUCCESS_THRESHOLD`` (None: never). ``cost`` says what the run took (wall, training and
evaluation seconds, device) so a grid can be sized from stored runs. Records written before periodic
evaluation have neither field (their key has no ``|ev``); readers treat them as one final evaluation.
"""

from __future__ import annotations

import math
import re
import time
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from k3lite.bakeoff.models import BUILTIN, build_model, matched_mlp_hidden, num_parameters
from k3lite.bakeoff.stats import steps_to_learn
from k3lite.bakeoff.tasks import bits_per_byte, corpus_fingerprint, make_task
from k3lite.train import learning_rate, lm_loss

NO_DECAY_NAMES = ("A_log", "decay.bias", "dt_bias")
CURVE_POINTS = 50
EVAL_BATCH = 256
EVALS = 10               # held-out evaluations per run: every 10 % of its steps
EVAL_SEED = 987_654_321  # the held-out batches' generator seed; training seeds are small integers
EAGER_STEPS = 3   # before capture: the Triton kernels compile, AdamW creates its state, autocast settles


class TritonPathError(RuntimeError):
    """A recurrent layer did not train through k3lite's Triton kernels on CUDA."""


@dataclass(frozen=True)
class RunSpec:
    task: str
    mixer: str
    d_model: int
    lr: float
    seed: int
    steps: int
    batch_size: int = 64
    num_layers: int = 4
    num_heads: int = 2
    vocab_size: int = 512
    seq_len: int = 256
    lm_seq_len: int = 2048
    eval_batch: int = EVAL_BATCH
    phase: str = "seeds"
    cuda_graph: bool = True   # how the step is launched, not what it computes: not part of key()
    evals: int = EVALS

    def key(self) -> str:
        """Identity of a run in the store: everything that changes its result. ``|ev`` marks the protocol with
        periodic evaluation on the fixed held-out seed (keys without it are the earlier single evaluation)."""
        return (f"{self.task}|{self.mixer}|d{self.d_model}|L{self.num_layers}|H{self.num_heads}|v{self.vocab_size}"
                f"|T{self.seq_len if self.task != 'lm' else self.lm_seq_len}|b{self.batch_size}"
                f"|e{self.eval_batch}|lr{self.lr:g}|s{self.seed}|n{self.steps}|ev{self.evals}")


def evaluation_steps(steps: int, evals: int = EVALS) -> list[int]:
    """The steps after which a run of ``steps`` steps is evaluated: ``evals`` evenly spaced, the last ``steps``."""
    if steps < 1 or evals < 1:
        raise ValueError(f"steps and evals must be >= 1, got steps={steps}, evals={evals}")
    return sorted({max(1, math.ceil(steps * i / evals)) for i in range(1, evals + 1)})


def device_name(device: torch.device) -> str:
    """The accelerator's name (``NVIDIA H100 80GB HBM3``) or the CPU's, for the cost record."""
    import platform

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def param_groups(model: torch.nn.Module, weight_decay: float):
    """AdamW groups as published recipes: no decay on norms, biases, embeddings, A_log and dt biases."""
    decay, no_decay = [], []
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    for name, p in model.named_parameters():
        skip = p.ndim < 2 or id(p) in embeddings or any(part in name for part in NO_DECAY_NAMES)
        (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@contextmanager
def count_triton_calls():
    """Counts calls of the Triton chunked forward and of its all-Triton backward while the block runs."""
    from k3lite import kernels
    from k3lite.kernels import chunk_bwd_triton

    counts = {"forward": 0, "backward": 0}
    forward, backward = kernels.run_chunked, chunk_bwd_triton.chunk_backward

    def counted_forward(*args, **kwargs):
        counts["forward"] += 1
        return forward(*args, **kwargs)

    def counted_backward(*args, **kwargs):
        counts["backward"] += 1
        return backward(*args, **kwargs)

    kernels.run_chunked, chunk_bwd_triton.chunk_backward = counted_forward, counted_backward
    try:
        yield counts
    finally:
        kernels.run_chunked, chunk_bwd_triton.chunk_backward = forward, backward


def _train_step(model, optimizer, batch, autocast):
    inputs, targets, _ = batch
    # cache_enabled=False: a CUDA graph must not capture autocast's weight-cast cache (PyTorch's graph notes)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast, cache_enabled=False):
        loss = lm_loss(model(inputs), targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.detach()


class GraphedStep:
    """The training step captured once as a CUDA graph; ``__call__`` copies a batch in and replays it.

    Follows PyTorch's whole-network capture recipe: eager warm-up steps on a side stream, gradients set
    to None before capture (so backward allocates them from the graph's pool and every replay overwrites
    them), an AdamW built with ``capturable=True`` and a tensor learning rate that is updated in place.
    """

    def __init__(self, model, optimizer, batch, autocast):
        self.batch = batch   # the batch of the capture step, replayed first
        inputs, targets, score = batch
        self.inputs, self.targets = inputs.clone(), targets.clone()
        self.graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.loss = _train_step(model, optimizer, (self.inputs, self.targets, score), autocast)

    def __call__(self, batch):
        inputs, targets, _ = batch
        self.inputs.copy_(inputs)
        self.targets.copy_(targets)
        self.graph.replay()
        return self.loss


def _set_learning_rate(optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)      # in place: the captured AdamW reads this tensor at every replay
        else:
            group["lr"] = value


@torch.no_grad()
def evaluate(model, task, generator, device, autocast, eval_batch: int, batches: int = 2, decays: bool = True):
    """Metric on held-out batches: accuracy on the scored positions, or (lm) bits/byte and probe recall; with
    ``decays`` also the gates' retention (``decay_summary``)."""
    model.eval()
    correct = scored = 0
    loss_sum = 0.0
    for _ in range(batches):
        if task.name == "lm":
            inputs, targets, score = task.sample(max(1, eval_batch // 16), generator, device, split="val")
        else:
            inputs, targets, score = task.sample(eval_batch, generator, device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(inputs)
        loss_sum += lm_loss(logits.float(), targets).item()
        correct += (logits.argmax(-1)[score] == targets[score]).sum().item()
        scored += score.sum().item()
    retention = decay_summary(model, inputs, autocast) if decays else {}
    model.train()
    recall = correct / max(1, scored)
    if task.name == "lm":
        return {"val_bpb": bits_per_byte(loss_sum / batches), "probe_recall": recall, **retention}
    return {"accuracy": recall, "val_loss": loss_sum / batches, **retention}


def _held_out(model, task, spec, device, cuda, *, decays: bool) -> dict:
    """One held-out evaluation on the fixed :data:`EVAL_SEED` batches (the same at every point of every run)."""
    generator = torch.Generator(device=device).manual_seed(EVAL_SEED)
    return evaluate(model, task, generator, device, cuda, spec.eval_batch, decays=decays)


@torch.no_grad()
def decay_summary(model, inputs, autocast) -> dict:
    """How much memory the trained gates keep, per gated layer: the mean retention exp(g) per token and the
    fraction of (token, channel) gates above 0.99 (memory of 100+ tokens). Empty for ungated models."""
    gated = [b.mixer for b in model.blocks if hasattr(b.mixer, "decay") and hasattr(b.mixer, "A_log")]
    if not gated:
        return {}
    seen = {}
    hooks = [m.register_forward_pre_hook(lambda module, args: seen.__setitem__(module, args[0])) for m in gated]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        model(inputs[: min(8, len(inputs))])
    for hook in hooks:
        hook.remove()
    retention = [torch.exp(m.log_decay(seen[m]).float()) for m in gated]
    return {"retention_mean": [r.mean().item() for r in retention],
            "retention_above_0.99": [(r > 0.99).float().mean().item() for r in retention]}


class Diverged(NamedTuple):
    """Where and how a run's loss or weights turned non-finite: the run stops and is stored as diverged."""

    step: int
    reason: str


_NON_FINITE_WORDS = re.compile(r"\b(nan|-?inf)\b", re.IGNORECASE)


def _is_divergence(err: ValueError, model) -> bool:
    """Whether a ``ValueError`` raised while training is the ops' value check meeting a non-finite beta or g
    (``k3lite._validate.check_beta_values``/``check_gate_values`` raise ValueError on the CPU; on CUDA the same
    check is a device-side assert): the message names a NaN/inf, or the weights are no longer finite."""
    return bool(_NON_FINITE_WORDS.search(str(err))) or not _weights_finite(model)


@torch.no_grad()
def _weights_finite(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def failed_record(spec: RunSpec, reason: str) -> dict:
    """The stored record of a run that could not finish (its worker's CUDA context died, or the worker
    itself): the spec, ``status: "failed"``, the reason; no metric. A later result for its key replaces it."""
    return {"key": spec.key(), **asdict(spec), "status": "failed", "reason": reason[-2000:], "metric": None}


def run(spec: RunSpec, device: str | torch.device = "cpu", *, check_triton: bool = True, timing_only=False) -> dict:
    """Train one model as ``spec`` says and return its record (without provenance).

    A run whose loss or weights turn non-finite returns a record with ``status: "diverged"``,
    ``diverged_step`` and ``reason``, and no metric (on the CPU it stops at once; on CUDA, where no step
    synchronises, the losses are checked at the end)."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    task = make_task(spec.task, vocab_size=spec.vocab_size, seq_len=spec.seq_len, lm_seq_len=spec.lm_seq_len)
    dims = dict(vocab_size=task.vocab_size, d_model=spec.d_model, num_layers=spec.num_layers,
                num_heads=spec.num_heads)
    mlp_hidden = matched_mlp_hidden(spec.mixer, **dims)   # before seeding: its first call builds models
    torch.manual_seed(spec.seed)
    model = build_model(spec.mixer, **dims, mlp_hidden=mlp_hidden, backend="triton" if cuda else "torch").to(device)
    graphed = cuda and spec.cuda_graph
    # A graph needs the learning rate as a device tensor (changed in place) and a capturable AdamW.
    lr = torch.tensor(spec.lr, device=device) if graphed else spec.lr
    optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=lr, betas=(0.9, 0.95), fused=cuda,
                                  capturable=graphed)
    generator = torch.Generator(device=device).manual_seed(spec.seed)
    warmup = max(1, spec.steps // 10)
    losses = torch.zeros(spec.steps, device=device)
    start = time.perf_counter()
    timed_from, timed_start = min(5, spec.steps - 1), start
    triton_calls = None
    step_fn, graph_error, graphed_steps = None, None, 0
    side = torch.cuda.Stream(device) if graphed else None
    diverged, steps_done = None, spec.steps
    periodic = set(evaluation_steps(spec.steps, spec.evals)) - {spec.steps}   # the last one follows the loop
    evaluations, eval_seconds, eval_seconds_timed = [], 0.0, 0.0
    for step in range(spec.steps):
        _set_learning_rate(optimizer, learning_rate(step, spec.steps, spec.lr, warmup))
        if step == timed_from:
            if cuda:
                torch.cuda.synchronize(device)
            timed_start = time.perf_counter()
        if graphed and step == EAGER_STEPS:
            step_fn, graph_error = _capture(model, optimizer, task.sample(spec.batch_size, generator, device), device)
        if step_fn is not None:   # graphed steps are evaluated like eager ones (below), not skipped
            batch = step_fn.batch if step == EAGER_STEPS else task.sample(spec.batch_size, generator, device)
            losses[step] = step_fn(batch)
            graphed_steps += 1
        else:
            # Before capture the eager steps run on a side stream (the capture recipe). The batch is drawn on that
            # stream too: a batch drawn on the default stream and read on another would race its own writes.
            if side is not None:
                side.wait_stream(torch.cuda.current_stream(device))
            try:
                with _maybe_stream(side):
                    batch = task.sample(spec.batch_size, generator, device)
                    if step == 0 and cuda and check_triton:
                        with count_triton_calls() as counts:
                            losses[step] = _train_step(model, optimizer, batch, cuda)
                        triton_calls = _check_triton_path(model, counts, spec.mixer)
                    else:
                        losses[step] = _train_step(model, optimizer, batch, cuda)
            except ValueError as err:
                if cuda or not _is_divergence(err, model):
                    raise
                diverged, steps_done = Diverged(step, f"{type(err).__name__}: {err}"), step
                break
            if side is not None:
                torch.cuda.current_stream(device).wait_stream(side)
            if not cuda and not math.isfinite(losses[step].item()):   # on the CPU a step costs more than this read
                diverged, steps_done = Diverged(step, f"the training loss is {losses[step].item()}"), step + 1
                break
        if step + 1 in periodic and not timing_only:
            began = time.perf_counter()
            # NaN weights would trip the ops' value check, on CUDA a device assert that ends the process
            if not _weights_finite(model):
                diverged, steps_done = Diverged(step, "the weights are not finite"), step + 1
                break
            try:
                point = _held_out(model, task, spec, device, cuda, decays=False)
            except ValueError as err:
                if cuda or not _is_divergence(err, model):
                    raise
                diverged, steps_done = Diverged(step, f"evaluation: {type(err).__name__}: {err}"), step + 1
                break
            evaluations.append({"step": step + 1, **point})
            spent = time.perf_counter() - began
            eval_seconds += spent
            eval_seconds_timed += spent if step >= timed_from else 0.0
    if cuda:
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    loss_list = losses[:steps_done].tolist()
    if diverged is None:
        bad = next((i for i, value in enumerate(loss_list) if not math.isfinite(value)), None)
        if bad is not None:
            diverged = Diverged(bad, f"the training loss is {loss_list[bad]}")
        elif not _weights_finite(model):
            diverged = Diverged(spec.steps - 1, "the weights are not finite after the last update")
    timed_steps = max(0, steps_done - timed_from)
    timed_seconds = max(1e-9, end - timed_start - eval_seconds_timed)   # periodic evaluations are not training
    every = max(1, spec.steps // CURVE_POINTS)
    tail = loss_list[-10:] or [float("nan")]
    record = {"key": spec.key(), **asdict(spec), "seq_len_used": task.seq_len,
              "parameters": num_parameters(model), "mlp_hidden": model.blocks[0].mlp[0].out_features,
              "metric_name": task.metric, "higher_is_better": task.higher_is_better,
              "curve": {"step": list(range(0, steps_done, every)), "loss": loss_list[::every]},
              "final_loss": sum(tail) / len(tail),
              "seconds_per_step": timed_seconds / max(1, timed_steps),
              "first_steps_s": timed_start - start,
              "tokens_per_s": timed_steps * spec.batch_size * task.seq_len / timed_seconds,
              "train_s": end - start - eval_seconds, "chance": task.chance, "triton_calls": triton_calls,
              "backend": "triton" if cuda else "torch", "device": str(device), "graphed_steps": graphed_steps}
    if graph_error:
        record["cuda_graph_error"] = graph_error
    if diverged is None and not timing_only:
        began = time.perf_counter()
        try:
            metrics = _held_out(model, task, spec, device, cuda, decays=True)
        except ValueError as err:
            if cuda or not _is_divergence(err, model):
                raise
            diverged = Diverged(spec.steps, f"evaluation: {type(err).__name__}: {err}")
        else:
            if not all(math.isfinite(v) for v in metrics.values() if isinstance(v, float)):
                diverged = Diverged(spec.steps, f"the evaluation metrics are not finite: {metrics}")
            else:
                evaluations.append({"step": spec.steps, **{k: v for k, v in metrics.items()
                                                            if not isinstance(v, list)}})
        eval_seconds += time.perf_counter() - began
    wall = time.perf_counter() - start
    record["cost"] = {"wall_s": wall, "train_s": record["train_s"], "eval_s": eval_seconds, "steps": steps_done,
                      "device": str(device), "device_name": device_name(device)}
    if not timing_only:
        record["evaluations"] = evaluations
        learned = steps_to_learn(evaluations, task.metric) if task.higher_is_better else None
        record["steps_to_learn"] = learned
    if diverged is not None:
        record.update(status="diverged", diverged_step=diverged.step, reason=diverged.reason[:1000], metrics={},
                      metric=None, wall_s=wall)
        return record
    if timing_only:
        return record
    record.update(metrics=metrics, metric=metrics[task.metric], wall_s=wall)
    if task.name == "lm":
        record["corpus"] = corpus_fingerprint(device)
    return record


def _maybe_stream(stream):
    return torch.cuda.stream(stream) if stream is not None else nullcontext()


def _capture(model, optimizer, batch, device):
    """(GraphedStep, None), or (None, the reason) when this model cannot be captured: the run goes on eagerly."""
    torch.cuda.synchronize(device)
    try:
        return GraphedStep(model, optimizer, batch, autocast=True), None
    except RuntimeError as err:
        torch.cuda.synchronize(device)
        return None, f"{type(err).__name__}: {err}"[:500]


def _check_triton_path(model, counts, mixer) -> dict:
    """Built-in mixers: exactly one Triton forward and backward per recurrent layer. A custom op may use
    anything; its counts are recorded, not checked."""
    expected = model.recurrent_layers()
    if mixer in BUILTIN and (counts["forward"] != expected or counts["backward"] != expected):
        raise TritonPathError(
            f"mixer {mixer!r}: {expected} recurrent layers, but the Triton chunked forward ran {counts['forward']} "
            f"times and the Triton backward {counts['backward']} times in the first step; the bake-off must train "
            "through backend='triton' on CUDA")
    return dict(counts, expected=expected)
