"""TiedASHA: ASHA that treats differences inside the launch-to-launch spread as ties.

A trial is one launch, and real servers differ from launch to launch by far more than their
rounds do (on the H200 ~20% against 4%). ASHA compares single launches at each rung, so a
lucky launch of a slower setting can stop the best one. Here a trial ASHA would stop goes on
while its value at that round is within ``spread`` (a fraction of the mean, one launch's
sd) of the best value any trial reported at the same round; the confirm stage then settles
what the search could not."""

from __future__ import annotations

import math
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler


class TiedASHA(ASHAScheduler):
    def __init__(self, *, spread: float, time_attr: str, metric_key: str, mode: str,
                 **kwargs: Any) -> None:
        super().__init__(time_attr=time_attr, **kwargs)
        self.spread = spread
        self.time_key = time_attr
        self.metric_key = metric_key
        self.sign = 1.0 if mode == "max" else -1.0
        self.best: dict[Any, float] = {}  # round -> the best log value reported there
        self.spared: list[tuple[str, Any]] = []  # (trial, round) ASHA would have stopped

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]
                        ) -> str:
        action = super().on_trial_result(tune_controller, trial, result)
        at, value = result.get(self.time_key), result.get(self.metric_key)
        if not isinstance(value, (int, float)) or not value > 0 or at is None:
            return action
        mine = self.sign * math.log(value)
        best = max(self.best.get(at, mine), mine)
        self.best[at] = best
        if action == TrialScheduler.STOP and best - mine <= self.spread:
            self.spared.append((trial.trial_id, at))
            return TrialScheduler.CONTINUE
        return action
