"""A broken environment is not a bad setting (issue 16, item 2): when the baseline's server
cannot even start, `servetune run` stops the search at once, exit code 1, with one paragraph
that names the failure, shows the log's tail and rules nothing out."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from simulator.runs import Experiment, ray_tmpdir

pytestmark = pytest.mark.integration


def test_a_server_that_cannot_start_stops_the_search(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_server.py"
    server = shlex.join([sys.executable, str(missing)])
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp)
        try:
            result = exp.run(["run", *exp.args("--space", "nccl-pcie", "--samples", "6",
                                               "--rounds", "1", "--confirm", "3",
                                               "--no-dashboard", server=server)], timeout=200)
            resumed = exp.run(["run", "--resume", str(exp.out)], timeout=60)
            reported = exp.run(["report", str(exp.out)], timeout=60)
        finally:
            left = exp.cleanup()
    assert not left, left
    assert result.returncode == 1, result
    starts = [e for e in exp.journal() if e.get("event") == "start"]
    assert len(starts) == 1, f"trials launched after the baseline failed: {starts}"
    baseline = starts[0]["trial_id"]
    out = result.stdout
    assert f"The baseline (no overrides, trial {baseline}) failed (crashed:" in out, out[-3000:]
    assert "The environment, not a setting, is broken" in out
    assert "ruled nothing out" in out
    assert "can't open file" in out  # the server log's tail, shown
    assert f"{exp.out / baseline / 'plan.json'}" in out
    # Nothing ruled out, nothing decided, nothing confirmed; what was measured is kept.
    assert not (exp.out / "ruled_out.json").exists()
    assert "ruled out on evidence" not in out
    assert not (exp.out / "best.json").exists() and not (exp.out / "confirm.json").exists()
    verdict = json.loads((exp.out / "broken_environment.json").read_text())
    assert (verdict["reason"], verdict["kind"], verdict["trials"]) == \
        ("baseline", "crashed", [baseline])
    table = exp.table()
    assert list(table["status"]) == ["failed"] and bool(table["baseline"].iloc[0])
    # A resume cannot mend the environment: one line, exit 2, nothing launched.
    assert resumed.returncode == 2, resumed
    assert resumed.stderr.count("\n") == 1 and "broken" in resumed.stderr
    assert len([e for e in exp.journal() if e.get("event") == "start"]) == 1
    # `servetune report` tells the same story from disk.
    assert "The environment, not a setting, is broken" in reported.stdout, reported
