"""What the report's sections read: the options a person gave and the numbers of the results,
each computed once, and only when a section (or the summary) first asks for it."""
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd

from xbench.reports.judging import decision, goodput
from xbench.reports.judging.comparisons import verdicts
from xbench.reports.judging.verdict import Verdicts
from xbench.reports.numbers import analysis
from xbench.reports.numbers.rows import load, load_probes
from xbench.reports.rendering.compare import compare
from xbench.reports.step_model import predict
from xbench.reports.step_model.predict import Link
from xbench.reports.step_model.utilisation import against_limits


@dataclass(frozen=True)
class Options:
    """What `xbench report` was asked for: the results files, the rows kept, and the sections
    added (`baseline`: compared with it; `lab`: the course lab; `link`: predicted on it)."""
    paths: tuple[Path, ...]
    where: str | None = None
    include_contended: bool = False
    baseline: Path | None = None
    lab: bool = False
    link: Link | None = None
    node_link: Link | None = None

    @property
    def between_nodes(self) -> Link | None:
        """The link between nodes: --node-link, else --link."""
        return self.node_link or self.link


class ReportData:
    """The results as the sections read them (reports.numbers.analysis and its neighbours)."""

    def __init__(self, options: Options):
        self.options = options

    @cached_property
    def _loaded(self) -> tuple[pd.DataFrame, list[str]]:
        return load(list(self.options.paths), self.options.where, self.options.include_contended)

    @cached_property
    def _probed(self) -> tuple[dict, list[str]]:
        return load_probes(list(self.options.paths), self.frame)

    @property
    def frame(self) -> pd.DataFrame:
        """Every valid row kept (reports.numbers.rows)."""
        return self._loaded[0]

    @property
    def problems(self) -> list[str]:
        """What was wrong in the results files, then in the probe files beside them."""
        return self._loaded[1] + self._probed[1]

    @property
    def probes(self) -> dict:
        """{env label: probe} of the probe files beside the results (reports.numbers.rows)."""
        return self._probed[0]

    @cached_property
    def cells(self) -> pd.DataFrame:
        return analysis.cell_table(self.frame)

    @cached_property
    def scaling(self) -> pd.DataFrame:
        return analysis.scaling(self.cells)

    @cached_property
    def attributed(self) -> pd.DataFrame:
        return analysis.attribution(self.cells)

    @cached_property
    def limits(self) -> pd.DataFrame:
        return against_limits(self.cells, self.attributed, self.probes)

    @cached_property
    def verdicts(self) -> Verdicts:
        return verdicts(self.cells, self.frame, self.options.include_contended, self.attributed,
                        self.limits)

    @cached_property
    def suspect(self) -> frozenset[str]:
        """The cell keys a SUSPECT verdict rests on or beyond the machine's limits, which the
        figures mark (reports.judging.decision.suspect_keys)."""
        return frozenset(decision.suspect_keys(self.verdicts, self.limits))

    @cached_property
    def failures(self) -> pd.DataFrame:
        return analysis.failures(self.frame)

    @cached_property
    def targets(self) -> pd.DataFrame:
        return goodput.target_table(self.frame)

    @cached_property
    def calibrating(self) -> pd.DataFrame:
        """The attributed cells as predict takes them: the median of each cell's runs."""
        return predict.calibrating(self.cells)

    @cached_property
    def check(self) -> pd.DataFrame:
        """Every N-device cell beside what `xbench predict` would have said of it."""
        return predict.checked(self.cells, self.calibrating, self.probes)

    @cached_property
    def comparison(self) -> tuple[pd.DataFrame, list[str]]:
        """(cells, notes) of these results against the baseline (reports.rendering.compare)."""
        return compare([self.options.baseline], list(self.options.paths))
