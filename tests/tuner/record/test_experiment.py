"""Experiment.load: an experiment folder read once into typed records; the results table
from typed rows, built once per objective and baseline; trial ids strings, even those pandas
would read as numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tuner.record.events import EndEvent, FailureInfo, ResultEvent, StartEvent, append_event
from tuner.record.experiment import Experiment
from tuner.record.files import CONFIRM_JSON, JOURNAL, RUN_JSON
from tuner.record.rows import ResultRow, best, frame, read_csv, rows_of, search_rows
from tuner.spec import Objective

OBJ = Objective("tok_s", "max", 2)
BASE = {"NCCL_PROTO": None}


def _no_ran(trial_id: str, config: object) -> dict:
    return {}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    journal = tmp_path / JOURNAL
    for order, (tid, proto, scores, end) in enumerate([
            ("52e91234", None, [10.0, 12.0], "ok"), ("1e5", "LL", [20.0, 22.0], "ok"),
            ("inf", "Simple", [30.0], "ok"), ("00042", "LL128", [], "failed")]):
        append_event(journal, StartEvent(trial_id=tid, order=order, time=float(order),
                                         config={"NCCL_PROTO": proto}))
        for r, score in enumerate(scores, 1):
            append_event(journal, ResultEvent.of(tid, {"tok_s": score, "round": r}))
        append_event(journal, EndEvent(trial_id=tid, time=order + 0.5, status=end,
                                       failure=FailureInfo(kind="crashed", message="m")
                                       if end == "failed" else None))
    (tmp_path / RUN_JSON).write_text(json.dumps({"nodes": 1, "gpus_per_trial": 2}))
    (tmp_path / CONFIRM_JSON).write_text(json.dumps({"metric": "tok_s", "entries": [],
                                                     "decision": {"kind": "unconfirmed",
                                                                  "source_trial": "1e5"}}))
    return tmp_path


def test_load_reads_every_file_once_into_typed_records(folder: Path) -> None:
    exp = Experiment.load(folder)
    assert list(exp.trials) == ["52e91234", "1e5", "inf", "00042"]
    assert exp.run is not None and exp.run.gpus_per_trial == 2
    assert exp.confirm is not None and exp.confirm.decided.source_trial == "1e5"
    assert exp.settings()["1e5"] == {"NCCL_PROTO": "LL"}
    assert exp.next_order() == 4 and exp.wall_s == 3.5
    with pytest.raises(AttributeError):
        exp.confirm = None  # type: ignore[misc]
    with pytest.raises(ValueError):
        exp.run.nodes = 3  # type: ignore[misc]


def test_rows_are_typed_and_built_once(folder: Path) -> None:
    exp = Experiment.load(folder)
    rows = exp.rows(OBJ, BASE, ran=_no_ran)
    assert rows is exp.rows(OBJ, BASE, ran=_no_ran)  # once per objective and baseline
    assert [r.trial_id for r in rows] == ["52e91234", "1e5", "inf", "00042"]
    assert [r.status for r in rows] == ["ok", "ok", "stopped", "failed"]
    assert rows[0].baseline and not rows[1].baseline and rows[0].score == 11.0
    assert rows[1].speedup == pytest.approx(21.0 / 11.0) and rows[3].speedup is None
    assert rows[3].failure_kind == "crashed" and rows[3].score is None
    chosen = best(rows, OBJ)
    assert chosen is not None and chosen.trial_id == "1e5"  # "inf" stopped: not a winner


def test_the_frame_and_back_keep_trial_ids_strings(folder: Path) -> None:
    exp = Experiment.load(folder)
    df = exp.table(OBJ, BASE)
    assert list(df["trial_id"]) == ["52e91234", "1e5", "inf", "00042"]
    assert list(df.columns[:12]) == ["trial_id", "order", "phase", "variant", "stage",
                                     "baseline", "status", "failure_kind", "failure", "hint",
                                     "rounds", "score"]
    assert df.columns[-1] == "speedup"
    csv = folder / "t.csv"
    df.to_csv(csv, index=False)
    assert pd.read_csv(csv)["trial_id"].iloc[0] == float("inf")  # pandas alone: 10f0438
    back = read_csv(csv)
    assert [r.trial_id for r in back] == ["52e91234", "1e5", "inf", "00042"]
    assert back[3].failure_kind == "crashed" and back[3].score is None
    assert back[0].baseline is True and back[0].score == 11.0
    assert [r.trial_id for r in rows_of(df)] == ["52e91234", "1e5", "inf", "00042"]
    def cells(rows: list[ResultRow]) -> list[tuple]:
        return [(r.trial_id, r.status, r.score, r.speedup, r.cell("tok_s"), r.cell("NCCL_PROTO"))
                for r in rows]

    assert cells(rows_of(frame(exp.rows(OBJ, BASE)))) == cells(list(exp.rows(OBJ, BASE)))


def test_rows_from_a_test_frame_and_their_limits() -> None:
    rows = rows_of(pd.DataFrame([
        {"trial_id": "a", "phase": None, "status": "ok", "score": 5.0, "within_limits": False},
        {"trial_id": "b", "phase": "confirm", "status": "ok", "score": 1.0},
        {"trial_id": "c", "status": "ok", "score": float("nan")}]))
    assert [r.search for r in rows] == [True, False, True]
    assert [r.within() for r in rows] == [False, True, True]
    assert rows[2].score is None and rows[2].done is False
    assert [r.trial_id for r in search_rows(rows)] == ["a", "c"]
    assert best(rows, OBJ) is not None and best(rows, OBJ).trial_id == "b"  # type: ignore[union-attr]
    assert ResultRow(trial_id="x", ttft_ms=12.0).value("ttft_ms") == 12.0
    assert ResultRow(trial_id="x", ttft_ms="12").value("ttft_ms") is None


def test_an_empty_folder_loads_empty(tmp_path: Path) -> None:
    exp = Experiment.load(tmp_path)
    assert exp.trials == {} and exp.confirm is None and exp.run is None
    assert exp.table(OBJ, BASE).empty and exp.next_order() == 0
