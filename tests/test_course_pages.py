"""The course pages a student working alone and a lecturer rely on.

Every chapter opens with "Before you start" (learning objectives, prerequisites, a study time that matches
book.yml) and ends with "Check yourself" (questions, answers folded) and "Sources" (each with a stable address);
these cells are tagged `reading`, so the lecture decks leave them out. book/ holds the bibliography (every
arXiv id a chapter cites is in it), the glossary and the page for instructors. No page speaks the project's
internal language (issue numbers, file names of the source articles, the history of a run).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from bookinfo import CHAPTERS_DIR, load_book, study_time_text  # noqa: E402

BOOK = load_book()
CHAPTERS = BOOK["chapters"]
STEMS = [chapter["file"] for chapter in CHAPTERS]
PAGES = ROOT / "book"
COURSE_PAGES = ("bibliography", "glossary", "instructors", "run_locally")
NO_ADDRESS = "No stable public address is recorded"
LINK = re.compile(r"\]\((https://[^)\s]+)\)|<(https://[^>\s]+)>")
ARXIV = re.compile(r"arXiv:(\d{4}\.\d{4,5})")
# Words of the project's own workings, which mean nothing to a reader of the course.
INTERNAL = re.compile(r"issue \d|issue #\d|seeds/|session|device time ran out|kernel engineer|seed article",
                      re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def markdown_cells(stem: str) -> tuple:
    notebook = jupytext.read(CHAPTERS_DIR / f"{stem}.py")
    return tuple(cell for cell in notebook.cells if cell.cell_type == "markdown")


def heading_cell(stem: str, heading: str):
    found = [cell for cell in markdown_cells(stem) if cell.source.lstrip().startswith(f"## {heading}")]
    assert len(found) == 1, f"{stem}: expected one cell headed '## {heading}', found {len(found)}"
    return found[0]


def list_items(text: str, marker: str) -> list[str]:
    """The items of a Markdown list (``marker`` is ``"-"`` or ``"1."`` style), continuation lines joined."""
    pattern = r"^\d+\. " if marker == "1." else r"^- "
    items: list[str] = []
    for line in text.splitlines():
        if re.match(pattern, line):
            items.append(line)
        elif items and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        elif not line.strip() and items and marker == "-":
            continue
    return items


def section(text: str, start: str, end: str | None) -> str:
    assert start in text, f"no '{start}'"
    body = text.split(start, 1)[1] if start else text
    return body.split(end, 1)[0] if end else body


def tags(cell) -> list[str]:
    return list(cell.metadata.get("tags", []))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=STEMS)
def test_book_yml_sets_a_study_time(chapter):
    minutes = chapter.get("study_time_min")
    assert isinstance(minutes, int) and 15 <= minutes <= 480, f"{chapter['file']}: study_time_min={minutes!r}"


def test_study_time_text():
    assert [study_time_text(m) for m in (45, 180, 150, 330)] == ["45 min", "3 h", "2 h 30 min", "5 h 30 min"]
    with pytest.raises(ValueError):
        study_time_text(0)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=STEMS)
def test_chapter_opens_with_objectives_prerequisites_and_study_time(chapter):
    stem = chapter["file"]
    cell = heading_cell(stem, "Before you start")
    cells = markdown_cells(stem)
    assert cells.index(cell) == 1, f"{stem}: 'Before you start' must follow the title cell"
    assert "reading" in tags(cell), f"{stem}: 'Before you start' must be tagged reading (left out of the decks)"
    assert cell.metadata.get("slideshow", {}).get("slide_type") == "skip", f"{stem}: mark it slide_type skip"
    text = cell.source
    assert f"**Study time:** about {study_time_text(chapter['study_time_min'])} " in text, (
        f"{stem}: the study time must read as book.yml's ({study_time_text(chapter['study_time_min'])})")
    objectives = list_items(section(text, "**Learning objectives.**", "**Prerequisites.**"), "1.")
    assert 3 <= len(objectives) <= 5, f"{stem}: {len(objectives)} learning objectives (3 to 5)"
    verbs = ("compute", "explain", "implement", "derive", "name", "run", "read", "check", "describe", "state",
             "write", "compare", "apply", "simulate", "count")
    for objective in objectives:
        first = objective.split(" ", 1)[1].split(" ", 1)[0].rstrip(",;:")
        assert first in verbs, f"{stem}: objective not measurable (starts with {first!r}): {objective[:80]}"
    prerequisites = list_items(section(text, "**Prerequisites.**", None), "-")
    assert prerequisites, f"{stem}: no prerequisites"
    for item in prerequisites:
        assert re.search(r"[Cc]hapter|https://|\*[^*]+\*", item), f"{stem}: prerequisite without a source: {item}"


@pytest.mark.parametrize("stem", STEMS)
def test_chapter_ends_with_check_yourself_and_sources(stem):
    cells = markdown_cells(stem)
    check, sources = heading_cell(stem, "Check yourself"), heading_cell(stem, "Sources")
    assert list(cells[-2:]) == [check, sources], f"{stem}: 'Check yourself' and 'Sources' must be the last two cells"
    for cell in (check, sources):
        assert "reading" in tags(cell), f"{stem}: '{cell.source.splitlines()[0]}' must be tagged reading"
    questions = list_items(section(check.source, "", "<details>"), "1.")
    assert 3 <= len(questions) <= 4, f"{stem}: {len(questions)} questions (3 to 4)"
    answers = list_items(section(check.source, "<summary>", "</details>"), "1.")
    assert len(answers) == len(questions), f"{stem}: {len(questions)} questions but {len(answers)} answers"
    items = list_items(sources.source, "-")
    assert items, f"{stem}: no sources"
    for item in items:
        assert LINK.search(item) or NO_ADDRESS.lower() in item.lower(), f"{stem}: source without a link: {item}"


@pytest.mark.parametrize("stem", STEMS)
def test_chapter_prose_has_no_internal_words(stem):
    for cell in markdown_cells(stem):
        found = INTERNAL.search(cell.source)
        assert not found, f"{stem}: internal wording {found.group(0)!r} in: {cell.source[:100]!r}"


@pytest.mark.parametrize("page", COURSE_PAGES)
def test_course_page_has_no_internal_words(page):
    text = (PAGES / f"{page}.md").read_text(encoding="utf-8")
    found = INTERNAL.search(text)
    assert not found, f"book/{page}.md: internal wording {found.group(0)!r}"


def bibliography_entries() -> list[str]:
    return list_items((PAGES / "bibliography.md").read_text(encoding="utf-8"), "-")


def test_bibliography_has_twenty_entries_with_addresses():
    entries = bibliography_entries()
    linked = [entry for entry in entries if LINK.search(entry)]
    assert len(linked) >= 20, f"the bibliography has {len(linked)} entries with a link (at least 20)"
    for entry in entries:
        assert LINK.search(entry) or NO_ADDRESS in entry, f"bibliography entry without an address: {entry[:100]}"
    for entry in entries:
        for match in ARXIV.finditer(entry):
            assert f"https://arxiv.org/abs/{match.group(1)}" in entry, f"arXiv:{match.group(1)} not linked"


@pytest.mark.parametrize("stem", STEMS)
def test_every_arxiv_id_a_chapter_cites_is_in_the_bibliography(stem):
    listed = {identifier for entry in bibliography_entries() for identifier in ARXIV.findall(entry)}
    cited = {identifier for cell in markdown_cells(stem) for identifier in ARXIV.findall(cell.source)}
    assert cited <= listed, f"{stem}: cites arXiv ids missing from book/bibliography.md: {sorted(cited - listed)}"


def test_glossary_terms_name_their_chapter():
    text = (PAGES / "glossary.md").read_text(encoding="utf-8")
    entries = re.findall(r"^(\S[^\n]*)\n((?::[^\n]*\n)(?: {2}[^\n]*\n)*)", text, re.MULTILINE)
    assert len(entries) >= 40, f"the glossary defines {len(entries)} terms"
    for term, definition in entries:
        assert re.search(r"\{doc\}`\d\d <chapters/\d\d_\w+>`", definition), f"glossary: {term!r} names no chapter"
    for stem in STEMS:
        assert f"<chapters/{stem}>" in text or stem.startswith("00"), f"glossary: no term from {stem}"
    for term in ("State", "Delta rule", "WY representation", "Chunk", "Decay and gate", "Log space", "KV cache",
                 "Latent", "Mixture of experts", "Router", "SiTU", "AttnRes", "Roofline", "Program and grid",
                 "Block (Triton)"):
        assert any(found.startswith(term) for found, _ in entries), f"glossary: no entry for {term!r}"


def test_instructors_page_plans_six_weeks_projects_and_grading():
    text = (PAGES / "instructors.md").read_text(encoding="utf-8")
    weeks = re.findall(r"^\| (\d) \|", text, re.MULTILINE)
    assert weeks == [str(week) for week in range(1, 7)], f"weeks in the plan: {weeks}"
    plan = section(text, "## Six-week plan", "## Projects")
    for stem in STEMS:
        assert re.search(rf"\b{stem[:2]}\b", plan), f"the six-week plan never schedules chapter {stem[:2]}"
    projects = re.findall(r"^### Project \d: (.+)$", text, re.MULTILINE)
    assert 2 <= len(projects) <= 3, f"projects: {projects}"
    for project in projects:
        body = section(text, project, "###")
        points = [int(p) for p in re.findall(r"^\| [^|]+ \| (\d+) \|", body, re.MULTILINE)]
        assert sum(points) == 100, f"project {project!r}: the rubric's points add up to {sum(points)}"
    assert "k3lite.exercises" in text and "ExerciseFailed" in text, "no word on grading with the checkers"


def test_front_page_shows_study_time_and_links_the_course_pages():
    from build_book import chapter_banner, front_page
    from site_chapters import Chapter

    chapters = [Chapter(c["file"], c["title"], c["budget_s"], CHAPTERS_DIR / f"{c['file']}.ipynb") for c in CHAPTERS]
    page = front_page(BOOK, chapters, with_slides=False)
    assert "| Chapter | Study time |" in page and "CPU budget" not in page
    for chapter in CHAPTERS:
        assert f"about {study_time_text(chapter['study_time_min'])}" in page
    for name in ("instructors", "glossary", "bibliography", "run_locally"):
        assert re.search(rf"^{name}$", page, re.MULTILINE), f"the front page's toctrees do not list {name}"
    banner = chapter_banner(chapters[1], with_slides=False, study_time_min=CHAPTERS[1]["study_time_min"])
    assert f"Executes in ≤ {CHAPTERS[1]['budget_s']} s on a 2-core CPU" in banner
    assert f"about {study_time_text(CHAPTERS[1]['study_time_min'])}" in banner


def test_grading_script_finds_every_checker_call_of_every_chapter():
    """instructors.md's grade.py finds the checks by a pattern; a chapter it misses (11a once) goes ungraded."""
    text = (PAGES / "instructors.md").read_text(encoding="utf-8")
    pattern = re.search(r'CHECK = re\.compile\(r"(.+?)", re\.MULTILINE\)', text).group(1)
    check = re.compile(pattern, re.MULTILINE)
    for stem in STEMS:
        source = (CHAPTERS_DIR / f"{stem}.py").read_text(encoding="utf-8")
        calls = re.findall(r"^ch\w*\.check_\w+\(", source, re.MULTILINE)
        seen = len(check.findall(source))
        assert seen == len(calls), f"{stem}: grade.py sees {seen} of {len(calls)} checker calls"
