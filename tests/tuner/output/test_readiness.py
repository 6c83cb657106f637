"""Which weights each trial loaded, its time to ready, and the campaign's wall time with what
random weights saved, read from a journal written the way the Recorder writes it (no Ray)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from launchers.sglang.launcher import SGLangArgs
from search_spaces.knobs import DUMMY, WEIGHTS
from tuner.output import readiness, report
from tuner.output.results import build_table, configs, summary_lines
from tuner.record.files import JOURNAL
from tuner.setup import prepare
from tuner.spec import ExperimentSpec, Objective
from tuner.weights import LIMIT

OBJECTIVE = Objective("verify_ms", "min", 1)
BASE = {"NCCL_ALGO": None, "NCCL_MAX_NCHANNELS": None}


def _journal(out: Path, trials: list[tuple[str, str, str | None, dict[str, Any], float, float,
                                           float]]) -> None:
    """(trial, phase, weights, config, launched at, load s, verify ms) per trial; each trial
    takes 10 s of wall time from its launch."""
    events = []
    for order, (tid, phase, weights, config, at, load, verify) in enumerate(trials):
        full = {**BASE, **config, **({} if weights == "-" else {WEIGHTS: weights})}
        events.append({"time": at, "event": "start", "trial_id": tid, "order": order,
                       "config": full, "stage": None if phase == "confirm" else "s",
                       "phase": phase})
        events.append({"time": at + 9, "event": "result", "trial_id": tid, "round": 1,
                       "verify_ms": verify, "ready_s": load + 2.0, "startup_weights_s": load,
                       "startup_graphs_s": 1.0})
        events.append({"time": at + 10, "event": "end", "trial_id": tid, "status": "ok"})
    out.mkdir(parents=True, exist_ok=True)
    (out / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in events))


TRIALS = [
    ("base", "search", DUMMY, {}, 1000.0, 5.0, 30.0),
    ("tree", "search", DUMMY, {"NCCL_ALGO": "allreduce:tree"}, 1010.0, 5.2, 20.0),
    ("four", "search", DUMMY, {"NCCL_MAX_NCHANNELS": 4}, 1020.0, 4.8, 25.0),
    ("spec", "search", None, {"NCCL_ALGO": "allreduce:tree"}, 1030.0, 60.0, 20.5),
    ("c1", "confirm", "-", {"NCCL_ALGO": "allreduce:tree"}, 1040.0, 62.0, 20.2),
    ("c2", "confirm", "-", {}, 1050.0, 58.0, 30.1),
]


def test_the_weights_column_and_the_baseline_on_random_weights(tmp_path: Path) -> None:
    _journal(tmp_path, TRIALS)
    df = build_table(tmp_path, OBJECTIVE, BASE)
    assert list(df[WEIGHTS]) == [DUMMY, DUMMY, DUMMY, "real", "real", "real"]
    assert list(df["baseline"]) == [True, False, False, False, False, True]
    assert all(WEIGHTS not in c for c in configs(tmp_path).values())
    assert configs(tmp_path)["tree"] == {"NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": None}
    lines = summary_lines(df, OBJECTIVE, list(BASE))
    assert any(line.startswith("tree ") and line.endswith("[dummy weights]") for line in lines)


def test_no_column_when_no_trial_says_which_weights_it_loaded(tmp_path: Path) -> None:
    _journal(tmp_path, [(t, p, "-", c, at, load, v) for t, p, _, c, at, load, v in TRIALS])
    assert WEIGHTS not in build_table(tmp_path, OBJECTIVE, BASE)


def test_the_campaign_and_what_random_weights_saved(tmp_path: Path) -> None:
    _journal(tmp_path, TRIALS)
    df = build_table(tmp_path, OBJECTIVE, BASE)
    campaign = readiness.campaign(tmp_path, df)
    assert campaign.wall_s == 60.0 and campaign.trials == 6 and campaign.dummy == 3
    assert campaign.real_load_s == 60.0 and campaign.dummy_load_s == 5.0
    assert campaign.saved_s == pytest.approx((60 - 5.0) + (60 - 5.2) + (60 - 4.8))
    assert campaign.saved_share == pytest.approx(165.0 / 225.0)
    lines = campaign.lines()
    assert lines[0] == ("campaign: 60.0 s wall time for 6 trials (first launch to last end), "
                        "3 of them on random weights")
    assert lines[1].startswith("saved by random weights: about 2 min 45 s (an estimate: 3 "
                               "trials x (the checkpoint's median load 60.0 s - random "
                               "weights' 5.0 s), measured in this campaign), 73% of the "
                               "3 min 45 s")


def test_no_saving_claimed_without_a_load_to_compare_with(tmp_path: Path) -> None:
    _journal(tmp_path, TRIALS[:3])
    campaign = readiness.campaign(tmp_path, build_table(tmp_path, OBJECTIVE, BASE))
    assert campaign.saved_s is None
    assert "unknown (no trial measured a load of the checkpoint's weights" in campaign.lines()[1]


def test_the_table_groups_by_stage_and_weights_and_the_plot_draws(tmp_path: Path) -> None:
    _journal(tmp_path, TRIALS)
    df = build_table(tmp_path, OBJECTIVE, BASE)
    table = readiness.table(df)
    assert table[1] == ["search", "s", DUMMY, "3", "7.0 s", "5.0 s", "1.0 s"]
    assert table[2] == ["search", "s", "real", "1", "62.0 s", "60.0 s", "1.0 s"]
    assert table[3] == ["confirm", "-", "real", "2", "62.0 s", "60.0 s", "1.0 s"]
    path = tmp_path / "plots" / "startup.png"
    assert readiness.plot(df, path)
    with Image.open(path) as image:
        assert image.size[0] > 400 and image.size[1] > 200


def test_the_report_says_which_trials_ran_on_random_weights(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    spec = ExperimentSpec(name="r", out_dir=tmp_path / "out", search="staged",
                          metric="verify_ms", mode="min", rounds=1,
                          workload=SGLangArgs(model=str(model), speculative_algorithm="EAGLE3"))
    setup = prepare(spec)
    trials = [(t, p, w, {**setup.space.baseline(), **c}, at, load, v)
              for t, p, w, c, at, load, v in TRIALS]
    _journal(spec.out_dir, trials)
    df = build_table(spec.out_dir, setup.objective, setup.space.baseline())
    text = report.markdown(report.facts(setup, df, None))
    assert "## Time to ready" in text and "- campaign: 60.0 s wall time" in text
    assert f"random weights: {LIMIT}" in text
    assert "| weights | random (--load-format dummy) for baseline, allreduce, channels; " \
           "the checkpoint's for speculative, confirm (--weights auto) |" in text
    assert "| tree | ok | 20 | 1.500x | 20 | ALGO=allreduce:tree [dummy weights] |" in text
    assert "| spec | ok | 20.5 | 1.463x | 20.5 | ALGO=allreduce:tree |" in text
