"""MQAR sweep: one small model per (mechanism, number of key-value pairs, seed); held-out recall accuracy.

    python scripts/mqar_sweep.py --out runs/mqar_full.json                # the full sweep (GPU)
    python scripts/mqar_sweep.py --steps 200 --pairs 4 16 --workers 1     # a small one (CPU)

Prints a table (mechanism x pairs, accuracy averaged over seeds) and writes a JSON in the layout of the stored
earlier sweep (figures/mqar_sweep.json, which k3lite/models/mixers.py cites): the configuration, the command, the
device, the date, and one record per run. The default --out is git-ignored scratch, and an existing file is never
overwritten (choose a new path), so no run can replace the course's evidence by accident. Runs are independent, so
``--workers N`` trains N of them at once in separate processes (on one GPU the small models are launch-bound, and
several processes keep it busier).
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from k3lite.bakeoff.cli import OneLineParser
from k3lite.models import mixers

DEFAULT_PAIRS = (8, 16, 32, 64, 96)


def parse_args(argv):
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mechanisms", nargs="+", default=list(mixers.MECHANISMS), choices=mixers.MECHANISMS)
    parser.add_argument("--pairs", nargs="+", type=int, default=list(DEFAULT_PAIRS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--d-model", type=int, default=32)
    parser.add_argument("--num-layers", type=int, default=2)
    parser.add_argument("--num-heads", type=int, default=2)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--chunk-size", type=int, default=32)
    parser.add_argument("--backend", default="torch", choices=("auto", "torch", "triton"),
                        help="ops backend of the recurrent mixers (torch: the PyTorch chunked form)")
    parser.add_argument("--eval-size", type=int, default=512)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--out", type=Path, default=Path("runs/mqar_sweep.json"),
                        help="a new file to write (default: %(default)s, git-ignored); an existing one is refused")
    args = parser.parse_args(argv)
    if args.out.exists():
        parser.error(f"--out {args.out} exists; choose a new path (a sweep never overwrites stored results)")
    largest = args.vocab_size // 2
    if any(p < 1 or p > largest for p in args.pairs):
        parser.error(f"--pairs must lie in [1, {largest}] for --vocab-size {args.vocab_size}")
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    return args


def run_one(job):
    """Train one model; returns its record (a plain dict, so it crosses process boundaries)."""
    mechanism, num_pairs, seed, options = job
    torch.set_num_threads(options.pop("threads"))
    _, result = mixers.train_on_mqar(mechanism, num_pairs, seed=seed, **options)
    record = asdict(result)
    print(f"  {mechanism:<17} pairs={num_pairs:<3} seed={seed}  accuracy={result.accuracy:.3f}  "
          f"loss={result.final_loss:.3f}  {result.seconds:.0f} s", flush=True)
    return record


def table(records, mechanisms, pairs) -> str:
    lines = [f"{'mechanism':<18}" + "".join(f"{p:>8}" for p in pairs)]
    for mechanism in mechanisms:
        cells = []
        for p in pairs:
            accs = [r["accuracy"] for r in records if r["mechanism"] == mechanism and r["num_pairs"] == p]
            cells.append(f"{sum(accs) / len(accs):8.2f}" if accs else f"{'-':>8}")
        lines.append(f"{mechanism:<18}" + "".join(cells))
    return "\n".join(lines)


def write(path: Path, header: dict, records: list, mechanisms: list, wall: float, planned: int) -> None:
    runs = sorted(records, key=lambda r: (mechanisms.index(r["mechanism"]), r["num_pairs"], r["seed"]))
    payload = {**header, "wall_seconds": round(wall, 1), "runs_planned": planned, "runs": runs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    model_options = {"d_model": args.d_model, "num_layers": args.num_layers, "num_heads": args.num_heads,
                     "vocab_size": args.vocab_size, "chunk_size": args.chunk_size, "backend": args.backend}
    threads = max(1, (torch.get_num_threads() // args.workers) if device == "cpu" else 1)
    # Longest sequences first, so the slowest runs do not start last.
    jobs = [(m, p, s, dict(steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_size=args.eval_size,
                           device=device, threads=threads, **model_options))
            for p in sorted(args.pairs, reverse=True) for m in args.mechanisms for s in args.seeds]
    print(f"{len(jobs)} runs on {device} with {args.workers} worker(s)", flush=True)
    device_name = torch.cuda.get_device_name(0) if device.startswith("cuda") else platform.processor() or "cpu"
    header = {
        "task": "multi-query associative recall (k3lite.data.mqar_batch), num_queries = num_pairs",
        "metric": "held-out accuracy on the queried values (one fresh batch per run)",
        "command": "python scripts/mqar_sweep.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "device": f"{device} ({device_name})",
        "torch": torch.__version__,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "config": {"mechanisms": args.mechanisms, "pairs": sorted(args.pairs), "seeds": args.seeds,
                   "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
                   "eval_size": args.eval_size, **model_options},
    }
    start = time.perf_counter()
    records = []
    # The JSON is rewritten after every finished run, so a sweep stopped early still leaves its results.
    if args.workers == 1:
        for job in jobs:
            records.append(run_one(job))
            write(args.out, header, records, args.mechanisms, time.perf_counter() - start, len(jobs))
    else:
        with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
            for record in pool.imap_unordered(run_one, jobs, chunksize=1):
                records.append(record)
                write(args.out, header, records, args.mechanisms, time.perf_counter() - start, len(jobs))
    print(table(records, args.mechanisms, sorted(args.pairs)))
    print(f"wall time {time.perf_counter() - start:.0f} s")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
