"""The journal's events as typed records: each written line reads back as it was written,
a line from before schema versions reads as version 1, trial ids stay strings."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.record.base import SCHEMA_VERSION
from tuner.record.events import (
    EndEvent,
    FailureInfo,
    ResultEvent,
    StartEvent,
    append_event,
    parse_event,
    read_events,
)
from tuner.record.files import JOURNAL
from tuner.record.trials import fold


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_event_round_trips(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    written = [
        StartEvent(trial_id="a", time=1.0, order=0, config={"NCCL_PROTO": "LL"}, stage="s",
                   dir="/x/a", phase="search"),
        ResultEvent.of("a", {"tok_s": 10.0, "round": 1}, time=2.0),
        EndEvent(trial_id="a", time=3.0, status="failed",
                 failure=FailureInfo(kind="nccl_error", message="boom", hint="h")),
    ]
    for event in written:
        append_event(journal, event)
    assert read_events(journal) == tuple(written)
    lines = _lines(journal)
    assert [line["schema_version"] for line in lines] == [SCHEMA_VERSION] * 3
    assert lines[1]["tok_s"] == 10.0 and lines[1]["round"] == 1  # metrics flat on the line
    assert lines[2]["failure"]["kind"] == "nccl_error"
    assert read_events(journal)[1].metrics == {"tok_s": 10.0, "round": 1}  # type: ignore[union-attr]


def test_a_line_without_a_version_reads_as_version_1(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    old = [{"time": 1.0, "event": "start", "trial_id": "t1", "order": 0, "config": {}},
           {"time": 2.0, "event": "result", "trial_id": "t1", "tok_s": 5.0},
           {"time": 3.0, "event": "end", "trial_id": "t1", "status": "ok"}]
    journal.write_text("".join(json.dumps(e) + "\n" for e in old) + '{"event": "sta')
    events = read_events(journal)
    assert [e.event for e in events] == ["start", "result", "end"]  # the cut line skipped
    assert all(e.schema_version == 1 for e in events)
    start = events[0]
    assert isinstance(start, StartEvent) and start.phase == "search"  # absent: the search's
    # Written back as it was, its version added, nothing filled in from defaults.
    assert start.dump() == {"schema_version": 1, **old[0]}


def test_trial_ids_stay_strings(tmp_path: Path) -> None:
    journal = tmp_path / JOURNAL
    for tid in ("52e91234", "1e5", "00042", "inf", "nan"):
        journal.open("a").write(json.dumps({"event": "start", "trial_id": tid, "config": {}})
                                + "\n")
    assert [e.trial_id for e in read_events(journal)] == ["52e91234", "1e5", "00042", "inf",
                                                          "nan"]
    assert list(fold(read_events(journal))) == ["52e91234", "1e5", "00042", "inf", "nan"]
    number = parse_event({"event": "end", "trial_id": 1e5, "status": "ok"})
    assert number is not None and number.trial_id == "100000.0"


def test_what_is_no_event_is_skipped() -> None:
    assert parse_event({"event": "other", "trial_id": "a"}) is None
    assert parse_event({"event": "start"}) is None  # no trial id
    assert parse_event(["start"]) is None


def test_fold_keeps_the_first_order_and_the_latest_attempt() -> None:
    events = [StartEvent(trial_id="a", order=0, config={"x": 1}),
              ResultEvent.of("a", {"tok_s": 1.0}),
              StartEvent(trial_id="b", order=1, phase="confirm", variant="no_speculative"),
              StartEvent(trial_id="a", order=2, config={"x": 1}),  # Ray resumed it
              ResultEvent.of("a", {"tok_s": 2.0}),
              EndEvent(trial_id="a", status="ok")]
    trials = fold(events)
    assert list(trials) == ["a", "b"]
    a, b = trials["a"], trials["b"]
    assert (a.order, a.attempts, a.rounds, a.ended) == (0, 2, ({"tok_s": 2.0},), True)
    assert (b.phase, b.variant, b.ended, b.search) == ("confirm", "no_speculative", False,
                                                       False)
