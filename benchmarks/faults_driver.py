"""The fault matrix's driver scenarios (benchmarks/faults.py): servetune's own process
interrupted in the middle of trial 2, by SIGINT to the whole foreground job or by SIGKILL
(its servers' setsid grandchildren outliving it), then ``servetune run --resume``."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from benchmarks.faults_outcome import TIMEOUT, Outcome, ended_ok, lost
from simulator.runs import Experiment, Result, stand_in


def _second_trial_mid_round(exp: Experiment) -> bool:
    """Trial 2 has reported its first round (so its server is up, mid-trial)."""
    counts = exp.rounds_reported()
    order = exp.trial_ids()
    return len(order) >= 2 and counts.get(order[1], 0) >= 1


def _interrupted_run(root: Path, ray_tmp: Path, name: str, server: str
                     ) -> tuple[Experiment, list[str]]:
    exp = Experiment.create(root, ray_tmp, name=name)
    # The signal must land inside trial 2's second round, which begins as its first is
    # journaled: 2 requests of 384 tokens at the stand-in's ~28 model ms per cycle of ~2.4
    # tokens and 0.2 real s per model s keep that round ~1.8 s long on any box (the model's
    # clock makes up a busy box's late wake-ups), against the 0.05 s poll that fires it. With
    # 32-token requests (~0.15 s) a loaded box let trial 2 end first: 'ok', not interrupted.
    argv = exp.args("--space", "nccl-pcie", "--search", "grid", "--samples", "2", "--rounds", "2",
                    "--scheduler", "fifo", "--no-dashboard", "--output-len", "384",
                    "--requests-per-round", "2", server=server)
    return exp, argv


def driver_sigint(root: Path, ray_tmp: Path) -> list[Outcome]:
    exp, argv = _interrupted_run(root, ray_tmp, "sigint", stand_in())
    # The signal stops everything at once: trial 2 stays interrupted, and the resume (from the
    # journal) runs its config again as a new trial.
    out = Outcome("driver SIGINT, then --resume", "interrupted->re-run")
    try:
        background = exp.start(["run", *argv])
        background.wait_for(lambda: _second_trial_mid_round(exp), TIMEOUT, "trial 2's round 1")
        before = ended_ok(exp)
        fired = time.monotonic()
        background.signal_group(signal.SIGINT)
        first = background.finish(timeout=TIMEOUT)
        out.prefix = exp.prefix
        out.cleanup_s = time.monotonic() - fired
        out.leaked = exp.leftovers()
        out.lost = lost(exp, before)
        if first.returncode != 130:
            out.problems.append(f"interrupted run exited with {first.returncode}, not 130")
        status = _status_of(exp, exp.trial_ids()[1])
        resumed = exp.run(["run", "--resume", str(exp.out)], timeout=TIMEOUT)
        out.log = f"{first}\n{resumed}"
        out.leaked += exp.leftovers()
        out.lost += lost(exp, before)
        _check_completed(exp, resumed, out, samples=2, rerun_ok=True)
        out.recorded = f"{status}->{_final_status(exp, exp.trial_ids()[1])}"
        return [out]
    finally:
        exp.cleanup()


def driver_sigkill(root: Path, ray_tmp: Path) -> list[Outcome]:
    exp, argv = _interrupted_run(root, ray_tmp, "sigkill", stand_in("--fake-fault",
                                                                    "setsid-grandchild"))
    # results.csv is rewritten as trials end: a trial in flight at a SIGKILL is only in the
    # journal (results.jsonl). The resume rebuilds the search from the journal: trial 2,
    # never ended, has its config run again as a new trial ('re-run').
    out = Outcome("driver SIGKILL, then --resume", "in flight->re-run|interrupted->re-run")
    try:
        background = exp.start(["run", *argv])
        background.wait_for(lambda: _second_trial_mid_round(exp), TIMEOUT, "trial 2's round 1")
        before = ended_ok(exp)
        background.signal_driver(signal.SIGKILL)
        killed = background.finish(timeout=30)
        out.prefix = exp.prefix
        left = exp.leftovers()
        if not left:
            out.problems.append("nothing outlived the driver: the resume had nothing to reap")
        status = _status_of(exp, exp.trial_ids()[1])
        with _watch_gone([m.pid for m in left]) as gone_after:
            resumed = exp.run(["run", "--resume", str(exp.out)], timeout=TIMEOUT)
        out.cleanup_s = gone_after()
        out.log = f"{killed}\nleft by the kill: {left}\n{resumed}"
        out.leaked = exp.leftovers()
        out.lost = lost(exp, before)
        _check_completed(exp, resumed, out, samples=2, rerun_ok=True)
        out.recorded = f"{status}->{_final_status(exp, exp.trial_ids()[1])}"
        return [out]
    finally:
        exp.cleanup()


def _final_status(exp: Experiment, trial_id: str) -> str:
    """The trial's status after the resume; 're-run' when it stayed interrupted but a later
    trial completed its config."""
    status = _status_of(exp, trial_id)
    if status == "ok":
        return status
    config = exp.record(trial_id)["config"]
    table = exp.table()
    done = [str(t) for t in table[table["status"] == "ok"]["trial_id"]]
    return "re-run" if any(exp.record(t)["config"] == config for t in done) else status


def _status_of(exp: Experiment, trial_id: str) -> str:
    """The trial's status in results.csv ('in flight': only the journal has it)."""
    try:
        table = exp.table()
    except FileNotFoundError:
        return "in flight" if trial_id in exp.trial_ids() else "missing"
    rows = table[table["trial_id"] == trial_id]
    if len(rows):
        return str(rows.iloc[0]["status"])
    return "in flight" if trial_id in exp.trial_ids() else "missing"


def _check_completed(exp: Experiment, resumed: Result, out: Outcome, samples: int,
                     rerun_ok: bool = False) -> None:
    """The resume ran the experiment to its end: ``samples`` trials completed every round
    (with ``rerun_ok``, besides trials left interrupted whose config ran again)."""
    if resumed.returncode != 0:
        out.problems.append(f"--resume exited with {resumed.returncode}")
        return
    table = exp.table()
    ok = table[table["status"] == "ok"]
    others = set(table["status"]) - {"ok", *({"interrupted"} if rerun_ok else set())}
    if len(ok) != samples or others:
        out.problems.append(f"after --resume: {len(ok)} of {samples} trials completed, "
                            f"statuses {sorted(set(table['status']))}")


@contextlib.contextmanager
def _watch_gone(pids: list[int]) -> Iterator[Callable[[], float | None]]:
    """Seconds from entering until every one of ``pids`` is gone (None: some never went)."""
    began = time.monotonic()
    gone_at: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if not any(psutil.pid_exists(p) and _alive(p) for p in pids):
                gone_at.append(time.monotonic() - began)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield lambda: gone_at[0] if gone_at else None
    finally:
        stop.set()
        thread.join(2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
