"""The experiment's other files: run.json (what the run held), inputs.json (what the workload
measures with), screen.json (the proxy's ranking against the server's), stages.json (each
stage's winner as the staged search knew it), best.json (the decided configuration, ready to
launch) and best/launch.sh, and the lists a run keeps of what it ruled out, suspects, never
launched or completed with partners (one entry per item, kept as written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from tuner.record.base import Frozen, Record
from tuner.record.files import (
    BEST_DIR,
    LAUNCH_SH,
    append_jsonl,
    read_journal,
    read_json,
    write_json,
)


class RunInfo(Record):
    """run.json: the Ray cluster the run used and what each trial held."""

    nodes: int | float | None = None
    gpus_per_node: list[int | float] | int | float | None = None  # per node
    gpus_per_trial: int | float | None = None
    nodes_per_trial: int = 1
    trials_at_once: int | None = None
    dashboard_url: str | None = None


class StageRecord(Frozen):
    """One line of stages.json (a list, written by the staged search as each stage ends)."""

    stage: str | None = None
    pass_: int = Field(default=0, alias="pass")
    winner: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    pins: dict[str, Any] | None = None


class BrokenRecord(Record):
    """broken_environment.json: why the search stopped (the environment, not a setting, is
    broken: ``tuner.decide.environment.Broken``) and the evidence."""

    reason: str = "baseline"  # "baseline" or "streak"
    kind: str | None = None
    message: str = ""
    log_tail: str = ""
    hint: str = ""
    trials: list[str] = Field(default_factory=list)


class InputsRecord(Record):
    """inputs.json: what the workload measures with (``Workload.inputs``: the prompts'
    dataset), written once per experiment; its other keys kept as written."""

    dataset: dict[str, Any] | None = None


class ScreenRecord(Record):
    """screen.json (``--screen proxy``): the settings both the proxy and the server measured,
    each one's score, its role in the promotion, and Spearman's rho with its 95% interval."""

    settings: list[dict[str, Any]] = Field(default_factory=list)
    proxy: list[float] = Field(default_factory=list)
    server: list[float] = Field(default_factory=list)
    roles: list[str] = Field(default_factory=list)
    n: int = 0
    spearman: float | None = None
    interval: list[float] | None = None


class LevelBest(Frozen):
    level: int | None = None
    metric: str | None = None
    trial_id: str | None = None
    score: float | None = None
    config: dict[str, Any] | None = None


class BestRecord(Record):
    """best.json: the decided configuration, its evidence and how to launch it."""

    trial_id: str | None = None
    metric: str = "score"
    mode: str = "max"
    score: float | None = None
    speedup: float | None = None
    baseline_score: float | None = None
    decision: str | None = None
    label: str | None = None
    evidence: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    served_config: dict[str, Any] = Field(default_factory=dict)
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    per_level: list[LevelBest] | None = None


def read_launch_script(folder: Path) -> str | None:
    """best/launch.sh as written (``tuner.output.exports``); None before a decision."""
    try:
        return (folder / BEST_DIR / LAUNCH_SH).read_text()
    except FileNotFoundError:
        return None


class Entry(Frozen):
    """An item of a list file (ruled_out.json, suspects.json, rejected.jsonl, ...): its keys
    kept as written."""


class Rejected(Entry):
    """A line of rejected.jsonl: a suggestion the searchers' filter never launched, and why
    (the space's rules or the workload's checks, the failure memory, or an earlier trial that
    answers it: ``repeat_of``)."""

    config: dict[str, Any] = Field(default_factory=dict)
    invalid: list[str] = Field(default_factory=list)
    ruled_out: list[Any] = Field(default_factory=list)
    repeat_of: str | None = None

    @property
    def repeat(self) -> bool:
        """Answered by an earlier trial (its id may be unknown: None)."""
        return "repeat_of" in self.model_fields_set


class Completed(Entry):
    """A line of completed.jsonl: a suggestion the workload's checks refused alone, run with
    its partners set as the workload resolved them for the baseline."""

    config: dict[str, Any] = Field(default_factory=dict)
    partners: dict[str, Any] = Field(default_factory=dict)
    refused: list[str] = Field(default_factory=list)


R = TypeVar("R", bound=Record)


def read_record(path: Path, model: type[R]) -> R | None:
    """A JSON file as its record; None when missing, unreadable or not that record."""
    data = read_json(path)
    if not isinstance(data, dict):
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def write_record(path: Path, record: Record) -> None:
    write_json(path, record.dump())


_STAGES: TypeAdapter[list[StageRecord]] = TypeAdapter(list[StageRecord])


def read_stages(path: Path) -> tuple[StageRecord, ...]:
    data = read_json(path)
    try:
        return tuple(_STAGES.validate_python(data)) if isinstance(data, list) else ()
    except ValidationError:
        return ()


def write_stages(path: Path, stages: list[StageRecord]) -> None:
    write_json(path, [s.dump() for s in stages])


E = TypeVar("E", bound=Entry)


def read_entries(path: Path, model: type[E]) -> tuple[E, ...]:
    """A JSON list or a JSON-lines file, item by item, as ``model`` (what is no object, or
    not that entry, is skipped)."""
    if path.suffix == ".jsonl":
        items: Any = read_journal(path)
    else:
        items = read_json(path) or []
    if not isinstance(items, list):
        return ()
    out = []
    for item in items:
        try:
            out.append(model.model_validate(item))
        except ValidationError:
            continue
    return tuple(out)


def append_entry(path: Path, entry: Entry) -> None:
    """One more line of a JSON-lines list file (rejected.jsonl, completed.jsonl), flushed."""
    append_jsonl(path, entry.dump())


def write_entries(path: Path, entries: list[dict[str, Any]]) -> None:
    write_json(path, [Entry.model_validate(e).dump() for e in entries])
