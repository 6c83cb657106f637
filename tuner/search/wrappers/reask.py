"""``Reasking``: asks the strategy again while the wrappers below decline its suggestions
(each try under its own id: ``t``, ``t~1``, ...), recording each decline (``on_reject``:
rejected.jsonl) and telling the strategy what it is: a failure, or a repeat's measurement.
When the strategy keeps proposing what cannot run (Optuna's TPE ignores failed trials), a
random point every wrapper admits keeps the search going (told to the strategy at its end)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher

from search_spaces.space import SearchSpace
from tuner.search.wrappers.base import Declined, Wrapper

log = logging.getLogger(__name__)

FALLBACK_DRAWS = 2000  # random points drawn, at most, for one fallback


class Reasking(Wrapper):
    def __init__(self, searcher: Searcher, space: SearchSpace, *, max_attempts: int = 50,
                 on_reject: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(searcher)
        self.space = space
        self.max_attempts = max_attempts
        self.on_reject = on_reject
        self.rejected: list[dict[str, Any]] = []  # refused or ruled out (not repeats)
        self.rng = random.Random(0)

    def suggest(self, trial_id: str) -> Any:
        for attempt in range(self.max_attempts):
            asked = trial_id if attempt == 0 else f"{trial_id}~{attempt}"
            suggestion = self.searcher.suggest(asked)
            if isinstance(suggestion, Declined):
                self._decline(asked, suggestion)
                continue
            if suggestion is not None and suggestion != Searcher.FINISHED:
                self.launch(trial_id, suggestion, asked)
            return suggestion
        for _ in range(FALLBACK_DRAWS):
            config = self.space.sample(self.rng)
            if not self.admits(config):
                continue
            log.info("%s: random fallback after %d rejected suggestions", trial_id,
                     self.max_attempts)
            self.launch(trial_id, config, None)
            return config
        log.warning("no new configuration after %d attempts: the search ends here",
                    self.max_attempts)
        return Searcher.FINISHED

    def _decline(self, asked: str, declined: Declined) -> None:
        if declined.repeat:
            self._record({"config": declined.config, "invalid": [], "ruled_out": [],
                          "repeat_of": declined.repeat_of})
            if declined.answer is not None:
                self.searcher.on_trial_complete(asked, result=declined.answer)
            elif declined.failed:
                self.searcher.on_trial_complete(asked, error=True)
        else:
            entry = {"config": declined.config, "invalid": declined.invalid,
                     "ruled_out": declined.ruled_out}
            self.rejected.append(entry)
            self._record(entry)
            self.searcher.on_trial_complete(asked, error=True)
        self.not_launched(asked)

    def _record(self, entry: dict[str, Any]) -> None:
        if self.on_reject:
            self.on_reject(entry)
