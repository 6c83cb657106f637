"""FixedPoints: the given configurations in order (the confirm stage's repeats, a screen's
promoted settings), remembering which trial ran which point. Nothing saved: a resumed run
replays the journal into it (tuner.run.replay)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from tuner.search.base import JournalState


class FixedPoints(JournalState):
    """Suggests the given configurations in order, then FINISHED; remembers which trial ran
    which point (for labels and for grouping the repeats)."""

    def __init__(self, points: Sequence[Mapping[str, Value]], labels: Sequence[str],
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self.points = [dict(p) for p in points]
        self.labels = list(labels)
        self.assigned: dict[str, int] = {}  # trial id -> point index

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        index = len(self.assigned)
        if index >= len(self.points):
            return Searcher.FINISHED  # type: ignore[return-value]
        self.assigned[trial_id] = index
        return dict(self.points[index])

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        pass

    def label_of(self, trial_id: str) -> str | None:
        index = self.assigned.get(trial_id)
        return None if index is None else self.labels[index]
