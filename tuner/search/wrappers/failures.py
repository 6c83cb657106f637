"""The failure memory's two wrappers. ``Ruling`` declines what the memory ruled out or the
feasibility model says would fail as a suspect failed (feasibility.py), and learns each
finished trial's failure kind (``record_outcome``). ``Retrying``, above the re-asking wrapper,
launches a suspect value's retry when one is due, within its share of the budget (its own
trials, told to the strategy at their end)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from tuner.search.feasibility import Feasibility
from tuner.search.keys import Config
from tuner.search.memory import FailureMemory
from tuner.search.wrappers.base import Declined, Wrapper


class Ruling(Wrapper):
    """``invalid``: the refusal's own reasons, so that a refused point teaches the memory
    nothing about any one value."""

    def __init__(self, searcher: Searcher, memory: FailureMemory, feasibility: Feasibility,
                 invalid: Callable[[Config], list[str]]) -> None:
        super().__init__(searcher)
        self.memory = memory
        self.feasibility = feasibility
        self.invalid = invalid

    def ruled(self, config: Config) -> list[str]:
        """Why the memory (ruled out) or the feasibility model says not to launch ``config``."""
        blocked = self.feasibility.blocked(config)
        return [*self.memory.ruled_out(config),
                *([f"not worth launching: {blocked}"] if blocked else [])]

    def admits(self, config: Config) -> bool:
        return not self.ruled(config) and super().admits(config)

    def suggest(self, trial_id: str) -> Any:
        suggestion = self.searcher.suggest(trial_id)
        if isinstance(suggestion, Declined):  # refused: the record says both
            suggestion.ruled_out = self.ruled(suggestion.config)
        elif isinstance(suggestion, dict) and (ruled := self.ruled(suggestion)):
            return Declined(suggestion, ruled_out=ruled)
        return suggestion

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None,
                       placement: str | None = None) -> None:
        """A finished trial's failure kind (and the nodes of a failure seen on a follower
        only). A config the space's rules or the workload's checks refuse (grid launches
        them, to record them) teaches nothing about any one value: the refusal names the
        configuration (SGLang's TypeError for steps without topk is no verdict on steps)."""
        if not (kind is not None and self.invalid(dict(config))):
            self.memory.record(config, trial_id, kind, placement)


class Retrying(Wrapper):
    """``fresh``: whether a retry may run (not launched yet, not refused)."""

    def __init__(self, searcher: Searcher, feasibility: Feasibility,
                 fresh: Callable[[Config], bool]) -> None:
        super().__init__(searcher)
        self.feasibility = feasibility
        self.fresh = fresh
        self.trials: set[str] = set()

    def suggest(self, trial_id: str) -> Any:
        retry = self.feasibility.retry(self.fresh)
        if retry is None:
            return self.searcher.suggest(trial_id)
        self.trials.add(trial_id)
        self.launch(trial_id, retry, None)
        return retry
