"""One reveal.js deck per chapter, from the stored outputs of its .ipynb, served without a network.

    python scripts/build_slides.py [--only-existing] [--book-yml PATH] [--chapters-dir DIR] [--build-dir DIR]

Slide boundaries come from the cells' ``slideshow.slide_type`` metadata (the py:percent headers).
Writes ``_build/slides/NN_slug.slides.html`` next to local copies of reveal.js and MathJax, and
mirrors the decks into ``_build/html/slides/`` when the book has been built, so the book can link them.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_assets import REVEAL_THEME, copy_mathjax, copy_reveal  # noqa: E402
from site_chapters import BUILD_DIR, ROOT, Chapter, listed_chapters, load_book  # noqa: E402

TEMPLATES_DIR = ROOT / "book" / "slides_templates"
REVEAL_DIR = "reveal.js"
MATHJAX_DIR = "mathjax"


def _exporter() -> SlidesExporter:
    return SlidesExporter(
        template_name="k3lite_reveal",
        extra_template_basedirs=[str(TEMPLATES_DIR)],
        reveal_url_prefix=REVEAL_DIR,
        reveal_theme=REVEAL_THEME,
        reveal_transition="none",
        reveal_number="c/t",
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


def render_deck(exporter: SlidesExporter, chapter: Chapter) -> str:
    notebook = nbformat.read(chapter.notebook, as_version=4)
    notebook.metadata["title"] = chapter.title
    resources = {"k3lite": {"mathjax_url": f"{MATHJAX_DIR}/tex-chtml.js"}}
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    return body


def _index_page(title: str, chapters: list[Chapter]) -> str:
    items = "\n".join(f'  <li><a href="{c.slides_name}">{html.escape(c.title)}</a></li>' for c in chapters)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f"<title>{html.escape(title)}: slides</title></head>\n<body>\n"
            f"<h1>{html.escape(title)}: slides</h1>\n<ol>\n{items}\n</ol>\n</body>\n</html>\n")


def build_slides(chapters: list[Chapter], build_dir: Path, title: str) -> Path:
    """Write every deck into ``build_dir/slides``; mirror them into the site if it exists."""
    slides_dir = build_dir / "slides"
    slides_dir.mkdir(parents=True, exist_ok=True)
    copy_reveal(slides_dir / REVEAL_DIR)
    copy_mathjax(slides_dir / MATHJAX_DIR)
    exporter = _exporter()
    for chapter in chapters:
        (slides_dir / chapter.slides_name).write_text(render_deck(exporter, chapter), encoding="utf-8")
        print(f"slides: {slides_dir / chapter.slides_name}")
    (slides_dir / "index.html").write_text(_index_page(title, chapters), encoding="utf-8")
    site_dir = build_dir / "html"
    if site_dir.is_dir():
        shutil.rmtree(site_dir / "slides", ignore_errors=True)
        shutil.copytree(slides_dir, site_dir / "slides")
    return slides_dir


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only-existing", action="store_true",
                        help="leave out chapters of book.yml that have no .ipynb yet")
    parser.add_argument("--book-yml", type=Path, default=ROOT / "book.yml")
    parser.add_argument("--chapters-dir", type=Path, default=ROOT / "chapters")
    parser.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    book = load_book(args.book_yml)
    chapters = listed_chapters(book, args.chapters_dir, only_existing=args.only_existing)
    build_slides(chapters, args.build_dir.resolve(), book["title"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
