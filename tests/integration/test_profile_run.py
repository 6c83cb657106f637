"""`servetune run --profile` end to end on the proxy (2 gloo ranks, real Ray): the run ends
with the baseline and the chosen config profiled into DIR/profile/."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launchers.process import marked_processes, reap_all
from simulator.runs import ROOT, owned_tuner
from tuner.output.profile_report import profile_summary

pytestmark = pytest.mark.integration


def test_run_profile(tmp_path: Path) -> None:
    name = f"profrun-{os.getpid()}"
    out = tmp_path / name
    argv = owned_tuner([
        "run", "--samples", "2", "--rounds", "1", "--confirm", "0", "--scheduler", "fifo",
        "--profile", "--out", str(out), "--model-config", "tiny", "--kv-len", "64",
        "--num-cpus", "2", "--no-dashboard"])
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        left = marked_processes(f"{name}@")
        reap_all(f"{name}@")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not left, f"processes survived the run: {left}"
    assert json.loads((out / "servetune.json").read_text())["profile"] is True
    summary = profile_summary(out)
    assert summary is not None, done.stdout[-3000:]
    labels = [e.label for e in summary.entries]
    assert labels[0] == "baseline" and all(e.status == "ok" for e in summary.entries)
    assert "baseline: verify " in done.stdout and (out / "profile" / "breakdown.png").is_file()
