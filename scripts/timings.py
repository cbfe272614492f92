"""Execute every chapter of book.yml (without writing it) and compare its time with its budget.

    python scripts/timings.py [stem ...]

Prints a table and exits non-zero when a chapter runs over its budget or fails.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bookinfo import CHAPTER_ENV, CHAPTERS_DIR, load_book


def time_chapter(stem: str) -> float:
    notebook = nbformat.read(CHAPTERS_DIR / f"{stem}.ipynb", as_version=4)
    os.environ.update(CHAPTER_ENV)
    client = NotebookClient(notebook, timeout=1200, kernel_name="python3",
                            resources={"metadata": {"path": str(CHAPTERS_DIR)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    wanted = set(argv[1:])
    failures = 0
    print(f"{'chapter':<28} {'seconds':>8} {'budget':>7}  verdict")
    for chapter in load_book()["chapters"]:
        stem, budget = chapter["file"], chapter["budget_s"]
        if wanted and stem not in wanted:
            continue
        try:
            seconds = time_chapter(stem)
            verdict = "ok" if seconds <= budget else "OVER BUDGET"
        except Exception as error:  # a failing chapter is reported, not hidden
            seconds, verdict = float("nan"), f"FAILED: {type(error).__name__}"
        failures += verdict != "ok"
        print(f"{stem:<28} {seconds:8.1f} {budget:7d}  {verdict}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
