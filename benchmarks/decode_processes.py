"""The decode rows of the public-API target under the rule the sixteenth run wrote down before the next measurement.

    python -m benchmarks.decode_processes [--processes 4] [--out-dir DIR] [--summary FILE.json]
    python -m benchmarks.decode_processes --summarize DIR [--summary FILE.json]

A decode step at B = 64 runs for about 0.04 ms on an H200, about as long as the host takes to issue it, so one
process on a briefly slowed host can set its API ratio (benchmarks/README.md, sixteenth run). This runs
``python -m benchmarks.bench --sections decode`` in 2 x N fresh processes on one machine, alternating the cached launch
(the default) and Triton's dispatch (``K3LITE_TRITON_DISPATCH=1``) as A B B A A B B A, each writing its own JSON.
Each process gives ops / kernels as the median of its four back-to-back pairs; a row's figure is the median over
the processes of one launch mode, printed with the smallest and largest. The target is met when every cached
figure is within 5 %. ``--summarize DIR`` reads JSON files a run already wrote. A GPU run only: on a CPU the
benchmark times no pairs. The files go to runs/decode_processes/ unless --out-dir names another folder.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.bench import LAUNCHES

MODES = tuple(LAUNCHES)
BOUND = 1.05
# Scratch, as the benchmark's own default output: runs/ is git-ignored, so a run stays out of the repository until
# its files are named with --out-dir.
DEFAULT_OUT_DIR = Path(__file__).resolve().parents[1] / "runs" / "decode_processes"


def mode_order(processes: int) -> list[str]:
    """A B B A repeated: a steady drift of the machine reaches both modes alike."""
    pattern = ["cached", "dispatch", "dispatch", "cached"]
    return [pattern[i % 4] for i in range(2 * processes)]


def mode_of(run: dict) -> str:
    launches = run["meta"].get("launches")
    for mode, text in LAUNCHES.items():
        if launches == text:
            return mode
    raise ValueError(f"a run's meta.launches must be one of benchmarks.bench.LAUNCHES, got {launches!r}")


def summarize(runs: list[dict]) -> dict:
    """{"rows": {B: {mode: {"median", "min", "max", "ratios"}}}, "met": bool} from the processes' JSON dicts."""
    ratios: dict[int, dict[str, list[float]]] = {}
    for run in runs:
        mode = mode_of(run)
        for row in run["decode"]:
            if row.get("ops_over_kernels_paired") is None:
                raise ValueError(f"decode row B={row['B']} has no ops_over_kernels_paired: a CPU run times no pairs")
            ratios.setdefault(row["B"], {m: [] for m in MODES})[mode].append(row["ops_over_kernels_paired"])
    if not ratios:
        raise ValueError("no decode rows in the given runs")
    rows = {B: {mode: {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "ratios": xs}
                for mode, xs in by_mode.items() if xs}
            for B, by_mode in sorted(ratios.items())}
    missing = [B for B, by_mode in rows.items() if "cached" not in by_mode]
    if missing:
        raise ValueError(f"no process with the cached launch timed B = {missing}")
    met = all(by_mode["cached"]["median"] <= BOUND for by_mode in rows.values())
    return {"rule": "per process: the median of four pairs; per row and launch mode: the median over processes; "
                    f"met when every cached median <= {BOUND}", "rows": rows, "met": met}


def print_summary(summary: dict) -> None:
    print(f"{'B':>4} | {'mode':<8} | {'processes':>9} | {'median':>7} | {'min':>6} | {'max':>6}")
    for B, by_mode in summary["rows"].items():
        for mode, s in by_mode.items():
            print(f"{B:>4} | {mode:<8} | {len(s['ratios']):>9} | {s['median']:>7.3f} | {s['min']:>6.3f} | "
                  f"{s['max']:>6.3f}")
    print(f"public API <= 5 % over the kernel alone at every decode row (cached medians): {summary['met']}")


def run_processes(processes: int, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, mode in enumerate(mode_order(processes)):
        path = out_dir / f"decode_{i + 1:02d}_{mode}.json"
        env = dict(os.environ)
        env.pop("K3LITE_TRITON_DISPATCH", None)
        if mode == "dispatch":
            env["K3LITE_TRITON_DISPATCH"] = "1"
        subprocess.run([sys.executable, "-m", "benchmarks.bench", "--sections", "decode", "--out", str(path)],
                       env=env, check=True)
        paths.append(path)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.decode_processes", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python -m benchmarks.decode_processes\n"
               "  python -m benchmarks.decode_processes --processes 2 --out-dir runs/decode --summary runs/d.json\n"
               "  python -m benchmarks.decode_processes --summarize runs/decode")
    parser.add_argument("--processes", type=int, default=4, metavar="N", help="processes per launch mode (default: 4)")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, metavar="DIR",
                        help="where each process's JSON goes (default: runs/decode_processes, git-ignored)")
    parser.add_argument("--summarize", type=Path, metavar="DIR",
                        help="only read the JSON files already in DIR (default: off, run the processes)")
    parser.add_argument("--summary", type=Path, metavar="PATH",
                        help="write the summary as JSON here (default: printed only)")
    args = parser.parse_args(argv)
    if args.processes < 1:
        parser.error(f"--processes must be at least 1, got {args.processes}")
    if args.summarize is not None:
        paths = sorted(args.summarize.glob("*.json"))
        if not paths:
            parser.error(f"--summarize: no JSON files in {args.summarize}")
    else:
        import torch

        if not torch.cuda.is_available():
            parser.error("needs a CUDA GPU: on a CPU the benchmark times no pairs (use --summarize DIR to read a run)")
        paths = run_processes(args.processes, args.out_dir)
    summary = summarize([json.loads(p.read_text()) for p in paths])
    summary["files"] = [str(p) for p in paths]
    print_summary(summary)
    if args.summary is not None:
        args.summary.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
