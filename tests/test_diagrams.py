"""k3lite.course.diagrams: each mechanism's diagram draws, with readable labels, into SVG (and PNG)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree

import matplotlib.pyplot as plt
import pytest

from k3lite.course import diagrams

MECHANISMS = ["gpt2_block", "linear_attention_state", "delta_rule_update", "chunk_tiling", "gated_decay",
              "kda_layer", "mla_cache", "latent_moe", "attnres_block", "k3_stack"]


def test_every_mechanism_has_a_diagram():
    assert list(diagrams.DIAGRAMS) == MECHANISMS


@pytest.mark.parametrize("name", MECHANISMS)
def test_diagram_draws_with_labels_of_at_least_10pt(name):
    fig = diagrams.DIAGRAMS[name]()
    try:
        texts = [text for text in fig.findobj(plt.Text) if text.get_text().strip()]
        assert len(texts) >= 4, f"{name}: only {len(texts)} labels"
        assert diagrams.smallest_font_pt(fig) >= diagrams.MIN_FONT_PT
        width_in, _ = fig.get_size_inches()
        # At the book's column (about 700 px) a 10 pt label of a 7.5 in wide figure is >= 12 px.
        assert width_in <= diagrams.WIDTH_IN
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        figure_box = fig.bbox
        for text in texts:  # no label runs off the canvas
            box = text.get_window_extent(renderer)
            assert box.x0 >= figure_box.x0 - 1 and box.x1 <= figure_box.x1 + 1, (
                f"{name}: {text.get_text()!r} leaves the figure")
    finally:
        plt.close(fig)


def test_write_all_writes_svg_and_png(tmp_path):
    written = diagrams.write_all(tmp_path, names=["delta_rule_update", "k3_stack"])
    assert [path.name for path in written] == ["diagram_delta_rule_update.svg", "diagram_k3_stack.svg"]
    for path in written:
        root = ElementTree.parse(path).getroot()
        assert root.tag.endswith("svg")
        assert path.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_all_is_deterministic(tmp_path):
    first = diagrams.write_all(tmp_path / "a", names=["gated_decay"], png=False)[0].read_bytes()
    second = diagrams.write_all(tmp_path / "b", names=["gated_decay"], png=False)[0].read_bytes()
    assert first == second


def test_unknown_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="names must be among"):
        diagrams.write_all(tmp_path, names=["transformer"])
