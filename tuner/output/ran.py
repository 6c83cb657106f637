"""What ran: a trial's configuration as its server resolved it (``Workload.ran``: SGLang's
own resolution, recorded in the trial's folder), beside the configuration asked. Labels,
results.csv, the report and best/launch.sh show what ran; the asked value stays beside it
where the two differ (SGLang runs ``--speculative-eagle-topk 1`` with steps + 1 draft
tokens whatever was asked)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.record.ran import Reader, asked_column, differs, reader, same, shown, trial_ran
from tuner.record.spec_file import has_spec

__all__ = ["Reader", "asked_column", "differs", "experiment_of", "launched", "reader",
           "row_configs", "same", "shown", "trial_ran"]


def experiment_of(path: Path) -> Path | None:
    """The experiment folder ``path`` lies in (itself or the nearest parent with a spec)."""
    for folder in (path, *path.parents):
        if has_spec(folder):
            return folder
    return None


def _cell(cell: object) -> object:
    """A table cell as a knob's value: numpy scalars as Python's, a whole float (a column
    with gaps) as an int, "default" as unset; NaN (an empty cell) stays NaN."""
    if hasattr(cell, "item"):
        cell = cell.item()
    if isinstance(cell, float) and cell == cell and cell.is_integer():
        return int(cell)
    return None if cell == "default" else cell


def row_configs(row: Mapping[str, object], knobs: list[str]
                ) -> tuple[dict[str, Value], dict[str, Value]]:
    """A results row's knobs as asked and as ran (its "<knob> asked" columns where they
    differ)."""
    def empty(cell: object) -> bool:
        return cell is None or (isinstance(cell, float) and cell != cell)

    ran: dict[str, Value] = {}
    for k in knobs:
        cell = _cell(row.get(k))
        if k in row and not empty(cell):
            ran[k] = cell  # type: ignore[assignment]
    asked = dict(ran)
    for k in knobs:
        cell = _cell(row.get(asked_column(k)))
        if asked_column(k) in row and not empty(cell):
            asked[k] = cell  # type: ignore[assignment]
        elif asked_column(k) in row and row.get(asked_column(k)) == "default":
            asked[k] = None
    return asked, ran


def launched(config: Mapping[str, Value], ran: Mapping[str, Value], space: SearchSpace
             ) -> tuple[dict[str, Value], list[str]]:
    """The configuration best/launch.sh serves: each knob the config sets, as its server
    resolved it (a value the knob cannot take stays as asked; a knob left unset stays
    unset: SGLang resolves it the same way again), and a line per knob changed."""
    out, lines = dict(config), []
    for name, asked in differs(config, ran).items():
        value = ran[name]
        if asked is None or asked is False or name not in [*space.domains, *space.pins]:
            continue
        if value is not None and space.knob(name).validate(value):
            continue
        out[name] = value
        lines.append(f"{name} {value}: what the trial's server resolved {asked} (asked) to")
    return out, lines
