"""k3lite.bakeoff at toy size on the CPU: tasks, mixers, runs, store (resume, merge), statistics, arguments."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from k3lite import kernels  # noqa: F401 - first: it switches on the Triton interpreter before triton is imported
from k3lite.bakeoff import cli, store
from k3lite.bakeoff.models import BUILTIN, build_model, load_custom, matched_mlp_hidden, num_parameters
from k3lite.bakeoff.plots import live_demo, plot_all, plot_cell
from k3lite.bakeoff.runs import RunSpec, TritonPathError, _check_triton_path, param_groups, run
from k3lite.bakeoff.stats import beats, beats_paired, summarize
from k3lite.bakeoff.tasks import NONE, RESET, make_task

TOY = dict(d_model=16, lr=3e-3, seed=0, steps=2, batch_size=2, vocab_size=80, seq_len=64, lm_seq_len=128,
           eval_batch=4)
TOY_ARGS = ["--d-models", "16", "--steps", "2", "--batch-size", "2", "--vocab", "80", "--seq-len", "64",
            "--lm-seq-len", "128", "--eval-batch", "4", "--device", "cpu", "--workers-per-gpu", "1"]


def _sample(task, seed=0, batch=2, **kw):
    return make_task(task, vocab_size=80, seq_len=64, lm_seq_len=128, **kw).sample(
        batch, torch.Generator().manual_seed(seed), torch.device("cpu"))


@pytest.mark.parametrize("mixer", BUILTIN)
def test_every_mixer_trains_and_reports(mixer):
    record = run(RunSpec(task="mqar4", mixer=mixer, **TOY))
    assert 0.0 <= record["metric"] <= 1.0 and record["metric_name"] == "accuracy"
    assert math.isfinite(record["final_loss"]) and len(record["curve"]["loss"]) == 2
    assert record["backend"] == "torch" and record["tokens_per_s"] > 0
    gated = {"gated_delta_rule": 4, "kda": 4, "k3_hybrid": 3}.get(mixer, 0)
    assert len(record["metrics"].get("retention_mean", [])) == gated
    assert all(0.0 < r <= 1.0 for r in record["metrics"].get("retention_mean", []))


@pytest.mark.parametrize("task", ["mqar8", "rebind", "switch", "twoscale", "lm"])
def test_every_task_trains(task):
    record = run(RunSpec(task=task, mixer="delta_rule", **TOY))
    assert math.isfinite(record["metric"])
    if task == "lm":
        assert set(record["metrics"]) == {"val_bpb", "probe_recall"} and not record["higher_is_better"]
        assert 0.0 <= record["metrics"]["probe_recall"] <= 1.0


def test_mqar_queries_ask_the_stored_pairs():
    inputs, targets, score = _sample("mqar8")
    for row_in, row_t in zip(inputs.tolist(), targets.tolist()):
        pairs = dict(zip(row_in[0:16:2], row_in[1:16:2]))
        asked = [(tok, t) for tok, t in zip(row_in, row_t) if t != -100]
        assert len(asked) == 8 and all(pairs[k] == v for k, v in asked)
    assert torch.equal(score, targets != -100)


def test_rebind_wants_the_latest_value():
    inputs, targets, _ = _sample("rebind", seed=3)
    for row_in, row_t in zip(inputs.tolist(), targets.tolist()):
        latest, queries = {}, 0
        for i, (tok, t) in enumerate(zip(row_in, row_t)):
            if t != -100:
                assert t == latest[tok]
                queries += 1
            elif queries == 0 and i % 2 == 0 and i + 1 < len(row_in):
                latest[tok] = row_in[i + 1]
        assert queries == 16
        assert len(set(row_in[0:2 * 24:2])) < 24       # keys really are bound more than once


def test_switch_answers_none_for_keys_bound_only_before_the_reset():
    inputs, targets, _ = _sample("switch", seed=5, batch=4)
    episode, stale = 1 + 2 * 8 + 8, 0
    for row_in, row_t in zip(inputs.tolist(), targets.tolist()):
        current, ever = {}, set()
        for i in range(0, len(row_in) - episode + 1, episode):
            assert row_in[i] == RESET
            current = dict(zip(row_in[i + 1:i + 17:2], row_in[i + 2:i + 17:2]))
            for tok, t in zip(row_in[i + 17:i + episode], row_t[i + 17:i + episode]):
                assert t == current.get(tok, NONE)
                stale += t == NONE and tok in ever
            ever |= set(current)
    assert stale > 0   # some queries ask for a key that only an earlier episode bound


def test_twoscale_scores_only_the_facts():
    inputs, targets, score = _sample("twoscale")
    assert int(score.sum()) == 2 * 8 and int((targets != -100).sum()) > int(score.sum())
    for row_in, row_t, row_s in zip(inputs.tolist(), targets.tolist(), score.tolist()):
        facts = dict(zip(row_in[0:16:2], row_in[1:16:2]))
        assert all(facts[tok] == t for tok, t, s in zip(row_in, row_t, row_s) if s)


def test_lm_probe_scores_the_planted_code():
    inputs, targets, score = _sample("lm")
    for row_in, row_t, row_s in zip(inputs.tolist(), targets.tolist(), score.tolist()):
        code = bytes(t for t, s in zip(row_t, row_s) if s)
        assert len(code) == 8 and bytes(row_in).count(b"#k=" + code) == 2


def test_parameter_counts_are_matched():
    counts = {m: num_parameters(build_model(m, vocab_size=80, d_model=32,
                                            mlp_hidden=matched_mlp_hidden(m, vocab_size=80, d_model=32)))
              for m in BUILTIN}
    assert max(counts.values()) / min(counts.values()) < 1.01, counts


def test_gated_delta_rule_in_kda_layer_is_the_gdn_recurrence_on_one_channel():
    from k3lite.bakeoff.variants import gated_delta_rule_in_kda_layer
    from k3lite.ops import gated_delta_rule

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 2, 4, generator=gen) for _ in range(3))
    g, beta = -torch.rand(1, 9, 2, 4, generator=gen), torch.rand(1, 9, 2, generator=gen)
    o, state = gated_delta_rule_in_kda_layer(q, k, v, g, beta, chunk_size=4)
    o_ref, state_ref = gated_delta_rule.recurrent(q, k, v, g[..., 0], beta)
    torch.testing.assert_close(o, o_ref)
    torch.testing.assert_close(state, state_ref)
    model = build_model("k3lite.bakeoff.variants:gated_delta_rule_in_kda_layer", vocab_size=40, d_model=16,
                        num_layers=2)
    assert model(torch.randint(0, 40, (1, 8))).shape == (1, 8, 40)


def test_custom_mixer_loader_gets_the_same_table():
    spec = "k3lite.ops.kda:chunked"
    assert load_custom(spec).__name__ == "chunked"
    record = run(RunSpec(task="mqar4", mixer=spec, **TOY))
    kda = run(RunSpec(task="mqar4", mixer="kda", **TOY))
    assert record["parameters"] == kda["parameters"] and 0.0 <= record["metric"] <= 1.0
    for bad in ("no_colon", "k3lite.ops.kda:missing", "not_a_module_xyz:f", ":f"):
        with pytest.raises(ValueError, match="mixer"):
            load_custom(bad)


def test_optimizer_groups_exclude_norms_biases_gates_and_embeddings():
    model = build_model("kda", vocab_size=80, d_model=16)
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert "embed.weight" in skipped and any("A_log" in n for n in skipped)
    assert any(n.endswith("decay.bias") for n in skipped) and any("norm" in n for n in skipped)
    assert all(p.ndim >= 2 for p in decay["params"]) and "head.weight" in {names[id(p)] for p in decay["params"]}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.1


def test_triton_path_check_fails_loudly_when_a_layer_is_not_counted():
    model = build_model("k3_hybrid", vocab_size=80, d_model=16)
    assert _check_triton_path(model, {"forward": 3, "backward": 3}, "k3_hybrid")["expected"] == 3
    with pytest.raises(TritonPathError, match="backward"):
        _check_triton_path(model, {"forward": 3, "backward": 0}, "k3_hybrid")


def test_beats_rule():
    assert beats([0.9, 0.91, 0.92], [0.5, 0.52, 0.51])
    assert not beats([0.9, 0.5, 0.7], [0.6, 0.8, 0.65])              # overlapping spreads
    assert beats([1.2, 1.21, 1.19], [1.5, 1.52, 1.49], higher_is_better=False)
    assert not beats([1.2, 1.21, 1.19], [1.5, 1.52, 1.49])
    assert summarize([1.0, 3.0]).std == pytest.approx(math.sqrt(2.0))
    with pytest.raises(ValueError, match="a must"):
        beats([1.0], [0.0, 0.1])


def test_paired_rule_sees_what_the_unpaired_rule_cannot():
    # Seeds move both mixers together (the data), while A stays 0.03 below B on every seed.
    a = {0: 1.70, 1: 1.55, 2: 1.59}
    b = {0: 1.73, 1: 1.59, 2: 1.62}
    assert not beats(list(a.values()), list(b.values()), higher_is_better=False)
    assert beats_paired(a, b, higher_is_better=False) and not beats_paired(b, a, higher_is_better=False)
    assert not beats_paired({0: 1.0, 1: 2.0, 2: 1.5}, {0: 1.5, 1: 1.5, 2: 1.5})   # signs disagree
    assert not beats_paired(a, {**b, 1: 1.40}, higher_is_better=False)            # one seed the other way
    with pytest.raises(ValueError, match="share at least 2 seeds"):
        beats_paired({0: 1.0, 1: 1.0}, {1: 1.0, 2: 1.0})


def test_sweep_then_seeds_resume_and_merge(tmp_path, monkeypatch):
    calls = []
    real_run = cli.run
    monkeypatch.setattr(cli, "run", lambda spec, *a, **k: calls.append(spec) or real_run(spec, *a, **k))
    out = tmp_path / "a.json"
    argv = TOY_ARGS + ["--tasks", "mqar4", "--mixers", "softmax,delta_rule", "--lrs", "1e-2", "--lr-seeds", "1",
                       "--seeds", "2", "--out", str(out)]
    assert cli.main(argv) == 0
    assert len(calls) == 2 + 2                # sweep: 2 mixers x 1 lr x 1 seed; seeds: seed 1 of each (0 is stored)
    runs = store.load(out)
    assert len(runs) == 4 and all(r["provenance"]["torch"] == torch.__version__ for r in runs.values())
    choices = store.load_choices(out)
    assert len(choices) == 2 and {c["verdict"] for c in choices.values()} == {"only rate"}
    assert all(len(r["evaluations"]) == 2 and r["evaluations"][-1]["step"] == 2 for r in runs.values())
    assert not list(tmp_path.glob("*.tmp"))
    calls.clear()
    assert cli.main(argv) == 0 and calls == []     # everything stored: nothing is redone
    other = tmp_path / "b.json"
    cli.main(TOY_ARGS + ["--tasks", "rebind", "--mixers", "softmax", "--lrs", "1e-2", "--seeds", "1",
                         "--out", str(other)])
    merged = tmp_path / "m.json"
    assert cli.main(["--merge", str(out), str(other), "--out", str(merged)]) == 0
    assert set(store.load(merged)) == set(runs) | set(store.load(other))
    assert json.loads(merged.read_text())["format"] == store.FORMAT
    written = plot_all(merged, tmp_path / "figures")
    assert {p.name for p in written} >= {"bakeoff_mqar_d16.png", "bakeoff_rebind.png", "bakeoff_throughput.png"}
    ax = plot_cell("mqar", path=merged)
    assert len(ax.lines) >= 2 and ax.get_xlabel()
    with pytest.raises(ValueError, match="task"):
        plot_cell("switch", path=merged)


@pytest.mark.parametrize("flag,value", [("--seeds", "0"), ("--phase", "later"), ("--tasks", "mqar0"),
                                        ("--tasks", "copying"), ("--mixers", "mamba"), ("--d-models", "15"),
                                        ("--lrs", "-1"), ("--steps", "mqar=0"), ("--device", "tpu"),
                                        ("--gpus", "-1"), ("--lm-seq-len", "64"), ("--vocab", "5")])
def test_bad_arguments_exit_2_naming_them(flag, value, tmp_path, capsys):
    argv = TOY_ARGS + ["--tasks", "mqar4,lm", "--out", str(tmp_path / "x.json"), "--dry-run", flag, value]
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert re.search(flag.lstrip("-").replace("-", "[-_]") + "|" + re.escape(value), err)


def test_bad_model_and_task_arguments():
    with pytest.raises(ValueError, match="num_layers"):
        build_model("k3_hybrid", vocab_size=80, d_model=16, num_layers=3)
    with pytest.raises(ValueError, match="vocab_size"):
        make_task("switch", vocab_size=40)
    with pytest.raises(ValueError, match="seq_len"):
        make_task("rebind", seq_len=32)
    with pytest.raises(ValueError, match="merge"):
        store.merge([], "x.json")


def _args(*extra):
    args = cli.parser().parse_args(TOY_ARGS + ["--tasks", "mqar4", "--mixers", "kda,k3_hybrid", "--lrs", "1e-3,1e-2",
                                               "--seeds", "3", "--close-seeds", "5", *extra])
    cli.check_args(args)
    return args


def _fake_store(args, metrics: dict[str, list[float]]) -> dict:
    """Stored records as the harness writes them: the sweep (lr 1e-2 wins) and seeds with the given metrics."""
    runs = {}
    for base in cli.cell_specs(args, 0.0, 0, "lr"):
        for lr in args.lr_list:
            for seed in range(args.lr_seeds):
                spec = RunSpec(**{**base.__dict__, "lr": lr, "seed": seed})
                runs[spec.key()] = {"metric": metrics[base.mixer][seed] if lr == 1e-2 else 0.0,
                                    "higher_is_better": True}
        for seed, value in enumerate(metrics[base.mixer]):
            spec = RunSpec(**{**base.__dict__, "lr": 1e-2, "seed": seed})
            runs[spec.key()] = {"metric": value, "higher_is_better": True}
    return runs


def test_close_pairs_get_more_seeds_and_clear_pairs_do_not():
    args = _args()
    close = cli.close_specs(args, _fake_store(args, {"kda": [0.5, 0.6, 0.7], "k3_hybrid": [0.55, 0.65, 0.6]}))
    assert sorted((s.mixer, s.seed, s.lr) for s in close) == [(m, seed, 1e-2) for m in ("k3_hybrid", "kda")
                                                               for seed in (3, 4)]
    assert cli.close_specs(args, _fake_store(args, {"kda": [0.5, 0.51, 0.5], "k3_hybrid": [0.9, 0.91, 0.9]})) == []
    assert cli.best_lr(args, _fake_store(args, {"kda": [0.5] * 3, "k3_hybrid": [0.5] * 3}),
                       cli.cell_specs(args, 0.0, 1, "seeds")[0]) == 1e-2


def test_lr_choice_ties_go_to_the_middle_rate_and_all_at_chance_picks_none():
    args = _args("--lrs", "1e-3,3e-3,1e-2", "--lr-task", "mqar4")
    runs = _fake_store(args, {"kda": [1.0] * 3, "k3_hybrid": [1.0] * 3})
    spec = cli.cell_specs(args, 0.0, 1, "seeds")[0]
    sources = cli.sweep_specs_for(args, spec)
    assert sorted({(s.lr, s.seed) for s in sources}) == [(lr, seed) for lr in (1e-3, 3e-3, 1e-2) for seed in (0, 1)]

    def fill(values):                      # {lr: [seed 0, seed 1]}
        for source in sources:
            runs[source.key()] = {"metric": values[source.lr][source.seed], "higher_is_better": True}
        return cli.lr_choice(args, runs, spec)

    saturated = fill({1e-3: [1.0, 1.0], 3e-3: [0.999, 1.0], 1e-2: [1.0, 1.0]})
    assert saturated["choice"] == 3e-3 and saturated["verdict"] == "chosen"          # a tie: the middle rate
    assert saturated["metrics"] == {"0.001": {"0": 1.0, "1": 1.0}, "0.003": {"0": 0.999, "1": 1.0},
                                    "0.01": {"0": 1.0, "1": 1.0}} and "middle" in saturated["rule"]
    assert fill({1e-3: [0.3, 0.31], 3e-3: [0.5, 0.52], 1e-2: [0.95, 0.96]})["choice"] == 1e-2   # a clear best
    # a diverged seed (None) counts as the sweep's worst, so it cannot lift a rate above a learning one
    assert fill({1e-3: [0.9, 0.92], 3e-3: [None, 0.2], 1e-2: [0.3, 0.3]})["choice"] == 1e-3
    # every rate at chance (mqar4: 1/4; 0.3 closes 7 % of the way to 1): no choice, and no seeds are run
    hopeless = fill({1e-3: [0.25, 0.3], 3e-3: [0.2, 0.26], 1e-2: [None, 0.3]})
    assert hopeless["choice"] is None and hopeless["verdict"] == "all at chance" and hopeless["chance"] == 0.25
    assert cli.best_lr(args, runs, spec) is None and cli.cell_records(args, runs, spec) is None
    assert not [s for s in cli.seed_specs(args, runs, quiet=True) if s.mixer == spec.mixer]
    del runs[sources[-1].key()]
    assert cli.lr_choice(args, runs, spec) is None                                     # the sweep is incomplete
    args = cli.parser().parse_args(TOY_ARGS + ["--tasks", "rebind", "--mixers", "kda", "--lrs", "1e-3,1e-2",
                                               "--lr-task", "mqar4"])
    cli.check_args(args)
    assert {s.task for s in cli.sweep_specs(args)} == {"mqar4"} and len(cli.sweep_specs(args)) == 2 * 2
    with pytest.raises(ValueError, match="--lr-task"):
        cli.check_args(cli.parser().parse_args(TOY_ARGS + ["--lr-task", "lm"]))


def test_decide_lr_rule_for_lower_is_better_and_a_single_rate():
    from k3lite.bakeoff.cli import decide_lr

    bpb = decide_lr({1e-3: [2.0, 2.1], 3e-3: [1.5, 1.52], 1e-2: [1.8, 1.9]}, 8.0, higher_is_better=False)
    assert bpb["choice"] == 3e-3 and bpb["tied"] == ["0.003"]
    assert decide_lr({1e-2: [0.0, 0.0]}, 0.25)["verdict"] == "only rate"    # nothing to choose: the rate is given
    with pytest.raises(ValueError, match="metrics"):
        decide_lr({1e-3: []}, 0.25)


def test_triton_path_is_counted_through_the_real_kernels():
    """On the CPU the Triton interpreter runs k3lite's kernels: every recurrent layer is counted once each way."""
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("the interpreter runs only without CUDA; on a GPU the harness itself asserts the path")
    from k3lite.bakeoff.runs import count_triton_calls

    model = build_model("gated_delta_rule", vocab_size=40, d_model=16, num_layers=2, backend="triton")
    with count_triton_calls() as counts:
        model(torch.randint(0, 40, (1, 8))).float().square().mean().backward()
    assert counts == {"forward": 2, "backward": 2}
    assert _check_triton_path(model, counts, "gated_delta_rule")["expected"] == 2


def test_live_demo_returns_a_metric_per_mixer_and_seed():
    results = live_demo("rebind4", ("delta_rule", "gated_delta_rule"), steps=2, seeds=(0, 1))
    assert set(results) == {"delta_rule", "gated_delta_rule"}
    assert all(len(v) == 2 and all(0.0 <= a <= 1.0 for a in v) for v in results.values())
    with pytest.raises(ValueError, match="steps"):
        live_demo("switch", steps=0)
    with pytest.raises(ValueError, match="seeds"):
        live_demo("switch", seeds=())


def test_rebind_takes_a_key_count():
    task = make_task("rebind4", vocab_size=40, seq_len=64)
    inputs, targets, score = task.sample(3, torch.Generator().manual_seed(0), "cpu")
    assert score.sum(1).tolist() == [4, 4, 4]
    assert make_task("rebind", vocab_size=40, seq_len=64).sample(1, torch.Generator(), "cpu")[2].sum() == 16
    with pytest.raises(ValueError, match="keys must be in"):
        make_task("rebind17", vocab_size=40, seq_len=64)


def test_final_cells_prefers_more_seeds_then_the_better_mean():
    from k3lite.bakeoff.plots import final_cells

    def record(lr, seed, metric):
        return {"task": "rebind", "d_model": 64, "mixer": "kda", "lr": lr, "seed": seed, "metric": metric,
                "higher_is_better": True, "phase": "lr"}

    one_seed_each = {"a": record(1e-3, 0, 0.2), "b": record(3e-3, 0, 0.9), "c": record(1e-2, 0, 0.5)}
    assert final_cells(one_seed_each)[("rebind", 64, "kda")][0]["lr"] == 3e-3
    more_seeds = dict(one_seed_each, d=record(1e-2, 1, 0.4))
    assert final_cells(more_seeds)[("rebind", 64, "kda")][0]["lr"] == 1e-2


def test_rule_verdict_names_the_winner_or_says_why_there_is_no_call():
    from k3lite.bakeoff.plots import rule_verdict

    cells = {("rebind", 64, "kda"): [{"metric": m} for m in (0.90, 0.92, 0.94)],
             ("rebind", 64, "linear_attention"): [{"metric": m} for m in (0.02, 0.05, 0.08)],
             ("rebind", 64, "k3_hybrid"): [{"metric": m} for m in (0.88, 0.95, 0.99)],
             ("rebind", 64, "gated_delta_rule"): [{"metric": 0.5}]}
    assert rule_verdict(cells, "rebind", "linear_attention", "kda").endswith("beats linear attention")
    assert rule_verdict(cells, "rebind", "kda", "k3_hybrid").startswith("no call: the means")
    assert rule_verdict(cells, "rebind", "kda", "gated_delta_rule").startswith("no call: 1 seed")


def test_cell_summary_and_table_say_how_many_seeds(capsys):
    from k3lite.bakeoff.plots import cell_summary, print_cell_table

    cells = {("rebind", 64, "kda"): [{"metric": m} for m in (0.90, 0.94)],
             ("rebind", 64, "softmax"): [{"metric": 0.99}]}
    assert cell_summary(cells, "rebind", "kda").startswith("0.920 ± ")
    assert cell_summary(cells, "rebind", "softmax") == "0.990 (one seed)"
    print_cell_table(cells, ["rebind"], ["softmax", "kda", "delta_rule"])
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 4 and "no stored run" in rows[3] and "success [95% CI]" in rows[0]
    assert rows[2].split()[2:5] == ["2", "0.920", "0.028"] and rows[2].endswith("2/2 [0.34, 1.00]")
    assert rows[1].endswith("1/1 [0.21, 1.00]")
