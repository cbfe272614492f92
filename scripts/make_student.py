"""The student edition of the course: every chapter with its exercise solutions taken out.

    python scripts/make_student.py [--out DIR] [--book-yml PATH] [--chapters-dir DIR]

Writes, for each chapter of book.yml, DIR/chapters/NN_name.ipynb (default DIR: _build/student) and its
py:percent twin NN_name.py, with

* every solution cell (``is_solution`` in scripts/site_chapters.py, as the site and the decks find
  them) kept in its place, its code replaced by a one-line placeholder, its outputs and execution
  count removed: the exercise's stub and checker cells stay, so running the checker says "not
  attempted yet" until the learner's own code passes;
* the outputs of any other code cell that shows a solution's result (it uses a name that only
  solution cells define) removed too;
* every other cell exactly as in the committed notebook, outputs included.

The figures the chapters' markdown shows with ``../figures/NAME`` are copied to DIR/figures, and
chapters/jupytext.toml to DIR/chapters, so the folder opens in JupyterLab as the course does. The
instructor edition is the committed chapters/ as they are.
"""

from __future__ import annotations

import argparse
import ast
import copy
import re
import shutil
import sys
from pathlib import Path

import jupytext
import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from site_chapters import BUILD_DIR, ROOT, is_solution, listed_chapters, load_book

CODE_PLACEHOLDER = "# Your solution here — see the exercise above."
MARKDOWN_PLACEHOLDER = "*Your answer here — see the exercise above.*"
FIGURE_LINK = re.compile(r"\]\(\.\./figures/([^)\s]+)\)|src=[\"']\.\./figures/([^\"']+)[\"']")


def _python(source: str) -> ast.Module | None:
    """The cell's code as Python, IPython magics and shell lines left out; None if it does not parse."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def defined_names(source: str) -> set[str]:
    """Names a cell binds at its top level: assignments, definitions, imports, loop targets."""
    tree = _python(source)
    if tree is None:
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def used_names(source: str) -> set[str]:
    tree = _python(source)
    if tree is None:
        return set()
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def solution_only_names(cells) -> set[str]:
    """Names bound by solution cells and by no other code cell: a cell that uses one shows a solution's
    result."""
    in_solutions, elsewhere = set(), set()
    for cell in cells:
        if cell.get("cell_type") == "code":
            (in_solutions if is_solution(cell) else elsewhere).update(defined_names(cell.source))
    return in_solutions - elsewhere


def shows_a_solution(cell, names: set[str]) -> bool:
    return cell.get("cell_type") == "code" and not is_solution(cell) and bool(used_names(cell.source) & names)


def student_cells(cells) -> list:
    """A copy of ``cells`` (notebook or jupytext cells) with the solutions and what shows them removed."""
    names = solution_only_names(cells)
    result = []
    for cell in cells:
        cell = copy.deepcopy(cell)
        if is_solution(cell):
            cell.source = CODE_PLACEHOLDER if cell.cell_type == "code" else MARKDOWN_PLACEHOLDER
            if cell.cell_type == "markdown":
                cell.pop("attachments", None)
        if cell.cell_type == "code" and (is_solution(cell) or shows_a_solution(cell, names)):
            cell.outputs = []
            cell.execution_count = None
        result.append(cell)
    return result


def student_notebook(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    student = copy.deepcopy(notebook)
    student.cells = student_cells(notebook.cells)
    return student


def figures_shown(notebook: nbformat.NotebookNode) -> set[str]:
    """The files of figures/ that the notebook's markdown links as ../figures/NAME."""
    found = set()
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found.update(a or b for a, b in FIGURE_LINK.findall(cell.source))
    return found


def make_student(chapters_dir: Path, out_dir: Path, book_yml: Path) -> list[Path]:
    """Write the student edition of every chapter of ``book_yml`` into ``out_dir``; return the notebooks."""
    chapters = listed_chapters(load_book(book_yml), chapters_dir, only_existing=True)
    target = out_dir / "chapters"
    target.mkdir(parents=True, exist_ok=True)
    written, figures = [], set()
    for chapter in chapters:
        notebook = nbformat.read(chapter.notebook, as_version=4)
        student = student_notebook(notebook)
        nbformat.validate(student)
        path = target / chapter.notebook.name
        nbformat.write(student, path)
        written.append(path)
        figures |= figures_shown(notebook)
        twin = chapter.notebook.with_suffix(".py")
        if twin.exists():  # written after the .ipynb: jupytext refuses a text twin older than its notebook
            text = jupytext.read(twin, fmt="py:percent")
            text.cells = student_cells(text.cells)
            jupytext.write(text, target / twin.name, fmt="py:percent")
    if (chapters_dir / "jupytext.toml").exists():
        shutil.copy2(chapters_dir / "jupytext.toml", target / "jupytext.toml")
    for name in sorted(figures):
        source = chapters_dir.parent / "figures" / name
        if source.is_file():
            (out_dir / "figures").mkdir(exist_ok=True)
            shutil.copy2(source, out_dir / "figures" / name)
    return written


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BUILD_DIR / "student",
                        help="folder of the student edition (default: _build/student)")
    parser.add_argument("--book-yml", type=Path, default=ROOT / "book.yml")
    parser.add_argument("--chapters-dir", type=Path, default=ROOT / "chapters")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    written = make_student(args.chapters_dir.resolve(), args.out.resolve(), args.book_yml)
    solutions = sum(is_solution(cell) for path in written for cell in nbformat.read(path, as_version=4).cells)
    print(f"student edition: {len(written)} chapters, {solutions} solution cells emptied, "
          f"in {args.out.resolve() / 'chapters'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
