"""confirm.json, run.json, stages.json and best.json as typed records: a written record
reads back equal, a file from before schema versions loads as version 1 and is written back
as it was (its version added), unknown keys survive, trial ids stay strings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

import pytest

from tuner.record.base import SCHEMA_VERSION
from tuner.record.confirm import ConfirmEntry, ConfirmRecord, DecisionRecord, SpeculativeVerdict
from tuner.record.files import (
    CONFIRM_JSON,
    RUN_JSON,
    STAGES_JSON,
    read_json,
    write_json,
    write_whole,
)
from tuner.record.info import BestRecord, RunInfo, read_record, read_stages, write_record

OLD_CONFIRM = {
    "metric": "tok_s", "mode": "max", "repeats": 3, "cap": 3, "top": 1, "confidence": 0.95,
    "interrupted": False, "limits": [], "levels": [], "decide_at": None,
    "entries": [{"label": "baseline", "source_trial": "52e91234", "search_score": 10.0,
                 "config": {"NCCL_PROTO": None}, "trials": ["1e5", "00042"],
                 "scores": [10.0, None], "failed": [{"trial_id": "00042", "kind": "crashed"}],
                 "lost": [], "objective": {"n": 1, "mean": 10.0, "sd": None, "low": None,
                                           "high": None},
                 "verify_ms": {"n": 0, "mean": None, "sd": None, "low": None, "high": None}}],
    "decision": {"kind": "default", "text": "keep it", "label": "baseline",
                 "config": {"NCCL_PROTO": None}, "source_trial": "52e91234"},
    "per_level": [], "speculative": {"with": 1.0, "without": 2.0, "pays_off": False,
                                     "text": "no", "reference_trials": ["1e5"]},
    "comparisons": {}, "something_new": {"kept": True},
}


def test_confirm_json_round_trips(tmp_path: Path) -> None:
    record = ConfirmRecord(metric="tok_s", entries=[ConfirmEntry(label="baseline",
                                                                 trials=["1e5"])],
                           decision=DecisionRecord(kind="default", text="t"),
                           speculative=SpeculativeVerdict(with_=1.0, without=2.0))
    write_record(tmp_path / CONFIRM_JSON, record)
    data = json.loads((tmp_path / CONFIRM_JSON).read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["speculative"]["with"] == 1.0
    assert read_record(tmp_path / CONFIRM_JSON, ConfirmRecord) == record


def test_an_old_confirm_json_loads_and_is_written_back_as_it_was(tmp_path: Path) -> None:
    (tmp_path / CONFIRM_JSON).write_text(json.dumps(OLD_CONFIRM))
    record = read_record(tmp_path / CONFIRM_JSON, ConfirmRecord)
    assert record is not None and record.schema_version == 1
    entry = record.entries[0]
    assert entry.source_trial == "52e91234" and entry.trials == ["1e5", "00042"]
    assert entry.failed[0].trial_id == "00042" and entry.objective.mean == 10.0
    assert record.decided.source_trial == "52e91234"
    assert record.speculative is not None and record.speculative.with_ == 1.0
    assert record.speculative.pays_off is False
    # a key this release does not know
    assert (record.model_extra or {})["something_new"] == {"kept": True}
    assert record.dump() == {"schema_version": 1, **OLD_CONFIRM}
    # The mapping the file holds, for the code that formats it.
    assert record.dump()["entries"][0]["objective"]["mean"] == 10.0
    assert record.decided.dump()["source_trial"] == "52e91234"


def test_run_json_and_stages_json(tmp_path: Path) -> None:
    old_run = {"nodes": 2, "gpus_per_node": [8, 8], "gpus_per_trial": 8, "nodes_per_trial": 1,
               "trials_at_once": 1, "dashboard_url": None}
    (tmp_path / RUN_JSON).write_text(json.dumps(old_run))
    run = read_record(tmp_path / RUN_JSON, RunInfo)
    assert run is not None and run.gpus_per_trial == 8 and run.gpus_per_node == [8, 8]
    assert run.dump() == {"schema_version": 1, **old_run}
    write_record(tmp_path / RUN_JSON, run)
    assert read_record(tmp_path / RUN_JSON, RunInfo) == run
    (tmp_path / STAGES_JSON).write_text(json.dumps([
        {"stage": "comm", "pass": 1, "winner": "1e5", "config": {"NCCL_ALGO": "Ring"}},
        {"stage": "mem", "pass": 1, "winner": "52e91234", "config": {}, "pins": {"a": 1}}]))
    stages = read_stages(tmp_path / STAGES_JSON)
    assert [(s.stage, s.pass_, s.winner) for s in stages] == [("comm", 1, "1e5"),
                                                              ("mem", 1, "52e91234")]
    assert stages[1].pins == {"a": 1}
    assert read_stages(tmp_path / "missing.json") == ()


def test_best_json_keeps_its_trial_id_a_string(tmp_path: Path) -> None:
    (tmp_path / "best.json").write_text(json.dumps({"trial_id": "1e5", "score": 3,
                                                    "argv": ["x"], "config": {}}))
    best = read_record(tmp_path / "best.json", BestRecord)
    assert best is not None and best.trial_id == "1e5" and best.score == 3.0
    assert read_record(tmp_path / "nothing.json", BestRecord) is None


def test_two_writers_of_one_file_at_once_both_finish(tmp_path: Path) -> None:
    """A ``servetune report`` during a run rewrites results.csv while the driver does: here the
    second writer writes and renames while the first is still writing. With one temp name
    for both, the first writer's rename found its temp file gone (FileNotFoundError)."""
    path = tmp_path / "results.csv"

    def first(handle: TextIO) -> None:
        handle.write("first\n")
        write_whole(path, lambda other: other.write("second\n"))

    write_whole(path, first)
    assert path.read_text() == "first\n"  # the last rename wins, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # no temp left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "best.json"
    write_json(path, {"a": 1})

    def broken(handle: TextIO) -> None:
        handle.write("{half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_whole(path, broken)
    assert read_json(path) == {"a": 1} and [p.name for p in tmp_path.iterdir()] == ["best.json"]
