"""The confirm stage's statistics and decisions, without Ray: Student-t intervals, which
configs get confirmed, the winner rule on launch means, the speculative verdict."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from tuner.decide.confirm import (
    Candidate,
    candidates,
    decide_confirmed,
    speculative_verdict,
    unconfirmed,
    without_speculative_knobs,
)
from tuner.output.confirm_text import lines
from tuner.record.files import JOURNAL, append_jsonl
from tuner.run.replay import replay, search_state
from tuner.search.fixed import FixedPoints
from tuner.stats import interval

# ---------------------------------------------------------------- what gets confirmed


def _table() -> pd.DataFrame:
    rows = [("t0", "search", True, "ok", 100.0), ("t1", "search", False, "ok", 150.0),
            ("t2", "search", False, "ok", 149.0), ("t3", "search", False, "stopped", 190.0),
            ("t4", "search", False, "failed", None), ("t5", "search", False, "ok", 120.0),
            ("c1", "confirm", False, "ok", 999.0)]
    return pd.DataFrame([{"trial_id": t, "phase": p, "baseline": b, "status": s, "score": v}
                         for t, p, b, s, v in rows])


CONFIGS = {"t0": {"NCCL_ALGO": None}, "t1": {"NCCL_ALGO": "allreduce:tree"},
           "t2": {"NCCL_ALGO": "allreduce:tree"},  # the same config as t1: confirmed once
           "t3": {"NCCL_ALGO": "allreduce:ring"}, "t4": {"NCCL_ALGO": "ring"},
           "t5": {"NCCL_ALGO": "allreduce:ring"}, "c1": {"NCCL_ALGO": "bogus"}}


def test_candidates_are_the_baseline_then_the_best_distinct_completed_configs() -> None:
    cands = candidates(_table(), CONFIGS, {"NCCL_ALGO": None}, "max", top=3)
    assert [(c.label, c.source_trial) for c in cands] == [
        ("baseline", "t0"), ("top 1", "t1"), ("top 2", "t5")]
    assert cands[1].search_score == 150.0
    lowest = candidates(_table(), CONFIGS, {"NCCL_ALGO": None}, "min", top=1)
    assert [c.source_trial for c in lowest] == ["t0", "t5"]


def test_fixed_points_suggests_each_point_once_then_finishes(tmp_path: Path) -> None:
    searcher = FixedPoints([{"a": 1}, {"a": 2}], ["one", "two"])
    assert searcher.suggest("x") == {"a": 1}
    assert searcher.suggest("y") == {"a": 2}
    assert searcher.suggest("z") == FixedPoints.FINISHED
    assert (searcher.label_of("y"), searcher.label_of("z")) == ("two", None)
    for tid, a in (("x", 1), ("y", 2)):  # no pickle: rebuilt from the journal, as on resume
        append_jsonl(tmp_path / JOURNAL, {"event": "start", "trial_id": tid, "config": {"a": a}})
        append_jsonl(tmp_path / JOURNAL, {"event": "end", "trial_id": tid, "status": "ok"})
    again = FixedPoints([{"a": 1}, {"a": 2}], ["one", "two"])
    assert replay(search_state(tmp_path), again) == []
    assert again.assigned == {"x": 0, "y": 1} and again.suggest("w") == FixedPoints.FINISHED


# ---------------------------------------------------------------- the decision


def _entry(label: str, scores: list[float], failed: int = 0) -> dict[str, object]:
    return {"label": label, "source_trial": f"s-{label}", "search_score": None, "config": {},
            "trials": [], "scores": scores, "failed": [{"trial_id": "f", "kind": "oom"}] * failed,
            "objective": interval(scores).to_json(), "verify_ms": interval([]).to_json()}


def test_the_winner_is_the_best_config_shown_better_than_the_baseline() -> None:
    entries = [_entry("baseline", [100, 101, 99]), _entry("top 1", [120, 122, 121]),
               _entry("top 2", [130, 131, 129])]
    decision = decide_confirmed(entries, "output_throughput", "max", 3)
    assert decision.kind == "confirmed" and decision.label == "top 2"
    assert "beyond launch-to-launch noise" in decision.text and "1.300x" in decision.text
    assert "3 launches against 3: better" in decision.text


def test_no_winner_within_noise_says_so_plainly_with_the_ratios() -> None:
    entries = [_entry("baseline", [100, 110, 90]), _entry("top 1", [112, 104, 120])]
    decision = decide_confirmed(entries, "output_throughput", "max", 3, "the cap")
    assert decision.kind == "default" and decision.label == "baseline"
    assert decision.text.startswith("No configuration beat the baseline beyond launch-to-launch")
    assert "top 1: 1.122x [" in decision.text and "stopped at the cap" in decision.text
    assert "Keep the baseline settings" in decision.text


def test_a_config_that_failed_a_launch_of_its_own_is_never_the_winner() -> None:
    entries = [_entry("baseline", [100, 101, 99]), _entry("top 1", [150, 151, 149], failed=1)]
    assert decide_confirmed(entries, "m", "max", 3).kind == "default"


def test_a_baseline_with_too_few_launches_allows_no_claim() -> None:
    entries = [_entry("baseline", [100, 101]), _entry("top 1", [150, 151, 152])]
    decision = decide_confirmed(entries, "m", "max", 3)
    assert decision.kind == "unconfirmed" and "too few" in decision.text


def test_lines_show_the_table_and_the_decision() -> None:
    entries = [_entry("baseline", [100, 101, 99]), _entry("top 1", [130, 131, 129])]
    data = {"metric": "output_throughput", "repeats": 3, "entries": entries,
            "decision": decide_confirmed(entries, "output_throughput", "max", 3).to_json(),
            "launch_spread": 0.0123, "round_spread": 0.004, "stopped": "every candidate decided"}
    text = "\n".join(lines(data))
    assert "baseline" in text and "top 1" in text and "100 ± 2.48 (n=3)" in text
    assert "decision: top 1" in text and "stopped at every candidate decided" in text
    assert "launch to launch 1.2%, within a launch 0.4%" in text


# ---------------------------------------------------------------- speculative decoding


def test_the_field_case_says_speculative_decoding_does_not_pay_off() -> None:
    verdict = speculative_verdict([54.0, 55.0, 53.0], [90.0, 91.0, 89.0],
                                  "output_throughput", "max", 10)
    assert verdict["pays_off"] is False and verdict["without"] == 90.0
    assert "does NOT pay off" in verdict["text"] and "serves without it" in verdict["text"]
    assert "0.60x" in verdict["text"]


def test_the_h200_case_a_2x_gap_is_not_called_no_difference() -> None:
    """The H200: 216.5 with it against 461.8 without, called 'no clear difference' after one
    launch without it. Three launches each decide it, ratio stated."""
    verdict = speculative_verdict([216.5, 190.0, 240.0], [461.8, 420.0, 480.0],
                                  "output_throughput", "max", 10)
    assert verdict["pays_off"] is False and "0.47x" in verdict["text"]


def test_speculative_verdicts_pay_off_unclear_and_failed() -> None:
    assert speculative_verdict([150, 151, 149], [100, 101, 99], "m", "max", 10)["pays_off"]
    unclear = speculative_verdict([90, 110, 100], [100, 95, 105], "m", "max", 10)
    assert unclear["pays_off"] is None and "no difference" in unclear["text"]
    assert "1.00x" in unclear["text"]
    failed = speculative_verdict([150, 151], [], "m", "max", 10, reference_failed="oom")
    assert failed["pays_off"] is None and "(oom)" in failed["text"]
    single = speculative_verdict([80.0], [100.0], "m", "max", 1)
    assert single["pays_off"] is None and "0.80x" in single["text"]


def test_reference_args_turn_speculative_decoding_off_only_where_it_is_on() -> None:
    on = SGLangArgs(model="m", speculative_algorithm="EAGLE3", draft_model="d",
                    server_args=["--speculative-num-steps", "3", "--mem-fraction-static", "0.8",
                                 "--speculative-eagle-topk=1"])
    off = on.without_speculative()
    assert off is not None and off.speculative_algorithm is None and off.draft_model is None
    assert off.server_args == ["--mem-fraction-static", "0.8"]
    assert off.model == "m"
    assert SGLangArgs(model="m").without_speculative() is None
    assert ProxyArgs().without_speculative() is None
    flag_only = SGLangArgs(model="m", server_args=["--speculative-algorithm", "NGRAM"])
    assert flag_only.without_speculative().server_args == []  # type: ignore[union-attr]


def test_the_reference_config_keeps_communication_and_drops_speculative_knobs() -> None:
    config = {"NCCL_ALGO": "allreduce:tree", "--speculative-num-steps": 3,
              "--speculative-num-draft-tokens": 4}
    assert without_speculative_knobs(config) == {
        "NCCL_ALGO": "allreduce:tree", "--speculative-num-steps": None,
        "--speculative-num-draft-tokens": None}


def test_unconfirmed_top_that_lost_to_the_baseline_keeps_the_default() -> None:
    df = pd.DataFrame({"trial_id": ["b", "t"], "baseline": [True, False], "status": ["ok", "ok"],
                       "phase": ["search", "search"], "score": [100.0, 87.4]})
    cands = [Candidate("baseline", {}, "b", 100.0), Candidate("top 1", {"X": 1}, "t", 87.4)]
    decision = unconfirmed(df, cands, 0, "max")
    assert decision.kind == "default"
    assert unconfirmed(df, cands, 0, "min").kind == "unconfirmed"


def test_where_speculative_decoding_loses_the_decision_serves_without_it(tmp_path: Path) -> None:
    from tuner.decide.confirm import served
    from tuner.setup import prepare
    from tuner.spec import ExperimentSpec

    args = SGLangArgs(model="m", speculative_algorithm="EAGLE3", draft_model="d",
                      server_args=["--speculative-num-steps", "3"])
    setup = prepare(ExperimentSpec(name="x", out_dir=tmp_path, space="nccl-pcie", workload=args))
    decision = {"kind": "confirmed", "label": "top 1", "text": "top 1 beats the baseline",
                "config": {"NCCL_ALGO": "Tree", "--speculative-num-steps": 3}}
    lost = {"decision": decision, "speculative": {"pays_off": False}}
    serving, decided = served(setup, lost)
    assert serving.spec.workload.speculative_algorithm is None  # type: ignore[union-attr]
    assert decided.config == {"NCCL_ALGO": "Tree", "--speculative-num-steps": None}
    assert decided.label == "top 1 without speculative decoding"
    assert "serve without it" in decided.text and decided.speculative is False
    for pays_off in (True, None):
        kept = served(setup, {"decision": decision, "speculative": {"pays_off": pays_off}})
        assert kept == (setup, decision)
