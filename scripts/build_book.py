"""Build the course as a static site in _build/html, offline, from book.yml.

    python scripts/build_book.py [--execute 1|0] [--only-existing] [--no-slides] [--no-strict]
                                 [--book-yml PATH] [--chapters-dir DIR] [--build-dir DIR]

1. Generates the Sphinx source tree in _build/src from book.yml: a front page with the chapter
   toctree in book.yml order, the "run the course locally" page, and each chapter's .ipynb with a
   banner (notebook download, slides, CPU budget) put in front of it.
2. Runs Sphinx + myst-nb + sphinx-book-theme (configuration in book/conf.py). With --execute 1 the
   chapters are executed through myst-nb's jupyter-cache (_build/jupyter_cache), so an unchanged
   chapter is not run again; with --execute 0 the outputs stored in the notebooks are rendered.
3. Builds the reveal.js decks (scripts/build_slides.py) into _build/slides and the site's slides/.
4. Checks that no page loads a script, style sheet, font or image from outside the site.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_slides import build_slides  # noqa: E402
from fetch_assets import copy_mathjax  # noqa: E402
from site_chapters import BUILD_DIR, ROOT, Chapter, listed_chapters, load_book  # noqa: E402

CONF_DIR = ROOT / "book"
NOTEBOOK_COPIES = "_notebooks"  # pristine copies offered for download; not parsed as pages
DEFAULT_KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it, so Sphinx sees unchanged pages as unchanged."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def front_page(book: dict, chapters: list[Chapter], with_slides: bool) -> str:
    rows = []
    for chapter in chapters:
        slides = f'<a href="slides/{chapter.slides_name}">slides</a>' if with_slides else ""
        rows.append(f"| {{doc}}`{chapter.title} <chapters/{chapter.stem}>` | {chapter.budget_s} s | {slides} |")
    toctree = "\n".join(f"{chapter.title} <chapters/{chapter.stem}>" for chapter in chapters)
    authors = ", ".join(book["authors"])
    return f"""# {book['title']}

**{book.get('subtitle', '')}**

*{authors}*

The course starts from GPT-2 and arrives at a Kimi K3 style hybrid model, one architectural step per
chapter; each step begins with an experiment that shows the previous model failing. Every chapter is a
notebook: the code on these pages produced the numbers and pictures under it, on an ordinary CPU, and
the download link at the top of each chapter gives you that notebook to run and change.

| Chapter | CPU budget (2 cores) | Slides |
| --- | --- | --- |
{chr(10).join(rows)}

Start with {{doc}}`run_locally` to set up the notebooks on your machine.

```{{toctree}}
:hidden:
:caption: Start here

run_locally
```

```{{toctree}}
:hidden:
:caption: Chapters

{toctree}
```
"""


def chapter_banner(chapter: Chapter, with_slides: bool) -> str:
    parts = [f"{{download}}`Download the notebook <../{NOTEBOOK_COPIES}/{chapter.stem}.ipynb>`"]
    if with_slides:
        parts.append(f'<a href="../slides/{chapter.slides_name}">Lecture slides</a>')
    if chapter.budget_s:
        parts.append(f"Runs in under {chapter.budget_s} s on a 2-core CPU")
    return ":::{container} k3lite-chapter-links\n" + " · ".join(parts) + "\n:::"


def page_notebook(chapter: Chapter, with_slides: bool) -> str:
    """The chapter's notebook as the site shows it: the banner first, outputs as stored."""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    notebook.metadata.setdefault("kernelspec", DEFAULT_KERNELSPEC)
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell(chapter_banner(chapter, with_slides)))
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"k3lite-{index}"  # stable ids keep the generated file byte-identical across builds
    return nbformat.writes(notebook) + "\n"


def generate_sources(book: dict, chapters: list[Chapter], src_dir: Path, with_slides: bool) -> None:
    write_if_changed(src_dir / "index.md", front_page(book, chapters, with_slides))
    write_if_changed(src_dir / "run_locally.md", (CONF_DIR / "run_locally.md").read_text(encoding="utf-8"))
    wanted = {f"{chapter.stem}.ipynb" for chapter in chapters}
    for stale_dir in (src_dir / "chapters", src_dir / NOTEBOOK_COPIES):
        if stale_dir.is_dir():
            for stale in stale_dir.glob("*.ipynb"):
                if stale.name not in wanted:
                    stale.unlink()
    for chapter in chapters:
        write_if_changed(src_dir / "chapters" / f"{chapter.stem}.ipynb", page_notebook(chapter, with_slides))
        write_if_changed(src_dir / NOTEBOOK_COPIES / f"{chapter.stem}.ipynb",
                         chapter.notebook.read_text(encoding="utf-8"))
    figures = ROOT / "figures"
    if figures.is_dir():  # chapters may show committed figures with ../figures/NAME.png
        shutil.copytree(figures, src_dir / "figures", dirs_exist_ok=True)


def run_sphinx(src_dir: Path, build_dir: Path, book_yml: Path, *, execute: bool, strict: bool) -> None:
    env = dict(os.environ, K3LITE_BUILD_DIR=str(build_dir), K3LITE_BOOK_YML=str(book_yml.resolve()),
               PYTHONHASHSEED="0")
    env.setdefault("K3LITE_PROFILE", "small")  # the book shows the CPU profile, like the stored outputs
    # The chapters' kernel is the "python3" kernel; make sure it is this interpreter's.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    strict_flags = ["-W", "--keep-going"] if strict else []
    # -a: write every page even if only its neighbours changed (a new chapter changes the sidebar and
    # the previous/next links of the others); sources are re-read, and chapters re-run, only if changed.
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-a", "-c", str(CONF_DIR), *strict_flags,
               "-d", str(build_dir / "doctrees"), "-q",
               "-D", f"nb_execution_mode={'cache' if execute else 'off'}",
               str(src_dir), str(build_dir / "html")]
    if subprocess.run(command, env=env).returncode != 0:
        raise SystemExit("sphinx failed (warnings count as errors; --no-strict lets them pass)")


EXTERNAL_ASSET = re.compile(
    r"""<(?:script|link|img|source|iframe)\b[^>]*?\b(?:src|href)\s*=\s*["']\s*(?:https?:)?//""", re.I)
EXTERNAL_CSS_URL = re.compile(r"""(?:url\(\s*["']?|@import\s+["'])\s*(?:https?:)?//""", re.I)


def external_assets(site_dir: Path) -> list[str]:
    """Pages or style sheets of the site that load something from another host."""
    offenders = []
    for page in site_dir.rglob("*.html"):
        for match in EXTERNAL_ASSET.finditer(page.read_text(encoding="utf-8", errors="replace")):
            offenders.append(f"{page.relative_to(site_dir)}: {match.group(0)[:120]}")
    for sheet in site_dir.rglob("*.css"):
        if EXTERNAL_CSS_URL.search(sheet.read_text(encoding="utf-8", errors="replace")):
            offenders.append(f"{sheet.relative_to(site_dir)}: loads a url() from another host")
    return offenders


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", type=int, choices=(0, 1), default=1,
                        help="1: execute the chapters (cached); 0: render the stored outputs")
    parser.add_argument("--only-existing", action="store_true",
                        help="leave out chapters of book.yml that have no .ipynb yet")
    parser.add_argument("--no-slides", action="store_true", help="do not build or link the slides")
    parser.add_argument("--no-strict", action="store_true", help="do not turn Sphinx warnings into errors")
    parser.add_argument("--book-yml", type=Path, default=ROOT / "book.yml")
    parser.add_argument("--chapters-dir", type=Path, default=ROOT / "chapters")
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    build_dir = args.build_dir.resolve()
    book = load_book(args.book_yml)
    chapters = listed_chapters(book, args.chapters_dir.resolve(), only_existing=args.only_existing)
    with_slides = not args.no_slides
    copy_mathjax(build_dir / "site_static" / "mathjax")
    src_dir = build_dir / "src"
    generate_sources(book, chapters, src_dir, with_slides)
    run_sphinx(src_dir, build_dir, args.book_yml, execute=bool(args.execute), strict=not args.no_strict)
    if with_slides:
        build_slides(chapters, build_dir, book["title"])
    offenders = external_assets(build_dir / "html")
    if offenders:
        print("pages that load assets from another host:\n  " + "\n  ".join(offenders), file=sys.stderr)
        return 1
    print(f"book: {build_dir / 'html' / 'index.html'} ({len(chapters)} chapters)")
    print(json.dumps({"chapters": [c.stem for c in chapters], "executed": bool(args.execute)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
