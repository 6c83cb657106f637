"""The feasibility model: which configurations are worth launching, learned from what ran and
what failed over combinations of settings, and which retries a suspect value gets. Plain
Python (no Ray), read by the failure wrappers (wrappers/failures.py).

A value that failed beside the baseline is a suspect (memory.py), not guilty: it is retried,
within ``RETRY_SHARE`` of the budget, beside other values of the levers that matter for its
kind (failure_levers.py: memory levers for an OOM, ...), all of them changed at once to the
values the model rates likeliest to run: a value's running record, and the pair's, as a
Beta(1, 1) success rate; then the end of a numeric lever the table points to (a smaller
memory fraction for torch's OOM), then the ends of its range. It is ruled out once it has
failed there too (the failures then differ in those levers). Meanwhile a configuration that
gives a suspect the same values of those levers as a failure did is not worth launching:
that failure would recur.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.failure_levers import HIGH, LOW, number, toward
from tuner.search.keys import Config
from tuner.search.memory import FLAKY, FailureMemory, Setting, Suspect

RETRY_SHARE = 0.15  # of the budget, at most, spent on retrying suspects
MAX_RETRIES = 4  # without a budget
PER_SUSPECT = 2  # retries of one suspect (one setting, one kind)


def _json(value: Value) -> str:
    return json.dumps(value)


def _ends_first(values: list[Value]) -> list[Value]:
    """Numeric values from the ends of their range inwards (the ends differ most), unset
    first."""
    numbers = sorted((v for v in values if number(v) is not None), key=lambda v: number(v) or 0)
    if len(numbers) != len([v for v in values if v is not None]):
        return values
    out: list[Value] = []
    while numbers:
        out.append(numbers.pop())
        if numbers:
            out.append(numbers.pop(0))
    return out


@dataclass
class Feasibility:
    """Learned from the failure memory's record (its successes and failures)."""

    space: SearchSpace
    memory: FailureMemory
    budget: int | None = None
    retried: dict[str, int] = field(default_factory=dict)  # suspect -> retries launched
    retries: list[dict[str, Any]] = field(default_factory=list)  # what was retried, and why

    # ------------------------------------------------------------ the model
    def _full(self, settings: frozenset[Setting]) -> dict[str, str]:
        """A trial's every knob as JSON (its settings over the baseline's)."""
        return {**{n: _json(v) for n, v in self.memory.never.items()}, **dict(settings)}

    def p_ok(self, *settings: tuple[str, Value]) -> float:
        """How likely a configuration with all of ``settings`` runs: the Beta(1, 1) mean of
        the trials that had them (deterministic failures only: a flaky one says little)."""
        wanted = [(n, _json(v)) for n, v in settings]
        ran = sum(all(self._full(s).get(n) == v for n, v in wanted)
                  for _, s in self.memory.successes)
        failed = sum(all(self._full(f.settings).get(n) == v for n, v in wanted)
                     for f in self.memory.failures if f.kind not in FLAKY)
        return (ran + 1.0) / (ran + failed + 2.0)

    def blocked(self, config: Mapping[str, Value]) -> str | None:
        """Why ``config`` is not worth launching: it gives a suspect the values of the levers
        that matter that it failed beside (None: worth it)."""
        for suspect in self.memory.suspects():
            if config.get(suspect.knob) != suspect.value or suspect.kind in FLAKY:
                continue
            here = {n: config.get(n) for n in suspect.levers}
            if here in suspect.where:
                shown = ", ".join(f"{n}={'unset' if v is None else v}" for n, v in here.items())
                return (f"{suspect.knob}={suspect.value} failed ({suspect.kind}, "
                        f"{', '.join(suspect.trials)}) beside {shown}")
        return None

    # ------------------------------------------------------------ retries
    def _share(self) -> int:
        if self.budget is None:
            return MAX_RETRIES
        return max(1, int(RETRY_SHARE * self.budget))

    def retry(self, fresh: Callable[[Config], bool]) -> Config | None:
        """The next suspect's retry (None: none due, or the share is spent); ``fresh``:
        whether a configuration is new and may run (the filter's checks)."""
        if sum(self.retried.values()) >= self._share():
            return None
        for suspect in self.memory.suspects():
            name = f"{suspect.knob}={_json(suspect.value)}:{suspect.kind}"
            if self.retried.get(name, 0) >= PER_SUSPECT:
                continue
            point = self._context(suspect, fresh)
            if point is None:
                continue
            self.retried[name] = self.retried.get(name, 0) + 1
            changed = {n: point[n] for n in suspect.levers if point[n] != suspect.where[0][n]}
            self.retries.append({"suspect": suspect.text(), "config": point, "beside": changed})
            return point
        return None

    def _context(self, suspect: Suspect, fresh: Callable[[Config], bool]) -> Config | None:
        """The suspect's first failing configuration with every lever that matters moved to
        the value likeliest to run (one that keeps the configuration valid and new)."""
        failed = next(f for f in self.memory.failures if f.trial == suspect.trials[0])
        point = self.space.complete({n: json.loads(v) for n, v in failed.settings})
        point[suspect.knob] = suspect.value
        moved = False
        for lever in suspect.levers:
            if lever not in self.space.domains:
                continue
            tried = {_json(w[lever]) for w in suspect.where}
            for value in self._ranked(suspect, lever):
                if _json(value) in tried:
                    continue
                candidate = {**point, lever: value}
                if not self.space.validate(candidate):
                    point, moved = candidate, True
                    break
        if not moved or self.space.validate(point) or self.blocked(point) or not fresh(point):
            return None
        return point

    def _ranked(self, suspect: Suspect, lever: str) -> list[Value]:
        """A lever's values, likeliest to let the suspect run first."""
        values = list(self.space.domains[lever])
        ends = _ends_first(values)
        way = toward(suspect.kind, lever)
        numeric = any(number(v) is not None for v in values)

        def rank(value: Value) -> tuple[bool, float, float, int]:
            alone = self.p_ok((lever, value))
            learned = self.p_ok((suspect.knob, suspect.value), (lever, value)) * alone
            side = 0.0
            amount = number(value)
            if way in (LOW, HIGH) and numeric:
                side = float("inf") if amount is None else amount if way == LOW else -amount
            # a value that failed more than it ran goes last; the table's way before the
            # running record (a value that ran beside others says little about the suspect)
            return (alone < 0.5, side, -round(learned, 6),
                    ends.index(value) if value in ends else len(ends))

        return sorted(values, key=rank)
