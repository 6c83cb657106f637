"""AdaptivePoints: fixed configurations launched in an order decided as results come in (the
confirm stage's sequential launches): before each launch it asks ``choose`` which point is
next, or whether to stop, and remembers which trial ran which point. Nothing saved: a resumed
stage reads the trials it ended back from the journal (tuner.run.confirm)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from tuner.search.base import JournalState

# Given trial id -> point index so far, the next point's index (None: finished).
Chooser = Callable[[Mapping[str, int]], "int | None"]


class AdaptivePoints(JournalState):
    """Suggests ``points[choose(assigned)]`` until ``choose`` says None, then FINISHED; a
    launch's label is its point's label and its count ("top 1 3/10")."""

    def __init__(self, points: Sequence[Mapping[str, Value]], labels: Sequence[str],
                 choose: Chooser, cap: int) -> None:
        super().__init__()
        self.points = [dict(p) for p in points]
        self.labels = list(labels)
        self.choose = choose
        self.cap = cap
        self.assigned: dict[str, int] = {}  # trial id -> point index
        self.launch_labels: dict[str, str] = {}
        self.finished = False

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        index = None if self.finished else self.choose(dict(self.assigned))
        if index is None:
            self.finished = True
            return Searcher.FINISHED  # type: ignore[return-value]
        self.assigned[trial_id] = index
        count = sum(1 for i in self.assigned.values() if i == index)
        self.launch_labels[trial_id] = f"{self.labels[index]} {count}/{self.cap}"
        return dict(self.points[index])

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        pass

    def label_of(self, trial_id: str) -> str | None:
        return self.launch_labels.get(trial_id)
