"""Read book.yml for the Makefile and the tests: `python scripts/bookinfo.py notebooks|stems|sources`.

`study_time_text(minutes)` is how every page states a chapter's study time (`study_time_min` in book.yml):
the front page, the chapter banner, the README's chapter table and the chapter's own "Before you start".
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS_DIR = ROOT / "chapters"


# How a chapter is executed, wherever it is (make execute, the timing script): the small profile, which
# nbval compares against. No CPU code path is pinned: compared outputs do not depend on it (CONTRIBUTING.md).
CHAPTER_ENV = {"K3LITE_PROFILE": "small", "PYTHONHASHSEED": "0"}


def load_book() -> dict:
    return yaml.safe_load((ROOT / "book.yml").read_text(encoding="utf-8"))


def chapter_stems() -> list[str]:
    return [chapter["file"] for chapter in load_book()["chapters"]]


def study_time_text(minutes: int) -> str:
    """A study time as the pages write it: 45 -> "45 min", 180 -> "3 h", 150 -> "2 h 30 min"."""
    if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes <= 0:
        raise ValueError(f"study_time_min must be a positive number of minutes, got {minutes!r}")
    hours, rest = divmod(minutes, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h" if not rest else f"{hours} h {rest} min"


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else "stems"
    suffix = {"stems": "", "notebooks": ".ipynb", "sources": ".py"}.get(what)
    if suffix is None:
        print(f"usage: {argv[0]} notebooks|stems|sources", file=sys.stderr)
        return 2
    prefix = "" if what == "stems" else "chapters/"
    print(" ".join(f"{prefix}{stem}{suffix}" for stem in chapter_stems()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
