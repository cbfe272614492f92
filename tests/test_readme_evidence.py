"""The README's latest KDA benchmark table and status rows must say what the stored run measured.

The README is prose, written by hand; the numbers in it come from figures/bench_h200_2026-12-02e.json. This test
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


def table_row(label):
    """The cells of the README row that starts with ``| label |`` in the fifth run's KDA table."""
    table = README.split("| KDA, public ops API |", 1)[1].split("\n\n", 1)[0]
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
    table = README.split("| fusion | (2, 8192) | (1, 32768) | (8, 2048) |", 1)[1].split("\n\n", 1)[0]
    for label, cells in expected.items():
        (line,) = [ln for ln in table.splitlines() if ln.startswith(f"| {label} |")]
        quoted = [cell.strip() for cell in line.strip("|").split("|")[1:]]
        assert quoted == [f"{apart:.3f} → {fused:.3f}" for apart, fused in cells], label
