"""Terminal progress: one line per trial event (start, each round, end) with our columns,
instead of Ray's periodic wall of tables."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ray.tune import ProgressReporter
from ray.tune.experiment import Trial

from tuner.recorder import trial_failure


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class TrialLines(ProgressReporter):
    """Prints a line when a trial's status or round changes."""

    def __init__(self, metric: str, knobs: Sequence[str], rounds: int,
                 extra: Sequence[str] = ("verify_ms", "accept_length"),
                 stage_of: Callable[[str], str | None] | None = None,
                 stream: TextIO | None = None) -> None:
        self.metric = metric
        self.knobs = list(knobs)
        self.rounds = rounds
        self.extra = [e for e in extra if e != metric]
        self.stage_of = stage_of
        self.stream = stream or sys.stdout
        self._seen: dict[str, tuple[str, Any]] = {}

    def should_report(self, trials: list[Trial], done: bool = False) -> bool:
        return any(self._seen.get(t.trial_id) != self._state(t) for t in trials)

    @staticmethod
    def _state(trial: Trial) -> tuple[str, Any]:
        return trial.status, (trial.last_result or {}).get("round")

    def _settings(self, trial: Trial) -> str:
        changed = [f"{k}={v}" for k, v in trial.config.items()
                   if k in self.knobs and v is not None and v is not False]
        return " ".join(changed) or "baseline (no overrides)"

    def report(self, trials: list[Trial], done: bool, *sys_info: Any) -> None:
        for trial in trials:
            state = self._state(trial)
            if self._seen.get(trial.trial_id) == state:
                continue
            previous = self._seen.get(trial.trial_id)
            self._seen[trial.trial_id] = state
            status, round_ = state
            result = trial.last_result or {}
            stage = self.stage_of(trial.trial_id) if self.stage_of else None
            head = f"[{trial.trial_id}]" + (f" {stage}" if stage else "")
            if status == Trial.ERROR:
                failure = trial_failure(trial)
                line = f"{head} FAILED {failure.kind.value}: {failure.message}"
            elif status == Trial.TERMINATED:
                early = round_ is not None and round_ < self.rounds
                line = (f"{head} {'stopped early by the scheduler' if early else 'done'} after "
                        f"round {round_}: {self.metric} {_fmt(result.get(self.metric, '-'))}")
            elif status == Trial.RUNNING and round_ is None:
                if previous is not None and previous[0] == Trial.RUNNING:
                    continue
                line = f"{head} launched: {self._settings(trial)}"
            elif status == Trial.RUNNING:
                values = [f"{self.metric} {_fmt(result.get(self.metric, '-'))}"]
                values += [f"{e} {_fmt(result[e])}" for e in self.extra if e in result]
                line = f"{head} round {round_}/{self.rounds}: " + ", ".join(values)
            else:
                continue
            print(line, file=self.stream, flush=True)
