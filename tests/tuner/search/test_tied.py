"""TiedASHA: a trial ASHA would stop goes on while it is within one launch's spread of the
best value reported at its round; beyond it, ASHA's verdict stands. Candidates within the
spread of the search's best reach the confirm stage."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pandas as pd
from ray.tune.schedulers import TrialScheduler

from tuner.decide.confirm import candidates
from tuner.search.tied import TiedASHA


def _scheduler(spread: float) -> TiedASHA:
    s = TiedASHA(spread=spread, time_attr="round", metric_key="m", mode="max", max_t=9,
                 grace_period=1, reduction_factor=3)
    s.set_search_properties("m", "max")
    return s


def _run(s: TiedASHA, values: list[float]) -> list[str]:
    trials = [SimpleNamespace(trial_id=f"t{i}") for i in range(len(values))]
    for t in trials:
        s.on_trial_add(None, t)  # type: ignore[arg-type]
    return [s.on_trial_result(None, t, {"round": 1, "m": v})  # type: ignore[arg-type]
            for t, v in zip(trials, values, strict=True)]


def test_a_trial_within_the_spread_of_the_best_goes_on() -> None:
    values = [100.0, 95.0, 70.0, 99.0]
    plain = _run(_scheduler(0.0), values)
    tied = _run(_scheduler(0.10), values)
    assert plain[1] == TrialScheduler.STOP and plain[2] == TrialScheduler.STOP
    assert tied[1] == TrialScheduler.CONTINUE  # 5% below the best: within one launch's sd
    assert tied[2] == TrialScheduler.STOP  # 30% below: ASHA's verdict stands


def test_min_mode_ties_the_other_way() -> None:
    s = TiedASHA(spread=0.10, time_attr="round", metric_key="m", mode="min", max_t=9,
                 grace_period=1, reduction_factor=3)
    s.set_search_properties("m", "min")
    trials = [SimpleNamespace(trial_id=f"t{i}") for i in range(3)]
    for t in trials:
        s.on_trial_add(None, t)  # type: ignore[arg-type]
    out: list[Any] = [s.on_trial_result(None, t, {"round": 1, "m": v})  # type: ignore[arg-type]
                      for t, v in zip(trials, [10.0, 10.5, 20.0], strict=True)]
    assert out[1] == TrialScheduler.CONTINUE and out[2] == TrialScheduler.STOP


def test_every_config_within_the_spread_of_the_best_reaches_the_confirm_stage() -> None:
    rows = [("b", True, 100.0), ("t1", False, 150.0), ("t2", False, 148.0),
            ("t3", False, 140.0), ("t4", False, 120.0)]
    df = pd.DataFrame([{"trial_id": t, "phase": "search", "baseline": b, "status": "ok",
                        "score": v} for t, b, v in rows])
    configs = {t: {"k": t} for t, _, _ in rows}
    base = {"k": "b"}
    assert [c.source_trial for c in candidates(df, configs, base, "max", 1)] == ["b", "t1"]
    wide = candidates(df, configs, base, "max", 1, spread=0.10)
    assert [c.source_trial for c in wide] == ["b", "t1", "t2"]  # 140 is 7% below: 2 x top caps
    assert [c.source_trial for c in candidates(df, configs, base, "max", 2, spread=0.10)] == \
        ["b", "t1", "t2", "t3"]
