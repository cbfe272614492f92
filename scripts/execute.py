"""Execute chapters and store their outputs in the paired .ipynb (the files nbval compares).

    python scripts/execute.py                 # every chapter in book.yml
    python scripts/execute.py 01_gpt2 06_kda  # some chapters (a stem, or chapters/01_gpt2.py, or 01_gpt2.ipynb)

Always runs with the small profile, so stored outputs are the CPU ones whatever the machine. A name that is not a
paired chapter of book.yml (a chapters/NN_slug.py that chapters/jupytext.toml pairs with its .ipynb) exits with status
2 and one line, before anything runs (jupytext would otherwise "execute" an unpaired file and write nothing). A
notebook whose outputs did not change is left as it was (jupytext does not rewrite it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bookinfo import CHAPTER_ENV, CHAPTERS_DIR, chapter_stems


def chapter_stem(name: str, known: list[str]) -> str | None:
    """The book.yml stem ``name`` means (``06_kda``, ``06_kda.py``, ``chapters/06_kda.ipynb``), or None when it is
    not a paired chapter: not in book.yml, or no chapters/<stem>.py (chapters/jupytext.toml pairs it with the .ipynb,
    which a first execution creates)."""
    path = Path(name)
    stem = path.stem if path.suffix in (".py", ".ipynb") else path.name
    if path.parent not in (Path("."), Path("chapters")) and path.parent.resolve() != CHAPTERS_DIR:
        return None
    if stem not in known:
        return None
    if not (CHAPTERS_DIR / f"{stem}.py").is_file():
        return None
    return stem


def execute(stem: str) -> float:
    source = CHAPTERS_DIR / f"{stem}.py"
    env = dict(os.environ, **CHAPTER_ENV)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", "--set-kernel", "python3", "--execute", str(source)],
                   check=True, env=env, cwd=CHAPTERS_DIR)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    known = chapter_stems()
    names = argv[1:]
    stems = [chapter_stem(name, known) for name in names] if names else known
    if bad := [name for name, stem in zip(names, stems) if stem is None]:
        print(f"execute.py: not a paired chapter of book.yml: {', '.join(bad)} (chapters: {', '.join(known)})",
              file=sys.stderr)
        return 2
    for stem in stems:
        seconds = execute(stem)
        print(f"{stem}: executed in {seconds:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
