"""The report's figures as a person reads them on the page: no wider than the page, Figure 5d
wrapped into a panel per device count, a step's parts as shares beside its milliseconds, the
points that must not be read plainly (SUSPECT, contended) ringed, an unbounded interval drawn as
an arrow, long model paths wrapped in titles that never meet."""
import itertools

import numpy as np
import pytest
from matplotlib.container import BarContainer

from tests.report_fixtures import SHARES, harmonic, make_row, repeated, write_rows
from tests.test_report_figures import (
    REPEATS,
    corners,
    drawn_figures,
    drawn_texts,
    overlap,
    relabelled,
)
from xbench.common.backends.traits import TRAITS
from xbench.common.measuring.attribution import PARTS
from xbench.common.results.store import read_rows
from xbench.reports.page.pages import png_width
from xbench.reports.rendering.figures import CONTENDED, MARKS, SUSPECT, render
from xbench.reports.sections.data import Options, ReportData
from xbench.reports.sections.rates import EPOCH1

PAGE = 1368  # px: the page's width (1,400) less its padding
LONG = ["examples/models/a_rather_long_directory_name/transformer_language_model.py",
        "examples/models/another_long_directory_name/vision_transformer_model.py"]


def as_model(rows: list[dict], model: str) -> list[dict]:
    """Hand-made rows of the model 'small' as rows of a model file at `model`."""
    for row in rows:
        row["cell_key"] = row["cell_key"].replace("|small|", f"|{model}|")
        row["model"] = model
    return rows


def marked_rows() -> list[dict]:
    """Per long model path: pt-ddp scaling plausibly (no mark); tf-mirrored on 1 device in two
    runs 100x apart (its rate's interval unbounded above), on 2 devices in contended runs at
    about 8x that: beyond what 2 devices can give, so both its cells are SUSPECT."""
    rows = []
    for model in LONG:
        rows += as_model([
            *repeated("pt-ddp", 1, (100, 110, 90)), *repeated("pt-ddp", 2, (180, 190, 185)),
            *repeated("tf-mirrored", 1, (10, 1000), framework="tensorflow"),
            *repeated("tf-mirrored", 2, (150, 160), contended=True, framework="tensorflow")],
            model)
    return rows


def rings(ax) -> dict[str, list[tuple[float, float]]]:
    """{mark: the points it rings} in one panel."""
    found = {}
    for ring in (c for c in ax.collections if c.get_label() in MARKS):
        found.setdefault(ring.get_label(), []).extend(map(tuple, np.round(ring.get_offsets(), 1)))
    return {label: sorted(points) for label, points in found.items()}


def test_suspect_and_contended_points_are_ringed_and_an_unbounded_interval_is_an_arrow(
        tmp_path):
    data = ReportData(Options((write_rows(tmp_path / "marked.jsonl", marked_rows()),),
                              include_contended=True))
    figures = {figure.name: figure for figure in drawn_figures(data)}
    rates = figures["fig5a_rate_vs_devices"]
    tf_1, tf_2 = harmonic(10, 1000), harmonic(150, 160)
    for ax, model in zip(rates.drawing.axes, LONG, strict=True):
        assert ax.get_title().replace("\n", "") == f"model: {model}"
        assert rings(ax) == {SUSPECT: [(1.0, round(tf_1, 1)), (2.0, round(tf_2, 1))],
                             CONTENDED: [(2.0, round(tf_2, 1))]}
        arrows = [(a.xy, a.xyann) for a in ax.texts if a.arrow_patch is not None]
        assert arrows == [((1, 1.0), (1, pytest.approx(tf_1)))]  # up to the panel's top
    assert "drawn as a dashed arrow to the panel's edge) at: tf-mirrored, 1 device" in (
        rates.caption)
    legend = [t.get_text() for t in rates.drawing.legends[0].get_texts()]
    assert legend == [SUSPECT, CONTENDED, "pt-ddp", "tf-mirrored"]
    bars = figures["fig5d_epoch1_vs_epoch2"].drawing.axes
    assert [rings(ax) for ax in bars] == [  # each epoch's bar of tf-mirrored ringed
        {SUSPECT: [(0.8, round(tf_1, 1)), (1.2, round(tf_1, 1))]},
        {SUSPECT: [(0.8, round(tf_2, 1)), (1.2, round(tf_2, 1))],
         CONTENDED: [(0.8, round(tf_2, 1)), (1.2, round(tf_2, 1))]}]
    found = []
    for name, figure in figures.items():  # the long paths wrapped: no word on another
        texts = drawn_texts(figure.drawing)
        renderer = figure.drawing.canvas.get_renderer()
        boxes = [(t.get_text(), corners(t, renderer)) for t in texts]
        found += [f"{name}: {a!r} on {b!r}" for (a, box_a), (b, box_b)
                  in itertools.combinations(boxes, 2) if overlap(box_a, box_b) > 1]
        assert png_width(render(figure.drawing, "png")) <= PAGE, name
    assert not found, "\n".join(found)


def test_figure_5d_of_every_backend_wraps_a_panel_per_device_count_within_the_page(tmp_path):
    """Every backend on 1 and 2 devices (recorded rows relabelled): a panel per device count,
    a bar pair per backend in each, one legend entry per backend and one for the hatching, and
    the whole no wider than the page (it was 3,131 px wide, its legend unreadable there)."""
    rows = [row for row in read_rows(REPEATS)[0] if row["backend"] == "pt-ddp"]
    two = [{**row, "devices": 2, "world_size": 2,
            "cell_key": row["cell_key"].replace("|d1|", "|d2|")} for row in rows]
    path = write_rows(tmp_path / "every.jsonl", relabelled(rows + two, list(TRAITS)))
    [bars] = [f for f in drawn_figures(ReportData(Options((path,), include_contended=True)))
              if f.name == "fig5d_epoch1_vs_epoch2"]
    axes = [ax for ax in bars.drawing.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["1 device", "2 devices"]
    for ax in axes:
        drawn = [c for c in ax.containers if isinstance(c, BarContainer)]
        assert len(drawn) == 2 * len(TRAITS)  # epoch 1 and epoch 2 of each
        assert [t.get_text() for t in ax.get_xticklabels()] == list(TRAITS)
    legend = [t.get_text() for t in bars.drawing.legends[0].get_texts()]
    assert sorted(set(legend) - {CONTENDED}) == sorted([EPOCH1, *TRAITS])  # as recorded
    assert png_width(render(bars.drawing, "png")) <= PAGE


def test_a_long_step_does_not_hide_how_the_other_cells_steps_split(tmp_path):
    """One cell's step 2.6 s, the others' 32 ms: in ms the short ones are slivers; beside them,
    every cell's parts as shares of its own step, each bar 100%, each part its share."""
    rows = [make_row(backend="pt-ddp", rates=(49.2, 49.2)),
            make_row(backend="pt-single", rates=(4000, 4000)),
            make_row(backend="tf-single", rates=(4000, 4000), framework="tensorflow")]
    path = write_rows(tmp_path / "steps.jsonl", rows)
    [parts] = [f for f in drawn_figures(ReportData(Options((path,)))) if f.name == "step_parts"]
    in_ms, shares = parts.drawing.axes[:2]

    def stacks(ax) -> np.ndarray:
        """Per cell (column), each part's height (row), in PARTS' order."""
        return np.array([[p.get_height() for p in c.patches] for c in ax.containers
                         if isinstance(c, BarContainer) and c.get_label() in PARTS])
    assert stacks(in_ms).sum(axis=0).max() > 50 * stacks(in_ms).sum(axis=0).min()
    assert stacks(shares).sum(axis=0) == pytest.approx([100] * 3)
    forward = stacks(shares)[PARTS.index("forward")]
    assert forward == pytest.approx([SHARES["forward"] * 100] * 3, abs=1)
    assert "right as shares of the cell's own step" in parts.caption
