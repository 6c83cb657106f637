"""PairModel: the model-based part of the default search. A Bayesian linear model of the log
of the metric with a term per setting and a term per pair of settings (two knobs that pay off
only together are one pair term), fitted to every point measured; the next point is the one
with the largest expected improvement over the best measured, every other time among all
candidates (what pays off anywhere: points that try many untried pairs at once), else among
the one- and two-knob changes of the best point (what pays off from here). It reads the
sweep's one-at-a-time points as they are meant: each measures its own setting's term, and
the pairs are left to learn.

Prior: each setting's term ~ N(0, s^2) with s from the catalogue (``knobs.effect``: a lever
that can double a pass gets a wide prior, one that moves it 1% a narrow one); each pair's
~ N(0, PAIR_SD^2), wider where both knobs act on one mechanism (``knobs.joint``). The
candidates are every valid point of a space of up to ENUMERATE points, else a fixed sample
of valid points plus the one- and two-knob changes of the best points measured. This is
Bayesian optimisation with a second-order linear surrogate over categorical settings (as in
BOCS, Baptista and Poloczek 2018), with expected improvement in place of its Thompson
sampling and a Gaussian prior in place of its horseshoe. No Ray here; numpy only.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping

import numpy as np

from search_spaces import knobs
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.keys import Config

PAIR_SD = 0.07  # a pair of settings moves the metric by a few percent, seldom more
PAIR_SD_JOINT = 0.1  # ... more often where both act on one mechanism (knobs.joint)
NOISE_SD = 0.02  # one trial's mean, in log units
ENUMERATE = 20_000  # spaces up to this size: every valid point is a candidate
SAMPLED = 4_000  # larger spaces: this many valid points drawn once
TOP = 3  # larger spaces: the neighbourhoods of this many best points join the candidates


class PairModel:
    def __init__(self, space: SearchSpace, mode: str, seed: int) -> None:
        self.space = space
        self.sign = 1.0 if mode == "max" else -1.0
        self.rng = random.Random(seed)
        self.names = list(space.domains)
        # a setting's index: 0 for a knob's unset value (no term), else 1.. per (knob, value)
        self.index: list[dict[str, int]] = []
        scales: list[float] = []
        self.value_of: dict[int, Value] = {}  # setting index -> its value
        for name in self.names:
            found: dict[str, int] = {}
            for value in space.domains[name][1:]:
                scales.append(max(0.05, 2.0 * math.log(knobs.effect(name))))
                found[repr(value)] = len(scales)
                self.value_of[len(scales)] = value
            self.index.append(found)
        mains = len(scales)
        owner = [0] * (mains + 1)
        for k, found in enumerate(self.index):
            for i in found.values():
                owner[i] = k
        # feature columns: 0 intercept, 1..mains settings, then pairs; ``zero`` holds no term
        pair = np.zeros((mains + 1, mains + 1), dtype=np.int64)
        columns = 1 + mains
        pair_sd = []
        for a, b in itertools.combinations(range(1, mains + 1), 2):
            if owner[a] != owner[b]:
                pair[a, b] = pair[b, a] = columns
                columns += 1
                joint = knobs.joint(self.names[owner[a]], self.names[owner[b]])
                pair_sd.append(PAIR_SD_JOINT if joint else PAIR_SD)
        self.zero = columns
        pair[pair == 0] = self.zero
        self.pair = pair
        self.prior = np.concatenate([[1e-4], 1.0 / np.square(scales),
                                     1.0 / np.square(pair_sd)])
        self.rows: list[np.ndarray] = []
        self.y: list[float] = []
        self._pool: np.ndarray | None = None
        self.asks = 0

    # ------------------------------------------------------------ encoding
    def encode(self, config: Mapping[str, Value]) -> np.ndarray:
        return np.array([self.index[k].get(repr(config.get(n)), 0)
                         for k, n in enumerate(self.names)], dtype=np.int64)

    def decode(self, row: np.ndarray) -> Config:
        return self.space.complete({n: self.space.domains[n][0] if i == 0 else self.value_of[i]
                                    for n, i in zip(self.names, row.tolist(), strict=True)})

    def _features(self, rows: np.ndarray) -> np.ndarray:
        """Column indices of each row's terms (``zero`` for none): intercept, settings, pairs."""
        n, width = rows.shape
        mains = np.where(rows > 0, rows, self.zero)
        pairs = [self.pair[rows[:, a], rows[:, b]] for a, b in
                 itertools.combinations(range(width), 2)]
        return np.column_stack([np.zeros(n, dtype=np.int64), mains, *pairs])

    # ------------------------------------------------------------ data
    def add(self, config: Mapping[str, Value], value: float | None) -> None:
        """A measured point (``value`` None: it failed; the failure memory handles those)."""
        if value is None or value <= 0:
            return
        self.rows.append(self.encode(config))
        self.y.append(self.sign * math.log(value))

    def _posterior(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and a Cholesky factor of the precision of the terms."""
        width = self.zero + 1
        precision = np.diag(np.append(self.prior, 1.0))
        target = np.zeros(width)
        if self.rows:
            design = self._design(np.array(self.rows))
            precision += design.T @ design / NOISE_SD ** 2
            target = design.T @ np.array(self.y) / NOISE_SD ** 2
        factor = np.linalg.cholesky(precision)
        mean = np.linalg.solve(factor.T, np.linalg.solve(factor, target))
        return mean, factor

    # ------------------------------------------------------------ proposing
    def _candidates(self) -> np.ndarray:
        if self._pool is None:
            if self.space.size <= ENUMERATE:
                points = [p for p in self.space.grid() if not self.space.validate(p)]
            else:
                points = []
                for _ in range(SAMPLED * 3):
                    p = self.space.sample(self.rng)
                    if not self.space.validate(p):
                        points.append(p)
                    if len(points) >= SAMPLED:
                        break
            self._pool = np.array([self.encode(p) for p in points], dtype=np.int64)
        if self.space.size <= ENUMERATE or not self.rows:
            return self._pool
        order = np.argsort(-np.array(self.y))[:TOP]
        near = [self._neighbours(self.rows[i]) for i in order]
        return np.unique(np.vstack([self._pool, *near]), axis=0)

    def _neighbours(self, row: np.ndarray) -> np.ndarray:
        """Every one- and two-knob change of ``row`` (valid ones)."""
        choices = [[0, *sorted(found.values())] for found in self.index]
        out = []
        for a, b in itertools.combinations_with_replacement(range(len(row)), 2):
            for va in choices[a]:
                for vb in choices[b] if b != a else [None]:
                    new = row.copy()
                    new[a] = va
                    if vb is not None:
                        new[b] = vb
                    out.append(new)
        unique = np.unique(np.array(out), axis=0)
        return np.array([r for r in unique if not self.space.validate(self.decode(r))]
                        ).reshape(-1, len(row))

    def _design(self, rows: np.ndarray) -> np.ndarray:
        design = np.zeros((len(rows), self.zero + 1))
        np.put_along_axis(design, self._features(rows), 1.0, axis=1)
        design[:, self.zero] = 0.0
        return design

    def _expected_improvement(self, rows: np.ndarray, mean: np.ndarray, factor: np.ndarray
                              ) -> np.ndarray:
        design = self._design(rows)
        mu = design @ mean
        spread = np.linalg.solve(factor, design.T)
        sd = np.sqrt(np.square(spread).sum(axis=0) + NOISE_SD ** 2)
        best = max(self.y) if self.y else float(mu.max())
        z = (mu - best) / sd
        cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
        pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        return sd * (z * cdf + pdf)

    def propose(self, allowed: Callable[[Config], bool]) -> Config | None:
        mean, factor = self._posterior()
        self.asks += 1
        local = bool(self.rows) and self.asks % 2 == 0
        candidates = self._neighbours(self.rows[int(np.argmax(self.y))]) if local \
            else self._candidates()
        scores = self._expected_improvement(candidates, mean, factor)
        for i in np.argsort(-scores, kind="stable"):
            config = self.decode(candidates[i])
            if allowed(config):
                return config
        return None
