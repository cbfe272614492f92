"""Nothing a learner runs can lose the bake-off's evidence: the store (lock, merge, atomic write, mode, null for
NaN, refusal of damaged files), the default scratch --out, diverged runs stored as results, the command line's
up-front checks (exit 2, one line) and workers that die with their parent. Toy sizes on the CPU."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from k3lite.bakeoff import cli, store

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / store.COMMITTED
PYTHON = sys.executable
TOY = ["--device", "cpu", "--d-models", "16", "--vocab", "80", "--seq-len", "64", "--batch-size", "2",
       "--eval-batch", "4", "--workers-per-gpu", "1", "--close-seeds", "0", "--lr-seeds", "1", "--evals", "2"]


def _record(key: str, metric=0.5, **extra) -> dict:
    return {"key": key, "metric": metric, "higher_is_better": True, **extra}


def _strict_json(path) -> dict:
    """Parse as standard JSON: NaN and Infinity tokens are refused."""
    def refuse(token):
        raise AssertionError(f"{path} holds the non-JSON token {token}")

    return json.loads(Path(path).read_text(), parse_constant=refuse)


def _one_line_error(capsys_or_text) -> str:
    err = capsys_or_text if isinstance(capsys_or_text, str) else capsys_or_text.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")


# ---------------------------------------------------------------- the store


def test_threads_saving_to_one_store_keep_every_run(tmp_path):
    path = tmp_path / "s.json"

    def writer(name):
        for i in range(15):
            store.save(path, {f"{name}{i}": _record(f"{name}{i}")})

    threads = [threading.Thread(target=writer, args=(name,)) for name in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.load(path)) == 60
    assert not list(tmp_path.glob("*.tmp"))


def test_processes_saving_to_one_store_keep_every_run(tmp_path):
    """Each process re-reads the store under the lock before it writes, so neither overwrites the other's runs."""
    path = tmp_path / "s.json"
    script = textwrap.dedent(f"""
        import sys
        from k3lite.bakeoff import store
        name = sys.argv[1]
        for i in range(25):
            store.save({str(path)!r}, {{f"{{name}}{{i}}": {{"key": f"{{name}}{{i}}", "metric": i}}}})
    """)
    procs = [subprocess.Popen([PYTHON, "-c", script, name], env=_env()) for name in ("p", "q")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert sorted(store.load(path)) == sorted(f"{n}{i}" for n in "pq" for i in range(25))


def test_save_keeps_the_stored_record_and_lets_a_result_replace_a_failure(tmp_path, capsys):
    path = tmp_path / "s.json"
    store.save(path, {"a": _record("a", 0.5), "f": _record("f", None, status="failed", reason="worker died")})
    runs = store.save(path, {"a": _record("a", 0.9), "f": _record("f", 0.7)})
    assert runs["a"]["metric"] == 0.5 and runs["f"]["metric"] == 0.7 and store.status(runs["f"]) == "ok"
    assert "kept the stored records: a" in capsys.readouterr().err


def test_nan_and_infinity_are_stored_as_null_with_the_reason(tmp_path):
    path = tmp_path / "s.json"
    store.save(path, {"k": _record("k", float("nan"), curve={"loss": [1.0, float("inf")]}, final_loss=-float("inf"))})
    record = _strict_json(path)["runs"][0]
    assert record["metric"] is None and record["curve"]["loss"] == [1.0, None] and record["final_loss"] is None
    assert record["non_finite"] == {"metric": "nan", "curve.loss": "inf", "final_loss": "-inf"}
    assert store.finite_metric(store.load(path)["k"]) is None


def test_unknown_top_level_keys_survive_a_save(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"format": 1, "notes": {"by": "a learner"}, "runs": [_record("a")]}))
    store.save(path, {"b": _record("b")})
    data = _strict_json(path)
    assert data["notes"] == {"by": "a learner"} and [r["key"] for r in data["runs"]] == ["a", "b"]


def test_the_file_mode_is_kept_and_a_new_store_follows_the_umask(tmp_path):
    path = tmp_path / "s.json"
    store.save(path, {"a": _record("a")})
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask      # not mkstemp's 0600
    path.chmod(0o640)
    store.save(path, {"b": _record("b")})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize("content,what", [("", "is empty"), ('{"format": 1, "runs": [{"key": "a", ', "not valid JSON"),
                                          ('{"name": "pkg", "version": 2}', "not a bake-off store"),
                                          ('{"format": 2, "runs": []}', "format 2"),
                                          ('{"format": 1, "runs": [{"metric": 1}]}', "damaged")])
def test_a_damaged_or_foreign_store_is_refused_before_any_training(tmp_path, capsys, monkeypatch, content, what):
    path = tmp_path / "s.json"
    path.write_text(content)
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("a run started on a damaged store"))
    with pytest.raises(SystemExit) as exit_:
        cli.main(TOY + ["--tasks", "mqar4", "--mixers", "delta_rule", "--lrs", "1e-3", "--seeds", "1", "--steps", "2",
                        "--out", str(path)])
    line = _one_line_error(capsys)
    assert exit_.value.code == 2 and str(path) in line and what in line
    with pytest.raises(store.StoreError, match=what):
        store.save(path, {"a": _record("a")})                  # a writer leaves it alone too
    assert path.read_text() == content
    with pytest.raises(SystemExit):
        cli.main(["--merge", str(path), "--out", str(tmp_path / "m.json")])
    assert what in _one_line_error(capsys) and not (tmp_path / "m.json").exists()


def test_merge_adds_to_an_existing_store_and_reports_conflicts(tmp_path, capsys, monkeypatch):
    out, other = tmp_path / "out.json", tmp_path / "other.json"
    store.save(out, {k: _record(k) for k in ("a", "b", "c")})
    store.save(other, {"b": _record("b", 0.1), "d": _record("d")})
    assert cli.main(["--merge", str(other), "--out", str(out)]) == 0
    runs = store.load(out)
    assert sorted(runs) == ["a", "b", "c", "d"] and runs["b"]["metric"] == 0.5    # the stored record is kept
    err = capsys.readouterr().err
    assert "1 runs differ" in err and "b" in err
    # The docstring's old example (`--merge a.json`, no --out) wrote the union over figures/bakeoff.json.
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--merge", str(other)]) == 0
    assert sorted(store.load(tmp_path / store.SCRATCH)) == ["b", "d"] and not (tmp_path / "figures").exists()


def test_the_committed_store_loads_and_writes_back_byte_for_byte(tmp_path):
    raw = COMMITTED.read_bytes()
    runs = store.load(COMMITTED)
    assert runs == {r["key"]: r for r in json.loads(raw)["runs"]} and len(runs) >= 287
    copy = tmp_path / "bakeoff.json"
    store.merge([COMMITTED], copy)
    assert copy.read_bytes() == raw                   # the same serialisation: a merge into it changes nothing else
    before = copy.stat().st_mtime_ns
    store.save(copy, dict(list(runs.items())[:3]))
    assert copy.read_bytes() == raw and copy.stat().st_mtime_ns == before     # nothing new: nothing written


def test_the_recorded_command_holds_no_absolute_path(tmp_path):
    command = store.command_line(["--out", str(tmp_path / "a.json"), f"--json={ROOT / 'runs' / 'b.json'}",
                                  "--mixers", "kda"])
    assert command == "python -m k3lite.bakeoff --out .../a.json --json=runs/b.json --mixers kda"
    assert store.provenance("cpu", ["--out", str(ROOT / "runs" / "x.json")])["command"] == \
        "python -m k3lite.bakeoff --out runs/x.json"


def test_a_commit_named_by_the_caller_wins_over_the_copys_git(monkeypatch):
    # a device machine's copy of the tree can hold a .git whose HEAD is an older commit
    monkeypatch.setenv("BAKEOFF_COMMIT", "0123abc")
    named = store.provenance("cpu", [])
    assert named["commit"] == "0123abc" and named["k3lite_modified"] is None
    monkeypatch.delenv("BAKEOFF_COMMIT")
    assert store.provenance("cpu", [])["commit"] != "0123abc"


# ---------------------------------------------------------------- the command line


def test_a_toy_sweep_without_out_leaves_the_evidence_alone(tmp_path, monkeypatch):
    """The default --out is scratch (runs/bakeoff.json): run where a copy of the course's store lies at
    figures/bakeoff.json, as in the repository, and check that copy, and the repository's, are untouched."""
    status = subprocess.run(["git", "status", "--porcelain", "figures/"], cwd=ROOT, capture_output=True, text=True)
    digest = hashlib.sha256(COMMITTED.read_bytes()).hexdigest()
    (tmp_path / "figures").mkdir()
    evidence = tmp_path / store.COMMITTED
    evidence.write_bytes(COMMITTED.read_bytes())
    evidence.chmod(0o644)
    monkeypatch.chdir(tmp_path)
    assert cli.main(TOY + ["--tasks", "mqar4", "--mixers", "softmax", "--lrs", "1e-3", "--seeds", "1",
                           "--steps", "2"]) == 0
    assert evidence.read_bytes() == COMMITTED.read_bytes() and stat.S_IMODE(evidence.stat().st_mode) == 0o644
    scratch = store.load(tmp_path / store.SCRATCH)
    assert len(scratch) == 1
    assert next(iter(scratch.values()))["provenance"]["command"].startswith("python -m k3lite.bakeoff --device cpu")
    assert hashlib.sha256(COMMITTED.read_bytes()).hexdigest() == digest
    assert subprocess.run(["git", "status", "--porcelain", "figures/"], cwd=ROOT, capture_output=True,
                          text=True).stdout == status.stdout


def test_a_diverging_learning_rate_is_stored_and_the_cells_seeds_still_run(tmp_path, monkeypatch):
    # Toy runs of 6 steps learn nothing: declare nothing at chance here, so the choice is made (and the rule
    # "all at chance" is tested on its own, in test_bakeoff.py).
    monkeypatch.setattr(cli, "at_chance", lambda *a, **k: False)
    calls = []
    real_run = cli.run
    monkeypatch.setattr(cli, "run", lambda spec, *a, **k: calls.append(spec.key()) or real_run(spec, *a, **k))
    out = tmp_path / "d.json"
    # delta_rule at lr 1e4: the weights turn NaN after a few steps, and the op's value check of beta raises
    argv = TOY + ["--tasks", "mqar4", "--mixers", "delta_rule", "--lrs", "1e-3,1e4", "--seeds", "2", "--steps", "6",
                  "--out", str(out)]
    assert cli.main(argv) == 0
    runs = store.load(out)
    diverged = [r for r in runs.values() if store.status(r) == "diverged"]
    assert len(diverged) == 1 and diverged[0]["lr"] == 1e4 and diverged[0]["metric"] is None
    assert 0 < diverged[0]["diverged_step"] < 6 and "beta" in diverged[0]["reason"]
    assert {(r["lr"], r["seed"]) for r in runs.values()} == {(1e-3, 0), (1e4, 0), (1e-3, 1)}   # seed 1 ran
    (choice,) = store.load_choices(out).values()
    assert choice["choice"] == 1e-3 and choice["metrics"]["10000"] == {"0": None}
    _strict_json(out)
    calls.clear()
    assert cli.main(argv) == 0 and calls == []              # resume: nothing redone, the diverged run included
    # Every rate diverges: the seeds still run (at the smallest rate) and are stored, not lost.
    only = tmp_path / "all.json"
    assert cli.main(TOY + ["--tasks", "mqar4", "--mixers", "softmax", "--lrs", "1e4", "--seeds", "2", "--steps", "4",
                           "--out", str(only)]) == 0
    assert sorted((r["seed"], store.status(r)) for r in store.load(only).values()) == [(0, "diverged"),
                                                                                        (1, "diverged")]


def test_a_failed_run_is_kept_until_retry_failed_asks_for_it(tmp_path, monkeypatch):
    from k3lite.bakeoff.runs import failed_record

    calls = []
    real_run = cli.run
    monkeypatch.setattr(cli, "run", lambda spec, *a, **k: calls.append(spec.key()) or real_run(spec, *a, **k))
    out = tmp_path / "f.json"
    argv = TOY + ["--tasks", "mqar4", "--mixers", "delta_rule", "--lrs", "1e-3", "--seeds", "1", "--steps", "2",
                  "--out", str(out)]
    args = cli.parser().parse_args(argv)
    cli.check_args(args)
    (spec,) = cli.sweep_specs(args)
    store.save(out, {spec.key(): failed_record(spec, "the worker process exited with code -9 during the run")})
    assert cli.main(argv) == 0 and calls == []                     # failed is stored: not redone by default
    assert cli.main(argv + ["--retry-failed"]) == 0 and calls == [spec.key()]
    assert store.status(store.load(out)[spec.key()]) == "ok"        # the result replaced the failure


BAD_FLAGS = [["--steps", "0"], ["--steps", "-3"], ["--steps", "mqar=5,bogus=5"], ["--steps", "mqar=0"],
             ["--batch-size", "0"], ["--batch-size", "mqar=-1"], ["--lrs", "inf"], ["--lrs", "nan"],
             ["--lm-lrs", "-0.001"], ["--deadline-s", "-5"], ["--deadline-s", "nan"], ["--seeds", "abc"],
             ["--mixers", "k3_hybrid", "--num-layers", "1"], ["--width-of", "bogus=64"], ["--gpus", "0"],
             ["--close-seeds", "-1"], ["--mqar-lr-task", "rebind"], ["--device", "tpu"], ["--tasks", "mqar0"]]


@pytest.mark.parametrize("flags", BAD_FLAGS, ids=[" ".join(f) for f in BAD_FLAGS])
def test_each_bad_flag_exits_2_with_one_line(tmp_path, capsys, monkeypatch, flags):
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("a run started despite a bad flag"))
    argv = TOY + ["--tasks", "mqar4", "--mixers", "delta_rule", "--lrs", "1e-3", "--steps", "2",
                  "--out", str(tmp_path / "x.json")] + flags
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    line = _one_line_error(capsys)
    assert line.startswith("python -m k3lite.bakeoff: error:") and flags[-2].lstrip("-") in line.replace("_", "-")
    assert not (tmp_path / "x.json").exists()


def test_the_real_command_prints_one_line_and_no_traceback():
    done = subprocess.run([PYTHON, "-m", "k3lite.bakeoff", "--steps", "mqar=5,bogus=5", "--dry-run"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "bogus" in _one_line_error(done.stderr)


def test_help_keeps_the_examples_on_their_lines_and_names_defaults():
    text = cli.parser().format_help()
    assert "\n  python -m k3lite.bakeoff --table " in text and "\n  python -m k3lite.bakeoff --merge " in text
    assert "(default: 3)" in text and "runs/bakeoff.json" in text and "IMPORTS that module" in text


# ---------------------------------------------------------------- workers


def _mixer_module(tmp_path, monkeypatch):
    """A learner's mixer whose op kills its process (as a CUDA device assert kills a worker's context)."""
    (tmp_path / "crashing_mixer.py").write_text("import os\n\ndef op(q, k, v, g, beta, **kw):\n    os._exit(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))      # spawn workers get the parent's sys.path
    return "crashing_mixer:op"


def test_workers_store_a_diverged_run_and_a_crashed_workers_run_as_failed(tmp_path, monkeypatch):
    out = tmp_path / "w.json"
    crashing = _mixer_module(tmp_path, monkeypatch)
    argv = TOY[:-4] + ["--workers-per-gpu", "2", "--close-seeds", "0", "--tasks", "mqar4",
                       "--mixers", f"delta_rule,{crashing}", "--lrs", "1e4", "--seeds", "1", "--steps", "6",
                       "--out", str(out)]
    started = time.time()
    assert cli.main(argv) == 0
    runs = {r["mixer"]: r for r in store.load(out).values()}
    assert store.status(runs["delta_rule"]) == "diverged"
    assert store.status(runs[crashing]) == "failed" and "code 7" in runs[crashing]["reason"]
    assert time.time() - started < 120


def test_workers_exit_when_their_parent_is_killed(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from k3lite.bakeoff.cli import Executor
        if __name__ == "__main__":
            executor = Executor("cpu", 1, 2)
            print(" ".join(str(p.pid) for p in executor.processes), flush=True)
            time.sleep(600)
    """)
    (tmp_path / "parent.py").write_text(script)
    parent = subprocess.Popen([PYTHON, str(tmp_path / "parent.py")], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in pids), "workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_two_sweeps_on_one_store_keep_every_run(tmp_path):
    """Two bake-off processes on one --out each store their runs; the file holds all of them."""
    out = tmp_path / "both.json"
    common = [PYTHON, "-m", "k3lite.bakeoff", *TOY, "--tasks", "mqar4", "--lrs", "1e-3", "--seeds", "1",
              "--steps", "2", "--out", str(out)]
    procs = [subprocess.Popen(common + ["--mixers", mixer], cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for mixer in ("softmax", "delta_rule")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0], [p.stderr.read() for p in procs]
    assert sorted(r["mixer"] for r in store.load(out).values()) == ["delta_rule", "softmax"]


def test_table_of_a_missing_store_is_a_one_line_error_not_an_empty_table(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--table", "--store", str(tmp_path / "nowhere.json")])
    line = _one_line_error(capsys)
    assert exit_.value.code == 2 and "nowhere.json" in line and "no such file" in line


def test_table_finds_the_course_store_from_any_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--table"]) == 0
    assert "mqar16" in capsys.readouterr().out
