"""ipywidgets explorers for the chapters, each with a static counterpart for the book.

A widget needs a live kernel; the book and the slides do not have one. So every explorer here is
one drawing function used twice: behind sliders (``*_explorer``) and as a fixed grid of the same
panel for chosen slider positions (``*_grid``).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from k3lite.course import flops
from k3lite.course.viz import MECHANISM_COLORS, PALETTE

# ------------------------------------------------------------------ chunk size: state vs intra-chunk FLOPs

def chunk_flop_split(seq_len: int, chunk_size: int, head_dim: int) -> flops.Split:
    """FLOPs per head of chunked linear attention, ``(state, intra)`` = ``(4·L·d², 4·L·C·d)``.

    Counted by :func:`k3lite.course.flops.linear_attention_chunked` (2 FLOPs per multiply-add; the seed
    article's ``2Ld²`` and ``2LCd`` are the same counts in multiply-adds). The state part does not
    depend on ``C``; the intra-chunk part grows with it. ``C = L`` makes the intra part dense full
    attention, ``4·L²·d``; ``C = 1`` is the token-by-token recurrence.
    """
    for name, value in (("seq_len", seq_len), ("chunk_size", chunk_size), ("head_dim", head_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if chunk_size > seq_len:
        raise ValueError(f"chunk_size must be in [1, seq_len={seq_len}], got {chunk_size}")
    return flops.linear_attention_chunked(seq_len, head_dim, chunk_size)


def _powers_of_two_up_to(n: int) -> list[int]:
    return [2 ** i for i in range(int(math.log2(n)) + 1)]


def draw_chunk_flops(ax, *, seq_len: int, chunk_size: int, head_dim: int = 128) -> tuple[int, int]:
    """One panel: both FLOP parts against C (log-log), the chosen C marked, full attention for scale.

    Returns the split ``(state, intra)`` at ``chunk_size``.
    """
    state, intra = chunk_flop_split(seq_len, chunk_size, head_dim)
    sizes = _powers_of_two_up_to(seq_len)
    parts = [chunk_flop_split(seq_len, c, head_dim) for c in sizes]
    ax.plot(sizes, [s for s, _ in parts], color=MECHANISM_COLORS["linear_attention"], label="state  4Ld²")
    ax.plot(sizes, [i for _, i in parts], color=PALETTE["orange"], label="intra-chunk  4LCd")
    ax.plot(sizes, [s + i for s, i in parts], color=PALETTE["black"], linestyle=":", label="total")
    ax.axhline(flops.full_attention(seq_len, head_dim), color=MECHANISM_COLORS["softmax"], linestyle="--",
               linewidth=1.2, label="full attention  4L²d")
    ax.plot([chunk_size], [state + intra], marker="o", markersize=8, color=PALETTE["red"], linestyle="none")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("chunk size C (tokens)")
    ax.set_ylabel("FLOPs per head")
    share = intra / (state + intra)
    ax.set_title(f"L={seq_len}, d={head_dim}, C={chunk_size}: {share:.0%} intra-chunk", fontsize=10)
    return state, intra


def chunk_flops_explorer(head_dim: int = 128, max_log2_seq_len: int = 16):
    """Sliders over log2 C and log2 L (and d) redrawing :func:`draw_chunk_flops`; returns the widget."""
    import ipywidgets as widgets

    def show(log2_seq_len: int, log2_chunk_size: int, head_dim: int):
        seq_len = 2 ** log2_seq_len
        chunk_size = 2 ** min(log2_chunk_size, log2_seq_len)  # C cannot exceed L
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        state, intra = draw_chunk_flops(ax, seq_len=seq_len, chunk_size=chunk_size, head_dim=head_dim)
        ax.legend(loc="upper left", fontsize=8)
        plt.show()
        print(f"state {state / 1e9:.3f} GFLOP + intra-chunk {intra / 1e9:.3f} GFLOP per head "
              f"(full attention {flops.full_attention(seq_len, head_dim) / 1e9:.3f} GFLOP)")

    return widgets.interactive(
        show,
        log2_seq_len=widgets.IntSlider(value=12, min=4, max=max_log2_seq_len, description="log2 L"),
        log2_chunk_size=widgets.IntSlider(value=6, min=0, max=max_log2_seq_len, description="log2 C"),
        head_dim=widgets.Dropdown(options=[32, 64, 128, 256], value=head_dim, description="d"),
    )


def chunk_flops_grid(seq_lens=(1024, 65536), chunk_sizes=(1, 64, 1024), head_dim: int = 128):
    """The explorer's panel for every (L, C) pair: rows are sequence lengths, columns chunk sizes.

    Pairs with ``C > L`` are left empty. Returns the figure.
    """
    if not seq_lens or not chunk_sizes:
        raise ValueError("seq_lens and chunk_sizes must each name at least one value")
    fig, axes = plt.subplots(len(seq_lens), len(chunk_sizes), squeeze=False,
                             figsize=(3.6 * len(chunk_sizes), 3.0 * len(seq_lens)), sharey="row")
    for row, seq_len in enumerate(seq_lens):
        for col, chunk_size in enumerate(chunk_sizes):
            ax = axes[row][col]
            if chunk_size > seq_len:
                ax.set_axis_off()
                continue
            draw_chunk_flops(ax, seq_len=seq_len, chunk_size=chunk_size, head_dim=head_dim)
            if col:
                ax.set_ylabel("")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("FLOPs per head of chunked linear attention: state vs intra-chunk")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
