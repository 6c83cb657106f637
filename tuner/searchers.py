"""Searchers over a SearchSpace, as Ray Tune ``Searcher`` objects.

- ``SpaceSearcher``: random (valid, never repeated) or grid, baseline first.
- ``FailureMemory``: which knob values failed the same way, with the trials as evidence.
- ``FilteringSearcher``: wraps ANY searcher (as ConcurrencyLimiter does): completes its
  suggestions with the pins, re-asks when a suggestion is invalid or ruled out by the
  failure memory (the inner searcher is told that suggestion failed), and answers repeats
  of already-measured configs from what was measured instead of launching them again.
- ``StagedSearcher``: stage by stage, each with the winners of earlier stages pinned.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import pickle
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from search_spaces.knobs import CATALOGUE, Value
from search_spaces.space import SearchSpace, Stage

log = logging.getLogger(__name__)

# Failure kinds that say nothing about the configuration itself.
_ENVIRONMENTAL = {"invalid_config", "port_busy", "gpu_busy"}
Config = dict[str, Value]


def config_key(config: Mapping[str, Value]) -> str:
    return json.dumps(sorted(config.items(), key=lambda kv: kv[0]), default=str)


class _Pickled(Searcher):
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
            if isinstance(current, (Searcher, FailureMemory)) and hasattr(value, "__dict__"):
                current.__dict__.update(value.__dict__)  # keep identities others hold
            else:
                self.__dict__[key] = value


class SpaceSearcher(_Pickled):
    """Random (valid points, no repeats) or grid (every point, invalid ones included so the
    trial records them as invalid_config). The baseline always comes first."""

    def __init__(self, space: SearchSpace, strategy: str, seed: int = 0,
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        if strategy not in ("random", "grid"):
            raise ValueError(f"unknown strategy {strategy!r}")
        self.space = space
        self.strategy = strategy
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.grid_index = 0
        self._grid: list[Config] | None = None

    _transient = ("_grid",)

    def suggest(self, trial_id: str) -> Config | None:
        if not self.seen:
            return self._take(self.space.baseline())
        if self.strategy == "grid":
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


class FailureMemory:
    """Failures per (knob, value) and kind, and which values to stop launching.

    A value is a suspect once ``threshold`` trials with it failed the same way and no trial
    with it succeeded (unset and pinned values never are: every trial shares them). Two
    failing configs share bystander values by chance, so suspects explain each other away:
    the strongest suspect (most failures, then a value the catalogue flags as risky, e.g. a
    global NCCL_ALGO=Tree) is ruled out, and a weaker suspect whose failures it already
    explains is not. If the wrong one was picked, the real culprit fails a third time, becomes
    the strongest, and the bystander is cleared."""

    def __init__(self, never: Mapping[str, Value], threshold: int = 2) -> None:
        self.never = dict(never)
        self.threshold = threshold
        self.failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(
            lambda: defaultdict(list))
        self.successes: set[tuple[str, str]] = set()

    @staticmethod
    def _key(name: str, value: Value) -> tuple[str, str]:
        return name, json.dumps(value)

    def record(self, config: Mapping[str, Value], trial_id: str, kind: str | None) -> None:
        """``kind`` None: the trial ran fine."""
        if kind in _ENVIRONMENTAL:
            return
        for name, value in config.items():
            if name in self.never and self.never[name] == value:
                continue
            key = self._key(name, value)
            if kind is None:
                self.successes.add(key)
            elif trial_id not in self.failures[key][kind]:
                self.failures[key][kind].append(trial_id)

    @staticmethod
    def _flagged(key: tuple[str, str]) -> bool:
        knob = CATALOGUE.get(key[0])
        return knob is not None and knob.warning(json.loads(key[1])) is not None

    def _ruled(self) -> dict[tuple[str, str], dict[str, list[str]]]:
        """(knob, value) -> {kind: failing trials} for every value ruled out now."""
        suspects = [(key, kind, trials) for key, kinds in self.failures.items()
                    if key not in self.successes
                    for kind, trials in kinds.items() if len(trials) >= self.threshold]
        suspects.sort(key=lambda s: (-len(s[2]), not self._flagged(s[0]), s[0]))
        explained: dict[str, set[str]] = defaultdict(set)
        ruled: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(dict)
        for key, kind, trials in suspects:
            if set(trials) <= explained[kind]:
                continue  # a stronger suspect already explains these failures
            explained[kind].update(trials)
            ruled[key][kind] = list(trials)
        return ruled

    def ruled_out(self, config: Mapping[str, Value]) -> list[str]:
        ruled = self._ruled()
        reasons = []
        for name, value in config.items():
            for kind, trials in ruled.get(self._key(name, value), {}).items():
                reasons.append(f"{name}={value}: {kind} in trials {', '.join(trials)}")
        return reasons

    def evidence(self) -> list[dict[str, Any]]:
        """Every value currently ruled out, with the failing trials."""
        return [{"knob": name, "value": json.loads(value), "kind": kind, "trials": trials}
                for (name, value), kinds in self._ruled().items()
                for kind, trials in kinds.items()]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["failures"] = {k: dict(v) for k, v in self.failures.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        failures: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(
            lambda: defaultdict(list))
        for key, kinds in state["failures"].items():
            failures[key].update(kinds)
        self.__dict__.update({**state, "failures": failures})


class FilteringSearcher(_Pickled):
    """Wraps a searcher: pins, validation, failure memory and repeat answering."""

    def __init__(self, searcher: Searcher, space: SearchSpace, *,
                 memory: FailureMemory | None = None, pass_invalid: bool = False,
                 max_attempts: int = 50,
                 on_reject: Callable[[dict[str, Any]], None] | None = None) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher = searcher
        self.space = space
        self.memory = memory
        self.pass_invalid = pass_invalid
        self.max_attempts = max_attempts
        self.on_reject = on_reject
        self.inner_id: dict[str, str] = {}
        self.scores: dict[str, float] = {}  # config key -> measured metric
        self.config_of: dict[str, Config] = {}
        self.rejected: list[dict[str, Any]] = []
        self.launched: set[str] = set()
        self.fallback_trials: set[str] = set()
        self.rng = random.Random(0)

    _transient = ("on_reject",)

    # Ray saves wrappers (objects with a ``searcher``) by get_state/set_state and the
    # innermost searcher by save/restore.
    def get_state(self) -> dict[str, Any]:
        skip = ("searcher", "on_reject", "space")
        return copy.deepcopy({k: v for k, v in self.__dict__.items() if k not in skip})

    def set_state(self, state: dict[str, Any]) -> None:
        memory = state.pop("memory", None)
        if memory is not None and self.memory is not None:
            self.memory.__dict__.update(memory.__dict__)
        self.__dict__.update(state)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict,
                              **spec: Any) -> bool:
        ok = self.searcher.set_search_properties(metric, mode, config, **spec)
        self._metric, self._mode = self.searcher.metric, self.searcher.mode
        return bool(ok)

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        return bool(self.searcher.set_max_concurrency(max_concurrent))

    def suggest(self, trial_id: str) -> Config | None:
        for attempt in range(self.max_attempts):
            inner_id = trial_id if attempt == 0 else f"{trial_id}~{attempt}"
            suggestion = self.searcher.suggest(inner_id)
            if suggestion is None or suggestion == Searcher.FINISHED:
                return suggestion
            config = self.space.complete(suggestion)
            key = config_key(config)
            reasons = [] if self.pass_invalid else self.space.validate(config)
            ruled = self.memory.ruled_out(config) if self.memory else []
            if not reasons and not ruled and key in self.launched:
                if key in self.scores and self.metric:
                    # Already measured: answer from the measurement instead of relaunching.
                    self.searcher.on_trial_complete(inner_id,
                                                    result={self.metric: self.scores[key]})
                continue  # (still running: left open rather than told a made-up result)
            if reasons or ruled:
                self._reject(config, reasons, ruled)
                self.searcher.on_trial_complete(inner_id, error=True)
                continue
            self.inner_id[trial_id] = inner_id
            return self._launch(trial_id, config)
        # The inner searcher keeps proposing what cannot run (Optuna's TPE ignores failed
        # trials): a random valid point keeps the search going, and is told to it afterwards.
        for _ in range(2000):
            config = self.space.sample(self.rng)
            if config_key(config) in self.launched or self.space.validate(config) or (
                    self.memory and self.memory.ruled_out(config)):
                continue
            log.info("%s: random fallback after %d rejected suggestions", trial_id,
                     self.max_attempts)
            self.fallback_trials.add(trial_id)
            return self._launch(trial_id, config)
        log.warning("no new configuration after %d attempts: the search ends here",
                    self.max_attempts)
        return Searcher.FINISHED  # type: ignore[return-value]

    def _launch(self, trial_id: str, config: Config) -> Config:
        self.config_of[trial_id] = config
        self.launched.add(config_key(config))
        return config

    def _reject(self, config: Config, reasons: list[str], ruled: list[str]) -> None:
        entry = {"config": config, "invalid": reasons, "ruled_out": ruled}
        self.rejected.append(entry)
        if self.on_reject:
            self.on_reject(entry)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self.inner_id:
            self.searcher.on_trial_result(self.inner_id[trial_id], result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        config = self.config_of.get(trial_id)
        value = None
        if config is not None and not error and result and self.metric in result:
            value = float(result[self.metric])
            self.scores[config_key(config)] = value
        inner = self.inner_id.pop(trial_id, None)
        if inner is not None:
            self.searcher.on_trial_complete(inner, result=result, error=error)
        elif trial_id in self.fallback_trials and config is not None:
            self.fallback_trials.discard(trial_id)
            params = {n: config[n] for n in self.space.domains}
            with contextlib.suppress(NotImplementedError):
                self.searcher.add_evaluated_point(params, value if value is not None else 0.0,
                                                  error=value is None)

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None) -> None:
        """Called by the results recorder with each finished trial's failure kind."""
        if self.memory is not None:
            self.memory.record(config, trial_id, kind)


class StagedSearcher(_Pickled):
    """Stages in order; stage k searches its knobs with earlier winners pinned.

    The baseline runs first. A stage's budget is its ``samples`` (or the total split
    evenly). Suggestions wait (None) until a stage's trials have all finished, so its
    winner is known before the next stage starts."""

    def __init__(self, space: SearchSpace, total_samples: int, rounds: int,
                 make_inner: Callable[[SearchSpace, int, str | None], Searcher], seed: int = 0,
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.rounds = rounds
        self.make_inner = make_inner
        self.seed = seed
        stages = space.stages or (Stage("all", tuple(space.domains)),)
        self.stages = tuple(s for s in stages if s.knobs)
        free = max(total_samples - 1, len(self.stages))
        unset = [s for s in self.stages if s.samples is None]
        fixed = sum(s.samples or 0 for s in self.stages)
        share = max(1, (free - fixed) // max(1, len(unset))) if unset else 0
        self.budgets = [s.samples or share for s in self.stages]
        self.stage_index = -1  # -1: the baseline
        self.inner: Searcher | None = None
        self.used = 0
        self.live: set[str] = set()
        self.stage_of: dict[str, str] = {}
        self.config_of: dict[str, Config] = {}
        self.values: dict[str, list[float]] = defaultdict(list)
        self.winners: Config = space.baseline()
        self.winner_trial: str | None = None
        self.history: list[dict[str, Any]] = []

    _transient = ("make_inner",)

    @property
    def current_stage(self) -> str:
        return "baseline" if self.stage_index < 0 else self.stages[self.stage_index].name

    def suggest(self, trial_id: str) -> Config | None:
        if self.stage_index == -1 and not self.stage_of:
            return self._launch(trial_id, self.space.baseline())
        while True:
            if self.stage_index >= 0 and self.used < self.budgets[self.stage_index]:
                assert self.inner is not None
                suggestion = self.inner.suggest(trial_id)
                if suggestion is None:
                    return None
                if suggestion != Searcher.FINISHED:
                    self.used += 1
                    return self._launch(trial_id, {**self.winners, **suggestion})
            if self.live:
                return None  # the stage's winner is not known yet
            if not self._advance():
                return Searcher.FINISHED  # type: ignore[return-value]

    def _launch(self, trial_id: str, config: Config) -> Config:
        self.live.add(trial_id)
        self.stage_of[trial_id] = self.current_stage
        self.config_of[trial_id] = config
        return config

    def _score(self, trial_id: str) -> tuple[int, float] | None:
        values = self.values.get(trial_id)
        if not values:
            return None
        mean = sum(values) / len(values)
        sign = 1.0 if self.mode == "max" else -1.0
        return (1 if len(values) >= self.rounds else 0, sign * mean)

    def _advance(self) -> bool:
        if self.stage_index >= 0 or self.stage_of:
            self._pick_winner()
        self.stage_index += 1
        if self.stage_index >= len(self.stages):
            return False
        stage = self.stages[self.stage_index]
        sub = self.space.stage_space(stage, self.winners)
        self.inner = self.make_inner(sub, self.seed + self.stage_index, stage.search)
        if self.metric and self.mode:
            self.inner.set_search_properties(self.metric, self.mode, {})
        self.used = 0
        return True

    def _pick_winner(self) -> None:
        stage = self.current_stage
        candidates = [t for t, s in self.stage_of.items() if s == stage]
        if self.winner_trial:
            candidates.append(self.winner_trial)
        scored = [(sc, t) for t in candidates if (sc := self._score(t)) is not None]
        if scored:
            _, best = max(scored)
            self.winner_trial = best
            self.winners = dict(self.config_of[best])
        self.history.append({"stage": stage, "winner": self.winner_trial,
                             "config": dict(self.winners)})

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if self.metric in result and trial_id in self.stage_of:
            self.values[trial_id].append(float(result[self.metric]))
        if self.inner is not None and self.stage_of.get(trial_id) == self.current_stage:
            self.inner.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.live.discard(trial_id)
        if error:
            self.values.pop(trial_id, None)
        if self.inner is not None and self.stage_of.get(trial_id) == self.current_stage:
            self.inner.on_trial_complete(trial_id, result=result, error=error)


class FixedPoints(Searcher):
    """Suggests the given configurations in order, then FINISHED; remembers which trial ran
    which point (for labels and for grouping the repeats)."""

    def __init__(self, points: Sequence[Mapping[str, Value]], labels: Sequence[str],
                 metric: str | None = None, mode: str | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self.points = [dict(p) for p in points]
        self.labels = list(labels)
        self.assigned: dict[str, int] = {}  # trial id -> point index

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        index = len(self.assigned)
        if index >= len(self.points):
            return Searcher.FINISHED  # type: ignore[return-value]
        self.assigned[trial_id] = index
        return dict(self.points[index])

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        pass

    def label_of(self, trial_id: str) -> str | None:
        index = self.assigned.get(trial_id)
        return None if index is None else self.labels[index]

    def get_state(self) -> dict[str, Any]:
        return {"points": self.points, "labels": self.labels, "assigned": self.assigned}

    def set_state(self, state: dict[str, Any]) -> None:
        self.points, self.labels = state["points"], state["labels"]
        self.assigned = state["assigned"]

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.get_state(), f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.set_state(pickle.load(f))
