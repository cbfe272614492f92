"""The README's status rows, the run log's tables (BENCHMARKS.md) and the prose around them must say what the stored
runs measured.

Both pages are prose, written by hand; their numbers come from figures/bench_h200_2026-12-02e.json (the fifth run),
figures/bench_h200_2026-12-02f.json (the sixth), figures/bench_h200_2026-12-02g.json (the seventh),
figures/bench_h200_2026-12-04.json (the eighth), figures/bench_h200_2026-12-04b.json (the ninth),
figures/bench_h200_2026-12-04c.json (the tenth) and the later runs' files, each loaded below under its run's name
(the fifteenth and seventeenth are H100 runs: figures/bench_h100_*.json). This test reads
them and fails when a number in the README no longer matches its run (a re-measurement stored without the README,
or a typo), so the page and its evidence cannot drift apart silently.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from k3lite.bench import LAUNCHES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import decode_processes as dp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = json.loads((ROOT / "figures" / "bench_h200_2026-12-02e.json").read_text())
# The README holds the targets' status table and the runs list; BENCHMARKS.md each run's section (newest first).
# Read as one text: every heading and row label the tests look for occurs once in the two.
README = (ROOT / "README.md").read_text() + "\n\n" + (ROOT / "BENCHMARKS.md").read_text()
SHAPES = [(2, 8192), (1, 32768), (8, 2048)]


def kda_row(shape, mode):
    (row,) = [r for r in RUN["chunked"] if (r["B"], r["T"]) == shape and r["mode"] == mode and r["kind"] == "kda"]
    return row


def table_row(label, header="| KDA, public ops API |"):
    """The cells of the README row that starts with ``| label |`` in the table whose header starts with ``header``
    (by default the fifth run's KDA table)."""
    table = README.split(header, 1)[1].split("\n\n", 1)[0]
    (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {label} |")]
    return [cell.strip() for cell in line.strip("|").split("|")[1:]]


@pytest.mark.parametrize("mode,label", [("fwd", "forward"), ("fwd+bwd", "forward+backward")])
def test_fifth_run_times_and_ratios_are_the_stored_ones(mode, label):
    times = table_row(f"{label}, ms (fla before/after)")
    ratios = table_row(f"{label} / fla")
    for shape, time_cell, ratio_cell in zip(SHAPES, times, ratios):
        row = kda_row(shape, mode)
        expected = f"{row['k3lite_ops_triton_ms']:.3f} ({row['fla_before_ms']:.3f}/{row['fla_after_ms']:.3f})"
        assert time_cell == expected, (shape, mode)
        assert ratio_cell == f"{row['ratio_ops_vs_fla']:.2f}×", (shape, mode)


SEVENTH = json.loads((ROOT / "figures" / "bench_h200_2026-12-02g.json").read_text())
KIND_NAMES = {"kda": "KDA", "gated_delta_rule": "Gated DeltaNet", "delta_rule": "DeltaNet"}


def seventh_row(kind, shape, mode):
    (row,) = [r for r in SEVENTH["chunked"] if (r["kind"], (r["B"], r["T"]), r["mode"]) == (kind, shape, mode)]
    return row


def kda_forward_now(shape):
    """The KDA forward timed again on the code as it stands (the seventh run's recheck)."""
    (row,) = [r for r in SEVENTH["kda_forward_recheck"]["chunked"] if (r["B"], r["T"]) == shape]
    return row


EIGHTH = json.loads((ROOT / "figures" / "bench_h200_2026-12-04.json").read_text())["runs"]
NINTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-04b.json").read_text())
NINTH = NINTH_FILE["runs"]
TENTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-04c.json").read_text())
TENTH = TENTH_FILE["runs"]
ELEVENTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-04d.json").read_text())
ELEVENTH = ELEVENTH_FILE["runs"]
TWELFTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-04e.json").read_text())
TWELFTH = TWELFTH_FILE["runs"]
TWELFTH_CUT = TWELFTH_FILE["call_2_bench_cut"]["chunked"]   # the same code, its call cut by its time limit
THIRTEENTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-04f.json").read_text())
THIRTEENTH = THIRTEENTH_FILE["runs"]
FOURTEENTH_FILE = json.loads((ROOT / "figures" / "bench_h200_2026-12-05.json").read_text())
FOURTEENTH = FOURTEENTH_FILE["runs"]["call_1"]
SIXTEENTH = json.loads((ROOT / "figures" / "bench_h200_2026-12-05b.json").read_text())["runs"]
# The decode step in every process of the sixteenth run, and those with the cached launch (the API as shipped).
SIXTEENTH_DECODE = [SIXTEENTH["cached"], SIXTEENTH["triton_dispatch"], *SIXTEENTH["decode_processes"]]
SIXTEENTH_DECODE_CACHED = [p for p in SIXTEENTH_DECODE if p["meta"]["launches"] == LAUNCHES["cached"]]
SEVENTEENTH_FILE = json.loads((ROOT / "figures" / "bench_h100_2026-12-05b.json").read_text())
SEVENTEENTH = SEVENTEENTH_FILE["runs"]
# Every forward and forward+backward row of the seventeenth run (an H100), in its table's order.
SEVENTEENTH_ROWS = SEVENTEENTH["fwd"]["chunked"] + SEVENTEENTH["fwd_bwd"]["chunked"] + SEVENTEENTH["fwd_bwd_long"]["chunked"]


def latest_row(kind, shape, mode):
    """The newest stored measurement of a row the README quotes against fla: the sixteenth run's forward+backward call,
    the fourteenth run's call 1 where it timed the row, else the thirteenth run's kept call, the twelfth run's kept
    call, its cut call, the eleventh run's kept call, the tenth run's, the ninth run's, the eighth run's call on
    111a155, else the seventh run's. The sixteenth run's forward rows are left out: their process ran on a slowed host
    that slowed fla's timings (see sixteenth_forward_rows)."""
    for rows in (SIXTEENTH["fwd_bwd_cached"]["chunked"], FOURTEENTH["chunked"], THIRTEENTH["kept"]["chunked"],
                 TWELFTH["kept"]["chunked"], TWELFTH_CUT,
                 *(run["kept"]["chunked"] for run in (ELEVENTH, TENTH, NINTH, EIGHTH))):
        for r in rows:
            if (r["kind"], (r["B"], r["T"]), r["mode"]) == (kind, shape, mode):
                return r
    return seventh_row(kind, shape, mode)


def run_section(name, next_name):
    """The prose of one run's section of the log, whitespace folded: from "**<name> run of" to "**<next_name> run"."""
    return " ".join(README.split(f"**{name} run of", 1)[1].split(f"**{next_name} run", 1)[0].split())


# The columns of the run log's API tables (fourteenth run onwards): GPU and host ms of the kernels and the ops API,
# and ops over kernels from back-to-back pairs.
API_COLUMNS = ("k3lite_triton_ms", "k3lite_ops_triton_ms", "k3lite_triton_host_ms", "k3lite_ops_triton_host_ms",
               "ops_over_kernels_paired")


def row_label(r):
    """A forward or forward+backward row's label in the run log: "Gated DeltaNet forward+backward (8, 2048)"."""
    return f"{KIND_NAMES[r['kind']]} {'forward' if r['mode'] == 'fwd' else 'forward+backward'} ({r['B']}, {r['T']})"


def api_and_fla_cells(r):
    """A row of the sixteenth and seventeenth runs' tables: the API columns, fla's two timings, ops over fla."""
    return ([f"{r[k]:.3f}" for k in API_COLUMNS]
            + [f"{r['fla_before_ms']:.3f} / {r['fla_after_ms']:.3f}", f"{r['ratio_ops_vs_fla']:.2f}×"])


def decode_process_cells(process):
    """A decode process's cells in the sixteenth and seventeenth runs' tables, up to the TB/s at B = 256."""
    small, big = (next(r for r in process["decode"] if r["B"] == B) for B in (64, 256))
    launches = "cached" if process["meta"]["launches"] == LAUNCHES["cached"] else "Triton's dispatch"
    return [launches, f"{small['k3lite_default_ms']:.4f}", f"{small['k3lite_ops_triton_host_ms']:.4f}",
            f"{small['ops_over_kernels_paired']:.3f}", f"{big['ops_over_kernels_paired']:.3f}",
            f"{big['ops_tb_per_s']:.2f}"]


def status_cells():
    return {m.group(1): (m.group(2), m.group(3)) for m in
            re.finditer(r"^\| ([^|]+?) \| ([^|]+) \| [^|]+ \| ([^|]+) \|$", README, re.MULTILINE)}


def test_status_rows_quote_the_latest_runs():
    status = {label: latest for label, (latest, _) in status_cells().items()}
    fwd = {shape: f"{latest_row('kda', shape, 'fwd')['ratio_ops_vs_fla']:.2f}×" for shape in SHAPES}
    assert status["KDA forward ≤ 0.9× at T ≥ 8192"].startswith(f"{fwd[(2, 8192)]} at (2, 8192)")
    assert f"{fwd[(1, 32768)]} at (1, 32768)" in status["KDA forward ≤ 0.9× at T ≥ 8192"]
    assert status["KDA forward ≤ 1.1× at (8, 2048)"].startswith(fwd[(8, 2048)])
    for kind in KIND_NAMES:
        for mode, label in (("fwd", "forward"), ("fwd+bwd", "forward+backward")):
            if (kind, mode) == ("kda", "fwd"):
                continue
            ratios = " / ".join(f"{latest_row(kind, s, mode)['ratio_ops_vs_fla']:.2f}×" for s in SHAPES)
            assert status[f"{KIND_NAMES[kind]} {label} ≤ 1.1×"].startswith(ratios), (kind, mode)
    decode = max(SIXTEENTH["cached"]["decode"], key=lambda r: r["B"])
    assert status["decode ≥ 3.6 TB/s at B = 256 through the API"] == f"{decode['ops_tb_per_s']:.2f} TB/s"
    rows17 = [r["ops_over_kernels_paired"] for r in SEVENTEENTH_ROWS]
    rule = dp.summarize(SEVENTEENTH["decode_processes"])["rows"]
    h200 = [r["ops_over_kernels_paired"] for r in SIXTEENTH["cached"]["chunked"] + SIXTEENTH["fwd_bwd_cached"]["chunked"]]
    small = [next(r for r in p["decode"] if r["B"] == 64)["ops_over_kernels_paired"] for p in SIXTEENTH_DECODE_CACHED]
    assert len(rows17) == 18 and len(h200) == 15 and len(small) == 3
    assert {len(rule[B]["cached"]["ratios"]) for B in (64, 256)} == {4}
    median = {B: f"{rule[B]['cached']['median']:.3f} ({rule[B]['cached']['min']:.3f}–{rule[B]['cached']['max']:.3f})"
              for B in (64, 256)}
    assert status["public API ≤ 5 % over the kernels"] == (
        f"ops / kernels under the rule set before the seventeenth run (an H100, 0c3a467, the cached launch; per "
        f"process the median of four back-to-back pairs): the {len(rows17)} forward and forward+backward rows "
        f"{min(rows17):.3f}–{max(rows17):.3f}; decode, the median over four processes, {median[64]} at B = 64 and "
        f"{median[256]} at B = 256. On the H200 (the sixteenth run, cfbeb0c, the same kernels and ops): "
        f"{min(h200):.3f}–{max(h200):.3f} on {len(h200)} forward and forward+backward rows; decode at B = 64 "
        f"{small[0]:.3f}, {small[1]:.3f} and {small[2]:.3f} in three processes (the first on a host at about half speed)")
    assert all("H100" in r["meta"]["device"] for r in SEVENTEENTH["decode_processes"] + [SEVENTEENTH["fwd"]])
    over = [r for r in SEVENTEENTH_ROWS if r["ratio_ops_vs_fla"] > 1.1]
    assert [(r["kind"], r["mode"], r["B"], r["T"]) for r in over] == [
        ("gated_delta_rule", "fwd", 2, 8192), ("gated_delta_rule", "fwd+bwd", 8, 2048),
        ("gated_delta_rule", "fwd+bwd", 2, 8192), ("delta_rule", "fwd+bwd", 8, 2048), ("delta_rule", "fwd+bwd", 2, 8192)]
    x = [f"{r['ratio_ops_vs_fla']:.2f}×" for r in over]
    rest = [r["ratio_ops_vs_fla"] for r in SEVENTEENTH_ROWS if r not in over]
    assert status["the targets against fla on an H100"] == (
        f"over 1.1×: Gated DeltaNet forward {x[0]} at (2, 8192), forward+backward {x[1]} / {x[2]} at (8, 2048) / "
        f"(2, 8192); DeltaNet forward+backward {x[3]} / {x[4]}. Every other row {min(rest):.2f}×–{max(rest):.2f}×")
    assert all(SIXTEENTH["cached"]["meta"]["device"] == p["meta"]["device"] == "NVIDIA H200" for p in SIXTEENTH_DECODE)
    fwd_long = latest_row("kda", (2, 8192), "fwd")
    faster = min(fwd_long["fla_before_ms"], fwd_long["fla_after_ms"])
    assert (f"fla's two timings {fwd_long['fla_before_ms']:.3f}/{fwd_long['fla_after_ms']:.3f} ms: "
            f"{fwd_long['k3lite_ops_triton_ms'] / faster:.2f}× against the faster"
            ) in status["KDA forward ≤ 0.9× at T ≥ 8192"]


def api_rows():
    """Every (kind, B, T, mode) row of the benchmark's table (the seventh run timed them all)."""
    return sorted({(r["kind"], r["B"], r["T"], r["mode"]) for r in SEVENTH["chunked"]})


def api_ratio(row):
    """ops over kernels: from alternating pairs where the row has them, else its single timing of each."""
    return row.get("ops_over_kernels_paired", row["ops_over_kernels"])


def strict_ratio(row):
    """The larger of a row's two ratios: over the mean of fla's two timings, and over the faster of them."""
    return max(row["ratio_ops_vs_fla"], row["k3lite_ops_triton_ms"] / min(row["fla_before_ms"], row["fla_after_ms"]))


def sixteenth_forward_rows(kind, shape):
    """The sixteenth run's forward rows of one kind and shape: its cached process and, where it timed the row, the
    process through Triton's dispatch."""
    return [r for run in ("cached", "triton_dispatch") for r in SIXTEENTH[run]["chunked"]
            if (r["kind"], (r["B"], r["T"]), r["mode"]) == (kind, shape, "fwd")]


def worst_vs_fla(kind, shape, mode):
    """The largest strict ratio against fla over the newest stored row and the sixteenth run's forward rows."""
    rows = [latest_row(kind, shape, mode)] + (sixteenth_forward_rows(kind, shape) if mode == "fwd" else [])
    return max(strict_ratio(r) for r in rows)


def test_status_marks_follow_the_numbers():
    # A target is marked met exactly when the newest stored ratios meet it, over the mean of fla's two timings and
    # over the faster of them.
    marks = {label: mark.split()[0] for label, (_, mark) in status_cells().items()}
    # The sixteenth run's forward rows (both of its processes) count too, where they are worse.
    long_rows = [worst_vs_fla("kda", shape, "fwd") for shape in SHAPES if shape[1] >= 8192]
    assert marks["KDA forward ≤ 0.9× at T ≥ 8192"] == ("✔" if max(long_rows) <= 0.9 else "✗")
    assert marks["KDA forward ≤ 1.1× at (8, 2048)"] == ("✔" if worst_vs_fla("kda", (8, 2048), "fwd") <= 1.1 else "✗")
    for kind in KIND_NAMES:
        for mode, label in (("fwd", "forward"), ("fwd+bwd", "forward+backward")):
            if (kind, mode) == ("kda", "fwd"):
                continue
            worst = max(worst_vs_fla(kind, s, mode) for s in SHAPES)
            assert marks[f"{KIND_NAMES[kind]} {label} ≤ 1.1×"] == ("✔" if worst <= 1.1 else "✗"), (kind, mode)
    # The API as shipped: every row's newest ratio, and the decode step in every process with the cached launch.
    # The API as shipped, under the rule the sixteenth run set before the seventeenth measured it: every forward and
    # forward+backward row of the seventeenth run, and the median over its cached decode processes.
    assert {(r["kind"], r["B"], r["T"], r["mode"]) for r in SEVENTEENTH_ROWS} == set(api_rows())
    rule = dp.summarize(SEVENTEENTH["decode_processes"])
    api = max([r["ops_over_kernels_paired"] for r in SEVENTEENTH_ROWS]
              + [by_mode["cached"]["median"] for by_mode in rule["rows"].values()])
    assert rule["met"] == (max(by_mode["cached"]["median"] for by_mode in rule["rows"].values()) <= 1.05)
    assert marks["public API ≤ 5 % over the kernels"] == ("✔" if api <= 1.05 else "✗")
    assert status_cells()["the targets against fla on an H100"][1] == "measured (the targets are the H200's)"
    decode = max(SIXTEENTH["cached"]["decode"], key=lambda r: r["B"])
    decode_met = decode["ops_tb_per_s"] >= 3.6
    assert marks["decode ≥ 3.6 TB/s at B = 256 through the API"] == ("✔" if decode_met else "✗")


def _ab_kernel(form, shape, mode, name):
    return form["rows"][f"{shape} {mode}"]["kernels"][name]


def test_ninth_run_tables_and_prose_are_the_stored_ones():
    ab = NINTH_FILE["same_machine_ab"]
    call1, call2, call3 = ab["call_1"], ab["call_2"], ab["call_3"]
    s8 = "(2, 8192, 16)"
    header = "| | stage 1 | `_offdiagonal_solve` | `_wy_factors` | `_bwd_intra` |"
    table = README.split(header, 1)[1].split("\n\n", 1)[0]
    quoted = [[c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines()[2:]]
    forms = [call3["base_887e6db"], call3["kept_form"]]
    assert len(quoted) == len(forms)
    for form, cells in zip(forms, quoted):
        expected = [f"{_ab_kernel(form, s8, 'fwd', n):.3f}"
                    for n in ("_chunk_cumsum", "_offdiagonal_solve", "_wy_factors")]
        expected.append(f"{_ab_kernel(form, s8, 'fwd+bwd', '_bwd_intra'):.3f}")
        expected += [f"{form['rows'][f'({B}, {T}, 16) {m}']['api_ms']:.3f}"
                     for B, T in SHAPES for m in ("fwd", "fwd+bwd")]
        assert cells[1:] == expected
    # the kept form is faster through the API at every shape and mode, and exactly as accurate
    kept, base = call3["kept_form"], call3["base_887e6db"]
    assert all(kept["rows"][key]["api_ms"] < base["rows"][key]["api_ms"] for key in base["rows"])
    assert kept["accuracy"] == base["accuracy"]
    prose = run_section("Ninth", "Eighth")
    stage1_count, stage1_max = call2["candidate"]["stage1"], kept["stage1"]
    assert (f"{stage1_count['check=False lo_from=256.0']:.3f} ms without a check and "
            f"{stage1_count['check=True lo_from=256.0']:.3f} with the count (call 2); "
            f"{stage1_max['check=False lo_from=256.0']:.3f} and {stage1_max['check=True lo_from=256.0']:.3f} with the "
            "maximum (call 3)") in prose
    rows = {(r["B"], r["T"], r["mode"]): r for r in NINTH["kept"]["chunked"]}
    assert ("put the forward at " + " / ".join(f"{rows[(B, T, 'fwd')]['k3lite_ops_triton_ms']:.3f}" for B, T in SHAPES)
            + " ms, " + " / ".join(f"{rows[(B, T, 'fwd')]['ratio_ops_vs_fla']:.2f}×" for B, T in SHAPES)) in prose
    both = " / ".join(f"{rows[(B, T, 'fwd+bwd')]['ratio_ops_vs_fla']:.2f}×" for B, T in SHAPES)
    assert f"Forward+backward {both}" in prose
    fla = kept["fla_fwd"][s8]
    assert f"{kept['rows'][s8 + ' fwd']['api_ms'] / ((fla['before'] + fla['after']) / 2):.2f}×, as in the A/B" in prose
    tried = README.split("| candidate | kernel | 887e6db | candidate |", 1)[1].split("\n\n", 1)[0]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in tried.splitlines()[2:]]
    names = (("_wy_factors", "fwd"), ("_offdiagonal_solve", "fwd"), ("_bwd_intra", "fwd+bwd"))
    assert cells[0][2:] == [" / ".join(f"{_ab_kernel(f, s8, m, n):.3f}" for n, m in names)
                            for f in (call1["base_887e6db"], call1["candidate"])]
    cases = [(call1["base_887e6db"], call1["candidate"], "_diagonal_rows", 6),
             (call2["base_887e6db"], call2["candidate"], "_diagonal_blocks", 4),
             (call3["base_887e6db"], call3["diagonal_levels_sliced"], "_diagonal_blocks", 9)]
    for (b, c, name, n), row in zip(cases, cells[1:]):
        assert row[2:] == [f"{_ab_kernel(b, s8, 'fwd', '_diagonal_rows'):.3f}",
                           f"{_ab_kernel(c, s8, 'fwd', name):.3f} "
                           f"(best of {n} settings: {min(c['diagonal'].values()):.3f})"]
    best_levels = [min(c["diagonal"].values()) / _ab_kernel(b, s8, "fwd", "_diagonal_rows")
                   for b, c, _, _ in cases[1:]]
    assert "two to three times slower at their best launch settings" in prose
    assert all(1.5 < r < 3 for r in best_levels)
    counts = NINTH_FILE["diagonal_registers"]["rows"]

    def span(prefix, key):
        values = [r[key] for r in counts if r["kernel"].startswith(prefix)]
        return f"{min(values)}–{max(values)}"

    assert (f"the levels need {span('by levels', 'registers')} registers per thread against "
            f"{span('_diagonal_rows', 'registers')} for the row walk") in prose
    assert (f"leave room for {span('by levels', 'resident_warps_by_registers')} warps per multiprocessor against "
            f"{span('_diagonal_rows', 'resident_warps_by_registers')}") in prose
    assert all(r["spill_store_bytes"] > 0 for r in counts if r["kernel"].startswith("by levels") and r["num_warps"] == 1)
    stages = {r["kernel"]: r for r in NINTH_FILE["diagonal_registers"]["stages"]}
    off, intra, cumsum = stages["_offdiagonal_solve"], stages["_bwd_intra (backward)"], stages["_chunk_cumsum"]
    assert (f"`_offdiagonal_solve` ({off['registers']} registers at {off['num_warps']} warp, "
            f"{off['spill_store_bytes']} bytes spilled) and the backward's `_bwd_intra` ({intra['registers']} at "
            f"{intra['num_warps']} warps, {intra['spill_store_bytes']} bytes spilled), and stage 1 needs "
            f"{cumsum['registers']} at one warp, room for {cumsum['resident_warps_by_registers']} warps") in prose
    assert off["registers"] == intra["registers"] == 255 and off["spill_store_bytes"] > 0 < intra["spill_store_bytes"]
    profile = {r["name"]: r["ms_per_call"] for r in NINTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    old = json.loads((ROOT / "figures" / "bench_h200_2026-12-02.json").read_text())
    fla = old["kda_fwd_designs"]["diagonal_blocks_809c14d"]["kda fwd fla"]
    fla_ms = {r["name"]: r["ms_per_call"] for r in fla["kernels"]}
    gaps = [profile[ours] - fla_ms[theirs] for ours, theirs in (
        ("_diagonal_rows", "chunk_kda_fwd_kernel_intra_token_parallel"),
        ("_wy_factors", "recompute_w_u_fwd_kda_kernel"), ("_chunk_cumsum", "chunk_local_cumsum_vector_kernel"))]
    assert (f"now sum to {sum(profile.values()):.3f} ms at (2, 8192) against fla's {fla['total_ms']:.3f}" in prose
            and "(" + " / ".join(f"+{g:.3f}" for g in gaps) + " ms)" in prose)


def test_eighth_run_table_is_the_stored_one():
    header = "| | stage 1 (fwd) | `_offdiagonal_solve` (fwd) |"
    table = README.split(header, 1)[1].split("\n\n", 1)[0]
    quoted = [[c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines()[2:]]
    runs = ["before", "masked_loads", "kept"]
    assert len(quoted) == len(runs)

    def stage(run, mode, name):
        return next(r["ms_per_call"] for r in EIGHTH[run]["kda_profile_2x8192x16"][mode] if r["name"] == name)

    for run, cells in zip(runs, quoted):
        expected = [f"{stage(run, 'fwd', n):.3f}" for n in ("_chunk_cumsum", "_offdiagonal_solve", "_wy_factors")]
        expected.append(f"{stage(run, 'fwd+bwd', '_bwd_intra'):.3f}")
        for shape in SHAPES:
            for mode in ("fwd", "fwd+bwd"):
                (r,) = [r for r in EIGHTH[run]["chunked"]
                        if (r["kind"], (r["B"], r["T"]), r["mode"]) == ("kda", shape, mode)]
                expected.append(f"{r['k3lite_ops_triton_ms']:.3f} ({r['ratio_ops_vs_fla']:.2f}×)")
        assert cells[1:] == expected, run
    prose = run_section("Eighth", "Seventh")
    intra = {run: stage(run, "fwd+bwd", "_bwd_intra") for run in runs}
    assert f"cost the backward's `_bwd_intra` {intra['masked_loads'] - intra['before']:.2f} ms" in prose
    assert f"came down from {intra['before']:.3f} to {intra['kept']:.3f} ms" in prose

    def ms(run, shape, mode):
        (r,) = [r for r in EIGHTH[run]["chunked"] if (r["kind"], (r["B"], r["T"]), r["mode"]) == ("kda", shape, mode)]
        return r["k3lite_ops_triton_ms"]

    gains = [1 - ms("kept", s, "fwd+bwd") / ms("before", s, "fwd+bwd") for s in SHAPES]
    assert f"forward+backward {min(gains) * 100:.0f}–{max(gains) * 100:.0f} % faster at every shape" in prose
    assert all(abs(ms("kept", s, "fwd") / ms("before", s, "fwd") - 1) < 0.01 for s in SHAPES)
    fla = [next(r for r in EIGHTH[run]["chunked"] if (r["kind"], r["B"], r["T"], r["mode"]) == ("kda", 2, 8192, "fwd"))
           ["fla_after_ms"] for run in runs]
    assert f"agreed to {(max(fla) - min(fla)) / min(fla) * 100:.1f} % across" in prose


def test_seventh_run_table_is_the_stored_one():
    table = README.split("| kind | (B, T) | mode | ops API, ms |", 1)[1].split("\n\n", 1)[0]
    quoted = [[c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines()[2:]]
    assert len(quoted) == len(SEVENTH["chunked"]) == 18
    for kind_name, shape, mode, ops, kernels, fla, ratio, api in quoted:
        kind = next(k for k, v in KIND_NAMES.items() if v == kind_name)
        row = seventh_row(kind, tuple(int(x) for x in shape.strip("()").split(", ")), mode)
        assert [ops, kernels, fla, ratio, api] == [
            f"{row['k3lite_ops_triton_ms']:.3f}", f"{row['k3lite_triton_ms']:.3f}",
            f"{row['fla_before_ms']:.3f}/{row['fla_after_ms']:.3f}", f"{row['ratio_ops_vs_fla']:.2f}×",
            f"{row['ops_over_kernels']:.3f}"], (kind, shape, mode)


def test_seventh_run_prose_numbers_are_the_stored_ones():
    prose = run_section("Seventh", "Fifth")
    probe = SEVENTH["stage1_probe"]["second_run"]["results"]
    shapes = ("(2, 8192, 16)", "(1, 32768, 16)")

    def median_ms(shape, key):
        return statistics.median(run["ms"] for run in probe[shape][key])

    def ms(key):
        return " / ".join(f"{median_ms(s, key):.3f}" for s in shapes)

    floor = " / ".join(f"{min(median_ms(s, k) for k in probe[s] if k.startswith('f32floor')):.3f}" for s in shapes)
    assert f"float64 {ms('f64 BK128 BS8 w1')} on the same tiles and {ms('f64 BK32 BS16 w1')} at its best" in prose
    assert f"compensated float32 {ms('module BK128 BS8 w1')};" in prose
    assert f"not exact, {floor} (the floor)" in prose
    assert all(run["max_abs_err_vs_f64"] == 0.0 for s in probe.values() for k, runs in s.items()
               if not k.startswith("f32floor") for run in runs)
    now = " / ".join(f"{row['k3lite_ops_triton_ms']:.3f} ms ({row['ratio_ops_vs_fla']:.2f}×)"
                     for row in map(kda_forward_now, SHAPES))
    assert now in prose
    decode = {r["B"]: r for r in SEVENTH["decode"]}
    assert (f"B = 256 {decode[256]['ops_step_triton_ms']:.4f} ms = {decode[256]['ops_tb_per_s']:.2f} TB/s of state "
            f"(kernel alone {decode[256]['tb_per_s']:.2f}, in place {decode[256]['ops_inplace_tb_per_s']:.2f}); "
            f"B = 64 {decode[64]['ops_tb_per_s']:.2f} TB/s") in prose


SIXTH = json.loads((ROOT / "figures" / "bench_h200_2026-12-02f.json").read_text())


def _kernel_ms(row, *names):
    return sum(row["kernels"][name] for name in names)


def test_sixth_run_fusion_table_is_the_stored_one():
    in_order, one_launch = SIXTH["fusions_in_pipeline_order"]["timings"], SIXTH["one_launch"]["timings"]
    shapes = [f"({B}, {T}, 16)" for B, T in SHAPES]
    expected = {
        "stage 1 inside `_offdiagonal_solve`": [
            (_kernel_ms(one_launch[f"{s} fwd overlap=False"], "_chunk_cumsum", "_offdiagonal_solve"),
             _kernel_ms(in_order[f"kda {s} fwd fused=False"], "_offdiagonal_solve")) for s in shapes],
        "output inside `_state_pass` (no gradient)": [
            (_kernel_ms(in_order[f"kda {s} fwd fused=False"], "_state_pass", "_chunk_output"),
             _kernel_ms(in_order[f"kda {s} fwd fused=True"], "_state_pass")) for s in shapes],
        "stage 1 and `_diagonal_rows` in one launch": [
            (_kernel_ms(one_launch[f"{s} fwd overlap=False"], "_chunk_cumsum", "_diagonal_rows"),
             _kernel_ms(one_launch[f"{s} fwd overlap=True"], "_diagonal_rows_and_gate_sums")) for s in shapes],
    }
    for label, cells in expected.items():
        quoted = table_row(label, header="| fusion |")
        assert quoted == [f"{apart:.3f} → {fused:.3f}" for apart, fused in cells], label


def test_sixth_run_prose_numbers_are_the_stored_ones():
    # The README's sentences under the sixth run's table, rebuilt from the JSONs (line breaks ignored).
    prose = run_section("Sixth", "Fourth")
    in_order, one_launch = SIXTH["fusions_in_pipeline_order"], SIXTH["one_launch"]["timings"]
    apart, fused = (
        [_kernel_ms(in_order["timings"][f"{kind} (8, 2048, 16) fwd fused={flag}"], *names)
         for kind in ("gated_delta_rule", "delta_rule")]
        for flag, names in ((False, ("_state_pass", "_chunk_output")), (True, ("_state_pass",))))
    assert (f"Gated DeltaNet {apart[0]:.3f} → {fused[0]:.3f} ms, DeltaNet {apart[1]:.3f} → {fused[1]:.3f})"
            in prose)
    sweeps = in_order["sweep"]
    best = [min(v[kernel] for k, v in sweeps.items() if k.startswith(f"(2, 8192, 16) {key}"))
            for key, kernel in (("offdiagonal_solve", "_offdiagonal_solve"), ("state_output", "_state_pass"))]
    best.append(min(_kernel_ms(v, "_diagonal_rows_and_gate_sums") for k, v in one_launch.items()
                    if k.startswith("(2, 8192, 16) fwd overlap heads")))
    assert f"took {best[0]:.3f}, {best[1]:.3f} and {best[2]:.3f} ms" in prose
    streams = SIXTH["second_stream"]["timings"]
    shapes = [f"({B}, {T}, 16)" for B, T in SHAPES]

    def median(values):
        return sorted(values)[len(values) // 2]

    times = {variant: [median(streams[f"{s} fwd {variant}"]["do_bench_ms"]) for s in shapes]
             for variant in ("apart", "side first, high priority")}
    fifth = [kda_row(shape, "fwd")["k3lite_ops_triton_ms"] for shape in SHAPES]
    assert "took " + " / ".join(f"{t:.3f}" for t in times["apart"]) in prose
    assert "measured " + " / ".join(f"{t:.3f}" for t in fifth) in prose
    assert "and " + " / ".join(f"{t:.3f}" for t in times["side first, high priority"]) in prose
    gain = max(1 - h / a for h, a in zip(times["side first, high priority"], times["apart"]))
    assert f"at most {gain:.1%}".replace("%", " %") in prose


def test_tenth_run_table_and_prose_are_the_stored_ones():
    prose = run_section("Tenth", "Ninth")
    kept = TENTH["kept"]
    profile9 = {r["name"]: r["ms_per_call"] for r in NINTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    profile10 = {r["name"]: r["ms_per_call"] for r in kept["kda_profile_2x8192x16"]["fwd"]}

    def fwd(run):
        rows = {(r["B"], r["T"]): r for r in run["kept"]["chunked"] if r["mode"] == "fwd"}
        return ([f"{rows[s]['k3lite_ops_triton_ms']:.3f}" for s in SHAPES],
                [f"{rows[s]['ratio_ops_vs_fla']:.2f}×" for s in SHAPES])

    for label, run, diagonal in (("ninth run (`_diagonal_rows`)", NINTH, profile9["_diagonal_rows"]),
                                 ("tenth run (`_diagonal_blocks`, kept)", TENTH, profile10["_diagonal_blocks"])):
        times, ratios = fwd(run)
        assert table_row(label, header="| GPU ms at (2, 8192, 16) |") == [
            f"{diagonal:.3f}", " / ".join(times), " / ".join(ratios)], label
    iso = TENTH_FILE["same_machine_isolated"]["results"]
    assert f"{iso['old']['diag_ms']:.3f} ms for the row walk, {iso['new']['diag_ms']:.3f} for the anchored" in prose
    call1 = TENTH_FILE["diagonal_forms"]["call_1_ab"]
    s8 = "(2, 8192, 16) fwd"
    assert (f"took {call1['candidate_chunk_rows'][s8]['kernels']['_diagonal_blocks']:.3f} ms against the row walk's "
            f"{call1['base_3ae7a05'][s8]['kernels']['_diagonal_rows']:.3f} in the same call") in prose
    sweep = TENTH_FILE["diagonal_forms"]["call_2_sweep"]["ms"]
    at = {k.split(") ", 1)[1]: v for k, v in sweep.items()}
    assert (f"at 2 warps won ({at['rows=16 BK=128 warps=2']:.3f} ms; 1 / 4 warps {at['rows=16 BK=128 warps=1']:.3f} / "
            f"{at['rows=16 BK=128 warps=4']:.3f}; slices of 32 or 64 channels "
            f"{min(at[f'rows=16 BK={w} warps={n}'] for w in (32, 64) for n in (1, 2, 4)):.2f}–"
            f"{max(at[f'rows=16 BK={w} warps={n}'] for w in (32, 64) for n in (1, 2, 4)):.2f})") in prose
    (long,) = [r for r in kept["chunked"] if (r["B"], r["T"], r["mode"]) == (2, 8192, "fwd")]
    assert f"({long['fla_before_ms']:.3f}/{long['fla_after_ms']:.3f} ms)" in prose
    total = sum(ms for name, ms in profile10.items() if name.startswith("_"))
    assert f"the forward's kernels now sum to {total:.3f} ms" in prose
    both = " / ".join(f"{r['ratio_ops_vs_fla']:.2f}×" for s in SHAPES for r in kept["chunked"]
                      if (r["B"], r["T"]) == s and r["mode"] == "fwd+bwd")
    assert f"Forward+backward: {both}." in prose
    assert max(r["ratio_ops_vs_fla"] for r in kept["chunked"] if r["mode"] == "fwd" and r["T"] >= 8192) > 0.9


def test_eleventh_run_table_and_prose_are_the_stored_ones():
    prose = run_section("Eleventh", "Tenth")
    call4 = ELEVENTH_FILE["call_4_two_launches"]
    names = ("_diagonal_blocks", "_offdiagonal_solve", "_wy_factors", "_chunk_output")
    for label, form in (("fd1a445", "base"), ("kept", "mid"), ("two launches for the diagonal blocks too", "new")):
        rows = call4[form]["rows"]
        kernels = rows["(2, 8192, 16) fwd"]["kernels"]
        assert table_row(label, header="| form | `_diagonal_blocks` |") == (
            [f"{kernels[n]:.3f}" for n in names]
            + [" / ".join(f"{rows[f'({B}, {T}, 16) fwd']['api_ms']:.3f}" for B, T in SHAPES)]), label
    # the kept form is faster than fd1a445 at every shape and exactly as accurate
    base, kept = call4["base"], call4["mid"]
    assert all(kept["rows"][k]["api_ms"] < base["rows"][k]["api_ms"] for k in kept["rows"])
    assert kept["accuracy_bf16_vs_float32_pipeline"] == base["accuracy_bf16_vs_float32_pipeline"]
    masked = ELEVENTH_FILE["call_1_masked_off"]
    k1 = {f: masked[f]["rows"]["(2, 8192, 16) fwd"]["kernels"] for f in ("base", "new")}
    assert (f"`_offdiagonal_solve` {k1['new']['_offdiagonal_solve']:.3f} ms and `_wy_factors` "
            f"{k1['new']['_wy_factors']:.3f}, against {k1['base']['_offdiagonal_solve']:.3f} and "
            f"{k1['base']['_wy_factors']:.3f}, while stage 1 went from {k1['base']['_chunk_cumsum']:.3f} to "
            f"{k1['new']['_chunk_cumsum']:.3f}") in prose
    probe = ELEVENTH_FILE["call_2_probe"]["ms"]
    no_lo = probe["wy variant v_first=1 lo=0 i64=0 w4s1 (same=True)"]
    w_first = probe["wy variant v_first=0 lo=0 i64=0 w4s1 (same=True)"]
    assert (f"took {no_lo:.3f} ms, against {probe['wy ours w4s1']:.3f} for the package's and "
            f"{probe['wy fla (autotuned)']:.3f} for fla's kernel") in prose
    assert f"({no_lo:.3f} against {w_first:.3f} ms for the copy without G_lo)" in prose
    call3 = ELEVENTH_FILE["call_3_branch_inside"]
    k3 = {f: call3[f]["rows"]["(2, 8192, 16) fwd"]["kernels"] for f in ("base", "new")}
    assert (f"`_offdiagonal_solve` {k3['new']['_offdiagonal_solve']:.3f} ms and `_wy_factors` "
            f"{k3['new']['_wy_factors']:.3f}, against {k3['base']['_offdiagonal_solve']:.3f} and "
            f"{k3['base']['_wy_factors']:.3f}") in prose
    rows = {(r["B"], r["T"], r["mode"]): r for r in ELEVENTH["kept"]["chunked"]}
    fwd = [rows[(B, T, "fwd")] for B, T in SHAPES]
    assert ("forward " + " / ".join(f"{r['k3lite_ops_triton_ms']:.3f}" for r in fwd) + " ms, "
            + " / ".join(f"{r['ratio_ops_vs_fla']:.2f}×" for r in fwd) + " over the mean") in prose
    long = rows[(2, 8192, "fwd")]
    assert (f"{long['fla_before_ms']:.3f} ms before k3lite and {long['fla_after_ms']:.3f} after, and against the "
            f"faster the forward is {long['k3lite_ops_triton_ms'] / min(long['fla_before_ms'], long['fla_after_ms']):.2f}×"
            ) in prose
    fla4 = base["fla_fwd"]["(2, 8192, 16)"]
    assert (f"{kept['rows']['(2, 8192, 16) fwd']['api_ms']:.3f} ms against fla's {fla4['before']:.3f} before "
            f"({fla4['after']:.3f} after)") in prose
    assert strict_ratio(long) > 0.9 >= strict_ratio(rows[(1, 32768, "fwd")])
    profile = {r["name"]: r["ms_per_call"] for r in ELEVENTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    assert f"kernels sum to {sum(ms for n, ms in profile.items() if n.startswith('_')):.3f} ms" in prose
    assert f"(state pass {profile['_state_pass']:.3f}, the largest)" in prose
    assert max(profile, key=profile.get) == "_state_pass"
    both = " / ".join(f"{rows[(B, T, 'fwd+bwd')]['ratio_ops_vs_fla']:.2f}×" for B, T in SHAPES)
    assert f"Forward+backward: {both}." in prose
    ptx_old, ptx_new = ELEVENTH_FILE["ptxas_sm90"]["fd1a445"], ELEVENTH_FILE["ptxas_sm90"]["kept"]
    assert ptx_new["_offdiagonal_solve, USE_LO=False"]["spill_store_bytes"] == 0
    assert (f"has no spills ({ptx_old['_offdiagonal_solve']['spill_store_bytes']} bytes before, Triton 3.7.1) and "
            f"`_wy_factors` {ptx_new['_wy_factors, USE_LO=False']['registers']} registers instead of "
            f"{ptx_old['_wy_factors']['registers']}") in prose


def test_twelfth_run_table_and_prose_are_the_stored_ones():
    prose = run_section("Twelfth", "Eleventh")
    profile = TWELFTH_FILE["call_1_profile"]["profile"]
    ours, fla = profile["gated_delta_rule fwd k3lite"], profile["gated_delta_rule fwd fla"]
    assert (f"the state pass, {ours['_state_pass']:.3f} ms against fla's "
            f"{fla['chunk_gated_delta_rule_fwd_kernel_h_blockdim64']:.3f}") in prose
    assert f"`_wy_factors` {ours['_wy_factors']:.3f} against fla's {fla['recompute_w_u_fwd_kernel']:.3f}" in prose
    ab = TWELFTH_FILE["call_2_gdn_ab"]
    for label, form in (("f10487a", "base"), ("612382a", "new"), ("f10487a again", "base2")):
        s8 = ab[form]["(2, 8192, 16)"]["kernels"]
        assert table_row(label, header="| form | `_state_pass` | `_wy_factors` |") == (
            [f"{s8['_state_pass']:.3f}", f"{s8['_wy_factors']:.3f}",
             " / ".join(f"{ab[form][f'({B}, {T}, 16)']['api_ms']:.3f}" for B, T in SHAPES)]), label
    # the new form is faster than the old one at every shape, in both of the old one's timings
    for shape in ab["new"]:
        assert ab["new"][shape]["api_ms"] < min(ab["base"][shape]["api_ms"], ab["base2"][shape]["api_ms"])
    gain = 1 - ab["new"]["(8, 2048, 16)"]["api_ms"] / ab["base"]["(8, 2048, 16)"]["api_ms"]
    assert f"measured {gain:.0%} faster at (8, 2048)".replace("%", " %") in " ".join(README.split())
    rows = {(r["kind"], r["B"], r["T"]): r for r in TWELFTH["kept"]["chunked"]}
    for kind, name in (("gated_delta_rule", "Gated DeltaNet's forward "), ("kda", "KDA's forward ")):
        cells = [rows[(kind, B, T)] for B, T in SHAPES]
        assert (name + " / ".join(f"{r['k3lite_ops_triton_ms']:.3f}" for r in cells) + " ms, "
                + " / ".join(f"{r['ratio_ops_vs_fla']:.2f}×" for r in cells)) in prose
    gdn_long = [rows[("gated_delta_rule", B, T)] for B, T in SHAPES[:2]]
    assert max(abs(r["fla_before_ms"] / r["fla_after_ms"] - 1) for r in gdn_long) <= 0.004   # "to 0.4 % or better"
    long = rows[("kda", 2, 8192)]
    assert (f"fla took {long['fla_before_ms']:.3f} and {long['fla_after_ms']:.3f} ms, so the forward is "
            f"{long['ratio_ops_vs_fla']:.3f}× the mean and "
            f"{long['k3lite_ops_triton_ms'] / min(long['fla_before_ms'], long['fla_after_ms']):.3f}× the faster") in prose
    assert 0.9 < long["ratio_ops_vs_fla"] < 0.91 and strict_ratio(long) < 0.91   # "misses by half a percent"
    kernels = {r["name"]: r["ms_per_call"] for r in TWELFTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    eleventh = {r["name"]: r["ms_per_call"] for r in ELEVENTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    total = lambda times: sum(ms for n, ms in times.items() if n.startswith("_"))  # noqa: E731
    assert f"kernels sum to {total(kernels):.3f} ms ({total(eleventh):.3f} in the eleventh run)" in prose
    delta = " / ".join(f"{rows[('delta_rule', B, T)]['ratio_ops_vs_fla']:.2f}×" for B, T in SHAPES)
    assert f"DeltaNet's forward: {delta}." in prose
    cut = {(r["kind"], r["B"], r["T"], r["mode"]): r["ratio_ops_vs_fla"] for r in TWELFTH_CUT}
    both = {kind: " / ".join(f"{cut[(kind, B, T, 'fwd+bwd')]:.2f}×" for B, T in SHAPES[:2])
            for kind in ("kda", "gated_delta_rule")}
    assert f"KDA {both['kda']}, Gated DeltaNet {both['gated_delta_rule']} at (2, 8192) / (1, 32768)" in prose
    variants = TWELFTH_FILE["call_1_profile"]["variants"]["kda (2, 8192, 16)"]
    one, two = variants["single_lo_launch"]["fwd_total_ms"], variants["defaults"]["fwd_total_ms"]
    assert f"costs {two - one:.3f} ms, the forward's kernels summing to {one:.3f} ms with one launch" in prose
    assert f"against {two:.3f}" in prose
    probe = TWELFTH_FILE["call_1_stage1_probe"]["ms"]
    assert (f"took {probe['rows BK128 walk w1 lo_from256']:.3f} ms alone against "
            f"{probe['module BK128 BS8 w1 lo_from256']:.3f} for the package's tiles") in prose
    tests = TWELFTH_FILE["gpu_tests"]
    new, machine = tests["triton_3.7.1"], tests["machine_triton_3.6.0"]
    assert new["failed"] == machine["failed"] == 0 and new["passed_per_file"] == machine["passed_per_file"]
    count = sum(new["passed_per_file"].values())
    assert (f"{count} passed and {sum(machine['passed_per_file'].values())} passed, none failed, in "
            f"{new['seconds']:.0f} s and {machine['seconds']:.0f} s") in prose
    status = status_cells()["GPU tests under the machine's Triton and 3.7.1"][0]
    for path, n in new["passed_per_file"].items():
        assert f"`{path}` {n}" in status
    device = TWELFTH_FILE["device_time"]
    assert f"Device time: {device['budget_s'] - device['left_s']:,} s of {device['budget_s']:,} in four calls" in prose
    assert len(device["calls_wall_s"]) == 4


def test_thirteenth_run_table_and_prose_are_the_stored_ones():
    prose = run_section("Thirteenth", "Twelfth")
    c1 = THIRTEENTH_FILE["call_1"]
    pdl = c1["pipeline"]["new"]["kda (2, 8192, 16)"]
    times = lambda xs: " / ".join(f"{t:.3f}" for t in xs)  # noqa: E731
    assert table_row("programmatic dependent launch (529140d restored, call 1), KDA forward at (2, 8192), API ms",
                     header="| lead | before | after | kept |") == [
        f"{times(pdl['api_ms_pdl_off'])} (off)", f"{times(pdl['api_ms_pdl_on'])} (on)", "no"]
    assert pdl["same_bits_pdl_on_off"] and min(pdl["api_ms_pdl_on"]) > max(pdl["api_ms_pdl_off"])
    gdn = c1["pipeline"]["new"]["gated_delta_rule (1, 32768, 16)"]
    assert (f"(1, 32768) {times(gdn['api_ms_pdl_on'])} ms against {times(gdn['api_ms_pdl_off'])}") in prose
    new, old = c1["stage1_alone"]["new"]["(2, 8192, 16) rows=8 warps=1"], c1["stage1_alone"]["base"][
        "(2, 8192, 16) rows=8 warps=1"]
    assert table_row("stage 1's value check: one largest gate per channel, a masked store of the flag (call 1), stage 1 "
                     "alone at (2, 8192), ms", header="| lead | before | after | kept |") == [
        f"{old['check_ms']:.4f}", f"{new['check_ms']:.4f} (no check: {new['no_check_ms']:.4f})", "yes"]
    regs = {name: {r["kernel"]: r["registers"] for r in THIRTEENTH_FILE["ptxas_sm90"][name]}
            for name in ("6197768", "kept")}
    assert (f"{regs['6197768']['_chunk_cumsum']} registers per thread under ptxas for sm90 against "
            f"{regs['kept']['_chunk_cumsum']} now") in prose
    group = THIRTEENTH_FILE["call_4_lo_group"]["new"]["(2, 8192, 16)"]
    four = lambda xs: " / ".join(f"{t:.4f}" for t in xs)  # noqa: E731
    assert table_row("`LO_GROUP` = 4 chunks per program in the G_lo launches (call 4), KDA forward at (2, 8192), API ms",
                     header="| lead | before | after | kept |") == [
        f"{four(group['api_ms']['1'])} (one per chunk)", four(group["api_ms"]["4"]), "yes"]
    assert group["same_bits"] and max(group["api_ms"]["4"]) < min(group["api_ms"]["1"])
    strong = THIRTEENTH_FILE["call_2_strong_gates"]["ms"]["(2, 8192, 16)"]
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    s4, s1 = mean(strong["new LO_GROUP=4"]), mean(strong["new LO_GROUP=1"])
    assert f"{s4:.3f} ms against {s1:.3f} at (2, 8192), {s4 / s1 - 1:.1%} slower".replace("%", " %") in prose
    rows = {(r["kind"], r["B"], r["T"]): r for r in THIRTEENTH["kept"]["chunked"]}
    kda_rows = [rows[("kda", B, T)] for B, T in SHAPES]
    assert ("KDA's forward " + " / ".join(f"{r['k3lite_ops_triton_ms']:.3f}" for r in kda_rows) + " ms, "
            + " / ".join(f"{r['ratio_ops_vs_fla']:.2f}×" for r in kda_rows) + " fla") in prose
    long = rows[("kda", 2, 8192)]
    assert (f"fla took {long['fla_before_ms']:.3f} and {long['fla_after_ms']:.3f} ms, so the forward is "
            f"{long['ratio_ops_vs_fla']:.3f}× the mean and {strict_ratio(long):.3f}× the faster") in prose
    kernels = {r["name"]: r["ms_per_call"] for r in THIRTEENTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    twelfth = {r["name"]: r["ms_per_call"] for r in TWELFTH["kept"]["kda_profile_2x8192x16"]["fwd"]}
    total = lambda times: sum(ms for n, ms in times.items() if n.startswith("_"))  # noqa: E731
    assert f"kernels sum to {total(kernels):.3f} ms ({total(twelfth):.3f} in the twelfth run)" in prose
    repeat = {(r["B"], r["T"]): r for r in THIRTEENTH["kda_repeat"]["chunked"]}
    assert ("again on a fresh start of the machine: " + " / ".join(
        f"{repeat[s]['k3lite_ops_triton_ms']:.3f}" for s in SHAPES) + f" ms, {strict_ratio(repeat[(2, 8192)]):.3f}× and "
        f"{strict_ratio(repeat[(1, 32768)]):.3f}× the faster fla timing") in prose
    assert all(strict_ratio(r) <= 0.9 for r in (long, rows[("kda", 1, 32768)], repeat[(2, 8192)], repeat[(1, 32768)]))
    for kind, name in (("gated_delta_rule", "Gated DeltaNet's forward "), ("delta_rule", "DeltaNet's ")):
        assert (name + " / ".join(f"{rows[(kind, B, T)]['k3lite_ops_triton_ms']:.3f}" for B, T in SHAPES)) in prose
    twelfth_rows = {(r["kind"], r["B"], r["T"]): r for r in TWELFTH["kept"]["chunked"]}
    small = [(rows[(k, 8, 2048)], twelfth_rows[(k, 8, 2048)]) for k in ("gated_delta_rule", "delta_rule")]
    assert (f"longer than in the twelfth run ({small[0][1]['k3lite_ops_triton_ms']:.3f} and "
            f"{small[1][1]['k3lite_ops_triton_ms']:.3f}), through the kernels as well "
            f"({small[0][0]['k3lite_triton_ms']:.3f} and {small[1][0]['k3lite_triton_ms']:.3f})") in prose
    gpu = THIRTEENTH_FILE["call_1"]["pipeline"]["new"]["gated_delta_rule (8, 2048, 16)"]["kernel_sum_ms"]
    assert f"at that shape was {gpu:.3f} ms in call 1" in prose and gpu < small[0][0]["k3lite_triton_ms"]
    assert (f"ops over kernels {small[0][0]['ops_over_kernels']:.3f} and {small[1][0]['ops_over_kernels']:.3f}. "
            f"The twelfth run had {small[0][1]['ops_over_kernels']:.3f} and {small[1][1]['ops_over_kernels']:.3f}"
            ) in prose
    tests = THIRTEENTH_FILE["gpu_tests"]
    new371, machine = tests["triton_3.7.1"], tests["machine_triton_3.6.0"]
    assert new371["failed"] == machine["failed"] == 0 and new371["passed_per_file"] == machine["passed_per_file"]
    assert (f"{sum(new371['passed_per_file'].values())} passed and {sum(machine['passed_per_file'].values())} passed, "
            f"none failed, in {new371['seconds']:.0f} s and {machine['seconds']:.0f} s") in prose
    device = THIRTEENTH_FILE["device_time"]
    assert device["left_s"] == 0 and "Device time: all 1,800 s" in prose
    assert ("The four calls took " + ", ".join(f"{t:.0f}" for t in device["calls_wall_s"][:-1])
            + f" and {device['calls_wall_s'][-1]:.0f} s") in prose


def test_host_overhead_prose_is_the_stored_one():
    prose = run_section("Thirteenth", "Twelfth")
    host = json.loads((ROOT / "figures" / "host_overhead_2026-12-04.json").read_text())
    before, after = host["before"], host["after"]
    quoted = [f"{before[f'{k} ops']:.1f} to {after[f'{k} ops']:.1f}" for k in ("delta_rule", "gated_delta_rule", "kda")]
    assert (f"DeltaNet from {quoted[0]} µs, Gated DeltaNet from {quoted[1]} and KDA from {quoted[2]}") in prose
    assert all(after[name] < before[name] for name in before)


def test_gpu_tests_status_row_is_the_thirteenth_runs_and_the_kernels_since_compile_the_same():
    cell = status_cells()["GPU tests under the machine's Triton and 3.7.1"][0]
    tests = THIRTEENTH_FILE["gpu_tests"]
    new, machine = tests["triton_3.7.1"], tests["machine_triton_3.6.0"]
    assert new["failed"] == machine["failed"] == 0 and new["passed_per_file"] == machine["passed_per_file"]
    assert tests["commit"].startswith("the working tree of call 3 (4e61b41 and the two commits after it")
    assert cell.startswith("every GPU test file on a562108 (the thirteenth run's call 3)")
    assert (f"{sum(new['passed_per_file'].values())} passed and {sum(machine['passed_per_file'].values())} passed, "
            "none failed") in cell
    for path, n in new["passed_per_file"].items():
        assert f"`{path}` {n}" in cell
    digests = json.loads((ROOT / "figures" / "ptx_digest_2026-12-04.json").read_text())
    assert digests["triton"] == "3.7.1" and digests["target"] == "sm90"
    assert digests["a562108"] == digests["a8b732b"] and len(digests["a8b732b"]) == 9
    assert "`figures/ptx_digest_2026-12-04.json`" in cell and "same sm90 PTX under 3.7.1" in cell


def test_api_host_cost_prose_is_the_stored_one():
    prose = run_section("Thirteenth", "Twelfth")
    runs = json.loads((ROOT / "figures" / "host_overhead_api_2026-12-04.json").read_text())["runs"]
    extra = [r[f"{k} ops"] - r[f"{k} run_chunked"] for r in runs for k in ("delta_rule", "gated_delta_rule", "kda")]
    assert len(runs) == 3 and min(extra) > 0
    assert f"The ops API took {min(extra):.1f}–{max(extra):.1f} µs more per call than it." in prose
    gaps = {r["kind"]: (r["k3lite_ops_triton_ms"] - r["k3lite_triton_ms"]) * 1e3 for r in THIRTEENTH["kept"]["chunked"]
            if (r["B"], r["T"], r["mode"]) == (8, 2048, "fwd")}
    assert (f"{gaps['gated_delta_rule']:.0f} µs (Gated DeltaNet) and {gaps['delta_rule']:.0f} µs (DeltaNet) between "
            "ops and kernels, several times that") in prose
    assert min(gaps["gated_delta_rule"], gaps["delta_rule"]) > 2 * max(extra)


HOST_CUTS = json.loads((ROOT / "figures" / "host_overhead_2026-12-05.json").read_text())["runs"]


def test_fourteenth_run_table_and_prose_are_the_stored_ones():
    prose = run_section("Fourteenth", "Thirteenth")
    assert FOURTEENTH["meta"]["command"].startswith(
        "python -m k3lite.bench --kinds kda,gated_delta_rule,delta_rule --sections fwd,profile,decode")
    header = "| row | kernels, GPU ms | ops API, ms | kernels, host ms | ops API, host ms | ops / kernels, paired |"
    for r in FOURTEENTH["chunked"]:
        cells = table_row(f"{KIND_NAMES[r['kind']]} forward ({r['B']}, {r['T']})", header)
        assert cells == [f"{r[key]:.3f}" for key in API_COLUMNS]
    for r in FOURTEENTH["decode"]:
        cells = table_row(f"KDA decode step, B = {r['B']}", header)
        assert cells == [f"{r[key]:.4f}" for key in ("k3lite_default_ms", "ops_step_triton_ms", "k3lite_triton_host_ms",
                                                      "k3lite_ops_triton_host_ms")] + [
            f"{r['ops_over_kernels_paired']:.3f}"]
    # The rows over 5 % are those whose kernels alone take about as much host time as GPU time, or more.
    rows = {(r["kind"], r["B"], r["T"]): r for r in FOURTEENTH["chunked"]}
    steps = {r["B"]: r for r in FOURTEENTH["decode"]}
    over = [rows["gated_delta_rule", 8, 2048], rows["delta_rule", 8, 2048], steps[64]]
    assert all(r["k3lite_triton_host_ms"] > 0.9 * r.get("k3lite_default_ms", r["k3lite_triton_ms"]) for r in over)
    assert ", ".join(f"{r['k3lite_triton_host_ms']:.3f} against {r['k3lite_triton_ms']:.3f}" for r in over[1:2]) in prose
    gaps = [(r["k3lite_ops_triton_host_ms"] - r["k3lite_triton_host_ms"]) * 1e3 for r in rows.values()]
    step_gaps = [(r["k3lite_ops_triton_host_ms"] - r["k3lite_triton_host_ms"]) * 1e3 for r in steps.values()]
    assert (f"up to {max(gaps):.0f} µs above the kernels' (the medians differ by {min(gaps):.0f} to {max(gaps):.0f} µs), "
            f"and {min(step_gaps):.0f} to {max(step_gaps):.0f} µs per decode step").replace("-", "−") in prose
    assert f"The decode step reached {steps[256]['ops_tb_per_s']:.2f} TB/s at B = 256" in prose
    # The CPU table: the range of three runs per path, before and after the host cuts.
    names = {"DeltaNet forward, ops API": "delta_rule ops", "DeltaNet forward, run_chunked": "delta_rule run_chunked",
             "Gated DeltaNet forward, ops API": "gated_delta_rule ops",
             "Gated DeltaNet forward, run_chunked": "gated_delta_rule run_chunked",
             "KDA decode step (B = 64), ops API": "kda step ops", "KDA decode step (B = 64), run_step": "kda step run_step"}
    before, after = HOST_CUTS["c0a5673 (before)"], HOST_CUTS["38ddf87 (after)"]
    for label, key in names.items():
        assert table_row(label, "| path | c0a5673 | 38ddf87 |") == [
            f"{min(r[key] for r in runs):.1f}–{max(r[key] for r in runs):.1f}" for runs in (before, after)]
    cost = {when: [r[f"{k} ops"] - r[f"{k} run_chunked"] for r in runs for k in ("delta_rule", "gated_delta_rule")]
            for when, runs in (("before", before), ("after", after))}
    step_cost = {when: [r["kda step ops"] - r["kda step run_step"] for r in runs]
                 for when, runs in (("before", before), ("after", after))}
    assert 7 <= min(cost["before"]) and max(cost["before"]) < 8.5 and 3.5 < min(cost["after"]) and max(cost["after"]) < 4.6
    assert 8.5 < min(step_cost["before"]) and max(step_cost["before"]) < 10 and 4.4 < min(step_cost["after"]) < 5.5
    assert ("fell from 7–8 µs to about 4 µs per forward, and from about 9 to 5 µs per decode step") in prose


FIFTEENTH = json.loads((ROOT / "figures" / "bench_h100_2026-12-05.json").read_text())["runs"]


def test_fifteenth_run_table_and_prose_are_the_stored_ones():
    # An H100 run, the cached launch against Triton's dispatch on one host: the table is the two stored runs, and
    # the prose's claims (which rows went over, the host time saved, every cached row within 5 %) follow from them.
    prose = run_section("Fifteenth", "Fourteenth")
    cached, dispatch = FIFTEENTH["cached"], FIFTEENTH["triton_dispatch"]
    assert "H100" in cached["meta"]["device"] and "H100" in dispatch["meta"]["device"]
    assert cached["meta"]["command"].startswith(
        "python -m k3lite.bench --kinds gated_delta_rule,delta_rule,kda --sections decode,fwd --shapes 8x2048,2x8192")
    assert (cached["meta"]["launches"], dispatch["meta"]["launches"]) == (LAUNCHES["cached"], LAUNCHES["dispatch"])
    header = "| row | kernels, GPU ms | dispatch: kernels, host ms |"

    def labelled(run):
        rows = {f"KDA decode step, B = {r['B']}": (r, "k3lite_default_ms", 4) for r in run["decode"]}
        rows.update({f"{KIND_NAMES[r['kind']]} forward ({r['B']}, {r['T']})": (r, "k3lite_triton_ms", 3)
                     for r in run["chunked"]})
        return rows

    on, off = labelled(cached), labelled(dispatch)
    for label, (r, gpu_key, digits) in on.items():
        fmt = lambda x: f"{x:.{digits}f}"  # noqa: E731
        o = off.get(label)
        expected = [fmt(r[gpu_key])]
        expected += ([fmt(o[0]["k3lite_triton_host_ms"]), fmt(o[0]["k3lite_ops_triton_host_ms"]),
                      f"{o[0]['ops_over_kernels_paired']:.3f}"] if o else ["—"] * 3)
        expected += [fmt(r["k3lite_triton_host_ms"]), fmt(r["k3lite_ops_triton_host_ms"]),
                     f"{r['ops_over_kernels_paired']:.3f}"]
        assert table_row(label, header) == expected, label
    over = {label: o["ops_over_kernels_paired"] for label, (o, _, _) in off.items() if o["ops_over_kernels_paired"] > 1.05}
    assert sorted(over) == ["DeltaNet forward (8, 2048)", "KDA decode step, B = 64"]
    assert f"{over['DeltaNet forward (8, 2048)']:.3f} and {over['KDA decode step, B = 64']:.3f}" in prose
    paired = [r["ops_over_kernels_paired"] for r, _, _ in on.values()]
    assert max(paired) <= 1.05 and f"every row timed came out at {min(paired):.3f} to {max(paired):.3f}" in prose
    saved = [1 - on[label][0]["k3lite_triton_host_ms"] / o["k3lite_triton_host_ms"] for label, (o, _, _) in off.items()]
    assert f"took {100 * min(saved):.0f} to {100 * max(saved):.0f} % less host time" in prose
    vs_fla = {r["kind"]: [f"{x['ratio_ops_vs_fla']:.2f}×" for x in cached["chunked"] if x["kind"] == r["kind"]]
              for r in cached["chunked"]}
    assert all(f"{KIND_NAMES[kind]} {' / '.join(ratios)}" in prose for kind, ratios in vs_fla.items())
    steps = {r["B"]: r for r in cached["decode"]}
    assert f"reached {steps[256]['ops_tb_per_s']:.2f} TB/s at B = 256" in prose


def test_the_readme_points_to_the_run_log_and_the_log_holds_every_run():
    readme, log = (ROOT / "README.md").read_text(), (ROOT / "BENCHMARKS.md").read_text()
    assert "[`BENCHMARKS.md`](BENCHMARKS.md)" in readme and "run of 2026-12" not in readme
    names = ["Seventeenth", "Sixteenth", "Fifteenth", "Fourteenth", "Thirteenth", "Twelfth", "Eleventh", "Tenth", "Ninth", "Eighth", "Seventh",
             "Fifth", "Sixth", "Fourth", "Third", "Second"]
    positions = [log.index(f"**{name} run of 2026-12-0") for name in names]
    runs_list = " ".join(readme.split("The runs: first =", 1)[1].split("\n\n", 1)[0].split())
    for path in sorted((ROOT / "figures").glob("bench_h*_2026-12-05*.json")):
        assert f"`figures/{path.name}`" in runs_list, path.name
    assert positions == sorted(positions) and "**Re-measured on 2026-12-02" in log


def test_the_run_logs_recipe_quotes_the_kept_calls_time():
    log = " ".join((ROOT / "BENCHMARKS.md").read_text().split())
    kept = THIRTEENTH["kept"]
    assert kept["meta"]["command"].startswith(
        "python -m k3lite.bench --kinds kda,gated_delta_rule,delta_rule --sections fwd,profile")
    assert f"wrote its last row {kept['chunked'][-1]['elapsed_s']:.0f} s after it started" in log


def test_sixteenth_run_tables_and_prose_are_the_stored_ones():
    # An H200 run with the cached launch: the tables are the stored processes, and every number the prose and the
    # README's paragraph give (the slowed host of the first process among them) follows from them.
    prose = run_section("Sixteenth", "Fifteenth")
    cached, dispatch, fwd_bwd = SIXTEENTH["cached"], SIXTEENTH["triton_dispatch"], SIXTEENTH["fwd_bwd_cached"]
    assert cached["meta"]["command"].startswith("python -m k3lite.bench --kinds gated_delta_rule,delta_rule,kda "
                                                "--sections decode,fwd --shapes 8x2048,2x8192,1x32768")
    assert dispatch["meta"]["launches"] == LAUNCHES["dispatch"] and len(SIXTEENTH_DECODE_CACHED) == 3
    header = "| row, cached launch | kernels, GPU ms |"
    for r in cached["chunked"] + fwd_bwd["chunked"]:
        assert table_row(row_label(r), header) == api_and_fla_cells(r), row_label(r)
    names = ["call 4, first", "call 4, second"] + [f"call 5, {n}" for n in ("first", "second", "third", "fourth")]
    for name, process in zip(names, SIXTEENTH_DECODE):
        small = next(r for r in process["decode"] if r["B"] == 64)
        assert table_row(name, "| process | launches |") == decode_process_cells(process) + [
            f"{small['k3lite_torch_ms']:.3f}", f"{small['fla_before_ms']:.4f} / {small['fla_after_ms']:.4f}"], name
    rows = [r["ops_over_kernels_paired"] for r in cached["chunked"] + fwd_bwd["chunked"]]
    assert f"Every forward and forward+backward row came out at {min(rows):.3f} to {max(rows):.3f}" in prose
    step = {B: [next(r for r in p["decode"] if r["B"] == B) for p in SIXTEENTH_DECODE] for B in (64, 256)}
    big = [r["ops_over_kernels_paired"] for r in step[256]]
    assert (f"the decode step at B = 256 at {min(big):.3f} to {max(big):.3f} in every process, reaching "
            f"{step[256][0]['ops_tb_per_s']:.2f} TB/s through the API") in prose
    first, *later = [r for p in SIXTEENTH_DECODE_CACHED for r in p["decode"] if r["B"] == 64]
    assert (f"came out at {later[0]['ops_over_kernels_paired']:.3f} and {later[1]['ops_over_kernels_paired']:.3f} in "
            f"call 5's cached processes, and at {first['ops_over_kernels_paired']:.3f} in call 4's first") in prose
    # The first process's host: slower at everything the host sets, against every later process.
    others = step[64][1:]
    via_dispatch = [r for r in others if "k3lite_triton_host_ms" in r]
    assert len(via_dispatch) == 3 and first["k3lite_triton_host_ms"] > 1.8 * max(r["k3lite_triton_host_ms"]
                                                                                 for r in via_dispatch)
    assert (f"took it {first['k3lite_triton_host_ms']:.3f} ms, against "
            f"{min(r['k3lite_triton_host_ms'] for r in via_dispatch):.3f} to "
            f"{max(r['k3lite_triton_host_ms'] for r in via_dispatch):.3f} ms") in prose
    assert (f"the whole API call took {later[0]['k3lite_ops_triton_host_ms']:.3f} and "
            f"{later[1]['k3lite_ops_triton_host_ms']:.3f} ms to issue") in prose
    torch_ms = [r["k3lite_torch_ms"] for r in others]
    assert (f"the PyTorch step took {first['k3lite_torch_ms']:.3f} ms ({min(torch_ms):.3f} to {max(torch_ms):.3f} "
            f"elsewhere)") in prose
    fla_ms = [x for r in others for x in (r["fla_before_ms"], r["fla_after_ms"])]
    assert (f"fla's step {first['fla_before_ms']:.3f} then {first['fla_after_ms']:.3f} ms ({min(fla_ms):.3f} to "
            f"{max(fla_ms):.3f})") in prose
    small_first = [r for r in cached["chunked"] if (r["B"], r["T"]) == (8, 2048) and r["kind"] != "kda"]
    small_next = dispatch["chunked"]
    slow = [x for r in small_first for x in (r["fla_before_ms"], r["fla_after_ms"])]
    fast = [x for r in small_next for x in (r["fla_before_ms"], r["fla_after_ms"])]
    assert min(slow) > 1.5 * max(fast)
    spans = f"from {min(fast):.3f}–{max(fast):.3f} to {min(slow):.3f}–{max(slow):.3f} ms"
    assert f"fla's forward at (8, 2048) {min(slow):.3f} to {max(slow):.3f} ms ({min(fast):.3f} to {max(fast):.3f}" in prose
    assert spans in " ".join((ROOT / "README.md").read_text().split())
    gaps = [(r["k3lite_ops_triton_host_ms"] - r["k3lite_triton_host_ms"]) * 1e3 for r in via_dispatch]
    assert f"{min(gaps):.1f} to {max(gaps):.1f} µs per step" in prose
    pairs = first["ops_over_kernels_rounds"]
    assert min(pairs) > 1.05 and f"the four pairs came out at {min(pairs):.2f} to {max(pairs):.2f}" in prose
    # The GPU times against the fourteenth run's: within 1 % but one row, which that run's host was close to setting.
    before = {(r["kind"], r["B"], r["T"]): r for r in FOURTEENTH["chunked"]}
    moved = {key: r for r in cached["chunked"] if abs(r["k3lite_triton_ms"] / before[key := (r["kind"], r["B"], r["T"])]
                                                       ["k3lite_triton_ms"] - 1) > 0.01}
    ((key, r),) = moved.items()
    old = before[key]
    assert key == ("gated_delta_rule", 8, 2048) and r["k3lite_triton_ms"] < old["k3lite_triton_ms"]
    assert (f"{r['k3lite_triton_ms']:.3f} against {old['k3lite_triton_ms']:.3f} ms, a row whose kernels that run's "
            f"host took {old['k3lite_triton_host_ms']:.3f} ms to issue") in prose
    # Through Triton's dispatch this host did not reproduce the fourteenth run's failures.
    old_over = [before[("gated_delta_rule", 8, 2048)], before[("delta_rule", 8, 2048)],
                next(r for r in FOURTEENTH["decode"] if r["B"] == 64)]
    assert "(" + ", ".join(f"{r['ops_over_kernels_paired']:.3f}" for r in old_over) + ")" in prose
    d64 = [r["ops_over_kernels_paired"] for r in via_dispatch]
    assert max(d64 + [r["ops_over_kernels_paired"] for r in small_next]) <= 1.05
    assert (f"at (8, 2048) {small_next[0]['ops_over_kernels_paired']:.3f} and "
            f"{small_next[1]['ops_over_kernels_paired']:.3f}, decode at B = 64 {min(d64):.3f} to {max(d64):.3f})") in prose
    gdn, dn = small_next
    assert (gdn["kind"], dn["kind"]) == ("gated_delta_rule", "delta_rule")
    assert (f"fla took {gdn['fla_before_ms']:.3f}/{gdn['fla_after_ms']:.3f} ms (Gated DeltaNet) and "
            f"{dn['fla_before_ms']:.3f}/{dn['fla_after_ms']:.3f} ms (DeltaNet), {gdn['ratio_ops_vs_fla']:.2f}× and "
            f"{dn['ratio_ops_vs_fla']:.2f}× through the API") in prose


def test_seventeenth_run_tables_and_prose_are_the_stored_ones():
    # An H100 run under the public-API rule set before it: the three tables are the stored processes and the rule's
    # summary, and every number the prose gives (the H200 bounds from fla's H100 timings among them) follows from them.
    prose = run_section("Seventeenth", "Sixteenth")
    processes, stored = SEVENTEENTH["decode_processes"], SEVENTEENTH_FILE["decode_summary"]
    assert [p["meta"]["launches"] for p in processes] == [LAUNCHES[m] for m in dp.mode_order(4)]
    assert SEVENTEENTH["fwd"]["meta"]["command"].startswith(
        "python -m k3lite.bench --kinds kda,gated_delta_rule,delta_rule --sections fwd --shapes 8x2048,2x8192,1x32768")
    header = "| row, H100, cached launch | kernels, GPU ms |"
    for r in SEVENTEENTH_ROWS:
        assert table_row(row_label(r), header) == api_and_fla_cells(r), row_label(r)
    for i, process in enumerate(processes):
        assert table_row(str(i + 1), "| H100 process | launches |") == decode_process_cells(process)
    step = {B: [next(r for r in p["decode"] if r["B"] == B) for p in processes] for B in (64, 256)}
    rule = dp.summarize(processes)
    assert rule["met"] and stored["met"] and stored["rule"] == rule["rule"]
    for B, by_mode in rule["rows"].items():
        assert stored["rows"][str(B)] == by_mode
        for mode, s in by_mode.items():
            name = "cached" if mode == "cached" else "Triton's dispatch"
            assert table_row(f"B = {B} | {name}", "| decode row | launches |")[1:] == [
                str(len(s["ratios"])), f"{s['median']:.3f}", f"{s['min']:.3f}", f"{s['max']:.3f}"]
    rows = [r["ops_over_kernels_paired"] for r in SEVENTEENTH_ROWS]
    every = [r["ops_over_kernels_paired"] for B in (64, 256) for r in step[B]]
    medians = [rule["rows"][B]["cached"]["median"] for B in (64, 256)]
    assert (f"every forward and forward+backward row came out at {min(rows):.3f} to {max(rows):.3f}, and every decode "
            f"process at {min(every):.3f} to {max(every):.3f}, cached or not, so the cached medians are "
            f"{medians[0]:.3f} and {medians[1]:.3f}") in prose
    cached64 = [r for p, r in zip(processes, step[64]) if p["meta"]["launches"] == LAUNCHES["cached"]]
    host = [r["k3lite_ops_triton_host_ms"] for r in cached64]
    kernel = [r["k3lite_default_ms"] for r in cached64]
    assert max(host) < min(kernel)
    assert (f"took the whole API call {min(host):.4f} to {max(host):.4f} ms with the cached launch, against a kernel "
            f"of {min(kernel):.4f} to {max(kernel):.4f} ms") in prose
    tb = [r["ops_tb_per_s"] for r in step[256]]
    assert f"reached {min(tb):.2f} to {max(tb):.2f} TB/s at B = 256" in prose
    # Against fla: the rows over 1.1×, named in the prose, and the H200's bounds if fla ran there no slower than here.
    by = {(r["kind"], r["mode"], r["B"], r["T"]): r for r in SEVENTEENTH_ROWS}
    ratio = lambda kind, mode, B, T: f"{by[(kind, mode, B, T)]['ratio_ops_vs_fla']:.2f}×"  # noqa: E731
    assert (f"Gated DeltaNet's forward at (2, 8192) came out at {ratio('gated_delta_rule', 'fwd', 2, 8192)}, its "
            f"forward+backward at {ratio('gated_delta_rule', 'fwd+bwd', 8, 2048)} and "
            f"{ratio('gated_delta_rule', 'fwd+bwd', 2, 8192)} at (8, 2048) and (2, 8192), DeltaNet's at "
            f"{ratio('delta_rule', 'fwd+bwd', 8, 2048)} and {ratio('delta_rule', 'fwd+bwd', 2, 8192)}") in prose
    h200 = {(r["kind"], r["mode"], r["B"], r["T"]): r for r in SIXTEENTH["fwd_bwd_cached"]["chunked"]}
    short = [(kind, "fwd+bwd", B, T) for kind in ("gated_delta_rule", "delta_rule") for B, T in ((8, 2048), (2, 8192))]
    gdn = short[:2]
    assert (f"Gated DeltaNet forward+backward {by[gdn[0]]['k3lite_ops_triton_ms']:.3f} and "
            f"{by[gdn[1]]['k3lite_ops_triton_ms']:.3f} ms through the API, against "
            f"{h200[gdn[0]]['k3lite_ops_triton_ms']:.3f} and {h200[gdn[1]]['k3lite_ops_triton_ms']:.3f} on the H200") in prose
    spread = lambda r: max(r["fla_before_ms"], r["fla_after_ms"]) / min(r["fla_before_ms"], r["fla_after_ms"]) - 1  # noqa: E731
    here, there = max(spread(r) for r in SEVENTEENTH_ROWS), max(spread(r) for r in h200.values())
    assert f"differ by at most {100 * here:.1f} % in this run, against up to {100 * there:.1f} %" in prose
    fla_h200 = [x for key in short for x in (h200[key]["fla_before_ms"], h200[key]["fla_after_ms"])]
    fla_h100 = [x for key in short for x in (by[key]["fla_before_ms"], by[key]["fla_after_ms"])]
    assert min(fla_h200) > max(fla_h100)
    assert (f"fla never took less than {min(fla_h200):.3f} ms for these four rows and took {min(fla_h100):.3f} to "
            f"{max(fla_h100):.3f} ms here") in prose
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"fla's two timings of a row within {100 * here:.1f} % of each other" in readme
    assert f"varied by up to {100 * there:.1f} %" in readme
    over = [by[key]["ratio_ops_vs_fla"] for key in short]
    assert (f"Gated DeltaNet's and DeltaNet's forward+backward came out at {min(over):.2f}× to {max(over):.2f}× fla at "
            f"(8, 2048) and (2, 8192)") in readme
    bound = [h200[key]["k3lite_ops_triton_ms"] / by[key]["fla_ms"] for key in short]
    assert max(bound) <= 1.1
    quoted = [f"{h200[key]['ratio_ops_vs_fla']:.2f}×" for key in short]
    assert (f"Gated DeltaNet's forward+backward there would be at least {bound[0]:.2f}× and {bound[1]:.2f}× at (8, 2048) "
            f"and (2, 8192), and DeltaNet's at least {bound[2]:.2f}× and {bound[3]:.2f}×: inside 1.1×, with less margin "
            f"than the quoted {quoted[0]} / {quoted[1]} and {quoted[2]} / {quoted[3]}") in prose
    kda = {mode: [r["ratio_ops_vs_fla"] for r in SEVENTEENTH_ROWS if r["kind"] == "kda" and r["mode"] == mode]
           for mode in ("fwd", "fwd+bwd")}
    assert (f"KDA's forward+backward ({min(kda['fwd+bwd']):.2f}× to {max(kda['fwd+bwd']):.2f}×) and forward "
            f"({min(kda['fwd']):.2f}× to {max(kda['fwd']):.2f}×) keep their lead") in prose
    # The H200's decode processes read by the same rule afterwards (the prose says it was written after them).
    after = dp.summarize([p for p in SIXTEENTH_DECODE if p["meta"]["launches"] == LAUNCHES["cached"]])["rows"]
    assert (f"give cached medians of {after[64]['cached']['median']:.3f} at B = 64 (three processes) and "
            f"{after[256]['cached']['median']:.3f} at B = 256") in prose
    tests = SEVENTEENTH_FILE["gpu_tests"]
    assert (f"52 passed under Triton 3.7.1" in prose and tests["triton_3.7.1"]["passed"] == 52
            and tests["triton_machine_3.6.0"]["passed"] == 41 and "41 passed under the machine's Triton 3.6.0" in prose)
    assert all(t["failed"] == 0 for t in (tests["triton_3.7.1"], tests["triton_machine_3.6.0"]))
    time = SEVENTEENTH_FILE["device_time"]
    walls = ", ".join(f"{w:.0f}" for w in time["calls_wall_s"][:-1]) + f" and {time['calls_wall_s'][-1]:.0f} s"
    assert f"seven calls ran {walls}; {time['held_s_after_last_call']:.0f} s held" in prose
    tries = re.search(r"(\w+) tries before the first call got no machine .*?, (\d+) s of the budget", time["note"])
    assert tries and f"after {tries[1]} tries that got no machine" in prose
    assert f"{tries[2]} s went to the {tries[1]} tries" in prose
    cut = re.search(r"(\d+) and (\d+) tests passed, none failed", tests["note"])
    assert cut and f"with {cut[1]} and {cut[2]} passed and none failed" in prose
