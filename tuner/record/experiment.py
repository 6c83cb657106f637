"""An experiment folder read once, as typed, immutable records (as Optuna's storages hand
back frozen trials): the journal's events and trials, confirm.json, run.json, stages.json,
best.json and the lists of what the run ruled out, suspected, never launched or completed.
The results table is built from it once per objective and baseline (``rows``, ``table``).

Nothing here runs a trial or decides: ``tuner.decide`` and ``tuner.output`` read the
records; ``tuner.run`` writes them through the same models (``tuner.record.write``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tuner.record.confirm import ConfirmRecord
from tuner.record.events import EndEvent, ResultEvent, StartEvent, read_events
from tuner.record.files import (
    BEST_JSON,
    BROKEN_JSON,
    COMPLETED,
    CONFIRM_JSON,
    JOURNAL,
    REJECTED,
    RULED_OUT_JSON,
    RUN_JSON,
    STAGES_JSON,
    SUSPECTS_JSON,
)
from tuner.record.info import (
    BestRecord,
    BrokenRecord,
    Completed,
    Entry,
    Rejected,
    RunInfo,
    StageRecord,
    read_entries,
    read_record,
    read_stages,
)
from tuner.record.ran import Ran, ran_in
from tuner.record.rows import ResultRow, frame
from tuner.record.table import build
from tuner.record.trials import TrialRecord, fold
from tuner.spec import Objective


@dataclass(frozen=True)
class Experiment:
    folder: Path
    events: tuple[StartEvent | ResultEvent | EndEvent, ...] = ()
    trials: Mapping[str, TrialRecord] = field(default_factory=dict)
    confirm: ConfirmRecord | None = None
    run: RunInfo | None = None
    stages: tuple[StageRecord, ...] = ()
    best: BestRecord | None = None
    ruled_out: tuple[Entry, ...] = ()
    suspects: tuple[Entry, ...] = ()
    rejected: tuple[Rejected, ...] = ()
    completed: tuple[Completed, ...] = ()
    broken: BrokenRecord | None = None  # broken_environment.json
    _tables: dict[str, tuple[ResultRow, ...]] = field(default_factory=dict, repr=False,
                                                       compare=False)

    @classmethod
    def load(cls, folder: Path) -> Experiment:
        """The folder's records (what is missing is empty)."""
        folder = Path(folder)
        events = read_events(folder / JOURNAL)
        return cls(folder, events, fold(events),
                   read_record(folder / CONFIRM_JSON, ConfirmRecord),
                   read_record(folder / RUN_JSON, RunInfo), read_stages(folder / STAGES_JSON),
                   read_record(folder / BEST_JSON, BestRecord),
                   read_entries(folder / RULED_OUT_JSON, Entry),
                   read_entries(folder / SUSPECTS_JSON, Entry),
                   read_entries(folder / REJECTED, Rejected),
                   read_entries(folder / COMPLETED, Completed),
                   read_record(folder / BROKEN_JSON, BrokenRecord))

    @classmethod
    def journal(cls, folder: Path) -> Experiment:
        """The journal alone (a run in progress reads nothing else)."""
        events = read_events(Path(folder) / JOURNAL)
        return cls(Path(folder), events, fold(events))

    def rows(self, objective: Objective, baseline: Mapping[str, Any], running: bool = False,
             ran: Ran | None = None) -> tuple[ResultRow, ...]:
        """The results table's rows, built once per objective, baseline and ``running``
        (``ran``: what each trial's server ran; by default the workload's reading of the
        trial's folder)."""
        key = json.dumps([repr(objective), dict(baseline), running, ran is None],
                         sort_keys=True, default=str)
        if key not in self._tables:
            self._tables[key] = build(self.trials, objective, baseline,
                                      ran or ran_in(self.folder), running)
        return self._tables[key]

    def table(self, objective: Objective, baseline: Mapping[str, Any], running: bool = False
              ) -> pd.DataFrame:
        """The rows as pandas, for plots and reports."""
        return frame(self.rows(objective, baseline, running))

    def settings(self) -> dict[str, dict[str, Any]]:
        """Every trial's settings as launched, by trial id, without which weights it loaded
        (a setting to confirm or export never runs on random weights)."""
        return {tid: t.settings for tid, t in self.trials.items()}

    def search_trials(self) -> list[TrialRecord]:
        return [t for t in self.trials.values() if t.search]

    @property
    def wall_s(self) -> float | None:
        """From the first start to the last end, as the journal timed them."""
        starts = [e.time for e in self.events if isinstance(e, StartEvent) and e.time is not None]
        ends = [e.time for e in self.events if isinstance(e, EndEvent) and e.time is not None]
        return max(ends) - min(starts) if starts and ends and max(ends) >= min(starts) else None

    def next_order(self) -> int:
        """The launch order of the next trial (a resumed run goes on counting)."""
        orders = [e.order if e.order is not None else -1 for e in self.events
                  if isinstance(e, StartEvent)]
        return max(orders, default=-1) + 1


Folder = Path | Experiment  # a folder, or the records already read from it


def loaded(folder: Folder) -> Experiment:
    """The records of ``folder`` (read now unless given)."""
    return folder if isinstance(folder, Experiment) else Experiment.load(folder)
