"""k3lite.course.widgets: the numbers behind the chunk-size explorer, its static grid, and the widget itself."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from k3lite.course import flops, widgets


def test_split_is_state_plus_intra_chunk():
    split = widgets.chunk_flop_split(4096, 64, 128)
    assert split.state == 4 * 4096 * 128 ** 2
    assert split.intra == 4 * 4096 * 64 * 128


def test_split_limits():
    # C = L: the intra-chunk part is dense full attention; C = 1: it is 4Ld, tiny next to the state.
    assert widgets.chunk_flop_split(512, 512, 64).intra == flops.full_attention(512, 64)
    assert widgets.chunk_flop_split(512, 1, 64).intra == 4 * 512 * 64
    # the state part does not depend on C
    assert len({widgets.chunk_flop_split(512, c, 64).state for c in (1, 8, 64, 512)}) == 1


@pytest.mark.parametrize("args, name", [((0, 1, 64), "seq_len"), ((64, 0, 64), "chunk_size"),
                                        ((64, 128, 64), "chunk_size"), ((64, 8, -1), "head_dim"),
                                        ((64.0, 8, 64), "seq_len"), ((64, True, 64), "chunk_size")])
def test_split_rejects_bad_sizes(args, name):
    with pytest.raises(ValueError, match=name):
        widgets.chunk_flop_split(*args)


def test_panel_marks_the_chosen_chunk_size():
    fig, ax = plt.subplots()
    state, intra = widgets.draw_chunk_flops(ax, seq_len=1024, chunk_size=64, head_dim=128)
    marker = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(marker) == 1
    assert list(marker[0].get_xdata()) == [64] and list(marker[0].get_ydata()) == [state + intra]
    assert "C=64" in ax.get_title() and "33%" in ax.get_title()
    assert ax.get_xlabel() and ax.get_ylabel()
    plt.close(fig)


def test_grid_has_one_panel_per_pair_and_blanks_impossible_ones():
    fig = widgets.chunk_flops_grid(seq_lens=(256, 4096), chunk_sizes=(1, 1024), head_dim=64)
    axes = fig.axes
    assert len(axes) == 4
    titles = [ax.get_title() for ax in axes]
    assert titles[0].startswith("L=256") and "C=1:" in titles[0]
    assert titles[1] == ""  # C = 1024 > L = 256 cannot be drawn
    assert not axes[1].axison
    assert titles[3].startswith("L=4096") and "C=1024" in titles[3]
    plt.close(fig)


def test_grid_rejects_empty_lists():
    with pytest.raises(ValueError, match="seq_lens"):
        widgets.chunk_flops_grid(seq_lens=(), chunk_sizes=(1,))


def test_explorer_is_an_interactive_widget_over_the_same_panel(capsys):
    ipywidgets = pytest.importorskip("ipywidgets")
    explorer = widgets.chunk_flops_explorer(head_dim=64, max_log2_seq_len=12)
    assert isinstance(explorer, ipywidgets.interactive)
    sliders = {child.description: child for child in explorer.children if hasattr(child, "description")}
    assert {"log2 L", "log2 C", "d"} <= set(sliders)
    assert sliders["d"].value == 64 and sliders["log2 L"].max == 12
    capsys.readouterr()  # forget the first drawing, made when the widget was built
    # a chunk larger than the sequence is clamped to C = L instead of failing
    sliders["log2 L"].value = 5
    sliders["log2 C"].value = 9
    explorer.update()
    assert "full attention" in capsys.readouterr().out
    plt.close("all")
