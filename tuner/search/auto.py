"""AutoSearcher, the default search: it reads the space the way a person tuning a machine
would, then lets a model search the rest.

1. The baseline (nothing set).
2. Sweeps: each knob in order of expected effect around the best point so far (the
   catalogue's ``knobs.effect``: which allreduce runs before NCCL's protocol, the protocol
   before channel counts, NCCL's knobs last where another backend carries the allreduces;
   an unrated knob counts as a middle one, ties go in the space's order), each of its values
   one at a time on top of that point (a numeric range from its ends inwards). The first
   pass sweeps every knob, so that no rating can keep one out (it fits in the sized budget:
   budget.py). A value that beats the best by more than any knob left was expected to move
   anything is built on at once, the rest of its knob's values wait for the end of the pass.
   Where values tie within the noise, the point with more knobs set is built on, so that
   each probe also tries the other settings together. After a pass, every knob whose sweep
   started before another one moved the best point (beyond the noise) is swept again, until
   nothing moves: coordinate descent (a sweep cut short measured its first values before the
   rest of the pass moved the best point, so its start counts). Once swept, a knob's
   measured effect (what its sweep spanned) takes the catalogue's place in the order. On a
   landscape whose knobs do not interact this ends at the optimum. Between the first pass
   and a repeat one comes one joint draw (below): where knobs pay only together, a repeat
   pass then refines around what they found, instead of before it.
3. The model phase for the rest of the budget, for what one knob at a time cannot find:
   settings that pay off only together. Its proposals take turns: a joint draw (the best
   point with every knob drawn at once from the values its last sweep could not tell from
   its best, within twice the noise; a knob with one clear best keeps it, and a knob's unset
   value is drawn only where it has no tied other: knobs that each cost a little alone and
   pay together are set together; of JOINT_DRAWS such draws, the one with the most pairs of
   settings no trial has had together), then the model (``model.TPEModel``: Optuna's
   multivariate TPE, seeded with every point measured, failures as infeasible), whose points
   are first sought within NEAR knobs of the best point. One turn in six is a draw from
   anywhere (again the one covering most new pairs): a value the ties left out because the
   noise measured it low is still drawn, so the phase never falls far below random search.

A value that fails in a sweep beside other settings is tried once more alone on the
baseline: failing there, the failure memory rules it out; running there, it failed only
beside the others, and nothing is ruled out. Trials never repeat a measured point. Concurrent
trials are fine: a probe is built on the best point known when it is proposed.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ray.tune.search import Searcher

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.base import OwnSpaceSearcher
from tuner.search.keys import Config, config_key
from tuner.search.levers import joint_draw, lever_order, newest, probe, spanned, ties, value_order
from tuner.search.memory import FailureMemory
from tuner.search.model import TPEModel

BASELINE, SWEEP, MODEL = "baseline", "sweep", "model"
NEAR = 2  # the model's point is first sought within this many knobs of the best point
MOVE = 0.01  # the smallest gain (log units) that counts as the best point moving
TIE = 2.0  # values within this many times the noise of a lever's best tie with it
JOINT_DRAWS = 50  # draws tried for a new joint point before TPE's turn comes early
EARLY_JOINT = 1  # joint draws after the first pass, before a repeat pass
# the model phase's proposals in turn, from the second: joint draws half of them, TPE a
# third, a draw from anywhere (_explore_point) a sixth
TURNS = ("explore", "joint", "model", "joint", "model", "joint")


class Model(Protocol):
    """What the model-based part needs: measured points in, the next point out."""

    def add(self, config: Mapping[str, Value], value: float | None) -> None: ...

    def propose(self, allowed: Callable[[Config], bool]) -> Config | None: ...


def default_model(space: SearchSpace, mode: str, seed: int) -> Model:
    return TPEModel(space, mode, seed)


class AutoSearcher(OwnSpaceSearcher):
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
        self.plan = list(self.order)  # levers still to sweep in this pass
        self.lever: str | None = None  # the lever the sweep is at
        self.value_index = 0  # the next of its values
        self.deferred: list[tuple[str, int]] = []  # levers cut short: (lever, next value)
        self.cut = False  # the last probe gained more than any lever left could
        self.again = False  # sweeping again, levers whose best won narrowly first
        self.started: dict[str, int] = {}  # lever -> launches when its last sweep started
        self.tried: dict[str, list[float]] = {}  # lever -> what its last sweep measured
        self.swept: dict[str, dict[Value, float | None]] = {}  # lever -> value -> its mean
        # in the lever's last sweep (None: it failed), the best point's own value first
        self.early = self.early_done = 0  # joint draws between the first and a repeat pass
        self.turn = 0  # the model phase's proposals: joint draws and TPE's take turns
        self.moves: list[tuple[int, str]] = []  # (launch index, lever) of each real gain
        self.index_of: dict[str, int] = {}  # trial -> launch index
        self.phase_of: dict[str, str] = {}  # trial -> baseline | sweep | model
        self.probed: dict[str, tuple[str, Value]] = {}  # sweep trial -> the knob and value
        self.recheck: list[Config] = []  # failed probes to try again on the baseline
        self.config_of: dict[str, Config] = {}
        self.launched: set[str] = set()
        self.values: dict[str, list[float]] = {}
        self.rounds_of: dict[str, set[int]] = {}
        self.finished: dict[str, tuple[Config, float | None, bool]] = {}  # key -> (config,
        # mean or None for a failure, whether every round ran)
        self.model: Model | None = None
        self.rng = random.Random(seed)

    _transient = ("make_model",)

    # ------------------------------------------------------------ proposing
    def suggest(self, trial_id: str) -> Config | None:
        if not self.phase_of:
            return self._launch(trial_id, self.space.baseline(), BASELINE)
        while self.recheck:
            point = self.recheck.pop(0)
            if self._new(point):
                return self._launch(trial_id, point, SWEEP)
        best = self.best()  # no result arrives while suggesting: one best point throughout
        while self.lever is not None or self._next_lever():
            assert self.lever is not None
            name, values = self.lever, value_order(self.space.domains[self.lever])
            while self.value_index < len(values):
                if self.cut:
                    self.deferred.append((name, self.value_index))
                    break
                value = values[self.value_index]
                self.value_index += 1
                if value == best.get(name):
                    continue
                probed = probe(self.space, best, name, value)
                if probed is not None and self._new(probed):
                    self.probed[trial_id] = (name, value)
                    return self._launch(trial_id, probed, SWEEP)
            self.lever, self.cut = None, False
        if self.early <= EARLY_JOINT and self.early > self.early_done:
            self.early_done = self.early
            joint = self._joint_point()
            if joint is not None:
                return self._launch(trial_id, joint, MODEL)
        return self._from_model(trial_id)

    def _next_lever(self) -> bool:
        """The next lever to sweep: of this pass's, the one with the largest expected effect
        around the best point; then the rest of the levers cut short; once a pass is done, a
        lever swept before another lever (or the model) moved the best point by more than
        the noise: its best value may differ now."""
        if not self.plan and self.deferred:
            self.lever, self.value_index = self.deferred.pop(0)
            return True
        if not self.plan and self.early < EARLY_JOINT:
            self.early += 1  # the first pass is over: joint draws before any repeat pass
            return False
        if not self.plan:
            stale = [lever for lever in self.order
                     if any(other != lever and index >= self.started.get(lever, 0)
                            for index, other in self.moves)]
            ranked = lever_order(self.space, self.best(), self.effects())
            self.plan = sorted(stale, key=ranked.index)
            self.again = bool(self.plan)
        if not self.plan:
            return False
        if self.again:
            self.lever = self.plan.pop(0)
        else:
            ranked = lever_order(self.space, self.best(), self.effects())
            self.lever = min(self.plan, key=ranked.index)
            self.plan.remove(self.lever)
        self.value_index = 0
        self.started[self.lever] = len(self.phase_of)
        best = self._best_value()
        self.tried[self.lever] = [] if best is None else [best]
        self.swept[self.lever] = {} if best is None else {self.best().get(self.lever): best}
        return True

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

    def _from_model(self, trial_id: str) -> Config | None:
        self.turn += 1
        turn = TURNS[self.turn % len(TURNS)]
        point = ((turn == "joint" and self._joint_point())
                 or (turn == "explore" and self._explore_point())
                 or self._model_point() or self._local_move())
        if point is None:
            return Searcher.FINISHED  # type: ignore[return-value]
        return self._launch(trial_id, point, MODEL)

    def _model_point(self) -> Config | None:
        """The model's next point: of its draws, one that changes at most NEAR knobs of the
        best point (what pays off from here: on ``interact`` TPE's draws from anywhere wasted
        the budget on points far off), else any new one."""
        model, best = self._model(), self.best()

        def near(p: Config) -> bool:
            return sum(p.get(n) != best.get(n) for n in self.space.domains) <= NEAR

        point = model.propose(lambda p: near(p) and self._new(p) and not self.space.validate(p))
        return point or model.propose(lambda p: self._new(p) and not self.space.validate(p))

    def _joint_point(self) -> Config | None:
        """The best point with every lever drawn at once from the values its sweep could not
        tell apart (levers that pay only together, each alone within the noise or slightly
        worse, are set together; a lever with one clear best keeps it)."""
        best, choices = self.best(), {lever: self.ties(lever) for lever in self.swept}
        drawn = [point for _ in range(JOINT_DRAWS)
                 if (point := joint_draw(self.space, best, choices, self.rng)) is not None
                 and self._new(point)]
        return newest(drawn, self.config_of.values(), self.space.domains)

    def _explore_point(self) -> Config | None:
        """A point from anywhere in the space, of JOINT_DRAWS uniform draws the one with the
        most pairs of settings no trial has had together: what the sweeps' ties left out (a
        value that paid only beside another, measured low by the noise alone) is still drawn,
        so the model phase never falls far below random search."""
        drawn = [point for _ in range(JOINT_DRAWS)
                 if not self.space.validate(point := self.space.sample(self.rng))
                 and self._new(point)]
        return newest(drawn, self.config_of.values(), self.space.domains)

    def _local_move(self) -> Config | None:
        """When the model keeps proposing what ran: one knob changed on the best points,
        best first; else any new valid point."""
        for config, _, _ in sorted(self._measured(), key=self._rank, reverse=True):
            for name in self.order:
                for value in self.space.domains[name]:
                    point = probe(self.space, config, name, value)
                    if point is not None and self._new(point):
                        return point
        for _ in range(2000):
            point = self.space.sample(self.rng)
            if not self.space.validate(point) and self._new(point):
                return point
        return None

    def _model(self) -> Model:
        if self.model is None:
            make = self.make_model or default_model
            self.model = make(self.space, self.mode or "max", self.seed)
            for config, value, _ in self.finished.values():
                self.model.add(config, value)
        return self.model

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

    def _measured(self) -> list[tuple[Config, float | None, bool]]:
        """The finished points that ran (a measured value)."""
        return [v for v in self.finished.values() if v[1] is not None]

    def _rank(self, entry: tuple[Config, float | None, bool]) -> tuple[bool, float]:
        _, value, complete = entry
        return complete, self._sign * (value or 0.0)

    def _best_value(self) -> float | None:
        ranked = self._measured()
        return max(ranked, key=self._rank)[1] if ranked else None

    def best(self) -> Config:
        """The point the sweep builds on: the best measured so far (one that ran every round
        first); of those within the noise of it, the one that sets the most knobs, so that
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
        if value is None and trial_id in self.probed:
            self._recheck(config, *self.probed[trial_id])
        key = config_key(config)
        probed = self.probed.get(trial_id)
        if value is not None and probed is not None and probed[0] in self.tried:
            self.tried[probed[0]].append(value)
        gain = self._gain(value) if value is not None else 0.0
        if value is not None and probed is not None and probed[0] in self.swept:
            self.swept[probed[0]][probed[1]] = value
        elif probed is not None and probed[0] in self.swept:
            self.swept[probed[0]].setdefault(probed[1], None)
        if gain > self._noise():
            lever = self.probed.get(trial_id, (MODEL, None))[0]
            self.moves.append((self.index_of[trial_id], lever))
            if lever == self.lever and gain > self._largest_left():
                self.cut = True
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
