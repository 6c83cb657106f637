"""Stops the search when the environment, not a setting, is broken (``tuner.decide.environment``
decides): a Ray Tune ``Stopper`` whose ``stop_all`` ends the experiment, through Ray's public
API. The recorder tells it how each search trial ended; it passes the outcomes on to the
failure memory, except those of a broken environment, and writes the verdict into the
experiment folder the moment it is reached (the driver reads it there after ``fit()``, a
resumed one too)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.tune import Stopper

from launchers.failures import Failure, follower_placement
from search_spaces.knobs import Value
from tuner.decide.environment import EnvironmentCheck, Outcome
from tuner.output import broken
from tuner.run.recorder import OutcomeFeed


class EnvironmentWatch(Stopper):
    def __init__(self, out_dir: Path, baseline: Mapping[str, Value],
                 feed: OutcomeFeed | None = None) -> None:
        self.out_dir = out_dir
        self.check = EnvironmentCheck(dict(baseline))
        self.feed = feed

    @property
    def broken(self) -> bool:
        return self.check.verdict is not None

    def observe(self, trial_id: str, config: Mapping[str, Value], failure: Failure | None
                ) -> None:
        was_broken = self.broken
        released = self.check.observe(trial_id, config,
                                      failure.to_json() if failure is not None else None)
        self._feed(released)
        if self.check.verdict is not None and not was_broken:
            broken.write(self.out_dir, self.check.verdict.to_json())

    def restart(self) -> None:
        """A new fit (a resume): failures held back from the last session go to the memory."""
        self._feed(self.check.restart())

    def _feed(self, outcomes: list[Outcome]) -> None:
        if self.feed is not None:
            for outcome in outcomes:
                self.feed.record_outcome(outcome.trial_id, outcome.config, outcome.kind,
                                         follower_placement(outcome.failure))

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False  # no single trial is stopped for this

    def stop_all(self) -> bool:
        return self.broken
