"""One ``fit()`` for the search and the confirm stage alike: a Ray Tune ``Tuner`` over a
trainable with the experiment's searcher, scheduler, recorder and progress lines, run to the
end or until interrupted. Only Ray's public API: ``Tuner``, ``Tuner.restore``,
``ResultGrid``.

Resuming: a search resumes from servetune's journal (``tuner.run.replay``): a new Tuner with
a searcher that replayed the finished trials, for the rest of the budget. ``Tuner.restore``
(``restore``) needs Ray's experiment checkpoint, which a driver killed in its first seconds
never wrote and which lags the journal by up to TUNE_GLOBAL_CHECKPOINT_S otherwise.
SIGINT/SIGTERM are handled by ``tuner.run.stopping``, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune
from ray.tune import Callback, ProgressReporter, Stopper
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher

from tuner.spec import Objective

TUNER_FILE = "tuner.pkl"  # Ray's: written when a Tuner starts in its folder
STATE_GLOB = "experiment_state-*.json"  # Ray's: its periodic experiment checkpoint


@dataclass
class FitPlan:
    """A Tuner to run: ``name`` is its folder under ``storage``."""

    name: str
    storage: Path
    trainable: type
    objective: Objective
    search_alg: Searcher
    scheduler: TrialScheduler
    num_samples: int
    callbacks: Sequence[Callback]
    reporter: ProgressReporter
    reuse_actors: bool
    stop: Stopper | None = None  # ends the whole experiment when its stop_all() says so


@dataclass
class FitOutcome:
    trials: int  # trials the grid holds
    finished: int  # of them, ended (completed, stopped or errored)
    interrupted: bool


def _trial_dirname(trial: Any) -> str:
    return str(trial.trial_id)


def started(folder: Path) -> bool:
    """Whether a Tuner ever started in ``folder``."""
    return (folder / TUNER_FILE).exists()


def restorable(folder: Path) -> bool:
    """Whether Ray can restore the Tuner of ``folder``: it started there and checkpointed
    its experiment state at least once."""
    return started(folder) and any(folder.glob(STATE_GLOB))


def fit(plan: FitPlan, *, restore: bool = False) -> FitOutcome:
    """Run a new Tuner (with ``restore``, Ray's own from its folder) to its end. A plan with
    no sample left runs nothing."""
    folder = plan.storage / plan.name
    if restore and restorable(folder):
        tuner = tune.Tuner.restore(str(folder), trainable=plan.trainable,
                                   resume_unfinished=True, resume_errored=False)
    elif plan.num_samples <= 0:
        return FitOutcome(0, 0, False)
    else:
        tuner = tune.Tuner(plan.trainable, tune_config=tune.TuneConfig(
            metric=plan.objective.search_metric, mode=plan.objective.mode,
            num_samples=plan.num_samples, search_alg=plan.search_alg, scheduler=plan.scheduler,
            reuse_actors=plan.reuse_actors, trial_dirname_creator=_trial_dirname),
            run_config=tune.RunConfig(
                name=plan.name, storage_path=str(plan.storage), callbacks=list(plan.callbacks),
                progress_reporter=plan.reporter, verbose=1, stop=plan.stop,
                failure_config=tune.FailureConfig(max_failures=0)))
    grid = tuner.fit()
    finished = grid.num_terminated + grid.num_errors
    return FitOutcome(len(grid), finished, finished < len(grid))
