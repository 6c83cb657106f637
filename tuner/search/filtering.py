"""FilteringSearcher: the chain of search wrappers around ANY searcher (as Ray's
ConcurrencyLimiter wraps one), one concern each, composed here and held as one handle:

    Retrying -> Reasking -> Deduping -> Ruling -> Refusing -> Pinning -> Routing -> strategy

Pinning completes the strategy's suggestions with the pins; Refusing declines what the space's
rules or the workload's checks refuse, once completed with its partners where that is accepted
(refusal.py); Ruling declines what the failure memory ruled out or the feasibility model says
would fail, and learns each outcome; Deduping answers a repeat of a launched point from what
was measured; Reasking records each decline, tells the strategy and asks again, else falls
back to a random point; Retrying launches a suspect value's due retry (feasibility.py);
Routing tells the strategy each trial's results under the id it was asked for. Without a
failure memory there is no Ruling nor Retrying; a grid (``pass_invalid``) retries nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.feasibility import Feasibility
from tuner.search.keys import Config, Identity, Refusal, Resolved
from tuner.search.memory import FailureMemory
from tuner.search.wrappers.base import Wrapper
from tuner.search.wrappers.dedupe import Deduping
from tuner.search.wrappers.failures import Retrying, Ruling
from tuner.search.wrappers.pins import Pinning, Routing
from tuner.search.wrappers.reask import Reasking
from tuner.search.wrappers.refusal import Refusing


class FilteringSearcher(Wrapper):
    """The chain's handle: what it counted, learned and measured."""

    def __init__(self, searcher: Searcher, space: SearchSpace, *,
                 memory: FailureMemory | None = None, pass_invalid: bool = False,
                 max_attempts: int = 50,
                 on_reject: Callable[[dict[str, Any]], None] | None = None,
                 identity: Identity | None = None, refusal: Refusal | None = None,
                 resolved: Resolved | None = None, budget: int | None = None,
                 on_complete: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.space = space
        self.memory = memory
        self.pass_invalid = pass_invalid
        self.pinning = Pinning(Routing(searcher, space), space)
        self.refusing = Refusing(self.pinning, space, pass_invalid=pass_invalid,
                                 refusal=refusal, resolved=resolved, on_complete=on_complete)
        chain: Searcher = self.refusing
        self.feasibility: Feasibility | None = None
        if memory is not None:
            if memory.domains is None:
                memory.domains = dict(space.domains)
            self.feasibility = Feasibility(space, memory, budget)
            chain = Ruling(chain, memory, self.feasibility, self.refusing.invalid)
        self.deduping = Deduping(chain, identity)
        self.reasking = Reasking(self.deduping, space, max_attempts=max_attempts,
                                 on_reject=on_reject)
        chain = self.reasking
        if self.feasibility is not None and not pass_invalid:
            chain = Retrying(chain, self.feasibility, self._fresh)
        super().__init__(chain)

    def _fresh(self, config: Config) -> bool:
        return self.deduping.fresh(config) and not self.refusing.invalid(config)

    @property
    def scores(self) -> dict[str, float]:
        """Each measured point's metric (by ``_key``)."""
        return self.deduping.scores

    @property
    def failed(self) -> set[str]:
        """The points that ended with no measurement."""
        return self.deduping.failed

    @property
    def rejected(self) -> list[dict[str, Any]]:
        return self.reasking.rejected

    def _key(self, config: Mapping[str, Value]) -> str:
        return self.deduping.key(config)

    def counts(self) -> dict[str, int]:
        """The strategy's suggestions, those refused (the space's rules or the workload's
        checks, partners completed where they could be), and the retries."""
        retrying = self.find(Retrying)
        return {"proposals": self.pinning.proposals, "refused": self.refusing.refused,
                "completed": self.refusing.completions,
                "retries": len(retrying.trials) if retrying else 0}

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None,
                       placement: str | None = None) -> None:
        """Called by the results recorder with each finished trial's failure kind, for the
        failure memory (Ruling.record_outcome)."""
        ruling = self.find(Ruling)
        if ruling is not None:
            ruling.record_outcome(trial_id, config, kind, placement)
