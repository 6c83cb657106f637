"""One driver per experiment folder: the lock is exclusive across processes, names its
holder, and is gone the moment the holder dies (however it dies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from simulator.runs import ROOT
from tuner.run.lock import LOCK_FILE, DriverLock, ExperimentBusy, holder

HOLD = ("import sys, time\n"
        "from pathlib import Path\n"
        "from tuner.run.lock import DriverLock\n"
        "lock = DriverLock(Path(sys.argv[1])).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(120)\n")


def _holding_process(folder: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_driver_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    proc = _holding_process(tmp_path / "exp")
    try:
        assert holder(tmp_path / "exp") == proc.pid
        with pytest.raises(ExperimentBusy) as err:
            DriverLock(tmp_path / "exp").acquire()
        assert err.value.pid == proc.pid and f"pid {proc.pid}" in str(err.value)
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_frees_the_folder_at_once(tmp_path: Path) -> None:
    proc = _holding_process(tmp_path / "exp")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    began = time.monotonic()
    assert holder(tmp_path / "exp") is None
    with DriverLock(tmp_path / "exp") as lock:
        assert holder(tmp_path / "exp") == os.getpid()
        assert (tmp_path / "exp" / LOCK_FILE).read_text().strip() == str(os.getpid())
        assert lock.path.parent == tmp_path / "exp"
    assert time.monotonic() - began < 1.0
    assert holder(tmp_path / "exp") is None  # released on leaving the block


def test_the_lock_is_exclusive_within_one_process_too(tmp_path: Path) -> None:
    with DriverLock(tmp_path), pytest.raises(ExperimentBusy):
        DriverLock(tmp_path).acquire()


def test_a_held_lock_enters_a_with_block_as_it_is(tmp_path: Path) -> None:
    lock = DriverLock(tmp_path).acquire()
    with lock as same:
        assert same is lock and holder(tmp_path) == os.getpid()
    assert holder(tmp_path) is None


def test_children_of_the_driver_do_not_inherit_the_lock(tmp_path: Path) -> None:
    """A server that outlives its driver must not keep the folder locked."""
    lock = DriverLock(tmp_path).acquire()
    # close_fds=False: only the descriptor's own close-on-exec flag keeps it from the child.
    child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        lock.release()
        assert holder(tmp_path) is None
    finally:
        child.kill()
        child.wait()


def test_no_folder_no_holder(tmp_path: Path) -> None:
    assert holder(tmp_path / "missing") is None
    assert not (tmp_path / "missing").exists()
