"""Sphinx configuration of the course site (used by scripts/build_book.py with `-c book`).

The source tree itself is generated from book.yml into _build/src; this file only reads the
book's metadata and points every asset at local copies, so the site works with no network.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = Path(os.environ.get("K3LITE_BUILD_DIR", ROOT / "_build"))
BOOK = yaml.safe_load(Path(os.environ.get("K3LITE_BOOK_YML", ROOT / "book.yml")).read_text(encoding="utf-8"))

project = BOOK["title"]
author = ", ".join(BOOK["authors"])
copyright = author
language = "en"

extensions = ["myst_nb"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "html_image"]
exclude_patterns = ["_notebooks/**", "**/.ipynb_checkpoints", "**/*.py", "**/jupytext.toml"]
suppress_warnings = ["myst.header"]  # chapters may step from # to ### for asides; not a page error

# Execution: build_book.py passes -D nb_execution_mode=cache (execute) or off (stored outputs).
nb_execution_mode = "cache"
nb_execution_cache_path = str(BUILD_DIR / "jupyter_cache")
nb_execution_timeout = 900
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# Markdown that a cell displays (IPython.display.Markdown: chapter 10's claim ledger) is parsed as MyST,
# so its tables, math and roles render like the prose around them.
nb_render_markdown_format = "myst"
# The widget renderer would come from a CDN; chapters pair every widget with a static figure.
nb_ipywidgets_js = {}

# Math: MathJax 3 copied into _static by build_book.py (see scripts/fetch_assets.py).
html_static_path = ["_static", str(BUILD_DIR / "site_static")]
mathjax_path = "mathjax/tex-chtml.js"
mathjax3_config = {"tex": {"tags": "ams"}}

html_theme = "sphinx_book_theme"
html_title = BOOK["title"]
# k3lite.css fits figures and tables to the column and widens it at 1200-1600 px (see its "Layout").
html_css_files = ["k3lite.css"]
html_copy_source = True
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    "extra_footer": "Built offline from the course notebooks; every script, style sheet and font is served by "
                    "this site.",
}
html_context = {"default_mode": "auto"}

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = ('<p class="k3lite-widget-note">An interactive widget is here in the notebook: download it '
               "and run it to move the sliders. The figures that follow show the same explorer, static.</p>")


def note_widgets(app, doctree) -> None:
    """Swap each widget view (blank without a kernel and a renderer from a CDN) for a short note."""
    from docutils import nodes

    for raw in list(doctree.findall(nodes.raw)):
        if WIDGET_VIEW in raw.astext():
            raw.replace_self(nodes.raw("", WIDGET_NOTE, format="html"))


# The "On this page" button of the article's header opens the page's contents in the theme's drawer.
# pydata-sphinx-theme binds the drawer to the first such button only, the navbar's, which
# sphinx-book-theme hides; forward the visible one's clicks to it. k3lite.css shows the button, and
# folds the contents column into it, from 1200 to 1600 px, where the column would squeeze the article.
CONTENTS_BUTTON_JS = """document.addEventListener("click", function (event) {
  var button = event.target.closest(".bd-header-article .secondary-toggle");
  var bound = document.querySelector(".secondary-toggle");
  if (button && bound && bound !== button) { event.preventDefault(); bound.click(); }
});"""


def setup(app):
    app.connect("doctree-read", note_widgets)
    app.add_js_file(None, body=CONTENTS_BUTTON_JS)
