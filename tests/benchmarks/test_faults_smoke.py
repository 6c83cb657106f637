"""Smoke run of benchmarks/faults.py: the quick matrix runs for real and prints its table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.bench


def test_faults_quick() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.faults", "--quick"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("machine: ")
    header = next(i for i, line in enumerate(lines) if line.startswith("fault ") and "runs" in line)
    assert re.match(r"port already taken\s+1\s+0\s+0\s+port_busy 1/1\s+\S+.*\syes$",
                    lines[header + 2]), lines[header + 2]
    assert re.fullmatch(r"fault matrix: 1 faults x 1 runs in \d+ s: 0 leaked, 0 lost, 0 wrong",
                        lines[-1]), lines[-1]
