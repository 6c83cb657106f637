"""StagedSearcher: the space's stages in order, each searched with the winners of the earlier
stages pinned; the history of winners is written to stages.json as each stage ends.

Every stage's searcher proposes the stage's defaults first, which is the carried-over winner:
it is answered from its measurement (no launch, no sample of the stage's budget) when it was
measured the way the stage measures, and launched again otherwise.

A stage may also add settings of its own to each of its trials (``stage_pins``: which weights
the servers load). They say how a stage measures, not what it chose: a winner leaves them
behind, and it is compared in a later stage only if that stage measures the same way."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

from search_spaces.space import SearchSpace, Stage
from tuner.output.files import write_json
from tuner.search.base import OwnSpaceSearcher
from tuner.search.keys import Config


class StagedSearcher(OwnSpaceSearcher):
    """Stages in order; stage k searches its knobs with earlier winners pinned.

    The baseline runs first. A stage's budget is its ``samples`` (or the total split
    evenly). Suggestions wait (None) until a stage's trials have all finished, so its
    winner is known before the next stage starts."""

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
        stages = space.stages or (Stage("all", tuple(space.domains)),)
        self.stages = tuple(s for s in stages if s.knobs)
        free = max(total_samples - 1, len(self.stages))
        unset = [s for s in self.stages if s.samples is None]
        fixed = sum(s.samples or 0 for s in self.stages)
        share = max(1, (free - fixed) // max(1, len(unset))) if unset else 0
        self.budgets = [s.samples or share for s in self.stages]
        self.stage_index = -1  # -1: the baseline
        self.inner: Searcher | None = None
        self.used = 0
        self.live: set[str] = set()
        self.stage_of: dict[str, str] = {}
        self.config_of: dict[str, Config] = {}
        self.values: dict[str, list[float]] = defaultdict(list)
        self.rounds_of: dict[str, set[int]] = {}  # the rounds ``values`` holds, per trial
        self.winners: Config = space.baseline()
        self.winner_trial: str | None = None
        self.history: list[dict[str, Any]] = []

    _transient = ("make_inner",)

    @property
    def current_stage(self) -> str:
        return "baseline" if self.stage_index < 0 else self.stages[self.stage_index].name

    def suggest(self, trial_id: str) -> Config | None:
        if self.stage_index == -1 and not self.stage_of:
            return self._launch(trial_id, self.space.baseline())
        repeats = 0
        while True:
            if self.stage_index >= 0 and self.used < self.budgets[self.stage_index]:
                assert self.inner is not None
                inner_id = trial_id if not repeats else f"{trial_id}~w{repeats}"
                suggestion = self.inner.suggest(inner_id)
                if suggestion is None:
                    return None
                if suggestion != Searcher.FINISHED:
                    config = {**self.winners, **suggestion}
                    if config == self.winners and (
                            self.winner_trial is None  # nothing measured: a repeat, not run
                            or self._measured_as(self.winner_trial, self.current_stage)):
                        # The winner so far, measured as this stage measures: answered from
                        # its measurement, neither relaunched nor charged to the budget.
                        self._answer_with_winner(inner_id)
                        repeats += 1
                        continue
                    self.used += 1
                    return self._launch(trial_id, config)
            if self.live:
                return None  # the stage's winner is not known yet
            if not self._advance():
                return Searcher.FINISHED  # type: ignore[return-value]

    def _answer_with_winner(self, inner_id: str) -> None:
        """Tell the stage's searcher what its stage's own starting point (the earlier stages'
        winner) measured, without a launch or a sample of the stage's budget."""
        assert self.inner is not None
        values = self.values.get(self.winner_trial or "")
        if values and self.metric:
            self.inner.on_trial_complete(inner_id, result={self.metric: sum(values) / len(values)})
        else:
            self.inner.on_trial_complete(inner_id, error=True)

    def _launch(self, trial_id: str, config: Config) -> Config:
        config = {**config, **self._pins(self.current_stage)}
        self.live.add(trial_id)
        self.stage_of[trial_id] = self.current_stage
        self.config_of[trial_id] = config
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

    def _advance(self) -> bool:
        if self.stage_index >= 0 or self.stage_of:
            self._pick_winner()
        self.stage_index += 1
        if self.stage_index >= len(self.stages):
            return False
        stage = self.stages[self.stage_index]
        sub = self.space.stage_space(stage, self.winners)
        self.inner = self.make_inner(sub, self.seed + self.stage_index, stage.search)
        if self.metric and self.mode:
            self.inner.set_search_properties(self.metric, self.mode, {})
        self.used = 0
        return True

    def _pick_winner(self) -> None:
        stage = self.current_stage
        candidates = [t for t, s in self.stage_of.items() if s == stage]
        if self.winner_trial and self._measured_as(self.winner_trial, stage):
            candidates.append(self.winner_trial)
        scored = [(sc, t) for t in candidates if (sc := self._score(t)) is not None]
        if scored:
            _, best = max(scored)
            self.winner_trial = best
            own = {n for pins in self.stage_pins.values() for n in pins}
            self.winners = {n: v for n, v in self.config_of[best].items() if n not in own}
        self.history.append({"stage": stage, "winner": self.winner_trial,
                             "config": dict(self.winners), **(
                                 {"pins": self._pins(stage)} if self._pins(stage) else {})})
        if self.history_file is not None:
            write_json(self.history_file, self.history)

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
        if self.inner is not None and self.stage_of.get(trial_id) == self.current_stage:
            self.inner.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None:
        self.live.discard(trial_id)
        if result and not error:
            self._record(trial_id, result)
        if error:
            self.values.pop(trial_id, None)
        if self.inner is not None and self.stage_of.get(trial_id) == self.current_stage:
            self.inner.on_trial_complete(trial_id, result=result, error=error)
