"""One driver per experiment folder.

A driver (``servetune run``, ``run --resume``, ``profile``) holds an exclusive ``flock`` on
``DIR/.servetune.lock`` for its whole life. The kernel drops the lock when the driver's
process ends, however it ends (Ctrl-C, SIGKILL, a crash), so a dead driver never blocks the
next ``--resume``. The holder writes its pid into the file, so that a second driver can
name it. The descriptor is not inherited by the processes the driver starts (Ray, servers):
a server that outlives its driver does not keep the folder locked.

Read-only commands (``report``, ``best``, ``plan``) take no lock and work during a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_FILE = ".servetune.lock"


class ExperimentBusy(Exception):
    """Another live driver holds the folder's lock."""

    def __init__(self, folder: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid else "pid not yet written"
        super().__init__(f"{folder}: another servetune driver ({who}) is running this "
                         "experiment; wait for it to end, or stop it "
                         f"({'kill -INT ' + str(pid) if pid else 'Ctrl-C'}) and resume")
        self.folder = folder
        self.pid = pid


def _read_pid(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    return None


class DriverLock:
    """``with DriverLock(folder):`` holds the folder for this process (ExperimentBusy if
    another driver holds it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> DriverLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)  # close-on-exec (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise ExperimentBusy(self.folder, pid) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> DriverLock:
        return self if self._fd is not None else self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.release()


def holder(folder: Path) -> int | None:
    """The pid of the driver that holds ``folder`` now (0 when its pid is not written yet),
    or None when no driver does."""
    path = Path(folder) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_pid(fd) or 0
        return None
    finally:
        os.close(fd)  # drops the probe's shared lock, if it got one
