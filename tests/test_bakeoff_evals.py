"""The bake-off's periodic held-out evaluation, cost record, Zoology-style MQAR, chance levels, stored
learning-rate choices and the success table, at toy size on the CPU; records written before any of these
still read."""

from __future__ import annotations

from dataclasses import replace

import torch

from k3lite.bakeoff import cli, store
from k3lite.bakeoff.plots import final_cells, published_layer
from k3lite.bakeoff.runs import EVAL_SEED, RunSpec, evaluation_steps, run
from k3lite.bakeoff.tasks import BLANK, SPECIAL, at_chance, chance, family, make_task

TOY = dict(task="mqar4", mixer="delta_rule", d_model=16, lr=3e-3, seed=0, steps=4, batch_size=2, vocab_size=80,
           seq_len=64, eval_batch=4)


def test_evaluation_steps_are_every_tenth_and_end_at_the_last_step():
    assert evaluation_steps(1000) == list(range(100, 1001, 100))
    assert evaluation_steps(2, 10) == [1, 2] and evaluation_steps(7, 1) == [7]


def test_a_run_records_its_evaluations_cost_and_steps_to_learn_without_changing_its_training():
    once = run(RunSpec(**TOY, evals=1))
    record = run(RunSpec(**TOY, evals=2))
    assert [point["step"] for point in record["evaluations"]] == [2, 4]
    assert record["evaluations"][-1]["accuracy"] == record["metric"]
    assert "retention_mean" not in record["evaluations"][0]                  # the gates only at the end
    # the held-out batches come from their own generator: training is the same with or without evaluations
    assert record["final_loss"] == once["final_loss"] and record["metric"] == once["metric"]
    assert record["key"].endswith("|ev2") and record["key"] != once["key"]
    cost = record["cost"]
    assert cost["device"] == "cpu" and cost["device_name"] and cost["steps"] == 4
    assert 0 < cost["train_s"] <= cost["wall_s"] and cost["eval_s"] > 0
    assert record["steps_to_learn"] is None or record["steps_to_learn"] in (2, 4)
    assert record["chance"] == 0.25


def test_held_out_batches_differ_from_every_training_seed():
    task = make_task("mqar4", vocab_size=80, seq_len=64)
    held_out = task.sample(4, torch.Generator().manual_seed(EVAL_SEED), "cpu")[0]
    for seed in range(10):
        assert not torch.equal(task.sample(4, torch.Generator().manual_seed(seed), "cpu")[0], held_out)


def test_zoology_mqar_places_queries_by_a_power_law_on_even_tail_slots():
    pairs, vocab, length = 8, 8192, 128
    task = make_task(f"zoology{pairs}", vocab_size=vocab, seq_len=length)
    assert family(task.name) == "zoology" and task.chance == 1 / pairs
    inputs, targets, score = task.sample(2000, torch.Generator().manual_seed(0), "cpu")
    assert inputs.shape == (2000, length) and score.sum(1).eq(pairs).all()
    keys, values = inputs[:, 0:2 * pairs:2], inputs[:, 1:2 * pairs:2]
    num_keys = (vocab - SPECIAL) // 2
    assert (keys < SPECIAL + num_keys).all() and (values >= SPECIAL + num_keys).all()
    assert all(len(set(row)) == pairs for row in values[:50].tolist())              # distinct values
    rows, positions = score.nonzero(as_tuple=True)
    assert ((positions - 2 * pairs) % 2 == 0).all() and (positions >= 2 * pairs).all()
    asked, wanted = inputs[rows, positions].view(-1, pairs), targets[rows, positions].view(-1, pairs)
    for row in range(20):
        lookup = dict(zip(keys[row].tolist(), values[row].tolist()))
        assert sorted(asked[row].tolist()) == sorted(lookup)
        assert [lookup[k] for k in asked[row].tolist()] == wanted[row].tolist()
    # no blank to lean on: the tail's other tokens are random non-special tokens
    assert not (inputs[:, 2 * pairs:] == BLANK).any() and (inputs >= SPECIAL).all()
    slots = (positions - 2 * pairs) // 2
    total = (length - 2 * pairs) // 2
    early = (slots < total // 10).float().mean().item()
    late = (slots >= total - total // 10).float().mean().item()
    assert early > 0.25 and late < 0.1 and early > 3 * late       # uniform placement would give about 0.1 each


def test_chance_levels_and_the_at_chance_rule():
    assert chance("mqar16") == 1 / 16 and chance("rebind4") == 1 / 4 and chance("switch") == 0.5
    assert chance("twoscale") == 1 / 8 and chance("lm") == 8.0
    assert at_chance(0.008, 1 / 128) and at_chance(None, 0.25) and at_chance(float("nan"), 0.25)
    assert not at_chance(0.2, 1 / 16)                   # closes 15 % of the way from 1/16 to 1
    assert at_chance(0.54, 0.5) and not at_chance(0.6, 0.5)
    assert at_chance(7.5, 8.0, higher_is_better=False) and not at_chance(5.0, 8.0, higher_is_better=False)


def test_vocabulary_per_family_and_store_alias():
    args = cli.parser().parse_args(["--tasks", "mqar4,zoology4", "--d-models", "16", "--vocab", "80,zoology=200",
                                    "--width-of", "zoology=32", "--store", "x.json"])
    cli.check_args(args)
    specs = {s.task: s for s in cli.cell_specs(args, 1e-3, 0, "seeds")}
    assert (specs["mqar4"].vocab_size, specs["zoology4"].vocab_size) == (80, 200)
    assert (specs["mqar4"].d_model, specs["zoology4"].d_model) == (16, 32) and args.out == "x.json"
    default = cli.parser().parse_args([])
    cli.check_args(default)
    assert default.vocab_of["zoology"] == 8192 and default.vocab_of["mqar"] == 512
    assert default.seeds >= 5 and default.lr_seeds >= 2 and len(default.lr_list) >= 3


def _record(task, mixer, lr, seed, metric, *, phase="seeds", evaluations=True, learned=None, steps=100):
    spec = RunSpec(task=task, mixer=mixer, d_model=16, lr=lr, seed=seed, steps=steps)
    record = {"key": spec.key(), **spec.__dict__, "metric": metric, "metric_name": "accuracy",
              "higher_is_better": True, "tokens_per_s": 1000.0, "wall_s": 2.0, "parameters": 1, "phase": phase}
    if evaluations:   # the current protocol; an old record has neither field and a key without "|ev"
        record.update(evaluations=[{"step": steps, "accuracy": metric}], steps_to_learn=learned,
                      cost={"wall_s": 3.0, "device": "cpu"})
    else:
        record["key"] = record["key"].rsplit("|ev", 1)[0]
        del record["evals"]
    return record


def test_table_prints_success_rates_intervals_and_steps_to_learn_and_reads_old_records(tmp_path, capsys):
    path = tmp_path / "s.json"
    new = [_record("mqar4", "kda", 1e-2, seed, metric, learned=step)
           for seed, (metric, step) in enumerate([(0.99, 40), (0.95, 60), (0.98, 50), (0.2, None), (0.97, 80)])]
    stuck = [_record("mqar4", "gated_delta_rule", 1e-2, seed, 0.1) for seed in range(5)]
    old = [_record("mqar4", "kda", 3e-3, seed, 0.5, evaluations=False) for seed in range(3)]
    only_old = [_record("rebind", "kda", 3e-3, seed, 0.7, evaluations=False) for seed in range(3)]
    store.save(path, {r["key"]: r for r in new + stuck + old + only_old})
    cells = final_cells(store.load(path))
    assert [r["lr"] for r in cells["mqar4", 16, "kda"]] == [1e-2] * 5            # the current protocol replaces
    assert len(cells["rebind", 16, "kda"]) == 3                                  # old records alone still read
    assert cli.main(["--table", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    kda = next(line for line in out.splitlines() if line.startswith("mqar4") and " kda " in line)
    assert "4/5 [0.38, 0.96]" in kda and kda.split()[12] == "55"                 # median of 40, 50, 60, 80
    assert kda.split()[-2:] == ["100", "published"]                              # its budget and generation
    assert kda.split()[14] == "nan"                                              # no SDPA cell: no ratio
    assert "0.818 ± 0.155" in kda
    rebind = next(line for line in out.splitlines() if line.startswith("rebind"))
    assert "0/3 [0.00, 0.56]" in rebind and rebind.split()[12] == "-"            # old records: no evaluations
    assert rebind.split()[-1] == "earlier"
    from k3lite.bakeoff.plots import cell_success, success_rule_verdict

    assert cell_success(cells, "mqar4", "kda", 16) == "4/5 [0.38, 0.96]"
    assert success_rule_verdict(cells, "mqar4", "kda", "gated_delta_rule", 16).startswith("KDA beats Gated DeltaNet")
    contrast = next(line for line in out.splitlines() if "gated_delta_rule vs kda" in line)
    assert "kda beats gated_delta_rule (4/5 vs 0/5, Fisher p = 0.0476)" in contrast   # the winner's count first


def _kda_sweep_at_chance():
    """The arguments of a three-rate KDA sweep on mqar4, and its runs, every one at chance (0.26)."""
    args = cli.parser().parse_args(["--tasks", "mqar4", "--mixers", "kda", "--d-models", "16", "--steps", "100",
                                    "--batch-size", "64", "--vocab", "512", "--lrs", "1e-3,3e-3,1e-2"])
    cli.check_args(args)
    runs = {}
    for spec in cli.sweep_specs(args):
        record = _record("mqar4", "kda", spec.lr, spec.seed, 0.26, phase="lr")
        record.update(spec.__dict__, key=spec.key())
        runs[spec.key()] = record
    return args, runs


def test_choices_are_stored_with_their_evidence_and_an_all_at_chance_cell_has_no_final_cell(tmp_path, capsys):
    path = tmp_path / "c.json"
    args, runs = _kda_sweep_at_chance()
    choices = cli.lr_choices(args, runs)
    (choice,) = choices.values()
    assert choice["verdict"] == "all at chance" and choice["choice"] is None
    assert choice["rates"] == [1e-3, 3e-3, 1e-2] and choice["seeds"] == [0, 1]
    assert choice["metrics"]["0.003"] == {"0": 0.26, "1": 0.26}
    store.save(path, runs, choices=choices)
    assert store.load_choices(path) == choices
    assert final_cells(store.load(path), store.load_choices(path)) == {}
    assert ("mqar4", 16, "kda") in final_cells(store.load(path))                 # without choices: as before
    assert cli.main(["--table", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "all at chance at every rate" in out and "more seeds" not in out
    # seeds run beyond the sweep (a diagnosis) are counted on the same line, never hidden
    sweep_spec = next(spec for spec in cli.sweep_specs(args) if spec.lr == 3e-3)
    for seed, metric in ((2, 0.95), (3, 0.2)):
        spec = replace(sweep_spec, seed=seed)
        record = _record("mqar4", "kda", spec.lr, seed, metric, phase="lr")
        record.update(spec.__dict__, key=spec.key())
        runs[spec.key()] = record
    store.save(path, runs, choices=choices)
    assert cli.main(["--table", "--store", str(path)]) == 0
    assert "no seeds phase; 2 more seeds at 0.003: 1/2 [" in capsys.readouterr().out
    other = tmp_path / "o.json"
    store.save(other, {}, choices={"x": {"choice": 1e-3}})
    merged = tmp_path / "m.json"
    store.merge([path, other], merged)
    assert set(store.load_choices(merged)) == set(choices) | {"x"}
    assert store.load_choices(tmp_path / "absent.json") == {}


def test_the_default_mqar_budget_is_the_measured_one():
    # MQAR_STEPS is read off the course's evidence: at the grid's smallest MQAR, every stored seed of softmax
    # attention and DeltaNet (published-layer runs, every swept rate) learns within the budget, and the runs
    # with periodic evaluations pass 0.9 in its first half, so the budget is not set at the edge of a plateau.
    runs = [r for r in store.load(store.ROOT / store.COMMITTED).values()
            if published_layer(r) and r["task"] == "mqar16" and r["d_model"] == 64
            and r["mixer"] in ("softmax", "delta_rule") and r["steps"] == cli.MQAR_STEPS]
    assert len(runs) >= 10 and {r["mixer"] for r in runs} == {"softmax", "delta_rule"}
    assert min(store.finite_metric(r) or 0.0 for r in runs) >= 0.9
    learned = [r["steps_to_learn"] for r in runs if len(r["evaluations"]) > 1]
    assert len(learned) >= 5 and max(learned) <= cli.MQAR_STEPS // 2


def test_plot_cell_draws_only_the_generation_it_is_asked_for(tmp_path):
    from k3lite.bakeoff.plots import plot_cell

    path = tmp_path / "s.json"
    published = [_record("mqar4", "kda", 1e-2, seed, 0.9) for seed in range(2)]
    earlier = [_record(task, "kda", 3e-3, seed, 0.5, evaluations=False) for task in ("mqar4", "mqar8")
               for seed in range(2)]
    store.save(path, {r["key"]: r for r in published + earlier})
    points = {layers: {int(x): y for x, y in zip(*plot_cell("mqar", path=path, layers=layers).lines[0].get_data())}
              for layers in ("earlier", "latest")}
    assert points["earlier"] == {4: 0.5, 8: 0.5}           # the earlier grid alone
    assert points["latest"] == {4: 0.9, 8: 0.5}            # a cell's published runs replace its earlier ones


def test_plot_cell_draws_the_cells_the_stored_choices_give(tmp_path):
    from k3lite.bakeoff.plots import plot_cell

    path = tmp_path / "s.json"
    args, runs = _kda_sweep_at_chance()      # a sweep at chance at every rate: a finding, and no final cell
    earlier = [_record(task, "delta_rule", 3e-3, seed, 0.5, evaluations=False) for task in ("mqar4", "mqar8")
               for seed in range(2)]
    runs.update({r["key"]: r for r in earlier})
    store.save(path, runs, choices=cli.lr_choices(args, runs))
    drawn = {bars.get_label(): {int(x): y for x, y in zip(*bars.lines[0].get_data())}
             for bars in plot_cell("mqar", path=path).containers}
    assert drawn == {"DeltaNet": {4: 0.5, 8: 0.5}}       # without the choices, KDA would draw its sweep's 0.26


def test_table_compares_speed_with_sdpa_only_on_the_same_device(tmp_path, capsys):
    def on(device, record):
        return {**record, "provenance": {"device_name": device}}

    path = tmp_path / "s.json"
    sdpa = [on("GPU A", _record("mqar4", "softmax", 1e-2, seed, 1.0)) for seed in range(2)]
    same = [on("GPU A", {**_record("mqar4", "kda", 1e-2, seed, 1.0), "tokens_per_s": 500.0}) for seed in range(2)]
    other = [on("GPU B", _record("mqar4", "delta_rule", 1e-2, seed, 1.0)) for seed in range(2)]
    store.save(path, {r["key"]: r for r in sdpa + same + other})
    assert cli.main(["--table", "--store", str(path)]) == 0
    rows = {line.split()[2]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith("mqar4")}
    assert rows["kda"][14] == "0.50" and rows["delta_rule"][14] == "nan"


def test_a_story_pair_across_generations_says_so(capsys):
    published = [_record("rebind", "delta_rule", 3e-3, seed, 0.95) for seed in range(3)]
    earlier = [_record("rebind", "linear_attention", 3e-3, seed, 0.2, evaluations=False) for seed in range(3)]
    also_published = [_record("rebind", "gated_delta_rule", 3e-3, seed, 0.9) for seed in range(3)]
    cli.print_contrasts({r["key"]: r for r in published + earlier + also_published})
    lines = capsys.readouterr().out.splitlines()
    mixed = next(line for line in lines if "linear_attention vs delta_rule" in line)
    same = next(line for line in lines if "delta_rule vs gated_delta_rule" in line)
    assert mixed.endswith("[an earlier cell against a published-layer cell]")
    assert "earlier cell" not in same
