"""The pieces of `make book` / `make slides` that need no Sphinx run and no browser."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from build_book import chapter_banner, external_assets, front_page, page_notebook  # noqa: E402
from build_slides import _exporter, render_deck  # noqa: E402
from site_chapters import Chapter, listed_chapters  # noqa: E402

BOOK = {"title": "A test book", "subtitle": "sub", "authors": ["A", "B"],
        "chapters": [{"file": "00_first", "title": "First", "budget_s": 60},
                     {"file": "01_second", "title": "Second", "budget_s": 90},
                     {"file": "02_third", "title": "Third", "budget_s": 30}]}


def write_notebook(path: Path, cells) -> Path:
    notebook = nbformat.v4.new_notebook(cells=cells)
    nbformat.write(notebook, path)
    return path


@pytest.fixture
def chapters_dir(tmp_path):
    for stem, title in (("00_first", "First"), ("02_third", "Third")):
        write_notebook(tmp_path / f"{stem}.ipynb", [
            nbformat.v4.new_markdown_cell(f"# {title}\n\nSome math: $x^2$.",
                                          metadata={"slideshow": {"slide_type": "slide"}}),
            nbformat.v4.new_code_cell("print(1 + 1)", execution_count=1,
                                      outputs=[nbformat.v4.new_output("stream", name="stdout", text="2\n")]),
            nbformat.v4.new_markdown_cell("## Part two", metadata={"slideshow": {"slide_type": "slide"}}),
            nbformat.v4.new_markdown_cell("$$y = 1$$", metadata={"slideshow": {"slide_type": "fragment"}}),
        ])
    return tmp_path


def test_a_listed_chapter_without_notebook_stops_the_build(chapters_dir):
    with pytest.raises(SystemExit, match="01_second"):
        listed_chapters(BOOK, chapters_dir, only_existing=False)


def test_only_existing_keeps_book_order_and_skips_missing(chapters_dir):
    chapters = listed_chapters(BOOK, chapters_dir, only_existing=True)
    assert [c.stem for c in chapters] == ["00_first", "02_third"]
    assert chapters[1].budget_s == 30 and chapters[1].title == "Third"


def test_front_page_toctree_follows_book_order(chapters_dir):
    chapters = listed_chapters(BOOK, chapters_dir, only_existing=True)
    page = front_page(BOOK, chapters, with_slides=True)
    toctree = page.split(":caption: Chapters", 1)[1]
    assert toctree.index("First <chapters/00_first>") < toctree.index("Third <chapters/02_third>")
    assert "01_second" not in page
    assert 'href="slides/02_third.slides.html"' in page
    assert "run_locally" in page.split(":caption: Start here", 1)[1]


def test_chapter_page_starts_with_banner_and_keeps_the_code(chapters_dir):
    chapter = listed_chapters(BOOK, chapters_dir, only_existing=True)[0]
    page = nbformat.reads(page_notebook(chapter, with_slides=True), as_version=4)
    source = nbformat.read(chapter.notebook, as_version=4)
    banner = page.cells[0].source
    assert "{download}`Download the notebook <../_notebooks/00_first.ipynb>`" in banner
    assert "../slides/00_first.slides.html" in banner and "60 s" in banner
    # Same code cells, so the execution cache recognises an unchanged chapter.
    assert [c.source for c in page.cells[1:]] == [c.source for c in source.cells]
    assert page.metadata["kernelspec"]["name"] == "python3"
    # Byte-identical when regenerated: Sphinx then sees the page as unchanged.
    assert page_notebook(chapter, with_slides=True) == page_notebook(chapter, with_slides=True)


def test_banner_without_slides_has_no_slides_link():
    chapter = Chapter("05_x", "X", 0, Path("05_x.ipynb"))
    assert "slides" not in chapter_banner(chapter, with_slides=False)


def test_external_assets_are_found_and_prose_links_are_not(tmp_path):
    (tmp_path / "ok.html").write_text('<a href="https://example.org">a paper</a><script src="_static/x.js"></script>')
    (tmp_path / "bad.html").write_text('<script defer src="https://cdn.jsdelivr.net/npm/mathjax@4/tex.js"></script>'
                                       '<link rel="stylesheet" href="//fonts.example.com/a.css">')
    (tmp_path / "bad.css").write_text('@import url("https://fonts.googleapis.com/css?family=X");')
    offenders = external_assets(tmp_path)
    assert len(offenders) == 3
    assert not any(line.startswith("ok.html") for line in offenders)


def test_deck_has_one_section_per_slide_and_loads_nothing_remote(chapters_dir, tmp_path):
    chapter = listed_chapters(BOOK, chapters_dir, only_existing=True)[0]
    deck = render_deck(_exporter(), chapter)
    # Two cells start a "slide": each becomes a horizontal <section> holding one vertical <section>.
    assert deck.count("<section") == 4
    assert 'src="reveal.js/dist/reveal.js"' in deck and 'src="mathjax/tex-chtml.js"' in deck
    assert deck.count('class="fragment"') == 1
    site = tmp_path / "site"
    site.mkdir()
    (site / "deck.html").write_text(deck)
    assert external_assets(site) == []


def _code(source, text="", tags=None, outputs=None):
    cell = nbformat.v4.new_code_cell(source, execution_count=1, outputs=outputs if outputs is not None else (
        [nbformat.v4.new_output("stream", name="stdout", text=text)] if text else []))
    if tags:
        cell.metadata["tags"] = tags
    return cell


def _markdown(source, tags=None):
    cell = nbformat.v4.new_markdown_cell(source)
    if tags:
        cell.metadata["tags"] = tags
    return cell


def _glue_output(name, value):
    prefix = "application/papermill.record/"
    return nbformat.v4.new_output("display_data", data={f"{prefix}text/plain": repr(value)},
                                  metadata={"scrapbook": {"name": name, "mime_prefix": prefix}})


def test_lecture_deck_applies_roles_glue_and_notes():
    from build_slides import lecture_notebook

    notebook = nbformat.v4.new_notebook(cells=[
        _markdown("# Title\n\nThe loss fell to {glue:text}`loss:.2f` nats. ![d](../figures/diagram_k3_stack.svg)"),
        _code("glue('loss', 2.3456)", outputs=[_glue_output("loss", 2.3456)]),
        _markdown("## Section one\n\nFirst paragraph of one."),
        _code("print_table()  # plumbing", "table", tags=["plumbing"]),
        _code("\n".join(f"x{i} = {i}" for i in range(25)), "long done"),
        _markdown("## Reading only", tags=["reading"]),
        _code("never_on_a_slide()", "x"),
        _markdown("## Exercise"),
        _markdown("Say it slowly.", tags=["notes"]),
        _code("def answer():\n    raise NotImplementedError"),
        _code("def answer():\n    return 42  # the solution", "correct", tags=["solution"]),
    ])
    deck = lecture_notebook(notebook)
    sources = [cell.source for cell in deck.cells]
    everything = "\n".join(sources)
    assert "The loss fell to 2.35 nats" in everything and "figures/diagram_k3_stack.svg" in everything
    assert "../figures" not in everything
    assert "never_on_a_slide" not in everything
    plumbing = next(cell for cell in deck.cells if cell.source.startswith("print_table()"))
    assert plumbing.metadata["transient"] == {"remove_source": True} and plumbing.outputs  # the table, not the code
    shown = "\n".join(cell.source for cell in deck.cells if cell.metadata["slideshow"]["slide_type"] != "notes")
    assert "return 42" not in shown and "raise NotImplementedError" in shown  # the solution is not on a slide
    long_parts = [cell.source for cell in deck.cells if cell.source.startswith(("x0 = 0", "x12 = 12"))]
    assert "\n".join(long_parts) == "\n".join(f"x{i} = {i}" for i in range(25))  # split, not hidden
    notes = [cell.source for cell in deck.cells if cell.metadata["slideshow"]["slide_type"] == "notes"]
    assert all(" min of 50" in note for note in notes)  # a timing cue on every slide
    assert "Say it slowly." in notes[-1] and "return 42" in notes[-1]  # the expected answer, for the speaker
    slide_starts = [cell.source.splitlines()[0] for cell in deck.cells
                    if cell.metadata["slideshow"]["slide_type"] == "slide"]
    assert slide_starts == ["# Title", "## Section one", "## Exercise"]


def test_lecture_deck_refuses_an_unglued_key():
    from build_slides import lecture_notebook

    notebook = nbformat.v4.new_notebook(cells=[_markdown("# T\n\nvalue {glue:text}`missing`")])
    with pytest.raises(ValueError, match="missing"):
        lecture_notebook(notebook)


def test_long_section_is_cut_into_subslides_and_lecture_tag_selects():
    from build_slides import SLIDE_BUDGET, cell_height, lecture_notebook

    paragraphs = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(12))
    notebook = nbformat.v4.new_notebook(cells=[
        _markdown("# Title"), _markdown("## Long", tags=["lecture"]), _markdown(paragraphs),
        _markdown("## Not in the lecture"), _markdown("left for reading")])
    deck = lecture_notebook(notebook)
    assert "left for reading" not in "\n".join(cell.source for cell in deck.cells)
    slides, current = [], []
    for cell in deck.cells:
        kind = cell.metadata["slideshow"]["slide_type"]
        if kind in ("slide", "subslide"):
            current = []
            slides.append(current)
        if kind != "notes":
            current.append(cell_height(cell))
    assert len(slides) > 3 and all(sum(heights) <= SLIDE_BUDGET for heights in slides)


def test_unresolved_glue_is_found(tmp_path):
    from build_book import unresolved_glue

    (tmp_path / "ok.html").write_text("<p>The loss is 2.35.</p>")
    (tmp_path / "bad.html").write_text("<p>The loss is {glue:text}`loss`.</p>")
    assert [line.split(":")[0] for line in unresolved_glue(tmp_path)] == ["bad.html"]


def test_site_tags_give_roles_their_myst_nb_tags():
    from site_chapters import site_tags

    assert site_tags(_code("x", tags=["plumbing"])) == ["plumbing", "hide-input"]
    assert site_tags(_code("x", tags=["solution", "hide-input"])) == ["solution", "hide-input", "hide-output"]
    assert site_tags(_markdown("n", tags=["notes"])) == ["notes", "remove-cell"]
    assert site_tags(_code("x")) == []


def test_a_diagram_in_the_prose_counts_its_height_on_a_slide():
    from build_slides import IMAGE_MAX_HEIGHT, markdown_height

    with_diagram = markdown_height("Look:\n\n![KDA](../figures/diagram_kda_layer.svg)")
    assert 300 < with_diagram - markdown_height("Look:") <= IMAGE_MAX_HEIGHT + 16


def test_a_glue_directive_the_decks_cannot_show_is_refused():
    from build_slides import lecture_notebook

    notebook = nbformat.v4.new_notebook(cells=[_markdown("# T\n\n```{glue:figure} plot\n```")])
    with pytest.raises(ValueError, match="glue reference"):
        lecture_notebook(notebook)


def test_cheatsheet_numbers_come_from_k3lite():
    from build_book import CHEAT_C, CHEAT_T, _bytes, _count, cheatsheet_page, cheatsheet_rows

    from k3lite.course import accounting, flops
    from k3lite.models.k3 import K3Config

    rows = cheatsheet_rows()
    assert len(rows) == 9 and all(all(row[key].strip() for key in row) for row in rows)
    by_name = {row["mechanism"].split(" (")[0]: row for row in rows}
    k3 = K3Config.published()
    assert by_name["Kimi K3, the whole hybrid"]["cache"].startswith(_bytes(accounting.k3_mla_cache_bytes_per_token(k3)))
    kda_flops = flops.kda_chunked(CHEAT_T, k3.head_dim, CHEAT_C).total / CHEAT_T
    assert by_name["Kimi Delta Attention"]["flops"] == f"{_count(kda_flops)} per head"
    page = cheatsheet_page()
    assert ":class: k3lite-cheatsheet" in page and page.count("\n| ") >= 10
