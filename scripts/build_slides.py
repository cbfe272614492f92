"""Reveal.js lecture decks, one or more per chapter, from the stored outputs of its .ipynb, served offline.

    python scripts/build_slides.py [--only-existing] [--book-yml PATH] [--chapters-dir DIR] [--build-dir DIR]

Each chapter becomes a lecture for a room at 1280 x 720 (``lecture_decks``):
- cells play the roles their tags give them (CONTRIBUTING, "Cell roles"): exercise ``solution`` cells are
  left out of the slides (their code and output become the expected answer in the speaker notes),
  ``plumbing`` cells show their output without their code, ``notes`` cells become speaker notes, sections
  whose heading is tagged ``reading`` are left out (and when any heading is tagged ``lecture``, only those
  sections are kept); a "Check yourself" section closes the last deck as a quiz, its folded answers in the notes;
- ``{glue:text}`key``` references take the value the notebook glued;
- every heading starts a slide (``#``/``##``) or a sub-slide (``###`` and below); a section that would not
  fit continues on sub-slides, cut between cells and between paragraphs (heights are estimated from line
  counts; tests/test_browser.py measures the real ones);
- code is shown at 20 px: a cell too long for one slide continues on a sub-slide, and one too long for two
  shows its key lines with the rest elided (``# ⋯``); a long text output keeps its first lines;
- figures are drawn at the slide's width (capped in height so that they fit with their heading);
- a chapter longer than ``MAX_SLIDES`` slides is cut at its ``##`` sections into parts of about
  ``PART_TARGET`` slides, each a deck of its own (``NN_slug.slides.html``, ``NN_slug.part2.slides.html``, ...)
  with links between them;
- every slide has speaker notes: a timing cue for a ``LECTURE_MINUTES`` lecture, the section's ``notes``
  cells on its first slide, what to point at on the others (a definition, a printed result, a figure), and
  the expected answer where the slide asks the room something (an exercise, a prediction, a question);
  math in the notes is written out in Unicode, since the speaker view does not typeset it;
- widget views are dropped (each chapter follows them with their static figure).
Writes the decks into ``_build/slides`` next to local copies of reveal.js and MathJax, with an index of
every deck, and mirrors them into ``_build/html/slides/`` when the book has been built, so the book can link them.
"""

from __future__ import annotations

import argparse
import copy
import html
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
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
# Heights in CSS pixels of the 1280 x 720 slide, matching DECK_STYLE below and the template's styles
# (book/slides_templates).
SLIDE_BUDGET = 640           # of the 720: the slide's padding and a margin for the estimate's errors
TEXT_LINE, TEXT_CHARS = 28, 112
CODE_FONT_PX = 20            # code stays readable from the back of a room
CODE_LINE, CODE_CHARS = 25, 92
MAX_CODE_LINES = 18          # of code on one slide, with its heading or a line of prose
SPLIT_CODE_LINES = 26        # code up to this long continues on a second slide; longer shows its key lines
MAX_TABLE_SLIDES = 2         # a longer table output shows its first rows
TABLE_LINE, TABLE_CHARS = 24, 120
CONTENT_WIDTH = 1180         # what a figure is drawn at: the slide's width less its margins
IMAGE_MAX_HEIGHT, IMAGE_MAX_WIDTH = 500, CONTENT_WIDTH
CONTINUED_HEIGHT = 30        # the "(continued)" line atop a sub-slide
HEADING = {1: 62, 2: 50, 3: 42}
MAX_SLIDES = 40              # per deck; longer chapters are cut into parts
PART_TARGET = 34             # slides a part aims at: about a 50-minute lecture
LECTURE_MINUTES = 50
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
GLUE_PREFIX = "application/papermill.record/"
GLUE_ROLE = re.compile(r"\{glue(?::(text|md))?\}`([^`]+)`")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)[^)]*\)")
SVG_SIZE = re.compile(r'<svg[^>]*?\bwidth="([\d.]+)pt"[^>]*?\bheight="([\d.]+)pt"', re.S)
SVG_VIEWBOX = re.compile(r'<svg[^>]*?\bviewBox="[\d.\-]+\s+[\d.\-]+\s+([\d.]+)\s+([\d.]+)"', re.S)
DETAILS = re.compile(r"<details>\s*(?:<summary>.*?</summary>)?(.*?)</details>", re.S)
ELIDED = "# ⋯"
# Words by which a slide or its notes ask the room something whose answer the chapter computes next.
ASKS_THE_ROOM = re.compile(r"\bpredict|\bguess\b|\bask the room\b|\bbefore (?:you )?run|\bwhat do you expect", re.I)
CHECK_YOURSELF = re.compile(r"^#+\s*check yourself", re.I)
EXERCISE = re.compile(r"^#+\s*(?:\d+\.\s*)?exercises?\b", re.I | re.M)

# The template's sizes for text and tables stay; code, figures and the notes' own elements are set here.
DECK_STYLE = f"""
<style type="text/css">
.reveal pre, .reveal pre code, .reveal .jp-RenderedText pre, .reveal .highlight pre {{
  font-size: {CODE_FONT_PX}px !important;
  line-height: {CODE_LINE / CODE_FONT_PX} !important;
  white-space: pre-wrap !important;
  overflow-wrap: anywhere;
  word-break: normal;
  box-shadow: none;
  width: 100%;
}}
.reveal .jp-OutputArea-output img, .reveal .jp-RenderedMarkdown img {{
  display: block;
  width: 100%;
  max-width: 100%;
  height: auto;
  max-height: {IMAGE_MAX_HEIGHT}px;
  object-fit: contain;
  margin: 0 auto;
}}
.reveal .jp-OutputArea-output svg {{ max-width: 100%; height: auto; max-height: {IMAGE_MAX_HEIGHT}px; }}
.reveal .jp-OutputArea-output, .reveal .jp-RenderedHTMLCommon {{ max-width: 100%; }}
.reveal .k3lite-continued {{ font-size: 16px; color: #777; margin: 0 0 6px; }}
.reveal .k3lite-parts {{ font-size: 18px; color: #555; }}
.reveal .k3lite-parts a {{ color: #2a6fdb; }}
</style>
"""

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
            height += 24 + CODE_LINE * _wrapped_lines("\n".join(block.splitlines()[1:-1]), CODE_CHARS)
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


def _shown_height(width: float, height: float) -> int:
    """A figure drawn at the slide's width, capped in height (DECK_STYLE)."""
    return int(min(height * CONTENT_WIDTH / width, IMAGE_MAX_HEIGHT)) + 16


def markdown_image_height(path: str) -> int:
    """A figure the prose shows (``![...](../figures/NAME.svg)``): its height at the slide's width."""
    figure = ROOT / "figures" / Path(path).name
    if figure.suffix == ".svg" and figure.exists():
        head = figure.read_text(encoding="utf-8")[:2000]
        size = SVG_SIZE.search(head) or SVG_VIEWBOX.search(head)
        if size:
            return _shown_height(*(float(value) for value in size.groups()))
    return IMAGE_MAX_HEIGHT + 16


def _image_height(output) -> int:
    import base64
    import struct

    data = output["data"]["image/png"]
    raw = base64.b64decode(data if isinstance(data, str) else "".join(data))
    width, height = struct.unpack(">II", raw[16:24])
    return _shown_height(width, height)


def output_height(output) -> int:
    if output.get("output_type") == "stream":
        return 14 + CODE_LINE * _wrapped_lines(output.get("text", "").rstrip("\n"), CODE_CHARS)
    if output.get("output_type") == "error":
        return 14 + CODE_LINE * 6
    data = output.get("data", {})
    if "image/png" in data:
        return _image_height(output)
    if "image/svg+xml" in data:
        return IMAGE_MAX_HEIGHT + 16
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


def heading_text(cell) -> str:
    return readable(cell.source.strip().splitlines()[0].lstrip("#").strip()) if heading_level(cell) else ""


def _lines_that_fit(lines: list[str], room: int) -> int:
    used, kept = 14 + CODE_LINE, 0  # the box, and the "more lines" line
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
            output["text"] = "\n".join(lines[:keep] + [f"⋯ ({len(lines) - keep} more lines)"]) + "\n"
        return
    markdown = output.get("data", {}).get("text/markdown")
    if markdown and markdown.strip().startswith("```") and markdown.strip().endswith("```"):
        lines = markdown.strip().splitlines()
        fence, body = lines[0], lines[1:-1]
        keep = _lines_that_fit(body, room - 24)
        if keep < len(body):
            shortened = [fence, *body[:keep], f"{ELIDED} ({len(body) - keep} more lines)", "```"]
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


def _code_height(lines: list[str]) -> int:
    return sum(max(1, math.ceil(len(line) / CODE_CHARS)) for line in lines)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _compact(lines: list[str]) -> list[str]:
    """The code without what a slide can spare: comment-only lines, blank lines inside a block, and the
    body of a docstring (its first line stays)."""
    kept, in_docstring = [], None
    for line in lines:
        stripped = line.strip()
        if in_docstring:
            if in_docstring in stripped:
                in_docstring = None
            continue
        if stripped.startswith(('"""', "'''")):
            quote = stripped[:3]
            if stripped.count(quote) == 1 and len(stripped) >= 3:
                in_docstring = quote
                kept.append(line.rstrip() + f" ⋯{quote}")
                continue
        if stripped.startswith("#"):
            continue
        if not stripped and (not kept or not kept[-1].strip()):
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    return kept


def _split_in_two(lines: list[str]) -> list[list[str]] | None:
    """Two halves that each fit a slide, cut before a top-level statement near the middle if possible."""
    best = None
    for cut in range(1, len(lines)):
        if _code_height(lines[:cut]) > MAX_CODE_LINES or _code_height(lines[cut:]) > MAX_CODE_LINES:
            continue
        line = lines[cut]
        clean = _indent(line) == 0 and line.strip() and not line.lstrip().startswith(
            (")", "]", "}", "else", "elif", "except", "finally"))
        blank = not lines[cut - 1].strip()
        score = (0 if clean else 2) + (0 if blank else 1) + abs(cut - len(lines) / 2) / len(lines)
        if best is None or score < best[0]:
            best = (score, cut)
    if best is None:
        return None
    cut = best[1]
    first, second = lines[:cut], lines[cut:]
    while first and not first[-1].strip():
        first.pop()
    while second and not second[0].strip():
        second.pop(0)
    return [first, second]


def _outline(lines: list[str]) -> list[str]:
    """The key lines: the statements down to the deepest indentation that fits, each run of deeper
    lines replaced by one elided marker; when even the outline is too long, its head and its end."""
    for depth in (16, 12, 8, 4, 1):
        kept, skipped = [], 0
        for line in lines:
            if line.strip() and _indent(line) >= depth:
                skipped += 1
                continue
            if skipped:
                kept.append(" " * depth + f"{ELIDED} ({skipped} lines)")
                skipped = 0
            kept.append(line)
        if skipped:
            kept.append(" " * depth + f"{ELIDED} ({skipped} lines)")
        if _code_height(kept) <= MAX_CODE_LINES and len(kept) < len(lines):
            return kept
    tail = lines[-2:]
    head = []
    for line in lines[:-2]:
        if _code_height(head + [line]) > MAX_CODE_LINES - 3:
            break
        head.append(line)
    return head + [f"{ELIDED} ({len(lines) - len(head) - len(tail)} lines)"] + tail


def code_chunks(source: str) -> tuple[list[str], str]:
    """The code of a cell as slides show it, and how: ``full``, ``compact``, ``split`` (over two
    slides) or ``outline`` (key lines, the rest elided)."""
    lines = [line for line in source.splitlines() if not line.startswith("# NBVAL_")]
    while lines and not lines[-1].strip():
        lines.pop()
    if _code_height(lines) <= MAX_CODE_LINES:
        return ["\n".join(lines)], "full"
    compact = _compact(lines)
    if _code_height(compact) <= MAX_CODE_LINES:
        return ["\n".join(compact)], "compact"
    if _code_height(compact) <= SPLIT_CODE_LINES:
        halves = _split_in_two(compact)
        if halves:
            return ["\n".join(half) for half in halves], "split"
    return ["\n".join(_outline(compact))], "outline"


def fit_code_cell(cell) -> list:
    """The cell as slides show it: its code readable at 20 px (continued on a second slide, or its key
    lines), then its outputs, shrunk to one slide, with the code or on a slide after it."""
    room = SLIDE_BUDGET - 90
    position = cell.metadata.get("k3lite_position")
    hidden = cell.metadata.get("transient", {}).get("remove_source")
    # Text outputs give way, tallest first, until the cell's outputs fit one slide.
    for output in sorted(cell.outputs, key=output_height, reverse=True):
        excess = sum(output_height(each) for each in cell.outputs) - room
        if excess <= 0:
            break
        if output.get("output_type") == "stream" or "text/markdown" in output.get("data", {}):
            _shorten_output(output, max(4 * CODE_LINE, output_height(output) - excess))
    if hidden:
        cells = [cell] if cell.outputs else []
        return cells + _split_long_tables(cell, room)
    chunks, how = code_chunks(cell.source)
    if not chunks[0].strip():
        cells = []
    else:
        cells = []
        for number, chunk in enumerate(chunks):
            piece = nbformat.v4.new_code_cell(chunk, metadata={"k3lite_position": position, "k3lite_code": how,
                                                                "k3lite_lines": len(cell.source.splitlines())})
            if number:
                piece.metadata["k3lite_continues"] = True
            cells.append(piece)
    outputs = nbformat.v4.new_code_cell(cell.source, outputs=cell.outputs,
                                        metadata={"k3lite_position": position, "transient": {"remove_source": True}})
    if cells and cell.outputs and cell_height(cells[-1]) + cell_height(outputs) <= SLIDE_BUDGET - 60:
        cells[-1].outputs = cell.outputs
    elif cell.outputs:
        cells.append(outputs)
    if cells and cells[-1].outputs:
        return cells + _split_long_tables(cells[-1], room)
    return cells


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
        if len(parts) > MAX_TABLE_SLIDES:  # a lecture shows the first rows; the book has them all
            left_out = sum(len(part.splitlines()) - 2 for part in parts[MAX_TABLE_SLIDES:])
            columns = parts[0].splitlines()[0].strip().strip("|").count("|") + 1
            last = parts[MAX_TABLE_SLIDES - 1].splitlines()
            last = last[:-1] if len(last) > 3 else last
            parts = parts[:MAX_TABLE_SLIDES - 1] + ["\n".join(last) + f"\n| ⋯ {left_out + 1} more rows |"
                                                   + " |" * (columns - 1)]
        output["data"]["text/markdown"] = parts[0]
        following = cell.outputs[position + 1:]
        cell.outputs = cell.outputs[:position + 1]
        for part in parts[1:]:
            continued = nbformat.v4.new_code_cell("", outputs=[
                nbformat.v4.new_output("display_data", data={"text/markdown": part, "text/plain": part})])
            continued.metadata["transient"] = {"remove_source": True}
            continued.metadata["k3lite_position"] = cell.metadata.get("k3lite_position")
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


# ----- readable text for the speaker notes -----

LATEX_SYMBOLS = {
    "alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "varepsilon": "ε", "eta": "η",
    "theta": "θ", "kappa": "κ", "lambda": "λ", "mu": "μ", "nu": "ν", "pi": "π", "rho": "ρ", "sigma": "σ",
    "tau": "τ", "phi": "φ", "varphi": "φ", "psi": "ψ", "omega": "ω", "Gamma": "Γ", "Delta": "Δ", "Sigma": "Σ",
    "Phi": "Φ", "Omega": "Ω", "Lambda": "Λ", "top": "ᵀ", "intercal": "ᵀ", "cdot": "·", "cdots": "⋯",
    "ldots": "…", "dots": "…", "times": "×", "le": "≤", "leq": "≤", "ge": "≥", "geq": "≥", "ne": "≠", "neq": "≠",
    "approx": "≈", "sim": "~", "to": "→", "rightarrow": "→", "leftarrow": "←", "gets": "←", "mapsto": "↦",
    "sum": "Σ", "prod": "Π", "infty": "∞", "in": "∈", "odot": "⊙", "otimes": "⊗", "circ": "∘", "pm": "±",
    "lVert": "‖", "rVert": "‖", "Vert": "‖", "|": "‖", "lvert": "|", "rvert": "|", "langle": "⟨", "rangle": "⟩",
    "partial": "∂", "nabla": "∇", "log": "log", "exp": "exp", "max": "max", "min": "min", "quad": " ",
    "qquad": " ", "ell": "ℓ", "sqrt": "√", "lfloor": "⌊", "rfloor": "⌋", "lceil": "⌈", "rceil": "⌉",
    "mid": "|", "forall": "∀", "star": "⋆", "oplus": "⊕", "equiv": "≡", "propto": "∝", "ll": "≪", "gg": "≫",
}
SUPERSCRIPTS = str.maketrans("0123456789+-=()nTi", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿᵀⁱ")


def latex_to_text(latex: str) -> str:
    """A formula as plain Unicode text (``\\beta\\lVert k\\rVert^2`` -> ``β‖k‖²``), for the notes."""
    text = latex
    text = re.sub(r"\\[td]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\\[td]?frac\s*(\w)\s*(\w)", r"\1/\2", text)
    text = re.sub(r"\\(?:mathrm|text|textbf|mathbf|boldsymbol|operatorname|mathcal|mathbb|texttt|bm)\s*\{([^{}]*)\}",
                  r"\1", text)
    text = re.sub(r"\\sqrt\s*\{([^{}]*)\}", r"√(\1)", text)
    text = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])", "", text)
    text = re.sub(r"\\([,;:! ])", " ", text)
    text = re.sub(r"\\([A-Za-z]+|\|) ?", lambda m: LATEX_SYMBOLS.get(m.group(1), m.group(1)), text)
    text = re.sub(r"\^\{([0-9+\-=()nTi]+)\}", lambda m: m.group(1).translate(SUPERSCRIPTS), text)
    text = re.sub(r"\^([0-9nTi])", lambda m: m.group(1).translate(SUPERSCRIPTS), text)
    text = re.sub(r"(?<=\S)\^ᵀ", "ᵀ", text)
    text = re.sub(r"\^\{([^{}]*)\}", r"^(\1)", text)
    text = re.sub(r"_\{([^{}]*)\}", r"_\1", text)
    text = text.replace("{", "").replace("}", "").replace("&", "").replace("\\\\", "; ")
    return re.sub(r"\s+", " ", text).strip()


def readable(markdown: str) -> str:
    """Markdown prose as plain text: math written out, links and emphasis markers dropped."""
    text = DETAILS.sub("", markdown)
    text = re.sub(r"\$\$(.+?)\$\$", lambda m: latex_to_text(m.group(1)), text, flags=re.S)
    text = re.sub(r"\$(.+?)\$", lambda m: latex_to_text(m.group(1)), text, flags=re.S)
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"(figure: \1)", text)
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"(\*\*|__)(.+?)\1", r"\2", text)
    text = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", text)
    return text.strip()


def _notes_html(text: str) -> str:
    """Readable text as HTML paragraphs: ``code`` kept as code, nothing left for MathJax to typeset."""
    paragraphs = [block for block in re.split(r"\n\s*\n", text) if block.strip()]
    out = []
    for block in paragraphs:
        escaped = html.escape(re.sub(r"\s*\n\s*", " ", block.strip()), quote=False).replace("$", "")
        escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
        out.append(f"<p>{escaped}</p>")
    return "".join(out)


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text) if part.strip()]


def _output_text(cell, lines: int = 3) -> str:
    """The first lines of a cell's text output (what it prints), or '' when it shows none."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            text = output.get("text", "")
        elif "text/markdown" in output.get("data", {}) and "image/png" not in output.get("data", {}):
            text = output["data"]["text/markdown"].replace("```", "")
        elif "text/plain" in output.get("data", {}) and not any(
                mime.startswith("image/") for mime in output.get("data", {})):
            text = output["data"]["text/plain"]
        else:
            continue
        kept = [line.strip() for line in text.splitlines() if line.strip() and not set(line.strip()) <= set("|-: ")]
        if kept:
            shown = " / ".join(kept[:lines]) + (" / …" if len(kept) > lines else "")
            return shown if len(shown) <= 300 else shown[:297] + "…"
    return ""


def _has_figure(cell) -> bool:
    if cell.cell_type == "markdown":
        return bool(MARKDOWN_IMAGE.search(cell.source))
    return any("image/png" in output.get("data", {}) or "image/svg+xml" in output.get("data", {})
               for output in cell.get("outputs", []))


def _has_table(cell) -> bool:
    if cell.cell_type == "markdown":
        return any(block.lstrip().startswith("|") for block in markdown_blocks(cell.source))
    return any("text/html" in output.get("data", {}) and "<table" in output["data"]["text/html"]
               or output.get("data", {}).get("text/markdown", "").lstrip().startswith("|")
               for output in cell.get("outputs", []))


# ----- sections, roles, slides and their notes -----

@dataclass
class Slide:
    """One slide of a deck: the cells it shows and what its speaker notes say."""
    cells: list
    heading: str
    horizontal: bool                       # opens a slide of its own (a # or ## section), else a sub-slide
    notes: list[str] = field(default_factory=list)    # readable text
    answers: list[str] = field(default_factory=list)  # HTML: what the room is expected to answer
    weight: float = 1.0                    # relative time it takes


def _sections(cells) -> list[list]:
    """Cells grouped by heading: each group starts at a heading cell (the first may not)."""
    sections = []
    for cell in cells:
        if heading_level(cell) or not sections:
            sections.append([])
        sections[-1].append(cell)
    return sections


def _lecture_sections(sections) -> tuple[list[list], list[list]]:
    """Sections in the lecture: not tagged ``reading``; if any heading is tagged ``lecture``, only those
    (and the title section before the first heading of level 2). Also the "Check yourself" sections,
    which close the lecture as a quiz whatever their tags."""
    selective = any(LECTURE in cell_tags(section[0]) for section in sections)
    kept, quiz, skipping_below = [], [], None
    for index, section in enumerate(sections):
        level, tags = heading_level(section[0]), cell_tags(section[0])
        if CHECK_YOURSELF.match(section[0].source.lstrip()) and section[0].cell_type == "markdown":
            quiz.append(section)
            skipping_below = level or 99
            continue
        if skipping_below is not None and level and level <= skipping_below:
            skipping_below = None
        if skipping_below is not None:
            continue
        is_title = index == 0 or level == 1
        if READING in tags or (selective and not is_title and LECTURE not in tags and level):
            skipping_below = level or 99
            continue
        kept.append(section)
    return kept, quiz


def _solution_answer(cell) -> str:
    """A solution cell as the expected answer: its code (comments that only say "Solution" left out)
    and what it prints, or its text when it is a model answer in prose."""
    if cell.cell_type == "markdown":
        return _notes_html(readable(cell.source))
    lines = [line for line in cell.source.splitlines()
             if line.strip() and not re.match(r"#\s*(NBVAL_|Solution\s*$)", line.strip())]
    answer = "<pre>" + html.escape("\n".join(lines[:24]) + ("\n# …" if len(lines) > 24 else "")) + "</pre>"
    printed = _output_text(cell)
    if printed:
        answer += _notes_html(f"It prints: {printed}")
    return answer


def _following_result(section, position: int) -> str:
    """What the chapter shows after ``position``: the next output (printed text, or a figure with the
    prose that reads it), as the answer to a prediction asked before it."""
    for index in range(position, len(section)):
        cell = section[index]
        if cell.cell_type != "code" or is_solution(cell) or not cell.get("outputs"):
            continue
        printed = _output_text(cell)
        if printed:
            return _notes_html(f"The chapter computes: {printed}")
        if _has_figure(cell):
            for later in section[index + 1:]:
                if later.cell_type == "markdown" and NOTES not in cell_tags(later):
                    reading = next((block for block in markdown_blocks(later.source)
                                    if not block.lstrip().startswith(("#", "$$", "|", "!"))), "")
                    if reading:
                        return _notes_html("The figure shows it; the chapter reads it as: " + readable(reading))
            return _notes_html("The figure that follows shows the answer.")
    return ""


def _slide_answers(slide_cells, section, notes_text: str) -> list[str]:
    """The expected answers to what the slide asks: an exercise's solution cells (after its stub), a
    folded answer (``<details>``), or the result the chapter computes after a prediction."""
    answers = []
    positions = [cell.metadata.get("k3lite_position") for cell in slide_cells]
    positions = [position for position in positions if position is not None]
    if not positions:
        return answers
    last = max(positions)
    for cell in slide_cells:
        for folded in cell.metadata.get("k3lite_details", []):
            answers.append(_notes_html(readable(folded)))
    stubs = [cell for cell in slide_cells if cell.cell_type == "code" and "NotImplementedError" in cell.source]
    asks = any(cell.cell_type == "markdown" and ASKS_THE_ROOM.search(cell.source) for cell in slide_cells)
    asks = asks or bool(ASKS_THE_ROOM.search(notes_text))
    question = any(cell.cell_type == "markdown" and EXERCISE.search(cell.source) for cell in slide_cells)
    if stubs or question:
        start = min(cell.metadata.get("k3lite_position", last) for cell in (stubs or slide_cells))
        following = [section[index] for index in range(start, len(section))]
        solutions = []
        for cell in following:
            if is_solution(cell) or (cell.cell_type == "markdown" and "solution" in cell_tags(cell)):
                solutions.append(cell)
            elif solutions:
                break
        answers += [_solution_answer(cell) for cell in solutions]
    if asks and not answers:
        result = _following_result(section, min(positions))
        if result:
            answers.append(result)
    return answers


def _continued(heading: str):
    cell = nbformat.v4.new_markdown_cell(f'<p class="k3lite-continued">{html.escape(heading)} (continued)</p>')
    cell.metadata["k3lite_continued"] = True
    return cell


def _pieces(section) -> list:
    """The section's cells cut to slide size: long text into paragraphs, long code as ``fit_code_cell``
    shows it; solutions and notes left out; folded answers (``<details>``) moved to the notes."""
    pieces = []
    for cell in section:
        if NOTES in cell_tags(cell) or is_solution(cell) or "solution" in cell_tags(cell):
            continue
        if cell.cell_type == "markdown":
            folded = [match.group(1) for match in DETAILS.finditer(cell.source)]
            source = DETAILS.sub("", cell.source).strip()
            if not source:
                continue
            if markdown_height(source) > SLIDE_BUDGET // 3:
                for number, block in enumerate(_slide_sized_blocks(source)):
                    metadata = copy.deepcopy(cell.metadata) if number == 0 else {
                        "k3lite_position": cell.metadata["k3lite_position"]}
                    pieces.append(nbformat.v4.new_markdown_cell(block, metadata=metadata))
            else:
                cell.source = source
                pieces.append(cell)
            pieces[-1].metadata["k3lite_details"] = folded
        elif cell.cell_type == "code":
            pieces.extend(fit_code_cell(cell))
        else:
            pieces.append(cell)
    return pieces


def _slide_sized_blocks(source: str) -> list[str]:
    """The paragraphs of a markdown text, a table or list taller than a slide cut between its rows or items."""
    room = SLIDE_BUDGET - 120
    blocks = []
    for block in markdown_blocks(source):
        if markdown_height(block) <= room:
            blocks.append(block)
        elif block.lstrip().startswith("|"):
            blocks += split_markdown_table(block, room)
        else:
            items, current = [], []
            for line in block.splitlines():
                if current and re.match(r"\s{0,3}(?:[-*+]|\d+[.)])\s", line):
                    items.append("\n".join(current))
                    current = []
                current.append(line)
            items.append("\n".join(current))
            group = []
            for item in items:
                if group and markdown_height("\n".join(group + [item])) > room:
                    blocks.append("\n".join(group))
                    group = []
                group.append(item)
            blocks.append("\n".join(group))
    return blocks


def _cue(slide: Slide) -> str:
    """What to do with a slide that has no notes of its own: what it shows and where to point."""
    stubs = [cell for cell in slide.cells if cell.cell_type == "code" and "NotImplementedError" in cell.source]
    if stubs:
        names = re.findall(r"^\s*def\s+(\w+)", "\n".join(cell.source for cell in stubs), re.M)
        task = f"`{names[0]}`" if names else "the stub"
        return (f"The room writes {task} (a few minutes in pairs); the checker below it names what is wrong. "
                "Ask one pair for their answer before showing the expected one.")
    cues = []
    code = [cell for cell in slide.cells if cell.cell_type == "code"
            and not cell.metadata.get("transient", {}).get("remove_source") and cell.source.strip()]
    for cell in code:
        names = re.findall(r"^\s*(?:def|class)\s+(\w+)", cell.source, re.M)
        how = cell.metadata.get("k3lite_code", "full")
        shown = {"full": "", "compact": " (comments left out)",
                 "split": " (continued)" if cell.metadata.get("k3lite_continues") else " (continued on the next slide)",
                 "outline": f" (its key lines; the full {cell.metadata.get('k3lite_lines')} are in the notebook)"}[how]
        if names:
            cues.append(f"Walk through {', '.join(f'`{name}`' for name in names[:3])}{shown}: "
                        "say what each line computes before moving on.")
        else:
            first = next((line.strip() for line in cell.source.splitlines()
                          if line.strip() and not line.strip().startswith(("#", "import ", "from "))), "")
            if first:
                cues.append(f"Read the code{shown} from `{first[:70]}`.")
    for cell in slide.cells:
        printed = _output_text(cell, lines=2) if cell.cell_type == "code" else ""
        if printed:
            cues.append(f"It prints: {printed}")
            break
    if any(_has_figure(cell) for cell in slide.cells):
        cues.append("Let the room read the figure (axes, legend) before saying what it shows.")
    if any(_has_table(cell) for cell in slide.cells):
        cues.append("Read one row of the table aloud and say what the columns compare.")
    if not cues:
        prose = [readable(block) for cell in slide.cells if cell.cell_type == "markdown"
                 and not cell.metadata.get("k3lite_continued")
                 for block in markdown_blocks(cell.source) if not block.lstrip().startswith(("#", "|", "!"))]
        sentences = _sentences(" ".join(prose))
        if sentences:
            cues.append(f"The point to land: {sentences[-1]}")
        else:
            cues.append(f"Introduce “{slide.heading}” in a sentence before moving on.")
    return " ".join(cues)


def _weight(slide: Slide) -> float:
    """Relative time a slide takes: more for code to read, figures to look at and questions to answer."""
    lines = sum(len(cell.source.splitlines()) for cell in slide.cells
                if cell.cell_type == "code" and not cell.metadata.get("transient", {}).get("remove_source"))
    words = sum(len(cell.source.split()) for cell in slide.cells if cell.cell_type == "markdown")
    weight = 0.6 + lines / 15 + words / 150
    weight += 0.5 * any(_has_figure(cell) for cell in slide.cells)
    weight += 1.5 if slide.answers else 0
    return min(weight, 4.0)


def lay_out_section(section, *, first: bool) -> list[Slide]:
    """The section as slides: its heading opens a slide (a sub-slide for ``###``), overflow continues on
    sub-slides, each marked "(continued)"."""
    level = heading_level(section[0])
    heading = heading_text(section[0]) or "Introduction"
    notes_cells = [cell for cell in section if NOTES in cell_tags(cell)]
    notes_text = "\n\n".join(readable(cell.source) for cell in notes_cells)
    pieces = _pieces(section)
    slides: list[Slide] = []
    used = 0
    for position, cell in enumerate(pieces):
        height = cell_height(cell)
        wanted = cell.metadata.get("slideshow", {}).get("slide_type", "-")
        if position == 0:
            slides.append(Slide([], heading, horizontal=first or level in (1, 2) or not level))
            used = 0
        elif heading_level(cell) or wanted in ("slide", "subslide") or used + height > SLIDE_BUDGET:
            slides.append(Slide([], heading, horizontal=False))
            used = 0
            if not heading_level(cell):
                slides[-1].cells.append(_continued(heading))
                used = cell_height(slides[-1].cells[0])
        cell.metadata["k3lite_kind"] = "fragment" if wanted == "fragment" else "-"
        slides[-1].cells.append(cell)
        used += height
    if not slides:
        return []
    for number, slide in enumerate(slides):
        if number == 0 and notes_text:
            slide.notes.append(notes_text)
        else:
            slide.notes.append(_cue(slide))
        slide.answers = _slide_answers(slide.cells, section, notes_text if number == 0 else "")
        slide.weight = _weight(slide)
    return slides


def _prepare_cells(notebook) -> list:
    """The chapter's cells that can reach a deck, glue filled in, roles applied (solutions stay, for the
    notes), each numbered by its place in the chapter."""
    values = glued_values(notebook)
    cells = []
    for index, cell in enumerate(notebook.cells):
        tags = cell_tags(cell)
        if (cell.metadata.get("slideshow", {}).get("slide_type") == "skip" and not is_solution(cell)
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
    return cells


def lecture_slides(notebook) -> list[Slide]:
    """Every slide of the chapter's lecture, in order (see the module's docstring)."""
    notebook = copy.deepcopy(notebook)
    cells = _prepare_cells(notebook)
    sections, quiz = _lecture_sections(_sections(cells))
    slides = []
    for number, section in enumerate(sections + quiz):
        for position, cell in enumerate(section):
            cell.metadata["k3lite_position"] = position
        slides += lay_out_section(section, first=number == 0)
    return slides


def _timed(slides: list[Slide]) -> None:
    """Add the timing cue to each slide's notes: its share of a LECTURE_MINUTES lecture."""
    total = sum(slide.weight for slide in slides) or 1.0
    start = 0.0
    for slide in slides:
        minutes = LECTURE_MINUTES * slide.weight / total
        shown = max(0.5, round(minutes * 2) / 2)
        slide.notes.insert(0, f"≈{shown:g} min; at {int(start)} min of {LECTURE_MINUTES}.")
        start += minutes


def _cells_of(slides: list[Slide]) -> list:
    """The slides as notebook cells with the slide types nbconvert reads, notes after each slide's first cell."""
    cells = []
    for slide in slides:
        notes_html = _notes_html("\n\n".join(slide.notes))
        if slide.answers:
            notes_html += "<p><strong>Expected answer:</strong></p>" + "".join(slide.answers)
        notes = nbformat.v4.new_markdown_cell(f'<div class="k3lite-notes">{notes_html}</div>')
        for number, cell in enumerate(slide.cells):
            opening = "slide" if slide.horizontal else "subslide"
            kind = opening if number == 0 else cell.metadata.get("k3lite_kind", "-")
            cell.metadata.setdefault("slideshow", {})["slide_type"] = kind
            cells.append(cell)
            if number == 0:
                notes.metadata["slideshow"] = {"slide_type": "notes"}
                cells.append(notes)
    return cells


def lecture_notebook(notebook):
    """A copy of the chapter's notebook laid out as one lecture deck, uncut (see the module's docstring)."""
    slides = lecture_slides(notebook)
    _timed(slides)
    deck = copy.deepcopy(notebook)
    deck.cells = _cells_of(slides)
    return deck


def _part_cuts(slides: list[Slide]) -> list[int]:
    """Where to cut a chapter's slides into parts: at slides that open a ## section if that balances the
    parts well enough, else at any heading, else anywhere; each part (with its title slide) within MAX_SLIDES."""
    if len(slides) <= MAX_SLIDES:
        return [0, len(slides)]
    sections = [index for index, slide in enumerate(slides) if slide.horizontal and index > 0]
    headings = [index for index, slide in enumerate(slides) if index > 0 and (
        slide.horizontal or heading_level(slide.cells[0]))]
    fewest = math.ceil(len(slides) / PART_TARGET)
    for parts in range(fewest, fewest + 4):
        found = []
        for preference, starts in enumerate((sections, headings, range(1, len(slides)))):
            cuts = [0]
            for k in range(1, parts):
                candidates = [start for start in starts if start > cuts[-1]]
                ideal = k * len(slides) / parts
                if candidates:
                    cuts.append(min(candidates, key=lambda start: abs(start - ideal)))
            cuts.append(len(slides))
            sizes = [end - begin + (begin > 0) for begin, end in zip(cuts, cuts[1:])]
            if len(cuts) == parts + 1 and max(sizes) <= MAX_SLIDES:
                found.append((max(sizes) + 4 * preference, cuts))
        if found:
            return min(found)[1]
    return [0, len(slides)]


def part_name(stem: str, part: int) -> str:
    """The file of a deck: part 1 keeps the chapter's name (the book links it)."""
    return f"{stem}.slides.html" if part == 1 else f"{stem}.part{part}.slides.html"


def _parts_line(stem: str, part: int, parts: int) -> str:
    links = [f"Part {part} of {parts}"]
    if part > 1:
        links.append(f'<a href="{part_name(stem, part - 1)}">← part {part - 1}</a>')
    if part < parts:
        links.append(f'<a href="{part_name(stem, part + 1)}">part {part + 1} →</a>')
    return f'<p class="k3lite-parts">{" · ".join(links)}</p>'


def lecture_decks(notebook, title: str, stem: str) -> list[tuple[str, object]]:
    """The chapter's lecture as decks of at most MAX_SLIDES slides: ``[(file name, notebook), ...]``."""
    slides = lecture_slides(notebook)
    cuts = _part_cuts(slides)
    parts = len(cuts) - 1
    decks = []
    for part, (begin, end) in enumerate(zip(cuts, cuts[1:]), start=1):
        chunk = slides[begin:end]
        if parts > 1:
            line = _parts_line(stem, part, parts)
            if part == 1:
                opening = chunk[0]
                opening.cells.insert(1, nbformat.v4.new_markdown_cell(line))
                opening.notes.append(f"This lecture is in {parts} parts; "
                                     f"this one ends with “{slides[end - 1].heading}”.")
            else:
                chunk[0].horizontal = True
                sections = list(dict.fromkeys(slide.heading for slide in chunk if slide.horizontal))
                listing = "\n".join(f"- {name}" for name in sections[:8])
                cover = nbformat.v4.new_markdown_cell(f"# {title}\n\n{line}\n\nIn this part:\n\n{listing}")
                chunk.insert(0, Slide([cover], title, horizontal=True, weight=0.5, notes=[
                    f"Part {part} of {parts}: recall in a minute where part {part - 1} stopped "
                    f"(“{slides[begin - 1].heading}”), then go on with “{sections[0] if sections else title}”."]))
            if part < parts:
                chunk[-1].notes.append(f"End of part {part}; part {part + 1} opens with “{slides[end].heading}”.")
        _timed(chunk)
        deck = copy.deepcopy(notebook)
        deck.cells = _cells_of(chunk)
        deck.metadata["title"] = title if parts == 1 else f"{title} (part {part} of {parts})"
        decks.append((part_name(stem, part), deck))
    return decks


def _html_of(exporter: SlidesExporter, deck) -> str:
    resources = {"k3lite": {"mathjax_url": f"{MATHJAX_DIR}/tex-chtml.js"}}
    body, _ = exporter.from_notebook_node(deck, resources=resources)
    return body.replace("</head>", DECK_STYLE + "</head>", 1)


def render_decks(exporter: SlidesExporter, chapter: Chapter) -> list[tuple[str, str]]:
    """``[(file name, HTML), ...]``: the chapter's decks, one per part."""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    return [(name, _html_of(exporter, deck)) for name, deck in lecture_decks(notebook, chapter.title, chapter.stem)]


def render_deck(exporter: SlidesExporter, chapter: Chapter) -> str:
    """The chapter's first deck (its only one unless the chapter is cut into parts)."""
    return render_decks(exporter, chapter)[0][1]


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
ol.decks .part { display: block; font-size: 0.9rem; color: #555; margin-top: 4px; }
footer { margin-top: 2rem; font-size: 0.85rem; color: #666; }
"""


def _index_page(title: str, chapters: list[Chapter], parts: dict[str, list[str]] | None = None) -> str:
    """The list of decks: one card per deck, a chapter cut into parts having one card per part."""
    parts = parts or {}
    items = []
    for chapter in chapters:
        names = parts.get(chapter.stem, [chapter.slides_name])
        for number, name in enumerate(names, start=1):
            part = f'<span class="part">part {number} of {len(names)}</span>' if len(names) > 1 else ""
            items.append(f'  <li><a href="{name}"><span class="number">{html.escape(chapter.stem.split("_", 1)[0])}'
                         f'</span><span class="title">{html.escape(chapter.title)}</span>{part}</a></li>')
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}: lecture slides</title>\n<style>{INDEX_STYLE}</style></head>\n<body><main>\n"
            f"<h1>{html.escape(title)}</h1>\n"
            f'<p class="lead">Lecture slides, one deck per chapter, a long chapter in parts of about '
            f"{LECTURE_MINUTES} minutes each. Press <kbd>S</kbd> in a deck for the speaker notes (timing, "
            f"expected answers), <kbd>Esc</kbd> for the overview; arrows move between sections and their "
            f"continuations.</p>\n"
            f'<ol class="decks">\n{chr(10).join(items)}\n</ol>\n'
            f'<footer>The book has every section in full, with the code the slides shorten.</footer>\n'
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
    parts = {}
    for chapter in chapters:
        for stale in slides_dir.glob(f"{chapter.stem}.part*.slides.html"):
            stale.unlink()  # a chapter that shrank leaves no part behind
        decks = render_decks(exporter, chapter)
        parts[chapter.stem] = [name for name, _ in decks]
        for name, body in decks:
            (slides_dir / name).write_text(body, encoding="utf-8")
            slides = body.count('class="k3lite-notes"')
            print(f"slides: {slides_dir / name} ({slides} slides)")
    (slides_dir / "index.html").write_text(_index_page(title, chapters, parts), encoding="utf-8")
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
