"""One plot style for every chapter.

Figures are drawn on an opaque off-white card with dark text, so they stay readable when a page
(JupyterLab, the book site, slides) uses a light or a dark theme; colours come from the
Okabe-Ito palette, which colour-blind readers can tell apart.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "red": "#D55E00",
    "purple": "#CC79A7",
    "sky": "#56B4E9",
    "yellow": "#F0E442",
    "black": "#222222",
}
CYCLE = [PALETTE[c] for c in ("blue", "orange", "green", "red", "purple", "sky", "black")]

# One colour per mechanism, used the same way in every chapter.
MECHANISM_COLORS = {
    "softmax": PALETTE["black"],
    "linear_attention": PALETTE["sky"],
    "delta_rule": PALETTE["orange"],
    "gated_delta_rule": PALETTE["green"],
    "kda": PALETTE["blue"],
    "mla": PALETTE["purple"],
    "gpt2": PALETTE["red"],
    "k3": PALETTE["blue"],
}

CARD = "#FAFAF7"
INK = "#1A1A1A"

STYLE = {
    "figure.facecolor": CARD,
    "axes.facecolor": CARD,
    "savefig.facecolor": CARD,
    "savefig.bbox": "tight",
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "figure.figsize": (6.4, 4.0),
    "axes.edgecolor": INK,
    "axes.labelcolor": INK,
    "axes.titlecolor": INK,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "axes.grid": True,
    "grid.color": "#BBBBBB",
    "grid.alpha": 0.5,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": mpl.cycler(color=CYCLE),
    "xtick.color": INK,
    "ytick.color": INK,
    "text.color": INK,
    "legend.frameon": False,
    "font.size": 10,
    "lines.linewidth": 2.0,
    "image.cmap": "viridis",
}

REPO_ROOT = Path(__file__).resolve().parents[2]
FIGURES_DIR = REPO_ROOT / "figures"
# Benchmark results live beside the package (benchmarks/), as the reference library keeps them; chapters read them.
BENCH_RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
BENCH_ARCHIVE_DIR = REPO_ROOT / "benchmarks" / "archive"


def archived_measurement(name: str) -> dict:
    """An archived benchmark file, by the name ``benchmarks/archive/index.json`` gives what it measured (the
    dated file names stay in the archive, where the run history belongs)."""
    import json

    index = json.loads((BENCH_ARCHIVE_DIR / "index.json").read_text())
    names = sorted(key for key in index if key != "about")
    if name not in names:
        raise ValueError(f"name must be one of {names} (benchmarks/archive/index.json), got {name!r}")
    return json.loads((BENCH_ARCHIVE_DIR / index[name]["file"]).read_text())


def use_style() -> None:
    """Apply the course style to matplotlib (call once at the top of a chapter)."""
    mpl.rcParams.update(STYLE)


def diverging_cmap() -> str:
    """The colormap for signed matrices (weights, states, errors): centre it with ``vmin=-vmax``."""
    return "RdBu_r"


def save(fig, name: str) -> Path:
    """Save ``fig`` as ``figures/<name>.png`` (the book and the README link these files)."""
    FIGURES_DIR.mkdir(exist_ok=True)
    path = FIGURES_DIR / f"{name}.png"
    fig.savefig(path)
    return path


def heatmap(ax, matrix, *, title: str, xlabel: str, ylabel: str, signed: bool = False,
            colorbar_label: str | None = None):
    """Draw a labelled heatmap of a 2-D tensor or array on ``ax``; return the image."""
    data = matrix.detach().cpu().numpy() if hasattr(matrix, "detach") else matrix
    kwargs = {}
    if signed:
        vmax = float(abs(data).max()) or 1.0
        kwargs = {"cmap": diverging_cmap(), "vmin": -vmax, "vmax": vmax}
    image = ax.imshow(data, aspect="auto", interpolation="nearest", **kwargs)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    bar = plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    if colorbar_label:
        bar.set_label(colorbar_label)
    return image


def grouped_barh(ax, categories, series, *, group_height: float = 0.8):
    """Horizontal bars, one group per category (top to bottom in the order given), one bar per series inside
    a group (first series on top). ``series``: (label, values, colour) with one value per category."""
    ys = list(range(len(categories)))[::-1]
    height = group_height / len(series)
    for i, (label, values, color) in enumerate(series):
        offset = group_height / 2 - (i + 0.5) * height
        ax.barh([y + offset for y in ys], values, height=height, color=color, alpha=0.85, label=label)
    ax.set_yticks(ys, categories)
