"""The default search's model phase (auto.py step 4): once the sweeps are done, proposals
for what one lever at a time cannot find, settings that pay off only together. They take
turns: a joint draw (the best point with every lever drawn at once from the values its last
sweep, or the run's one-lever pairs pooled, could not tell from its best, within twice the
noise; a lever with one clear best
keeps it, and a lever's unset value is drawn only where it has no tied other: levers that
each cost a little alone and pay together are set together; of JOINT_DRAWS such draws, the
one with the most pairs of settings no trial has had together), then the model
(``model.TPEModel``: Optuna's multivariate TPE, seeded with every point measured, failures as
infeasible), whose points are first sought within NEAR levers of the best point. One turn in
six is a draw from anywhere (again the one covering most new pairs): a value the ties left
out because the noise measured it low is still drawn, so the phase never falls far below
random search. No Ray here."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import Protocol

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config
from tuner.search.levers import joint_draw, newest, probe
from tuner.search.model import TPEModel
from tuner.search.pairs import pooled_ties

BASELINE, SWEEP, MODEL = "baseline", "sweep", "model"  # a trial's phase
NEAR = 2  # the model's point is first sought within this many levers of the best point
JOINT_DRAWS = 50  # draws tried for a new joint point before TPE's turn comes early
TIE = 2.0  # values within this many times the noise of a lever's best tie with it
# the model phase's proposals in turn, from the second: joint draws half of them, TPE a
# third, a draw from anywhere (_explore_point) a sixth
TURNS = ("explore", "joint", "model", "joint", "model", "joint")
Entry = tuple[Config, "float | None", bool]  # a finished point: config, mean, every round ran


class Model(Protocol):
    """What the model-based part needs: measured points in, the next point out."""

    def add(self, config: Mapping[str, Value], value: float | None) -> None: ...

    def propose(self, allowed: Callable[[Config], bool]) -> Config | None: ...


def default_model(space: SearchSpace, mode: str, seed: int) -> Model:
    return TPEModel(space, mode, seed)


class ModelPhase:
    """The model phase's proposals, for AutoSearcher (which holds the state named here)."""

    space: SearchSpace
    seed: int
    order: list[str]
    rng: random.Random
    turn: int
    model: Model | None
    make_model: Callable[[SearchSpace, str, int], Model] | None
    swept: dict[str, dict[Value, float | None]]
    config_of: dict[str, Config]
    finished: dict[str, Entry]

    # provided by AutoSearcher
    @property
    def _sign(self) -> float:
        raise NotImplementedError

    def _noise(self) -> float:
        raise NotImplementedError

    def _direction(self) -> str:
        raise NotImplementedError

    def best(self) -> Config:
        raise NotImplementedError

    def ties(self, lever: str) -> list[Value]:
        raise NotImplementedError

    def _new(self, point: Config) -> bool:
        raise NotImplementedError

    def _measured(self) -> list[Entry]:
        raise NotImplementedError

    def _rank(self, entry: Entry) -> tuple[bool, float]:
        raise NotImplementedError

    def _launch(self, trial_id: str, config: Config, phase: str) -> Config:
        raise NotImplementedError

    # ------------------------------------------------------------ proposals
    def _from_model(self, trial_id: str) -> Config | None:
        """The model phase's next point, None when the space has no new one."""
        self.turn += 1
        turn = TURNS[self.turn % len(TURNS)]
        point = ((turn == "joint" and self._joint_point())
                 or (turn == "explore" and self._explore_point())
                 or self._model_point() or self._local_move())
        return None if point is None else self._launch(trial_id, point, MODEL)

    def _model_point(self) -> Config | None:
        """The model's next point: of its draws, one that changes at most NEAR levers of the
        best point (what pays off from here: on ``interact`` TPE's draws from anywhere wasted
        the budget on points far off), else any new one."""
        model, best = self._model(), self.best()

        def near(p: Config) -> bool:
            return sum(p.get(n) != best.get(n) for n in self.space.domains) <= NEAR

        point = model.propose(lambda p: near(p) and self._new(p) and not self.space.validate(p))
        return point or model.propose(lambda p: self._new(p) and not self.space.validate(p))

    def _joint_point(self) -> Config | None:
        """The best point with every lever drawn at once from the values its sweep could not
        tell apart, or the run's one-lever pairs, pooled, could not (pairs.pooled_ties: a value
        one sweep measured low by the noise alone is still drawn): levers that pay only
        together, each alone within the noise or slightly worse, are set together; a lever
        with one clear best keeps it."""
        best, choices = self.best(), {lever: self.ties(lever) for lever in self.swept}
        pooled = pooled_ties(self.space.domains, [(c, v) for c, v, _ in self._measured() if v],
                             self._sign, TIE * self._noise())
        for lever, values in pooled.items():
            if lever in choices:
                choices[lever] += [v for v in values if v not in choices[lever]]
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
        """When the model keeps proposing what ran: one lever changed on the best points,
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
            self.model = make(self.space, self._direction(), self.seed)
            for config, value, _ in self.finished.values():
                self.model.add(config, value)
        return self.model
