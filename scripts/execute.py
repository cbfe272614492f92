"""Execute chapters and store their outputs in the paired .ipynb (the files nbval compares).

    python scripts/execute.py                 # every chapter in book.yml
    python scripts/execute.py 01_gpt2 06_kda  # some chapters

Always runs with the small profile, so stored outputs are the CPU ones whatever the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bookinfo import CHAPTER_ENV, CHAPTERS_DIR, chapter_stems


def execute(stem: str) -> float:
    source = CHAPTERS_DIR / f"{stem}.py"
    if not source.exists():
        raise SystemExit(f"no chapter source {source}")
    env = dict(os.environ, **CHAPTER_ENV)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", "--set-kernel", "python3", "--execute", str(source)],
                   check=True, env=env, cwd=CHAPTERS_DIR)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    stems = argv[1:] or chapter_stems()
    for stem in stems:
        seconds = execute(stem)
        print(f"{stem}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
