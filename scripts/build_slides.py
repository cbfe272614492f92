"""One reveal.js deck per chapter, from the stored outputs of its .ipynb, served without a network.

    python scripts/build_slides.py [--only-existing] [--book-yml PATH] [--chapters-dir DIR] [--build-dir DIR]

Each chapter becomes a lecture deck (``lecture_notebook``):
- cells play the roles their tags give them (CONTRIBUTING, "Cell roles"): exercise ``solution`` cells are
  left out, ``plumbing`` cells show their output without their code, ``notes`` cells become speaker notes,
  sections whose heading is tagged ``reading`` are left out (and when any heading is tagged ``lecture``, only
  those sections are kept);
- ``{glue:text}`key``` references take the value the notebook glued;
- every heading starts a slide (``#``/``##``) or a sub-slide (``###`` and below); a section that would not
  fit 1280 x 720 continues on sub-slides, cut between cells and between paragraphs of a long text cell
  (heights are estimated from line counts; tests/test_browser.py measures the real ones); a code cell of
  more than 20 lines, or one whose code and output do not fit together, shows only its output;
- every section has speaker notes: its ``notes`` cells, else its first paragraph;
- widget views are dropped (each chapter follows them with their static figure).
Writes ``_build/slides/NN_slug.slides.html`` next to local copies of reveal.js and MathJax, and
mirrors the decks into ``_build/html/slides/`` when the book has been built, so the book can link them.
"""

from __future__ import annotations

import argparse
import copy
import html
import math
import re
import shutil
import sys
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_assets import REVEAL_THEME, copy_mathjax, copy_reveal
from site_chapters import (
    BUILD_DIR,
    LECTURE,
    NOTES,
    PLUMBING,
    READING,
    ROOT,
    Chapter,
    cell_tags,
    is_solution,
    listed_chapters,
    load_book,
)

TEMPLATES_DIR = ROOT / "book" / "slides_templates"
REVEAL_DIR = "reveal.js"
MATHJAX_DIR = "mathjax"


SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720
# Heights in CSS pixels of the 1280 x 720 slide, matching the template's styles (book/slides_templates).
SLIDE_BUDGET = 640           # of the 720: the slide's padding and a margin for the estimate's errors
TEXT_LINE, TEXT_CHARS = 28, 112
CODE_LINE, CODE_CHARS = 19, 118
MAX_CODE_LINES = 20
TABLE_LINE, TABLE_CHARS = 24, 120
IMAGE_MAX_HEIGHT, IMAGE_MAX_WIDTH = 440, 1180
HEADING = {1: 62, 2: 50, 3: 42}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
GLUE_PREFIX = "application/papermill.record/"
GLUE_ROLE = re.compile(r"\{glue(?::(text|md))?\}`([^`]+)`")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)")
SVG_SIZE = re.compile(r'<svg[^>]*?\bwidth="([\d.]+)pt"[^>]*?\bheight="([\d.]+)pt"', re.S)


def _exporter() -> SlidesExporter:
    return SlidesExporter(
        template_name="k3lite_reveal",
        extra_template_basedirs=[str(TEMPLATES_DIR)],
        reveal_url_prefix=REVEAL_DIR,
        reveal_theme=REVEAL_THEME,
        reveal_transition="none",
        reveal_number="c/t",
        reveal_width=str(SLIDE_WIDTH),
        reveal_height=str(SLIDE_HEIGHT),
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )


# ----- glue: the values a notebook stored with myst_nb.glue, put into its markdown -----

def glued_values(notebook) -> dict[str, dict]:
    """``{key: mime bundle}`` of every value the notebook glued (outputs with ``scrapbook`` metadata)."""
    values = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            scrapbook = output.get("metadata", {}).get("scrapbook")
            if scrapbook:
                prefix = len(scrapbook.get("mime_prefix", ""))
                values[scrapbook["name"]] = {mime[prefix:]: data for mime, data in output.get("data", {}).items()}
    return values


def substitute_glue(text: str, values: dict[str, dict], where: str = "markdown") -> str:
    """Replace each ``{glue:text}`key[:format]``` (or ``{glue}``, ``{glue:md}``) by the glued value."""
    from myst_nb.core.variables import format_plain_text

    def value(match: re.Match) -> str:
        role, reference = match.group(1), match.group(2)
        key, _, spec = reference.partition(":")
        if key not in values:
            raise ValueError(f"{where}: glue key {key!r} is not glued by any cell (glued: {sorted(values)})")
        bundle = values[key]
        if role == "md" and "text/markdown" in bundle:
            return bundle["text/markdown"]
        if "text/plain" not in bundle:
            raise ValueError(f"{where}: glue key {key!r} has no text/plain value")
        return format_plain_text(bundle["text/plain"], spec)

    return GLUE_ROLE.sub(value, text)


# ----- estimated heights -----

def _wrapped_lines(text: str, chars: int) -> int:
    return sum(max(1, math.ceil(len(line) / chars)) for line in text.splitlines() or [""])


def markdown_height(source: str) -> int:
    height = 0
    for block in markdown_blocks(source):
        first = block.lstrip()
        level = len(first) - len(first.lstrip("#")) if first.startswith("#") else 0
        if level:
            height += HEADING.get(level, 40) * _wrapped_lines(block, 60)
        elif first.startswith("$$") or first.startswith("\\begin"):
            height += 30 + 34 * max(1, block.count("\\\\") + 1) + 12 * block.count("\\frac")
        elif first.startswith("```"):
            height += 24 + CODE_LINE * (len(block.splitlines()) - 2)
        elif first.startswith("|"):
            height += 16 + sum(table_row_height(row) for row in block.splitlines()[1:])
        elif MARKDOWN_IMAGE.match(first):
            height += sum(markdown_image_height(path) for path in MARKDOWN_IMAGE.findall(block))
        else:
            height += 16 + TEXT_LINE * _wrapped_lines(block, TEXT_CHARS) + 8 * block.count("$$")
    return height


def table_row_height(row: str) -> int:
    """A markdown table row: its longest cell wraps in a column of roughly a fifth of the slide."""
    cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
    if all(set(cell) <= set("-: ") for cell in cells):
        return 0
    widest = max(len(cell) for cell in cells)
    return 14 + TABLE_LINE * max(1, math.ceil(widest / max(12, TABLE_CHARS // max(1, len(cells)))))


def split_markdown_table(text: str, budget: int) -> list[str]:
    """A markdown text holding one long table, cut into tables that each fit ``budget`` (header repeated)."""
    lines = text.strip().splitlines()
    if len(lines) < 3 or not lines[0].lstrip().startswith("|") or not all(
            line.lstrip().startswith("|") for line in lines):
        return [text]
    header, rows = lines[:2], lines[2:]
    parts, current, used = [], [], markdown_height("\n".join(header))
    for row in rows:
        height = table_row_height(row)
        if current and used + height > budget:
            parts.append("\n".join(header + current))
            current, used = [], markdown_height("\n".join(header))
        current.append(row)
        used += height
    parts.append("\n".join(header + current))
    return parts


def markdown_image_height(path: str) -> int:
    """A figure the prose shows (``![...](../figures/NAME.svg)``): its drawn height, capped as in the template."""
    figure = ROOT / "figures" / Path(path).name
    if figure.suffix == ".svg" and figure.exists():
        size = SVG_SIZE.search(figure.read_text(encoding="utf-8")[:2000])
        if size:
            width, height = (float(value) * 4 / 3 for value in size.groups())  # pt -> CSS px
            return int(min(height * min(1.0, IMAGE_MAX_WIDTH / width), IMAGE_MAX_HEIGHT)) + 16
    return IMAGE_MAX_HEIGHT + 16


def _image_height(output) -> int:
    import base64
    import struct

    data = output["data"]["image/png"]
    raw = base64.b64decode(data if isinstance(data, str) else "".join(data))
    width, height = struct.unpack(">II", raw[16:24])
    shown = height * min(1.0, IMAGE_MAX_WIDTH / width)
    return int(min(shown, IMAGE_MAX_HEIGHT)) + 16


def output_height(output) -> int:
    if output.get("output_type") == "stream":
        return 14 + CODE_LINE * _wrapped_lines(output.get("text", "").rstrip("\n"), CODE_CHARS)
    if output.get("output_type") == "error":
        return 14 + CODE_LINE * 6
    data = output.get("data", {})
    if "image/png" in data:
        return _image_height(output)
    if "image/svg+xml" in data:
        return IMAGE_MAX_HEIGHT
    if "text/markdown" in data:
        return markdown_height(data["text/markdown"])
    if "text/html" in data:
        return 20 + 34 * max(1, data["text/html"].count("<tr"))
    if "text/latex" in data:
        return 70
    if "text/plain" in data:
        return 14 + CODE_LINE * _wrapped_lines(data["text/plain"].rstrip("\n"), CODE_CHARS)
    return 0


def cell_height(cell) -> int:
    if cell.cell_type == "markdown":
        return markdown_height(cell.source)
    if cell.metadata.get("transient", {}).get("remove_source"):
        source = 0
    else:
        source = 28 + CODE_LINE * _wrapped_lines(cell.source, CODE_CHARS)
    return source + sum(output_height(output) for output in cell.get("outputs", []))


# ----- cutting text and cells to slide size -----

def markdown_blocks(source: str) -> list[str]:
    """The paragraphs of a markdown text, each heading on its own, never cutting a $$ or ``` block."""
    blocks, current, fenced = [], [], None
    for line in source.splitlines():
        stripped = line.strip()
        if fenced is None and stripped.startswith("#"):
            if current:
                blocks.append("\n".join(current))
            blocks.append(line)
            current = []
            continue
        if fenced is None and not stripped:
            if current:
                blocks.append("\n".join(current))
            current = []
            continue
        current.append(line)
        for marker in ("$$", "```"):
            if stripped.count(marker) % 2 == 1:
                fenced = None if fenced == marker else (marker if fenced is None else fenced)
    if current:
        blocks.append("\n".join(current))
    return [block for block in blocks if block.strip()]


def heading_level(cell) -> int:
    if cell.cell_type != "markdown":
        return 0
    first = cell.source.lstrip()
    return len(first) - len(first.lstrip("#")) if first.startswith("#") else 0


def _lines_that_fit(lines: list[str], room: int) -> int:
    used, kept = 14 + CODE_LINE, 0  # the box, and the "... more lines" line
    for line in lines:
        used += CODE_LINE * max(1, math.ceil(len(line) / CODE_CHARS))
        if used > room:
            break
        kept += 1
    return max(2, kept)


def _shorten_output(output, room: int) -> None:
    """Cut a text output (a stream, or markdown holding one code block) to ``room`` pixels."""
    if output.get("output_type") == "stream":
        lines = output.get("text", "").rstrip("\n").splitlines()
        keep = _lines_that_fit(lines, room)
        if keep < len(lines):
            output["text"] = "\n".join(lines[:keep] + [f"... ({len(lines) - keep} more lines in the notebook)"]) + "\n"
        return
    markdown = output.get("data", {}).get("text/markdown")
    if markdown and markdown.strip().startswith("```") and markdown.strip().endswith("```"):
        lines = markdown.strip().splitlines()
        fence, body = lines[0], lines[1:-1]
        keep = _lines_that_fit(body, room - 24)
        if keep < len(body):
            shortened = [fence, *body[:keep], f"# ... ({len(body) - keep} more lines in the notebook)", "```"]
            output["data"]["text/markdown"] = "\n".join(shortened)


def _merge_streams(cell) -> None:
    """Consecutive stream outputs of one name as one (as the site shows them)."""
    merged = []
    for output in cell.get("outputs", []):
        if (merged and output.get("output_type") == "stream" and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == output.get("name")):
            merged[-1]["text"] += output.get("text", "")
        else:
            merged.append(output)
    cell.outputs = merged


def fit_code_cell(cell) -> list:
    """The cell as slides can show it: its code unless it is long, its outputs shrunk to one slide."""
    cell.source = "\n".join(line for line in cell.source.splitlines() if not line.startswith("# NBVAL_"))
    lines = len(cell.source.splitlines())
    outputs_height = sum(output_height(output) for output in cell.outputs)
    cells = [cell]
    if lines > MAX_CODE_LINES or (cell.outputs and cell_height(cell) > SLIDE_BUDGET):
        cell.metadata["transient"] = {"remove_source": True}
        if outputs_height == 0:
            return []
        caption = nbformat.v4.new_markdown_cell(f"*The code of this step ({lines} lines) is in the notebook.*")
        caption.metadata["k3lite_caption"] = True
        cells.insert(0, caption)
    room = SLIDE_BUDGET - 40
    # Text outputs give way, tallest first, until the cell's outputs fit one slide.
    for output in sorted(cell.outputs, key=output_height, reverse=True):
        excess = sum(output_height(each) for each in cell.outputs) - room
        if excess <= 0:
            break
        if output.get("output_type") == "stream" or "text/markdown" in output.get("data", {}):
            _shorten_output(output, max(4 * CODE_LINE, output_height(output) - excess))
    return cells + _split_long_tables(cell, room)


def _split_long_tables(cell, room: int) -> list:
    """Cut a markdown table output taller than a slide into tables on cells of their own (no code)."""
    extra = []
    for position, output in enumerate(list(cell.outputs)):
        markdown = output.get("data", {}).get("text/markdown")
        if markdown is None or output_height(output) <= room:
            continue
        parts = split_markdown_table(markdown, room)
        if len(parts) == 1:
            continue
        output["data"]["text/markdown"] = parts[0]
        following = cell.outputs[position + 1:]
        cell.outputs = cell.outputs[:position + 1]
        for part in parts[1:]:
            continued = nbformat.v4.new_code_cell("", outputs=[
                nbformat.v4.new_output("display_data", data={"text/markdown": part, "text/plain": part})])
            continued.metadata["transient"] = {"remove_source": True}
            extra.append(continued)
        extra[-1].outputs.extend(following)
        break
    return extra


def _drop_widget_views(cell) -> bool:
    """Remove widget outputs; True when the cell showed a widget and nothing else (then it goes)."""
    outputs = cell.get("outputs", [])
    kept = [output for output in outputs if WIDGET_VIEW not in output.get("data", {})]
    cell.outputs = kept
    return len(kept) < len(outputs) and not kept


def _drop_hidden_glue(cell) -> None:
    cell.outputs = [output for output in cell.get("outputs", [])
                    if not (output.get("metadata", {}).get("scrapbook", {}).get("mime_prefix")
                            or any(mime.startswith(GLUE_PREFIX) for mime in output.get("data", {})))]


# ----- sections, roles and notes -----

def _sections(cells) -> list[list]:
    """Cells grouped by heading: each group starts at a heading cell (the first may not)."""
    sections = []
    for cell in cells:
        if heading_level(cell) or not sections:
            sections.append([])
        sections[-1].append(cell)
    return sections


def _lecture_sections(sections) -> list[list]:
    """Sections in the lecture: not tagged ``reading``; if any heading is tagged ``lecture``, only those
    (and the title section before the first heading of level 2)."""
    selective = any(LECTURE in cell_tags(section[0]) for section in sections)
    kept, skipping_below = [], None
    for index, section in enumerate(sections):
        level, tags = heading_level(section[0]), cell_tags(section[0])
        if skipping_below is not None and level and level <= skipping_below:
            skipping_below = None
        if skipping_below is not None:
            continue
        is_title = index == 0 or level == 1
        if READING in tags or (selective and not is_title and LECTURE not in tags and level):
            skipping_below = level or 99
            continue
        kept.append(section)
    return kept


def _first_paragraph(section, enough: int = 160) -> str:
    """The section's opening prose: its first text paragraphs, until a sentence is complete and there
    is ``enough`` to say (a paragraph that leads into a formula with ":" takes the next one too)."""
    taken = []
    for cell in section:
        if cell.cell_type != "markdown" or cell.metadata.get("k3lite_caption"):
            continue
        for block in markdown_blocks(cell.source):
            text = block.strip()
            if text and not text.startswith(("#", "$$", "```", "|", "\\begin", "<", "!")):
                taken.append(text)
                joined = " ".join(taken)
                if len(joined) >= enough and not joined.endswith(":"):
                    return joined
    return " ".join(taken)


def section_notes(section) -> list:
    """The speaker notes of a section: its ``notes`` cells, else one made from its first paragraph."""
    notes = [cell for cell in section if NOTES in cell_tags(cell)]
    if notes:
        return notes
    heading = section[0].source.strip().splitlines()[0].lstrip("#").strip() if heading_level(section[0]) else ""
    paragraph = (_first_paragraph(section)
                 or "Run the cells of this section in the notebook and talk through the output.")
    lead = f"**{heading}.** " if heading else ""
    return [nbformat.v4.new_markdown_cell(lead + paragraph)]


def _mark(cell, slide_type: str):
    cell.metadata.setdefault("slideshow", {})["slide_type"] = slide_type
    return cell


def lay_out_section(section, *, first: bool) -> list:
    """The section's cells with slide types: its heading opens a slide, overflow opens sub-slides."""
    level = heading_level(section[0])
    notes = section_notes(section)
    body = [cell for cell in section if NOTES not in cell_tags(cell)]
    pieces = []
    for cell in body:
        if cell.cell_type == "markdown" and cell_height(cell) > SLIDE_BUDGET // 3:
            for number, block in enumerate(markdown_blocks(cell.source)):
                metadata = copy.deepcopy(cell.metadata) if number == 0 else {}
                pieces.append(nbformat.v4.new_markdown_cell(block, metadata=metadata))
        elif cell.cell_type == "code":
            pieces.extend(fit_code_cell(cell))
        else:
            pieces.append(cell)
    laid_out, used = [], 0
    for position, cell in enumerate(pieces):
        height = cell_height(cell)
        if cell.metadata.get("k3lite_caption") and position + 1 < len(pieces):
            height += cell_height(pieces[position + 1])  # a caption goes with the output it introduces
        wanted = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        if position == 0:
            kind = "slide" if (first or level in (1, 2) or not level) else "subslide"
            used = 0
        elif heading_level(cell) or wanted in ("slide", "subslide") or used + height > SLIDE_BUDGET:
            kind = "subslide"
            used = 0
        else:
            kind = "fragment" if wanted == "fragment" else "-"
        used += height
        laid_out.append(_mark(cell, kind))
        if position == 0:
            laid_out.extend(_mark(note, "notes") for note in notes)
    return laid_out


def lecture_notebook(notebook):
    """A copy of the chapter's notebook laid out as a lecture deck (see the module's docstring)."""
    notebook = copy.deepcopy(notebook)
    values = glued_values(notebook)
    cells = []
    for index, cell in enumerate(notebook.cells):
        tags = cell_tags(cell)
        if (cell.metadata.get("slideshow", {}).get("slide_type") == "skip" or is_solution(cell)
                or "remove-cell" in tags or (PLUMBING in tags and not cell.get("outputs"))):
            continue
        if cell.cell_type == "markdown":
            # Decks sit one level above figures/, next to their own copy of it (build_slides).
            cell.source = substitute_glue(cell.source, values, where=f"cell {index}").replace("../figures/", "figures/")
            if "{glue" in cell.source:
                raise ValueError(f"cell {index}: a glue reference the decks cannot show "
                                 f"(only {{glue}}, {{glue:text}} and {{glue:md}} roles): {cell.source[:120]!r}")
        if cell.cell_type == "code":
            _drop_hidden_glue(cell)
            _merge_streams(cell)
            if _drop_widget_views(cell):
                continue
            if "remove-output" in tags:
                cell.outputs = []
            if "remove-input" in tags or PLUMBING in tags:  # a plumbing cell's figure or table stays, its code goes
                cell.metadata["transient"] = {"remove_source": True}
        if cell.cell_type == "raw":
            continue
        cells.append(cell)
    sections = _lecture_sections(_sections(cells))
    notebook.cells = [cell for number, section in enumerate(sections)
                      for cell in lay_out_section(section, first=number == 0)]
    return notebook


def render_deck(exporter: SlidesExporter, chapter: Chapter) -> str:
    notebook = lecture_notebook(nbformat.read(chapter.notebook, as_version=4))
    notebook.metadata["title"] = chapter.title
    resources = {"k3lite": {"mathjax_url": f"{MATHJAX_DIR}/tex-chtml.js"}}
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    return body


INDEX_STYLE = """
body { font-family: "Source Sans Pro", Helvetica, Arial, sans-serif; margin: 0; background: #FAFAF7; color: #1A1A1A; }
main { max-width: 920px; margin: 0 auto; padding: 48px 24px; }
h1 { font-size: 2.2rem; margin: 0 0 0.3rem; }
p.lead { color: #555; margin: 0 0 2rem; }
ol.decks { list-style: none; padding: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr));
  gap: 14px; }
ol.decks li a { display: block; height: 100%; box-sizing: border-box; padding: 16px 18px; border-radius: 8px;
  background: #fff; border: 1px solid #ddd; border-left: 5px solid #2a6fdb; color: inherit; text-decoration: none; }
ol.decks li a:hover { border-color: #2a6fdb; box-shadow: 0 2px 8px rgba(0,0,0,0.08); }
ol.decks .number { display: block; font-size: 0.8rem; letter-spacing: 0.08em; color: #2a6fdb; font-weight: 700; }
ol.decks .title { display: block; font-size: 1.1rem; font-weight: 600; margin-top: 4px; }
footer { margin-top: 2rem; font-size: 0.85rem; color: #666; }
"""


def _index_page(title: str, chapters: list[Chapter]) -> str:
    items = "\n".join(
        f'  <li><a href="{c.slides_name}"><span class="number">{html.escape(c.stem.split("_", 1)[0])}</span>'
        f'<span class="title">{html.escape(c.title)}</span></a></li>' for c in chapters)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}: lecture slides</title>\n<style>{INDEX_STYLE}</style></head>\n<body><main>\n"
            f"<h1>{html.escape(title)}</h1>\n"
            f'<p class="lead">Lecture slides, one deck per chapter. Press <kbd>S</kbd> in a deck for the speaker '
            f"notes, <kbd>Esc</kbd> for the overview; arrows move between sections and their continuations.</p>\n"
            f'<ol class="decks">\n{items}\n</ol>\n'
            f'<footer>The book has every section in full, with the code the slides leave out.</footer>\n'
            f"</main></body>\n</html>\n")


def build_slides(chapters: list[Chapter], build_dir: Path, title: str) -> Path:
    """Write every deck into ``build_dir/slides``; mirror them into the site if it exists."""
    slides_dir = build_dir / "slides"
    slides_dir.mkdir(parents=True, exist_ok=True)
    copy_reveal(slides_dir / REVEAL_DIR)
    copy_mathjax(slides_dir / MATHJAX_DIR)
    figures = ROOT / "figures"
    if figures.is_dir():  # chapters show committed figures and diagrams as ../figures/NAME
        (slides_dir / "figures").mkdir(exist_ok=True)
        for figure in [*figures.glob("*.svg"), *figures.glob("*.png")]:
            shutil.copy2(figure, slides_dir / "figures" / figure.name)
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
