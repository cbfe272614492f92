"""Figures of the bake-off from ``figures/bakeoff.json``, and a tiny live CPU version of a task.

Every figure has error bars (± one standard deviation over seeds, each seed a dot), labelled axes, and an
opaque white background, so it reads the same on light and dark pages. Chapters call :func:`plot_cell`
(one stored cell) and :func:`live_demo` (a few seconds on the CPU); ``scripts/plot_bakeoff.py`` calls
:func:`plot_all`.
"""

from __future__ import annotations

from pathlib import Path

from k3lite.bakeoff import store
from k3lite.bakeoff.models import BUILTIN
from k3lite.bakeoff.stats import beats, beats_paired, success_rate, success_verdict, summarize
from k3lite.bakeoff.tasks import PROBE_ALPHABET, family
from k3lite.ops import RECURRENT_KINDS

GDN_IN_KDA_LAYER = "k3lite.bakeoff.variants:gated_delta_rule_in_kda_layer"

COLORS = {"softmax": "#555555", "linear_attention": "#1f77b4", "delta_rule": "#2ca02c",
          "gated_delta_rule": "#d62728", "kda": "#9467bd", "k3_hybrid": "#ff7f0e", GDN_IN_KDA_LAYER: "#e377c2",
          "gated_delta_rule_sigmoid_gate": "#8c564b", "kda_kimi_linear": "#17becf",
          "gated_delta_rule_unit_a": "#bcbd22"}
LABELS = {"softmax": "softmax (SDPA)", **{kind: entry.label for kind, entry in RECURRENT_KINDS.items()},
          "k3_hybrid": "K3 hybrid (3 KDA : 1 MLA)", GDN_IN_KDA_LAYER: "GDN recurrence in KDA's layer",
          "gated_delta_rule_sigmoid_gate": "Gated DeltaNet, sigmoid output gate",
          "kda_kimi_linear": "KDA, Kimi Linear's gate", "gated_delta_rule_unit_a": "Gated DeltaNet, A = 1 at start"}
TASK_TITLES = {"rebind": "Rebinding: return the latest value of a key",
               "switch": "Context switch: forget what came before the reset",
               "twoscale": "Two timescales: recall early facts through a fast stream",
               "lm": "Byte-level LM: planted code recalled ~1,900 bytes later",
               **{f"zoology{n}": f"MQAR as Zoology generates it: {n} pairs, power-law query gaps"
                  for n in (4, 8, 16, 32, 64, 128, 256)}}


LAYERS = ("latest", "published", "earlier")   # which runs a reader takes (final_cells, trained_retention)


def published_layer(record: dict) -> bool:
    """Whether a stored run trained the layers as published (``k3lite.bakeoff.models``). Exactly the runs with
    periodic evaluations: that protocol came after the layers were rebuilt, and every earlier run predates both
    (its Gated DeltaNet and KDA gates began saturated: chapter 05, section 7)."""
    return "evaluations" in record


def _of_layers(records, layers: str) -> list[dict]:
    if layers not in LAYERS:
        raise ValueError(f"layers must be one of {LAYERS}, got {layers!r}")
    records = list(records)
    if layers == "latest":
        return records
    return [r for r in records if published_layer(r) == (layers == "published")]


def final_cells(runs: dict, choices: dict | None = None, layers: str = "latest") -> dict[tuple, list[dict]]:
    """``(task, d_model, mixer) -> records`` at the cell's chosen learning rate.

    ``layers``: ``"published"`` takes only the runs of the layers as published, ``"earlier"`` only the runs made
    before (:func:`published_layer`), ``"latest"`` both, where a cell's published-layer runs replace its earlier
    ones once they hold as many seeds at one rate (or their family's sweep stayed all at chance, which also
    removes the earlier cells of the family's other tasks, where no seeds were run): a grid still being
    trained, one sweep seed per rate, does not displace a finished earlier cell. Runs are grouped by learning
    rate and set-up (steps, vocabulary, layers, heads, batch, sequence length); the group with the most seeds
    wins (the seeds phase runs at the chosen rate), and among equals the best mean metric. With ``choices``
    (``store.load_choices``), the published layers' runs count only at the rate their family's sweep chose (every
    MQAR task takes MQAR-16's): a cell whose sweep stayed "all at chance", or is not finished (no choice stored),
    has no published final cell, since its sweep runs are not a result at one rate (no choices at all, as from a
    store made by hand: the most seeds win, as without ``choices``). Diverged and failed runs
    have no metric and are left out (``python -m k3lite.bakeoff --table`` lists them)."""
    by_cell: dict[tuple, list[dict]] = {}
    for record in _of_layers(runs.values(), layers):
        if record.get("phase") == "measure" or store.finite_metric(record) is None:
            continue
        by_cell.setdefault((record["task"], record["d_model"], record["mixer"]), []).append(record)
    chosen, hopeless = {}, set()
    for choice in (choices or {}).values():
        sweep = _sweep_of(choice)
        if choice.get("verdict") == "all at chance":
            hopeless.add(sweep)
        elif choice.get("choice") is not None:
            chosen[sweep] = choice["choice"]
    cells = {}
    for cell, records in by_cell.items():
        sweep = (family(cell[0]),) + cell[1:]
        current = [r for r in records if published_layer(r)]
        earlier = [r for r in records if not published_layer(r)]
        if sweep in hopeless and (current or layers == "latest"):
            continue   # the published sweep is the finding, for every task of its family: earlier runs give way
        if choices:   # a stored choice was made from the published sweep: it picks among its runs only
            current = [r for r in current if r["lr"] == chosen.get(sweep)]
        if current and earlier and (
                max(map(len, _rate_groups(current, True).values())) < max(map(len, _rate_groups(earlier).values()))):
            current = []
        records = current or earlier
        if not records:
            continue
        cells[cell] = max(_rate_groups(records, bool(current)).values(), key=_seeds_then_mean)
    return cells


def _rate_groups(records: list[dict], published: bool = False) -> dict[tuple, list[dict]]:
    """Records grouped by learning rate, and for published-layer runs by set-up too (earlier records are grouped
    by rate alone, as they always were)."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["lr"],) + (_setup(r) if published else ()), []).append(r)
    return groups


def sweep_metrics(runs: dict, task: str, d_model: int, layers: str = "published",
                  steps: int | None = None) -> dict[str, dict[float, list]]:
    """``mixer -> {learning rate: [metric of each seed]}`` of every stored run of one task and width (seeds in
    order; a diverged or failed run is ``None``): the evidence a learning-rate choice is made from.

    ``steps`` keeps only the runs of that training budget. Seeds are keyed by number, so runs of two budgets
    would overwrite each other: without ``steps``, runs of more than one budget raise ``ValueError``."""
    matching = [r for r in _of_layers(runs.values(), layers)
                if r["task"] == task and r["d_model"] == d_model and r.get("phase") != "measure"
                and (steps is None or r.get("steps") == steps)]
    budgets = {r.get("steps") for r in matching}
    if steps is None and len(budgets) > 1:
        found = ", ".join(str(b) for b in sorted(budgets, key=lambda b: (b is None, b or 0)))
        raise ValueError(f"{task} d_model={d_model} has runs of {len(budgets)} step budgets ({found}); "
                         "pass steps= to pick one")
    table: dict[str, dict[float, dict[int, float | None]]] = {}
    for r in matching:
        table.setdefault(r["mixer"], {}).setdefault(r["lr"], {})[r["seed"]] = store.finite_metric(r)
    return {m: {lr: [by_seed[s] for s in sorted(by_seed)] for lr, by_seed in sorted(rates.items())}
            for m, rates in table.items()}


def _setup(record: dict) -> tuple:
    return tuple(record.get(name) for name in ("steps", "vocab_size", "num_layers", "num_heads", "batch_size",
                                               "seq_len", "evals"))


def cell_metrics(cells: dict, task: str, mixer: str, d_model: int = 64) -> list[float]:
    """The metric of every stored seed of one cell of ``final_cells`` (empty when the cell has no run)."""
    return [run["metric"] for run in cells.get((task, d_model, mixer), [])]


def rule_verdict(cells: dict, task: str, a: str, b: str, d_model: int = 64) -> str:
    """The stated rule (``stats.beats``: means apart by more than two standard errors) applied to two
    stored cells, in words."""
    runs_a, runs_b = cell_metrics(cells, task, a, d_model), cell_metrics(cells, task, b, d_model)
    if min(len(runs_a), len(runs_b)) < 2:
        return f"no call: {min(len(runs_a), len(runs_b))} seed, no spread to compare"
    higher = cells[task, d_model, a][0].get("higher_is_better", True)
    if beats(runs_a, runs_b, higher_is_better=higher):
        return f"{LABELS[a]} beats {LABELS[b]}"
    if beats(runs_b, runs_a, higher_is_better=higher):
        return f"{LABELS[b]} beats {LABELS[a]}"
    return "no call: the means are within two standard errors"


def success_rule_verdict(cells: dict, task: str, a: str, b: str, d_model: int = 64) -> str:
    """Fisher's exact test on the success counts (accuracy >= 0.9) of two stored cells, in words, with both
    rates and the p-value (``stats.success_verdict``)."""
    runs_a, runs_b = cell_metrics(cells, task, a, d_model), cell_metrics(cells, task, b, d_model)
    if not runs_a or not runs_b:
        return "no call: a cell has no stored run"
    return success_verdict(runs_a, runs_b, LABELS.get(a, a), LABELS.get(b, b))


def cell_success(cells: dict, task: str, mixer: str, d_model: int = 64) -> str:
    """``"4/5 [0.38, 0.96]"``: a stored cell's success rate with its 95 % Wilson interval."""
    return str(success_rate(cell_metrics(cells, task, mixer, d_model)))


def paired_verdict(cells: dict, task: str, a: str, b: str, d_model: int = 64) -> str:
    """The paired rule (``stats.beats_paired``: per-seed differences, the same data on both sides), in words."""
    by_seed = [{run["seed"]: run["metric"] for run in cells.get((task, d_model, m), [])} for m in (a, b)]
    shared = len(set(by_seed[0]) & set(by_seed[1]))
    if shared < 2:
        return f"no call: {shared} shared seed, nothing to pair"
    higher = cells[task, d_model, a][0].get("higher_is_better", True)
    if beats_paired(*by_seed, higher_is_better=higher):
        return f"{LABELS[a]} beats {LABELS[b]} (paired)"
    if beats_paired(*by_seed[::-1], higher_is_better=higher):
        return f"{LABELS[b]} beats {LABELS[a]} (paired)"
    return "no call (paired): the mean difference is within two standard errors"


def cell_summary(cells: dict, task: str, mixer: str, d_model: int = 64) -> str:
    """``"0.943 ± 0.039"`` over a cell's seeds, or ``"0.977 (one seed)"``: how the chapters quote a cell."""
    stats = summarize(cell_metrics(cells, task, mixer, d_model))
    return f"{stats.mean:.3f}" + (f" ± {stats.std:.3f}" if stats.n > 1 else " (one seed)")


def sweep_verdict(choices: dict, task: str, mixer: str, d_model: int = 64) -> str | None:
    """The stored verdict ("chosen", "only rate", "all at chance") of the learning-rate sweep that decides
    ``task``'s rate for ``mixer`` at ``d_model`` (its family's sweep: every MQAR task takes MQAR-16's); None while
    no choice is stored. ``choices``: ``store.load_choices``."""
    for choice in choices.values():
        if _sweep_of(choice) == (family(task), d_model, mixer):
            return choice.get("verdict")
    return None


def _sweep_of(choice: dict) -> tuple[str, int, str]:
    """The (task family, d_model, mixer) whose rate a stored choice decides."""
    return family(choice["source_task"]), choice["d_model"], choice["mixer"]


def print_sweep_table(runs: dict, cells: dict, task: str, mixers, *, steps: int, choices: dict, d_model: int = 64,
                      sweep_seeds: int | None = 2, labels: dict | None = None) -> dict[str, dict[float, list]]:
    """One row per mixer: the accuracy of each sweep seed at each learning rate (``sweep_seeds=None``: every
    stored seed), then its final cell (the chosen rate, the success rate with its 95 % Wilson interval, mean ± std
    over every seed), or, without one, the stored rate choice's verdict (``choices``: ``store.load_choices``):
    "every rate at chance" only where the sweep's choice says so. Returns the sweep (:func:`sweep_metrics`) it
    printed."""
    sweep = sweep_metrics(runs, task, d_model, steps=steps)
    labels = {**LABELS, **(labels or {})}
    rates = sorted({lr for mixer in mixers for lr in sweep.get(mixer, {})})
    shown = lambda seeds: " ".join("div." if a is None else f"{a:.2f}" for a in seeds[:sweep_seeds])  # noqa: E731
    entries = {mixer: [shown(sweep.get(mixer, {}).get(lr, [])) for lr in rates] for mixer in mixers}
    widths = [max([12] + [len(row[i]) + 3 for row in entries.values()]) for i in range(len(rates))]
    name = max(len(labels.get(m, m)) for m in mixers) + 2
    print(f"{'mixer':<{name}}" + "".join(f"{f'lr {lr:g}':>{w}}" for lr, w in zip(rates, widths)) + "   final cell")
    for mixer in mixers:
        cell = cells.get((task, d_model, mixer))
        if cell:
            final = (f"lr {cell[0]['lr']:g}: {cell_success(cells, task, mixer, d_model)} succeed, "
                     f"mean {cell_summary(cells, task, mixer, d_model)}")
        elif sweep_verdict(choices, task, mixer, d_model) == "all at chance":
            final = "every rate at chance: no final cell"
        else:
            final = "no final cell yet"
        print(f"{labels.get(mixer, mixer):<{name}}" + "".join(f"{text:>{w}}" for text, w in zip(entries[mixer], widths))
              + f"   {final}")
    return sweep


def run_setup(record: dict) -> str:
    """A stored run's training set-up and the machine it ran on, in one line."""
    return (f"d_model {record['d_model']}, {record['num_layers']} layers, {record['num_heads']} heads, "
            f"vocab {record['vocab_size']}, T {record.get('seq_len_used', record['seq_len'])}, "
            f"batch {record['batch_size']}, "
            f"{record['steps']} steps, lr {record['lr']:g}; {record['provenance']['device_name']}, "
            f"{record['backend']} backend")


def print_cell_table(cells: dict, tasks, mixers, d_model: int = 64) -> None:
    """One row per (task, mixer): seeds, mean and std of the metric, and the success rate (metric >= 0.9) with its
    95 % Wilson interval where higher is better; a cell with no stored run says so."""
    print(f"{'task':<10}{'mixer':<27}{'seeds':>6}{'mean':>8}{'std':>8}{'success [95% CI]':>20}")
    for task in tasks:
        for mixer in mixers:
            runs = cell_metrics(cells, task, mixer, d_model)
            if not runs:
                print(f"{task:<10}{LABELS[mixer]:<27}{0:>6}  no stored run at this size")
                continue
            stats = summarize(runs)
            success = str(success_rate(runs)) if cells[task, d_model, mixer][0].get("higher_is_better", True) else "-"
            print(f"{task:<10}{LABELS[mixer]:<27}{stats.n:>6}{stats.mean:>8.3f}{stats.std:>8.3f}{success:>20}")


def trained_retention(runs: dict, layers: str = "earlier") -> dict[tuple[str, int], list[list[float]]]:
    """(mixer, d_model) -> each stored run's per-layer mean retention e^g after training, for mixers with a gate,
    over the runs of ``layers`` (see :func:`final_cells`; default the earlier runs, whose gates began saturated).

    A run of a mixer with a decay gate stores, per gated layer, the mean of e^g over the tokens of an evaluation
    batch (``metrics["retention_mean"]``): near 1 everywhere means the decay took no part in what the run learned.
    """
    by_cell: dict[tuple[str, int], list[list[float]]] = {}
    for run in _of_layers(runs.values(), layers):
        if "retention_mean" in run.get("metrics", {}):
            by_cell.setdefault((run["mixer"], run["d_model"]), []).append(run["metrics"]["retention_mean"])
    return by_cell


def print_trained_retention(runs: dict, prefix: str, glue, layers: str = "earlier"
                            ) -> dict[tuple[str, int], list[list[float]]]:
    """Print :func:`trained_retention` as a table (runs, smallest and median layer per cell) and glue each cell's
    numbers as ``{prefix}_retention_{mixer}_d{d}_{runs,min,median}``; returns the table's data."""
    from statistics import median

    retention = trained_retention(runs, layers)
    width = max([len("mixer"), *(len(LABELS[mixer]) for mixer, _ in retention)]) + 1
    print(f"{'mixer':<{width}}{'d':>5}{'runs':>6}{'smallest':>10}{'median':>8}   (per-layer trained mean retention)")
    for (mixer, d), per_run in sorted(retention.items()):
        layers = [value for run in per_run for value in run]
        print(f"{LABELS[mixer]:<{width}}{d:>5}{len(per_run):>6}{min(layers):>10.3f}{median(layers):>8.3f}")
        name = f"{prefix}_retention_{mixer.split(':')[-1]}_d{d}"
        glue(f"{name}_runs", str(len(per_run)), display=False)
        glue(f"{name}_min", f"{min(layers):.2f}", display=False)
        glue(f"{name}_median", f"{median(layers):.3f}", display=False)
    return retention


def saturated_recipe_retention(draws: int = 100_000, seed: int = 0):
    """Retention e^g at x = 0 of the gate the stored gated runs were trained with, ``draws`` draws.

    Those runs computed K3's bounded gate g = -5 sigmoid(A (W x + dt_bias)) but initialised it with the recipe of
    the softplus form: A in U(1, 16) and dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1] (Mamba's,
    Gu and Dao 2023, section 3.6). At x = 0 that is e^{-5 sigmoid(A dt_bias)}: nearly 1 for almost every draw.
    """
    import torch

    from k3lite.bakeoff.models import KDA_LOWER_BOUND, KIMI_LINEAR_A_RANGE, initial_dt_bias

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        A = torch.empty(draws).uniform_(*KIMI_LINEAR_A_RANGE)
        dt_bias = initial_dt_bias(draws)
    return torch.exp(KDA_LOWER_BOUND * torch.sigmoid(A * dt_bias))


def _seeds_then_mean(records: list[dict]) -> tuple[int, float]:
    mean = sum(record["metric"] for record in records) / len(records)
    return len(records), mean if records[0].get("higher_is_better", True) else -mean


def _order(mixers) -> list[str]:
    return sorted(mixers, key=lambda m: (BUILTIN.index(m) if m in BUILTIN else len(BUILTIN), m))


def _figure(plt, width=7.0, height=4.2):
    fig, ax = plt.subplots(figsize=(width, height), facecolor="white")
    ax.set_facecolor("white")
    ax.grid(alpha=0.3)
    return fig, ax


def _metric(record, name):
    return record["metric"] if name is None else record["metrics"][name]


def plot_cell(task: str, d_model: int | None = None, path="figures/bakeoff.json", ax=None, metric: str | None = None,
              mixers=None, layers: str = "latest"):
    """One stored cell: ``task="mqar"`` draws recall against the number of pairs (one line per mixer),
    any other task one bar per mixer (``mixers``: only these). The cells are :func:`final_cells` with the
    store's rate choices, so a figure draws the cells its chapter's tables print. ``layers`` as in
    :func:`final_cells`: a chapter that quotes one generation of runs draws that generation only. Returns the
    matplotlib axes."""
    import matplotlib.pyplot as plt

    cells = final_cells(store.load(path), store.load_choices(path), layers=layers)
    if ax is None:
        _, ax = _figure(plt)
    if task == "mqar":
        widths = sorted({d for (t, d, _) in cells if family(t) == "mqar"})
        if not widths:
            raise ValueError(f"path {str(path)!r} holds no MQAR runs")
        d_model = widths[-1] if d_model is None else d_model
        _mqar_lines(ax, cells, d_model)
    else:
        _bars(ax, cells, task, d_model, metric, mixers)
    return ax


def _mqar_lines(ax, cells, d_model):
    mixers = _order({m for (t, d, m) in cells if family(t) == "mqar" and d == d_model})
    for mixer in mixers:
        points = sorted((int(t[4:]), recs) for (t, d, m), recs in cells.items()
                        if family(t) == "mqar" and d == d_model and m == mixer)
        xs = [p for p, _ in points]
        stats = [summarize([r["metric"] for r in recs]) for _, recs in points]
        ax.errorbar(xs, [s.mean for s in stats], yerr=[s.std for s in stats], marker="o", capsize=3,
                    color=COLORS.get(mixer), label=f"{LABELS.get(mixer, mixer)}")
    ax.set_xscale("log", base=2)
    pairs = sorted({int(t[4:]) for (t, d, _) in cells if family(t) == "mqar" and d == d_model})
    ax.set_xticks(pairs, [str(p) for p in pairs])
    ax.minorticks_off()
    ax.set_xlabel("key-value pairs in the sequence")
    ax.set_ylabel("recall accuracy on the queries")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"MQAR, d_model {d_model}: mean ± std over seeds")
    ax.legend(fontsize=8)


def _bars(ax, cells, task, d_model, metric, only=None):
    matching = {m: recs for (t, d, m), recs in cells.items()
                if t == task and (d_model is None or d == d_model) and (only is None or m in only)}
    if not matching:
        raise ValueError(f"task {task!r} has no stored runs" + (f" at d_model={d_model}" if d_model else ""))
    mixers = _order(matching)
    name = metric or matching[mixers[0]][0]["metric_name"]
    for i, mixer in enumerate(mixers):
        values = [_metric(r, metric) for r in matching[mixer]]
        s = summarize(values)
        ax.bar(i, s.mean, yerr=s.std, capsize=4, color=COLORS.get(mixer, "#8c564b"), alpha=0.8)
        ax.scatter([i] * len(values), values, color="black", s=10, zorder=3)
        ax.annotate(f"n={s.n}", (i, 0), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=7)
    if name == "probe_recall":
        ax.axhline(1 / len(PROBE_ALPHABET), color="black", lw=0.8, ls="--", label="chance (one guess in 36)")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(mixers)), [LABELS.get(m, m) for m in mixers], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel({"accuracy": "accuracy on the scored positions", "val_bpb": "validation bits per byte",
                   "probe_recall": "accuracy on the planted code"}.get(name, name))
    ax.set_title(TASK_TITLES.get(task, task) + " (mean ± std)", fontsize=10)


def plot_lm_curves(runs: dict, ax, layers: str = "latest"):
    cells = final_cells(runs, layers=layers)
    for (task, _, mixer), records in sorted(cells.items(), key=lambda c: _order([c[0][2]])):
        if task != "lm":
            continue
        steps = records[0]["curve"]["step"]
        curves = [r["curve"]["loss"] for r in records if len(r["curve"]["loss"]) == len(steps)]
        stats = [summarize(column) for column in zip(*curves)]
        mean = [s.mean / 0.6931 for s in stats]
        std = [s.std / 0.6931 for s in stats]
        ax.plot(steps, mean, color=COLORS.get(mixer), label=LABELS.get(mixer, mixer))
        ax.fill_between(steps, [m - e for m, e in zip(mean, std)], [m + e for m, e in zip(mean, std)],
                        color=COLORS.get(mixer), alpha=0.2)
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (bits per byte)")
    ax.set_title("Byte-level LM at T = 2048: training loss, mean ± std over seeds", fontsize=10)
    ax.legend(fontsize=8)


def _tokens_per_s(cells: dict, mixer: str, length: int, batch: int, d: int) -> float:
    """Mean training tokens/s of ``mixer``'s final runs at one shape (NaN where there are none)."""
    recs = [r for (_, dd, m), rs in cells.items() if m == mixer and dd == d for r in rs
            if r["seq_len_used"] == length and r["batch_size"] == batch]
    return summarize([r["tokens_per_s"] for r in recs]).mean if recs else float("nan")


def plot_throughput(runs: dict, ax, layers: str = "latest"):
    """Training tokens/s of each mixer divided by the SDPA model's at the same shape."""
    cells = final_cells(runs, layers=layers)
    shapes = sorted({(r[0]["seq_len_used"], r[0]["batch_size"], d) for (t, d, m), r in cells.items()})
    mixers = _order({m for (_, _, m) in cells})
    width = 0.8 / max(1, len(mixers))
    for j, mixer in enumerate(mixers):
        ratios = []
        for length, batch, d in shapes:
            ratios.append(_tokens_per_s(cells, mixer, length, batch, d)
                          / _tokens_per_s(cells, "softmax", length, batch, d))
        ax.bar([i + j * width for i in range(len(shapes))], ratios, width, color=COLORS.get(mixer),
               label=LABELS.get(mixer, mixer))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks([i + (len(mixers) - 1) * width / 2 for i in range(len(shapes))],
                  [f"T={t}, B={b}, d={d}" for t, b, d in shapes], fontsize=8)
    ax.set_ylabel("training tokens/s relative to SDPA")
    backends = sorted({r["backend"] for recs in cells.values() for r in recs})
    ax.set_title(f"Training throughput ({', '.join(backends)} backend), each shape on one device", fontsize=10)
    ax.legend(fontsize=7)


def plot_lr_sweep(runs: dict, task: str, d_model: int, ax, *, steps: int, layers: str = "published",
                  labels: dict | None = None):
    """The evidence of one learning-rate choice: each seed's metric (dots) and their mean (line) at every rate,
    for the runs of one budget ``steps`` and one generation ``layers`` (never two budgets on one line).
    ``labels`` names mixers in the legend where a chapter names them otherwise than :data:`LABELS`."""
    labels = {**LABELS, **(labels or {})}
    sweep = sweep_metrics(runs, task, d_model, layers=layers, steps=steps)
    metric_name = next((r["metric_name"] for r in runs.values() if r["task"] == task), "metric")
    for mixer in _order(sweep):
        rates = {lr: [m for m in seeds if m is not None] for lr, seeds in sweep[mixer].items()}
        rates = {lr: finite for lr, finite in rates.items() if finite}
        color = COLORS.get(mixer)
        for lr, finite in rates.items():
            ax.scatter([lr] * len(finite), finite, s=12, color=color, alpha=0.5)
        ax.plot(list(rates), [sum(f) / len(f) for f in rates.values()], marker="o", color=color,
                label=labels.get(mixer, mixer))
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel(metric_name)
    ax.set_title(f"Learning-rate sweep on {task}, d_model {d_model}, {steps} steps: mean (line), seeds (dots)",
                 fontsize=10)
    ax.legend(fontsize=8)


SCRATCH_FIGURES = "runs/figures"   # git-ignored: regenerated figures never overwrite committed files


def plot_all(path="figures/bakeoff.json", out_dir=SCRATCH_FIGURES, layers: str = "latest") -> list[Path]:
    """Every bake-off figure from the store at ``path`` into ``out_dir``; returns the files written. ``layers``
    as in :func:`final_cells` ("published" or "earlier" keeps one generation of runs per figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = store.load(path)
    if not runs:
        raise ValueError(f"path {str(path)!r} holds no runs")
    cells = final_cells(runs, layers=layers)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name):
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=130, facecolor="white")
        plt.close(fig)
        written.append(out_dir / name)

    for d in sorted({d for (t, d, _) in cells if family(t) == "mqar"}):
        fig, ax = _figure(plt)
        _mqar_lines(ax, cells, d)
        save(fig, f"bakeoff_mqar_d{d}.png")
    zoology = sorted({t for (t, _, _) in cells if family(t) == "zoology"})
    for task in ("rebind", "switch", "twoscale", *zoology):
        if any(t == task for (t, _, _) in cells):
            fig, ax = _figure(plt)
            _bars(ax, cells, task, None, None)
            save(fig, f"bakeoff_{task}.png")
    if any(t == "lm" for (t, _, _) in cells):
        for metric in ("val_bpb", "probe_recall"):
            fig, ax = _figure(plt)
            _bars(ax, cells, "lm", None, metric)
            save(fig, f"bakeoff_lm_{metric}.png")
        fig, ax = _figure(plt)
        plot_lm_curves(runs, ax, layers)
        save(fig, "bakeoff_lm_loss.png")
    fig, ax = _figure(plt, width=9.0)
    plot_throughput(runs, ax, layers)
    save(fig, "bakeoff_throughput.png")
    swept = {(r["task"], r["d_model"], r["steps"], "published" if published_layer(r) else "earlier")
             for r in _of_layers(runs.values(), layers) if r.get("phase") == "lr"}
    for task, d, steps, generation in sorted(swept):   # one figure per budget and generation: seeds never mix
        fig, ax = _figure(plt)
        plot_lr_sweep(runs, task, d, ax, steps=steps, layers=generation)
        save(fig, f"bakeoff_lr_{task}_d{d}_n{steps}_{generation}.png")
    return written


LIVE_DATA = {"vocab_size": 40, "seq_len": 64, "batch_size": 32, "eval_batch": 128}   # the toy runs' data


def live_chance() -> float:
    """Accuracy of guessing a value uniformly on the live demo's data (values are half the non-special ids)."""
    from k3lite.bakeoff.tasks import SPECIAL

    return 1 / ((LIVE_DATA["vocab_size"] - SPECIAL) // 2)


def live_demo(task: str = "rebind4", mixers=("linear_attention", "delta_rule"), *, steps: int = 300,
              d_model: int = 32, num_layers: int = 1, seeds=(0, 1, 2), lr: float = 1e-2) -> dict[str, list[float]]:
    """Train each mixer at toy size on the CPU through the bake-off's own code; ``{mixer: [metric per seed]}``.

    The defaults (rebinding with 4 keys, width 32, one layer, vocabulary 40, 64 tokens, 300 steps of 32
    sequences) take a few seconds per run on a laptop core and already separate accumulating from
    overwriting. The numbers depend on the CPU's float rounding; what a chapter claims from them it checks."""
    from k3lite.bakeoff.runs import RunSpec, run

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    results = {}
    for mixer in mixers:
        results[mixer] = [
            run(RunSpec(task=task, mixer=mixer, d_model=d_model, lr=lr, seed=seed, steps=steps,
                        num_layers=num_layers, lm_seq_len=256, phase="demo", evals=1, **LIVE_DATA), "cpu")["metric"]
            for seed in seeds]
    return results
