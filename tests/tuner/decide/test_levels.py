"""Decisions per concurrency level and within limits, from a journal written the way the
Recorder writes it (no Ray): which trials are outside the limits, the candidates the confirm
stage takes (each level's best too), each level's winner, whether one config wins them all,
and the confirm stage's rule when the default itself breaks a limit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tuner.decide import levels
from tuner.decide.confirm import candidates, decide_confirmed, summarize
from tuner.limits import Limit
from tuner.output.results import build_table, configs, summary_lines
from tuner.spec import Objective
from tuner.stats import interval

LIMIT = Limit(metric="p99_itl_ms", op="<=", bound=30)
OBJ = Objective("output_throughput", "max", 2, (LIMIT,), (1, 4), 4)
BASE = {"NCCL_ALGO": None}
# trial -> (config, tok/s at 1, tok/s at 4, p99 ITL at 1, p99 ITL at 4)
TRIALS = {"base": (BASE, 100.0, 300.0, 10.0, 20.0),
          "a": ({"NCCL_ALGO": "a"}, 130.0, 310.0, 12.0, 25.0),   # the best at 1
          "b": ({"NCCL_ALGO": "b"}, 110.0, 400.0, 11.0, 35.0),   # the fastest at 4, ITL too high
          "c": ({"NCCL_ALGO": "c"}, 105.0, 350.0, 11.0, 28.0)}   # the best at 4 within the limit


def _write(out: Path, trials: dict[str, tuple[Any, ...]], phase: str = "search",
           start: int = 0) -> None:
    events = []
    for order, (tid, (config, c1, c4, itl1, itl4)) in enumerate(trials.items(), start):
        events.append({"event": "start", "trial_id": tid, "order": order, "config": config,
                       "phase": phase})
        for r in (1, 2):
            events.append({"event": "result", "trial_id": tid, "round": r,
                           "output_throughput": c4, "output_throughput_c1": c1,
                           "output_throughput_c4": c4, "p99_itl_ms": itl4,
                           "p99_itl_ms_c1": itl1, "p99_itl_ms_c4": itl4})
        events.append({"event": "end", "trial_id": tid, "status": "ok"})
    with open(out / "results.jsonl", "a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in events))


@pytest.fixture
def out(tmp_path: Path) -> Path:
    _write(tmp_path, TRIALS)
    return tmp_path


def test_the_table_marks_trials_outside_the_limits_per_level(out: Path) -> None:
    df = build_table(out, OBJ, BASE).set_index("trial_id")
    assert not df.loc["b", "within_limits"] and df.loc["b", "within_limits_c1"]
    assert df.loc["b", "limit_breaks"] == "p99_itl_ms 35 breaks <=30"
    assert df.loc["b", "limit_breaks_c4"] == "p99_itl_ms_c4 35 breaks <=30"
    assert df["within_limits"].drop("b").all()
    lines = summary_lines(df.reset_index(), OBJ, ["NCCL_ALGO"])
    assert "limits: p99_itl_ms<=30; 1 trial(s) outside them, never chosen" in lines
    assert "  b: p99_itl_ms 35 breaks <=30" in lines
    assert not any(line.startswith("b ") for line in lines)  # not among the best


def test_candidates_leave_out_the_infeasible_and_add_each_levels_best(out: Path) -> None:
    df = build_table(out, OBJ, BASE)
    cands = candidates(df, configs(out), BASE, "max", top=1, objective=OBJ)
    assert [(c.label, c.source_trial) for c in cands] == [
        ("baseline", "base"), ("top 1", "c"), ("best c1", "a")]


def test_each_level_gets_its_own_winner(out: Path) -> None:
    df = build_table(out, OBJ, BASE)
    cands = candidates(df, configs(out), BASE, "max", top=3, objective=OBJ)
    per = levels.per_level(OBJ, df, cands, None, repeats=0)
    got = {p["level"]: (p["decision"]["kind"], p["decision"]["source_trial"]) for p in per}
    assert got == {1: ("unconfirmed", "a"), 4: ("unconfirmed", "c")}
    assert per[0]["metric"] == "output_throughput_c1"
    verdict = levels.same_winner(per, 4)
    assert verdict["same_config"] is False
    assert "c1: top 2; c4: top 1" in verdict["same_config_text"]
    assert "--decide-at 4" in verdict["same_config_text"]
    unlimited = Objective("output_throughput", "max", 2, (), (1, 4), 4)
    df = build_table(out, unlimited, BASE)
    cands = candidates(df, configs(out), BASE, "max", top=3, objective=unlimited)
    per = levels.per_level(unlimited, df, cands, None, repeats=0)
    assert per[1]["decision"]["source_trial"] == "b"  # without the limit, b wins at 4


def test_one_config_winning_everywhere_is_said(tmp_path: Path) -> None:
    _write(tmp_path, {"base": TRIALS["base"], "a": ({"NCCL_ALGO": "a"}, 130.0, 330.0, 9, 19)})
    df = build_table(tmp_path, OBJ, BASE)
    cands = candidates(df, configs(tmp_path), BASE, "max", top=3, objective=OBJ)
    per = levels.per_level(OBJ, df, cands, None, repeats=0)
    verdict = levels.same_winner(per, 4)
    assert verdict == {"same_config": True, "same_config_text": "one configuration (top 1) "
                       "wins at every concurrency level (1, 4)"}


def test_a_default_that_breaks_the_limit_loses_to_any_config_within_it(tmp_path: Path) -> None:
    _write(tmp_path, {"base": (BASE, 100.0, 300.0, 10.0, 40.0),
                      "slow": ({"NCCL_ALGO": "s"}, 90.0, 250.0, 10.0, 25.0)})
    df = build_table(tmp_path, OBJ, BASE)
    cands = candidates(df, configs(tmp_path), BASE, "max", top=3, objective=OBJ)
    decision = levels.unconfirmed_at(df, cands, None, OBJ, repeats=0)
    assert (decision.kind, decision.source_trial) == ("unconfirmed", "slow")
    assert "which the default breaks (p99_itl_ms 40 breaks <=30)" in decision.text
    _write(tmp_path, {"worse": ({"NCCL_ALGO": "w"}, 1.0, 1.0, 50.0, 50.0)}, start=2)
    df = build_table(tmp_path, OBJ, BASE)
    only_base = candidates(df[df["trial_id"] != "slow"], configs(tmp_path), BASE, "max", 3, OBJ)
    assert levels.unconfirmed_at(df, only_base, None, OBJ, 0).kind == "none"


def _entry(label: str, scores: list[float], itl: list[float]) -> dict[str, Any]:
    ivs = interval(itl)
    reason = LIMIT.check_interval(ivs)
    return {"label": label, "source_trial": f"s-{label}", "failed": [], "scores": scores,
            "objective": interval(scores).to_json(), "limits": {"p99_itl_ms": ivs.to_json()},
            "limit_breaks": [reason] if reason else []}


def test_the_confirm_stage_holds_the_limit_against_the_intervals() -> None:
    base = _entry("baseline", [100, 101, 99], [20, 21, 20])
    fast = _entry("top 1", [150, 151, 149], [29, 33, 31])  # clears the baseline, not the limit
    kept = _entry("top 2", [120, 121, 119], [25, 26, 25])
    decision = decide_confirmed([base, fast, kept], "output_throughput", "max", 3)
    assert (decision.kind, decision.label) == ("confirmed", "top 2")
    decision = decide_confirmed([base, fast], "output_throughput", "max", 3)
    assert decision.kind == "default" and "top 1 not shown within the limits" in decision.text
    broken = _entry("baseline", [100, 101, 99], [35, 36, 35])
    slower = _entry("top 2", [90, 91, 89], [25, 26, 25])
    decision = decide_confirmed([broken, fast, slower], "output_throughput", "max", 3)
    assert (decision.kind, decision.label) == ("confirmed", "top 2")
    assert "keeps the limits and the default does not" in decision.text
    assert decide_confirmed([broken, fast], "output_throughput", "max", 3).kind == "none"


def test_summarize_holds_each_level_to_its_own_limit(out: Path) -> None:
    _write(out, {"r1": TRIALS["b"], "r2": TRIALS["b"]}, "confirm", 4)
    df = build_table(out, OBJ, BASE)
    cands = candidates(df, configs(out), BASE, "max", top=3, objective=OBJ)
    b = next(c for c in cands if c.source_trial == "c")  # any candidate: the ids decide
    entry = summarize(b, ["r1", "r2"], df, OBJ)
    assert entry["limit_breaks"] == ["p99_itl_ms 35 ± 0 (n=2) not within <=30"]
    assert entry["levels"]["1"]["limit_breaks"] == []
    assert entry["levels"]["4"]["objective"]["mean"] == 400.0
    at1 = levels.entries_at([entry], 1, OBJ)[0]
    assert at1["objective"]["mean"] == 110.0 and at1["label"] == b.label
