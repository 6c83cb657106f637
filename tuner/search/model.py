"""TPEModel: the model-based part of the default search, on Optuna's multivariate TPE (one
joint density over every knob, so settings that pay off only together, two or more, are
what it draws near; ``group=True``: knobs the trials always set together form one group),
seeded with every point measured before the model phase and told each one after. A point
that failed is a trial that breaks a constraint (``constraints["failed"] = 1``), so TPE
counts it with the worst; proposals still running count as bad too (``constant_liar``) so
that concurrent trials spread out. No Ray here.

The study lives in memory and is not pickled (Ray pickles the searcher with the Tuner): an
unpickled model rebuilds it from the points it kept (the same data, a fresh random state)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config, config_key

if TYPE_CHECKING:
    import optuna

# The prior (every value alike) weighs as much as this many trials: with the few trials a
# sized budget leaves, TPE at 1.0 kept drawing around two or three top points that tie within
# the noise (on ``needle``, benchmarks/machines.py, 7 of 10 runs within 2% at 27 trials; 10 of
# 10 at 3.0).
PRIOR_WEIGHT = 3.0
ASKS = 24  # proposals drawn per point before the caller falls back to its own move
FAILED = "failed"  # the constraint a failed point breaks


class TPEModel:
    def __init__(self, space: SearchSpace, mode: str, seed: int) -> None:
        self.space = space
        self.mode = mode
        self.seed = seed
        self.points: list[tuple[Config, float | None]] = []  # everything told, in order
        self._study: optuna.Study | None = None
        self._pending: dict[str, Any] = {}  # config key -> the running trial that proposed it

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_study": None, "_pending": {}}

    # ------------------------------------------------------------ the study
    def _distributions(self) -> dict[str, optuna.distributions.BaseDistribution]:
        import optuna

        return {n: optuna.distributions.CategoricalDistribution(list(v))
                for n, v in self.space.domains.items()}

    def study(self) -> optuna.Study:
        if self._study is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", FutureWarning)  # prior_weight's deprecation
                sampler = optuna.samplers.TPESampler(
                    seed=self.seed, multivariate=True, group=True, constant_liar=True,
                    prior_weight=PRIOR_WEIGHT)
            self._study = optuna.create_study(
                direction="maximize" if self.mode == "max" else "minimize", sampler=sampler)
            for config, value in self.points:
                self._study.add_trial(self._frozen(config, value))
        return self._study

    def _worst(self) -> float:
        values = [v for _, v in self.points if v is not None]
        if not values:
            return 0.0
        return min(values) if self.mode == "max" else max(values)

    def _frozen(self, config: Mapping[str, Value], value: float | None
                ) -> optuna.trial.FrozenTrial:
        import optuna

        return optuna.trial.create_trial(
            params={n: config.get(n) for n in self.space.domains},
            distributions=self._distributions(),
            value=self._worst() if value is None else value,
            constraints={FAILED: 0.0 if value is not None else 1.0})

    # ------------------------------------------------------------ data
    def add(self, config: Mapping[str, Value], value: float | None) -> None:
        """A point measured (``value`` None: it failed)."""
        config = {n: config.get(n) for n in self.space.domains}
        self.points.append((config, value))
        if self._study is None:
            return
        trial = self._pending.pop(config_key(config), None)
        if trial is None:
            self._study.add_trial(self._frozen(config, value))
            return
        trial.set_constraint(FAILED, 0.0 if value is not None else 1.0)
        self._study.tell(trial, self._worst() if value is None else value)

    # ------------------------------------------------------------ proposing
    def propose(self, allowed: Callable[[Config], bool]) -> Config | None:
        """TPE's next point that ``allowed`` accepts (and the space's rules), of ASKS draws;
        None when none is."""
        import optuna

        study = self.study()
        distributions = self._distributions()
        for _ in range(ASKS):
            trial = study.ask(distributions)
            point = self.space.complete(trial.params)
            key = config_key({n: point.get(n) for n in self.space.domains})
            if key not in self._pending and not self.space.validate(point) and allowed(point):
                self._pending[key] = trial
                return point
            study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not a proposal: unseen
        return None
