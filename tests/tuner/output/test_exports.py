"""Exports: launch.sh run as is, the dotenv file read back by a shell (nccl-tuner.csv:
test_tuner_csv.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from launchers.base import LaunchPlan
from tuner.output.exports import dotenv_value, write_env, write_launch

# ---------------------------------------------------------------- launch.sh and env

TRICKY = {"NCCL_ALGO": "allreduce:tree;allgather:ring", "NCCL_PROTO": "^LL128",
          "WEIRD": 'a "quoted" $HOME \\ value', "SPACED": "two words"}


def test_launch_sh_runs_as_is(tmp_path: Path) -> None:
    show = "import os, sys; print(repr({k: os.environ.get(k) for k in sys.argv[1:]}))"
    plan = LaunchPlan("sglang", (sys.executable, "-c", show, *TRICKY, "GONE"), TRICKY,
                      unset_env=("GONE",))
    script = write_launch(tmp_path, plan)
    assert os.access(script, os.X_OK)
    env = {**os.environ, "GONE": "set before"}
    out = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=True)
    assert eval(out.stdout) == {**TRICKY, "GONE": None}


def test_env_file_reads_back_in_a_shell(tmp_path: Path) -> None:
    plan = LaunchPlan("sglang", ("true",), TRICKY)
    path = write_env(tmp_path, plan)
    assert dotenv_value("allreduce:tree") == "allreduce:tree"
    show = f"import os; print(repr({{k: os.environ[k] for k in {sorted(TRICKY)!r}}}))"
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; exec "{sys.executable}" -c "$0"',
                          show], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"]})
    assert eval(out.stdout) == TRICKY


def test_a_record_left_running_by_a_killed_worker_takes_the_journals_end(tmp_path: Path) -> None:
    import pandas as pd

    from tuner.output.results import reconcile_records

    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "trial.json").write_text(json.dumps({"status": "running", "warnings": []}))
    (tmp_path / "t2").mkdir()
    (tmp_path / "t2" / "trial.json").write_text(json.dumps({"status": "ok", "warnings": []}))
    reconcile_records(tmp_path, pd.DataFrame({"trial_id": ["t1", "t2"],
                                              "status": ["stopped", "ok"]}))
    first = json.loads((tmp_path / "t1" / "trial.json").read_text())
    assert first["status"] == "stopped" and "journal" in first["warnings"][0]
    assert json.loads((tmp_path / "t2" / "trial.json").read_text())["warnings"] == []
