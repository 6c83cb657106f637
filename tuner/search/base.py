"""The base of servetune's strategies: metric and mode from Ray, and no state saved. A resumed
run builds the searcher afresh and replays the experiment's journal into it
(tuner.run.replay): each finished trial suggested again under its id (a seeded strategy
proposes it again) and told its rounds and end, as the run that was cut short told them. So
Ray's searcher checkpoint is a marker only, and ``restore`` reads nothing from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

MARKER = {"state": "replayed from the experiment's journal (results.jsonl)"}


class JournalState(Searcher):
    """save writes a JSON marker; restore keeps what the journal's replay rebuilt."""

    def save(self, checkpoint_path: str) -> None:
        Path(checkpoint_path).write_text(json.dumps({"searcher": type(self).__name__,
                                                     **MARKER}))

    def restore(self, checkpoint_path: str) -> None:
        pass


class OwnSpaceSearcher(JournalState):
    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        """Searchers that own their space take only the metric and mode from Ray."""
        if metric:
            self._metric = metric
        if mode:
            self._mode = mode
        return True
