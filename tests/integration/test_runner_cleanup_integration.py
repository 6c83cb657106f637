"""A run its caller gives up on leaves nothing behind: the test runner or a benchmark stops
the driver as a user does (SIGTERM), kills it if it lingers, and reaps the experiment's
marked processes. A benchmark killed mid-run once left a driver, its Ray (gcs_server,
raylet, workers) and a stand-in server running."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil
import pytest

from simulator.runs import Experiment, ray_tmpdir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _ray_session(ray_tmp: Path) -> list[str]:
    """Processes of the run's private Ray: their command lines name its temp folder."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(p.info["cmdline"] or [])
        if str(ray_tmp) in line:
            found.append(f"{p.info['pid']} {line[:120]}")
    return found


def test_a_run_its_caller_gives_up_on_leaves_nothing(tmp_path: Path) -> None:
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp)
        run = exp.start(["run", *exp.args("--space", "nccl-pcie", "--samples", "6",
                                          "--rounds", "3", "--scheduler", "fifo",
                                          "--no-dashboard")])
        run.wait_for(lambda: (exp.out / "results.jsonl").exists() and any(
            e.get("event") == "start" for e in exp.journal()), 180, "a trial to start")
        exp.stop(run.popen)
        assert run.popen.returncode is not None
        assert exp.leftovers() == []
        assert _ray_session(ray_tmp) == []


def test_a_run_cut_by_its_timeout_leaves_nothing(tmp_path: Path) -> None:
    """Wherever the timeout cuts (Ray starting, a trial running), nothing is left: the verdict
    does not depend on how far a loaded box got."""
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp)
        with pytest.raises(subprocess.TimeoutExpired):
            exp.run(["run", *exp.args("--space", "nccl-pcie", "--samples", "6", "--rounds",
                                      "3", "--scheduler", "fifo", "--no-dashboard")],
                    timeout=15)
        assert exp.leftovers() == []
        assert _ray_session(ray_tmp) == []
