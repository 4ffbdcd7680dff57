"""`xbench report`'s figures a person can read: every backend drawn apart from every other and
alike in every figure, what a figure left out and what an error bar cannot show said once in its
caption, and no two words of a figure lie on each other."""
import colorsys
import copy
import itertools
import json
import math

import matplotlib.text
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgb
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure

from tests.helpers import REPO
from xbench.common.backends.traits import TRAITS
from xbench.common.results.store import read_rows
from xbench.reports.judging.verdict import interval_text
from xbench.reports.numbers.stats import Ratio
from xbench.reports.rendering.figures import (
    interval_kinds,
    interval_note,
    left_out,
    lines,
    look,
    series_style,
)
from xbench.reports.sections import SECTIONS
from xbench.reports.sections.data import Options, ReportData
from xbench.reports.sections.section import ShownFigure, walk

REPEATS = REPO / "tests" / "data" / "repeats.jsonl"  # pt-single and pt-ddp, 3 repeats each
UNREGISTERED = "a-backend-of-another-xbench"


def speedups(*ratios):
    """pt-ddp's speedups on 2, 4, ... devices, one Ratio each."""
    count = len(ratios)
    return pd.DataFrame({"series": ["pt-ddp"] * count, "backend": ["pt-ddp"] * count,
                         "env": ["A"] * count, "dataset": ["mnist"] * count, "nodes": [1] * count,
                         "devices": [2 ** (i + 1) for i in range(count)],
                         "speedup": [r.value for r in ratios], "speedup_ratio": list(ratios)})


def test_an_unbounded_interval_is_said_in_the_caption_and_printed_as_unbounded():
    """Fieller's interval is unbounded where the denominator's runs do not bound it: the figure
    draws it as open, an arrow from the point to each edge of the panel (a lone cap would look
    bounded), and its caption names it, once; the text prints ∞ (a missing error bar would look
    like certainty). Where no point has an interval, the caption says so."""
    unbounded, bounded = Ratio(1.2, -math.inf, math.inf, (3, 3)), Ratio(1.9, 1.7, 2.1, (3, 3))
    ax = Figure().subplots()
    drawn = lines(ax, speedups(unbounded, bounded), "devices", "speedup", "devices", "speedup",
                  panel="speedup")
    assert [(a.xy, a.xyann) for a in ax.texts if a.arrow_patch] == [((2, 0.0), (2, 1.2)),
                                                                    ((2, 1.0), (2, 1.2))]
    assert interval_note(drawn) == (" 95% CI unbounded (the runs allow any value; drawn as a "
                                    "dashed arrow to the panel's edge) at: pt-ddp, 2 devices "
                                    "(speedup).")
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


def hue(color: str) -> float:
    """A colour's hue, in degrees."""
    return colorsys.rgb_to_hls(*to_rgb(color))[0] * 360


def hue_apart(a: str, b: str) -> float:
    """How far apart two colours' hues are around the colour wheel, in degrees."""
    gap = abs(hue(a) - hue(b)) % 360
    return min(gap, 360 - gap)


def test_each_backend_has_a_look_of_its_own_from_its_traits():
    """A colour per backend, its framework's family (the hues of one framework's backends lie
    closer together than any two frameworks'), a marker per wrapper (shared where the traits
    share one: Horovod's); a backend the table does not hold gets a look no registered backend
    has, the same every time."""
    looks = {name: look(name) for name in TRAITS}
    assert len({drawn.color for drawn in looks.values()}) == len(TRAITS)
    for a, b in itertools.combinations(TRAITS.values(), 2):
        assert (looks[a.name].marker == looks[b.name].marker) == (a.wrapper == b.wrapper)
    by_framework = {}
    for traits in TRAITS.values():
        by_framework.setdefault(traits.framework.name, []).append(looks[traits.name].color)
    within = max(hue_apart(a, b) for colors in by_framework.values()
                 for a, b in itertools.combinations(colors, 2))
    between = min(hue_apart(a, b) for one, other in itertools.combinations(by_framework.values(), 2)
                  for a in one for b in other)
    assert within < between, (within, between)
    unregistered = look(UNREGISTERED)
    assert unregistered == look(UNREGISTERED)
    assert unregistered.color not in {drawn.color for drawn in looks.values()}
    assert unregistered.marker not in {drawn.marker for drawn in looks.values()}


def test_no_two_series_are_drawn_alike():
    """Every backend on real and synthetic data, in two environments, on one node and two: each
    series' colour, marker, fill, line style and width together differ from every other's."""
    styles = [series_style(backend, synthetic, env, nodes)
              for backend in [*TRAITS, UNREGISTERED] for synthetic in (False, True)
              for env in ("A", "B") for nodes in (1, 2)]
    assert len({tuple(sorted(style.items())) for style in styles}) == len(styles)


def relabelled(rows: list[dict], backends: list[str]) -> list[dict]:
    """Recorded rows of one backend, copied for each of `backends`: each copy its own cell."""
    copies = []
    for backend in backends:
        for row in rows:
            copied = copy.deepcopy(row)
            copied["backend"] = backend
            if backend in TRAITS:
                copied["framework"] = TRAITS[backend].framework.name
            copied["cell_key"] = row["cell_key"].replace(row["backend"], backend, 1)
            copies.append(copied)
    return copies


def report_of(rows: list[dict], path, include_contended=False) -> ReportData:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return ReportData(Options((path,), include_contended=include_contended))


def drawn_figures(data: ReportData) -> list[ShownFigure]:
    """The figures a report of `data` draws, with their captions."""
    return [figure for section in SECTIONS if section.shown(data.options)
            for figure in walk(section, data, draw=True).figures if figure.drawing]


def drawn_series(figure: Figure) -> dict[str, tuple]:
    """{label: (colour, marker, fill, line style)} of every labelled line or bar a figure drew,
    read from its artists (a bar has no marker nor line)."""
    found = {}
    for ax in figure.axes:
        for container in ax.containers:
            if isinstance(container, ErrorbarContainer) and container.lines[0]:  # not a bar's
                line = container.lines[0]
                found[container.get_label()] = (to_hex(line.get_color()), line.get_marker(),
                                                line.get_fillstyle(), line.get_linestyle())
            elif isinstance(container, BarContainer) and container.get_label():
                found[container.get_label()] = (to_hex(container.patches[0].get_facecolor()),)
        for line in ax.get_lines():
            if not line.get_label().startswith("_"):
                found[line.get_label()] = (to_hex(line.get_color()), line.get_marker(),
                                           line.get_fillstyle(), line.get_linestyle())
    return found


def test_a_figure_of_every_backend_draws_each_apart_and_alike_in_every_figure(tmp_path):
    """Recorded rows (pt-ddp's three repeats) as every backend's and one the table does not
    hold: Figure 5d's bars and the accuracy figure's lines draw each in a colour (and a marker)
    of its own, and the same one in both."""
    rows = [row for row in read_rows(REPEATS)[0] if row["backend"] == "pt-ddp"]
    backends = [*TRAITS, UNREGISTERED]
    data = report_of(relabelled(rows, backends), tmp_path / "every.jsonl",
                     include_contended=True)
    drawn = {figure.name: drawn_series(figure.drawing) for figure in drawn_figures(data)}
    bars = {label: style for label, style in drawn["fig5d_epoch1_vs_epoch2"].items()
            if label in backends}  # epoch 2's bars; epoch 1's (hatched) unlabelled
    lines_drawn = {label: style for label, style in drawn["accuracy"].items()
                   if label in backends}
    assert set(bars) == set(lines_drawn) == set(backends)
    assert len(set(bars.values())) == len(set(lines_drawn.values())) == len(backends)
    for backend in backends:
        assert bars[backend] == lines_drawn[backend][:1] == (look(backend).color,)
        assert lines_drawn[backend][1:] == (look(backend).marker, "full", "-")


def test_figure_5a_of_the_smoke_grid_draws_every_backend_apart(smoke):
    """The smoke grid's rows (every backend, real): Figure 5a draws one line per backend, no two
    alike, each as every other figure that draws it draws it."""
    data = ReportData(Options((smoke.results,), include_contended=True))
    drawn = {figure.name: drawn_series(figure.drawing) for figure in drawn_figures(data)}
    rates = drawn["fig5a_rate_vs_devices"]
    assert set(rates) == set(TRAITS) and len(set(rates.values())) == len(TRAITS)
    for series in drawn.values():
        for label, style in series.items():
            backend = label.removesuffix(", epoch 1").removesuffix(", epoch 2")
            if backend in rates:
                assert style == rates[backend][:len(style)], (label, style, rates[backend])


def test_every_figure_says_which_runs_it_left_out(tmp_path):
    """Recorded rows, 5 of 6 marked contended (whatever the recording's machine was doing):
    every figure drawn says it left those 5 out, and none says it left anything out when they
    are included. pt-ddp's runs given an injected fault: the figures that compare backends draw
    none of them, and say so."""
    rows = read_rows(REPEATS)[0]
    mixed = [{**row, "contended": index > 0} for index, row in enumerate(rows)]
    figures = drawn_figures(report_of(mixed, tmp_path / "mixed.jsonl"))
    assert figures and all(figure.caption.endswith(" Left out: 5 contended runs.")
                           for figure in figures), [figure.caption for figure in figures]
    included = report_of(mixed, tmp_path / "mixed.jsonl", include_contended=True)
    assert not [figure.caption for figure in drawn_figures(included)
                if "Left out" in figure.caption]
    for row in rows:
        if row["backend"] == "pt-ddp":
            row["inject"] = "input-delay=20"
            row["cell_key"] += "|inject-input-delay=20"
    faulted = report_of(rows, tmp_path / "faulted.jsonl", include_contended=True)
    [bars] = [figure for figure in drawn_figures(faulted)
              if figure.name == "fig5d_epoch1_vs_epoch2"]
    assert bars.caption.endswith(" Left out: 3 runs with an injected fault.")
    assert {label for label in drawn_series(bars.drawing)
            if not label.startswith("_")} == {"pt-single"}


def test_a_caption_counts_each_run_left_out_once_by_why():
    """A run that did not end ok counts by its status (a contended or faulted one too), an ok
    one not usable as contended, a usable one with a fault as faulted (where the figure leaves
    faults out)."""
    runs = pd.DataFrame(
        [("ok", True, "", ""), ("ok", False, "", ""), ("ok", False, "inject x", ""),
         ("ok", True, "inject x", ""), ("failed", False, "inject x", ""),
         ("unsupported", False, "", ""), ("timeout", False, "", ""), ("timeout", False, "", "")],
        columns=["status", "usable", "training", "training_without_fault"])
    assert left_out(runs) == (" Left out: 2 contended runs, 1 run with an injected fault, 1 "
                              "failed run, 2 timed-out runs, 1 unsupported run.")
    assert left_out(runs, faults=False) == (" Left out: 2 contended runs, 1 failed run, 2 "
                                            "timed-out runs, 1 unsupported run.")
    assert left_out(runs[runs["usable"] & (runs["training"] == "")]) == ""


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
