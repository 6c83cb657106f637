"""The fault matrix (issue 5): inject each fault into a real `servetune run` (subprocess, real
Ray, the stand-in server) and check that nothing is leaked and nothing is lost.

    python -m benchmarks.faults [--repeats 3] [--quick] [--keep DIR]

Prints one row per fault: runs, leaked processes (carrying the experiment's marker once
servetune has returned), lost results (trials that finished before the fault but are
missing from results.csv), the kind recorded for the faulty trial, and the time to clean
up. The integration tests (tests/integration/test_faults_integration.py) run the same scenarios
and assert on the same outcomes.

Scenarios:
- trial faults: one experiment, one trial per fault, each its own server, told by
  ``--fake-fault-if`` which fault to show for its NCCL_BUFFSIZE value: crash at startup,
  hang before ready, death in the middle of a round, SIGTERM ignored, grandchildren in a
  new session, and a slow config that ASHA stops while its server is up with rounds left.
  Leaks are told apart by the trial part of the marker. Clean-up = the trial's teardown.
- port already taken: another process listens on the server port before the run: the
  baseline fails port_busy, and the search stops there (the environment, not a setting).
- driver SIGINT (Ctrl-C to the whole foreground job) in the middle of trial 2, then
  ``--resume`` (trial 2's config runs again). Clean-up = from the signal until servetune has
  returned.
- driver SIGKILL in the middle of trial 2 (its servers start setsid grandchildren that
  survive the kill), then ``servetune run --resume`` reaps them by marker and completes.
  Clean-up = from the start of the resume until every process left by the kill is gone.

The driver scenarios are in faults_driver.py, what a run records of a fault (``Outcome``) in
faults_outcome.py.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import exit_on_sigterm, machine, with_root_on_path
from benchmarks.faults_driver import driver_sigint, driver_sigkill
from benchmarks.faults_outcome import TIMEOUT, Outcome, Scenario, ended_ok, lost
from launchers.process import LOCALHOST, free_port
from simulator.runs import Experiment, ray_tmpdir, stand_in
from tuner.record.files import BROKEN_JSON

# ---------------------------------------------------------------- trial faults

# NCCL_BUFFSIZE value -> (fault row, stand-in fault, expected kind or status)
TRIAL_FAULTS: dict[int, tuple[str, str, str]] = {
    524288: ("crash at startup", "crash-startup", "graph_capture"),
    1048576: ("hang before ready", "hang-startup", "startup_timeout"),
    2097152: ("dies mid-round", "die-mid-round", "crashed_mid_benchmark"),
    4194304: ("ignores SIGTERM", "ignore-sigterm", "ok|stopped"),
    8388608: ("setsid grandchildren", "setsid-grandchild", "ok|stopped"),
    131072: ("ASHA stop mid-trial", "slow", "stopped"),
}
GOOD = 262144
# The run's grace between SIGTERM and SIGKILL: a server that ignores SIGTERM must cost none
# of it. 10 s (SGLang's stand-in runs elsewhere use 1 s): a stop that kills at once took
# 1.07 s beside two busy loops, so 1 s could not tell it from a grace waited out.
STOP_GRACE = 10.0
# The hung server's wait, which every good server must beat: 5 s was too short on a loaded
# 2-core box (CI's baseline stand-in missed it twice and the run stopped as a broken
# environment); with two busy loops beside the suite a stand-in took 14 s to its first line.
READY_TIMEOUT = 45.0


def trial_faults(root: Path, ray_tmp: Path) -> list[Outcome]:
    space = root / "faults.yaml"
    values = [GOOD, *TRIAL_FAULTS]
    space.write_text("name: faults\nknobs:\n  NCCL_BUFFSIZE: [" + ", ".join(map(str, values))
                     + "]\n")
    rules = [a for value, (_, fault, _) in TRIAL_FAULTS.items()
             for a in ("--fake-fault-if", f"{fault}:NCCL_BUFFSIZE={value}")]
    exp = Experiment.create(root, ray_tmp, name="trials")
    argv = exp.args("--space", str(space), "--search", "grid", "--samples", str(len(values) + 1),
                    "--rounds", "2", "--no-dashboard", "--stop-grace", str(STOP_GRACE),
                    server=stand_in(*rules, "--fake-die-after", "3"),
                    ready_timeout=READY_TIMEOUT)
    try:
        result = exp.run(["run", *argv], timeout=TIMEOUT)
        leftovers = exp.leftovers()
        outcomes = []
        order = exp.trial_ids()
        records = exp.records()
        table = exp.table() if (exp.out / "results.csv").exists() else None
        by_value = {r["config"].get("NCCL_BUFFSIZE"): t for t, r in records.items()}
        fault_markers = {f"{exp.prefix}{by_value[v]}" for v in TRIAL_FAULTS if v in by_value}
        # A leak of the run itself (Ray, the good trials) counts against every fault.
        shared = [m for m in leftovers if m.marker not in fault_markers]
        for value, (row, _, expected) in TRIAL_FAULTS.items():
            out = Outcome(row, expected, log=str(result), prefix=exp.prefix)
            outcomes.append(out)
            if result.returncode != 0:
                out.problems.append(f"servetune exited with {result.returncode}")
            trial = by_value.get(value)
            if trial is None or table is None:
                out.problems.append("the faulty trial never ran")
                continue
            row_ = table[table["trial_id"] == trial].iloc[0]
            kind = row_["failure_kind"]
            out.recorded = str(kind) if isinstance(kind, str) else str(row_["status"])
            out.leaked = [m for m in leftovers if m.marker == f"{exp.prefix}{trial}"] + shared
            record = records[trial]
            out.cleanup_s = record["timings"].get("teardown_s")
            if out.cleanup_s is None:
                out.problems.append("the trial did not finish its teardown")
            ended_before = [t for t in ended_ok(exp) if order.index(t) < order.index(trial)]
            out.lost = lost(exp, ended_before)
            # servetune kills a server it is done with at once (SGLang's own stop ends so):
            # one that ignores SIGTERM costs no grace
            if row == "ignores SIGTERM" and (out.cleanup_s or 0) >= STOP_GRACE:
                out.problems.append(f"stopped in {out.cleanup_s} s: the grace was waited out")
            if row == "setsid grandchildren" and not any(
                    "setsid" in w for w in record["warnings"]):
                out.problems.append("no grandchild left the server's tree: fault not injected?")
            if row == "ASHA stop mid-trial" and not 1 <= row_["rounds"] < 2:
                out.problems.append(f"stopped after {row_['rounds']} rounds")
        return outcomes
    finally:
        exp.cleanup()


# ---------------------------------------------------------------- port already taken


def port_taken(root: Path, ray_tmp: Path) -> list[Outcome]:
    port = free_port()
    exp = Experiment.create(root, ray_tmp, name="port")
    out = Outcome("port already taken", "port_busy")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as blocker:
        blocker.bind((LOCALHOST, port))
        blocker.listen()
        argv = exp.args("--space", "nccl-pcie", "--samples", "2", "--rounds", "2",
                        "--no-dashboard")
        argv[argv.index("--port") + 1] = str(port)
        try:
            result = exp.run(["run", *argv], timeout=TIMEOUT)
            out.log, out.prefix = str(result), exp.prefix
            out.leaked = exp.leftovers()
            table = exp.table()
            kinds = set(table["failure_kind"].dropna())
            out.recorded = ",".join(sorted(kinds)) or "-"
            if result.returncode != 1 or len(table) != 1 or \
                    not (exp.out / BROKEN_JSON).exists():
                out.problems.append(f"exit {result.returncode}, {len(table)} trials (expected: "
                                    "exit 1 after the baseline, a broken environment)")
            times = [exp.record(t)["timings"].get("teardown_s") for t in exp.trial_ids()]
            out.cleanup_s = max((t for t in times if t is not None), default=None)
        finally:
            exp.cleanup()
    return [out]


# ---------------------------------------------------------------- the matrix

SCENARIOS: dict[str, Scenario] = {
    "trial faults": trial_faults,
    "port already taken": port_taken,
    "driver SIGINT": driver_sigint,
    "driver SIGKILL": driver_sigkill,
}
QUICK = ("port already taken",)
# (fault row, the scenario that shows it), for the integration tests.
ROWS: tuple[tuple[str, str], ...] = (
    *((row, "trial faults") for row, _, _ in TRIAL_FAULTS.values()),
    ("port already taken", "port already taken"),
    ("driver SIGINT, then --resume", "driver SIGINT"),
    ("driver SIGKILL, then --resume", "driver SIGKILL"),
)


def run_scenario(name: str, keep: Path | None = None) -> list[Outcome]:
    """One repeat of one scenario, in a fresh folder and Ray temp dir."""
    root = Path(tempfile.mkdtemp(prefix="faults-", dir=keep))
    try:
        with ray_tmpdir() as ray_tmp:
            return SCENARIOS[name](root, ray_tmp)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)


def table(outcomes: list[Outcome]) -> list[str]:
    rows: dict[str, list[Outcome]] = {}
    for o in outcomes:
        rows.setdefault(o.fault, []).append(o)
    head = (f"{'fault':<32} {'runs':>4} {'leaked':>6} {'lost':>4}  {'kind recorded':<28} "
            f"{'clean-up s (median [min, max])':<30} ok")
    lines = [head, "-" * len(head)]
    for fault, runs in rows.items():
        kinds: dict[str, int] = {}
        for o in runs:
            kinds[o.recorded] = kinds.get(o.recorded, 0) + 1
        kind = ", ".join(f"{k} {n}/{len(runs)}" for k, n in kinds.items())
        times = [o.cleanup_s for o in runs if o.cleanup_s is not None]
        spread = (f"{statistics.median(times):.2f} [{min(times):.2f}, {max(times):.2f}]"
                  if times else "-")
        verdict = "yes" if all(o.ok for o in runs) else "NO"
        lines.append(f"{fault:<32} {len(runs):>4} {sum(len(o.leaked) for o in runs):>6} "
                     f"{sum(len(o.lost) for o in runs):>4}  {kind:<28} {spread:<30} {verdict}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="one repeat of the cheapest scenario only (a smoke test)")
    parser.add_argument("--keep", type=Path, help="keep each run's folder under DIR")
    args = parser.parse_args(argv)
    with_root_on_path()
    exit_on_sigterm()
    names = QUICK if args.quick else tuple(SCENARIOS)
    repeats = 1 if args.quick else args.repeats
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    print(machine())
    print(f"fault matrix: {repeats} repeat(s) of {', '.join(names)}", flush=True)
    outcomes: list[Outcome] = []
    began = time.monotonic()
    for repeat in range(repeats):
        for name in names:
            t0 = time.monotonic()
            got = run_scenario(name, args.keep)
            outcomes += got
            bad = [o for o in got if not o.ok]
            print(f"  repeat {repeat + 1}: {name}: {time.monotonic() - t0:.1f} s"
                  f"{'' if not bad else ', FAILED: ' + '; '.join(o.fault for o in bad)}",
                  flush=True)
            for o in bad:
                print(o.explain()[-4000:], file=sys.stderr)
    print()
    for line in table(outcomes):
        print(line)
    rows = {o.fault for o in outcomes}
    wrong = sum(o.recorded not in o.expected.split("|") or bool(o.problems) for o in outcomes)
    print(f"fault matrix: {len(rows)} faults x {repeats} runs in {time.monotonic() - began:.0f} s: "
          f"{sum(len(o.leaked) for o in outcomes)} leaked, {sum(len(o.lost) for o in outcomes)} "
          f"lost, {wrong} wrong")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
