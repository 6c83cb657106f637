"""Terminal progress: one line per trial event (launched, each round, end) in fixed columns,
instead of Ray's periodic wall of tables:

    trial     phase          status    round  output_throughput  verify_ms  settings
    bb044ab5  search         running     1/3          1653      23.96  every knob unset
    d167f13e  search         done        3/3          2342      14.76  ALGO=allreduce:ring PROTO=LL
    86c21f82  search         stopped     1/3          1616      24.12  PROTO=Simple (early stop)
    03bb1f63  confirm top 1  FAILED        -             -          -  ALGO=Tree  graph_capture: ...
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from ray.tune import ProgressReporter
from ray.tune.experiment import Trial

from tuner.output.progress import fmt_value as _fmt
from tuner.output.progress import settings_text
from tuner.output.ran import experiment_of, trial_ran
from tuner.run.recorder import trial_failure

VERIFY = "verify_ms"
_MESSAGE_CHARS = 160


class TrialLines(ProgressReporter):
    """Prints a line when a trial's status or round changes."""

    def __init__(self, metric: str, knobs: Sequence[str], rounds: int,
                 extra: Sequence[str] = (VERIFY,),
                 stage_of: Callable[[str], str | None] | None = None,
                 stream: TextIO | None = None, phase: str = "search") -> None:
        self.metric = metric
        self.knobs = list(knobs)
        self.rounds = rounds
        self.extra = [e for e in extra if e != metric]
        self.stage_of = stage_of
        self.phase = phase
        self._stream = stream  # None: sys.stdout at each print (a restored run pickles this)
        self._seen: dict[str, tuple[str, Any]] = {}
        self._header = False
        self._experiment: Path | None = None  # the folder of the trials' servetune folders
        self._widths = [8, 22, 8, 5, max(12, len(metric)), *(max(9, len(e)) for e in self.extra)]

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        return any(self._seen.get(t.trial_id) != self._state(t) for t in trials)

    @staticmethod
    def _state(trial: Trial) -> tuple[str, Any]:
        return trial.status, (trial.last_result or {}).get("round")

    def _row(self, cells: Sequence[str], tail: str) -> str:
        w = self._widths
        left = f"{cells[0]:<{w[0]}}  {cells[1]:<{w[1]}}  {cells[2]:<{w[2]}}"
        right = "  ".join(f"{c:>{width}}" for c, width in zip(cells[3:], w[3:], strict=True))
        return f"{left}  {right}  {tail}".rstrip()

    def header(self) -> str:
        return self._row(["trial", "phase", "status", "round", self.metric, *self.extra],
                         "settings")

    def line(self, trial: Trial, previous: tuple[str, Any] | None) -> str | None:
        """The line for the trial's current state, or None when nothing worth a line."""
        status, round_ = self._state(trial)
        result = trial.last_result or {}
        label = self.stage_of(trial.trial_id) if self.stage_of else None
        phase = f"{self.phase} {label}" if label else self.phase
        settings = settings_text(trial.config, self.knobs, self.ran(trial))
        values = [_fmt(result.get(self.metric)), *(_fmt(result.get(e)) for e in self.extra)]
        shown_round = f"{round_}/{self.rounds}" if round_ is not None else "-"
        if status == Trial.ERROR:
            failure = trial_failure(trial)
            message = " ".join(failure.message.split())
            if len(message) > _MESSAGE_CHARS:
                message = message[:_MESSAGE_CHARS - 3] + "..."
            return self._row([trial.trial_id, phase, "FAILED", shown_round, *values],
                             f"{settings}  [{failure.kind.value}: {message}]")
        if status == Trial.TERMINATED:
            early = round_ is not None and round_ < self.rounds
            word = "stopped" if early else "done"
            tail = f"{settings} (early stop)" if early else settings
            return self._row([trial.trial_id, phase, word, shown_round, *values], tail)
        if status == Trial.RUNNING and round_ is None:
            if previous is not None and previous[0] == Trial.RUNNING:
                return None
            return self._row([trial.trial_id, phase, "launched", "-", *["-"] * len(values)],
                             settings)
        if status == Trial.RUNNING and round_ == self.rounds:
            return None  # the "done" line follows with the same numbers
        if status == Trial.RUNNING:
            return self._row([trial.trial_id, phase, "running", shown_round, *values], settings)
        return None

    def ran(self, trial: Trial) -> dict[str, Any]:
        """What the trial's server resolved so far (its preflight, then the server), read
        from its folder in the experiment's (Ray's trial folder lies within it)."""
        if self._experiment is None:
            path = getattr(getattr(trial, "storage", None), "trial_fs_path", None)
            self._experiment = experiment_of(Path(path)) if isinstance(path, str) else None
        if self._experiment is None:
            return {}
        return trial_ran(self._experiment, trial.trial_id, trial.config)

    def report(self, trials: list[Trial], done: bool, *sys_info: Any) -> None:
        for trial in trials:
            state = self._state(trial)
            previous = self._seen.get(trial.trial_id)
            if previous == state:
                continue
            self._seen[trial.trial_id] = state
            text = self.line(trial, previous)
            if text is None:
                continue
            if not self._header:
                print(self.header(), file=self.stream, flush=True)
                self._header = True
            print(text, file=self.stream, flush=True)

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stdout
