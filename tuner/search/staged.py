"""StagedSearcher: the space's stages in order, each searched with the winners of the other
stages pinned, as coordinate descent over stages until nothing moves; the history of winners
is written to stages.json as each stage ends.

- Budgets: each stage gets a share of what is left of the budget, in proportion to its size
  (the valid points of its sub-space not yet launched) times its expected effect (the largest
  ``knobs.effect`` of its knobs), never more than its size; a stage's own ``samples`` (space
  file) is its budget in the first pass.
- Passes: after the last stage, every stage that was searched before another stage moved the
  best point is searched again around the new winners, until a pass moves nothing.
- Then, while budget is left, one more stage (``all``) searches every knob at once with the
  stage searcher: the budget is spent, not left over.

A stage starts from the winners so far: where they were measured the way the stage measures,
that measurement is the stage's reference (a stage searcher proposing them is answered from
it, with no launch and no sample of the budget); otherwise they are launched again first.

A stage may also add settings of its own to each of its trials (``stage_pins``: which weights
the servers load). They say how a stage measures, not what it chose: a winner leaves them
behind, and it is compared in a later stage only if that stage measures the same way."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path

from ray.tune.search import Searcher

from search_spaces import knobs
from search_spaces.space import SearchSpace, Stage
from tuner.record.info import StageRecord, write_stages
from tuner.search.base import OwnSpaceSearcher
from tuner.search.keys import Config, config_key

JOINT = "all"  # the last stage: every knob at once


class StagedSearcher(OwnSpaceSearcher):
    """Stages in order, again while a later stage moves the best point, then all knobs at once.
    Suggestions wait (None) until a stage's trials have all finished, so its winner is known
    before the next stage starts."""

    def __init__(self, space: SearchSpace, total_samples: int, rounds: int,
                 make_inner: Callable[[SearchSpace, int, str | None], Searcher], seed: int = 0,
                 metric: str | None = None, mode: str | None = None,
                 history_file: Path | None = None,
                 stage_pins: Mapping[str, Config] | None = None) -> None:
        super().__init__(metric=metric, mode=mode)
        self.stage_pins = {name: dict(pins) for name, pins in (stage_pins or {}).items()}
        self.history_file = history_file  # stages.json: each stage's winner as it is known
        self.space = space
        self.rounds = rounds
        self.make_inner = make_inner
        self.seed = seed
        self.total = total_samples
        stages = space.stages or (Stage(JOINT, tuple(space.domains)),)
        self.stages = tuple(s for s in stages if s.knobs)
        if self.stage_pins and JOINT not in self.stage_pins:  # measured as the last stage
            self.stage_pins[JOINT] = self.stage_pins.get(self.stages[-1].name, {})
        self.queue = list(range(len(self.stages)))  # this pass's stages, in order
        self.passes = 1
        self.stage_index = -1  # -1: the baseline; len(stages): the joint stage
        self.run = 0  # each stage search is one run (a stage is searched once per pass)
        self.run_of: dict[str, int] = {}
        self.clock = 0  # counts stage searches as they end
        self.ended: dict[int, int] = {}  # stage index -> the clock when its last search ended
        self.moves: list[tuple[int, int]] = []  # (the clock then, stage index) of each move
        self.budget = 0
        self.reference: str | None = None  # the winners measured as this stage measures
        self.need_reference = False  # ... not yet: launch them first
        self.inner: Searcher | None = None
        self.used = 0
        self.live: set[str] = set()
        self.stage_of: dict[str, str] = {}
        self.config_of: dict[str, Config] = {}
        self.trial_of: dict[str, str] = {}  # config key (with its stage's pins) -> trial
        self.values: dict[str, list[float]] = defaultdict(list)
        self.rounds_of: dict[str, set[int]] = {}  # the rounds ``values`` holds, per trial
        self.winners: Config = space.baseline()
        self.winner_trial: str | None = None
        self.history: list[StageRecord] = []

    @property
    def current_stage(self) -> str:
        if self.stage_index < 0:
            return "baseline"
        return JOINT if self.stage_index >= len(self.stages) else self.stages[self.stage_index].name

    def suggest(self, trial_id: str) -> Config | None:
        if self.stage_index == -1 and not self.stage_of:
            return self._launch(trial_id, self.space.baseline())
        repeats = 0
        while True:
            if self.need_reference and len(self.config_of) < self.total:
                self.need_reference = False
                self.used += 1
                self.reference = trial_id
                return self._launch(trial_id, self.winners)
            if self.stage_index >= 0 and self.used < self.budget \
                    and len(self.config_of) < self.total:
                assert self.inner is not None
                inner_id = trial_id if not repeats else f"{trial_id}~w{repeats}"
                suggestion = self.inner.suggest(inner_id)
                if suggestion is None:
                    return None
                if suggestion != Searcher.FINISHED:
                    config = {**self.winners, **suggestion}
                    earlier = self.reference if config == self.winners else \
                        self.trial_of.get(config_key({**config, **self._pins(self.current_stage)}))
                    if earlier is not None or config == self.winners:
                        if earlier in self.live:
                            return None  # its measurement is still running
                        # Measured already, as this stage measures: answered from that
                        # measurement, neither relaunched nor charged to the budget.
                        self._answer_with(earlier, inner_id)
                        repeats += 1
                        continue
                    self.used += 1
                    return self._launch(trial_id, config)
            if self.live:
                return None  # the stage's winner is not known yet
            if not self._advance():
                return Searcher.FINISHED  # type: ignore[return-value]

    def _answer_with(self, trial_id: str | None, inner_id: str) -> None:
        """Tell the stage's searcher what an earlier trial measured, as this stage measures,
        without a launch or a sample of the stage's budget."""
        assert self.inner is not None
        values = self.values.get(trial_id or "")
        if values and self.metric:
            self.inner.on_trial_complete(inner_id, result={self.metric: sum(values) / len(values)})
        else:
            self.inner.on_trial_complete(inner_id, error=True)

    def _launch(self, trial_id: str, config: Config) -> Config:
        config = {**config, **self._pins(self.current_stage)}
        self.live.add(trial_id)
        self.stage_of[trial_id] = self.current_stage
        self.run_of[trial_id] = self.run
        self.config_of[trial_id] = config
        self.trial_of.setdefault(config_key(config), trial_id)
        return config

    def _pins(self, stage: str) -> Config:
        return self.stage_pins.get(stage, {})

    def _measured_as(self, trial_id: str, stage: str) -> bool:
        """Whether ``trial_id`` ran with ``stage``'s own settings (its scores compare)."""
        config = self.config_of[trial_id]
        names = {n for pins in self.stage_pins.values() for n in pins}
        return {n: config.get(n) for n in names} == {n: self._pins(stage).get(n) for n in names}

    def _score(self, trial_id: str) -> tuple[int, float] | None:
        values = self.values.get(trial_id)
        if not values:
            return None
        mean = sum(values) / len(values)
        sign = 1.0 if self.mode == "max" else -1.0
        return (1 if len(values) >= self.rounds else 0, sign * mean)

    # ------------------------------------------------------------ stages and passes
    def _sub_space(self, index: int) -> SearchSpace:
        if index >= len(self.stages):
            return self.space
        return self.space.stage_space(self.stages[index], self.winners)

    def _unlaunched(self, index: int) -> int:
        """The valid points of the stage's sub-space (around the winners) not launched yet."""
        own = {n for pins in self.stage_pins.values() for n in pins}
        launched = {config_key({n: v for n, v in c.items() if n not in own})
                    for c in self.config_of.values()}
        sub = self._sub_space(index)
        if sub.size > 100_000:
            return sub.size
        return sum(1 for p in sub.grid() if not sub.validate(p) and config_key(p) not in launched)

    def _stage_budget(self, index: int) -> int:
        left = self.total - len(self.config_of)
        if index >= len(self.stages):
            return left
        stage = self.stages[index]
        if self.passes == 1 and stage.samples is not None:
            return min(stage.samples, left)
        sizes = {i: self._unlaunched(i) for i in [index, *self.queue]}
        weights = {i: size * max(knobs.effect(n) for n in self.stages[i].knobs)
                   for i, size in sizes.items()}
        share = round(left * weights[index] / sum(weights.values())) if sum(weights.values()) \
            else 0
        return min(sizes[index], max(1, share), left)

    def _next_stage(self) -> int | None:
        """This pass's next stage; then a new pass over every stage searched before another
        stage moved the best point; then the joint stage; None when all is done."""
        if len(self.config_of) >= self.total:
            return None
        if not self.queue:
            stale = [i for i in range(len(self.stages))
                     if any(j != i and when > self.ended.get(i, -1) for when, j in self.moves)]
            if stale and self.stage_index < len(self.stages):
                self.queue, self.passes = stale, self.passes + 1
        if self.queue:
            return self.queue.pop(0)
        if self.stage_index < len(self.stages) and len(self.config_of) < self.total:
            return len(self.stages)
        return None

    def _advance(self) -> bool:
        if self.stage_index >= 0 or self.stage_of:
            self._pick_winner()
        while (index := self._next_stage()) is not None:
            self.stage_index = index
            self.run += 1
            alike = self.winner_trial is not None and self._measured_as(
                self.winner_trial, self.current_stage)
            self.reference = self.winner_trial if alike else None
            self.need_reference = self.winner_trial is not None and not alike
            self.budget = self._stage_budget(index) + self.need_reference
            if self.budget <= self.need_reference:
                self.clock += 1
                self.ended[index] = self.clock
                self.need_reference = False
                continue
            search = None if index >= len(self.stages) else self.stages[index].search
            self.inner = self.make_inner(self._sub_space(index), self.seed + self.run, search)
            if self.metric and self.mode:
                self.inner.set_search_properties(self.metric, self.mode, {})
            self.used = 0
            return True
        return False

    def _pick_winner(self) -> None:
        stage = self.current_stage
        candidates = [t for t, r in self.run_of.items() if r == self.run]
        if self.winner_trial and self._measured_as(self.winner_trial, stage):
            candidates.append(self.winner_trial)
        scored = [(sc, t) for t in candidates if (sc := self._score(t)) is not None]
        if scored:
            _, best = max(scored)
            own = {n for pins in self.stage_pins.values() for n in pins}
            winners = {n: v for n, v in self.config_of[best].items() if n not in own}
            self.clock += 1
            if winners != self.winners and self.stage_index >= 0:
                self.moves.append((self.clock, self.stage_index))
            self.winner_trial, self.winners = best, winners
        if self.stage_index >= 0:
            self.ended[self.stage_index] = self.clock
        pins = self._pins(stage)
        self.history.append(StageRecord(stage=stage, pass_=self.passes, winner=self.winner_trial,
                                        config=dict(self.winners), **(
                                            {"pins": pins} if pins else {})))
        if self.history_file is not None:
            write_stages(self.history_file, self.history)

    def not_launched(self, trial_id: str) -> None:
        """The wrapping filter answered or refused this suggestion (a repeat, a value ruled
        out): it is no launch, and no sample of the stage's budget."""
        if self.config_of.pop(trial_id, None) is None:
            return
        self.live.discard(trial_id)
        self.stage_of.pop(trial_id, None)
        if self.run_of.pop(trial_id, None) == self.run and trial_id != self.reference:
            self.used -= 1
        self.trial_of = {k: t for k, t in self.trial_of.items() if t != trial_id}

    # ------------------------------------------------------------ results
    def _record(self, trial_id: str, result: dict) -> None:
        """A round's value, once. Ray hands the round that ends a trial (the last one, or one
        the scheduler stops it at) to ``on_trial_complete`` only."""
        done = self.rounds_of.setdefault(trial_id, set())
        round_ = result.get("round", len(self.values[trial_id]) + 1)
        if self.metric in result and trial_id in self.stage_of and round_ not in done:
            done.add(round_)
            self.values[trial_id].append(float(result[self.metric]))

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        self._record(trial_id, result)
        if self.inner is not None and self.run_of.get(trial_id) == self.run:
            self.inner.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.live.discard(trial_id)
        if result and not error:
            self._record(trial_id, result)
        if error:
            self.values.pop(trial_id, None)
        if self.inner is not None and self.run_of.get(trial_id) == self.run:
            self.inner.on_trial_complete(trial_id, result=result, error=error)
