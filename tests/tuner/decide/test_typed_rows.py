"""decide/ on typed rows, no files and no pandas: the candidates, a candidate's confirm
launches, the unconfirmed decision and the decision per level, from ResultRow alone."""

from __future__ import annotations

from tuner.decide import levels
from tuner.decide.candidates import candidates, search_decision, search_score
from tuner.decide.confirm import served, summarize, unconfirmed
from tuner.record.confirm import DecisionRecord
from tuner.record.rows import ResultRow
from tuner.spec import Objective

OBJ = Objective("tok_s", "max", 2)
LEVELS = Objective("tok_s", "max", 2, levels=(1, 4), decide_at=4)
CONFIGS = {"1e5": {"X": None}, "52e91234": {"X": 1}, "b": {"X": 2}, "c": {"X": 3}}


def _rows() -> list[ResultRow]:
    return [ResultRow(trial_id="1e5", baseline=True, score=100.0, tok_s_c1=10.0,
                      tok_s_c4=100.0),
            ResultRow(trial_id="52e91234", score=150.0, tok_s_c1=9.0, tok_s_c4=150.0),
            ResultRow(trial_id="b", score=120.0, tok_s_c1=30.0, tok_s_c4=120.0),
            ResultRow(trial_id="c", score=200.0, status="stopped"),
            ResultRow(trial_id="r1", phase="confirm", score=101.0),
            ResultRow(trial_id="r2", phase="confirm", status="failed",
                      failure_kind="node_lost")]


def test_candidates_from_typed_rows() -> None:
    cands = candidates(_rows(), CONFIGS, {"X": None}, "max", top=2)
    assert [(c.label, c.source_trial, c.search_score) for c in cands] == [
        ("baseline", "1e5", 100.0), ("top 1", "52e91234", 150.0), ("top 2", "b", 120.0)]
    assert search_score(_rows(), "52e91234") == 150.0 and search_score(_rows(), None) is None
    decision = search_decision(_rows(), CONFIGS, OBJ, "no confirm stage ran")
    assert (decision.kind, decision.source_trial) == ("unconfirmed", "52e91234")


def test_a_candidates_launches_from_typed_rows() -> None:
    cands = candidates(_rows(), CONFIGS, {"X": None}, "max", top=1)
    entry = summarize(cands[0], ["r1", "r2"], _rows(), OBJ, environmental={"node_lost"})
    assert entry["scores"] == [101.0] and entry["failed"] == []
    assert entry["lost"] == [{"trial_id": "r2", "kind": "node_lost"}]


def test_the_unconfirmed_decision_and_each_level() -> None:
    cands = candidates(_rows(), CONFIGS, {"X": None}, "max", top=3, objective=LEVELS)
    assert unconfirmed(_rows(), cands, 0, "max").source_trial == "52e91234"
    per = levels.per_level(LEVELS, _rows(), cands, None, repeats=0)
    assert {d["level"]: d["decision"]["source_trial"] for d in per} == {1: "b", 4: "52e91234"}


def test_served_reads_the_typed_record() -> None:
    from tuner.setup import Setup

    decision = DecisionRecord(kind="confirmed", label="top 1", config={"X": 1})
    setup = object.__new__(Setup)  # served reads the setup only when speculative lost
    assert served(setup, {"decision": decision.dump()})[1] == decision
