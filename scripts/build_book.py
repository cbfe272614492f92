"""Build the course as a static site in _build/html, offline, from book.yml.

    python scripts/build_book.py [--execute 1|0] [--only-existing] [--no-slides] [--no-strict]
                                 [--book-yml PATH] [--chapters-dir DIR] [--build-dir DIR]

1. Generates the Sphinx source tree in _build/src from book.yml: a front page with the chapter
   toctree in book.yml order and each chapter's study time, the course pages of book/ ("run the course
   locally", "for instructors", the bibliography and the glossary), and each chapter's .ipynb with a
   banner (notebook download, slides, study time, CPU budget) put in front of it.
2. Runs Sphinx + myst-nb + sphinx-book-theme (configuration in book/conf.py). With --execute 1 the
   chapters are executed through myst-nb's jupyter-cache (_build/jupyter_cache), so an unchanged
   chapter is not run again; with --execute 0 the outputs stored in the notebooks are rendered.
   Cells carry their roles as tags (CONTRIBUTING, "Cell roles"); each role is given the myst-nb tag
   that shows it (plumbing and solutions behind a toggle, speaker notes removed). A cheat sheet page,
   computed by k3lite.course.accounting and k3lite.course.flops, follows the chapters.
3. Builds the reveal.js decks (scripts/build_slides.py) into _build/slides and the site's slides/.
4. Checks that no page loads a script, style sheet, font or image from outside the site, and that no
   page shows a glue reference that was left unresolved.
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
from bookinfo import study_time_text
from build_slides import build_slides
from fetch_assets import copy_mathjax
from site_chapters import BUILD_DIR, ROOT, Chapter, listed_chapters, load_book, site_tags

CONF_DIR = ROOT / "book"
NOTEBOOK_COPIES = "_notebooks"  # pristine copies offered for download; not parsed as pages
DEFAULT_KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
# Markdown pages of book/ copied into the site as they are; the front page's toctrees link them.
COURSE_PAGES = ("run_locally", "instructors", "glossary", "bibliography")


def write_if_changed(path: Path, text: str) -> None:
    """Write ``text`` unless the file already holds it, so Sphinx sees unchanged pages as unchanged."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def study_minutes(book: dict) -> dict[str, int]:
    """``{stem: study_time_min}`` for the chapters of book.yml that set it."""
    return {entry["file"]: entry["study_time_min"] for entry in book["chapters"] if entry.get("study_time_min")}


def front_page(book: dict, chapters: list[Chapter], with_slides: bool) -> str:
    minutes = study_minutes(book)
    rows = []
    for chapter in chapters:
        slides = f' <a href="slides/{chapter.slides_name}">slides</a> |' if with_slides else ""
        study = f"about {study_time_text(minutes[chapter.stem])}" if chapter.stem in minutes else "—"
        rows.append(f"| {{doc}}`{chapter.title} <chapters/{chapter.stem}>` | {study} |{slides}")
    header = "| Chapter | Study time | Slides |\n| --- | --- | --- |" if with_slides else (
        "| Chapter | Study time |\n| --- | --- |")
    total = sum(minutes.get(chapter.stem, 0) for chapter in chapters)
    toctree = "\n".join(f"{chapter.title} <chapters/{chapter.stem}>" for chapter in chapters)
    authors = ", ".join(book["authors"])
    total_line = (f" Studied alone, the whole course takes a motivated student about {round(total / 60)} hours."
                  if total else "")
    return f"""# {book['title']}

**{book.get('subtitle', '')}**

*{authors}*

The course starts from GPT-2 and arrives at a Kimi K3 style hybrid model, one architectural step per
chapter; each step begins with an experiment that shows the previous model failing. Every chapter is a
notebook: the code on these pages produced the numbers and pictures under it, on an ordinary CPU, and
the download link at the top of each chapter gives you that notebook to run and change.

{header}
{chr(10).join(rows)}

The study time is what a motivated student needs for a chapter: reading it, running every cell, the
exercises and its "Check yourself" questions.{total_line} Each chapter opens with its learning objectives
and prerequisites and ends with its sources.

Start with {{doc}}`run_locally` to set up the notebooks on your machine; lecturers find a six-week plan,
projects and grading in {{doc}}`instructors`. The {{doc}}`cheatsheet` puts every mechanism's update rule and
costs on one printable page, the {{doc}}`glossary` defines the course's terms, and the
{{doc}}`bibliography` lists every paper and article the chapters use.

```{{toctree}}
:hidden:
:caption: Start here

run_locally
instructors
```

```{{toctree}}
:hidden:
:caption: Chapters

{toctree}
```

```{{toctree}}
:hidden:
:caption: Reference

cheatsheet
glossary
bibliography
```
"""


def chapter_banner(chapter: Chapter, with_slides: bool, study_time_min: int | None = None) -> str:
    parts = [f"{{download}}`Download the notebook <../{NOTEBOOK_COPIES}/{chapter.stem}.ipynb>`"]
    if with_slides:
        parts.append(f'<a href="../slides/{chapter.slides_name}">Lecture slides</a>')
    if study_time_min:
        parts.append(f"Study time: about {study_time_text(study_time_min)}")
    if chapter.budget_s:
        parts.append(f"Executes in ≤ {chapter.budget_s} s on a 2-core CPU")
    return ":::{container} k3lite-chapter-links\n" + " · ".join(parts) + "\n:::"


def page_notebook(chapter: Chapter, with_slides: bool, study_time_min: int | None = None) -> str:
    """The chapter's notebook as the site shows it: the banner first, outputs as stored."""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    notebook.metadata.setdefault("kernelspec", DEFAULT_KERNELSPEC)
    notebook.cells.insert(0, nbformat.v4.new_markdown_cell(chapter_banner(chapter, with_slides, study_time_min)))
    for index, cell in enumerate(notebook.cells):
        cell["id"] = f"k3lite-{index}"  # stable ids keep the generated file byte-identical across builds
        tags = site_tags(cell)
        if tags:
            cell.metadata["tags"] = tags
    return nbformat.writes(notebook) + "\n"


# ----- The cheat sheet: every mechanism on one printable page, each number computed by k3lite -----
CHEAT_T, CHEAT_C = 8192, 64  # context length and chunk size the per-token FLOPs are quoted at


def _count(n: float) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g}" if isinstance(n, float) else f"{n:,}"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:,} B"


def cheatsheet_rows() -> list[dict[str, str]]:
    """One row per mechanism: update rule, state, cache per token, FLOPs per token (K3's sizes)."""
    sys.path.insert(0, str(ROOT))
    from k3lite.course import accounting, flops
    from k3lite.layers.attnres import num_block_sources
    from k3lite.models.gpt2 import GPT2Config
    from k3lite.models.k3 import K3Config

    k3, gpt2 = K3Config.published(), GPT2Config()
    d, T, C = k3.head_dim, CHEAT_T, CHEAT_C
    fp32 = accounting.element_bytes("fp32")
    matrix_state = f"$d_k d_v$ = {d * d:,} per head ({_bytes(d * d * fp32)} fp32), fixed"
    delta_flops = f"{_count(flops.kda_chunked(T, d, C).total / T)} per head"
    latent_width = k3.kv_lora_rank + k3.rope_dim
    moe = accounting.k3_moe_layer_parameters(k3)
    moe_active = moe["always"] + k3.top_k * accounting.k3_expert_parameters(k3)
    sources, _ = num_block_sources(2 * k3.num_layers, 2 * k3.attnres_block_size)
    params = accounting.k3_param_counts(k3)
    return [
        {"mechanism": "Softmax attention + KV cache (ch. 1)",
         "rule": r"$o_t = \mathrm{softmax}\big(q_t K_{\le t}^\top / \sqrt{d}\big)\, V_{\le t}$",
         "state": "$2 t d$ numbers per head: grows with $t$",
         "cache": f"{_bytes(accounting.gpt2_kv_bytes_per_token(gpt2))} (GPT-2 small, bf16)",
         "flops": f"{_count(flops.full_attention(T, d, causal=True) / T)} per head (grows with $T$)"},
        {"mechanism": "Linear attention (ch. 2)",
         "rule": r"$S_t = S_{t-1} + k_t v_t^\top,\quad o_t = S_t^\top q_t$",
         "state": matrix_state, "cache": "0",
         "flops": f"{_count(flops.linear_attention_chunked(T, d, C).total / T)} per head"},
        {"mechanism": "DeltaNet, chunked in the WY/UT form (ch. 3-4)",
         "rule": r"$S_t = (I - \beta_t k_t k_t^\top) S_{t-1} + \beta_t k_t v_t^\top$",
         "state": matrix_state, "cache": "0", "flops": f"{delta_flops} (KDA's products)"},
        {"mechanism": "Gated DeltaNet (ch. 5)",
         "rule": r"$S_t = e^{g_t} (I - \beta_t k_t k_t^\top) S_{t-1} + \beta_t k_t v_t^\top,\ g_t \le 0$",
         "state": matrix_state, "cache": "0", "flops": f"{delta_flops} (KDA's products)"},
        {"mechanism": "Kimi Delta Attention (ch. 6)",
         "rule": r"$S_t = (I - \beta_t k_t k_t^\top)\,\mathrm{Diag}(e^{g_t})\, S_{t-1} + \beta_t k_t v_t^\top,"
                 r"\ g_t \in \mathbb{R}^{d_k}_{\le 0}$",
         "state": matrix_state + f"; K3: {_bytes(accounting.k3_kda_state_bytes_per_sequence(k3))} "
                                 f"over {k3.num_kda_layers} layers",
         "cache": "0", "flops": delta_flops},
        {"mechanism": "Multi-head Latent Attention, absorbed (ch. 7)",
         "rule": (r"$c_t = W^{DKV} h_t,\quad "
                  r"o_t = \mathrm{softmax}\big(q_t^\top W^{UK} c_{\le t}\big)\, c_{\le t} W^{UV}$"),
         "state": f"${latent_width} t$ numbers (latent {k3.kv_lora_rank} + rope key {k3.rope_dim}), "
                  f"shared by {k3.mla_num_heads} heads",
         "cache": f"{_bytes(accounting.k3_mla_cache_bytes_per_token_per_layer(k3))} per layer (bf16)",
         "flops": f"{_count(flops.full_attention(T, latent_width, k3.kv_lora_rank, causal=True) / T)} "
                  f"per head (grows with $T$)"},
        {"mechanism": "Latent MoE with shared experts, SiTU (ch. 8)",
         "rule": r"$y = \sum_{e \in \mathrm{shared}} E_e(x) + W_{up} \sum_{e \in \mathrm{top}k(r(x))} "
                 r"p_e E_e(W_{down} x)$",
         "state": "none", "cache": "0",
         "flops": f"{_count(2 * moe_active)} per layer ({k3.top_k} of {k3.num_experts} experts)"},
        {"mechanism": "Attention Residuals (ch. 9)",
         "rule": r"$h_l = \sum_i \mathrm{softmax}_i\big(w_l^\top \mathrm{RMSNorm}(b_i)\big)\, b_i$",
         "state": f"up to {sources} block sums of width {k3.hidden_size} per token (forward only)",
         "cache": "0",
         "flops": f"{_count(4 * sources * k3.hidden_size)} per sub-layer (at most)"},
        {"mechanism": "Kimi K3, the whole hybrid (ch. 10)",
         "rule": f"{k3.layers_per_cycle - 1} KDA : 1 MLA layers, {k3.num_layers} in all; latent MoE; AttnRes",
         "state": f"{_bytes(accounting.k3_kda_state_bytes_per_sequence(k3))} of KDA states per sequence",
         "cache": f"{_bytes(accounting.k3_mla_cache_bytes_per_token(k3))} (all MLA layers, bf16)",
         "flops": f"{_count(2 * params['active'])} (2 x {_count(params['active'])} active of "
                  f"{_count(params['total'])} parameters, before attention)"},
    ]


def cheatsheet_page() -> str:
    from k3lite.models.k3 import K3Config  # cheatsheet_rows put the repository on the path

    rows, head_dim = cheatsheet_rows(), K3Config.published().head_dim
    columns = ("mechanism", "rule", "state", "cache", "flops")
    body = "\n".join("| " + " | ".join(row[key] for key in columns) + " |" for row in rows)
    return f"""# Cheat sheet: every mechanism on one page

Sizes are Kimi K3's (`K3Config.published()`: head dimension $d = {head_dim}$, so $d_k = d_v = d$) unless a row
says otherwise; FLOPs count matrix products (2 per multiply-add) at $T = {CHEAT_T:,}$ tokens and chunk size
$C = {CHEAT_C}$, as in `k3lite.course.flops`. Every number on this page is computed by `k3lite.course.accounting` and
`k3lite.course.flops` when the site is built. Print it: the page drops the navigation on paper.

```{{table}} Each mechanism, what it stores and what it costs
:class: k3lite-cheatsheet

| Mechanism | Update rule | State | Cache bytes per token | FLOPs per token |
| --- | --- | --- | --- | --- |
{body}
```

Rows with "(KDA's products)" use `k3lite.course.flops.kda_chunked`: the delta-rule family shares the chunked
WY/UT products, and the gates add only element-wise work, which is not counted. "Before attention" in
the last row: the weight products of one token, without the context-dependent attention terms above.
"""


def generate_sources(book: dict, chapters: list[Chapter], src_dir: Path, with_slides: bool) -> None:
    write_if_changed(src_dir / "index.md", front_page(book, chapters, with_slides))
    for page in COURSE_PAGES:
        write_if_changed(src_dir / f"{page}.md", (CONF_DIR / f"{page}.md").read_text(encoding="utf-8"))
    write_if_changed(src_dir / "cheatsheet.md", cheatsheet_page())
    wanted = {f"{chapter.stem}.ipynb" for chapter in chapters}
    for stale_dir in (src_dir / "chapters", src_dir / NOTEBOOK_COPIES):
        if stale_dir.is_dir():
            for stale in stale_dir.glob("*.ipynb"):
                if stale.name not in wanted:
                    stale.unlink()
    for chapter in chapters:
        write_if_changed(src_dir / "chapters" / f"{chapter.stem}.ipynb",
                         page_notebook(chapter, with_slides, study_minutes(book).get(chapter.stem)))
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


# Unresolved glue: myst-nb leaves the role's text in the page (`{glue:text}`key``, or the key alone in a
# warning box) when no cell glued that key; a build must never ship such a page.
UNRESOLVED_GLUE = re.compile(r"\{glue(?::[a-z]+)?\}|glue key .{0,80}not found|No glue data found", re.I)


def unresolved_glue(site_dir: Path) -> list[str]:
    """Pages of the built site that still show a glue reference instead of its value."""
    offenders = []
    for page in sorted(site_dir.rglob("*.html")):
        if page.relative_to(site_dir).parts[0] in ("_static", "slides", "_sources"):
            continue
        text = page.read_text(encoding="utf-8", errors="replace")
        for match in UNRESOLVED_GLUE.finditer(text):
            offenders.append(f"{page.relative_to(site_dir)}: ...{text[max(0, match.start() - 40):match.end() + 40]}...")
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
    unresolved = unresolved_glue(build_dir / "html")
    if unresolved:
        print("pages with unresolved glue references:\n  " + "\n  ".join(unresolved), file=sys.stderr)
        return 1
    print(f"book: {build_dir / 'html' / 'index.html'} ({len(chapters)} chapters)")
    print(json.dumps({"chapters": [c.stem for c in chapters], "executed": bool(args.execute)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
