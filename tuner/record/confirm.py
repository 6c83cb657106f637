"""confirm.json: the confirm stage's launches per candidate, their intervals, the comparisons
with the baseline, the decision (overall and per concurrency level), and the speculative
reference's verdict. Written by the confirm stage (``tuner.run.confirm``) and, when no stage
ran, by the end of the run with the search's best (``tuner.run.finish``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from tuner.record.base import Frozen, Record
from tuner.stats import Interval


class IntervalRecord(Frozen):
    """``tuner.stats.Interval`` as a file holds it."""

    n: int = 0
    mean: float | None = None
    sd: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def interval(self) -> Interval:
        return Interval(self.n, self.mean, self.sd, self.low, self.high)

    def text(self) -> str:
        return self.interval.text()


class Launch(Frozen):
    """A confirm launch that did not complete: its trial and failure kind."""

    trial_id: str
    kind: str | None = None


class LevelFigures(Frozen):
    """A candidate's launches read at one concurrency level."""

    scores: list[float | None] = Field(default_factory=list)
    objective: IntervalRecord = IntervalRecord()
    limits: dict[str, IntervalRecord] | None = None
    limit_breaks: list[str] | None = None


class ConfirmEntry(Frozen):
    """One candidate (the baseline first) over its confirm launches."""

    label: str
    source_trial: str | None = None
    search_score: float | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    trials: list[str] = Field(default_factory=list)
    scores: list[float | None] = Field(default_factory=list)
    failed: list[Launch] = Field(default_factory=list)
    lost: list[Launch] = Field(default_factory=list)
    objective: IntervalRecord = IntervalRecord()
    verify_ms: IntervalRecord = IntervalRecord()
    limits: dict[str, IntervalRecord] | None = None
    limit_breaks: list[str] | None = None
    levels: dict[str, LevelFigures] | None = None

    @property
    def launch_scores(self) -> list[float]:
        return [v for v in self.scores if v is not None]


class DecisionRecord(Frozen):
    """``tuner.decide.decision.Decision`` as a file holds it (``speculative`` False: served
    without speculative decoding, which lost)."""

    kind: str = "none"
    text: str = ""
    label: str | None = None
    config: dict[str, Any] | None = None
    source_trial: str | None = None
    speculative: bool | None = None


class LevelDecision(Frozen):
    level: int
    metric: str
    decision: DecisionRecord = DecisionRecord()


class SpeculativeVerdict(Frozen):
    """Whether speculative decoding paid off: the decided settings with it on and off."""

    text: str = ""
    pays_off: bool | None = None
    with_: float | None = Field(default=None, alias="with")
    without: float | None = None
    reference_trial: str | None = None
    reference_trials: list[str] = Field(default_factory=list)
    # the decided settings launched again beside the reference, while its answer was open
    with_trials: list[str] = Field(default_factory=list)
    config: dict[str, Any] | None = None


class ConfirmRecord(Record):
    metric: str = "score"
    mode: str = "max"
    entries: list[ConfirmEntry] = Field(default_factory=list)
    decision: DecisionRecord | None = None
    per_level: list[LevelDecision] = Field(default_factory=list)
    speculative: SpeculativeVerdict | None = None
    interrupted: bool = False
    stopped: str | None = None
    repeats: int | None = None
    limits: list[str] = Field(default_factory=list)
    decide_at: int | None = None
    comparisons: dict[str, dict[str, Any]] = Field(default_factory=dict)
    relaunched: list[Launch] = Field(default_factory=list)
    launch_spread: float | None = None
    round_spread: float | None = None
    same_config: bool | None = None
    same_config_text: str | None = None

    @classmethod
    def of(cls, data: ConfirmRecord | Mapping[str, Any] | None) -> ConfirmRecord | None:
        """The record, from itself or the mapping its file holds (None stays None)."""
        if data is None or isinstance(data, ConfirmRecord):
            return data
        return cls.model_validate(dict(data))

    def entry(self, label: str | None) -> ConfirmEntry | None:
        return next((e for e in self.entries if e.label == label), None)

    def with_decision(self, decision: DecisionRecord) -> ConfirmRecord:
        return self.model_copy(update={"decision": decision})

    @property
    def decided(self) -> DecisionRecord:
        return self.decision or DecisionRecord()

    @property
    def chosen_trials(self) -> list[str]:
        """The trials each decision came from (overall, then per level), each once."""
        found = [self.decided.source_trial, *(d.decision.source_trial for d in self.per_level)]
        return list(dict.fromkeys(t for t in found if t))
