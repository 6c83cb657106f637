"""The driver-side record of an experiment: every trial event appended to results.jsonl the
moment Ray reports it, and results.csv rewritten whenever a trial ends. Nothing measured is
lost when the driver is interrupted: the journal is flushed line by line.

The journal is what ``--resume`` rebuilds the search from (``tuner.run.replay``). The recorder
is pickled with the Tuner (tuner.pkl) and comes back when Ray restores one (a search bound to
an Optuna study): it holds only plain data and the searcher it feeds (the same object)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from ray.tune import Callback
from ray.tune.experiment import Trial

from launchers.failures import (
    Failure,
    FailureKind,
    TrialFailed,
    failure_from_error_text,
    follower_placement,
)
from search_spaces.knobs import Value
from tuner.output.results import write_table
from tuner.record.events import EndEvent, FailureInfo, ResultEvent, StartEvent, append_event
from tuner.record.experiment import Experiment
from tuner.record.files import JOURNAL, NODES_JSON
from tuner.record.trial_file import read_nodes
from tuner.run.multinode import node_label
from tuner.spec import Objective

log = logging.getLogger(__name__)

# Keys Ray adds to every result; the journal keeps only what servetune measured (Ray's trial
# id too, which the event carries as its own: ``ResultEvent.of`` leaves it out of the metrics).
RAY_KEYS = frozenset({
    "timestamp", "checkpoint_dir_name", "done", "training_iteration", "date",
    "time_this_iter_s", "time_total_s", "time_since_restore", "iterations_since_restore",
    "config", "experiment_tag", "should_checkpoint", "node_ip",
})


def _pickled_error(trial: Trial) -> Any:
    """The error Ray pickled for a trial. When on_trial_error runs, Ray has written it only
    to the driver's staging folder (``pickled_error_file``); the experiment folder gets it
    at the next sync, which is what ``get_pickled_error`` reads."""
    import ray.cloudpickle

    with contextlib.suppress(Exception):
        local = trial.pickled_error_file
        if local and Path(local).is_file():
            with open(local, "rb") as f:
                return ray.cloudpickle.load(f)
    with contextlib.suppress(Exception):  # an unpicklable or missing error file
        return trial.get_pickled_error()
    return None


def _error_text(trial: Trial) -> str:
    with contextlib.suppress(Exception):
        local = trial.error_file
        if local and Path(local).is_file():
            return Path(local).read_text()
    with contextlib.suppress(Exception):
        return str(trial.get_error() or "")
    return ""


def trial_failure(trial: Trial) -> Failure:
    """The Failure a trial raised (TrialFailed pickled by Ray), else from Ray's error text."""
    error = _pickled_error(trial)
    if isinstance(error, TrialFailed):
        return error.failure
    cause = getattr(error, "cause", None) or getattr(error, "__cause__", None)
    if isinstance(cause, TrialFailed):
        return cause.failure
    text = _error_text(trial)
    if not text and error is not None:
        text = str(error)
    return failure_from_error_text(text) if text else Failure(FailureKind.CRASHED, "trial errored")


def with_lost_node(failure: Failure, trial_dir: Path) -> Failure:
    """A trial that died with its own node (``node_lost``, node 0): that node named as the
    trial's nodes.json has it (a trial across nodes writes one once its servers start)."""
    if failure.kind is not FailureKind.NODE_LOST or failure.details.get("node_rank") != 0:
        return failure
    nodes = read_nodes(trial_dir / NODES_JSON)
    if nodes and nodes[0].node_id:
        label = node_label(0, nodes[0].dump())
        failure.message = failure.message.replace("the trial's own node", label, 1)
        failure.details.update(node=label, node_id=nodes[0].node_id)
    return failure


class OutcomeFeed(Protocol):
    """Who learns each finished trial's failure kind (the failure-aware searcher), and the
    nodes of a failure seen on a follower only (``follower_placement``)."""

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None,
                       placement: str | None = None) -> None: ...


class OutcomeWatch(Protocol):
    """Who judges each finished search trial before the failure memory learns it (the broken
    environment check, ``tuner.run.environment``); it feeds the memory itself."""

    def observe(self, trial_id: str, config: Mapping[str, Value], failure: Failure | None
                ) -> None: ...

    def restart(self) -> None: ...


class Recorder(Callback):
    """Journal + results.csv + failure feed for the searcher (through ``watch`` when given)."""

    def __init__(self, out_dir: Path, objective: Objective, baseline: Mapping[str, Value], *,
                 feed: OutcomeFeed | None = None, watch: OutcomeWatch | None = None,
                 stage_of: Callable[[str], str | None] | None = None,
                 tags: Mapping[str, Any] | None = None) -> None:
        self.out_dir = out_dir
        self.objective = objective
        self.baseline = dict(baseline)
        self.tags = dict(tags or {})  # added to each start event, e.g. {"phase": "confirm"}
        self.journal = out_dir / JOURNAL
        self.feed = feed
        self.watch = watch
        self.stage_of = stage_of
        self.order = self._next_order()

    def setup(self, *args: Any, **info: Any) -> None:
        """Each fit, a resumed one too: launch order continues from the journal."""
        self.order = self._next_order()
        if self.watch is not None:
            self.watch.restart()

    def _next_order(self) -> int:
        return Experiment.journal(self.out_dir).next_order() if self.journal.exists() else 0

    def _write(self, event: StartEvent | ResultEvent | EndEvent) -> None:
        append_event(self.journal, event)

    def _table(self) -> None:
        write_table(self.out_dir, self.objective, self.baseline, running=True)

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
                       ) -> None:
        stage = self.stage_of(trial.trial_id) if self.stage_of else None
        self._write(StartEvent(
            time=time.time(), trial_id=trial.trial_id, order=self.order, config=trial.config,
            stage=stage, dir=trial.storage.trial_fs_path if trial.storage else None,
            **self.tags))
        self.order += 1

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial,
                        result: dict[str, Any], **info: Any) -> None:
        metrics = {k: v for k, v in result.items() if k not in RAY_KEYS}
        self._write(ResultEvent.of(trial.trial_id, metrics, time.time()))

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
                          ) -> None:
        self._write(EndEvent(trial_id=trial.trial_id, time=time.time(), status="ok"))
        self._outcome(trial, None)
        self._table()

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any
                       ) -> None:
        failure = with_lost_node(trial_failure(trial), self.out_dir / trial.trial_id)
        self._write(EndEvent(trial_id=trial.trial_id, time=time.time(), status="failed",
                             failure=FailureInfo.model_validate(failure.to_json())))
        self._outcome(trial, failure)
        self._table()

    def _outcome(self, trial: Trial, failure: Failure | None) -> None:
        if self.watch is not None:
            self.watch.observe(trial.trial_id, dict(trial.config), failure)
        elif self.feed is not None:
            self.feed.record_outcome(
                trial.trial_id, dict(trial.config), failure.kind.value if failure else None,
                follower_placement(failure.to_json()) if failure else None)

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        self._table()
