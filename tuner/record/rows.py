"""A results row: one trial as results.csv shows it. The fixed columns are fields; the
others (each knob as it ran, ``<knob> asked`` where the server ran other, the metrics' means
over the rounds, the limit columns) are the row's kept keys, in the table's column order.

The table is built from typed rows (``table.build``) and goes to pandas only where a plot or
a report wants a frame (``frame``); a frame comes back as rows with ``rows_of`` (trial ids as
strings, NaN as None)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd
from pydantic import model_validator

from tuner.limits import breaks
from tuner.record.base import Frozen, no_nan
from tuner.spec import Objective

TRIAL_ID = "trial_id"  # the table's column of trial ids
WITHIN = "within_limits"  # True when the trial's means keep every limit
BREAKS = "limit_breaks"  # the limits broken, with the figures


class ResultRow(Frozen):
    trial_id: str
    order: int = 0
    phase: str = "search"
    variant: str | None = None
    stage: str | None = None
    baseline: bool = False
    status: str = "ok"  # ok | stopped | failed | running | interrupted
    failure_kind: str | None = None
    failure: str | None = None
    hint: str | None = None
    rounds: int = 0
    score: float | None = None
    speedup: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _cells(cls, data: Any) -> Any:
        """A frame's cells: NaN is None; an empty phase is the search's."""
        if not isinstance(data, Mapping):
            return data
        out = {str(k): no_nan(v) for k, v in data.items()}
        if out.get("phase") is None:
            out.pop("phase", None)
        if isinstance(out.get("variant"), float):
            out["variant"] = None
        return out

    @property
    def search(self) -> bool:
        return self.phase == "search"

    @property
    def done(self) -> bool:
        """Completed every round with a score."""
        return self.status == "ok" and self.score is not None

    def has(self, column: str) -> bool:
        """Whether the table has the column (a field, or a metric some trial reported)."""
        return column in type(self).model_fields or column in (self.model_extra or {})

    def cell(self, column: str) -> Any:
        """A column's value: a field's, or a metric's mean over the rounds (None: none)."""
        if column in type(self).model_fields:
            return getattr(self, column)
        return (self.model_extra or {}).get(column)

    def value(self, column: str) -> float | None:
        """A numeric column's value; None when empty or not a number."""
        value = self.cell(column)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return None if math.isnan(value) else float(value)

    def within(self, level: int | None = None, objective: Objective | None = None) -> bool:
        """Whether the row keeps the limits (at ``level``); True without limit columns."""
        value = self.cell(WITHIN if objective is None else level_key(WITHIN, level, objective))
        return value is not False and value != "False"

    def flat(self) -> dict[str, Any]:
        """The row as a table's columns (``speedup`` last, as the table adds it)."""
        data = self.model_dump(exclude={"speedup"})
        return {**data, **(self.model_extra or {})}


def level_key(name: str, level: int | None, objective: Objective) -> str:
    return name if level is None or not objective.per_level else f"{name}_c{level}"


def limit_columns(row: Mapping[str, Any], objective: Objective) -> dict[str, Any]:
    """Whether a trial's means keep the limits, and which it breaks: at the level the
    search decides at, and with several levels at each (``within_limits_c<level>``)."""
    out: dict[str, Any] = {}
    for level in [None, *(objective.levels if objective.per_level else ())]:
        broken = breaks(row, objective.limits) if level is None else \
            breaks(row, objective.limits, level, objective.levels)
        out[level_key(WITHIN, level, objective)] = not broken
        out[level_key(BREAKS, level, objective)] = "; ".join(broken) or None
    return out


def frame(rows: Sequence[ResultRow]) -> pd.DataFrame:
    """The rows as pandas (results.csv's columns, in its order); empty without rows."""
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame([r.flat() for r in rows])
    df["speedup"] = [math.nan if r.speedup is None else r.speedup for r in rows]
    return df


Rows: TypeAlias = Sequence[ResultRow] | pd.DataFrame


def rows_of(table: Rows | Iterable[Mapping[str, Any]]) -> list[ResultRow]:
    """Typed rows from rows, a frame (as results.csv or a test builds one) or mappings."""
    if isinstance(table, pd.DataFrame):
        if table.empty:
            return []
        return [ResultRow.model_validate(r) for r in table.to_dict("records")]
    return [r if isinstance(r, ResultRow) else ResultRow.model_validate(r) for r in table]


def read_csv(path: Path) -> list[ResultRow]:
    """results.csv as rows, its trial ids as written (pandas alone reads "1e5" as a number
    and "52e91234" as inf); [] when it is missing or empty."""
    try:
        df = pd.read_csv(path, dtype={TRIAL_ID: str}, keep_default_na=False,
                         na_values=[""])
    except (OSError, pd.errors.EmptyDataError):
        return []
    return rows_of(df)


def by_id(rows: Iterable[ResultRow]) -> dict[str, ResultRow]:
    return {r.trial_id: r for r in rows}


def search_rows(rows: Iterable[ResultRow]) -> list[ResultRow]:
    """The search's trials (not the confirm repeats or the reference launch)."""
    return [r for r in rows if r.search]


def best(rows: Iterable[ResultRow], objective: Objective) -> ResultRow | None:
    """The best trial that completed every round (stopped trials lost a comparison) and
    keeps the limits (the first of equals)."""
    done = [r for r in rows if r.done and r.within()]
    if not done:
        return None
    pick = max if objective.mode == "max" else min
    return pick(done, key=lambda r: r.score or 0.0)


def ranked(rows: Iterable[ResultRow], column: str, mode: str) -> list[ResultRow]:
    """Rows with a value in ``column``, best first (a stable sort: equals keep their order)."""
    scored = [r for r in rows if r.value(column) is not None]
    return sorted(scored, key=lambda r: r.value(column) or 0.0, reverse=mode == "max")
