"""The built site and slides, checked in a real browser with no network (headless Debian Chromium).

Needs `make book` (or `make book EXECUTE=0`) first. Skips when the site, Chromium or playwright is
missing, unless K3LITE_REQUIRE_BROWSER=1 (as in CI), which turns every such skip into a failure.
Screenshots of each page, light and dark, go to _build/screenshots/.
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
from urllib.parse import urljoin, urlsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from site_chapters import load_book  # noqa: E402

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
FRONT_PAGES = ["index", "run_locally"]


def page_path(name: str) -> str:
    return f"/html/{name}.html" if name in FRONT_PAGES else f"/html/chapters/{name}.html"


def built_chapters() -> list[str]:
    return [stem for stem in STEMS if (SITE_DIR / "chapters" / f"{stem}.html").exists()]


def unavailable(reason: str) -> None:
    if REQUIRE_BROWSER:
        pytest.fail(f"{reason} (K3LITE_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
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
def browser(server):
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


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


@pytest.fixture(scope="module")
def visits(browser, server) -> dict[tuple[str, str], Visit]:
    """Every page of the site, opened once in the light and once in the dark colour scheme."""
    SCREENSHOTS_DIR.mkdir(parents=True, exist_ok=True)
    results = {}
    for scheme in ("light", "dark"):
        context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900})
        for name in FRONT_PAGES + built_chapters():
            visit = Visit()
            page, visit.problems = open_page(context, server, server + page_path(name))
            inspect_page(page, visit)
            page.screenshot(path=str(SCREENSHOTS_DIR / f"{name}-{scheme}.png"), full_page=True)
            page.close()
            results[(name, scheme)] = visit
        context.close()
    return results


PAGES = FRONT_PAGES + STEMS


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
    order = FRONT_PAGES + chapters
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
