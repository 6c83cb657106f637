"""The model-based part of the default search: an Optuna study over the space's knobs, asked
and told directly (no Ray), seeded with every point measured before it started. No Ray here."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config, config_key

if TYPE_CHECKING:
    import optuna

ASKS = 30  # proposals tried per trial before giving up (the caller then moves locally)


class ModelSearch:
    """Optuna's TPE (multivariate: it models the knobs jointly) over the space's categorical
    knobs. ``add`` tells it a point measured elsewhere; ``ask`` proposes; ``tell`` answers."""

    def __init__(self, space: SearchSpace, mode: str, seed: int,
                 storage: optuna.storages.BaseStorage | None = None,
                 name: str | None = None) -> None:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.space = space
        self.names = list(space.domains)
        self.measured: dict[str, float | None] = {}
        self.pending: dict[str, int] = {}  # proposed, not measured yet: key -> trial number
        self.distributions: dict[str, optuna.distributions.BaseDistribution] = {
            n: optuna.distributions.CategoricalDistribution(list(v))
            for n, v in space.domains.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=False,
                                                 n_startup_trials=1, constant_liar=True)
        self.study = optuna.create_study(
            direction="maximize" if mode == "max" else "minimize", sampler=sampler,
            storage=storage, study_name=name, load_if_exists=storage is not None)

    def add(self, config: Mapping[str, Value], value: float | None) -> None:
        """A measured point (``value`` None: it failed): the answer to the proposal that
        launched it, else a trial of its own."""
        import optuna

        key = config_key(config)
        self.measured[key] = value
        number = self.pending.pop(key, None)
        if number is not None:
            self._tell(number, value)
            return
        state = optuna.trial.TrialState.COMPLETE if value is not None \
            else optuna.trial.TrialState.FAIL
        self.study.add_trial(optuna.trial.create_trial(
            params={n: config[n] for n in self.names}, distributions=self.distributions,
            value=value, state=state))

    def propose(self, allowed: Callable[[Config], bool]) -> Config | None:
        """TPE's next point that is allowed and new (what it proposes that ran is answered
        from the measurement; what may not run, as a failure); None after ASKS tries."""
        for _ in range(ASKS):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                trial = self.study.ask(self.distributions)
            point = self.space.complete(trial.params)
            key = config_key(point)
            if key in self.measured:
                self._tell(trial.number, self.measured[key])
            elif key in self.pending or not allowed(point):
                self._tell(trial.number, None)
            else:
                self.pending[key] = trial.number
                return point
        return None

    def _tell(self, number: int, value: float | None) -> None:
        import optuna

        if value is None:
            self.study.tell(number, state=optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(number, value)
