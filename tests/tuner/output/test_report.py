"""`servetune report DIR` on a journal written the way the Recorder writes it (no Ray): a
proxy experiment with completed, stopped and failed trials, confirm launches and no winner.
Each PNG must decode with a plausible size; report.md and report.html must say the decision.
The end-to-end version (a real run, then Chromium) is test_report_integration.py."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from launchers.proxy.launcher import ProxyArgs
from tuner import cli
from tuner.decide import confirm
from tuner.output import confirm_text
from tuner.output.plots import time_split
from tuner.record.files import JOURNAL
from tuner.record.spec_file import load_spec, save_spec
from tuner.spec import ExperimentSpec

BASE: dict[str, Any] = {}  # the space's baseline, filled in by the fixture


def _trial(events: list[dict[str, Any]], tid: str, order: int, config: dict[str, Any],
           scores: list[float], *, phase: str = "search", failure: str | None = None) -> None:
    now = time.time()
    events.append({"time": now, "event": "start", "trial_id": tid, "order": order,
                   "config": {**BASE, **config}, "stage": None, "dir": None, "phase": phase})
    for i, score in enumerate(scores):
        verify = 1000.0 / score
        events.append({"time": now, "event": "result", "trial_id": tid, "round": i + 1,
                       "est_tok_s": score, "verify_ms": verify, "exposed_comm_ms": verify * 0.6,
                       "compute_ms": verify * 0.4, "nccl_nranks": 2})
    end: dict[str, Any] = {"time": now, "event": "end", "trial_id": tid, "status": "ok"}
    if failure:
        end.update(status="failed", failure={"kind": failure, "message": "Capture cuda graph "
                   "failed: NCCL error", "hint": "use allreduce:tree", "details": {}})
    events.append(end)


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    out = tmp_path / "exp"
    spec = ExperimentSpec(name="stored", out_dir=out, space="nccl-pcie", rounds=2, confirm=3,
                          confirm_top=1, workload=ProxyArgs(),
                          pins={"NCCL_MIN_NCHANNELS": None, "NCCL_BUFFSIZE": None,
                                "NCCL_P2P_LEVEL": None, "NCCL_NTHREADS": None})
    save_spec(spec)
    from tuner.setup import prepare

    BASE.update(prepare(spec).space.baseline())
    (out / "run.json").write_text(json.dumps({"nodes": 1, "gpus_per_node": [0],
                                              "gpus_per_trial": 0}))
    rng = random.Random(1)
    events: list[dict[str, Any]] = []
    _trial(events, "base", 0, {}, [100.0, 101.0])
    _trial(events, "tree", 1, {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL"}, [104.0, 103.0])
    _trial(events, "slow", 2, {"NCCL_PROTO": "Simple"}, [80.0])  # stopped after one round
    _trial(events, "bad", 3, {"NCCL_ALGO": "allreduce:ring", "NCCL_MAX_NCHANNELS": 2}, [],
           failure="graph_capture")
    _trial(events, "ring", 4, {"NCCL_ALGO": "allreduce:ring", "NCCL_MAX_NCHANNELS": 4},
           [102.0, 102.5])
    order = 5
    for r in range(3):
        for tid, config in (("tree", {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL"}),
                            ("base", {})):
            _trial(events, f"c-{tid}-{r}", order, config,
                   [100.0 + rng.uniform(-3, 5), 100.0 + rng.uniform(-3, 5)], phase="confirm")
            order += 1
    (out / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in events))
    return out


def _check_png(path: Path, min_w: int = 400, min_h: int = 250) -> None:
    with Image.open(path) as im:
        im.load()
        assert im.format == "PNG"
        assert im.width >= min_w and im.height >= min_h, (path.name, im.size)
        extrema = im.convert("L").getextrema()
        assert extrema[0] < 128 < extrema[1], f"{path.name} is blank"


def test_report_renders_a_stored_experiment(stored: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    assert cli.main(["report", str(stored)]) == 0
    printed = capsys.readouterr().out
    assert "decision: tree is the search's best" in printed  # no confirm.json: unconfirmed
    assert "1.030x the baseline" in printed
    for name in ("objective", "knobs", "parallel", "time_split", "pareto"):
        _check_png(stored / "plots" / f"{name}.png")
    assert not (stored / "plots" / "confirm.png").exists()  # no confirm.json, no plot
    page = (stored / "report.html").read_text()
    assert page.count("<img ") == 5 and "data:image/png;base64," in page
    assert "est_tok_s against verify_ms" in page  # the proxy's trade-off: its verify pass
    assert "graph_capture" in page and "not checked against noise" in page
    md = (stored / "best" / "report.md").read_text()
    assert "## Failures by kind" in md and "| graph_capture | 1 | bad |" in md
    assert "## What was searched" in md and "NCCL_ALGO" in md


def test_report_with_a_confirm_stage_that_found_no_winner(stored: Path) -> None:
    df_ids = {"top 1": [f"c-tree-{r}" for r in range(3)], "baseline": [f"c-base-{r}" for r in
                                                                        range(3)]}
    from tuner.output.results import build_table
    from tuner.setup import prepare

    setup = prepare(load_spec(stored))
    df = build_table(stored, setup.objective, setup.space.baseline())
    assert set(df["phase"]) == {"search", "confirm"}
    cands = [confirm.Candidate("baseline", setup.space.baseline(), "base", 100.5),
             confirm.Candidate("top 1", {**BASE, "NCCL_ALGO": "allreduce:tree",
                                         "NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": 0},
                               "tree", 103.5)]
    entries = [confirm.summarize(c, df_ids[c.label], df) for c in cands]
    decision = confirm.attach(confirm.decide_confirmed(entries, "est_tok_s", "max", 3), cands)
    assert decision.kind == "default"
    assert (decision.config, decision.source_trial) == (setup.space.baseline(), "base")
    confirm_text.write(stored, {"metric": "est_tok_s", "mode": "max", "repeats": 3,
                                "entries": entries, "decision": decision.to_json()})
    assert cli.main(["report", str(stored)]) == 0
    _check_png(stored / "plots" / "confirm.png", min_h=200)
    page = (stored / "report.html").read_text()
    assert "No configuration beat the baseline beyond launch-to-launch noise" in page
    assert 'class="decision default"' in page


def test_time_split_draws_compute_vs_allreduce_for_the_proxy(stored: Path, tmp_path: Path
                                                             ) -> None:
    from tuner.output.results import build_table
    from tuner.setup import prepare

    setup = prepare(load_spec(stored))
    df = build_table(stored, setup.objective, setup.space.baseline())
    assert time_split(df, "est_tok_s", "max", tmp_path / "split.png")
    _check_png(tmp_path / "split.png", min_h=150)
    no_split = df.drop(columns=["exposed_comm_ms", "compute_ms"])
    assert not time_split(no_split, "est_tok_s", "max", tmp_path / "none.png")


def test_report_of_a_folder_without_trials_is_bad_input(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    save_spec(ExperimentSpec(name="empty", out_dir=tmp_path / "e", workload=ProxyArgs()))
    assert cli.main(["report", str(tmp_path / "e")]) == 2
    assert "no trial has been recorded yet" in capsys.readouterr().err


def test_report_says_what_was_ruled_out_and_on_what_evidence(stored: Path) -> None:
    from tuner.search.memory import FailureMemory

    memory = FailureMemory(BASE)
    memory.record(BASE, "base", None)
    memory.record({**BASE, "NCCL_MAX_NCHANNELS": 2}, "bad2", "graph_capture")
    (stored / "ruled_out.json").write_text(json.dumps(memory.evidence()))
    assert cli.main(["report", str(stored)]) == 0
    md = (stored / "best" / "report.md").read_text()
    assert "### Ruled out, and on what evidence" in md
    assert ("| NCCL_MAX_NCHANNELS=2 | graph_capture | bad2 | the same configuration with "
            "another NCCL_MAX_NCHANNELS ran in base |") in md
    assert "Ruled out, and on what evidence" in (stored / "report.html").read_text()
