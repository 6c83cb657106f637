"""One ``fit()`` for the search and the confirm stage alike: a Ray Tune ``Tuner`` over a
trainable with the experiment's searcher, scheduler, recorder and progress lines, run to the
end or until interrupted. Only Ray's public API: ``Tuner``, ``Tuner.restore``,
``ResultGrid``.

Resuming: ``Tuner.restore`` brings back the tune and run configs pickled in tuner.pkl (the
searcher stack, the recorder that feeds it, the progress lines: all picklable, plain data),
and Ray restores the searcher's state from its checkpoint in the experiment folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
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
    """Whether a Tuner ever started in ``folder`` (resume needs one)."""
    return (folder / TUNER_FILE).exists()


def fit(plan: FitPlan, *, resume: bool = False) -> FitOutcome:
    """Run the Tuner (restored from its folder with ``resume``) to its end."""
    folder = plan.storage / plan.name
    if resume and started(folder):
        tuner = tune.Tuner.restore(str(folder), trainable=plan.trainable,
                                   resume_unfinished=True, resume_errored=False)
    else:
        tuner = tune.Tuner(plan.trainable, tune_config=tune.TuneConfig(
            metric=plan.objective.search_metric, mode=plan.objective.mode,
            num_samples=plan.num_samples, search_alg=plan.search_alg, scheduler=plan.scheduler,
            reuse_actors=plan.reuse_actors, trial_dirname_creator=_trial_dirname),
            run_config=tune.RunConfig(
                name=plan.name, storage_path=str(plan.storage), callbacks=list(plan.callbacks),
                progress_reporter=plan.reporter, verbose=1, stop=plan.stop,
                failure_config=tune.FailureConfig(max_failures=0)))
    with interrupt_watch() as was_interrupted:
        grid = tuner.fit()
        caught = was_interrupted()
    finished = grid.num_terminated + grid.num_errors
    # Tune marks in-flight trials TERMINATED when it cleans up after a Ctrl-C, so the counts
    # alone do not tell an interrupted run from a finished one: the signal watch does.
    interrupted = caught or finished < len(grid)
    return FitOutcome(len(grid), finished, interrupted)


@contextlib.contextmanager
def interrupt_watch() -> Iterator[Callable[[], bool]]:
    """Yields a check: did Ray Tune's fit() catch a Ctrl-C? Tune swaps its own SIGINT
    handler in and puts the previous one back on the first signal, so this sentinel being
    back in place after fit() means fit() was interrupted. SIGTERM (``kill``, ``timeout``, a
    batch scheduler) is turned into that same graceful stop instead of killing the driver
    with Ray and its servers still running."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def sentinel(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    def term_as_int(signum: int, frame: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, sentinel)
    previous_term = signal.signal(signal.SIGTERM, term_as_int)
    try:
        yield lambda: signal.getsignal(signal.SIGINT) is sentinel
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
