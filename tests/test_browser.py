"""The built site and slides, checked in a real browser with no network (headless Debian Chromium).

Needs `make book` (or `make book EXECUTE=0`) first. Skips when the site, Chromium or playwright is
missing, unless K3LITE_REQUIRE_BROWSER=1 (as in CI), which turns every such skip into a failure.
K3LITE_BUILD_DIR points at another build (`scripts/build_book.py --build-dir DIR`: its html/ and
slides/). Screenshots of each page, light and dark, go to the build's screenshots/.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
import threading
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from build_book import unresolved_glue  # noqa: E402
from site_chapters import is_solution, load_book  # noqa: E402

BUILD_DIR = Path(os.environ.get("K3LITE_BUILD_DIR", ROOT / "_build"))
BOOK_YML = Path(os.environ.get("K3LITE_BOOK_YML", ROOT / "book.yml"))
SITE_DIR = BUILD_DIR / "html"
SLIDES_DIR = BUILD_DIR / "slides"
SCREENSHOTS_DIR = BUILD_DIR / "screenshots"
CHROMIUM = os.environ.get("K3LITE_CHROMIUM", "/usr/bin/chromium")
REQUIRE_BROWSER = os.environ.get("K3LITE_REQUIRE_BROWSER") == "1"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
                 "--disable-component-update", "--disable-sync"]
PAGE_TIMEOUT_MS = 20_000

BOOK = load_book(BOOK_YML)
STEMS = [chapter["file"] for chapter in BOOK["chapters"]]
TITLES = {chapter["file"]: chapter["title"] for chapter in BOOK["chapters"]}
FRONT_PAGES = ["index", "run_locally", "instructors"]
BACK_PAGES = ["cheatsheet", "glossary", "bibliography"]
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720
# The course style draws labels at 10 pt on a 100 dpi canvas (13.9 px); shown at this fraction of its
# drawn width or more, a figure's labels stay at 10 px or more.
MIN_FIGURE_SCALE = 10 / (10 * 100 / 72)


def page_path(name: str) -> str:
    return f"/html/{name}.html" if name in FRONT_PAGES + BACK_PAGES else f"/html/chapters/{name}.html"


def built_chapters() -> list[str]:
    return [stem for stem in STEMS if (SITE_DIR / "chapters" / f"{stem}.html").exists()]


def built_back_pages() -> list[str]:
    return [name for name in BACK_PAGES if (SITE_DIR / f"{name}.html").exists()]


def unavailable(reason: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason} (K3LITE_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (SITE_DIR / "index.html").exists():
        unavailable(f"no built site in {SITE_DIR}: run `make book` first")
    handler = functools.partial(QuietHandler, directory=str(BUILD_DIR))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the module: Playwright's sync API allows one running instance per thread, so the
    site's tests and the decks' tests share it."""
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def browser(server, chromium):
    return chromium


@dataclass
class Visit:
    """What one page did in the browser."""
    problems: list[str] = field(default_factory=list)
    math_elements: int = 0
    typeset: int = 0
    math_errors: int = 0
    images: list[dict] = field(default_factory=list)
    prev_href: str | None = None
    next_href: str | None = None
    theme: str = ""
    figure_filters: list[str] = field(default_factory=list)
    download_href: str | None = None
    clipped_equations: list[str] = field(default_factory=list)
    open_hidden_cells: list[str] = field(default_factory=list)
    hidden_cells: int = 0
    figure_scales: list[dict] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    diagrams: list[str] = field(default_factory=list)
    overflowing: list[str] = field(default_factory=list)
    solution_outputs: int = 0
    open_solution_outputs: list[str] = field(default_factory=list)


def open_page(context, server: str, url: str):
    """Open ``url`` and return (page, problems): requests off this host are blocked and reported."""
    problems: list[str] = []
    host = urlsplit(server).netloc

    def guard(route):
        request_url = route.request.url
        if urlsplit(request_url).netloc != host:
            problems.append(f"request left localhost: {request_url}")
            route.abort()
        else:
            route.continue_()

    page = context.new_page()
    page.route("**/*", guard)
    page.on("requestfailed", lambda request: problems.append(
        f"request failed: {request.url} ({request.failure})"))
    page.on("response", lambda response: response.status >= 400 and problems.append(
        f"HTTP {response.status}: {response.url}"))
    page.on("pageerror", lambda error: problems.append(f"JavaScript error: {error}"))
    response = page.goto(url, wait_until="load", timeout=PAGE_TIMEOUT_MS)
    if response is None or response.status != 200:
        problems.append(f"{url}: status {response.status if response else 'none'}")
    page.wait_for_load_state("networkidle", timeout=PAGE_TIMEOUT_MS)
    return page, problems


WAIT_FOR_IMAGES = """async () => {
  const images = Array.from(document.images);
  images.forEach(img => { img.loading = "eager"; });
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => { img.addEventListener("load", done); img.addEventListener("error", done); })));
  return images.map(img => ({src: img.currentSrc.slice(0, 120), width: img.naturalWidth,
                             height: img.naturalHeight}));
}"""

WAIT_FOR_MATH = """async () => {
  const math = document.querySelectorAll(".math").length;
  if (math === 0) return [0, 0, 0];
  await MathJax.startup.promise;
  return [math, document.querySelectorAll(".math mjx-container").length,
          document.querySelectorAll("mjx-merror").length];
}"""


def inspect_page(page, visit: Visit) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    visit.math_elements = page.evaluate("() => document.querySelectorAll('.math').length")
    try:
        if visit.math_elements:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                   timeout=PAGE_TIMEOUT_MS)
        visit.math_elements, visit.typeset, visit.math_errors = page.evaluate(WAIT_FOR_MATH)
    except PlaywrightTimeout:
        visit.problems.append("MathJax never started")
    visit.images = page.evaluate(WAIT_FOR_IMAGES)
    visit.prev_href = page.evaluate("() => document.querySelector('a.left-prev')?.href ?? null")
    visit.next_href = page.evaluate("() => document.querySelector('a.right-next')?.href ?? null")
    visit.theme = page.evaluate("() => document.documentElement.dataset.theme")
    visit.figure_filters = page.evaluate(
        "() => Array.from(document.querySelectorAll('.cell_output img')).map(i => getComputedStyle(i).filter)")
    visit.download_href = page.evaluate(
        "() => document.querySelector('.k3lite-chapter-links a.download')?.href ?? null")
    visit.clipped_equations = page.evaluate(CLIPPED_EQUATIONS)
    visit.hidden_cells, visit.open_hidden_cells = page.evaluate(HIDDEN_CELLS)
    visit.solution_outputs, visit.open_solution_outputs = page.evaluate(SOLUTION_OUTPUTS)
    visit.overflowing = page.evaluate(OVERFLOWING)
    visit.figure_scales = page.evaluate(
        """() => Array.from(document.querySelectorAll('.bd-content div.cell_output img'))
                 .filter(img => img.naturalWidth > 0)
                 .map(img => {
                   const box = img.closest('div.cell_output');
                   const width = img.getBoundingClientRect().width;
                   const spills = img.getBoundingClientRect().right > box.getBoundingClientRect().right + 1;
                   return {src: img.currentSrc.slice(-40), scale: width / img.naturalWidth,
                           fills: width >= box.clientWidth - 2, contained: !spills};
                 })""")
    visit.tables = page.evaluate(
        "() => Array.from(document.querySelectorAll('.cell_output table')).map(t => t.rows[0]?.innerText ?? '')")
    visit.diagrams = page.evaluate(
        "() => Array.from(document.querySelectorAll('.bd-content img')).map(i => i.src)"
        ".filter(s => /diagram_[a-z0-9_]+\\.svg/.test(s))")


# A display equation wider than its box must sit in a box that scrolls (overflow-x auto or scroll).
CLIPPED_EQUATIONS = """() => {
  const clipped = [];
  document.querySelectorAll('.bd-content mjx-container[display="true"]').forEach(eq => {
    let box = eq, scrolls = false;
    while (box && !box.classList.contains('bd-article')) {
      const style = getComputedStyle(box);
      if ((style.overflowX === 'auto' || style.overflowX === 'scroll') && box.scrollWidth > box.clientWidth) {
        scrolls = true; break;
      }
      box = box.parentElement;
    }
    const article = eq.closest('.bd-article') || document.body;
    const wide = eq.getBoundingClientRect().right > article.getBoundingClientRect().right + 1
                 || eq.scrollWidth > eq.clientWidth + 1;
    if (wide && !scrolls) clipped.push(eq.textContent.slice(0, 60));
  });
  return clipped;
}"""

# Cells whose input the site hides (plumbing, solutions): a closed toggle, the code not on screen.
HIDDEN_CELLS = """() => {
  const cells = document.querySelectorAll('.cell.tag_plumbing, .cell.tag_solution, .cell.tag_hide-input');
  const open = [];
  cells.forEach(cell => {
    const toggle = cell.querySelector('details.above-input');
    const input = cell.querySelector('.cell_input');
    if (!toggle || toggle.open || (input && input.checkVisibility())) {
      open.push(cell.className);
    }
  });
  return [cells.length, open];
}"""

# Solution cells show their output ("correct.", the numbers the solution computed) behind a closed toggle
# of its own: reading the result would give the answer away.
SOLUTION_OUTPUTS = """() => {
  const open = [];
  let count = 0;
  document.querySelectorAll('.cell.tag_solution, .cell.tag_hide-input:not(.tag_plumbing)').forEach(cell => {
    const output = cell.querySelector('.cell_output');
    if (!output) return;
    count += 1;
    const toggle = output.closest('details');
    if (!toggle || !cell.contains(toggle) || toggle.open || output.checkVisibility()) {
      open.push(cell.className);
    }
  });
  return [count, open];
}"""

# Figures (img, svg) and tables that do not fit the article's column: wider than the block that holds
# them, past the column's edge, or cut by a box between them and the article that clips or scrolls.
# Only code and text blocks (pre) may scroll sideways; they are not checked. Elements not shown (in a
# closed toggle) have no box and are skipped.
OVERFLOWING = """() => {
  const article = document.querySelector('.bd-article');
  if (!article) return ['no .bd-article on the page'];
  const style = getComputedStyle(article);
  const frame = article.getBoundingClientRect();
  const left = frame.left + parseFloat(style.paddingLeft), right = frame.right - parseFloat(style.paddingRight);
  const describe = el => el.tagName.toLowerCase() + ' ' + (el.currentSrc || el.getAttribute('src') || '').slice(-40)
      + (el.tagName === 'TABLE' ? (el.rows[0]?.innerText ?? '').replace(/\\s+/g, ' ').slice(0, 40) : '');
  const block = el => {
    let box = el.parentElement;
    while (box !== article && ['inline', 'contents'].includes(getComputedStyle(box).display)) box = box.parentElement;
    return box;
  };
  const found = [];
  article.querySelectorAll('img, svg, table').forEach(el => {
    if (el.closest('mjx-container')) return;  // equations have their own test
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) return;
    const width = Math.max(rect.width, el.scrollWidth || 0);
    const holder = block(el);
    const problems = [];
    if (width > holder.clientWidth + 1) problems.push(`${Math.round(width)} px in a ${holder.clientWidth} px box`);
    if (rect.left < left - 1 || rect.right > right + 1) problems.push(`past the ${Math.round(right - left)} px column`);
    for (let box = el.parentElement; box && box !== article; box = box.parentElement) {
      const clip = box.getBoundingClientRect();
      if (getComputedStyle(box).overflowX !== 'visible' && (rect.left < clip.left - 1 || rect.right > clip.right + 1)) {
        problems.push(`cut by ${box.tagName.toLowerCase()}.${String(box.className).split(' ')[0]}`);
        break;
      }
    }
    if (problems.length) found.push(`${describe(el)}: ${problems.join(', ')}`);
  });
  return found;
}"""


@pytest.fixture(scope="module")
def visits(browser, server) -> dict[tuple[str, str], Visit]:
    """Every page of the site, opened once in the light and once in the dark colour scheme."""
    SCREENSHOTS_DIR.mkdir(parents=True, exist_ok=True)
    results = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900})
        for name in FRONT_PAGES + built_chapters() + built_back_pages():
            visit = Visit()
            page, visit.problems = open_page(context, server, server + page_path(name))
            inspect_page(page, visit)
            page.screenshot(path=str(SCREENSHOTS_DIR / f"{name}-{scheme}.png"), full_page=True)
            page.close()
            results[(name, scheme)] = visit
        context.close()
    return results


PAGES = FRONT_PAGES + STEMS + BACK_PAGES


def visited(visits, name: str, scheme: str = "light") -> Visit:
    if (name, scheme) not in visits:
        unavailable(f"{name}: not in the built site (built with --only-existing?)")
    return visits[(name, scheme)]


@pytest.mark.parametrize("name", PAGES)
def test_page_loads_with_nothing_from_outside_and_no_failure(visits, name):
    for scheme in ("light", "dark"):
        visit = visited(visits, name, scheme)
        assert visit.problems == [], f"{name} ({scheme}): {visit.problems}"


@pytest.mark.parametrize("name", PAGES)
def test_math_is_typeset(visits, name):
    visit = visited(visits, name)
    assert visit.typeset == visit.math_elements, (
        f"{name}: {visit.typeset} of {visit.math_elements} formulas rendered by MathJax")
    assert visit.math_errors == 0, f"{name}: {visit.math_errors} MathJax errors"


def test_some_chapter_has_math(visits):
    chapters = built_chapters()
    if not chapters:
        unavailable("no chapter page in the built site")
    assert any(visited(visits, stem).typeset > 0 for stem in chapters), "no chapter shows typeset math"


@pytest.mark.parametrize("name", PAGES)
def test_every_image_has_a_size(visits, name):
    visit = visited(visits, name)
    empty = [image["src"] for image in visit.images if not (image["width"] > 0 and image["height"] > 0)]
    assert empty == [], f"{name}: images that did not load: {empty}"


@pytest.mark.parametrize("name", STEMS)
def test_chapter_offers_its_notebook(visits, server, browser, name):
    visit = visited(visits, name)
    assert visit.download_href and visit.download_href.endswith(f"/{name}.ipynb"), (
        f"{name}: no notebook download link in the chapter banner")
    context = browser.new_context()
    response = context.request.get(visit.download_href)
    notebook = json.loads(response.text())
    context.close()
    assert response.status == 200 and notebook["nbformat"] == 4


def test_dark_theme_is_dark_and_leaves_figures_alone(visits):
    chapters = built_chapters()
    if not chapters:
        unavailable("no chapter page in the built site")
    for stem in chapters:
        visit = visited(visits, stem, "dark")
        assert visit.theme == "dark", f"{stem}: the page did not switch to the dark theme"
        dimmed = [f for f in visit.figure_filters if f != "none"]
        assert dimmed == [], f"{stem}: the dark theme filters the figures: {dimmed}"


def test_previous_and_next_follow_book_order(visits, server):
    chapters = built_chapters()
    if not chapters:
        unavailable("no chapter page in the built site")
    if REQUIRE_BROWSER:
        assert chapters == STEMS, f"chapters missing from the site: {sorted(set(STEMS) - set(chapters))}"
    order = FRONT_PAGES + chapters + built_back_pages()
    for position, name in enumerate(order):
        visit = visited(visits, name)
        expected_prev = server + page_path(order[position - 1]) if position > 0 else None
        expected_next = server + page_path(order[position + 1]) if position + 1 < len(order) else None
        assert visit.prev_href == expected_prev, f"{name}: previous is {visit.prev_href}"
        assert visit.next_href == expected_next, f"{name}: next is {visit.next_href}"


def test_search_finds_a_chapter(browser, server):
    chapters = built_chapters()
    if not chapters:
        unavailable("no chapter page in the built site")
    word = max(re.findall(r"[A-Za-z]{4,}", TITLES[chapters[-1]]), key=len).lower()
    context = browser.new_context()
    page, problems = open_page(context, server, f"{server}/html/search.html?q={word}")
    page.wait_for_selector("#search-results ul.search li", timeout=PAGE_TIMEOUT_MS)
    hits = page.eval_on_selector_all("#search-results ul.search li a", "links => links.map(a => a.href)")
    page.screenshot(path=str(SCREENSHOTS_DIR / "search-light.png"))
    context.close()
    assert problems == []
    assert any(f"/chapters/{chapters[-1]}.html" in hit for hit in hits), f"searching {word!r} gave {hits}"


def test_slide_deck_opens_and_advances(browser, server):
    decks = [stem for stem in STEMS if (SLIDES_DIR / f"{stem}.slides.html").exists()]
    if not decks:
        unavailable(f"no slide deck in {SLIDES_DIR}: run `make slides`")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page, problems = open_page(context, server, f"{server}/slides/{decks[0]}.slides.html")
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=PAGE_TIMEOUT_MS)
    total = page.evaluate("() => Reveal.getTotalSlides()")
    before = page.evaluate("() => Reveal.getIndices()")
    page.screenshot(path=str(SCREENSHOTS_DIR / f"slides-{decks[0]}-first.png"))
    page.evaluate("() => Reveal.next()")
    after = page.evaluate("() => Reveal.getIndices()")
    page.screenshot(path=str(SCREENSHOTS_DIR / f"slides-{decks[0]}-second.png"))
    math = page.evaluate("() => document.querySelectorAll('mjx-container').length")
    context.close()
    assert problems == [], problems
    assert total > 1, f"{decks[0]}: the deck has {total} slide"
    assert after != before, f"{decks[0]}: Reveal.next() stayed on {before}"
    source = (SLIDES_DIR / f"{decks[0]}.slides.html").read_text(encoding="utf-8")
    if "$" in source:
        assert math > 0, f"{decks[0]}: the deck's math was not typeset"


# ----- the site: equations, hidden cells, figures, tables, glue, diagrams -----

@pytest.mark.parametrize("name", PAGES)
def test_no_display_equation_is_clipped(visits, name):
    visit = visited(visits, name)
    assert visit.clipped_equations == [], (
        f"{name}: display equations wider than their box, with no scroll box: {visit.clipped_equations}")


@pytest.mark.parametrize("name", STEMS)
def test_plumbing_and_solution_cells_are_collapsed(visits, name):
    visit = visited(visits, name)
    assert visit.open_hidden_cells == [], f"{name}: hidden-input cells shown open: {visit.open_hidden_cells}"


def test_some_chapter_hides_a_cell(visits):
    chapters = built_chapters()
    if not chapters:
        unavailable("no chapter page in the built site")
    assert sum(visited(visits, stem).hidden_cells for stem in chapters) > 0, "no chapter hides any cell input"


@pytest.mark.parametrize("name", STEMS)
def test_figures_keep_labels_of_10_px(visits, name):
    """A figure is shown at MIN_FIGURE_SCALE of its drawn width or more, unless it is drawn wider than
    the column allows: then it fills the column (fitting beats scrolling; test_nothing_is_clipped)."""
    visit = visited(visits, name)
    small = [f"{figure['src']} at {figure['scale']:.2f}" for figure in visit.figure_scales
             if figure["scale"] < MIN_FIGURE_SCALE and not figure["fills"]]
    assert small == [], f"{name}: figures shrunk below {MIN_FIGURE_SCALE:.2f} of their drawn width: {small}"
    spilling = [figure["src"] for figure in visit.figure_scales if not figure["contained"]]
    assert spilling == [], f"{name}: figures wider than their output box: {spilling}"


@pytest.mark.parametrize("name", PAGES)
def test_nothing_is_clipped_at_1280(visits, name):
    """At 1280 x 900 no figure, diagram or table is wider than the article's column or cut by a box
    that scrolls: only code and text outputs may scroll sideways."""
    for scheme in ("light", "dark"):
        visit = visited(visits, name, scheme)
        assert visit.overflowing == [], f"{name} ({scheme}): wider than the column: {visit.overflowing}"


@pytest.mark.parametrize("name", STEMS)
def test_solution_outputs_are_folded(visits, name):
    import nbformat

    notebook = nbformat.read(ROOT / "chapters" / f"{name}.ipynb", as_version=4)
    with_output = sum(1 for cell in notebook.cells if is_solution(cell) and cell.get("outputs"))
    visit = visited(visits, name)
    assert visit.open_solution_outputs == [], f"{name}: solution outputs shown open: {visit.open_solution_outputs}"
    assert visit.solution_outputs == with_output, (
        f"{name}: {visit.solution_outputs} folded solution outputs on the page, {with_output} in the notebook")


def test_claim_ledger_is_a_table(visits):
    visit = visited(visits, "10_kimi_k3")
    ledgers = [header for header in visit.tables if "claim" in header and "verdict" in header]
    assert ledgers, f"10_kimi_k3: no output table with claim and verdict columns (tables: {visit.tables})"


def test_cheatsheet_is_a_typeset_table(visits):
    visit = visited(visits, "cheatsheet")
    assert visit.typeset >= 9 and visit.math_errors == 0, "the cheat sheet's update rules were not typeset"


def test_no_glue_reference_is_left_unresolved():
    if not (SITE_DIR / "index.html").exists():
        unavailable(f"no built site in {SITE_DIR}: run `make book` first")
    assert unresolved_glue(SITE_DIR) == []


@pytest.mark.parametrize("name", STEMS)
def test_chapter_shows_a_diagram(visits, name):
    assert visited(visits, name).diagrams, f"{name}: no diagram from figures/diagram_*.svg on the page"


# ----- the decks: every slide fits 1280 x 720 with code at 20 px, has notes, no solutions, no empty widgets -----

MEASURE_DECK = """async () => {
  if (window.MathJax && MathJax.startup) { await MathJax.startup.promise; }
  const config = Reveal.getConfig();
  const slides = [], sections = [];
  const horizontal = Reveal.getHorizontalSlides();
  for (let h = 0; h < horizontal.length; h++) {
    const vertical = Array.from(horizontal[h].querySelectorAll(':scope > section'));
    const notes = Array.from(horizontal[h].querySelectorAll('aside.notes')).map(n => n.textContent.trim());
    sections.push({index: h, notes: notes.filter(text => text.length > 0).length});
    const list = vertical.length ? vertical : [horizontal[h]];
    for (let v = 0; v < list.length; v++) {
      Reveal.slide(h, v);
      await new Promise(done => requestAnimationFrame(done));
      const own = Array.from(list[v].querySelectorAll('aside.notes'));
      const code = Array.from(list[v].querySelectorAll('pre')).filter(pre => !pre.closest('aside.notes'));
      const images = Array.from(list[v].querySelectorAll('img, .jp-OutputArea-output svg'))
          .filter(img => !img.closest('aside.notes'));
      slides.push({h: h, v: v, height: list[v].scrollHeight,
                   text: (list[v].innerText || '').slice(0, 60).replace(/\\s+/g, ' '),
                   fullText: list[v].innerText || '',
                   notes: own.map(n => n.textContent.trim()).filter(t => t.length > 0),
                   codeSizes: code.map(pre => parseFloat(getComputedStyle(pre).fontSize)),
                   imageWidths: images.map(img => img.getBoundingClientRect().width / Reveal.getScale())});
    }
  }
  const emptyOutputs = Array.from(document.querySelectorAll('.jp-OutputArea-output'))
      .filter(o => o.children.length === 0 && o.textContent.trim() === '').length;
  return {width: config.width, height: config.height, slides: slides, sections: sections,
          emptyOutputs: emptyOutputs,
          code: Array.from(document.querySelectorAll('.jp-InputArea pre, .highlight pre'))
                    .filter(pre => !pre.closest('aside.notes')).map(pre => pre.textContent).join('\\n')};
}"""
MIN_CODE_PX = 20
MAX_DECK_SLIDES = 40
PLACEHOLDER = re.compile(r"is in the notebook|code of this step", re.I)


def deck_files(stem: str) -> list[Path]:
    """The decks of a chapter: its own, then its parts when it is cut into several lectures."""
    first = SLIDES_DIR / f"{stem}.slides.html"
    if not first.exists():
        return []
    return [first] + sorted(SLIDES_DIR.glob(f"{stem}.part*.slides.html"),
                            key=lambda path: int(re.search(r"part(\d+)", path.name).group(1)))


def built_decks() -> list[str]:
    return [stem for stem in STEMS if deck_files(stem)]


@pytest.fixture(scope="module")
def deck_server():
    """The build directory served over HTTP: the decks need no site, only `make slides`."""
    if not built_decks():
        unavailable(f"no slide deck in {SLIDES_DIR}: run `make slides`")
    handler = functools.partial(QuietHandler, directory=str(BUILD_DIR))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def deck_browser(deck_server, chromium):
    return chromium


@pytest.fixture(scope="module")
def decks(deck_browser, deck_server) -> dict[str, list[dict]]:
    """Every deck of every chapter opened at 1280 x 720, every slide visited and measured."""
    context = deck_browser.new_context(viewport={"width": SLIDE_WIDTH, "height": SLIDE_HEIGHT})
    results = {}
    for stem in built_decks():
        for path in deck_files(stem):
            page, problems = open_page(context, deck_server, f"{deck_server}/slides/{path.name}")
            page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=PAGE_TIMEOUT_MS)
            results.setdefault(stem, []).append(dict(page.evaluate(MEASURE_DECK), problems=problems, file=path.name))
            page.close()
    context.close()
    return results


def deck(decks, stem: str) -> list[dict]:
    if stem not in decks:
        unavailable(f"{stem}: no deck in {SLIDES_DIR}")
    return decks[stem]


@pytest.mark.parametrize("stem", STEMS)
def test_every_slide_fits_1280_by_720(decks, stem):
    for measured in deck(decks, stem):
        assert (measured["width"], measured["height"]) == (SLIDE_WIDTH, SLIDE_HEIGHT)
        assert measured["problems"] == []
        tall = [f"{s['h']}/{s['v']} ({s['height']} px): {s['text']}" for s in measured["slides"]
                if s["height"] > SLIDE_HEIGHT]
        assert tall == [], f"{measured['file']}: slides taller than {SLIDE_HEIGHT} px: {tall}"


@pytest.mark.parametrize("stem", STEMS)
def test_every_slide_has_speaker_notes_with_a_timing_cue(decks, stem):
    for measured in deck(decks, stem):
        silent = [f"{s['h']}/{s['v']}: {s['text']}" for s in measured["slides"] if not s["notes"]]
        assert measured["slides"] and silent == [], f"{measured['file']}: slides without speaker notes: {silent}"
        untimed = [f"{s['h']}/{s['v']}" for s in measured["slides"]
                   if not re.search(r"≈[\d.]+ min; at \d+ min of \d+", s["notes"][0])]
        assert untimed == [], f"{measured['file']}: notes without a timing cue: {untimed}"
        raw_latex = [f"{s['h']}/{s['v']}" for s in measured["slides"]
                     if any(re.search(r"\\(?:frac|beta|alpha|top|lVert)\b|\$", note) for note in s["notes"])]
        assert raw_latex == [], f"{measured['file']}: raw LaTeX in the notes of {raw_latex}"


@pytest.mark.parametrize("stem", STEMS)
def test_decks_are_lecture_sized_without_placeholders(decks, stem):
    for measured in deck(decks, stem):
        assert len(measured["slides"]) <= MAX_DECK_SLIDES, (
            f"{measured['file']}: {len(measured['slides'])} slides, more than {MAX_DECK_SLIDES}")
        placeholders = [f"{s['h']}/{s['v']}" for s in measured["slides"] if PLACEHOLDER.search(s["fullText"])]
        assert placeholders == [], f"{measured['file']}: slides that only point at the notebook: {placeholders}"


@pytest.mark.parametrize("stem", STEMS)
def test_code_is_readable_and_figures_fit_the_slide(decks, stem):
    for measured in deck(decks, stem):
        small = [f"{s['h']}/{s['v']} ({min(s['codeSizes'])} px)" for s in measured["slides"]
                 if s["codeSizes"] and min(s["codeSizes"]) < MIN_CODE_PX]
        assert small == [], f"{measured['file']}: code below {MIN_CODE_PX} px: {small}"
        wide = [f"{s['h']}/{s['v']} ({max(s['imageWidths']):.0f} px)" for s in measured["slides"]
                if s["imageWidths"] and max(s["imageWidths"]) > SLIDE_WIDTH]
        assert wide == [], f"{measured['file']}: figures wider than the slide: {wide}"


@pytest.mark.parametrize("stem", STEMS)
def test_no_solution_code_on_slides(decks, stem):
    import nbformat

    code = "\n".join(measured["code"] for measured in deck(decks, stem))
    notebook = nbformat.read(ROOT / "chapters" / f"{stem}.ipynb", as_version=4)
    # A solution's own lines: long enough to be distinctive, and not in the exercise's stub (which may
    # give some lines as hints), its checker call or any other cell the slides may show. The speaker
    # notes may give it as the expected answer.
    elsewhere = "\n".join(cell.source for cell in notebook.cells if not is_solution(cell))
    shown = []
    for cell in notebook.cells:
        if not is_solution(cell):
            continue
        distinctive = [line.strip() for line in cell.source.splitlines()
                       if len(line.strip()) > 30 and not line.strip().startswith("#") and line.strip() not in elsewhere]
        shown += [line for line in distinctive if line in code]
    assert shown == [], f"{stem}: solution code on the slides: {shown[:3]}"


@pytest.mark.parametrize("stem", STEMS)
def test_no_empty_widget_output_on_slides(decks, stem):
    for measured in deck(decks, stem):
        assert measured["emptyOutputs"] == 0, f"{measured['file']}: empty output areas on the slides"
        source = (SLIDES_DIR / measured["file"]).read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-view+json" not in source


def test_cheatsheet_prints_on_one_page(browser, server):
    if not (SITE_DIR / "cheatsheet.html").exists():
        unavailable("no cheat sheet in the built site")
    context = browser.new_context()
    page, problems = open_page(context, server, f"{server}/html/cheatsheet.html")
    page.evaluate("() => MathJax.startup.promise")
    pdf = page.pdf(format="A4")
    context.close()
    assert problems == []
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages == 1, f"the cheat sheet prints on {pages} A4 pages"
