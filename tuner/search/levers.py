"""Reading a space by machine: its levers in order of expected effect (the catalogue's
``knobs.effect`` until a sweep measures it) and the one-at-a-time probes of a lever around a
point. No Ray here."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping

from search_spaces import knobs
from search_spaces.constraints import PARTNER
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config


def lever_order(space: SearchSpace, around: Mapping[str, Value] | None = None,
                measured: Mapping[str, float] | None = None) -> list[str]:
    """The space's knobs, largest expected effect (around ``around``) first: a knob's measured
    effect where ``measured`` has it (what its last sweep spanned), else the catalogue's
    (an unrated knob counts as a middle one); of two alike, the space's order (the number of
    values says nothing about the effect)."""
    measured = measured or {}
    position = {name: i for i, name in enumerate(space.domains)}
    return sorted(space.domains, key=lambda name: (
        -measured.get(name, knobs.effect(name, around)), position[name]))


def spanned(values: list[float]) -> float | None:
    """What a sweep measured a knob to move the metric by, as a factor (best / worst of the
    values it ran); None before two values ran."""
    ran = [v for v in values if v > 0]
    return max(ran) / min(ran) if len(ran) > 1 else None


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
    instead; a value that runs only beside a partner (constraints.PARTNER: the split over
    queue pairs needs two or more) with the partner at the first of its values that lets it
    run, around then on the baseline; None when none may run."""
    starts = (around, space.baseline())
    for start in starts:
        point = space.complete({**start, name: value})
        if not space.validate(point):
            return point
    partner = PARTNER.get((name, value))
    if partner is None or partner not in space.domains:
        return None
    for start in starts:
        for other in space.domains[partner]:
            point = space.complete({**start, name: value, partner: other})
            if not space.validate(point):
                return point
    return None



def ties(measured: Mapping[Value, float | None], noise: float, sign: float = 1.0) -> list[Value]:
    """The values of a lever its sweep could not tell from its best one: those that ran
    within ``noise`` (log units) of the best (``sign`` -1: smaller is better)."""
    ran = {v: m for v, m in measured.items() if m is not None and m > 0}
    if not ran:
        return []
    top = max(sign * math.log(m) for m in ran.values())
    return [v for v, m in ran.items() if top - sign * math.log(m) <= noise]


def pairs(point: Mapping[str, Value]) -> set[tuple[str, str, str, str]]:
    """The settings of ``point`` two at a time (each a pair of knob=value)."""
    items = sorted((name, repr(value)) for name, value in point.items())
    return {(a, x, b, y) for i, (a, x) in enumerate(items) for b, y in items[i + 1:]}


def newest(drawn: list[Config], launched: Iterable[Mapping[str, Value]],
           names: Iterable[str]) -> Config | None:
    """Of ``drawn``, the point with the most pairs of settings (of ``names``) that no
    launched point has had together (the first such; None when none was drawn)."""
    names = list(names)
    seen = set().union(*(pairs({n: c.get(n) for n in names}) for c in launched))
    return max(drawn, key=lambda p: len(pairs({n: p.get(n) for n in names}) - seen),
               default=None)


def joint_draw(space: SearchSpace, around: Mapping[str, Value],
               choices: Mapping[str, list[Value]], rng: random.Random) -> Config | None:
    """``around`` with every lever of ``choices`` drawn from its choices at once, the
    baseline's value only where a lever has no other (levers that pay only together are
    set together); None when the draw breaks a rule of the space."""
    baseline = space.baseline()
    point = dict(around)
    for name, values in choices.items():
        options = [v for v in values if v != baseline.get(name)] or values
        if options:
            point[name] = rng.choice(options)
    return runnable(space, point)


def runnable(space: SearchSpace, point: Mapping[str, Value]) -> Config | None:
    """``point`` completed; where one of its values runs only beside a partner
    (constraints.PARTNER) that it does not have, the partner at the first of its values that
    lets it run; None when that still breaks a rule of the space."""
    out = space.complete(dict(point))
    if not space.validate(out):
        return out
    for (name, value), partner in PARTNER.items():
        if out.get(name) != value or partner not in space.domains:
            continue
        for other in space.domains[partner]:
            fixed = space.complete({**out, partner: other})
            if not space.validate(fixed):
                return fixed
    return None
