"""The two wrappers next to the strategy: ``Pinning`` completes its suggestions with the
space's pins (and counts them), ``Routing`` tells the strategy each trial's results under the
id it was asked for, and a point a wrapper launched itself (a retry, a random fallback) as an
evaluated point once it ends."""

from __future__ import annotations

import contextlib
from typing import Any

from ray.tune.search import Searcher

from search_spaces.space import SearchSpace
from tuner.search.keys import Config
from tuner.search.wrappers.base import Wrapper


class Pinning(Wrapper):
    """The strategy's suggestions completed with the space's pins; ``proposals`` counts them."""

    def __init__(self, searcher: Searcher, space: SearchSpace) -> None:
        super().__init__(searcher)
        self.space = space
        self.proposals = 0

    def suggest(self, trial_id: str) -> Any:
        suggestion = self.searcher.suggest(trial_id)
        if suggestion is None or suggestion == Searcher.FINISHED:
            return suggestion
        self.proposals += 1
        return self.space.complete(suggestion)


class Routing(Wrapper):
    """A launched trial's results go to the strategy's suggestion it ran (asked under another
    id when the first asks were declined); a wrapper's own trial is told to the strategy at
    its end, as the mean of its rounds (or failed), when the strategy takes such points."""

    def __init__(self, searcher: Searcher, space: SearchSpace) -> None:
        super().__init__(searcher)
        self.space = space
        self.asked: set[str] = set()  # asked, neither launched nor told yet
        self.route: dict[str, str] = {}  # launched trial -> the id its suggestion was asked as
        self.own: dict[str, Config] = {}  # a wrapper's own trials
        self.own_rounds: dict[str, list[float]] = {}

    def suggest(self, trial_id: str) -> Any:
        self.asked.add(trial_id)
        return self.searcher.suggest(trial_id)

    def launch(self, trial_id: str, config: Config, asked: str | None) -> None:
        if asked is None:
            self.own[trial_id] = config
        else:
            self.asked.discard(asked)
            self.route[trial_id] = asked

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.route:
            self.searcher.on_trial_result(self.route[trial_id], result)
        elif self.metric in result:
            self.own_rounds.setdefault(trial_id, []).append(float(result[self.metric]))

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        if trial_id in self.route:
            self.searcher.on_trial_complete(self.route.pop(trial_id), result=result, error=error)
        elif trial_id in self.own:
            self._tell_own(trial_id, result, error)
        elif trial_id in self.asked:  # a declined suggestion
            self.asked.discard(trial_id)
            self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def _tell_own(self, trial_id: str, result: dict | None, error: bool) -> None:
        config = self.own.pop(trial_id)
        value = float(result[self.metric]) if not error and result and self.metric in result \
            else None
        rounds = self.own_rounds.pop(trial_id, [])
        if value is not None and rounds:
            value = sum(rounds) / len(rounds)
        params = {n: config[n] for n in self.space.domains}
        with contextlib.suppress(NotImplementedError):
            self.searcher.add_evaluated_point(params, value if value is not None else 0.0,
                                              error=value is None)
