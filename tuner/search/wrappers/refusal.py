"""``Refusing``: a suggestion the space's rules or the workload's checks on the driver refuse
(SGLang refuses it) is declined, never launched; first it is completed with its partners at
the baseline's resolved values where that is accepted (partners.py), and runs so (the
strategy's ``completed`` hook and ``on_complete`` are told; completed.jsonl keeps them)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search import partners as partner
from tuner.search.keys import Config, Refusal, Resolved
from tuner.search.wrappers.base import Declined, Wrapper

log = logging.getLogger(__name__)


class Refusing(Wrapper):
    """``pass_invalid``: launch refused points too (grid records them); ``refused`` and
    ``completions`` count the suggestions refused and those completed with partners."""

    def __init__(self, searcher: Searcher, space: SearchSpace, *, pass_invalid: bool = False,
                 refusal: Refusal | None = None, resolved: Resolved | None = None,
                 on_complete: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(searcher)
        self.space = space
        self.pass_invalid = pass_invalid
        self.refusal = refusal  # the workload's checks on the driver
        self.resolved = resolved  # what the workload resolves the baseline to (partners)
        self.on_complete = on_complete
        self._partners: dict[str, Value] | None = None
        self.refused = 0
        self.completions = 0

    def invalid(self, config: Config) -> list[str]:
        """Why ``config`` cannot run: the space's rules, else the workload's own checks."""
        reasons = self.space.validate(config)
        refused = None if reasons or self.refusal is None else self.refusal(config)
        return [*reasons, *([refused] if refused else [])]

    def admits(self, config: Config) -> bool:
        return not self.invalid(config) and super().admits(config)

    def suggest(self, trial_id: str) -> Any:
        config = self.searcher.suggest(trial_id)
        if not isinstance(config, dict) or self.pass_invalid:
            return config
        reasons = self.invalid(config)
        if not reasons:
            return config
        config, reasons = self._complete(config, reasons)
        if reasons:
            self.refused += 1
            return Declined(config, invalid=reasons)
        self.completed(trial_id, config)  # the strategy builds on what runs, not on its ask
        return config

    def partners(self) -> dict[str, Value]:
        """What the workload resolved the baseline to (asked once; empty: unknown)."""
        if self._partners is None:
            answer = self.resolved(self.space.baseline()) if self.resolved else None
            self._partners = dict(answer or {})
        return self._partners

    def _complete(self, config: Config, reasons: list[str]) -> tuple[Config, list[str]]:
        """A refused suggestion with its partners set as the workload resolved them for the
        baseline, where that is accepted (the reasons left: none); else as it was."""
        resolved = self.partners()
        done = partner.complete(self.space, config, reasons, resolved, self.invalid) \
            if resolved else None
        if done is None:
            return config, reasons
        self.completions += 1
        partners = {n: done[0][n] for n in done[1]}
        log.info("completed with %s (the baseline's resolution): %s",
                 ", ".join(f"{n}={v}" for n, v in partners.items()), "; ".join(reasons))
        if self.on_complete:
            self.on_complete({"config": done[0], "partners": partners, "refused": reasons})
        return done[0], []
