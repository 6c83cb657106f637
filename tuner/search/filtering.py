"""FilteringSearcher: wraps ANY searcher (as Ray's ConcurrencyLimiter does): completes its
suggestions with the pins, re-asks when a suggestion is invalid or ruled out by the failure
memory (the inner searcher is told that suggestion failed), and answers repeats of
already-measured configs from what was measured instead of launching them again. An inner
searcher that counts its launches may define ``not_launched(trial_id)``: it is called for
each suggestion this filter did not launch, and ``completed(trial_id, config)``: called
with a suggestion this filter completed with partners, the configuration that will run.

With a failure memory, the feasibility model (feasibility.py) retries suspect values beside
the levers that matter for their failure (the filter's own trials, told to the inner
searcher afterwards as its random fallback is) and refuses what it learned would fail. A
suggestion the workload's checks refuse is completed with its partners at the baseline's
resolved values (partners.py) before it is given up (``on_complete`` is told each, as
completed.jsonl keeps them); ``counts`` says how many were."""

from __future__ import annotations

import contextlib
import copy
import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search import partners as partner
from tuner.search.base import OwnSpaceSearcher
from tuner.search.feasibility import Feasibility
from tuner.search.keys import Config, Identity, Refusal, Resolved, alike_key
from tuner.search.memory import FailureMemory

log = logging.getLogger(__name__)


class FilteringSearcher(OwnSpaceSearcher):
    """Wraps a searcher: pins, validation, failure memory and repeat answering."""

    def __init__(self, searcher: Searcher, space: SearchSpace, *,
                 memory: FailureMemory | None = None, pass_invalid: bool = False,
                 max_attempts: int = 50,
                 on_reject: Callable[[dict[str, Any]], None] | None = None,
                 identity: Identity | None = None, refusal: Refusal | None = None,
                 resolved: Resolved | None = None, budget: int | None = None,
                 on_complete: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.space = space
        self.memory = memory
        self.pass_invalid = pass_invalid
        self.max_attempts = max_attempts
        self.on_reject = on_reject
        self.on_complete = on_complete  # told each suggestion completed with its partners
        self.identity = identity  # configs that run alike are one point (_key)
        self.refusal = refusal  # the workload's checks on the driver (_invalid)
        self.resolved = resolved  # what the workload resolves the baseline to (partners)
        self._partners: dict[str, Value] | None = None
        if memory is not None and memory.domains is None:
            memory.domains = dict(space.domains)
        self.feasibility = Feasibility(space, memory, budget) if memory is not None else None
        self.retry_trials: set[str] = set()
        self.own_rounds: dict[str, list[float]] = {}  # the filter's own trials' rounds
        self.proposals = 0  # suggestions of the inner searcher
        self.refused = 0  # ... refused by the space's rules or the workload's checks
        self.completed = 0  # ... launched with partners the refusal lacked
        self.inner_id: dict[str, str] = {}
        self.scores: dict[str, float] = {}  # config key -> measured metric
        self.config_of: dict[str, Config] = {}
        self.rejected: list[dict[str, Any]] = []
        self.launched: set[str] = set()
        self.failed: set[str] = set()  # config keys that ended with no measurement
        self.fallback_trials: set[str] = set()
        self.rng = random.Random(0)

    _transient = ("on_reject", "on_complete", "identity", "refusal", "resolved")

    # Ray saves wrappers (objects with a ``searcher``) by get_state/set_state and the
    # innermost searcher by save/restore.
    def get_state(self) -> dict[str, Any]:
        skip = ("searcher", "on_reject", "on_complete", "space", "identity", "refusal",
                "resolved", "feasibility")
        state = {k: v for k, v in self.__dict__.items() if k not in skip}
        if self.feasibility is not None:
            state["_retried"] = (self.feasibility.retried, self.feasibility.retries)
        return copy.deepcopy(state)

    def set_state(self, state: dict[str, Any]) -> None:
        memory = state.pop("memory", None)
        if memory is not None and self.memory is not None:
            self.memory.__dict__.update(memory.__dict__)
        retried = state.pop("_retried", None)
        if retried is not None and self.feasibility is not None:
            self.feasibility.retried, self.feasibility.retries = retried
        self.__dict__.update(state)

    def _key(self, config: Mapping[str, Value]) -> str:
        """The point a configuration is: what the workload resolves it to, else SGLang's
        known rules (keys.alike_key)."""
        return (self.identity(config) if self.identity else None) or alike_key(config)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return bool(ok)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return bool(self.searcher.set_max_concurrency(max_concurrent))

    def suggest(self, trial_id: str) -> Config | None:
        retry = self._retry()
        if retry is not None:
            self.retry_trials.add(trial_id)
            return self._launch(trial_id, retry)
        for attempt in range(self.max_attempts):
            inner_id = trial_id if attempt == 0 else f"{trial_id}~{attempt}"
            suggestion = self.searcher.suggest(inner_id)
            if suggestion is None or suggestion == Searcher.FINISHED:
                return suggestion
            self.proposals += 1
            config = self.space.complete(suggestion)
            reasons = [] if self.pass_invalid else self._invalid(config)
            if reasons:
                config, reasons = self._complete(config, reasons)
                self.refused += bool(reasons)
                hook = getattr(self.searcher, "completed", None)
                if not reasons and callable(hook):  # it builds on what runs, not on its ask
                    hook(inner_id, config)
            key = self._key(config)
            ruled = self._ruled(config)
            if not reasons and not ruled and key in self.launched:
                self._note_repeat(config, key)
                if key in self.scores and self.metric:
                    # Already measured: answer from the measurement instead of relaunching.
                    self.searcher.on_trial_complete(inner_id,
                                                    result={self.metric: self.scores[key]})
                elif key in self.failed:  # it ended without a measurement: so does the repeat
                    self.searcher.on_trial_complete(inner_id, error=True)
                self._not_launched(inner_id)
                continue  # (still running: left open rather than told a made-up result)
            if reasons or ruled:
                self._reject(config, reasons, ruled)
                self.searcher.on_trial_complete(inner_id, error=True)
                self._not_launched(inner_id)
                continue
            self.inner_id[trial_id] = inner_id
            return self._launch(trial_id, config)
        # The inner searcher keeps proposing what cannot run (Optuna's TPE ignores failed
        # trials): a random valid point keeps the search going, and is told to it afterwards.
        for _ in range(2000):
            config = self.space.sample(self.rng)
            if self._key(config) in self.launched or self._invalid(config) or self._ruled(config):
                continue
            log.info("%s: random fallback after %d rejected suggestions", trial_id,
                     self.max_attempts)
            self.fallback_trials.add(trial_id)
            return self._launch(trial_id, config)
        log.warning("no new configuration after %d attempts: the search ends here",
                    self.max_attempts)
        return Searcher.FINISHED  # type: ignore[return-value]

    def _ruled(self, config: Config) -> list[str]:
        """Why the failure memory (ruled out) or the feasibility model (it would fail as a
        suspect failed) says not to launch ``config``."""
        ruled = self.memory.ruled_out(config) if self.memory else []
        blocked = self.feasibility.blocked(config) if self.feasibility else None
        return [*ruled, *([f"not worth launching: {blocked}"] if blocked else [])]

    def _retry(self) -> Config | None:
        """A suspect value's retry, due and within its share of the budget."""
        if self.feasibility is None or self.pass_invalid:
            return None
        return self.feasibility.retry(
            lambda c: self._key(c) not in self.launched and not self._invalid(c))

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
        done = partner.complete(self.space, config, reasons, resolved, self._invalid) \
            if resolved else None
        if done is None:
            return config, reasons
        self.completed += 1
        partners = {n: done[0][n] for n in done[1]}
        log.info("completed with %s (the baseline's resolution): %s",
                 ", ".join(f"{n}={v}" for n, v in partners.items()), "; ".join(reasons))
        if self.on_complete:
            self.on_complete({"config": done[0], "partners": partners, "refused": reasons})
        return done[0], []

    def counts(self) -> dict[str, int]:
        """The inner searcher's suggestions, those refused (the space's rules or the
        workload's checks, partners completed where they could be), and the retries."""
        return {"proposals": self.proposals, "refused": self.refused,
                "completed": self.completed, "retries": len(self.retry_trials)}

    def _invalid(self, config: Config) -> list[str]:
        """Why ``config`` cannot run: the space's rules, else the workload's own checks on
        the driver (SGLang refuses it: refused here, never launched)."""
        reasons = self.space.validate(config)
        refused = None if reasons or self.refusal is None else self.refusal(config)
        return [*reasons, *([refused] if refused else [])]

    def _not_launched(self, inner_id: str) -> None:
        """A searcher that counts its own launches (staged: each stage's budget) may say what
        to do with a suggestion this filter answered or refused instead of launching."""
        hook = getattr(self.searcher, "not_launched", None)
        if callable(hook):
            hook(inner_id)

    def _launch(self, trial_id: str, config: Config) -> Config:
        self.config_of[trial_id] = config
        self.launched.add(self._key(config))
        return config

    def _note_repeat(self, config: Config, key: str) -> None:
        """A suggestion the server would run as an earlier trial ran (the same configuration,
        or one SGLang resolves alike): logged with that trial, never launched."""
        if self.on_reject:
            first = next((tid for tid, c in self.config_of.items() if self._key(c) == key), None)
            self.on_reject({"config": config, "invalid": [], "ruled_out": [],
                            "repeat_of": first})

    def _reject(self, config: Config, reasons: list[str], ruled: list[str]) -> None:
        entry = {"config": config, "invalid": reasons, "ruled_out": ruled}
        self.rejected.append(entry)
        if self.on_reject:
            self.on_reject(entry)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.inner_id:
            self.searcher.on_trial_result(self.inner_id[trial_id], result)
        elif self.metric in result:  # one of this filter's own trials: told as its mean
            self.own_rounds.setdefault(trial_id, []).append(float(result[self.metric]))

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        config = self.config_of.get(trial_id)
        value = None
        if config is not None and not error and result and self.metric in result:
            value = float(result[self.metric])
            self.scores[self._key(config)] = value
        elif config is not None:
            self.failed.add(self._key(config))
        inner = self.inner_id.pop(trial_id, None)
        if inner is not None:
            self.searcher.on_trial_complete(inner, result=result, error=error)
        elif trial_id in self.fallback_trials | self.retry_trials and config is not None:
            self.fallback_trials.discard(trial_id)
            rounds = self.own_rounds.pop(trial_id, [])
            if value is not None and rounds:
                value = sum(rounds) / len(rounds)
            params = {n: config[n] for n in self.space.domains}
            with contextlib.suppress(NotImplementedError):
                self.searcher.add_evaluated_point(params, value if value is not None else 0.0,
                                                  error=value is None)

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None,
                       placement: str | None = None) -> None:
        """Called by the results recorder with each finished trial's failure kind (and the
        nodes of a failure seen on a follower only). A config the space's rules or the
        workload's checks refuse (grid launches them, to record them) teaches the memory
        nothing about any one value: the refusal names the configuration (SGLang's
        TypeError for steps without topk is no verdict on steps)."""
        if self.memory is not None and not (kind is not None and self._invalid(dict(config))):
            self.memory.record(config, trial_id, kind, placement)
