"""``python -m k3lite.bakeoff``: the grid, the learning-rate sweep, the seeds, workers, measure, merge.

Grid: every task of --tasks x every mixer of --mixers; MQAR tasks at every --d-models width, the
others (zoology<pairs>: MQAR as Zoology generates it, vocabulary 8,192) at the largest or at --width-of.
Phases (--phase all runs the three, each run starting as soon as it can):

  lr      seeds 0 .. --lr-seeds - 1 at every learning rate of --lrs (--lm-lrs for lm) on the cells that set a
          learning rate: each task for itself, every MQAR task from --mqar-lr-task; the choice per (task
          family, mixer, width) is stored with its evidence in the store's "lr_choices" (rule: decide_lr);
  seeds   seeds 0 .. --seeds - 1 at each cell's chosen learning rate (the sweep's seeds are reused); a cell
          whose every rate stayed at chance is stored as "all at chance" and gets no seeds;
  close   seeds up to --close-seeds for both cells of a story pair (STORY_PAIRS) that neither Fisher's exact
          test on success counts nor the means rule of k3lite.bakeoff.stats can call with --seeds.

Every run is evaluated on fixed held-out batches --evals times (every 10 % of its steps by default), so a
record gives accuracy after N steps and steps-to-learn (first evaluation at accuracy >= 0.9), and its cost.

Runs are stored in --out as each finishes (default runs/bakeoff.json, git-ignored scratch); a stored run is never
redone. A run whose loss or weights turn non-finite is stored as diverged (a result: the worst of its sweep); one
whose worker was lost (on CUDA a device-side assert kills the worker's context) is stored as failed, with the
reason, and --retry-failed runs it again. Saving locks the store, re-reads it and adds to it, so several
processes may share one --out. Every flag is checked first: a user error is one line on stderr, exit 2.
The course's evidence, figures/bakeoff.json, is written only when named (--out figures/bakeoff.json, or --merge
into it); --table reads it by default.

Examples:
  python -m k3lite.bakeoff --device cpu --tasks rebind4 --mixers delta_rule,kda --d-models 32 --steps 50
  python -m k3lite.bakeoff --measure --gpus 1 --workers-per-gpu 3        # seconds per step, grid estimate
  python -m k3lite.bakeoff --gpus 8 --workers-per-gpu 3 --deadline-s 400  # the sweep, resumable
  python -m k3lite.bakeoff --tasks mqar32,mqar64 --d-models 128 --mixers kda,my_pkg.my_mixer:chunked
  python -m k3lite.bakeoff --table                                        # the course's results, story pairs
  python -m k3lite.bakeoff --table --store runs/bakeoff.json              # success rates of another store
  python -m k3lite.bakeoff --merge runs/bakeoff.json --out figures/bakeoff.json   # add runs to the evidence
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import queue
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import replace
from pathlib import Path

from k3lite.bakeoff import store
from k3lite.bakeoff.models import BUILTIN, HYBRID_PERIOD, check_mixer
from k3lite.bakeoff.runs import RunSpec, TritonPathError, failed_record, run
from k3lite.bakeoff.stats import (
    BEATS_Z,
    SUCCESS_THRESHOLD,
    beats,
    beats_by_success,
    median,
    success_rate,
    success_verdict,
    summarize,
)
from k3lite.bakeoff.tasks import AT_CHANCE_FRACTION, TASK_FAMILIES, at_chance, family, make_task

DEFAULT_TASKS = "mqar16,mqar32,mqar64,mqar128,rebind,switch,twoscale,lm"
# The MQAR budget must be long enough that softmax attention and DeltaNet learn the grid's smallest MQAR on every
# seed; 1,000 steps measured plateau escape, not capability (a d 64 layer went from 0.02 at 800 steps to 0.98 at
# 2,400). Measured on MQAR-16 at d 64 (figures/bakeoff.json, the published layers' runs): at every swept rate and
# seed, softmax attention and DeltaNet pass accuracy 0.9 by step 600 and end at >= 0.998 after 2,000 steps.
MQAR_STEPS = 2000
DEFAULT_STEPS = f"mqar={MQAR_STEPS},zoology={MQAR_STEPS},rebind=2000,switch=2000,twoscale=2000,lm=1000"
DEFAULT_BATCH = "mqar=64,zoology=64,rebind=64,switch=64,twoscale=64,lm=8"
DEFAULT_VOCAB = "512,zoology=8192"   # Zoology's experiments use 8,192; the CPU-sized rows keep 512
PHASES = ("lr", "seeds", "close", "all")
# Learning-rate choice (decide_lr): a rate ties with the best when its mean is within the larger of these.
LR_TIE_ABS = 0.01   # metric units: closer means are a tie whatever the spread
LR_TIE_Z = 2.0      # standard errors of the difference of the two means (per-seed spread)
LR_RULE = (f"value of a run: its metric (a diverged or failed run: the sweep's worst, i.e. the worse of the "
           f"task's chance level and the worst finite metric of the sweep); a rate's score: the "
           f"mean over seeds; every rate's mean at chance (closing < {AT_CHANCE_FRACTION:g} of the way from chance "
           f"to perfect, with >= 2 rates): 'all at chance', no choice; otherwise a rate ties with the best when the "
           f"best mean exceeds it by at most max({LR_TIE_ABS:g}, {LR_TIE_Z:g} standard errors of the difference), "
           f"and among the tied rates the one nearest the middle of the sorted list wins (equal distance: the "
           f"smaller rate)")
# The steps of the story: each pair is (the earlier mechanism, the one meant to fix its failure).
STORY_PAIRS = (("linear_attention", "delta_rule"), ("delta_rule", "gated_delta_rule"), ("gated_delta_rule", "kda"),
               ("kda", "k3_hybrid"), ("softmax", "k3_hybrid"))
WATCHDOG_S = 1.0   # how often a worker looks whether its parent is still alive


def per_family(text: str, name: str) -> dict[str, int]:
    """``"2000"`` (every task), ``"mqar=2000,lm=800"`` or ``"512,zoology=8192"`` (a bare number sets every family,
    then the pairs override it) -> ``{family: int}``, every value >= 1."""
    try:
        values = {}
        for item in text.split(","):
            family_name, sep, value = item.partition("=")
            if sep:
                values[family_name.strip()] = int(value)
            else:
                values = {**{f: int(item) for f in TASK_FAMILIES}, **values}
    except ValueError as err:
        raise ValueError(f"{name} must be an integer or family=integer pairs, got {text!r}") from err
    unknown = sorted(set(values) - set(TASK_FAMILIES))
    if unknown:
        raise ValueError(f"{name} names unknown task families {unknown}; known: {', '.join(TASK_FAMILIES)}")
    if any(v < 1 for v in values.values()):
        raise ValueError(f"{name} values must be >= 1, got {text!r}")
    return values


def _floats(text: str, name: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise ValueError(f"{name} must be comma-separated numbers, got {text!r}") from err
    if not values or any(not (math.isfinite(v) and v > 0) for v in values):
        raise ValueError(f"{name} must be finite positive numbers, got {text!r}")
    return values


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description's examples keep their lines; every option's help ends with its default."""

    def _get_help_string(self, action):
        text = action.help or ""
        unset = action.default is None or action.default is False or action.default == argparse.SUPPRESS
        if "default" in text or unset or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        """A user error: one line on stderr, exit status 2 (argparse's convention), no usage block or traceback."""
        self.exit(2, f"{self.prog}: error: {' '.join(str(message).split())}\n")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m k3lite.bakeoff", description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("--tasks", default=DEFAULT_TASKS,
                   help="comma-separated: mqar<pairs>, rebind[<keys>], switch, twoscale, lm")
    p.add_argument("--mixers", default=",".join(BUILTIN),
                   help="comma-separated built-in names, or module:function: a learner's recurrence, which "
                        "IMPORTS that module (running its top-level code) and calls the function as the op")
    p.add_argument("--d-models", default="64,128", help="MQAR widths; the other tasks use the largest")
    p.add_argument("--width-of", default="",
                   help="the width of a non-MQAR family, e.g. rebind=64,lm=128 (default: the largest of --d-models)")
    p.add_argument("--lrs", default="1e-3,3e-3,1e-2", help="learning rates of the sweep (seed 0)")
    p.add_argument("--lm-lrs", default="1e-3,3e-3,6e-3", help="learning rates of the lm sweep")
    p.add_argument("--mqar-lr-task", default=None,
                   help="the MQAR task whose sweep sets every MQAR lr (default mqar64 if listed, else the largest)")
    p.add_argument("--lr-task", default=None,
                   help="take every non-lm cell's learning rate from this task's sweep at the same width "
                        "(default: each task its own sweep; MQAR tasks from --mqar-lr-task)")
    p.add_argument("--lr-seeds", type=int, default=2, help="seeds per learning rate of the sweep")
    p.add_argument("--seeds", type=int, default=5, help="seeds per cell at its chosen learning rate")
    p.add_argument("--close-seeds", type=int, default=0,
                   help="seeds for both cells of a story pair that neither rule can call with --seeds "
                        "(<= --seeds: off)")
    p.add_argument("--evals", type=int, default=10,
                   help="held-out evaluations per run, evenly spaced (the last at the end)")
    p.add_argument("--steps", default=DEFAULT_STEPS, help="training steps: N for every task, or family=N pairs")
    p.add_argument("--batch-size", default=DEFAULT_BATCH, help="sequences per step: N, or family=N pairs")
    p.add_argument("--vocab", default=DEFAULT_VOCAB,
                   help="vocabulary of the synthetic tasks: N for every family, or N,family=N pairs")
    p.add_argument("--seq-len", type=int, default=256, help="sequence length of the synthetic tasks")
    p.add_argument("--lm-seq-len", type=int, default=2048, help="sequence length of lm")
    p.add_argument("--num-layers", type=int, default=4,
                   help=f"layers of every model (k3_hybrid: a multiple of {HYBRID_PERIOD})")
    p.add_argument("--num-heads", type=int, default=2, help="heads of every mixer")
    p.add_argument("--eval-batch", type=int, default=256, help="sequences per evaluation batch")
    p.add_argument("--phase", default="all",
                   help=f"one of {PHASES}: sweep, seeds at the best lr, extra seeds for close pairs, or all three")
    p.add_argument("--out", "--store", dest="out", default=None,
                   help=f"the JSON store runs are added to (default: {store.SCRATCH}, git-ignored scratch; with "
                        f"--table: {store.COMMITTED}, the course's evidence, which is written only when named)")
    p.add_argument("--device", default="auto", help="cpu, cuda or auto")
    p.add_argument("--no-cuda-graph", dest="cuda_graph", action="store_false",
                   help="launch every CUDA training step from Python (default: capture the step once, replay it)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs to use (CUDA)")
    p.add_argument("--workers-per-gpu", type=int, default=3,
                   help="worker processes per GPU (on the CPU: processes in all; 1 runs in this process)")
    p.add_argument("--deadline-s", type=float, default=0.0, help="start no run after this many seconds (0: none)")
    p.add_argument("--measure", action="store_true", help="time a short run per mixer and task, size the grid")
    p.add_argument("--measure-steps", type=int, default=40, help="steps of each --measure run")
    p.add_argument("--no-measure-learn", dest="measure_learn", action="store_false",
                   help="measure timings only (default: also train the MQAR learnability runs)")
    p.add_argument("--merge", nargs="+", metavar="JSON",
                   help="add the runs of these stores to --out (its own runs are kept) and exit")
    p.add_argument("--retry-failed", action="store_true",
                   help="run again the runs stored as failed (a lost worker); a stored diverged run is a result "
                        "and is never redone")
    p.add_argument("--table", action="store_true", help="print the stored results and exit")
    p.add_argument("--dry-run", action="store_true", help="list the runs that would start and exit")
    return p


def check_args(args) -> None:
    """Every flag checked before anything runs; a ``ValueError`` names the flag (``main`` turns it into exit 2)."""
    for name in ("seeds", "lr_seeds", "evals", "seq_len", "lm_seq_len", "num_layers", "num_heads", "eval_batch",
                 "workers_per_gpu", "measure_steps"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {args.gpus}")
    if args.close_seeds < 0:
        raise ValueError(f"--close-seeds must be >= 0, got {args.close_seeds}")
    if not (math.isfinite(args.deadline_s) and args.deadline_s >= 0):
        raise ValueError(f"--deadline-s must be a finite number >= 0 (0: no deadline), got {args.deadline_s}")
    if args.phase not in PHASES:
        raise ValueError(f"--phase must be one of {PHASES}, got {args.phase!r}")
    if args.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device must be cpu, cuda or auto, got {args.device!r}")
    args.vocab_of = per_family(args.vocab, "--vocab")
    args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not args.task_list:
        raise ValueError("--tasks must name at least one task")
    def family_of(task, flag):
        try:
            return family(task)
        except ValueError as err:
            raise ValueError(f"{flag}: {err}") from err

    mqar = [t for t in args.task_list if family_of(t, "--tasks") == "mqar"]
    if args.mqar_lr_task is None:
        args.mqar_lr_task = "mqar64" if "mqar64" in mqar else max(mqar, key=lambda t: int(t[4:]), default="mqar64")
    elif family_of(args.mqar_lr_task, "--mqar-lr-task") != "mqar":
        raise ValueError(f"--mqar-lr-task must be an MQAR task (mqar<pairs>), got {args.mqar_lr_task!r}")
    if args.lr_task is not None and family_of(args.lr_task, "--lr-task") == "lm":
        raise ValueError(f"--lr-task must be a synthetic task (lm has --lm-lrs), got {args.lr_task!r}")
    named = [(t, "--tasks") for t in args.task_list] + ([(args.mqar_lr_task, "--mqar-lr-task")] if mqar else []) \
        + ([(args.lr_task, "--lr-task")] if args.lr_task else [])
    for task, flag in named:
        try:
            make_task(task, vocab_size=vocab_of(args, task), seq_len=args.seq_len, lm_seq_len=args.lm_seq_len)
        except ValueError as err:
            raise ValueError(f"{flag}: {err}") from err
    args.mixer_list = [m.strip() for m in args.mixers.split(",") if m.strip()]
    if not args.mixer_list:
        raise ValueError("--mixers must name at least one mixer")
    for mixer in args.mixer_list:
        try:
            check_mixer(mixer)
        except ValueError as err:
            raise ValueError(f"--mixers: {err}") from err
    if "k3_hybrid" in args.mixer_list and args.num_layers % HYBRID_PERIOD:
        raise ValueError(f"--num-layers must be a multiple of {HYBRID_PERIOD} for k3_hybrid (every "
                         f"{HYBRID_PERIOD}th layer is MLA), got {args.num_layers}")
    try:
        args.d_list = [int(d) for d in args.d_models.split(",") if d.strip()]
    except ValueError as err:
        raise ValueError(f"--d-models must be comma-separated integers, got {args.d_models!r}") from err
    if not args.d_list or any(d < 1 or d % args.num_heads for d in args.d_list):
        raise ValueError(f"--d-models must be positive multiples of --num-heads={args.num_heads}, "
                         f"got {args.d_models!r}")
    args.lr_list, args.lm_lr_list = _floats(args.lrs, "--lrs"), _floats(args.lm_lrs, "--lm-lrs")
    args.steps_of, args.batch_of = per_family(args.steps, "--steps"), per_family(args.batch_size, "--batch-size")
    args.width_of = per_family(args.width_of, "--width-of") if args.width_of else {}
    if "mqar" in args.width_of:
        raise ValueError("--width-of sets the non-MQAR families; MQAR widths are --d-models")
    if any(d % args.num_heads for d in args.width_of.values()):
        raise ValueError(f"--width-of widths must be multiples of --num-heads={args.num_heads}, got {args.width_of}")
    for task in args.task_list + ([args.mqar_lr_task] if mqar else []) + [t for t in [args.lr_task] if t]:
        for table, name in ((args.steps_of, "--steps"), (args.batch_of, "--batch-size"), (args.vocab_of, "--vocab")):
            if family(task) not in table:
                raise ValueError(f"{name} gives no value for task family {family(task)!r}")


def vocab_of(args, task: str) -> int:
    return args.vocab_of.get(family(task), 512)


def resolve_out(args) -> None:
    """``--out``: the scratch store unless named (``--table`` reads the course's evidence); checked readable."""
    if args.out is None:   # the course's evidence is found from anywhere; the scratch store is where you stand
        args.out = str(store.ROOT / store.COMMITTED) if args.table and not args.merge else store.SCRATCH
    if Path(args.out).is_dir():
        raise ValueError(f"--out {args.out!r} is a directory; name a .json file")
    if args.table and not Path(args.out).exists():
        raise ValueError(f"--store {args.out!r}: no such file; name an existing bake-off store")
    store.check(args.out)


def cell_specs(args, lr: float, seed: int, phase: str) -> list[RunSpec]:
    specs = []
    for task in args.task_list:
        widths = args.d_list if family(task) == "mqar" else [args.width_of.get(family(task), max(args.d_list))]
        for d in widths:
            for mixer in args.mixer_list:
                specs.append(_spec(args, task, mixer, d, lr, seed, phase))
    return specs


def _spec(args, task, mixer, d, lr, seed, phase) -> RunSpec:
    kind = family(task)
    return RunSpec(task=task, mixer=mixer, d_model=d, lr=lr, seed=seed, steps=args.steps_of[kind],
                   batch_size=args.batch_of[kind], num_layers=args.num_layers, num_heads=args.num_heads,
                   vocab_size=vocab_of(args, task), seq_len=args.seq_len, lm_seq_len=args.lm_seq_len,
                   eval_batch=args.eval_batch, phase=phase, cuda_graph=args.cuda_graph, evals=args.evals)


def lr_source(args, spec: RunSpec) -> str:
    """The task whose sweep sets ``spec``'s learning rate."""
    if spec.task != "lm" and args.lr_task is not None:
        return args.lr_task
    return args.mqar_lr_task if family(spec.task) == "mqar" else spec.task


def sweep_specs(args) -> list[RunSpec]:
    """Seeds 0 .. --lr-seeds - 1 at every learning rate, for the cells that set the learning rates (seeds
    outermost: a deadline leaves every rate at least its first seed)."""
    specs = {}
    for seed in range(args.lr_seeds):
        for base in cell_specs(args, 0.0, 0, "lr"):
            for spec in sweep_specs_for(args, base, seeds=[seed]):
                specs[spec.key()] = spec
    return list(specs.values())


def sweep_specs_for(args, spec: RunSpec, seeds=None) -> list[RunSpec]:
    """The sweep runs (every rate x every sweep seed) that set ``spec``'s learning rate."""
    task = lr_source(args, spec)
    lrs = args.lm_lr_list if task == "lm" else args.lr_list
    seeds = range(args.lr_seeds) if seeds is None else seeds
    return [_spec(args, task, spec.mixer, spec.d_model, lr, seed, "lr") for seed in seeds for lr in lrs]


def choice_key(args, spec: RunSpec) -> str:
    """Identity of the learning-rate choice of ``spec``'s cell: the sweep's set-up, its rates and seeds."""
    source = sweep_specs_for(args, spec, seeds=[0])[0]
    lrs = args.lm_lr_list if source.task == "lm" else args.lr_list
    return re.sub(r"\|lr[^|]*\|s\d+\|", f"|lrs{','.join(f'{lr:g}' for lr in sorted(lrs))}|seeds{args.lr_seeds}|",
                  source.key())


def decide_lr(metrics: dict[float, list], chance_level: float, higher_is_better: bool = True) -> dict:
    """The learning-rate choice from ``{lr: [metric per seed, None for a diverged or failed run]}`` (rule:
    :data:`LR_RULE`). Returns ``{"choice": lr or None, "verdict": "chosen" | "only rate" | "all at chance",
    "means", "at_chance", "tied"}`` (JSON-ready: rates as ``f"{lr:g}"`` strings)."""
    if not metrics or any(not values for values in metrics.values()):
        raise ValueError(f"metrics must map each rate to at least one run, got {metrics!r}")
    rates = sorted(metrics)
    sign = 1.0 if higher_is_better else -1.0
    finite = [float(m) for lr in rates for m in metrics[lr] if m is not None]
    worst = sign * min([sign * chance_level] + [sign * m for m in finite])
    values = {lr: [worst if m is None else float(m) for m in metrics[lr]] for lr in rates}
    stats = {lr: summarize(values[lr]) for lr in rates}
    chance_of = {lr: at_chance(stats[lr].mean, chance_level, higher_is_better) for lr in rates}
    result = {"means": {f"{lr:g}": stats[lr].mean for lr in rates},
              "at_chance": {f"{lr:g}": chance_of[lr] for lr in rates}}
    if len(rates) == 1:
        return {**result, "choice": rates[0], "verdict": "only rate", "tied": [f"{rates[0]:g}"]}
    if all(chance_of.values()):
        return {**result, "choice": None, "verdict": "all at chance", "tied": []}
    best = max(rates, key=lambda lr: sign * stats[lr].mean)

    def tolerance(lr):
        a, b = stats[lr], stats[best]
        return max(LR_TIE_ABS, LR_TIE_Z * math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n))

    tied = [lr for lr in rates if sign * (stats[best].mean - stats[lr].mean) <= tolerance(lr)]
    middle = (len(rates) - 1) / 2
    choice = min(tied, key=lambda lr: (abs(rates.index(lr) - middle), lr))
    return {**result, "choice": choice, "verdict": "chosen", "tied": [f"{lr:g}" for lr in tied]}


def lr_choice(args, runs: dict, spec: RunSpec) -> dict | None:
    """The stored-ready learning-rate choice of ``spec``'s cell with its evidence; None while a sweep run is
    missing."""
    sources = sweep_specs_for(args, spec)
    metrics: dict[float, list] = {}
    per_seed: dict[str, dict[str, float | None]] = {}
    for source in sources:
        record = runs.get(source.key())
        if record is None:
            return None
        value = store.finite_metric(record)
        metrics.setdefault(source.lr, []).append(value)
        per_seed.setdefault(f"{source.lr:g}", {})[str(source.seed)] = value
    task = make_task(sources[0].task, vocab_size=sources[0].vocab_size, seq_len=sources[0].seq_len,
                     lm_seq_len=sources[0].lm_seq_len)
    decision = decide_lr(metrics, task.chance, task.higher_is_better)
    return {"key": choice_key(args, spec), "family": family(spec.task), "source_task": sources[0].task,
            "mixer": spec.mixer, "d_model": spec.d_model, "metric_name": task.metric,
            "higher_is_better": task.higher_is_better, "chance": task.chance,
            "rates": sorted(metrics), "seeds": list(range(args.lr_seeds)), "metrics": per_seed, **decision,
            "rule": LR_RULE}


def best_lr(args, runs: dict, spec: RunSpec) -> float | None:
    """The chosen learning rate of ``spec``'s cell (None while the sweep is incomplete or all at chance)."""
    choice = lr_choice(args, runs, spec)
    return None if choice is None else choice["choice"]


def lr_choices(args, runs: dict) -> dict[str, dict]:
    """Every complete learning-rate choice of the grid, by choice key (what the store keeps)."""
    found = {}
    for base in cell_specs(args, 0.0, 0, "seeds"):
        choice = lr_choice(args, runs, base)
        if choice is not None:
            found[choice["key"]] = choice
    return found


def seed_specs(args, runs: dict, quiet: bool = False) -> list[RunSpec]:
    specs, missing, chance_cells = [], [], set()
    for seed in range(args.seeds):               # seeds outermost: a timeout leaves every cell a few seeds
        for base in cell_specs(args, 0.0, seed, "seeds"):
            choice = lr_choice(args, runs, base)
            if choice is None:
                missing.append(base.key())
                continue
            if choice["choice"] is None:
                chance_cells.add(choice["key"])
                continue
            specs.append(replace(base, lr=choice["choice"]))
    if missing and not quiet:
        print(f"[bakeoff] {len(missing)} runs have no learning-rate sweep yet (run --phase lr first)", flush=True)
    if chance_cells and not quiet:
        print(f"[bakeoff] {len(chance_cells)} learning-rate sweeps stayed at chance at every rate: no seeds run "
              "there (see --table)", flush=True)
    return specs


def cell_records(args, runs: dict, spec: RunSpec) -> list[dict] | None:
    """The stored seeds of ``spec``'s cell at its chosen learning rate (None before the sweep is done or when
    every rate stayed at chance)."""
    lr = best_lr(args, runs, spec)
    if lr is None:
        return None
    found = (runs.get(replace(spec, lr=lr, seed=seed).key()) for seed in range(max(args.seeds, args.close_seeds)))
    return [r for r in found if r is not None]


def _metrics(records: list[dict]) -> list[float]:
    """The finite metrics of ``records`` (a diverged or failed run has none)."""
    return [m for m in map(store.finite_metric, records) if m is not None]


def close_specs(args, runs: dict) -> list[RunSpec]:
    """Seeds ``--seeds`` .. ``--close-seeds``-1 for both cells of a story pair that the rule cannot call yet."""
    specs = []
    for base in cell_specs(args, 0.0, 0, "seeds"):
        for first, second in STORY_PAIRS:
            if base.mixer != first or second not in args.mixer_list:
                continue
            pair = [base, replace(base, mixer=second)]
            records = [cell_records(args, runs, spec) for spec in pair]
            if any(r is None or len(r) < args.seeds for r in records) or len(records[0]) >= args.close_seeds:
                continue
            a, b = (_metrics(recs) for recs in records)
            if min(len(a), len(b)) < 2:   # diverged seeds: nothing more seeds at this rate could call
                continue
            higher = records[0][0].get("higher_is_better", True)
            if beats(a, b, higher_is_better=higher) or beats(b, a, higher_is_better=higher):
                continue
            if higher and any(beats_by_success(*pair) for pair in ((a, b), (b, a))):
                continue
            for spec in pair:
                lr = best_lr(args, runs, spec)
                specs += [replace(spec, lr=lr, seed=seed) for seed in range(args.seeds, args.close_seeds)]
    return specs


# ---------------------------------------------------------------- execution


def _exit_with_parent() -> None:
    """A worker exits when the process that started it dies (killed, crashed): a daemon thread waits on the
    parent's sentinel and watches ``os.getppid()``, so no worker is left blocked on its job queue."""
    parent, ppid = mp.parent_process(), os.getppid()

    def watch():
        while True:
            if parent is not None:
                from multiprocessing.connection import wait
                if wait([parent.sentinel], timeout=WATCHDOG_S):
                    os._exit(3)
            else:
                time.sleep(WATCHDOG_S)
            if os.getppid() != ppid:
                os._exit(3)

    threading.Thread(target=watch, name="bakeoff-parent-watchdog", daemon=True).start()


def _worker(device: str, jobs, results) -> None:
    _exit_with_parent()
    import torch

    torch.set_num_threads(1)   # workers share the cores: one each (on CUDA a worker's CPU work is launching)
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    while True:
        item = jobs.get()
        if item is None:
            return
        spec, timing_only = item
        results.put(("start", spec.key(), os.getpid()))
        try:
            results.put(("ok", spec.key(), run(spec, device, timing_only=timing_only)))
        except TritonPathError as err:
            results.put(("fatal", spec.key(), str(err)))
        except Exception as err:
            if device.startswith("cuda") and not _cuda_usable():
                # A device-side assert (the ops' value check of g and beta on CUDA, which a diverged run trips)
                # leaves the process's CUDA context unusable: the run is stored as failed, a new worker takes over.
                first = (str(err).strip().splitlines() or [""])[0]
                cause = ("a device-side assert (in the bake-off's models, the ops' check that g <= 0 and beta in "
                         "[0, 2], which fails once the weights are NaN: most likely the run diverged)"
                         if "device-side assert" in str(err) else "a CUDA error")
                reason = f"the worker's CUDA context was lost to {cause}: {type(err).__name__}: {first[:300]}"
                results.put(("failed", spec.key(), reason))
                results.put(("dead", device, os.getpid()))
                return
            results.put(("error", spec.key(), traceback.format_exc()))


def _cuda_usable() -> bool:
    """After a device-side fault every later CUDA call of the process fails; only a new process recovers."""
    import torch

    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


class Executor:
    """In-process on the CPU; on CUDA one long-lived process per worker, so Triton compiles once per worker."""

    def __init__(self, device: str, gpus: int, workers_per_gpu: int):
        self.device, self.processes = device, []
        self.running: dict[int, str] = {}   # worker pid -> key of the run it is training
        self.backlog: list[tuple] = []      # results read early, while looking which run a dead worker held
        slots = [f"cuda:{gpu}" for gpu in range(gpus) for _ in range(workers_per_gpu)] if device == "cuda" \
            else ["cpu"] * workers_per_gpu if workers_per_gpu > 1 else []
        if slots:
            context = mp.get_context("spawn")
            self.jobs, self.results = context.Queue(), context.Queue()
            self.context = context
            for slot in slots:
                self._start(slot)

    def _start(self, slot: str) -> None:
        process = self.context.Process(target=_worker, args=(slot, self.jobs, self.results), daemon=True)
        process.start()
        process.slot = slot
        self.processes.append(process)

    def _replace_crashed(self, on_result) -> int:
        """Workers that died without a word (a segfault, a killed process): the run each was training is stored
        as failed (with the exit code), and a new worker takes the slot. Returns the runs they took along."""
        crashed = [p for p in self.processes if p.exitcode not in (None, 0) and not getattr(p, "replaced", False)]
        if crashed:   # a dead worker's last words ("start") may still sit in the queue: read what is there
            while True:
                try:
                    message = self.results.get_nowait()
                except queue.Empty:
                    break
                if message[0] == "start":
                    self.running[message[2]] = message[1]
                else:
                    self.backlog.append(message)
        for process in crashed:
            key = self.running.pop(process.pid, None)
            print(f"[bakeoff] worker on {process.slot} exited with code {process.exitcode} during "
                  f"{key or 'a run'}; starting a new worker", file=sys.stderr, flush=True)
            if key is not None:
                on_result("failed", key, f"the worker process exited with code {process.exitcode} during the run")
            else:
                on_result("error", "(unknown run)", f"worker exited with code {process.exitcode}; its run is lost")
            process.replaced = True
            self._start(process.slot)
        return len(crashed)

    @property
    def width(self) -> int:
        return max(1, sum(not getattr(p, "replaced", False) for p in self.processes))

    def map(self, specs, on_result, *, timing_only=False, deadline=None, refill=None, skip=None):
        """Run ``specs``; ``on_result(status, key, payload)`` as each finishes (status ``ok``, ``failed`` or
        ``error``), then ``refill()`` may add runs that became possible (the seeds of a cell whose sweep just
        finished). A run for which ``skip(key)`` holds when its turn comes (stored meanwhile) is not started;
        no run starts after ``deadline``."""
        pending, in_flight = list(specs), 0

        def next_spec():
            while pending:
                spec = pending.pop(0)
                if skip is None or not skip(spec.key()):
                    return spec
            return None

        if not self.processes:
            while not (deadline and time.time() > deadline) and (spec := next_spec()) is not None:
                try:
                    record = run(spec, "cpu", timing_only=timing_only)
                except TritonPathError:
                    raise
                except Exception:
                    on_result("error", spec.key(), traceback.format_exc())
                else:
                    on_result("ok", spec.key(), record)
                pending.extend(refill() if refill else [])
            return
        while pending or in_flight:
            while in_flight < self.width and not (deadline and time.time() > deadline):
                spec = next_spec()
                if spec is None:
                    break
                self.jobs.put((spec, timing_only))
                in_flight += 1
            if not in_flight:
                break
            try:
                status, key, payload = self.backlog.pop(0) if self.backlog else self.results.get(timeout=2)
            except queue.Empty:
                in_flight -= self._replace_crashed(on_result)
                pending.extend(refill() if refill else [])
                continue
            if status == "start":
                self.running[payload] = key
                continue
            if status == "dead":
                print(f"[bakeoff] worker {payload} on {key}: its CUDA context is broken; a new worker replaces it",
                      file=sys.stderr, flush=True)
                for process in self.processes:
                    if process.pid == payload and not getattr(process, "replaced", False):
                        process.replaced = True
                        process.join(timeout=30)
                        self._start(key)
                continue
            in_flight -= 1
            self.running = {pid: k for pid, k in self.running.items() if k != key}
            if status == "fatal":
                self.close(now=True)
                raise TritonPathError(payload)
            on_result(status, key, payload)
            in_flight -= self._replace_crashed(on_result)
            pending.extend(refill() if refill else [])

    def close(self, *, now: bool = False):
        """Let the workers finish (a sentinel each), or with ``now`` stop them at once (a timeout or Ctrl-C)."""
        if not now:
            for _ in self.processes:
                self.jobs.put(None)
        for process in self.processes:
            if now:
                process.terminate()
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        self.processes = []


def main(argv=None) -> int:
    """Exit status: 0, 1 when some run raised (printed, not stored: a later call retries it), 2 for a user
    error (one line on stderr)."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    p = parser()
    args = p.parse_args(argv)
    try:
        if args.merge:
            if args.out is None:
                args.out = store.SCRATCH
            runs = store.merge(args.merge, args.out)
            print(f"[bakeoff] merged {len(args.merge)} stores into {args.out}: {len(runs)} runs")
            return 0
        check_args(args)
        resolve_out(args)
        runs = store.load(args.out)
        if args.table:
            choices = store.load_choices(args.out)
            print_table(runs, choices)
            print_contrasts(runs, choices)
            return 0
        device = resolve_device(args.device)
        if device == "cuda":
            import torch

            if args.gpus > torch.cuda.device_count():
                raise ValueError(f"--gpus must be <= {torch.cuda.device_count()} (GPUs visible), got {args.gpus}")
    except ValueError as err:   # StoreError included: refused before anything trains
        p.error(str(err))
    view = _view(args)
    if args.dry_run:
        todo = sweep_specs(args) if args.phase != "seeds" else seed_specs(args, view(runs))
        for spec in todo:
            print(("stored  " if spec.key() in view(runs) else "todo    ") + spec.key())
        return 0
    executor = Executor(device, args.gpus, args.workers_per_gpu)
    deadline = time.time() + args.deadline_s if args.deadline_s else None
    # `timeout` sends SIGTERM: turn it into an exception, so the workers are stopped rather than orphaned.
    previous_handler = signal.signal(signal.SIGTERM, _raise_interrupt)
    errors = 0
    try:
        prov = store.provenance(device, argv)
        if args.measure:
            errors = measure(args, executor, device, runs, prov)
        else:
            choices = lambda stored: lr_choices(args, stored)   # noqa: E731 - stored beside every run
            if args.phase == "all":   # seeds of a cell start as soon as its sweep is stored: no barrier
                errors = execute(sweep_specs(args), runs, executor, args.out, prov, deadline, view,
                                 more=lambda stored: seed_specs(args, stored, quiet=True) + close_specs(args, stored),
                                 choices=choices)
            elif args.phase == "lr":
                errors = execute(sweep_specs(args), runs, executor, args.out, prov, deadline, view, choices=choices)
            elif args.phase == "seeds":
                errors = execute(seed_specs(args, view(runs)), runs, executor, args.out, prov, deadline, view,
                                 more=lambda stored: close_specs(args, stored), choices=choices)
            else:
                errors = execute(close_specs(args, view(runs)), runs, executor, args.out, prov, deadline, view,
                                 choices=choices)
            found = lr_choices(args, runs)
            if found:   # choices whose runs were all stored before this call
                runs.update(store.save(args.out, {}, choices=found))
    except BaseException:
        executor.close(now=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous_handler)
    executor.close()
    if not args.measure:
        choices = store.load_choices(args.out) if Path(args.out).exists() else {}
        print_table(runs, choices)
        print_contrasts(runs, choices)
    if errors:
        print(f"[bakeoff] {errors} runs raised and were not stored (tracebacks above); a later call retries them",
              file=sys.stderr, flush=True)
        return 1
    return 0


def print_contrasts(runs: dict, choices: dict | None = None) -> None:
    """Each story pair in each stored final cell, called by Fisher's exact test on success counts (accuracy
    tasks) and by the means rule (every task); a pair whose two cells come from different generations of runs
    (:func:`~k3lite.bakeoff.plots.published_layer`) says so, since their layers and budgets differ."""
    from k3lite.bakeoff.plots import final_cells, published_layer

    cells = final_cells(runs, choices)
    print(f"[bakeoff] story pairs: success = accuracy >= {SUCCESS_THRESHOLD:g}, A beats B when Fisher's exact test "
          f"(two-sided) on success counts gives p < 0.05; means rule: means apart by > {BEATS_Z:g} standard errors")
    for (task, d, first), records_a in sorted(cells.items()):
        for one, second in STORY_PAIRS:
            records_b = cells.get((task, d, second))
            if one != first or not records_b:
                continue
            a, b = ([store.finite_metric(r) for r in recs] for recs in (records_a, records_b))
            higher = records_a[0].get("higher_is_better", True)
            if higher:
                verdict = success_verdict(a, b, first, second)
            else:
                verdict = "no success threshold (lower is better)"
            fa, fb = [m for m in a if m is not None], [m for m in b if m is not None]
            means = "no call"
            if min(len(fa), len(fb)) >= 2:
                means = (f"{second} beats {first}" if beats(fb, fa, higher_is_better=higher) else
                         f"{first} beats {second}" if beats(fa, fb, higher_is_better=higher) else "no call")
            mixed = published_layer(records_a[0]) != published_layer(records_b[0])
            note = "  [an earlier cell against a published-layer cell]" if mixed else ""
            print(f"{task:10s} d{d:<4d} {first:>16s} vs {second:<16s} success: {verdict};  means: {means}{note}")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda needs a GPU, and torch sees none")
    return device


def _view(args):
    """What counts as stored when scheduling: every run, or with --retry-failed all but the failed ones."""
    if not args.retry_failed:
        return lambda runs: runs
    return lambda runs: {key: r for key, r in runs.items() if store.status(r) != "failed"}


def _describe(record: dict) -> str:
    kind = store.status(record)
    if kind == "diverged":
        return f"DIVERGED at step {record['diverged_step']}"
    if kind == "failed":
        return "FAILED (stored): " + record["reason"][:200]
    learned = record.get("steps_to_learn")
    return (f"{record['metric_name']}={record['metric']:.4f}  {record['tokens_per_s']:.0f} tok/s "
            f"{record['wall_s']:.1f}s" + (f"  learned by step {learned}" if learned is not None else ""))


def execute(specs, runs, executor, out, prov, deadline, view=None, more=None, choices=None) -> int:
    """Run the ``specs`` not stored yet, storing each as it finishes (trained, diverged, or failed with its
    reason); ``more(runs)`` names runs that the stored ones made possible, started as they appear. ``runs`` is
    kept equal to the store, runs that other processes add to it included; ``choices(runs)`` gives the
    learning-rate choices saved with each run. Returns how many runs raised (not stored: a later call retries
    them)."""
    view = view or (lambda stored: stored)

    def done(key):
        return key in view(runs)

    todo = list({s.key(): s for s in specs if not done(s.key())}.values())
    queued = {s.key() for s in todo}
    by_key = {s.key(): s for s in specs}
    print(f"[bakeoff] {len(todo)} runs to do ({len(specs) - len(todo)} stored) on {executor.width} workers",
          flush=True)
    started, errors = time.time(), 0

    def on_result(status, key, payload):
        nonlocal errors
        if status == "error":
            errors += 1
            print(f"[bakeoff] ERROR {key} (not stored)\n{payload}", file=sys.stderr, flush=True)
            return
        record = failed_record(by_key[key], payload) if status == "failed" else payload
        record["provenance"] = prov
        runs.update(store.save(out, {key: record}))
        if choices is not None:
            found = choices(runs)
            if found:
                store.save(out, {}, choices=found)
        print(f"[bakeoff] {len(runs):4d} stored  {time.time() - started:7.1f}s  {key}  {_describe(record)}",
              flush=True)

    def refill():
        if more is None:
            return []
        new = []
        for spec in more(view(runs)):
            by_key.setdefault(spec.key(), spec)
            if not done(spec.key()) and spec.key() not in queued:
                queued.add(spec.key())
                new.append(spec)
        return new

    executor.map(todo + refill(), on_result, deadline=deadline, refill=refill, skip=done)
    return errors


def _shape(spec: RunSpec) -> tuple[int, int]:
    """What a step costs depends on the sequence length and the batch (the task family only decides those)."""
    return spec.lm_seq_len if spec.task == "lm" else make_task(spec.task, vocab_size=spec.vocab_size,
                                                                 seq_len=spec.seq_len).seq_len, spec.batch_size


def measure(args, executor, device, runs, prov) -> int:
    """Time ``--measure-steps`` steps of every mixer at each shape of the grid, with every worker busy (so the
    sharing of a GPU is in the numbers); then, unless --no-measure-learn, train the sweep's middle learning
    rate on the MQAR task that sets the MQAR learning rates (stored: the sweep reuses them) and print recall.
    Returns how many runs raised."""
    grid = sweep_specs(args)
    samples = {}
    for spec in grid:
        samples.setdefault(_shape(spec), spec)
    specs = [replace(spec, mixer=mixer, d_model=max(args.d_list), seed=copy, steps=args.measure_steps, phase="measure")
             for copy in range(executor.width) for spec in samples.values() for mixer in args.mixer_list]
    timings: dict[tuple, list[dict]] = {}
    errors = 0

    def on_result(status, key, payload):
        nonlocal errors
        if status != "ok" or store.status(payload) != "ok":
            errors += status == "error"
            reason = payload if isinstance(payload, str) else payload.get("reason")
            print(f"[bakeoff] measure {status.upper()} {key} (not timed)\n{reason}", file=sys.stderr, flush=True)
            return
        spec = RunSpec(**{k: payload[k] for k in RunSpec.__dataclass_fields__})
        timings.setdefault((payload["mixer"],) + _shape(spec), []).append(payload)

    started = time.time()
    executor.map(specs, on_result, timing_only=True)
    print(f"[bakeoff] measured {len(specs)} short runs on {executor.width} workers in {time.time() - started:.0f}s "
          f"(d_model {max(args.d_list)}, {args.num_layers} layers)")
    step_seconds = {}
    print(f"{'T':>5s} {'batch':>5s} {'mixer':18s} {'s/step':>8s} {'first5 s':>9s} {'tok/s':>9s} {'vs sdpa':>8s}")
    for (mixer, length, batch), records in sorted(timings.items(), key=lambda item: (item[0][1:], item[0][0])):
        step_seconds[(mixer, length, batch)] = summarize([r["seconds_per_step"] for r in records]).mean
        tokens = summarize([r["tokens_per_s"] for r in records]).mean
        sdpa = timings.get(("softmax", length, batch))
        ratio = tokens / summarize([r["tokens_per_s"] for r in sdpa]).mean if sdpa else float("nan")
        print(f"{length:5d} {batch:5d} {mixer:18s} {step_seconds[(mixer, length, batch)]:8.4f} "
              f"{max(r['first_steps_s'] for r in records):9.1f} {tokens:9.0f} {ratio:8.2f}")
    estimate_grid(args, step_seconds, executor.width)
    if args.measure_learn:
        middle = args.lr_list[len(args.lr_list) // 2]
        learn = [s for s in sweep_specs(args) if s.task == args.mqar_lr_task and s.lr == middle]
        print(f"[bakeoff] learnability: {args.mqar_lr_task} at lr {middle:g}, {args.steps_of['mqar']} steps "
              f"(stored as sweep runs)", flush=True)
        errors += execute(learn, runs, executor, args.out, prov, None, _view(args))
    return errors


def estimate_grid(args, step_seconds, width) -> None:
    sweep = sweep_specs(args)
    seeds = [s for seed in range(args.seeds) for s in cell_specs(args, 0.0, seed, "seeds")
             if seed >= args.lr_seeds or lr_source(args, s) != s.task]   # the sweep's seeds are reused
    total = 0.0
    for spec in sweep + seeds:
        seconds = step_seconds.get((spec.mixer,) + _shape(spec))
        # + the held-out evaluations: 2 x eval_batch sequences forward, about a third of a step's work per
        # sequence, each of --evals times; + 2 s of set-up (the compiled kernels are cached after the first run)
        eval_steps = spec.evals * 2 * spec.eval_batch / spec.batch_size / 3
        total += (spec.steps + 5 + eval_steps) * seconds + 2.0 if seconds is not None else 0.0
    print(f"[bakeoff] grid: {len(sweep)} sweep runs + {len(seeds)} seed runs (+ up to --close-seeds for close pairs) "
          f"= {len(sweep) + len(seeds)} runs, "
          f"about {total:.0f} worker-seconds = {total / width / 60:.1f} min on {width} workers "
          f"(per-step times measured with every worker busy)", flush=True)


def _beyond_sweep(runs: dict, choice: dict) -> str:
    """Runs of an all-at-chance cell at the sweep's rates but with seeds the sweep did not use (run on purpose,
    e.g. to test a diagnosis): their success counts per rate, so the table never hides a stored result."""
    rates, seeds = set(choice["rates"]), set(choice["seeds"])
    setup = re.sub(r"\|lrs[^|]*\|seeds\d+\|", "|", choice["key"])      # the sweep's set-up without rates and seeds
    extra: dict[float, list[float]] = {}
    for r in runs.values():
        if re.sub(r"\|lr[^|]*\|s\d+\|", "|", r["key"]) == setup and r["lr"] in rates and r["seed"] not in seeds \
                and store.finite_metric(r) is not None:
            extra.setdefault(r["lr"], []).append(r["metric"])
    return "".join(f"; {len(metrics)} more seeds at {lr:g}: {success_rate(metrics)}"
                   for lr, metrics in sorted(extra.items()))


def print_table(runs: dict, choices: dict | None = None) -> None:
    """Per final cell (``plots.final_cells``: the chosen learning rate's seeds): seeds, mean ± standard error,
    success rate k/n (accuracy >= 0.9) with its 95 % Wilson interval, median steps-to-learn over the seeds that
    learned (``-``: none did, or records without periodic evaluation), tokens/s against SDPA's (``nan`` unless
    both cells ran on the same kind of device), seconds per run, the training budget in steps and which layers
    trained it (``published``, or ``earlier``: the grid run before the layers were rebuilt,
    ``plots.published_layer``); then every learning-rate sweep that stayed at chance, and every diverged or
    failed run."""
    from k3lite.bakeoff.plots import final_cells, published_layer

    cells = final_cells(runs, choices)
    speed = {cell: summarize([r["tokens_per_s"] for r in records]).mean for cell, records in cells.items()}
    devices = {cell: {r.get("provenance", {}).get("device_name") for r in records} for cell, records in cells.items()}
    name = min(30, max([18] + [len(mixer) for _, _, mixer in cells]))   # a module:function name may overflow
    print(f"{'task':10s} {'d':>4s} {'mixer':{name}s} {'lr':>7s} {'n':>2s} {'metric':>10s} {'mean ± s.e.':>15s} "
          f"{'success [95% CI]':>18s} {'learned@':>8s} {'tok/s':>9s} {'vs sdpa':>7s} {'s/run':>6s} {'steps':>6s} "
          "layers")
    for (task, d, mixer), records in sorted(cells.items()):
        s = summarize([r["metric"] for r in records])
        same_device = devices.get((task, d, "softmax")) == devices[task, d, mixer]
        sdpa = speed.get((task, d, "softmax"), float("nan")) if same_device else float("nan")
        success = str(success_rate([r["metric"] for r in records])) if records[0].get("higher_is_better", True) \
            else "-"
        learned = median(r.get("steps_to_learn") for r in records)
        wall = summarize([r.get("cost", {}).get("wall_s", r.get("wall_s", float("nan"))) for r in records]).mean
        layers = "published" if published_layer(records[0]) else "earlier"
        print(f"{task:10s} {d:4d} {mixer:{name}s} {records[0]['lr']:7.0e} {s.n:2d} {records[0]['metric_name']:>10s} "
              f"{s.mean:7.3f} ± {s.sem:5.3f} {success:>18s} {'-' if learned is None else f'{learned:.0f}':>8s} "
              f"{speed[(task, d, mixer)]:9.0f} {speed[(task, d, mixer)] / sdpa:7.2f} {wall:6.1f} "
              f"{records[0]['steps']:6d} {layers}")
    for _, choice in sorted((choices or {}).items()):
        if choice.get("verdict") == "all at chance":
            means = ", ".join(f"{lr}: {mean:.3f}" for lr, mean in choice["means"].items())
            print(f"{choice['source_task']:10s} {choice['d_model']:4d} {choice['mixer']:18s} all at chance at every "
                  f"rate (chance {choice['chance']:.3f}; means {means}): no seeds phase{_beyond_sweep(runs, choice)}")
    unfinished = sorted((store.status(r), r["key"]) for r in runs.values() if store.status(r) != "ok")
    for kind, key in unfinished:
        record = runs[key]
        print(f"{kind:10s} {key}" + (f"  at step {record['diverged_step']}" if kind == "diverged" else "")
              + f"  {' '.join(str(record.get('reason', '')).split())[:120]}")


if __name__ == "__main__":
    sys.exit(main())
