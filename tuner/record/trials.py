"""The journal folded per trial: what each trial asked, where it ran, its rounds (of its
latest attempt) and how it ended, in launch order. A trial Ray resumed has several
attempts: its first start's launch order, its latest start's config and rounds."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from search_spaces.knobs import without_weights
from tuner.record.base import Frozen
from tuner.record.events import EndEvent, ResultEvent, StartEvent


class TrialRecord(Frozen):
    trial_id: str
    order: int
    config: dict[str, Any] = Field(default_factory=dict)
    stage: str | None = None
    dir: str | None = None
    phase: str = "search"
    variant: str | None = None
    attempts: int = 1
    rounds: tuple[dict[str, Any], ...] = ()
    end: EndEvent | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """The config without which weights its server loaded (a setting to confirm or
        export never runs on random weights)."""
        return without_weights(self.config)

    @property
    def ended(self) -> bool:
        return self.end is not None

    @property
    def search(self) -> bool:
        return self.phase == "search"


def fold(events: Iterable[StartEvent | ResultEvent | EndEvent]) -> dict[str, TrialRecord]:
    """Per trial id, in launch order."""
    trials: dict[str, dict[str, Any]] = {}
    for event in events:
        tid = event.trial_id
        if isinstance(event, StartEvent):
            known = trials.get(tid)
            trials[tid] = {"trial_id": tid,
                           "order": known["order"] if known else (
                               event.order if event.order is not None else len(trials)),
                           "config": dict(event.config), "stage": event.stage, "rounds": [],
                           "end": None, "dir": event.dir, "phase": event.phase,
                           "variant": event.variant,
                           "attempts": (known["attempts"] + 1) if known else 1}
        elif tid in trials and isinstance(event, ResultEvent):
            trials[tid]["rounds"].append(event.metrics)
        elif tid in trials and isinstance(event, EndEvent):
            trials[tid]["end"] = event
    ordered = sorted(trials.values(), key=lambda t: t["order"])
    return {t["trial_id"]: TrialRecord(**{**t, "rounds": tuple(t["rounds"])}) for t in ordered}


def settings(trials: Mapping[str, TrialRecord]) -> dict[str, dict[str, Any]]:
    """Every trial's settings as launched, by trial id (``TrialRecord.settings``)."""
    return {tid: t.settings for tid, t in trials.items()}
