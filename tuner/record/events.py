"""The journal (results.jsonl): one line per trial event, as the recorder
(``tuner.run.recorder``) writes it the moment Ray reports it.

- ``start``: a trial launched: its config, launch order, stage, Ray's folder, and the tags of
  its fit (``phase``: search or confirm; ``variant``: the speculative reference's launches,
  ``NO_SPECULATIVE`` without it, ``WITH_SPECULATIVE`` the decided settings again beside them);
- ``result``: one round's metrics, flat on the line (``ResultEvent.metrics``);
- ``end``: ``ok`` or ``failed`` with the failure (``launchers.failures.Failure.to_json``).

A line cut by a crash, or one that is no event, is skipped on reading."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, ValidationError

from tuner.record.base import Frozen, Record
from tuner.record.files import append_jsonl

log = logging.getLogger(__name__)

# The keys of a result line that are not metrics.
NO_SPECULATIVE = "no_speculative"
WITH_SPECULATIVE = "with_speculative"
EVENT_KEYS = frozenset({"event", "trial_id", "time", "schema_version"})


class FailureInfo(Frozen):
    """A failed trial's failure as the journal holds it (``Failure.to_json``)."""

    kind: str
    message: str = ""
    returncode: int | None = None
    log_tail: str = ""
    hint: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class _Event(Record):
    """A journal line: its kind always written (the key a reader tells lines apart by)."""

    event: str

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), "event": self.event}


class StartEvent(_Event):
    event: Literal["start"] = "start"
    trial_id: str
    time: float | None = None
    order: int | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    stage: str | None = None
    dir: str | None = None
    phase: str = "search"  # absent before confirm trials were journaled: search
    variant: str | None = None


class ResultEvent(_Event):
    """One round: the metrics are the line's other keys."""

    event: Literal["result"] = "result"
    trial_id: str
    time: float | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @classmethod
    def of(cls, trial_id: str, metrics: Mapping[str, Any], time: float | None = None
           ) -> ResultEvent:
        return cls(trial_id=trial_id, time=time,
                   **{k: v for k, v in metrics.items() if k not in EVENT_KEYS})


class EndEvent(_Event):
    event: Literal["end"] = "end"
    trial_id: str
    time: float | None = None
    status: str  # "ok" | "failed"
    failure: FailureInfo | None = None

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    @property
    def kind(self) -> str | None:
        """The failure's kind when the trial failed."""
        return self.failure.kind if self.failed and self.failure is not None else None


Event = Annotated[StartEvent | ResultEvent | EndEvent, Field(discriminator="event")]
_EVENT: TypeAdapter[StartEvent | ResultEvent | EndEvent] = TypeAdapter(Event)


def parse_event(data: Any) -> StartEvent | ResultEvent | EndEvent | None:
    """One journal line's event; None for what is not one."""
    try:
        return _EVENT.validate_python(data)
    except ValidationError:
        return None


def read_events(path: Path) -> tuple[StartEvent | ResultEvent | EndEvent, ...]:
    """Every complete event of a journal, in the order written."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ()
    events = []
    for line in lines:
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        event = parse_event(data)
        if event is None:
            log.debug("%s: not a journal event: %.200s", path, line)
            continue
        events.append(event)
    return tuple(events)


def append_event(path: Path, event: StartEvent | ResultEvent | EndEvent) -> None:
    """One line, flushed."""
    append_jsonl(path, event.dump())


def of_kind(events: Iterable[StartEvent | ResultEvent | EndEvent], kind: str
            ) -> list[StartEvent | ResultEvent | EndEvent]:
    return [e for e in events if e.event == kind]
