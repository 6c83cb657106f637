"""AutoSearcher, the default search: it reads the space the way a person tuning a machine
would, then lets a model search the rest.

1. The baseline (nothing set).
2. The first pass: each lever in order of expected effect around the best point so far (the
   catalogue's ``knobs.effect``: which allreduce runs before NCCL's protocol, the protocol
   before channel counts, NCCL's levers last where another backend carries the allreduces;
   an unrated lever counts as a middle one, ties go in the space's order), each of its values
   one at a time on top of that point (a numeric range from its ends inwards). It sweeps
   every lever, so that no rating can keep one out (it fits in the sized budget: budget.py).
   A value that beats the best by more than any lever left was expected to move anything is
   built on at once, the rest of its lever's values wait for the end of the pass. Where
   values tie within the noise, the point with more levers set is built on, so that each
   probe also tries the other settings together. Once swept, a lever's measured effect (what
   its sweep spanned) takes the catalogue's place in the order.
3. Repeat passes (refine.py): a lever swept before other levers moved the best point by more
   than the noise, their gains since its sweep started added up, is swept again around the
   best point, until nothing moves: coordinate descent. A repeat pass tries the values of all
   such levers in one queue, those that measured closest to their lever's best first (on a
   landscape whose levers do not interact it ends at the optimum). Between the first pass
   and a repeat pass comes one joint draw (auto_model.py): where levers pay only together, a
   repeat pass then refines around what they found, instead of before it.
4. The model phase for the rest of the budget (auto_model.py): joint draws, Optuna's
   multivariate TPE and draws from anywhere, in turns.

Where a model-phase point moves the best point, each lever it changed is set back to the old
best's value, one at a time (a joint draw sets every lever at once: the settings that paid
stay, the rest go back); and the point the run's one-lever pairs of measurements, pooled,
rank best (pairs.py: small gains measured one at a time, tried together) is tried when the
sweeps end and every CONSENSUS_EVERY launches of a repeat pass.

A value that fails in a sweep beside other settings is tried once more alone on the
baseline: failing there, the failure memory rules it out; running there, it failed only
beside the others, and nothing is ruled out. Trials never repeat a measured point. Concurrent
trials are fine: a probe is built on the best point known when it is proposed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any

from ray.tune.search import Searcher

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.auto_model import (
    BASELINE,
    MODEL,
    SWEEP,
    TIE,
    Entry,
    Model,
    ModelPhase,
    default_model,
)
from tuner.search.base import OwnSpaceSearcher
from tuner.search.keys import Config, config_key
from tuner.search.levers import lever_order, probe, runnable, spanned, ties, value_order
from tuner.search.memory import FailureMemory
from tuner.search.refine import Refine

__all__ = ["BASELINE", "MODEL", "SWEEP", "AutoSearcher", "Model", "default_model"]

MOVE = 0.01  # the smallest gain (log units) that counts as the best point moving
EARLY_JOINT = 1  # joint draws after the first pass, before a repeat pass


class AutoSearcher(Refine, ModelPhase, OwnSpaceSearcher):
    def __init__(self, space: SearchSpace, rounds: int, seed: int = 0,
                 metric: str | None = None, mode: str | None = None,
                 memory: FailureMemory | None = None,
                 make_model: Callable[[SearchSpace, str, int], Model] | None = None
                 ) -> None:
        super().__init__(metric=metric, mode=mode)
        self.space = space
        self.rounds = rounds
        self.seed = seed
        self.memory = memory
        self.make_model = make_model
        self.order = lever_order(space)
        self.plan = list(self.order)  # levers still to sweep in the first pass
        self.lever: str | None = None  # the lever the first pass is at
        self.value_index = 0  # the next of its values
        self.deferred: list[tuple[str, int]] = []  # levers cut short: (lever, next value)
        self.cut = False  # the last probe gained more than any lever left could
        self.queue: list[tuple[str, Value]] = []  # a repeat pass: (lever, value) in turn
        self.started: dict[str, int] = {}  # lever -> launches when its last sweep started
        self.tried: dict[str, list[float]] = {}  # lever -> what its last sweep measured
        self.swept: dict[str, dict[Value, float | None]] = {}  # lever -> value -> its mean
        # in the lever's last sweep (None: it failed), the best point's own value first
        self.early = self.early_done = 0  # joint draws between the first and a repeat pass
        self.turn = 0  # the model phase's proposals: joint draws and TPE's take turns
        self.gains: list[tuple[int, str, float]] = []  # (launch index, lever, gain) of each
        # result that beat the best measured (MODEL, a revert's lever or CONSENSUS for others)
        self.revert: list[tuple[str, Value]] = []  # after a model move: the old best's values
        self.anchor: tuple[Config, float] | None = None  # the point the reverts build on
        self.reverted: dict[str, tuple[str, Value, float, float | None]] = {}  # its reverts
        self.refined: dict[str, str] = {}  # revert or consensus trial -> its lever, CONSENSUS
        self.last_consensus = 0  # launches when the last combined point was proposed
        self.index_of: dict[str, int] = {}  # trial -> launch index
        self.phase_of: dict[str, str] = {}  # trial -> baseline | sweep | model
        self.probed: dict[str, tuple[str, Value]] = {}  # sweep trial -> the lever and value
        self.recheck: list[Config] = []  # failed probes to try again on the baseline
        self.config_of: dict[str, Config] = {}
        self.launched: set[str] = set()
        self.values: dict[str, list[float]] = {}
        self.rounds_of: dict[str, set[int]] = {}
        self.finished: dict[str, Entry] = {}  # key -> (config, mean or None for a failure,
        # whether every round ran)
        self.model: Model | None = None
        self.rng = random.Random(seed)

    # ------------------------------------------------------------ proposing
    def suggest(self, trial_id: str) -> Config | None:
        if not self.phase_of:
            return self._launch(trial_id, self.space.baseline(), BASELINE)
        while self.recheck:
            alone = self.recheck.pop(0)
            if self._new(alone):
                return self._launch(trial_id, alone, SWEEP)
        best = self.best()  # no result arrives while suggesting: one best point throughout
        point = self._revert_point(trial_id)
        if point is None and self.queue:
            point = self._consensus(trial_id, best)
        while point is None and (self.queue or self.lever is not None or self._next_lever()):
            point = self._repeat_probe(trial_id, best) if self.queue else \
                self._first_pass_probe(trial_id, best)
        if point is None and self.early_done:
            point = self._consensus(trial_id, best)
        if point is None and self.early_done < self.early <= EARLY_JOINT:
            self.early_done = self.early
            joint = self._joint_point()
            point = None if joint is None else self._launch(trial_id, joint, MODEL)
        if point is None:
            point = self._from_model(trial_id)
        return Searcher.FINISHED if point is None else point  # type: ignore[return-value]

    def _repeat_probe(self, trial_id: str, best: Config) -> Config | None:
        """The repeat pass's next value beside the best point (None: it cannot run there)."""
        name, value = self.queue.pop(0)
        point = runnable(self.space, {**best, name: value})
        if value == best.get(name) or point is None or point.get(name) != value:
            return None
        return self._probe(trial_id, point, name, value)

    def _first_pass_probe(self, trial_id: str, best: Config) -> Config | None:
        """The first pass's next value of its lever (None at the lever's end)."""
        assert self.lever is not None
        name, values = self.lever, value_order(self.space.domains[self.lever])
        while self.value_index < len(values):
            if self.cut:
                self.deferred.append((name, self.value_index))
                break
            value = values[self.value_index]
            self.value_index += 1
            point = probe(self.space, best, name, value) if value != best.get(name) else None
            if point is not None and (launched := self._probe(trial_id, point, name, value)):
                return launched
        self.lever, self.cut = None, False
        return None

    def _probe(self, trial_id: str, point: Config, name: str, value: Value) -> Config | None:
        if not self._new(point):
            return None
        self.probed[trial_id] = (name, value)
        return self._launch(trial_id, point, SWEEP)

    def _next_lever(self) -> bool:
        """The first pass's next lever: of those left, the one with the largest expected
        effect around the best point; then the rest of the levers cut short; once the pass is
        done, one joint draw, then a repeat pass (refine.py) where one is due."""
        if not self.plan and self.deferred:
            self.lever, self.value_index = self.deferred.pop(0)
            return True
        if not self.plan and self.early < EARLY_JOINT:
            self.early += 1  # the first pass is over: joint draws before any repeat pass
            return False
        if not self.plan:
            self._repeat_pass()
            return False
        ranked = lever_order(self.space, self.best(), self.effects())
        self.lever = min(self.plan, key=ranked.index)
        self.plan.remove(self.lever)
        self.value_index = 0
        self._start_sweep(self.lever)
        return True

    def _start_sweep(self, lever: str) -> None:
        """A sweep of ``lever`` starts around the best point: its records start afresh."""
        self.started[lever] = len(self.phase_of)
        best = self._best_value()
        self.tried[lever] = [] if best is None else [best]
        self.swept[lever] = {} if best is None else {self.best().get(lever): best}

    def ties(self, lever: str) -> list[Value]:
        """The values of ``lever`` its last sweep could not tell from its best one: within
        twice the noise, once for the value's own and once for the best point's (it was picked
        as the best of many, so its mean is likely high by about as much)."""
        return ties(self.swept.get(lever, {}), TIE * self._noise(), self._sign)

    def effects(self) -> dict[str, float]:
        """Each swept lever's measured effect (what its last sweep spanned, as a factor): it
        takes the catalogue's place in the order of the sweeps that follow."""
        return {lever: span for lever, values in self.tried.items()
                if (span := spanned(values)) is not None}

    def _new(self, point: Config) -> bool:
        return config_key(point) not in self.launched and not (
            self.memory is not None and self.memory.ruled_out(point))

    def completed(self, trial_id: str, config: Config) -> None:
        """The filter completed this suggestion with partners (what the workload resolved for
        the baseline): the point that runs is ``config``, and the sweeps build on it (where
        its partners are values of the space: the model knows no others)."""
        if trial_id in self.config_of and all(
                config.get(n) in values for n, values in self.space.domains.items()):
            self.launched.add(config_key(config))
            self.config_of[trial_id] = dict(config)

    def _launch(self, trial_id: str, config: Config, phase: str) -> Config:
        self.index_of[trial_id] = len(self.phase_of)
        self.phase_of[trial_id] = phase
        self.config_of[trial_id] = config
        self.launched.add(config_key(config))
        return config

    # ------------------------------------------------------------ the best point
    @property
    def _sign(self) -> float:
        return 1.0 if self.mode != "min" else -1.0

    def _direction(self) -> str:
        return self.mode or "max"

    def _measured(self) -> list[Entry]:
        """The finished points that ran (a measured value)."""
        return [v for v in self.finished.values() if v[1] is not None]

    def _rank(self, entry: Entry) -> tuple[bool, float]:
        _, value, complete = entry
        return complete, self._sign * (value or 0.0)

    def _best_value(self) -> float | None:
        ranked = self._measured()
        return max(ranked, key=self._rank)[1] if ranked else None

    def best(self) -> Config:
        """The point the sweep builds on: the best measured so far (one that ran every round
        first); of those within the noise of it, the one that sets the most levers, so that
        where the values tie each probe also tries the other settings together. The baseline
        before any."""
        ranked = self._measured()
        if not ranked:
            return self.space.baseline()
        top = max(ranked, key=self._rank)
        noise = self._noise()
        baseline = self.space.baseline()
        near = [v for v in ranked if v[2] == top[2] and v[1] and top[1]
                and self._sign * (math.log(top[1]) - math.log(v[1])) <= noise]
        return dict(max(near, key=lambda v: (sum(v[0][n] != baseline[n] for n in baseline),
                                            self._rank(v)))[0])

    def _gain(self, value: float) -> float:
        """How much ``value`` beats the best measured so far, in log units."""
        best = self._best_value()
        if best is None or best <= 0 or value <= 0:
            return 0.0
        return self._sign * (math.log(value) - math.log(best))

    def _largest_left(self) -> float:
        """The most (log units) a lever still to sweep in this pass is expected to gain."""
        best, measured = self.best(), self.effects()
        measured.pop(self.lever or "", None)  # the sweep under way is measuring it again
        return max((math.log(measured.get(n, knobs.effect(n, best)))
                    for n in [*self.plan, self.lever] if n), default=0.0)

    def _noise(self) -> float:
        """A gain that is more than noise: twice the typical standard error of a trial's
        mean (its rounds' spread), at least MOVE."""
        errors = sorted(statistics.stdev(v) / abs(statistics.fmean(v)) / math.sqrt(len(v))
                        for v in self.values.values() if len(v) >= 2 and statistics.fmean(v))
        return max(MOVE, 2.0 * errors[len(errors) // 2]) if errors else MOVE

    # ------------------------------------------------------------ results
    def _record(self, trial_id: str, result: dict[str, Any]) -> None:
        done = self.rounds_of.setdefault(trial_id, set())
        values = self.values.setdefault(trial_id, [])
        round_ = result.get("round", len(values) + 1)
        if self.metric in result and round_ not in done:
            done.add(round_)
            values.append(float(result[self.metric]))

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id in self.config_of:
            self._record(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        config = self.config_of.get(trial_id)
        if config is None:
            return  # not one of ours (the filter answered a repeat)
        if result and not error:
            self._record(trial_id, result)
        values = [] if error else self.values.get(trial_id, [])
        value = sum(values) / len(values) if values else None
        probed = self.probed.get(trial_id)
        if value is None and probed is not None:
            self._recheck(config, *probed)
        if value is not None and probed is not None and probed[0] in self.tried:
            self.tried[probed[0]].append(value)
        if probed is not None and probed[0] in self.swept:
            if value is not None:
                self.swept[probed[0]][probed[1]] = value
            else:
                self.swept[probed[0]].setdefault(probed[1], None)
        gain = self._gain(value) if value is not None else 0.0
        lever = probed[0] if probed else self.refined.get(trial_id, MODEL)
        if gain > 0:
            self.gains.append((self.index_of[trial_id], lever, gain))
        if value is not None:
            self._refine_after(trial_id, config, value, gain > self._noise())
        if gain > self._noise() and lever == self.lever and gain > self._largest_left():
            self.cut = True
        key = config_key(config)
        if key not in self.finished:
            self.finished[key] = (config, value, len(values) >= self.rounds)
            if self.model is not None:
                self.model.add(config, value)

    def _recheck(self, failed: Config, name: str, value: Value) -> None:
        """A probe that failed beside other settings: the value alone, on the baseline."""
        alone = self.space.complete({name: value})
        if failed != alone and not self.space.validate(alone):
            self.recheck.append(alone)

    def add_evaluated_point(self, parameters: dict, value: float, error: bool = False,
                            pruned: bool = False, intermediate_values: Any = None) -> None:
        """A point the filter launched on its own (its random fallback)."""
        config = self.space.complete(parameters)
        key = config_key(config)
        self.launched.add(key)
        if key not in self.finished:
            measured = None if error else float(value)
            self.finished[key] = (config, measured, True)
            if self.model is not None:
                self.model.add(config, measured)
