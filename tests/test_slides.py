"""The lecture decks, built from real chapters without a browser: lecture-sized, no placeholder slides,
notes on every slide; and the pieces that get there (code cut to slide size, answers in the notes)."""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from build_slides import (  # noqa: E402
    ELIDED,
    MAX_CODE_LINES,
    MAX_SLIDES,
    _exporter,
    code_chunks,
    latex_to_text,
    lecture_decks,
    render_decks,
)
from site_chapters import listed_chapters, load_book  # noqa: E402

PLACEHOLDER = re.compile(r"is in the notebook|code of this step", re.I)
TIMING = re.compile(r"≈[\d.]+ min; at \d+ min of \d+")


class DeckSlides(HTMLParser):
    """The leaf <section>s of a reveal.js deck (its slides), each with the text of its notes and the rest."""

    def __init__(self):
        super().__init__()
        self.stack, self.slides, self.in_notes = [], [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            if self.stack:
                self.stack[-1]["children"] += 1
            self.stack.append({"children": 0, "notes": "", "text": ""})
        elif tag == "aside" and ("class", "notes") in attrs:
            self.in_notes += 1

    def handle_endtag(self, tag):
        if tag == "section":
            section = self.stack.pop()
            if section["children"] == 0:
                self.slides.append(section)
        elif tag == "aside" and self.in_notes:
            self.in_notes -= 1

    def handle_data(self, data):
        if self.stack:
            self.stack[-1]["notes" if self.in_notes else "text"] += data


def slides_of(deck_html: str) -> list[dict]:
    parser = DeckSlides()
    parser.feed(deck_html)
    return parser.slides


def _chapters():
    chapters = listed_chapters(load_book(ROOT / "book.yml"), ROOT / "chapters", only_existing=True)
    # A short chapter and the longest one (the one most likely to need parts).
    longest = max(chapters, key=lambda chapter: len(nbformat.read(chapter.notebook, as_version=4).cells))
    return [chapters[min(3, len(chapters) - 1)], longest]


@pytest.fixture(scope="module")
def built():
    exporter = _exporter()
    return {chapter.stem: render_decks(exporter, chapter) for chapter in _chapters()}


def test_decks_of_real_chapters_are_lecture_sized_with_notes_everywhere(built):
    for decks in built.values():
        for name, deck_html in decks:
            slides = slides_of(deck_html)
            assert 1 < len(slides) <= MAX_SLIDES, f"{name}: {len(slides)} slides"
            assert not [s for s in slides if PLACEHOLDER.search(s["text"])], f"{name}: a placeholder slide"
            silent = [s["text"].strip()[:60] for s in slides if not TIMING.search(s["notes"])]
            assert silent == [], f"{name}: slides without timed notes: {silent}"
            assert not [s for s in slides if re.search(r"\\(?:frac|beta|top|lVert)\b|\$", s["notes"])], (
                f"{name}: raw LaTeX in the notes")
        if len(decks) > 1:  # parts link each other
            for number, (name, deck_html) in enumerate(decks[:-1]):
                assert decks[number + 1][0] in deck_html, f"{name} does not link the next part"


def test_exercise_slides_carry_the_expected_answer(built):
    for stem, decks in built.items():
        notebook = nbformat.read(ROOT / "chapters" / f"{stem}.ipynb", as_version=4)
        stubs = sum(1 for cell in notebook.cells if cell.cell_type == "code" and "NotImplementedError" in cell.source
                    and "solution" not in cell.metadata.get("tags", []))
        answered = sum(s["notes"].count("Expected answer") for _, html in decks for s in slides_of(html))
        assert answered >= min(stubs, 1), f"{stem}: {stubs} exercises, {answered} expected answers in the notes"


def _code(source, text="", tags=None):
    cell = nbformat.v4.new_code_cell(source, execution_count=1, outputs=(
        [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def _markdown(source, tags=None):
    cell = nbformat.v4.new_markdown_cell(source)
    if tags:
        cell.metadata["tags"] = tags
    return cell


def test_long_code_is_split_or_outlined_never_replaced():
    medium = "\n".join(f"x{i} = {i}" for i in range(MAX_CODE_LINES + 4))
    chunks, how = code_chunks(medium)
    assert how == "split" and len(chunks) == 2 and "\n".join(chunks) == medium
    body = "\n".join(f"        y{i} = x * {i}" for i in range(60))
    long = f"def f(x):\n    for step in range(3):\n{body}\n    return x"
    (outline,), how = code_chunks(long)
    assert how == "outline" and ELIDED in outline and "def f(x):" in outline and "return x" in outline
    assert len(outline.splitlines()) <= MAX_CODE_LINES


def test_notes_time_each_slide_and_answer_a_prediction():
    notebook = nbformat.v4.new_notebook(cells=[
        _markdown("# Title\n\nOpening."),
        _markdown("## Predict\n\nPredict the sum of $\\alpha^2$ over the keys before running the cell."),
        _code("print(sum(range(5)))", "10\n"),
        _markdown("## Exercise 1\n\nWrite it."),
        _code("def answer():\n    raise NotImplementedError"),
        _code("def answer():\n    return 42  # the solution", "correct\n", tags=["solution"]),
        _markdown("## Check yourself\n\n1. Why?\n\n<details>\n<summary>Answers</summary>\n\n1. Because $\\beta < 2$."
                  "\n\n</details>", tags=["reading"]),
    ])
    ((name, deck),) = lecture_decks(notebook, "T", "00_t")
    notes = [cell.source for cell in deck.cells if cell.metadata["slideshow"]["slide_type"] == "notes"]
    shown = [cell.source for cell in deck.cells if cell.metadata["slideshow"]["slide_type"] != "notes"]
    assert name == "00_t.slides.html" and len(notes) == 4 and all(TIMING.search(note) for note in notes)
    assert "The chapter computes: 10" in notes[1]
    assert "return 42" in notes[2] and "return 42" not in "\n".join(shown)
    assert "Because β" in notes[3] and "Because" not in "\n".join(shown)


def test_latex_reads_as_text():
    assert latex_to_text(r"\beta\lVert k\rVert^2") == "β‖k‖²"
    assert latex_to_text(r"S^\top k") == "Sᵀk"
    assert latex_to_text(r"\tfrac12\lVert S^\top k - v\rVert^2") == "1/2‖Sᵀk - v‖²"
