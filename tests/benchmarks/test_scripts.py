"""Smoke runs of every benchmarks/ script this suite owns: tiny sizes, real code paths.

Each script runs as ``python -m benchmarks.<name>`` in a subprocess (Ray starts and stops
inside it), and its headline last line must keep its format, so the scripts cannot rot. Where
README quotes a figure (ASHA's saved rounds, staged search against random, the crashing value
launched at most twice), the smoke run asserts it at small scale, so that it can fail.
benchmarks/weights.py is not run here: its two campaigns are the weights integration test's
(tests/integration/test_weights_integration.py), which checks the script's report of them.
"""

from __future__ import annotations

import json
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


def test_early_stopping_asha_saves_rounds_and_keeps_the_best() -> None:
    """README: ASHA saves 55% of benchmark rounds and still finds the best config (6 rounds,
    32 configs). At one seed: at least 40% saved, FIFO's best found."""
    lines = run_script("early_stopping", "--seeds", "1", "--samples", "32", "--rounds", "6")
    match = re.fullmatch(r"early stopping \(ASHA vs FIFO\): (-?\d+)% saved, best found ([01])/1 "
                         r"at 6 rounds", lines[-1])
    assert match, lines[-1]
    assert int(match.group(1)) >= 40, lines[-1]
    assert match.group(2) == "1", lines[-1]


FIRST, REACHED, FAILING = 2, 8, 10  # columns of a row split on blanks


def _rows(lines: list[str], strategy: str) -> list[list[str]]:
    """A strategy's table rows, split on blanks: budget, strategy, first: median, [p10, p90],
    picked: median, [p10, p90], reached (first, picked), failing, ended, gave up, ruled out."""
    return [line.split() for line in lines if re.match(rf" +\d+ {re.escape(strategy)} ", line)]


def test_search_efficiency_default_meets_its_goals_on_a_few_landscapes() -> None:
    """README and BENCHMARKS: at the budget it sizes for each space, the default search gets
    within 2% of the optimum in at least 19 of 20 runs, never in fewer runs than random search
    with the failure memory, with no innocent setting ruled out and an always-failing one
    launched at most three times (a suspect's retry). Here: three seeds on two landscapes
    (seconds), the same check lines."""
    lines = run_script("search_efficiency", "--seeds", "3", "--budgets", "sized",
                       "--landscapes", "bench+tree", "founding", "--strategies", "auto",
                       "random+fa", "random", timeout=240)
    assert lines[-4] == ("default (auto) within 2% in >= 3/3 runs at its own sized budget on "
                         "2 landscape(s): yes"), lines[-4:]
    assert lines[-3] == ("default never within 2% in fewer runs than random+fa at the sized "
                         "budget (2 landscape(s)): yes"), lines[-4:]
    assert lines[-2] == "default vs optuna+fa's median trials: not judged (optuna+fa not run)"
    match = re.fullmatch(r"innocent settings ruled out in the default's runs: (\d+); most "
                         r"launches of an always-failing setting in one run: (\d+)", lines[-1])
    assert match and match.group(1) == "0" and 1 <= int(match.group(2)) <= 3, lines[-1]
    # without the failure memory the same count sees repeated crashes
    assert max(int(row[FAILING]) for row in _rows(lines, "random")) > 3, lines
    ruled = [row for row in _rows(lines, "auto") if row[-1].startswith("allreduce-backend=")]
    assert ruled and "(INNOCENT)" not in " ".join(lines), lines


def test_search_efficiency_staged_needs_at_most_half_of_randoms_trials() -> None:
    """README: staged + failure-aware reaches within 2% of the optimum in a fraction of random
    search's trials on the separable bench landscape. Here: at most half, every seed there."""
    lines = run_script("search_efficiency", "--seeds", "5", "--budgets", "40", "--landscapes",
                       "bench", "--strategies", "random", "staged+fa", timeout=120)
    [ours] = _rows(lines, "staged+fa")
    [theirs] = _rows(lines, "random")
    assert not ours[FIRST].startswith(">") and ours[REACHED] == "5/5,", lines
    assert int(ours[FIRST]) <= 0.5 * int(theirs[FIRST].lstrip(">")), lines


def test_tuner_plugin_check(tmp_path: Path) -> None:
    """A dry run on CPU (gloo: no NCCL, no plugin): both launches, the rules exported from the
    env run, the table and the verdict line."""
    lines = run_script("tuner_plugin_check", "--device", "cpu", "--model-config", "tiny",
                       "--plugin", str(tmp_path / "not-built.so"), "--rounds", "2",
                       "--pin", "NCCL_PROTO=LL", "--out", str(tmp_path / "check"))
    assert re.fullmatch(rf"verify ms: plugin {NUMBER} vs env {NUMBER} \([+-]{NUMBER}%; spread "
                        rf"max-min/mean {NUMBER}%\): (within|OUTSIDE) noise", lines[-1]), lines[-1]
    assert re.fullmatch(r"env +1 +1 +.*", lines[-5]), lines[-7:]
    assert re.fullmatch(r"plugin +1 +1 +.*", lines[-4]), lines[-7:]
    assert (tmp_path / "check" / "nccl-tuner.csv").is_file()
    plan = json.loads((tmp_path / "check" / "plugin-0" / "plan.json").read_text())
    assert "NCCL_PROTO" in plan["unset_env"] and "NCCL_PROTO" not in plan["env"]


def test_confirm_power() -> None:
    """BENCHMARKS: the sequential confirm stage's error rates, simulated (no launches)."""
    lines = run_script("confirm_power", "--stages", "60", "--cap", "10")
    rows = {line.split("|")[1].strip(): line for line in lines if line.startswith("| 0.")}
    assert set(rows) == {"0.05", "0.10", "0.15", "0.20"}, lines
    cells = [c.strip() for c in rows["0.05"].split("|")[2:-1]]
    assert float(cells[-1].split("%")[0]) >= 90  # 1.5x at a 5% spread: nearly always
    assert float(cells[0].split("%")[0]) <= 15  # 1.02x: seldom
