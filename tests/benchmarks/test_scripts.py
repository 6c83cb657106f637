"""Smoke runs of every benchmarks/ script this suite owns: tiny sizes, real code paths.

Each script runs as ``python -m benchmarks.<name>`` in a subprocess (Ray starts and stops
inside it), and its headline last line must keep its format, so the scripts cannot rot.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"-?\d+(?:\.\d+)?"

pytestmark = pytest.mark.bench


def run_script(name: str, *args: str, timeout: float = 240) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines and lines[0].startswith("machine: "), done.stdout
    return lines


def test_overhead() -> None:
    lines = run_script("overhead", "--trials", "1", "--rounds", "1")
    assert re.fullmatch(rf"overhead per trial: {NUMBER} s beyond bare Ray Tune "
                        rf"\(bare loop: {NUMBER} s per trial\)", lines[-1]), lines[-1]


def test_readiness() -> None:
    lines = run_script("readiness", "--launches", "2", "--helper-launches", "0")
    assert re.fullmatch(rf"readiness detection: {NUMBER} s after the server is ready "
                        r"\(SGLang's helper: not run\)", lines[-1]), lines[-1]


def test_teardown() -> None:
    lines = run_script("teardown", "--launches", "1", "--grace", "0.5")
    match = re.fullmatch(rf"teardown: ({NUMBER}) s cooperative, ({NUMBER}) s ignoring SIGTERM "
                         rf"with grace 0.5 s \({NUMBER}x faster than a kill \+ 5 s sleep\)",
                         lines[-1])
    assert match, lines[-1]
    assert float(match.group(2)) >= 0.5  # the grace was waited out


def test_marker_scan() -> None:
    lines = run_script("marker_scan", "--extra", "20", "--repeat", "2")
    assert re.fullmatch(rf"marker scan: {NUMBER} ms with \d+ processes \(psutil scan: "
                        rf"{NUMBER} ms, {NUMBER}x faster\)", lines[-1]), lines[-1]


def test_profile_trial() -> None:
    lines = run_script("profile_trial", "--trials", "1", "--top", "5")
    assert re.fullmatch(rf"servetune's own time per trial \(setup \+ stop\): {NUMBER} s",
                        lines[-1]), lines[-1]


def test_early_stopping() -> None:
    lines = run_script("early_stopping", "--seeds", "1", "--samples", "4", "--rounds", "2")
    assert re.fullmatch(r"early stopping \(ASHA vs FIFO\): -?\d+% saved, best found [01]/1 "
                        r"at 2 rounds", lines[-1]), lines[-1]


def test_search_efficiency() -> None:
    lines = run_script("search_efficiency", "--seeds", "1", "--budget", "20", "--spaces",
                       "bench+tree", "--strategies", "random", "optuna", "staged", "staged+fa")
    assert re.fullmatch(rf"trials to within 2% of the optimum \(median\): bench\+tree: "
                        rf"staged\+failure-aware >?{NUMBER} vs random >?{NUMBER} "
                        rf"trials \(<?{NUMBER}x\)", lines[-1]), lines[-1]
    crash = next((line for line in lines if line.startswith("most launches")), "")
    launches = re.search(r"staged\+fa (\d+)", crash)
    assert launches is None or int(launches.group(1)) <= 2, crash  # failure-aware: twice at most


def test_weights() -> None:
    lines = run_script("weights", "--samples", "4", "--scale", "0.01", "--confirm", "2",
                       timeout=400)
    assert re.fullmatch(rf"random weights: -?\d+% less campaign wall time than real weights "
                        rf"everywhere \({NUMBER} s vs {NUMBER} s; servetune {NUMBER} s vs "
                        rf"{NUMBER} s\), same decision: yes", lines[-1]), lines[-1]
