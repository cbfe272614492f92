"""`make student`: the student edition of the real chapters keeps every cell but the solutions."""

from __future__ import annotations

import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from make_student import CODE_PLACEHOLDER, make_student, shows_a_solution, solution_only_names  # noqa: E402
from site_chapters import is_solution, listed_chapters, load_book  # noqa: E402

CHAPTERS = listed_chapters(load_book(ROOT / "book.yml"), ROOT / "chapters", only_existing=True)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("student")
    make_student(ROOT / "chapters", out, ROOT / "book.yml")
    return out


def instructor(stem: str):
    return nbformat.read(ROOT / "chapters" / f"{stem}.ipynb", as_version=4)


def student(student_dir: Path, stem: str):
    return nbformat.read(student_dir / "chapters" / f"{stem}.ipynb", as_version=4)


def solution_lines(notebook) -> list[str]:
    """Each solution's own lines: not trivially short and in no other cell of the notebook (an exercise's
    stub may give a few of its lines as hints)."""
    elsewhere = "\n".join(cell.source for cell in notebook.cells if not is_solution(cell))
    return [line.strip() for cell in notebook.cells if is_solution(cell) for line in cell.source.splitlines()
            if len(line.strip()) >= 12 and line.strip() not in elsewhere]


def test_every_chapter_has_a_student_notebook_and_twin(student_dir):
    assert CHAPTERS, "no chapter notebook found"
    for chapter in CHAPTERS:
        assert (student_dir / "chapters" / f"{chapter.stem}.ipynb").is_file()
        if chapter.notebook.with_suffix(".py").exists():
            assert (student_dir / "chapters" / f"{chapter.stem}.py").is_file()


def test_the_chapters_have_solutions_to_remove():
    assert sum(is_solution(cell) for chapter in CHAPTERS for cell in instructor(chapter.stem).cells) > 0
    assert sum(len(solution_lines(instructor(chapter.stem))) for chapter in CHAPTERS) > 0


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda chapter: chapter.stem)
def test_student_notebook_is_valid_nbformat(student_dir, chapter):
    nbformat.validate(student(student_dir, chapter.stem))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda chapter: chapter.stem)
def test_no_solution_source_or_output_survives(student_dir, chapter):
    original, edition = instructor(chapter.stem), student(student_dir, chapter.stem)
    assert len(edition.cells) == len(original.cells), "cells added or dropped"
    text = "\n".join(cell.source for cell in edition.cells)
    leaked = [line for line in solution_lines(original) if line in text]
    assert leaked == [], f"{chapter.stem}: solution lines in the student notebook: {leaked[:3]}"
    for before, after in zip(original.cells, edition.cells):
        if is_solution(before):
            assert is_solution(after), "the solution cell lost its tags"
            assert after.cell_type != "code" or (after.outputs == [] and after.execution_count is None)
            assert after.cell_type != "code" or after.source == CODE_PLACEHOLDER
    # A solution's printed result ("correct.", the numbers it computed) shows up in no output.
    outputs = str([cell.get("outputs", []) for cell in edition.cells])
    results = [str(output.get("text", output.get("data", ""))) for cell in original.cells if is_solution(cell)
               for output in cell.get("outputs", [])]
    shown = [result for result in results if len(result.strip()) >= 12 and result in outputs
             and result not in str([cell.get("outputs", []) for cell in original.cells if not is_solution(cell)])]
    assert shown == [], f"{chapter.stem}: solution outputs in the student notebook: {shown[:2]}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda chapter: chapter.stem)
def test_other_cells_are_unchanged(student_dir, chapter):
    original, edition = instructor(chapter.stem), student(student_dir, chapter.stem)
    names = solution_only_names(original.cells)
    for index, (before, after) in enumerate(zip(original.cells, edition.cells)):
        if is_solution(before):
            continue
        if shows_a_solution(before, names):  # shows a solution's result: same code, no output
            assert after.source == before.source and after.outputs == [], f"{chapter.stem} cell {index}"
            continue
        assert after == before, f"{chapter.stem}: cell {index} changed"
    assert edition.metadata == original.metadata


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda chapter: chapter.stem)
def test_py_twin_matches_the_student_notebook(student_dir, chapter):
    twin = student_dir / "chapters" / f"{chapter.stem}.py"
    if not chapter.notebook.with_suffix(".py").exists():
        pytest.skip(f"{chapter.stem} has no .py twin")
    text = twin.read_text(encoding="utf-8")
    original = jupytext.read(chapter.notebook.with_suffix(".py"))
    leaked = [line for line in solution_lines(original) if line in text]
    assert leaked == [], f"{chapter.stem}.py: solution lines in the student twin: {leaked[:3]}"
    assert text.count(CODE_PLACEHOLDER) == sum(is_solution(c) and c.cell_type == "code" for c in original.cells)


def test_a_cell_showing_a_solution_result_loses_its_output(tmp_path):
    """The rule beyond the solution cells, on a small notebook: a cell using a name only a solution
    defines shows that solution's result, so its output goes; a cell using the learner's stub keeps its."""
    from make_student import student_notebook

    def code(source, tags=(), text="out\n"):
        return nbformat.v4.new_code_cell(source, metadata={"tags": list(tags)} if tags else {}, execution_count=1,
                                         outputs=[nbformat.v4.new_output("stream", name="stdout", text=text)])

    notebook = nbformat.v4.new_notebook(cells=[
        code("def f():\n    raise NotImplementedError"),
        code("check(f)", text="not attempted yet\n"),
        code("def f_solution():\n    return 42\ncheck(f_solution)", tags=["solution"], text="correct\n"),
        code("print(f_solution())", text="42\n"),
    ])
    edition = student_notebook(notebook)
    nbformat.validate(edition)
    assert [cell.outputs for cell in edition.cells[2:]] == [[], []]
    assert edition.cells[2].source == CODE_PLACEHOLDER and edition.cells[3].source == "print(f_solution())"
    assert edition.cells[:2] == notebook.cells[:2]
