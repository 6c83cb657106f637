"""One driver per experiment folder (issue 16, item 8): while `servetune run` drives a folder, a
`run --resume` of it (or a fresh `run` into it) exits 2 naming the running driver's pid and
touches nothing; `report` and `plan` still work; the first run finishes with every trial ok."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.runs import Experiment, ray_tmpdir

pytestmark = pytest.mark.integration

TRIALS = 4


def _ended(exp: Experiment) -> int:
    return sum(1 for e in exp.journal() if e.get("event") == "end")


def test_a_second_driver_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp)
        args = exp.args("--space", "nccl-pcie", "--samples", str(TRIALS), "--rounds", "6",
                        "--scheduler", "fifo", "--no-dashboard")
        first = exp.start(["run", *args])
        try:
            first.wait_for(lambda: (exp.out / "results.jsonl").exists() and _ended(exp) >= 1,
                           timeout=150, what="the first trial to end")
            pid = first.popen.pid
            resumed = exp.run(["run", "--resume", str(exp.out)], timeout=60)
            again = exp.run(["run", *args], timeout=60)
            running_then = first.popen.poll() is None
            report = exp.run(["report", str(exp.out)], timeout=90)
            plan = exp.run(["plan", *args], timeout=60)
            result = first.finish(timeout=240)
        finally:
            left = exp.cleanup()
    assert not left, left
    for refused in (resumed, again):
        assert refused.returncode == 2, refused
        lines = refused.stderr.splitlines()
        assert len(lines) == 1 and f"pid {pid}" in lines[0], refused.stderr
        assert "another servetune driver" in lines[0]
    assert running_then, "the first run ended before the second driver was tried"
    assert report.returncode == 0 and "trials:" in report.stdout, report
    assert plan.returncode == 0 and "# baseline" in plan.stdout, plan
    # The first driver was left alone: every trial ran to its end.
    assert result.returncode == 0, result
    table = exp.table()
    assert len(table) == TRIALS and set(table["status"]) == {"ok"}, table.to_string()
    ports = {exp.record(t)["plan"]["port"] for t in exp.trial_ids()}
    assert len(ports) == TRIALS  # a free port per trial
