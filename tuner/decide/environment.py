"""Is it the environment, not a setting? Decided from the search's first trials to end.

- The baseline (no overrides) failed: whatever its kind, the default configuration cannot
  run here, so no setting can be blamed for anything. Not so a failure read from a follower's
  log only (``launchers.failures.follower_placement``: one node's fabric or memory): that
  one joins the opening streak like any other.
- The first ``STREAK`` trials to end in a session (a run, or a resume) all failed with the same
  kind and message (numbers and ids aside), and their configurations have no setting in common
  beyond the baseline's: the failure does not follow the settings.

Trials that fail validation before launch (``invalid_config`` from the space's own rules,
``not_modelled``) say nothing either way and are passed over, and so does a node lost
mid-trial (``node_lost``, the baseline's included). Until the opening streak is
decided, its failures are held back from the failure memory: a broken environment rules no
value out. Plain Python (no Ray): ``tuner.run.environment`` wires it into Ray Tune.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from launchers.failures import follower_placement
from search_spaces.knobs import Value

STREAK = 3  # three trials with nothing in common failing alike is no coincidence of settings
NEUTRAL = frozenset({"invalid_config", "not_modelled"})
# A node of the cluster went away during the trial: no verdict on the environment either way,
# not even the baseline's (the other nodes go on; the failure memory ignores it too).
LOST = frozenset({"node_lost"})
_NUMBERS = re.compile(r"\b[0-9a-f]*\d[0-9a-f]*\b", re.IGNORECASE)  # ports, pids, trial ids


@dataclass
class Outcome:
    """A finished trial as the failure memory takes it."""

    trial_id: str
    config: dict[str, Value]
    failure: dict[str, Any] | None  # Failure.to_json(); None: the trial ran

    @property
    def kind(self) -> str | None:
        return None if self.failure is None else str(self.failure.get("kind"))


@dataclass
class Broken:
    """The verdict: why the environment is taken to be broken, and the evidence."""

    reason: str  # "baseline" or "streak"
    kind: str
    message: str
    log_tail: str
    hint: str
    trials: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def signature(failure: Mapping[str, Any]) -> tuple[str, str]:
    """Kind and message with numbers and hex ids blanked: one failure, whatever port or trial."""
    return str(failure.get("kind")), _NUMBERS.sub("#", str(failure.get("message", "")).strip())


@dataclass
class EnvironmentCheck:
    baseline: dict[str, Value]
    streak: int = STREAK
    opening: list[Outcome] = field(default_factory=list)  # failures held back, in end order
    decided: bool = False  # the opening streak is over for this session
    verdict: Broken | None = None

    def restart(self) -> list[Outcome]:
        """A new session (a resume): the held failures go to the memory; a new streak opens."""
        released, self.opening, self.decided = self.opening, [], False
        return released

    def observe(self, trial_id: str, config: Mapping[str, Value],
                failure: Mapping[str, Any] | None) -> list[Outcome]:
        """Take one finished search trial; returns the outcomes the failure memory may learn
        now (none while the environment is in doubt, none once it is broken)."""
        outcome = Outcome(trial_id, dict(config), dict(failure) if failure else None)
        if self.verdict is not None:
            return []
        if outcome.kind in LOST:
            return [outcome]
        if outcome.failure is not None and self._is_baseline(outcome.config) and \
                follower_placement(outcome.failure) is None:
            self.verdict = self._broken("baseline", [*self.opening, outcome], outcome)
            self.opening = []
            return []
        if self.decided or outcome.kind in NEUTRAL:
            return [outcome]
        if outcome.failure is None or (self.opening and signature(outcome.failure)
                                       != signature(self.opening[0].failure or {})):
            self.decided = True
            return [*self.restart_streak(), outcome]
        self.opening.append(outcome)
        if len(self.opening) > 1 and self._common_settings(self.opening):
            self.decided = True  # the failures follow a setting: the memory's business
            return self.restart_streak()
        if len(self.opening) >= self.streak:
            self.verdict = self._broken("streak", self.opening, self.opening[0])
            self.opening = []
        return []

    def restart_streak(self) -> list[Outcome]:
        released, self.opening = self.opening, []
        return released

    def _is_baseline(self, config: Mapping[str, Value]) -> bool:
        return all(config.get(k) == v for k, v in self.baseline.items())

    def _common_settings(self, outcomes: list[Outcome]) -> set[tuple[str, str]]:
        """Settings (off the baseline's values) every one of ``outcomes`` has."""
        sets = [{(k, json.dumps(v, default=str)) for k, v in o.config.items()
                 if self.baseline.get(k) != v} for o in outcomes]
        return set.intersection(*sets) if sets else set()

    @staticmethod
    def _broken(reason: str, outcomes: list[Outcome], example: Outcome) -> Broken:
        failure = example.failure or {}
        return Broken(reason, str(failure.get("kind")), str(failure.get("message", "")),
                      str(failure.get("log_tail", "")), str(failure.get("hint", "") or ""),
                      [o.trial_id for o in outcomes])
