"""Paths mean what they mean in the user's shell (issue 16, item 1): servetune started in a
folder of the user's, with a relative wrapper and a relative script as the server command
(``./wrap.sh serve.py``), or a module importable only from that folder (``./wrap.sh -m
pkg.server``), a relative model, space and output folder. Trials run in Ray's own folders:
every one of these paths must still find its file, and the server must start in the user's
folder. plan.json records the resolved command."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchers.process import kill_processes, marked_processes
from simulator.runs import FAST, ROOT, env_for, owned_tuner, ray_tmpdir
from tuner.record.spec_file import load_spec

pytestmark = pytest.mark.integration

RUN_STAND_IN = ("import runpy\n"
                "runpy.run_module('simulator.sglang_server', run_name='__main__', "
                "alter_sys=True)\n")
SPACE = "name: two\nknobs:\n  NCCL_ALGO: [allreduce:ring]\n"


def user_folder(root: Path) -> Path:
    """A folder with the user's own wrapper, script, package, model and space."""
    home = root / "home"
    (home / "pkg").mkdir(parents=True)
    (home / "model").mkdir()
    wrap = home / "wrap.sh"
    wrap.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrap.chmod(wrap.stat().st_mode | stat.S_IXUSR)
    (home / "serve.py").write_text(RUN_STAND_IN)
    (home / "pkg" / "__init__.py").write_text("")
    (home / "pkg" / "server.py").write_text(RUN_STAND_IN)
    (home / "space.yaml").write_text(SPACE)
    return home


def servetune_in(home: Path, ray_tmp: Path, server_cmd: str, out: str) -> subprocess.CompletedProcess[str]:
    argv = owned_tuner([
        "run", "--model", "model", "--server-cmd", server_cmd, "--space", "space.yaml",
        "--search", "grid", "--samples", "2", "--rounds", "1", "--confirm", "0", "--num-gpus",
        "8", "--no-dashboard", "--no-preflight", "--input-len", "16", "--output-len", "16",
        "--requests-per-round", "2", "--stop-grace", "1", "--ready-timeout", "90", "--out", out])
    env = env_for(ray_tmp)
    assert str(home) not in env["PYTHONPATH"].split(os.pathsep)  # pkg: only from the folder
    return subprocess.run(argv, cwd=home, env=env, capture_output=True, text=True, timeout=200,
                          stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("server_cmd", "resolved"), [
    ("./wrap.sh serve.py", ["{home}/wrap.sh", "{home}/serve.py"]),
    ("./wrap.sh -m pkg.server", ["{home}/wrap.sh", "-m", "pkg.server"]),
])
def test_relative_paths_work_inside_trials(tmp_path: Path, server_cmd: str,
                                           resolved: list[str]) -> None:
    home = user_folder(tmp_path)
    assert not (ROOT / "pkg").exists() and not (ROOT / "serve.py").exists()
    began = time.time()
    with ray_tmpdir() as ray_tmp:
        try:
            done = servetune_in(home, ray_tmp, f"{server_cmd} {shlex.join(FAST)}", "out")
        finally:
            out = home / "out"
            if (out / "servetune.json").exists():
                left = marked_processes(f"{load_spec(out).marker_id}/")
                kill_processes([m.pid for m in left], grace=1.0)
                assert not left, left
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    out = home / "out"  # --out relative to the folder servetune was started in
    spec = json.loads((out / "servetune.json").read_text())
    assert spec["workload"]["workdir"] == str(home)
    assert spec["workload"]["model"] == str(home / "model")
    assert spec["space"] == str(home / "space.yaml")
    journal = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ends = [e for e in journal if e["event"] == "end"]
    assert len(ends) == 2 and {e["status"] for e in ends} == {"ok"}, ends
    for trial in {e["trial_id"] for e in ends}:
        plan = json.loads((out / trial / "plan.json").read_text())
        want = [w.format(home=home) for w in resolved]
        assert plan["argv"][:len(want)] == want, plan["argv"]
        assert plan["argv"][plan["argv"].index("--model-path") + 1] == str(home / "model")
        log = (out / trial / "server.log").read_text()
        assert "can't open file" not in log and "No module named" not in log
    assert time.time() - began < 200
