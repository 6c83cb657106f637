"""The results table from the journal alone: one row per trial with its status (ok, stopped
early, failed, still running or interrupted), the baseline flag, the mean of its rounds and
its speedup; the summary lines; a killed worker's record reconciled with the journal."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tuner.output.results import (
    best_row,
    build_table,
    configs,
    reconcile_records,
    search_rows,
    summary_lines,
)
from tuner.record.files import JOURNAL, append_jsonl
from tuner.spec import Objective

OBJ = Objective("tok_s", "max", 2)
BASE = {"NCCL_PROTO": None}


def journal(tmp_path: Path, *events: dict[str, Any]) -> Path:
    for event in events:
        append_jsonl(tmp_path / JOURNAL, event)
    return tmp_path


def start(tid: str, order: int, config: dict[str, Any], **tags: Any) -> dict[str, Any]:
    return {"event": "start", "trial_id": tid, "order": order, "config": config, **tags}


def result(tid: str, r: int, tok_s: float, **more: Any) -> dict[str, Any]:
    return {"event": "result", "trial_id": tid, "round": r, "tok_s": tok_s, **more}


def end(tid: str, status: str = "ok", **more: Any) -> dict[str, Any]:
    return {"event": "end", "trial_id": tid, "status": status, **more}


def run_journal(tmp_path: Path) -> Path:
    return journal(
        tmp_path,
        start("b", 0, BASE), result("b", 1, 100.0, nccl_nranks=2), result("b", 2, 102.0), end("b"),
        start("ll", 1, {"NCCL_PROTO": "LL"}), result("ll", 1, 120.0), result("ll", 2, 124.0),
        end("ll"),
        start("s", 2, {"NCCL_PROTO": "Simple"}), result("s", 1, 80.0), end("s"),
        start("x", 3, {"NCCL_PROTO": "LL128"}),
        end("x", "failed", failure={"kind": "graph_capture", "message": "capture failed"}),
        start("r", 4, {"NCCL_PROTO": "LL"}, phase="confirm"), result("r", 1, 121.0), end("r"),
    )


def test_statuses_scores_baseline_and_speedup(tmp_path: Path) -> None:
    df = build_table(run_journal(tmp_path), OBJ, BASE).set_index("trial_id")
    assert df.loc["b", "baseline"] and not df.loc["ll", "baseline"]
    assert (df.loc["b", "status"], df.loc["ll", "status"], df.loc["s", "status"],
            df.loc["x", "status"]) == ("ok", "ok", "stopped", "failed")
    assert df.loc["r", "status"] == "stopped"  # one round of two: not a full launch
    assert df.loc["ll", "score"] == 122.0 and df.loc["ll", "speedup"] == 122.0 / 101.0
    assert df.loc["x", "failure_kind"] == "graph_capture" and math.isnan(df.loc["x", "score"])
    assert df.loc["b", "nccl_nranks"] == 2  # per-trial columns keep their last value
    assert df.loc["ll", "NCCL_PROTO"] == "LL" and df.loc["b", "NCCL_PROTO"] == "default"


def test_best_row_takes_only_complete_trials_and_search_rows_drop_confirm(tmp_path: Path
                                                                        ) -> None:
    df = build_table(run_journal(tmp_path), OBJ, BASE)
    assert best_row(df, OBJ)["trial_id"] == "ll"  # type: ignore[index]
    assert best_row(df, Objective("tok_s", "min", 2))["trial_id"] == "b"  # type: ignore[index]
    assert "r" not in set(search_rows(df)["trial_id"])
    assert configs(tmp_path)["s"] == {"NCCL_PROTO": "Simple"}


def test_a_trial_without_an_end_is_running_or_interrupted(tmp_path: Path) -> None:
    journal(tmp_path, start("b", 0, BASE), result("b", 1, 100.0))
    assert build_table(tmp_path, OBJ, BASE, running=True)["status"].tolist() == ["running"]
    assert build_table(tmp_path, OBJ, BASE)["status"].tolist() == ["interrupted"]


def test_a_line_cut_by_a_crash_is_skipped(tmp_path: Path) -> None:
    journal(tmp_path, start("b", 0, BASE), result("b", 1, 100.0))
    with open(tmp_path / JOURNAL, "a") as f:
        f.write('{"event": "result", "trial_id": "b", "ro')
    assert build_table(tmp_path, OBJ, BASE, running=True)["rounds"].tolist() == [1]


def test_summary_lines_name_the_best_and_the_failures(tmp_path: Path) -> None:
    df = build_table(run_journal(tmp_path), OBJ, BASE)
    text = "\n".join(summary_lines(search_rows(df), OBJ, ["NCCL_PROTO"]))
    assert "ll" in text and "PROTO=LL" in text and "1.208x" in text
    assert "(baseline)" in text and "graph_capture 1" in text


def test_reconcile_tells_a_killed_trials_record_how_it_ended(tmp_path: Path) -> None:
    df = build_table(run_journal(tmp_path), OBJ, BASE)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "trial.json").write_text(json.dumps({"status": "running"}))
    reconcile_records(tmp_path, df)
    record = json.loads((tmp_path / "s" / "trial.json").read_text())
    assert record["status"] == "stopped" and "journal" in record["warnings"][0]
