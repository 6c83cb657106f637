"""One ``fit()`` for the search and the confirm stage alike: a Ray Tune ``Tuner`` over a
trainable with the experiment's searcher, scheduler, recorder and progress lines, run to the
end or until interrupted. Only Ray's public API: ``Tuner``, ``ResultGrid``.

Resuming: a search resumes from servetune's journal (``tuner.run.replay``): a new Tuner with
a searcher that replayed the finished trials, for the rest of the budget. Ray's own
``Tuner.restore`` is not used: it needs Ray's experiment checkpoint, which a driver killed in
its first seconds never wrote and which lags the journal by up to TUNE_GLOBAL_CHECKPOINT_S.
SIGINT/SIGTERM are handled by ``tuner.run.stopping``, not here.
"""

from __future__ import annotations

import contextlib
import sys
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


def load_tensorboard_writer() -> None:
    """Import tensorboardX (Ray Tune's TensorBoard logger) without torch. tensorboardX imports
    torch only to accept torch tensors as values, which no result of a trial is; in the
    driver that import cost about 2 s of CPU per run, more than the rest of the logger.
    Where torch is already loaded, or tensorboardX is absent, this changes nothing."""
    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # Python's "import fails" entry
    try:
        with contextlib.suppress(ImportError):
            import tensorboardX  # noqa: F401
    finally:
        del sys.modules["torch"]


def fit(plan: FitPlan) -> FitOutcome:
    """Run a new Tuner to its end. A plan with no sample left runs nothing."""
    if plan.num_samples <= 0:
        return FitOutcome(0, 0, False)
    load_tensorboard_writer()
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
