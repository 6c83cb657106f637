"""`servetune plan` prints what `run` launches: the same search stack (issue 13), so with the
same flags and seed the configurations it prints are the ones the run's journal records, in
order, for Optuna (its first proposals do not depend on results) and for a staged search
(the preset without stages: one stage, whose proposals come before any winner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.runs import Experiment, ray_tmpdir

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("search", ["optuna", "staged"])
def test_plan_prints_what_run_launches(search: str, tmp_path: Path) -> None:
    flags = ("--space", "nccl-pcie", "--search", search, "--samples", "4", "--rounds", "1",
             "--scheduler", "fifo", "--no-dashboard", "--seed", "3")
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp, name=f"plan-{search}")
        plan = exp.run(["plan", *exp.args(*flags), "--json"], timeout=120)
        assert plan.returncode == 0, str(plan)
        planned = [json.loads(line)["config"] for line in plan.stdout.splitlines()
                   if line.startswith("{")]
        assert not exp.out.exists()  # plan writes nothing
        ran = exp.run(["run", *exp.args(*flags)], timeout=240)
        assert ran.returncode == 0, str(ran)
        launched = [e["config"] for e in exp.journal() if e["event"] == "start"]
        assert exp.cleanup() == []
    assert len(planned) == 4 and planned == launched  # every sample launched, in order
