"""The base of searchers that own their space: metric and mode from Ray, state saved by
pickling (restored in place, so that objects others hold stay the same objects)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from tuner.search.memory import FailureMemory


class OwnSpaceSearcher(Searcher):
    """save/restore by pickling the searcher's own state (restored in place)."""

    _transient: tuple[str, ...] = ()

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        """Searchers that own their space take only the metric and mode from Ray."""
        if metric:
            self._metric = metric
        if mode:
            self._mode = mode
        return True

    def save(self, checkpoint_path: str) -> None:
        state = {k: v for k, v in self.__dict__.items() if k not in self._transient}
        Path(checkpoint_path).write_bytes(pickle.dumps(state))

    def restore(self, checkpoint_path: str) -> None:
        state = pickle.loads(Path(checkpoint_path).read_bytes())
        for key, value in state.items():
            current = self.__dict__.get(key)
            # An object others hold too (an inner searcher, the failure memory): keep it.
            if isinstance(current, (Searcher, FailureMemory)) and hasattr(value, "__dict__"):
                current.__dict__.update(value.__dict__)  # keep identities others hold
            else:
                self.__dict__[key] = value
