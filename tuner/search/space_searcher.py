"""Random (valid points, never repeated) or grid search over a SearchSpace, baseline first."""

from __future__ import annotations

import random

from ray.tune.search import Searcher

from search_spaces.searches import GRID, RANDOM
from search_spaces.space import SearchSpace
from tuner.search.base import OwnSpaceSearcher
from tuner.search.keys import Config, config_key


class SpaceSearcher(OwnSpaceSearcher):
    """Random (valid points, no repeats) or grid (every point, invalid ones included so the
    trial records them as invalid_config). The baseline always comes first."""

    def __init__(self, space: SearchSpace, strategy: str, seed: int = 0,
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        if strategy not in (RANDOM, GRID):
            raise ValueError(f"unknown strategy {strategy!r}")
        self.space = space
        self.strategy = strategy
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.grid_index = 0
        self._grid: list[Config] | None = None

    def suggest(self, trial_id: str) -> Config | None:
        if not self.seen:
            return self._take(self.space.baseline())
        if self.strategy == GRID:
            if self._grid is None:
                self._grid = list(self.space.grid())
            while self.grid_index < len(self._grid):
                point = self._grid[self.grid_index]
                self.grid_index += 1
                if config_key(point) not in self.seen:
                    return self._take(point)
            return Searcher.FINISHED  # type: ignore[return-value]
        for _ in range(2000):
            point = self.space.sample(self.rng)
            if config_key(point) not in self.seen and not self.space.validate(point):
                return self._take(point)
        return Searcher.FINISHED  # type: ignore[return-value]

    def _take(self, point: Config) -> Config:
        self.seen.add(config_key(point))
        return point

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        return None
