"""The README's latest KDA benchmark table, its status rows and the sixth run's fusion table must say what the
stored runs measured.

The README is prose, written by hand; its numbers come from figures/bench_h200_2026-12-02e.json (the fifth run)
and figures/bench_h200_2026-12-02f.json (the sixth). This test
reads both and fails when a number in the README no longer matches its run (a re-measurement stored without the
README, or a typo), so the page and its evidence cannot drift apart silently.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = json.loads((ROOT / "figures" / "bench_h200_2026-12-02e.json").read_text())
README = (ROOT / "README.md").read_text()
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


def test_status_rows_quote_the_fifth_run():
    fwd = {shape: f"{kda_row(shape, 'fwd')['ratio_ops_vs_fla']:.2f}×" for shape in SHAPES}
    both = " / ".join(f"{kda_row(shape, 'fwd+bwd')['ratio_ops_vs_fla']:.2f}×" for shape in SHAPES)
    status = {m.group(1): m.group(2) for m in re.finditer(r"^\| (KDA [^|]+?) \| ([^|]+) \|", README, re.MULTILINE)}
    assert status["KDA forward ≤ 0.9× at T ≥ 8192"].startswith(f"{fwd[(2, 8192)]} at (2, 8192)")
    assert f"{fwd[(1, 32768)]} at (1, 32768)" in status["KDA forward ≤ 0.9× at T ≥ 8192"]
    assert status["KDA forward ≤ 1.1× at (8, 2048)"].startswith(fwd[(8, 2048)])
    assert status["KDA forward+backward ≤ 1.1×"].startswith(both)


def test_status_marks_follow_the_numbers():
    # A target is marked met exactly when the stored ratios meet it.
    long_rows = [kda_row(shape, "fwd")["ratio_ops_vs_fla"] for shape in SHAPES if shape[1] >= 8192]
    marks = {m.group(1): m.group(2) for m in re.finditer(r"^\| (KDA [^|]+?) \|.*\| ([✔✗]) \|$", README, re.MULTILINE)}
    assert marks["KDA forward ≤ 0.9× at T ≥ 8192"] == ("✔" if max(long_rows) <= 0.9 else "✗")
    assert marks["KDA forward ≤ 1.1× at (8, 2048)"] == ("✔" if kda_row((8, 2048), "fwd")["ratio_ops_vs_fla"] <= 1.1
                                                        else "✗")
    both = [kda_row(shape, "fwd+bwd")["ratio_ops_vs_fla"] for shape in SHAPES]
    assert marks["KDA forward+backward ≤ 1.1×"] == ("✔" if max(both) <= 1.1 else "✗")


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
    prose = " ".join(README.split("**Sixth run of 2026-12-02", 1)[1].split("**Fourth run", 1)[0].split())
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
