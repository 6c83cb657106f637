"""An interrupted confirm stage, read back from its journal's rows: the report says what it
had found by the stage's own rule instead of "no confirm stage ran"."""

from tuner.decide.confirm import open_stage
from tuner.decide.sequential import Plan, compare
from tuner.record.rows import ResultRow

BASE = {"--speculative-num-steps": 5, "--speculative-eagle-topk": 4}
FAST = {"--speculative-num-steps": 1, "--speculative-eagle-topk": 1}


def _rows() -> tuple[list[ResultRow], dict[str, dict[str, int]]]:
    rows, settings = [], {}
    launches = [(BASE, 229.8), (FAST, 228.9), (FAST, 213.7), (BASE, 180.4), (BASE, 175.0),
                (FAST, 231.4)]
    for i, (config, score) in enumerate(launches):
        tid = f"c{i}"
        rows.append(ResultRow(trial_id=tid, phase="confirm", baseline=config is BASE,
                              score=score, rounds=2))
        settings[tid] = dict(config)
    # Not launches of the stage: a search trial, a launch cut short, the speculative reference.
    rows.append(ResultRow(trial_id="s", score=999.0, baseline=True))
    rows.append(ResultRow(trial_id="r", phase="confirm", status="interrupted"))
    rows.append(ResultRow(trial_id="v", phase="confirm", variant="no_speculative", score=500.0))
    settings.update(s=dict(BASE), r=dict(FAST), v={})
    return rows, settings


def test_the_stage_so_far_is_each_launch_mean_and_the_rule_s_comparison() -> None:
    rows, settings = _rows()
    lines = open_stage(rows, settings, "max", Plan(cap=6))
    assert lines[0].startswith("confirm stage interrupted after 6 launches")
    assert "baseline 229.8, 180.4, 175" in lines[0]
    expected = compare([228.9, 213.7, 231.4], [229.8, 180.4, 175.0], "max", Plan(cap=6))
    assert expected.verdict == "open"
    assert lines[1:] == [f"  speculative-eagle-topk=1 speculative-num-steps=1: 228.9, 213.7, "
                         f"231.4; {expected.text()}"]


def test_no_confirm_launch_in_the_journal_says_nothing() -> None:
    rows, settings = _rows()
    search_only = [r for r in rows if r.phase == "search"]
    assert open_stage(search_only, settings, "max", Plan(cap=6)) == []
