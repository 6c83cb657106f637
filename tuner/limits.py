"""Limits on reported metrics (``--limit "p99_itl_ms<=30"``) and the concurrency levels each
round measures: which column holds a metric at a level, whether a trial's figures keep the
limits (and the figure that breaks one), and what the search is told about a trial that
breaks one: the worst value, under its own key, so that Ray's searchers and schedulers rank
it last without any of them knowing about limits.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tuner.stats import Interval, finite

Op = Literal["<=", ">=", "<", ">"]
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "<": operator.lt, ">": operator.gt}
LEVEL_SUFFIX = re.compile(r"_c\d+$")
# What a trial reports to Ray when the experiment has limits: the objective while every limit
# holds (on the means so far), else the worst value. Ray's searcher and scheduler use it.
SEARCH_KEY = "objective_within_limits"
WORST = 1e30


class Limit(BaseModel):
    """``metric op bound``: a trial keeps it when the mean of ``metric`` over its rounds does."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    metric: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$")
    op: Op
    bound: float

    @field_validator("bound")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("the bound must be a finite number")
        return value

    def text(self) -> str:
        return f"{self.metric}{self.op}{self.bound:g}"

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.bound)

    def column(self, level: int | None, levels: Sequence[int]) -> str:
        """The column this limit reads at ``level`` (a name with its own ``_c<level>`` is
        read as named, at every level)."""
        return level_column(self.metric, level, levels)

    def check(self, value: Any, column: str | None = None) -> str | None:
        """None when ``value`` keeps the limit, else why not, with the figure."""
        name = column or self.metric
        number = finite(value)
        if number is None:
            return f"{name} not measured (limit {self.op}{self.bound:g})"
        if self.holds(number):
            return None
        return f"{name} {number:.4g} breaks {self.op}{self.bound:g}"

    def check_interval(self, iv: Interval, column: str | None = None) -> str | None:
        """None when the whole 95% interval keeps the limit, else why not: the confirm
        stage keeps a config only when its repeats show it within the limit beyond noise."""
        name = column or self.metric
        if iv.mean is None:
            return f"{name} not measured (limit {self.op}{self.bound:g})"
        if iv.low is None or iv.high is None:
            return (f"{name} {iv.text()}: one launch, no interval to hold against "
                    f"{self.op}{self.bound:g}")
        edge = iv.high if self.op in ("<=", "<") else iv.low
        if self.holds(edge):
            return None
        return f"{name} {iv.text()} not within {self.op}{self.bound:g}"


def level_column(name: str, level: int | None, levels: Sequence[int]) -> str:
    """The column of ``name`` at a concurrency level: ``<name>_c<level>`` when a round
    measures several levels (the workload's own names), else ``name``."""
    if level is None or len(levels) < 2 or LEVEL_SUFFIX.search(name):
        return name
    return f"{name}_c{level}"


def breaks(row: Mapping[str, Any], limits: Sequence[Limit], level: int | None = None,
           levels: Sequence[int] = ()) -> list[str]:
    """The limits a row of figures (a trial's means) breaks at ``level``, with the figures."""
    out = []
    for limit in limits:
        column = limit.column(level, levels)
        reason = limit.check(row.get(column), column)
        if reason:
            out.append(reason)
    return out


class LimitTracker:
    """Inside a trial: the running means of the limited metrics, and the value the search is
    told each round (``SEARCH_KEY``): the objective while every limit holds, else ``worst``."""

    def __init__(self, metric: str, limits: Sequence[Limit], worst: float) -> None:
        self.metric = metric
        self.limits = tuple(limits)
        self.worst = worst
        self.values: dict[str, list[float]] = {limit.metric: [] for limit in self.limits}

    def update(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """The keys to add to this round's report ({} without limits or objective)."""
        for name, seen in self.values.items():
            value = finite(metrics.get(name))
            if value is not None:
                seen.append(value)
        objective = finite(metrics.get(self.metric))
        if not self.limits or objective is None:
            return {}
        means = {n: sum(v) / len(v) for n, v in self.values.items() if v}
        return {SEARCH_KEY: self.worst if breaks(means, self.limits) else objective}
