"""`xbench report`'s figures a person can read: what an error bar cannot show is said once in the
caption, and no two words of a figure lie on each other."""
import itertools
import math

import matplotlib.text
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from xbench.reports.data import Options, ReportData
from xbench.reports.figures import interval_kinds, interval_note, lines
from xbench.reports.sections import SECTIONS
from xbench.reports.stats import Ratio
from xbench.reports.verdict import interval_text


def speedups(*ratios):
    """pt-ddp's speedups on 2, 4, ... devices, one Ratio each."""
    count = len(ratios)
    return pd.DataFrame({"series": ["pt-ddp"] * count, "backend": ["pt-ddp"] * count,
                         "env": ["A"] * count, "dataset": ["mnist"] * count,
                         "devices": [2 ** (i + 1) for i in range(count)],
                         "speedup": [r.value for r in ratios], "speedup_ratio": list(ratios)})


def test_an_unbounded_interval_is_said_in_the_caption_and_printed_as_unbounded():
    """Fieller's interval is unbounded where the denominator's runs do not bound it: the figure
    draws the point plainly and its caption names it, once; the text prints ∞ (a missing error
    bar would look like certainty). Where no point has an interval, the caption says so."""
    unbounded, bounded = Ratio(1.2, -math.inf, math.inf, (3, 3)), Ratio(1.9, 1.7, 2.1, (3, 3))
    ax = Figure().subplots()
    drawn = lines(ax, speedups(unbounded, bounded), "devices", "speedup", "devices", "speedup",
                  panel="speedup")
    assert not [line for line in ax.lines if line.get_linestyle() == ":"] and not ax.texts
    assert interval_note(drawn) == (" 95% CI unbounded (the runs allow any value) at: pt-ddp, "
                                    "2 devices (speedup).")
    one_run = [Ratio(value, math.nan, math.nan, (1, 1)) for value in (1.2, 1.9)]
    assert interval_note(lines(Figure().subplots(), speedups(*one_run), "devices", "speedup",
                               "devices", "speedup")) == " Every point: one run, so no interval."
    assert interval_note(lines(Figure().subplots(), speedups(bounded), "devices", "speedup",
                               "devices", "speedup")) == ""
    assert interval_text(unbounded) == "1.20× [−∞, ∞], unbounded"
    assert interval_text(bounded) == "1.90× [1.70, 2.10]"


def test_a_rate_of_one_run_has_no_interval_and_an_unbounded_one_is_named():
    """One run's rate has no lower bound and an open upper one: no interval, not an unbounded
    one; repeats whose interval of the time reaches 0 bound the rate below only: unbounded."""
    rates = pd.DataFrame({"epoch2_rate": [100.0, 100.0, 100.0],
                          "epoch2_rate_low": [math.nan, 50.0, 90.0],
                          "epoch2_rate_high": [math.inf, math.inf, 110.0]})
    assert interval_kinds(rates, "epoch2_rate") == ["none", "unbounded", "bounded"]


def drawn_texts(figure: Figure) -> list[matplotlib.text.Text]:
    """The visible, non-empty text artists drawn when `figure` renders (tick labels, legend
    entries, titles, annotations: whatever the renderer draws, and only that)."""
    drawn, draw = [], matplotlib.text.Text.draw

    def recorded(text, renderer):
        if text.get_visible() and text.get_text().strip():
            drawn.append(text)
        return draw(text, renderer)
    matplotlib.text.Text.draw = recorded
    try:
        FigureCanvasAgg(figure).draw()
    finally:
        matplotlib.text.Text.draw = draw
    return drawn


def corners(text: matplotlib.text.Text, renderer) -> np.ndarray:
    """The four corners of a text's box as drawn, turned by its rotation (pixels): its window
    extent is the upright box around them, centred on the same point."""
    around, angle = text.get_window_extent(renderer), text.get_rotation()
    text.set_rotation(0)
    upright = text.get_window_extent(renderer)
    text.set_rotation(angle)
    turn = np.deg2rad(angle)
    rotation = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [upright.width / 2,
                                                            upright.height / 2]
    return np.array([(around.x0 + around.x1) / 2, (around.y0 + around.y1) / 2]) + half @ rotation.T


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """How far two boxes (corners) overlap, in pixels: the least overlap of their shadows on the
    directions of their sides (separating axes); 0 or less where they are apart."""
    least = math.inf
    for box in (a, b):
        for side in (box[1] - box[0], box[3] - box[0]):
            direction = side / np.linalg.norm(side)
            on_a, on_b = a @ direction, b @ direction
            least = min(least, min(on_a.max(), on_b.max()) - max(on_a.min(), on_b.min()))
    return least


def test_no_text_of_a_figure_lies_on_another(smoke):
    """Every figure of the smoke grid's report (real rows: every backend, one run per cell,
    drawn as `xbench report` draws them): no two of its texts overlap by more than a pixel,
    tick labels and legend entries included."""
    # contended runs too: a busy machine marks runs contended, which would leave nothing drawn
    data = ReportData(Options((smoke.results,), include_contended=True))
    drawn = {}
    for section in (s for s in SECTIONS if s.shown(data.options)):
        for figure in section.figures:
            made = figure.make(data)
            if not isinstance(made, str):
                drawn[figure.name] = made[1]
    assert {"fig5a_rate_vs_devices", "fig5d_epoch1_vs_epoch2", "scaling", "step_parts",
            "accuracy", "memory", "overhead"} <= set(drawn)
    found = []
    for name, figure in drawn.items():
        texts = drawn_texts(figure)
        renderer = figure.canvas.get_renderer()
        boxes = [(text.get_text(), corners(text, renderer)) for text in texts]
        found += [f"{name}: {a!r} on {b!r} ({depth:.0f} px)"
                  for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2)
                  if (depth := overlap(box_a, box_b)) > 1]
    assert not found, "\n".join(found)
