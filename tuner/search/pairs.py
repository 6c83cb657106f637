"""What the measured points say about each lever's values, from the pairs of points that
differ in that lever alone (a sweep's probe and the point it was built on, a revert and the
point it reverted): one-at-a-time comparisons, pooled over the whole run, so that a small
effect measured in several passes is read through less noise than any one probe gives, and
the other levers' settings cancel out of each comparison. No Ray here.

- ``pooled_effects``: per lever, each value's effect (log units, better positive) by least
  squares on its pairs' differences, pulled toward no effect by a ridge;
- ``pooled_ties``: per lever, the values those effects cannot tell from its best one;
- ``combined_point``: a point with every lever at the value those effects rank above the
  point's own (greedily, largest first, skipping what breaks a rule of the space): settings
  that each won by less than the noise, measured one at a time, tried together;
- ``local_shortfall``: how far a value fell below a point's own, among the pairs within one
  lever of that point (what a change measured where the search stands now).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config

# The ridge (per unit of one pair's weight) that pulls an effect toward none: a pair's
# difference has a spread of about 1.4% at 2% round noise over 4 rounds, an effect worth
# finding is a few percent, so RIDGE ~ (0.014 / 0.05)**2.
RIDGE = 0.1
Measured = Sequence[tuple[Mapping[str, Value], float]]


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """``matrix`` x = ``vector`` for a small symmetric positive definite ``matrix``."""
    n = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        head = rows[col][col]
        rows[col] = [x / head for x in rows[col]]
        for r in range(n):
            if r != col and rows[r][col]:
                factor = rows[r][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][n] for i in range(n)]


def lever_pairs(names: Iterable[str], measured: Measured, sign: float
                ) -> dict[str, list[tuple[Value, Value, float]]]:
    """Per lever, its pairs of measured points that differ in it alone: (one value, the
    other, the first's log value minus the second's, ``sign`` -1: smaller is better)."""
    names = list(names)
    logs = [(c, sign * math.log(v)) for c, v in measured if v > 0]
    out: dict[str, list[tuple[Value, Value, float]]] = {}
    for i, (a, ya) in enumerate(logs):
        for b, yb in logs[i + 1:]:
            apart = [n for n in names if a.get(n) != b.get(n)]
            if len(apart) == 1:
                out.setdefault(apart[0], []).append((a.get(apart[0]), b.get(apart[0]), ya - yb))
    return out


def pooled_effects(names: Iterable[str], measured: Measured, sign: float,
                   ridge: float = RIDGE) -> dict[str, dict[Value, float]]:
    """Per lever with pairs, each of its values in them: its effect (log units, better
    positive; only differences between a lever's values mean anything)."""
    out: dict[str, dict[Value, float]] = {}
    for name, pairs in lever_pairs(names, measured, sign).items():
        values: list[Value] = []
        for a, b, _ in pairs:
            values += [v for v in (a, b) if v not in values]
        index = {repr(v): i for i, v in enumerate(values)}
        k = len(values)
        pull = max(ridge, 1e-9)  # only differences are fixed: the ridge fixes the level too
        normal = [[pull if i == j else 0.0 for j in range(k)] for i in range(k)]
        right = [0.0] * k
        for a, b, diff in pairs:
            i, j = index[repr(a)], index[repr(b)]
            normal[i][i] += 1.0
            normal[j][j] += 1.0
            normal[i][j] -= 1.0
            normal[j][i] -= 1.0
            right[i] += diff
            right[j] -= diff
        out[name] = dict(zip(values, _solve(normal, right), strict=True))
    return out


def pooled_ties(names: Iterable[str], measured: Measured, sign: float, width: float
                ) -> dict[str, list[Value]]:
    """Per lever with pairs, the values whose pooled effect is within ``width`` (log units)
    of the lever's best one."""
    out = {}
    for name, effects in pooled_effects(names, measured, sign).items():
        top = max(effects.values())
        out[name] = [v for v, e in effects.items() if top - e <= width]
    return out


def combined_point(space: SearchSpace, around: Mapping[str, Value], measured: Measured,
                   sign: float) -> Config | None:
    """``around`` with each lever at the value its pooled effects rank above ``around``'s
    own, the largest gains first, each kept only where the point still keeps the space's
    rules; None when no lever changes."""
    gains = []
    for name, effects in pooled_effects(list(space.domains), measured, sign).items():
        here = effects.get(around.get(name))
        if here is None:
            continue
        gains += [(effect - here, name, value) for value, effect in effects.items()
                  if effect > here]
    point, changed = space.complete(dict(around)), set()
    for _, name, value in sorted(gains, key=lambda g: -g[0]):
        if name in changed:
            continue
        candidate = space.complete({**point, name: value})
        if not space.validate(candidate):
            point = candidate
            changed.add(name)
    return point if changed else None


def local_shortfall(names: Iterable[str], measured: Measured, sign: float,
                    around: Mapping[str, Value], lever: str, value: Value) -> float | None:
    """How far ``value`` of ``lever`` fell below ``around``'s own (log units), measured as
    a one-lever change of ``around`` (a point that ran); for a value not measured there, the
    least any other value of the lever fell there (a lever whose changes all cost much here
    is one the best point needs); None where no change of the lever ran beside it."""
    names = list(names)
    here = [v for c, v in measured if v > 0 and all(c.get(n) == around.get(n) for n in names)]
    if not here:
        return None
    ref = sign * math.log(here[0])
    falls = {c.get(lever): ref - sign * math.log(v) for c, v in measured
             if v > 0 and c.get(lever) != around.get(lever)
             and all(c.get(n) == around.get(n) for n in names if n != lever)}
    if value in falls:
        return falls[value]
    return min(falls.values()) if falls else None
