"""Reading a space by machine: its levers in order of expected effect (the catalogue's
``knobs.effect``) and the one-at-a-time probes of a lever around a point. No Ray here."""

from __future__ import annotations

from collections.abc import Mapping

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config


def lever_order(space: SearchSpace, around: Mapping[str, Value] | None = None) -> list[str]:
    """The space's knobs, largest expected effect (around ``around``) first; of two alike,
    the one with more values (the best of more tries is expected to differ more), then the
    space's order."""
    return sorted(space.domains, key=lambda name: (-knobs.effect(name, around),
                                                   -len(space.domains[name])))


def value_order(values: tuple[Value, ...]) -> list[Value]:
    """A knob's values as the sweep tries them: a numeric range from its ends inwards (the
    ends show which way it pays), anything else as listed."""
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values if v is not None):
        ranked = sorted((v for v in values if v is not None), key=lambda v: int(v or 0))
        out: list[Value] = []
        while ranked:
            out.append(ranked.pop())
            if ranked:
                out.append(ranked.pop(0))
        return [v for v in values if v is None] + out
    return list(values)


def probe(space: SearchSpace, around: Mapping[str, Value], name: str, value: Value
          ) -> Config | None:
    """``around`` with ``name`` set to ``value``; where that breaks a rule of the space (a
    speculative shape the other knobs make impossible), the same value on the baseline
    instead; None when neither may run."""
    for start in (around, space.baseline()):
        point = space.complete({**start, name: value})
        if not space.validate(point):
            return point
    return None

