"""How the default search refines what it found (auto.py steps 3 and the model phase's
moves), for AutoSearcher, which holds the state named here. No Ray here.

- Repeat passes: a lever is swept again once other levers' gains since its sweep started add
  up to more than the noise (several small moves count, not only one large one: on
  ``interact`` a channel count 3% better makes the protocol's sweep stale). One pass queues
  every such lever's values, ordered by how far each measured below its lever's best: beside
  the best point where a one-lever change of it ran (pairs.local_shortfall: a lever whose
  changes all cost much there is one the best point needs), else in the lever's last sweep.
  A value that cannot run beside the best point is not tried on the baseline instead (that
  teaches nothing about the best point).
- Reverts: a model-phase point that moved the best point (a joint draw sets every lever at
  once) has each lever it changed set back to the old best's value, one at a time, the one
  whose new value cost most in its last sweep first; each builds on the best of the chain
  so far (the anchor). The settings that paid stay, the rest go back. When the chain ends,
  the anchor with every revert that measured within the noise of its anchor or above it, set
  back together (REVERTS): the best point a joint draw found is one measurement, likely high
  by about the noise (it was picked as the best of many), so a revert that ties it is as
  likely a gain, and the levers whose reverts each tie are tried together.
- The combined point (pairs.combined_point): every lever at the value the run's one-lever
  pairs, pooled, rank above the best point's own, tried when the sweeps end and every
  CONSENSUS_EVERY launches of a repeat pass (gains below the noise, each measured alone,
  tried together).
"""

from __future__ import annotations

import math

from search_spaces.knobs import Value
from search_spaces.space import SearchSpace
from tuner.search.auto_model import MODEL, SWEEP, Entry
from tuner.search.keys import Config
from tuner.search.levers import lever_order, runnable, value_order
from tuner.search.pairs import combined_point, local_shortfall

CONSENSUS = "consensus"  # a trial of the combined point
REVERTS = "reverts"  # a trial of the chain's tying reverts set together
CONSENSUS_EVERY = 3  # a repeat pass tries the combined point every this many launches
TIE_SHORTFALL = 2.0  # a value no sweep measured counts as this many times the noise below


class Refine:
    """Repeat passes, reverts and the combined point, for AutoSearcher."""

    space: SearchSpace
    order: list[str]
    queue: list[tuple[str, Value]]
    gains: list[tuple[int, str, float]]
    started: dict[str, int]
    swept: dict[str, dict[Value, float | None]]
    revert: list[tuple[str, Value]]
    anchor: tuple[Config, float] | None
    reverted: dict[str, tuple[str, Value, float, float | None]]  # revert trial -> lever,
    # value, its anchor's measured value, what it measured against that (log units, better
    # positive; None until its result is in)
    refined: dict[str, str]
    last_consensus: int
    phase_of: dict[str, str]

    # provided by AutoSearcher
    @property
    def _sign(self) -> float:
        raise NotImplementedError

    def best(self) -> Config:
        raise NotImplementedError

    def effects(self) -> dict[str, float]:
        raise NotImplementedError

    def _noise(self) -> float:
        raise NotImplementedError

    def _new(self, point: Config) -> bool:
        raise NotImplementedError

    def _measured(self) -> list[Entry]:
        raise NotImplementedError

    def _start_sweep(self, lever: str) -> None:
        raise NotImplementedError

    def _launch(self, trial_id: str, config: Config, phase: str) -> Config:
        raise NotImplementedError

    # ------------------------------------------------------------ repeat passes
    def stale(self) -> list[str]:
        """The levers other levers' gains since their sweep started, together, moved the
        best point by more than the noise for."""
        noise = self._noise()
        return [lever for lever in self.order
                if sum(gain for index, other, gain in self.gains
                       if other != lever and index >= self.started.get(lever, 0)) > noise]

    def _repeat_pass(self) -> None:
        """Queue the stale levers' values (not the best point's), those that measured
        closest to their lever's best first; each lever's sweep starts afresh."""
        stale = self.stale()
        if not stale:
            return
        best = self.best()
        ranked = lever_order(self.space, best, self.effects())
        entries: list[tuple[float, int, str, Value]] = []
        for lever in sorted(stale, key=ranked.index):
            entries += [(self.shortfall(lever, v, best), len(entries), lever, v)
                        for v in value_order(self.space.domains[lever]) if v != best.get(lever)]
            self._start_sweep(lever)
        self.queue = [(lever, v) for _, _, lever, v in sorted(entries, key=lambda e: e[:2])]

    def shortfall(self, lever: str, value: Value, best: Config) -> float:
        """How far ``value`` is likely below ``lever``'s best (log units): as a one-lever
        change of ``best`` where one ran (pairs.local_shortfall), else in the lever's last
        sweep (below its best value there; a value it did not measure counts as
        TIE_SHORTFALL times the noise, one that failed as 1)."""
        measured = [(c, v) for c, v, _ in self._measured() if v]
        local = local_shortfall(self.space.domains, measured, self._sign, best, lever, value)
        if local is not None:
            return local
        swept = self.swept.get(lever, {})
        ran = {v: m for v, m in swept.items() if m is not None and m > 0}
        if value in swept and value not in ran:
            return 1.0
        if value not in ran:
            return TIE_SHORTFALL * self._noise()
        top = max(self._sign * math.log(m) for m in ran.values())
        return top - self._sign * math.log(ran[value])

    # ------------------------------------------------------------ reverts
    def _revert_point(self, trial_id: str) -> Config | None:
        """The next revert: the anchor with one lever back at the old best's value (only
        where that runs as it is); once the chain is done, its tying reverts together."""
        while self.revert and self.anchor is not None:
            name, value = self.revert.pop(0)
            point = runnable(self.space, {**self.anchor[0], name: value})
            if (self.anchor[0].get(name) != value and point is not None
                    and point.get(name) == value and self._new(point)):
                self.refined[trial_id] = name
                self.reverted[trial_id] = (name, value, self.anchor[1], None)
                return self._launch(trial_id, point, SWEEP)  # a one-lever probe
        return self._reverts_together(trial_id)

    def _reverts_together(self, trial_id: str) -> Config | None:
        """The anchor with every lever whose revert measured within the noise of its anchor
        (or above it) set back at once, where that is new (a revert that beat its anchor moved
        the anchor: it is in it already)."""
        done, self.reverted = self.reverted, {}
        if self.anchor is None or not done:
            return None
        noise = self._noise()
        tying = {name: value for name, value, _, gain in done.values()
                 if gain is not None and gain >= -noise}
        changed = {n: v for n, v in tying.items() if self.anchor[0].get(n) != v}
        point = runnable(self.space, {**self.anchor[0], **changed})
        if not changed or point is None or not self._new(point):
            return None
        self.refined[trial_id] = REVERTS
        return self._launch(trial_id, point, MODEL)

    def _ratio(self, lever: str, value: Value, around: Config) -> float:
        """What ``value`` of ``lever`` measured in its last sweep against ``around``'s value
        of it (log units, better positive); 0 where the sweep did not measure both."""
        measured = self.swept.get(lever, {})
        a, b = measured.get(value), measured.get(around.get(lever))
        if a is None or b is None or a <= 0 or b <= 0:
            return 0.0
        return self._sign * (math.log(a) - math.log(b))

    def _refine_after(self, trial_id: str, config: Config, value: float, moved: bool) -> None:
        """A result in: a model-phase point that moved the best point (``moved``) queues its
        reverts; a revert that beat the anchor becomes the anchor."""
        if trial_id in self.reverted:
            name, back, against, _ = self.reverted[trial_id]
            gain = (self._sign * (math.log(value) - math.log(against))
                    if value > 0 and against > 0 else -math.inf)
            self.reverted[trial_id] = (name, back, against, gain)
        if moved and self.phase_of.get(trial_id) == MODEL and trial_id not in self.refined:
            old = self.best()  # the result is not among the finished yet
            self.anchor = (dict(config), value)
            changed = [n for n in self.space.domains if config.get(n) != old.get(n)]
            self.reverted = {}
            self.revert = [(n, old.get(n)) for n in
                           sorted(changed, key=lambda n: self._ratio(n, config.get(n), old))]
        elif (self.anchor is not None and trial_id in self.refined
              and self._sign * (value - self.anchor[1]) > 0):
            self.anchor = (dict(config), value)

    # ------------------------------------------------------------ the combined point
    def _consensus(self, trial_id: str, best: Config) -> Config | None:
        """The combined point around ``best`` where it is new, at most once every
        CONSENSUS_EVERY launches while a repeat pass runs."""
        if self.queue and len(self.phase_of) - self.last_consensus < CONSENSUS_EVERY:
            return None
        point = combined_point(self.space, best, [(c, v) for c, v, _ in self._measured() if v],
                               self._sign)
        if point is None or not self._new(point):
            return None
        self.last_consensus = len(self.phase_of)
        self.refined[trial_id] = CONSENSUS
        return self._launch(trial_id, point, MODEL)
