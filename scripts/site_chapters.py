"""The chapters the book and the slides are built from: book.yml's list, in its order."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = ROOT / "_build"


@dataclass(frozen=True)
class Chapter:
    stem: str
    title: str
    budget_s: int
    notebook: Path

    @property
    def slides_name(self) -> str:
        return f"{self.stem}.slides.html"


def load_book(book_yml: Path) -> dict:
    book = yaml.safe_load(book_yml.read_text(encoding="utf-8"))
    if not isinstance(book, dict) or not book.get("chapters"):
        raise SystemExit(f"{book_yml}: expected a mapping with a non-empty 'chapters' list")
    return book


def listed_chapters(book: dict, chapters_dir: Path, *, only_existing: bool) -> list[Chapter]:
    """The chapters of ``book`` in order; a listed chapter without its executed .ipynb is an error
    unless ``only_existing`` (then it is left out with a note on stderr)."""
    chapters, missing = [], []
    for entry in book["chapters"]:
        notebook = chapters_dir / f"{entry['file']}.ipynb"
        if not notebook.exists():
            missing.append(entry["file"])
            continue
        chapters.append(Chapter(entry["file"], entry["title"], int(entry.get("budget_s", 0)), notebook))
    if missing and not only_existing:
        raise SystemExit(f"book.yml lists chapters with no executed notebook in {chapters_dir}: "
                         f"{', '.join(missing)} (write and execute them, or build what exists with "
                         f"`.venv/bin/python scripts/{Path(sys.argv[0]).name} --only-existing`)")
    if missing:
        print(f"leaving out chapters not written yet: {', '.join(missing)}", file=sys.stderr)
    if not chapters:
        raise SystemExit(f"no chapter notebook found in {chapters_dir}")
    return chapters


# ----- Cell roles (CONTRIBUTING, "Cell roles"): one tag per role, read by the site and the decks -----
PLUMBING, SOLUTION, NOTES, LECTURE, READING = "plumbing", "solution", "notes", "lecture", "reading"
ROLE_TAGS = (PLUMBING, SOLUTION, NOTES, LECTURE, READING)
# How myst-nb shows each role on the site: plumbing behind a "Show code" toggle (its output stays
# visible), a solution's code and its output each behind their own toggle (the result would give the
# answer away), speaker notes not at all.
SITE_TAGS = {PLUMBING: ("hide-input",), SOLUTION: ("hide-input", "hide-output"), NOTES: ("remove-cell",)}


def cell_tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def is_solution(cell) -> bool:
    """An exercise's solution: tagged ``solution``, or (the convention before roles) a code cell
    tagged ``hide-input``, which every chapter used only for its solutions."""
    tags = cell_tags(cell)
    return SOLUTION in tags or (cell.get("cell_type") == "code" and "hide-input" in tags)


def site_tags(cell) -> list[str]:
    """The cell's tags plus the myst-nb tags its roles stand for, each once, in order. A solution
    found by ``is_solution`` (also one tagged only ``hide-input``) gets the solution's tags."""
    tags = cell_tags(cell)
    roles = [role for role in SITE_TAGS if role in tags]
    if SOLUTION not in roles and is_solution(cell):
        roles.append(SOLUTION)
    for role in roles:
        for myst_tag in SITE_TAGS[role]:
            if myst_tag not in tags:
                tags.append(myst_tag)
    return tags
