"""Nothing a learner runs can lose the course's evidence: each finding of the reliability issue, reproduced and fixed.

The benchmark CLI checks its options before it measures and never writes an empty or smaller table over a file; the
Triton autograd Functions refuse a second derivative instead of returning wrong numbers; generate, the models' inputs
and caches, train and scripts/execute.py refuse what they cannot do, naming the argument, from k3lite's own checks.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import bench, decode_processes
from k3lite import kernels
from k3lite.models.gpt2 import GPT2, GPT2Config
from k3lite.models.k3 import K3, K3Cache, K3Config
from k3lite.ops import delta_rule, gated_delta_rule, kda, linear_attention
from k3lite.ops.situ import situ_glu
from k3lite.train import TrainingDiverged, train

ROOT = Path(__file__).resolve().parent.parent


# ----- the benchmark CLI -------------------------------------------------------------------------------------------

def _exit_code(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        bench.main(argv)
    return stop.value.code, capsys.readouterr().err.strip().splitlines()


def _results(path, *rows, **sections):
    path.write_text(json.dumps({"meta": {"command": f"bench {path.name}", "date_utc": "2026-12-01T00:00:00+00:00",
                                         "device": "test"}, "chunked": list(rows), "decode": [], "situ": {},
                                **sections}))
    return path


def _row(kind="kda", T=2048, mode="fwd", ms=1.0, **extra):
    return {"kind": kind, "B": 8, "T": T, "H": 16, "D": 128, "mode": mode, "k3lite_triton_ms": ms, "sdpa_ms": 2.0,
            **extra}


@pytest.mark.parametrize("argv, message", [
    (["--sections", "fwdd"], "--sections: unknown fwdd"),
    (["--sections", "fwd,"], "--sections: unknown ''"),
    (["--sections", "fwd", "--kinds", "kda,kdaa"], "--kinds: unknown kdaa"),
    (["--sections", "model_decode", "--decode-steps", "-1"], "--decode-steps: expected an integer >= 1, got -1"),
    (["--sections", "model_decode", "--decode-batch", "0"], "--decode-batch: expected an integer >= 1, got 0"),
    (["--sections", "model_decode", "--decode-steps", "two"], "--decode-steps: expected an integer >= 1"),
    (["--sections", "model_decode", "--decode-prefill-max", "-5"], "--decode-prefill-max: expected an integer >= 0"),
    (["--sections", "model_decode", "--decode-contexts", "64,x"], "--decode-contexts: expected comma-separated"),
    (["--sections", "situ", "--decode-steps", "3"], "--decode-steps: applies to the model_decode section"),
    (["--sections", "situ", "--kinds", "kda"], "--kinds: applies to the fwd and fwd+bwd sections"),
])
def test_a_bad_option_exits_2_with_one_line_and_leaves_the_output_file_byte_identical(tmp_path, capsys, argv,
                                                                                        message):
    # Finding 5: `--sections fwdd` measured nothing, exited 0 and replaced the file with an empty table.
    out = _results(tmp_path / "out.json", _row(), _row(T=8192))
    before = out.read_bytes()
    code, err = _exit_code([*argv, "--out", str(out)], capsys)
    assert code == 2
    assert [line for line in err if "error:" in line] == [err[-1]] and message in err[-1], err
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


@pytest.mark.parametrize("section", bench.GPU_ONLY_SECTIONS)
def test_a_section_this_machine_cannot_run_is_refused_before_anything_runs(tmp_path, capsys, section):
    if torch.cuda.is_available():
        pytest.skip(f"the {section} section runs on a GPU")
    code, err = _exit_code(["--sections", section, "--out", str(tmp_path / "x.json")], capsys)
    assert code == 2 and f"{section} runs on a GPU only" in err[-1]
    assert not (tmp_path / "x.json").exists()


def test_merge_of_one_file_twice_keeps_each_row_once(tmp_path, capsys):
    # Finding 5: `--merge a.json a.json` listed every row twice.
    a = _results(tmp_path / "a.json", _row(), _row(mode="fwd+bwd"), situ={"situ_fused_fwd_ms": 0.1})
    out = tmp_path / "merged.json"
    assert bench.main(["--merge", str(a), str(a), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert [(r["T"], r["mode"]) for r in merged["chunked"]] == [(2048, "fwd"), (2048, "fwd+bwd")]
    assert merged["situ"] == {"situ_fused_fwd_ms": 0.1}
    assert len(merged["meta"]["runs"]) == 1 and "merge_conflicts" not in merged["meta"]
    printed = capsys.readouterr()
    assert "3 duplicates dropped, 0 conflicts" in printed.out and "conflict" not in printed.err


def test_merge_reports_two_different_rows_of_one_key_and_keeps_the_first(tmp_path, capsys):
    a = _results(tmp_path / "a.json", _row(ms=1.0), _row(kind="delta_rule"))
    b = _results(tmp_path / "b.json", _row(ms=1.5), _row(kind="gated_delta_rule"))
    out = tmp_path / "merged.json"
    assert bench.main(["--merge", str(a), str(b), "--out", str(out)]) == 0
    merged = json.loads(out.read_text())
    assert [r["kind"] for r in merged["chunked"]] == ["kda", "gated_delta_rule", "delta_rule"]
    assert next(r for r in merged["chunked"] if r["kind"] == "kda")["k3lite_triton_ms"] == 1.0
    (conflict,) = merged["meta"]["merge_conflicts"]
    assert conflict == {"what": "chunked kind=kda B=8 T=2048 H=16 D=128 mode=fwd", "kept": str(a), "dropped": str(b)}
    err = capsys.readouterr().err
    assert "merge conflict: chunked kind=kda B=8 T=2048 H=16 D=128 mode=fwd differs" in err


def test_merge_refuses_a_missing_or_foreign_file_and_measuring_flags(tmp_path, capsys):
    a = _results(tmp_path / "a.json", _row())
    (tmp_path / "notes.json").write_text("[1, 2]")
    out = tmp_path / "merged.json"
    for argv, message in ((["--merge", str(a), str(tmp_path / "gone.json")], "cannot read"),
                          (["--merge", str(a), str(tmp_path / "notes.json")], "not a benchmark results file"),
                          (["--merge", str(a), "--sections", "fwd"], "--merge measures nothing: drop --sections")):
        code, err = _exit_code([*argv, "--out", str(out)], capsys)
        assert code == 2 and message in err[-1]
    assert not out.exists()


def test_a_result_with_fewer_rows_goes_beside_the_file_unless_told(tmp_path, capsys):
    # Never replace an existing file with fewer rows: the results go to <name>.new.json, the exit status is 1.
    big = _results(tmp_path / "big.json", _row(), _row(T=8192), _row(T=32768))
    small = _results(tmp_path / "small.json", _row(T=4096))
    before = big.read_bytes()
    assert bench.main(["--merge", str(small), "--out", str(big)]) == 1
    assert big.read_bytes() == before
    aside = tmp_path / "big.new.json"
    assert [r["T"] for r in json.loads(aside.read_text())["chunked"]] == [4096]
    assert "kept" in capsys.readouterr().err
    assert bench.main(["--merge", str(small), "--out", str(big), "--overwrite"]) == 0
    assert [r["T"] for r in json.loads(big.read_text())["chunked"]] == [4096]


def test_the_results_file_never_writes_an_empty_table_and_moves_to_the_file_once_it_has_the_rows(tmp_path):
    out = _results(tmp_path / "out.json", _row(), _row(T=8192))
    before = out.read_bytes()
    guard = bench.ResultsFile(out)
    results = {"meta": {}, "chunked": [], "decode": [], "situ": {}}
    assert guard.save(results) is None and out.read_bytes() == before
    assert guard.report(results) == 1
    results["chunked"].append(_row(kind="delta_rule"))
    assert guard.save(results) == guard.aside and out.read_bytes() == before   # a run halfway: the old file stays
    results["chunked"].append(_row(kind="delta_rule", T=8192))
    assert guard.save(results) == out and not guard.aside.exists()            # as many rows: it may replace it
    assert guard.report(results) == 0
    assert [r["kind"] for r in json.loads(out.read_text())["chunked"]] == ["delta_rule", "delta_rule"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]     # written through a temporary file
    (tmp_path / "notes.json").write_text("not json")
    assert not bench.ResultsFile(tmp_path / "notes.json").may_replace(100)     # unreadable: --overwrite only
    assert bench.ResultsFile(tmp_path / "notes.json", overwrite=True).may_replace(1)


def test_help_gives_every_flag_its_default_and_examples_on_lines_of_their_own():
    for parser in (bench.build_parser(),):
        for action in parser._actions:
            if action.dest != "help":
                assert "default" in (action.help or ""), action.option_strings
    text = bench.build_parser().format_help()
    examples = text.split("examples:\n", 1)[1].splitlines()
    assert sum(line.startswith("  python -m benchmarks.bench") for line in examples) >= 5
    assert "--merge runs/a.json runs/b.json" in text


def test_decode_processes_writes_under_the_ignored_runs_folder(capsys):
    # Finding 5: it wrote to ./decode_processes by default, which git does not ignore.
    out_dir = decode_processes.DEFAULT_OUT_DIR
    assert out_dir.relative_to(ROOT).parts[0] == "runs"
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out_dir / "decode_01_cached.json")], cwd=ROOT)
    assert ignored.returncode == 0, "runs/ must be git-ignored"
    with pytest.raises(SystemExit):
        decode_processes.main(["--help"])
    assert "default: runs/decode_processes" in " ".join(capsys.readouterr().out.split())


# ----- autograd through the Triton path -----------------------------------------------------------------------------

# The Triton path runs on the GPU where there is one, and under the interpreter on CPU tensors otherwise.
TRITON_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _mixer_inputs(kind, T=2, D=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, 1, D, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(1, T, 1, D, generator=gen), dim=-1)
    v = torch.randn(1, T, 1, D, generator=gen)
    args = [q, k, v]
    if kind == "gated_delta_rule":
        args.append(-torch.rand(1, T, 1, generator=gen))
    if kind == "kda":
        args.append(-torch.rand(1, T, 1, D, generator=gen))
    if kind != "linear_attention":
        args.append(torch.rand(1, T, 1, generator=gen))
    return [x.to(TRITON_DEVICE).requires_grad_() for x in args]


OPS = {"kda": kda, "gated_delta_rule": gated_delta_rule, "delta_rule": delta_rule,
       "linear_attention": linear_attention}


@pytest.mark.parametrize("kind", list(OPS))
def test_double_backward_through_the_triton_chunked_path_raises_naming_it(kind):
    # Finding 6: autograd.grad(..., create_graph=True) and a second backward gave d/dv 0.293 through Triton against
    # 1.394 through PyTorch (KDA, T = 10), silently.
    args = _mixer_inputs(kind)
    v = args[2]
    out = OPS[kind].chunked(*args, backend="triton")[0]
    (dv,) = torch.autograd.grad(out.pow(2).sum(), v, create_graph=True)
    out_plain = OPS[kind].chunked(*args, backend="triton")[0]
    (dv_plain,) = torch.autograd.grad(out_plain.pow(2).sum(), v)
    assert torch.equal(dv.detach(), dv_plain)          # the first derivatives are the same with create_graph
    with pytest.raises(RuntimeError, match=rf"k3lite\.ops\.{kind}\.chunked\(backend='triton'\).*backend='torch'"):
        dv.pow(2).sum().backward()
    # Also when the incoming gradient needs no grad (o.sum()): the kernels' part is never dropped silently.
    (dv,) = torch.autograd.grad(OPS[kind].chunked(*args, backend="triton")[0].sum(), v, create_graph=True)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        dv.sum().backward()


def test_double_backward_through_the_torch_path_still_works():
    args = _mixer_inputs("kda")
    out = kda.chunked(*args, backend="torch")[0]
    (dv,) = torch.autograd.grad(out.pow(2).sum(), args[2], create_graph=True)
    (ddv,) = torch.autograd.grad(dv.pow(2).sum(), args[2])
    assert torch.isfinite(ddv).all() and ddv.abs().sum() > 0


@pytest.mark.parametrize("fused, path", [
    (lambda gate, up: situ_glu(gate, up, backend="triton"), r"k3lite\.ops\.situ\.situ_glu\(backend='triton'\)"),
    (kernels.silu_and_mul, r"k3lite\.kernels\.silu_and_mul"),
])
def test_double_backward_through_the_fused_glu_raises_naming_it(fused, path):
    gen = torch.Generator().manual_seed(0)
    gate, up = (torch.randn(3, 8, generator=gen).to(TRITON_DEVICE).requires_grad_() for _ in range(2))
    h = fused(gate, up)
    dgate, dup = torch.autograd.grad(h.pow(2).sum(), (gate, up), create_graph=True)
    plain = torch.autograd.grad(fused(gate, up).pow(2).sum(), (gate, up))
    assert torch.equal(dgate.detach(), plain[0]) and torch.equal(dup.detach(), plain[1])
    with pytest.raises(RuntimeError, match=path + ".*backend='torch'"):
        (dgate.sum() + dup.sum()).backward()


def test_every_autograd_function_in_k3lite_kernels_is_once_differentiable():
    package = Path(kernels.__file__).parent
    functions = []
    for source in sorted(package.glob("*.py")):
        module = kernels if source.stem == "__init__" else importlib.import_module(f"k3lite.kernels.{source.stem}")
        functions += [obj for _, obj in inspect.getmembers(module, inspect.isclass)
                      if issubclass(obj, torch.autograd.Function) and obj.__module__ == module.__name__]
    assert {f.__name__ for f in functions} >= {"_Chunked", "_FusedGLU"}
    for function in functions:
        assert getattr(function.backward, "first_derivatives_only", False), function


# ----- generate, token ids, caches --------------------------------------------------------------------------------

def _gpt2():
    torch.manual_seed(0)
    return GPT2(GPT2Config(vocab_size=97, n_ctx=32, n_layer=1, n_head=2, n_embd=16)).eval()


def _k3():
    torch.manual_seed(0)
    return K3(K3Config.tiny()).eval()


MODELS = {"gpt2": _gpt2, "k3": _k3}


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("options, error, name", [
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature=float("inf")), ValueError, "temperature"),
    (dict(temperature="1"), TypeError, "temperature"),
    (dict(temperature=None), TypeError, "temperature"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(top_k=True), TypeError, "top_k"),
    (dict(top_k="3"), TypeError, "top_k"),
    (dict(max_new_tokens=2.0), TypeError, "max_new_tokens"),
])
def test_bad_generate_options_are_refused_by_k3lites_own_check(model, options, error, name):
    # Finding 7: temperature=nan reached torch.multinomial's RuntimeError; top_k=2.5 and temperature="1" raised
    # TypeErrors from inside torch.
    options = {"max_new_tokens": 2, **options}
    with pytest.raises(error, match=name) as raised:
        MODELS[model]().generate(torch.zeros(1, 3, dtype=torch.long), **options)
    assert raised.traceback[-1].path.name == "sampling.py"
    if error is TypeError:
        assert isinstance(raised.value, ValueError)    # what these checks raised before, still caught the same way


@pytest.mark.parametrize("model", list(MODELS))
def test_an_out_of_range_prompt_is_refused_even_with_no_new_token(model):
    # Finding 7: K3.generate(idx, 0) returned an out-of-range prompt unchecked (GPT-2 refused it).
    m = MODELS[model]()
    vocab = m.config.vocab_size
    for bad in (torch.tensor([[1, vocab]]), torch.tensor([[-1, 2]])):
        with pytest.raises(ValueError, match=rf"idx must hold token ids in \[0, {vocab}\)"):
            m.generate(bad, 0)
    assert torch.equal(m.generate(torch.tensor([[1, 2]]), 0), torch.tensor([[1, 2]]))


@pytest.mark.parametrize("model", list(MODELS))
def test_both_models_take_any_integer_dtype_and_refuse_the_others_alike(model):
    # Finding 7: GPT-2 accepted int32 ids, K3 refused them. Both now take every integer dtype (as torch.long).
    m = MODELS[model]()
    idx = torch.tensor([[3, 1, 4, 1, 5]])
    expected = m(idx)
    for dtype in (torch.int32, torch.int16, torch.int8, torch.uint8):
        assert torch.equal(m(idx.to(dtype)), expected), dtype
        generated = m.generate(idx.to(dtype), 2, temperature=0)
        assert generated.dtype == torch.long and torch.equal(generated, m.generate(idx, 2, temperature=0))
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(ValueError, match=rf"idx must hold integer token ids \(any integer dtype, used as "
                                             rf"torch.long\), got dtype {dtype}"):
            m(idx.to(dtype))


def test_a_cache_that_is_not_a_cache_is_refused_naming_it():
    # Finding 7: K3.run(idx, cache=("x",)) was an AttributeError.
    k3, gpt2 = _k3(), _gpt2()
    idx = torch.tensor([[1, 2]])
    with pytest.raises(ValueError, match="cache must be a K3Cache .* got tuple"):
        k3.run(idx, ("x",))
    with pytest.raises(ValueError, match="cache must be a KVCache"):
        gpt2(idx, ("x",))
    with torch.no_grad():
        cache = k3.run(idx).cache
    swapped = K3Cache(list(reversed(cache.layers)), cache.num_tokens)    # MLA's cache where a KDA layer reads
    with pytest.raises(ValueError, match=r"cache.layers\[0\] must be a KDACache or None"):
        k3.run(idx, swapped)


# ----- train ---------------------------------------------------------------------------------------------------

class _Bigram(torch.nn.Module):
    """Logits from the previous token; from call ``nan_from`` on, its logits are NaN (a diverged run)."""

    def __init__(self, nan_from=None):
        super().__init__()
        self.table = torch.nn.Embedding(8, 8)
        self.calls, self.nan_from = 0, nan_from

    def forward(self, idx):
        self.calls += 1
        logits = self.table(idx)
        if self.nan_from is not None and self.calls > self.nan_from:
            logits = logits * float("nan")
        return logits


def _batch(step):
    idx = torch.randint(0, 8, (2, 6), generator=torch.Generator().manual_seed(step))
    return idx, idx.roll(-1, dims=1)


@pytest.mark.parametrize("options, name", [
    (dict(log_every=0), "log_every"), (dict(log_every=1.5), "log_every"), (dict(eval_every=-1), "eval_every"),
    (dict(steps=0), "steps"), (dict(warmup=-1), "warmup"),
])
def test_train_refuses_bad_counts_naming_them(options, name):
    # Finding 7: train(log_every=0) was a ZeroDivisionError.
    with pytest.raises(ValueError, match=name):
        train(_Bigram(), _batch, **{"steps": 3, **options})


def test_a_diverging_run_stops_naming_the_step_with_the_parameters_still_finite():
    # Finding 7: a diverging train silently turned every parameter into NaN.
    model = _Bigram(nan_from=2)
    seen = {}

    def batches(step):
        seen[step] = model.table.weight.detach().clone()
        return _batch(step)

    with pytest.raises(TrainingDiverged, match=r"training diverged at step 2 \(of 5\): loss nan") as stop:
        train(model, batches, steps=5, warmup=1)
    assert isinstance(stop.value, FloatingPointError)
    assert stop.value.step == 2 and stop.value.history.steps == [0, 1]
    assert all(math.isfinite(loss) for loss in stop.value.history.train_loss)
    assert torch.equal(model.table.weight, seen[2])     # the parameters of the step before, not NaN
    history = train(_Bigram(), _batch, steps=4, warmup=1, log_every=3)
    assert history.steps == [0, 3]


# ----- the KDA PyTorch path's padding -------------------------------------------------------------------------------

def test_kda_pads_a_short_sequence_to_its_own_length_not_to_the_chunk_size(monkeypatch):
    # Finding 7: T = 8 at chunk_size = 64 built 64 x 64 intermediates; now 8 x 8, with the same numbers up to float32
    # rounding (T >= chunk_size runs exactly as before: tests/test_ops_equivalence.py).
    sizes = []
    into_chunks = kda._into_chunks
    monkeypatch.setattr(kda, "_into_chunks", lambda x, c: sizes.append(c) or into_chunks(x, c))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, 3, 16, generator=gen) for _ in range(3))
    k = torch.nn.functional.normalize(k, dim=-1)
    g, beta = -torch.rand(2, 8, 3, 16, generator=gen), torch.rand(2, 8, 3, generator=gen)
    o, state = kda.chunked(q, k, v, g, beta, chunk_size=64, backend="torch")
    assert set(sizes) == {8}
    o_ref, state_ref = kda.recurrent(q, k, v, g, beta)
    torch.testing.assert_close(o, o_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, state_ref, atol=1e-5, rtol=1e-5)
    sizes.clear()
    kda.chunked(*(torch.cat([x, x], dim=1) for x in (q, k, v, g, beta)), chunk_size=8, backend="torch")
    assert set(sizes) == {8}                             # T >= chunk_size: the chunk size as given


# ----- scripts/execute.py -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["README.md", "../scripts/bookinfo", "chapters/99_nothing.py", "jupytext"])
def test_execute_refuses_a_file_that_is_not_a_paired_chapter(name):
    # Finding 7: scripts/execute.py on such a file said "executed" and wrote nothing.
    done = subprocess.run([sys.executable, "scripts/execute.py", name], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"not a paired chapter of book.yml: {name}" in done.stderr


# ----- scripts that write results: never over the course's evidence -------------------------------------------

def test_mqar_sweep_refuses_an_existing_out_before_training(tmp_path):
    stored = tmp_path / "mqar_sweep.json"
    stored.write_text('{"runs": ["kept"]}\n')
    done = subprocess.run([sys.executable, "scripts/mqar_sweep.py", "--steps", "1", "--pairs", "4", "--out",
                           str(stored)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"--out {stored} exists" in done.stderr
    assert stored.read_text() == '{"runs": ["kept"]}\n'


def test_result_scripts_default_to_the_ignored_runs_folder():
    from k3lite.bakeoff.plots import plot_all

    assert inspect.signature(plot_all).parameters["out_dir"].default.startswith("runs/")
    for script in ("mqar_sweep.py", "plot_bakeoff.py"):
        shown = subprocess.run([sys.executable, f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True,
                               text=True, timeout=120).stdout
        assert "(default: runs/" in " ".join(shown.split()), f"scripts/{script}: default output is not under runs/"
    for path in ("runs/figures/bakeoff_mqar_d64.png", "runs/mqar_sweep.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, f"{path} not ignored"
