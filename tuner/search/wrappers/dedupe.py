"""``Deduping``: a suggestion the server would run as a launched trial ran (the same
configuration, or one the workload resolves alike) is declined as a repeat: the strategy is
told that trial's measurement, or that it failed, instead of running it again (a repeat of a
trial still running is left open rather than told a made-up result)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from tuner.search.keys import Config, Identity, alike_key
from tuner.search.wrappers.base import Declined, Wrapper


class Deduping(Wrapper):
    """``identity``: when two configurations are one point (default: keys.alike_key)."""

    def __init__(self, searcher: Searcher, identity: Identity | None = None) -> None:
        super().__init__(searcher)
        self.identity = identity
        self.config_of: dict[str, Config] = {}  # launched trial -> its configuration
        self.first: dict[str, str] = {}  # point -> the trial that launched it first
        self.scores: dict[str, float] = {}  # point -> its measured metric
        self.failed: set[str] = set()  # points that ended with no measurement

    def key(self, config: Mapping[str, Value]) -> str:
        """The point a configuration is: what the workload resolves it to, else SGLang's
        known rules (keys.alike_key)."""
        return (self.identity(config) if self.identity else None) or alike_key(config)

    def fresh(self, config: Config) -> bool:
        return self.key(config) not in self.first

    def admits(self, config: Config) -> bool:
        return self.fresh(config) and super().admits(config)

    def suggest(self, trial_id: str) -> Any:
        config = self.searcher.suggest(trial_id)
        if not isinstance(config, dict):
            return config
        key = self.key(config)
        if key not in self.first:
            return config
        answer = {self.metric: self.scores[key]} if key in self.scores and self.metric \
            else None
        return Declined(config, repeat=True, repeat_of=self.first[key], answer=answer,
                        failed=answer is None and key in self.failed)

    def launch(self, trial_id: str, config: Config, asked: str | None) -> None:
        self.config_of[trial_id] = config
        self.first.setdefault(self.key(config), trial_id)
        super().launch(trial_id, config, asked)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        config = self.config_of.get(trial_id)
        if config is not None and not error and result and self.metric in result:
            self.scores[self.key(config)] = float(result[self.metric])
        elif config is not None:
            self.failed.add(self.key(config))
        super().on_trial_complete(trial_id, result, error)
