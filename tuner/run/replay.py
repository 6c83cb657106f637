"""Resuming a search from servetune's own journal (results.jsonl), not from Ray's pickle.

Ray writes its experiment state every few seconds: a driver killed before the first write
(or between two) leaves a state that misses the latest trials. The journal is written the
moment each event happens, so a resume rebuilds from it: the search trials that ended (ok,
stopped by the scheduler, or failed) count toward the budget and are told to a freshly built
searcher in the order they ran (it proposes them again, seeded alike, and learns each one's
outcome); trials that never ended are run again. No Ray import: the searcher and the
environment watch are given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from launchers.failures import Failure
from search_spaces.knobs import Value
from tuner.record.events import EndEvent, ResultEvent, StartEvent
from tuner.record.experiment import Experiment

ITERATION = "training_iteration"
Event = StartEvent | ResultEvent | EndEvent


class Replayable(Protocol):
    """The searcher side of Ray's Searcher API that a replay drives."""

    def suggest(self, trial_id: str) -> Any: ...

    def on_trial_result(self, trial_id: str, result: dict) -> None: ...

    def on_trial_complete(self, trial_id: str, result: dict | None = None,
                          error: bool = False) -> None: ...


class Watch(Protocol):
    def observe(self, trial_id: str, config: Mapping[str, Value], failure: Failure | None
                ) -> None: ...


@dataclass
class JournalState:
    """The search phase as the journal tells it."""

    events: list[Event] = field(default_factory=list)  # search trials' events, in order
    finished: list[str] = field(default_factory=list)  # ended (ok/stopped/failed), launch order
    interrupted: list[str] = field(default_factory=list)  # started, never ended

    def line(self, budget: int) -> str:
        left = max(0, budget - len(self.finished))
        again = f"; {len(self.interrupted)} interrupted, run again" if self.interrupted else ""
        return (f"resuming from the journal: {len(self.finished)} of {budget} search trials "
                f"done{again}; {left} to run")


def search_state(out_dir: Path) -> JournalState:
    """Which search trials ended and which were cut short (confirm-phase trials left out)."""
    events = Experiment.journal(out_dir).events
    search = {e.trial_id for e in events if isinstance(e, StartEvent) and e.phase == "search"}
    state = JournalState([e for e in events if e.trial_id in search])
    last: dict[str, str] = {}  # trial -> its latest start/end event
    for event in state.events:
        if not isinstance(event, ResultEvent):
            last[event.trial_id] = event.event
    order = list(dict.fromkeys(e.trial_id for e in state.events if isinstance(e, StartEvent)))
    state.finished = [t for t in order if last.get(t) == "end"]
    state.interrupted = [t for t in order if last.get(t) != "end"]
    return state


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def text(config: Mapping[str, Any]) -> str:
        return json.dumps(json.loads(json.dumps(dict(config), default=str)), sort_keys=True)
    return text(a) == text(b)


def replay(state: JournalState, searcher: Replayable, watch: Watch | None = None) -> list[str]:
    """Tell ``searcher`` (a fresh one, before its first real suggestion) the finished trials,
    event by event as they ran: each is suggested under its journaled id, sees its rounds and
    ends as it ended; ``watch`` learns each outcome as the recorder told it. Returns notes
    for trials whose proposal differed from what ran (the searcher is not told those)."""
    finished = set(state.finished)
    # A trial Ray once resumed has several attempts: suggested at its first start, ended at
    # its last end.
    final_end = {e.trial_id: i for i, e in enumerate(state.events) if isinstance(e, EndEvent)}
    open_: dict[str, dict[str, Any]] = {}  # suggested, not ended yet: id -> journaled config
    last_result: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for index, event in enumerate(state.events):
        tid = event.trial_id
        if tid not in finished:
            continue
        if isinstance(event, StartEvent) and tid not in open_ and tid not in last_result:
            config = dict(event.config)
            proposed = searcher.suggest(tid)
            last_result[tid] = {}
            if not isinstance(proposed, Mapping) or not _same(proposed, config):
                # told nothing: its proposal would be scored with another config's measurement
                notes.append(f"resume: the searcher now proposes another configuration than "
                             f"trial {tid} ran; it is not told that trial's outcome")
                continue
            open_[tid] = config
        elif isinstance(event, ResultEvent) and tid in open_:
            result = event.metrics
            # Ray's own key, left out of the journal; Optuna's searcher reads it
            result[ITERATION] = last_result[tid].get(ITERATION, 0) + 1
            last_result[tid] = result
            searcher.on_trial_result(tid, result)
        elif isinstance(event, EndEvent) and tid in open_ and final_end[tid] == index:
            config = open_.pop(tid)
            failed = event.failed
            if failed:
                searcher.on_trial_complete(tid, error=True)
            else:
                searcher.on_trial_complete(tid, result=last_result[tid])
            if watch is not None:
                failure = Failure.from_json(event.failure.dump()) if failed and \
                    event.failure is not None else None
                watch.observe(tid, config, failure)
    return notes
