"""The confirm stage end to end: `servetune run` as a subprocess, real Ray, the stand-in server.

- the shared run (conftest ``confirmed_run``): the stand-in's NCCL optimum is far from the
  default, so the confirmed winner must clear the baseline, and speculative decoding pays
  off there (the stand-in's verify pass is cheap enough);
- a run where every config is equally fast (the stand-in told the verify and draft times):
  no config may be declared better than the default; the same run has no GPUs: no two
  launches overlap, the confirm stage's neither;
- ``--confirm 0`` (the spine run, tests/integration/test_run_integration.py): no confirm
  launches, no reference run.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from simulator.runs import Experiment, ray_tmpdir, stand_in
from tests.integration.conftest import CONFIRM_CAP, Run
from tuner.decide.sequential import MIN_LAUNCHES

# the shared confirm run takes ~100 s on a quiet box and minutes on a loaded one
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _confirm(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "confirm.json").read_text())
    return data


def _starts(exp: Experiment) -> list[dict[str, Any]]:
    return [e for e in exp.journal() if e.get("event") == "start"]


def test_run_confirms_the_top_configs_against_the_baseline(confirmed_run: Run) -> None:
    exp, result = confirmed_run.exp, confirmed_run.result
    assert result.returncode == 0, result
    data = _confirm(exp.out)
    assert (data["cap"], data["top"], data["confidence"]) == (CONFIRM_CAP, 2, 0.95)
    labels = [e["label"] for e in data["entries"]]
    assert labels == ["baseline", "top 1", "top 2"]
    confirm_ids = {e["trial_id"] for e in _starts(exp) if e.get("phase") == "confirm"
                   and not e.get("variant")}
    assert sum(len(e["trials"]) for e in data["entries"]) == len(confirm_ids)
    for entry in data["entries"]:
        n = len(entry["trials"])
        assert MIN_LAUNCHES <= n <= CONFIRM_CAP and set(entry["trials"]) <= confirm_ids
        assert entry["objective"]["n"] == n and entry["objective"]["low"] is not None
        assert entry["verify_ms"]["n"] == n and entry["verify_ms"]["mean"] > 0
        assert entry["failed"] == []
    # Rounds alternate the baseline with the open candidates: a stage that ends inside a
    # round leaves the sides at most one launch apart.
    launches = [len(e["trials"]) for e in data["entries"]]
    assert abs(launches[0] - max(launches[1:])) <= 1, launches
    # Fresh launches: every repeat is its own trial with its own server log.
    for tid in confirm_ids:
        assert (exp.out / tid / "server.log").is_file()
    decision = data["decision"]
    assert decision["kind"] == "confirmed", decision
    assert "beats the baseline beyond launch-to-launch noise" in decision["text"]
    assert data["stopped"] == "every candidate decided" and data["launch_spread"] is not None
    winner = next(e for e in data["entries"] if e["label"] == decision["label"])
    # Separated on the ratio of launch means (the entries' own intervals may overlap).
    comparison = data["comparisons"][decision["label"]]
    assert comparison["verdict"] == "better" and comparison["low"] > 1.0, comparison
    assert comparison["n"] == len(winner["trials"])
    # The confirm launches of one config ran the search trial's exact config.
    configs = {e["trial_id"]: e["config"] for e in _starts(exp)}
    assert all(configs[t] == configs[winner["source_trial"]] for t in winner["trials"])
    # Interleaved: the first three confirm launches are three different configs.
    order = [e for e in _starts(exp) if e.get("phase") == "confirm" and not e.get("variant")]
    first_round = [json.dumps(e["config"], sort_keys=True) for e in order[:3]]
    assert len(set(first_round)) == 3


def test_speculative_decoding_is_checked_without_it(confirmed_run: Run) -> None:
    exp = confirmed_run.exp
    data = _confirm(exp.out)
    verdict = data["speculative"]
    refs = [e for e in _starts(exp) if e.get("variant") == "no_speculative"]
    assert MIN_LAUNCHES <= len(refs) <= CONFIRM_CAP and {r["phase"] for r in refs} == {"confirm"}
    ref = refs[0]["trial_id"]
    assert verdict["reference_trial"] == ref and verdict["algorithm"] == "EAGLE3"
    plan = json.loads((exp.out / ref / "plan.json").read_text())
    assert "--speculative-algorithm" not in plan["argv"]
    assert "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in plan["env"]
    winner = data["decision"]["source_trial"]
    winner_plan = json.loads((exp.out / winner / "plan.json").read_text())
    nccl = {k: v for k, v in winner_plan["env"].items()
            if k.startswith("NCCL_") and not k.startswith("NCCL_DEBUG")}
    assert {k: plan["env"].get(k) for k in nccl} == nccl  # the same communication settings
    assert verdict["pays_off"] is True and verdict["without"] < verdict["with"]
    assert verdict["reference_trials"] == [r["trial_id"] for r in refs]
    assert verdict["text"].startswith("Speculative decoding pays off here")


def test_the_reference_has_no_verify_or_draft_time(confirmed_run: Run) -> None:
    """Issue 16, item 7, end to end: the speculative-off reference measures throughput, and
    verify ms and draft ms are missing in its results (never 0.0), so the table, the report and
    the verdict compare nothing against a made-up zero."""
    exp = confirmed_run.exp
    refs = {e["trial_id"] for e in _starts(exp) if e.get("variant") == "no_speculative"}
    ref = sorted(refs)[0]
    rounds = [e for e in exp.journal() if e.get("event") == "result" and e["trial_id"] in refs]
    assert rounds and all(e["output_throughput"] > 0 for e in rounds)
    assert all(e.get("verify_ms") is None and e.get("draft_ms") is None for e in rounds), rounds
    row = exp.table().set_index("trial_id").loc[ref]
    for column in ("verify_ms", "draft_ms"):
        assert column not in row or pd.isna(row[column]), row
    record = exp.record(ref)
    assert all(r.get("verify_ms") is None and r.get("draft_ms") is None
               for r in record["rounds"]), record["rounds"]


def test_results_and_progress_show_the_phase(confirmed_run: Run) -> None:
    exp, result = confirmed_run.exp, confirmed_run.result
    table = exp.table()
    data = _confirm(exp.out)
    launched = [len(e["trials"]) for e in data["entries"]]
    refs = len(data["speculative"]["reference_trials"])
    again = len(data["speculative"]["with_trials"])  # while the reference's answer was open
    assert Counter(table["phase"]) == Counter({"search": 4, "confirm": sum(launched) + refs + again})
    assert Counter(table[table["variant"].notna()]["variant"]) == Counter(
        {"no_speculative": refs, "with_speculative": again})
    assert table[table["phase"] == "confirm"]["baseline"].sum() == launched[0]
    out = result.stdout
    header = re.search(r"^trial +phase +status +round +output_throughput +verify_ms +settings$",
                       out, re.MULTILINE)
    assert header, out[-3000:]
    assert re.search(r"^\w{8} +search +done +2/2 +[\d.]+ +[\d.]+ +", out, re.MULTILINE)
    assert re.search(rf"^\w{{8}} +confirm top 1 1/{CONFIRM_CAP} +running +1/2 +[\d.]+ +[\d.]+ +\S+=",
                     out, re.MULTILINE), out[-3000:]
    assert re.search(rf"^\w{{8}} +confirm no speculative \d/{CONFIRM_CAP} +done +2/2 +[\d.]+ +- ",
                     out, re.MULTILINE)
    assert "decision: top " in out and "Speculative decoding pays off here" in out
    assert "TensorBoard: tensorboard --logdir" in out


def test_equal_configs_give_no_winner_and_no_launches_overlap_without_gpus(
        tmp_path: Path) -> None:
    """Every config is as fast as the default: the stage must say so plainly and export the
    default settings.

    The same run has no GPUs (issue 16, item 3): a trial then holds one CPU, and Ray (told of
    4 CPUs here) would run 4 at once; every phase runs one trial per node, the confirm stage
    too. Read from the journal's start and end times."""
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp)
        flat = stand_in("--fake-verify-ms", "20", "--fake-draft-ms", "5")
        args = exp.args("--space", "nccl-pcie", "--samples", "3", "--rounds", "2",
                        "--confirm", "3", "--confirm-top", "1", "--no-dashboard",
                        "--scheduler", "fifo", "--num-cpus", "4", server=flat)
        args[args.index("--num-gpus"):args.index("--num-gpus") + 2] = []
        try:
            result = exp.run(["run", *args], timeout=800)
            assert result.returncode == 0, result
        finally:
            left = exp.cleanup()
        assert not left
    data = _confirm(exp.out)
    assert data["decision"]["kind"] == "default", data["decision"]
    assert "No configuration beat the baseline beyond launch-to-launch noise" in result.stdout
    assert data.get("speculative") is None  # speculative decoding was off: no reference
    best = json.loads((exp.out / "best.json").read_text())
    assert best["decision"] == "default" and best["trial_id"] == data["entries"][0]["source_trial"]
    launch = (exp.out / "best" / "launch.sh").read_text()
    assert "export NCCL_ALGO" not in launch and "unset NCCL_ALGO" in launch
    assert "no rule" in (exp.out / "best" / "nccl-tuner.csv").read_text()

    assert "each trial holds no GPU(s); at most 1 trial(s) at once" in result.stdout
    spans: dict[str, list[float]] = {}
    phase: dict[str, str] = {}
    for e in exp.journal():
        if e.get("event") == "start":
            spans[e["trial_id"]] = [e["time"], float("inf")]
            phase[e["trial_id"]] = e.get("phase", "search")
        elif e.get("event") == "end":
            spans[e["trial_id"]][1] = e["time"]
    # the baseline and each candidate (top 1, and any within the launch spread of it), 3 each
    entries = len(data["entries"])
    assert Counter(phase.values()) == Counter({"search": 3, "confirm": 3 * entries}), phase
    ordered = sorted((start, end, tid) for tid, (start, end) in spans.items())
    for (_, end, a), (start, _, b) in itertools.pairwise(ordered):
        assert end <= start, f"{phase[a]} {a} ran until {end:.3f}, {phase[b]} {b} began at " \
            f"{start:.3f}"
