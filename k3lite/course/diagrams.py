"""One diagram per mechanism of the course, drawn by code: ``python -m k3lite.course.diagrams`` writes them all.

Each ``draw_*`` function returns a matplotlib figure; :func:`write_all` saves each as
``figures/diagram_<name>.svg`` (what the chapters and decks show) and ``.png`` (to look at it).
Figures are 7.5 inches wide and every label is at least 10 pt, so at the book's column width
(about 700 px) no label is smaller than 12 px.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from k3lite.course.viz import CARD, FIGURES_DIR, INK, MECHANISM_COLORS, PALETTE

WIDTH_IN = 7.5
MIN_FONT_PT = 10
LABEL_PT = 11
TITLE_PT = 13


# ----- drawing helpers (coordinates in data units; every canvas is 100 units wide) -----

def _canvas(height: float, title: str):
    fig = plt.figure(figsize=(WIDTH_IN, WIDTH_IN * height / 100), facecolor=CARD)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, height)
    ax.axis("off")
    ax.set_facecolor(CARD)
    ax.text(50, height - 3.5, title, ha="center", va="center", fontsize=TITLE_PT, fontweight="bold", color=INK)
    return fig, ax


def _tint(color: str, amount: float = 0.82) -> tuple[float, float, float]:
    red, green, blue = matplotlib.colors.to_rgb(color)
    return (red + (1 - red) * amount, green + (1 - green) * amount, blue + (1 - blue) * amount)


def _box(ax, x, y, w, h, text, color=INK, *, size=LABEL_PT, weight="normal", fill=True):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.2,rounding_size=1.2", linewidth=1.4,
                                edgecolor=color, facecolor=_tint(color) if fill else CARD))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=INK, fontweight=weight)
    return (x, y, w, h)


def _arrow(ax, start, end, text=None, *, color=INK, offset=(1.0, 0.0), dashed=False):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, linewidth=1.3, color=color,
                                 linestyle="--" if dashed else "-", shrinkA=1, shrinkB=1))
    if text:
        middle = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*middle, text, fontsize=MIN_FONT_PT, color=INK, ha="left", va="center")


def _note(ax, x, y, text, *, ha="left", size=MIN_FONT_PT, color=INK, style="normal"):
    ax.text(x, y, text, ha=ha, va="center", fontsize=size, color=color, fontstyle=style)


def _top(box):
    x, y, w, h = box
    return (x + w / 2, y + h)


def _bottom(box):
    x, y, w, h = box
    return (x + w / 2, y)


def _right(box):
    x, y, w, h = box
    return (x + w, y + h / 2)


def _left(box):
    x, y, w, h = box
    return (x, y + h / 2)


def _matrix(ax, x, y, size, rows, cols, color, *, label=None, values=None):
    """A small grid of cells: a state matrix or a tile of one."""
    cell = size / max(rows, cols)
    for r in range(rows):
        for c in range(cols):
            shade = 0.55 if values is None else values(r, c)
            ax.add_patch(Rectangle((x + c * cell, y + (rows - 1 - r) * cell), cell, cell, linewidth=0.6,
                                   edgecolor=CARD, facecolor=_tint(color, shade)))
    if label:
        ax.text(x + cols * cell / 2, y - 2.5, label, ha="center", va="center", fontsize=MIN_FONT_PT, color=INK)


# ----- the diagrams -----

def draw_gpt2_block():
    """GPT-2 block: pre-norm attention and MLP, and the KV cache that grows by one row per token."""
    fig, ax = _canvas(60, "GPT-2 block with its KV cache")
    color = MECHANISM_COLORS["gpt2"]
    x = _box(ax, 8, 4, 26, 6, "token $x_t$")
    ln1 = _box(ax, 8, 15, 26, 5, "LayerNorm")
    attn = _box(ax, 8, 24, 26, 7, "causal attention\n$q_t$ against all $k_{\\leq t}$", color)
    ln2 = _box(ax, 8, 35, 26, 5, "LayerNorm")
    mlp = _box(ax, 8, 43, 26, 6, "MLP  $d \\to 4d \\to d$", color)
    _arrow(ax, _top(x), _bottom(ln1))
    _arrow(ax, _top(ln1), _bottom(attn))
    _arrow(ax, _top(attn), _bottom(ln2), "+ residual")
    _arrow(ax, _top(ln2), _bottom(mlp))
    _arrow(ax, _top(mlp), (21, 55.5), "+ residual")
    # The cache: one (k, v) row per past token, appended at every step.
    for row in range(6):
        y = 12 + row * 5
        fresh = row == 5
        ax.add_patch(Rectangle((58, y), 14, 4, facecolor=_tint(color, 0.35 if fresh else 0.8), edgecolor=color))
        ax.add_patch(Rectangle((74, y), 14, 4, facecolor=_tint(color, 0.35 if fresh else 0.8), edgecolor=color))
        _note(ax, 56, y + 2, f"$t{'-' + str(5 - row) if row < 5 else ''}$", ha="right")
    _note(ax, 65, 45, "keys $k$", ha="center")
    _note(ax, 81, 45, "values $v$", ha="center")
    _note(ax, 74, 51, "new row for token $t$ on top", color=color, ha="center")
    _arrow(ax, _right(attn), (56, 36), "write $k_t, v_t$", offset=(-9, 3.5))
    _arrow(ax, (56, 17), (34, 25), "read all", offset=(-2, -4), dashed=True)
    _note(ax, 70, 6, "cache bytes = 2 x layers x d x bytes per number, per token:\ngrows O(t)", ha="center")
    return fig


def draw_linear_attention_state():
    """Linear attention: every token adds an outer product to one fixed d x d state."""
    fig, ax = _canvas(48, "Linear attention: one fixed-size state")
    color = MECHANISM_COLORS["linear_attention"]
    _matrix(ax, 6, 14, 18, 6, 6, color, label="$S_{t-1}$  ($d_k \\times d_v$)")
    _note(ax, 27, 23, "+", size=18)
    _matrix(ax, 32, 14, 18, 6, 1, color, label="$k_t$")
    _matrix(ax, 38, 34, 18, 1, 6, color, label=None)
    _note(ax, 47, 40, "$v_t^\\top$", ha="center")
    _matrix(ax, 38, 14, 18, 6, 6, color, label="$k_t v_t^\\top$",
            values=lambda r, c: 0.25 + 0.1 * ((r + c) % 3))
    _note(ax, 59, 23, "=", size=18)
    _matrix(ax, 64, 14, 18, 6, 6, color, label="$S_t$", values=lambda r, c: 0.3 + 0.08 * ((r * c) % 4))
    _arrow(ax, (87, 23), (95, 23))
    _note(ax, 88, 17, "$o_t = S_t^\\top q_t$")
    _note(ax, 50, 5, "the state never grows: $d_k d_v$ numbers, whatever the length; "
                     "but writes only pile up", ha="center")
    return fig


def draw_delta_rule_update():
    """Delta rule: read what the state holds for k, then write the correction."""
    fig, ax = _canvas(52, "Delta rule: overwrite what a key already holds")
    color = MECHANISM_COLORS["delta_rule"]
    _box(ax, 4, 20, 18, 12, "state\n$S_{t-1}$", color)
    read = _box(ax, 30, 34, 24, 8, "read  $S_{t-1}^\\top k_t$", color)
    error = _box(ax, 30, 20, 24, 8, "error  $v_t - S_{t-1}^\\top k_t$", color)
    write = _box(ax, 30, 6, 24, 8, "write  $\\beta_t\\, k_t (\\cdot)^\\top$", color)
    _box(ax, 66, 20, 20, 12, "state\n$S_t$", color)
    _arrow(ax, (22, 29), _left(read))
    _arrow(ax, _bottom(read), _top(error))
    _arrow(ax, _bottom(error), _top(write))
    _arrow(ax, (13, 20), (13, 10), None)
    _arrow(ax, (13, 10), _left(write), "$S_{t-1}$ +", offset=(-6, 2.5))
    _arrow(ax, _right(write), (70, 20), "sum", offset=(1, -1))
    _note(ax, 58, 42, "$S_t = S_{t-1} + \\beta_t k_t (v_t - S_{t-1}^\\top k_t)^\\top$", size=LABEL_PT)
    _note(ax, 58, 10, "$\\beta_t = 1$: $k_t$ now maps exactly to $v_t$", size=MIN_FONT_PT)
    return fig


def draw_chunk_tiling():
    """Chunked WY/UT form: diagonal tiles in parallel, the state carried from chunk to chunk."""
    fig, ax = _canvas(56, "Chunking: parallel inside a chunk, a state across chunks")
    color = MECHANISM_COLORS["delta_rule"]
    size, chunks = 36, 4
    tile = size / chunks
    x0, y0 = 6, 8
    for row in range(chunks):
        for col in range(row + 1):
            diagonal = row == col
            ax.add_patch(Rectangle((x0 + col * tile, y0 + (chunks - 1 - row) * tile), tile, tile, linewidth=1,
                                   edgecolor=CARD, facecolor=_tint(color, 0.35 if diagonal else 0.85)))
    _note(ax, x0 + size / 2, y0 - 3, "tokens (keys)  $\\rightarrow$", ha="center")
    ax.text(x0 - 2.5, y0 + size / 2, "queries  $\\rightarrow$", ha="center", va="center", rotation=90,
            fontsize=MIN_FONT_PT, color=INK)
    _note(ax, x0 + size + 2, y0 + size - 4, "diagonal tiles: $C \\times C$\n"
                                              "$T = (I + A)^{-1}$, $W = T K$, $U = T V$", size=MIN_FONT_PT)
    _note(ax, x0 + size + 2, y0 + size / 2 - 6, "off-diagonal: never formed,\nsummarised by the state $S$",
          size=MIN_FONT_PT)
    states = []
    for index in range(chunks + 1):
        states.append(_box(ax, 50 + index * 9.5, 4, 7, 6, f"$S_{index}$", color, size=MIN_FONT_PT))
    for left, right in zip(states, states[1:]):
        _arrow(ax, _right(left), _left(right))
    _note(ax, 72, 13.5, "$S_{c+1} = S_c + K_c^\\top (U_c - W_c S_c)$: one step per chunk", ha="center",
          size=MIN_FONT_PT)
    return fig


def draw_gated_decay():
    """Gated DeltaNet: one scalar decay per head multiplies the whole state before each write."""
    fig, ax = _canvas(46, "Gated decay: forget the whole state a little, every token")
    color = MECHANISM_COLORS["gated_delta_rule"]
    shades = (0.2, 0.4, 0.6, 0.78)
    for step, shade in enumerate(shades):
        _matrix(ax, 6 + step * 22, 14, 16, 5, 5, color, label=f"after {step} step{'s' if step != 1 else ''}",
                values=lambda r, c, s=shade: s)
        if step < len(shades) - 1:
            _arrow(ax, (23 + step * 22, 22), (27 + step * 22, 22))
            _note(ax, 22.5 + step * 22, 27, "$\\times e^{g}$")
    _note(ax, 50, 6, "$S_t = e^{g_t}\\,(I - \\beta_t k_t k_t^\\top)\\, S_{t-1} + \\beta_t k_t v_t^\\top$,"
                     "  $g_t \\leq 0$: one number per head", ha="center", size=LABEL_PT)
    return fig


def draw_kda_layer():
    """A KDA layer: projections, short convolutions, per-channel decay, delta rule, gated output."""
    fig, ax = _canvas(70, "Kimi Delta Attention layer: data flow")
    color = MECHANISM_COLORS["kda"]
    x = _box(ax, 38, 3, 24, 6, "hidden $x_t$ ($d$)")
    q = _box(ax, 4, 16, 17, 7, "$W_q$, conv,\nSiLU, L2 norm", color, size=MIN_FONT_PT)
    k = _box(ax, 23, 16, 17, 7, "$W_k$, conv,\nSiLU, L2 norm", color, size=MIN_FONT_PT)
    v = _box(ax, 42, 16, 16, 7, "$W_v$, conv,\nSiLU", color, size=MIN_FONT_PT)
    g = _box(ax, 60, 16, 18, 7, "decay $g_t \\in \\mathbb{R}^{d_k}$\nlow rank, $\\leq 0$",
             PALETTE["green"], size=MIN_FONT_PT)
    b = _box(ax, 80, 16, 16, 7, "$\\beta_t$ = sigmoid\nper head", PALETTE["orange"], size=MIN_FONT_PT)
    for branch in (q, k, v, g, b):
        _arrow(ax, _top(x), _bottom(branch))
    _box(ax, 18, 31, 64, 9, "$S_t = (I - \\beta_t k_t k_t^\\top)\\,\\mathrm{Diag}(e^{g_t})\\,S_{t-1}"
                            " + \\beta_t k_t v_t^\\top$,   $o_t = S_t^\\top q_t$", color)
    for branch in (q, k, v, g, b):
        _arrow(ax, _top(branch), (_top(branch)[0] if 18 < _top(branch)[0] < 82 else 50, 31))
    norm = _box(ax, 18, 46, 30, 6, "per-head RMSNorm", color)
    gate = _box(ax, 54, 46, 28, 6, "output gate (full rank)", PALETTE["green"])
    _box(ax, 33, 57, 34, 6, "$W_o$ $\\rightarrow$ back to $d$", color)
    _arrow(ax, (33, 40), _bottom(norm))
    _arrow(ax, _right(norm), _left(gate), "x")
    _arrow(ax, _top(gate), (58, 57))
    _note(ax, 84, 36, "state per head:\n$d_k \\times d_v$, fixed", size=MIN_FONT_PT)
    return fig


def draw_mla_cache():
    """MLA: cache a small latent per token; absorb the up-projections into the query and output."""
    fig, ax = _canvas(64, "Multi-head Latent Attention: cache the latent, absorb the rest")
    color = MECHANISM_COLORS["mla"]
    h = _box(ax, 4, 6, 18, 7, "hidden $h_t$\n($d$ = 7168)")
    down = _box(ax, 4, 20, 18, 7, "$W^{DKV}$\ndown-project", color)
    latent = _box(ax, 4, 34, 18, 8, "latent $c_t$ (512)\n+ rope key (64)", color, weight="bold")
    _arrow(ax, _top(h), _bottom(down))
    _arrow(ax, _top(down), _bottom(latent))
    for row in range(5):
        ax.add_patch(Rectangle((30, 22 + row * 4), 20, 3.4, facecolor=_tint(color, 0.35 if row == 4 else 0.8),
                               edgecolor=color))
    _note(ax, 40, 45.5, "cache: 576 numbers\nper token and layer", ha="center")
    _arrow(ax, _right(latent), (30, 38))
    naive = _box(ax, 58, 40, 38, 9, "naive: $k = W^{UK} c$, $v = W^{UV} c$\nper head, every step", INK,
                 size=MIN_FONT_PT, fill=False)
    absorbed = _box(ax, 58, 18, 38, 11, "absorbed: score $= (W^{UK\\top} q_t)^\\top c_s$\n"
                                        "output $= W^{O} W^{UV} (\\sum_s a_s c_s)$", color, size=MIN_FONT_PT)
    _arrow(ax, (50, 30), _left(absorbed))
    _arrow(ax, (50, 34), _left(naive), dashed=True)
    _note(ax, 77, 10, "the up-projections fold into the query\nand the output: keys never materialise",
          ha="center")
    return fig


def draw_latent_moe():
    """Latent MoE: shared experts on x, routed top-k experts in a smaller latent space."""
    fig, ax = _canvas(66, "Latent MoE with shared experts")
    color = MECHANISM_COLORS["k3"]
    x = _box(ax, 40, 3, 20, 6, "token $x$ ($d$)")
    router = _box(ax, 70, 14, 26, 7, "router $r(x)$: top-$k$\nof $N$ experts", PALETTE["orange"],
                  size=MIN_FONT_PT)
    shared = _box(ax, 4, 26, 22, 8, "shared experts\n(every token)", PALETTE["green"])
    down = _box(ax, 38, 14, 24, 6, "$W_{down}$: $d \\to$ latent", color)
    _arrow(ax, _top(x), _bottom(down))
    _arrow(ax, _right(x), _left(router))
    _arrow(ax, _left(x), _bottom(shared))
    chosen = {1, 4}
    for index in range(6):
        ex = 32 + index * 6
        picked = index in chosen
        ax.add_patch(FancyBboxPatch((ex, 28), 4.6, 8, boxstyle="round,pad=0.1,rounding_size=0.8", linewidth=1.2,
                                    edgecolor=color, facecolor=_tint(color, 0.3 if picked else 0.88)))
        ax.text(ex + 2.3, 32, f"$E_{index + 1}$", ha="center", va="center", fontsize=MIN_FONT_PT)
        if picked:
            _arrow(ax, (50, 20), (ex + 2.3, 28))
    _note(ax, 70, 32, "... $N$ routed experts\n(SiTU-gated MLPs)")
    _arrow(ax, _top(router), (60, 36), "$p_e$", offset=(1.5, 0), dashed=True)
    up = _box(ax, 38, 42, 24, 6, "$W_{up}$: latent $\\to d$", color)
    _arrow(ax, (50, 36), _bottom(up))
    total = _box(ax, 34, 54, 32, 6, "$y = $ shared $+$ $W_{up} \\sum_{e} p_e E_e$", INK, fill=False)
    _arrow(ax, _top(up), _bottom(total))
    _arrow(ax, _top(shared), _left(total))
    return fig


def draw_attnres_block():
    """Attention Residuals: each sub-layer reads a softmax mix of block summaries, not a plain sum."""
    fig, ax = _canvas(60, "Attention Residuals: retrieval across depth")
    color = PALETTE["purple"]
    sources = ["embedding", "block 1", "block 2", "block 3 (partial)"]
    boxes = [_box(ax, 4 + index * 19, 9, 16, 7, name, color, size=MIN_FONT_PT) for index, name in enumerate(sources)]
    mix = _box(ax, 22, 26, 44, 8, "$h_l = \\sum_i \\mathrm{softmax}_i(w_l^\\top \\mathrm{RMSNorm}(b_i))\\; b_i$",
               color)
    for box in boxes:
        _arrow(ax, _top(box), (_top(box)[0] * 0.6 + 44 * 0.4, 26))
    layer = _box(ax, 30, 42, 28, 7, "sub-layer $l$\n(attention or MLP)", MECHANISM_COLORS["kda"])
    _arrow(ax, _top(mix), _bottom(layer))
    _arrow(ax, _right(layer), (74, 15))
    _note(ax, 70, 44, "output adds to\nthe current block", size=MIN_FONT_PT)
    _note(ax, 80, 23, "one learned query\n$w_l$ per sub-layer", size=MIN_FONT_PT)
    _note(ax, 50, 3, "plain residuals add every layer with weight 1; AttnRes chooses", ha="center")
    return fig


def draw_k3_stack():
    """The K3 stack: macrocycles of three KDA layers and one MLA layer, MoE feed-forwards, AttnRes."""
    fig, ax = _canvas(76, "Kimi K3: the whole stack")
    kda, mla = MECHANISM_COLORS["kda"], MECHANISM_COLORS["mla"]
    _box(ax, 30, 3, 40, 6, "token embedding (163,840 x 7,168)")
    y = 13
    cycle = [("KDA", kda), ("KDA", kda), ("KDA", kda), ("MLA", mla)]
    for index, (name, color) in enumerate(cycle):
        _box(ax, 22, y + index * 9, 24, 7, f"{name} mixer", color)
        _box(ax, 52, y + index * 9, 24, 7, "latent MoE + SiTU", PALETTE["green"],
             size=MIN_FONT_PT)
        _arrow(ax, (46, y + index * 9 + 3.5), (52, y + index * 9 + 3.5))
    ax.add_patch(Rectangle((18, y - 2), 62, 38, fill=False, linestyle="--", edgecolor=INK, linewidth=1))
    _note(ax, 82, y + 30, "x 23\nmacrocycles", size=LABEL_PT)
    _note(ax, 82, y + 15, "3 KDA : 1 MLA,\n69 + 24 layers;\nlayer 0 has a\ndense MLP", size=MIN_FONT_PT)
    _note(ax, 2, y + 17, "AttnRes:\nevery\nsub-layer\nreads the\nblock sums", size=MIN_FONT_PT)
    _box(ax, 30, 57, 40, 6, "final MLA layer, RMSNorm")
    _box(ax, 30, 66, 40, 5, "output head $\\rightarrow$ next-token logits")
    _arrow(ax, (50, 9), (50, 11))
    _arrow(ax, (50, 49), (50, 57))
    _arrow(ax, (50, 63), (50, 66))
    return fig


DIAGRAMS: dict[str, Callable[[], plt.Figure]] = {
    "gpt2_block": draw_gpt2_block,
    "linear_attention_state": draw_linear_attention_state,
    "delta_rule_update": draw_delta_rule_update,
    "chunk_tiling": draw_chunk_tiling,
    "gated_decay": draw_gated_decay,
    "kda_layer": draw_kda_layer,
    "mla_cache": draw_mla_cache,
    "latent_moe": draw_latent_moe,
    "attnres_block": draw_attnres_block,
    "k3_stack": draw_k3_stack,
}


def smallest_font_pt(fig) -> float:
    """The smallest font size of any text in ``fig`` (the readability check of the tests)."""
    return min(text.get_fontsize() for text in fig.findobj(matplotlib.text.Text) if text.get_text().strip())


def write_all(out_dir: Path = FIGURES_DIR, *, names=None, png: bool = True) -> list[Path]:
    """Draw the diagrams (all, or ``names``) into ``out_dir/diagram_<name>.svg`` (and ``.png``)."""
    names = list(DIAGRAMS) if names is None else list(names)
    unknown = [name for name in names if name not in DIAGRAMS]
    if unknown:
        raise ValueError(f"names must be among {sorted(DIAGRAMS)}, got unknown {unknown}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context({"svg.hashsalt": "k3lite", "svg.fonttype": "path", "mathtext.fontset": "dejavusans"}):
        for name in names:
            fig = DIAGRAMS[name]()
            path = out_dir / f"diagram_{name}.svg"
            fig.savefig(path, facecolor=CARD, metadata={"Date": None})
            written.append(path)
            if png:
                fig.savefig(out_dir / f"diagram_{name}.png", dpi=100, facecolor=CARD)
            plt.close(fig)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"diagrams to draw (default: all): {', '.join(DIAGRAMS)}")
    parser.add_argument("--out", type=Path, default=FIGURES_DIR)
    parser.add_argument("--no-png", action="store_true", help="write only the SVG files")
    args = parser.parse_args(argv)
    for path in write_all(args.out, names=args.names or None, png=not args.no_png):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
