"""Server process trees: spawn with a marker, log to a file, wait for readiness, stop, reap.

Every process servetune starts carries ``SERVETUNE_TRIAL=<experiment>/<trial>`` and
``SERVETUNE_OWNER=<pid of the process that started it>`` in its environment. Processes are
found again by that marker (in /proc/PID/environ) and killed by tree, never by name: Ray's
own cleanup misses grandchildren in a new session and everything after a driver crash
(shared/reference/ray-tune.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from launchers.failures import Failure, FailureKind, TrialFailed

MARKER_ENV = "SERVETUNE_TRIAL"
OWNER_ENV = "SERVETUNE_OWNER"
LOCALHOST = "127.0.0.1"


def marker_value(experiment: str, trial: str) -> str:
    return f"{experiment}/{trial}"


# Helper processes that serve every trial of their owner (the resident SGLang parser), marked
# ``<experiment>/<helper>``: a reap between trials leaves them alone while their owner lives.
HELPERS = frozenset({"preflight"})


def helper_marker(experiment: str, helper: str) -> str:
    if helper not in HELPERS:
        raise ValueError(f"{helper!r} is not a helper process: {', '.join(sorted(HELPERS))}")
    return marker_value(experiment, helper)


def _is_helper(marker: str) -> bool:
    return marker.rpartition("/")[2] in HELPERS


def check_env_values(env: Mapping[str, str], inherited: Mapping[str, str] | None = None) -> None:
    """Env values with a newline or NUL are refused: they could forge lines or truncate.

    Values passed on unchanged from ``inherited`` (default: this process's environment) are
    not servetune's to judge: a shell's exported functions (``BASH_FUNC_which%%``, Lmod's
    ``module``) hold newlines, and execve hands them over as they are."""
    base = os.environ if inherited is None else inherited
    for key, value in env.items():
        if base.get(key) == value:
            continue
        if "\n" in value or "\x00" in value or "\r" in value:
            raise ValueError(f"environment value for {key} contains a newline or NUL")
        if not key or "=" in key or "\x00" in key:
            raise ValueError(f"invalid environment variable name {key!r}")


# ---------------------------------------------------------------- finding marked processes


def ray_marker(prefix: str) -> str:
    """The marker of the private Ray an experiment starts: its processes are reaped with the
    experiment's leftovers once Ray is shut down, never by a sweep while Ray runs."""
    return f"{prefix}ray"


@dataclass(frozen=True)
class Marked:
    pid: int
    marker: str
    owner: int | None
    cmdline: str


@contextlib.contextmanager
def environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """This process's os.environ with ``values`` set (None: removed) for the block, as it was
    after: for what a library reads from the environment (Ray's workers, servers started here)."""
    saved = {key: os.environ.get(key) for key in values}
    try:
        _set_environ(values)
        yield
    finally:
        _set_environ(saved)


def _set_environ(values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _protected_pids() -> set[int]:
    """This process and its ancestors: never killed by a reap."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids.update(p.pid for p in psutil.Process().parents())
    return pids


_MARKER_BYTES = MARKER_ENV.encode() + b"="


def _candidate_pids() -> list[int]:
    """Pids whose raw environment mentions the marker. On Linux /proc/PID/environ is read
    directly, with no psutil object per process (3x faster with 600 processes); elsewhere
    every pid is a candidate."""
    if not sys.platform.startswith("linux"):
        return psutil.pids()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if _MARKER_BYTES in f.read():
                    pids.append(int(name))
        except OSError:
            continue
    return pids


def marked_processes(prefix: str = "", exact: bool = False) -> list[Marked]:
    """Live processes whose marker starts with ``prefix`` (or equals it when ``exact``)."""
    found = []
    protected = _protected_pids()
    for pid in _candidate_pids():
        if pid in protected:
            continue
        try:
            proc = psutil.Process(pid)
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        value = env.get(MARKER_ENV)
        if value is None or not (value == prefix if exact else value.startswith(prefix)):
            continue
        owner = env.get(OWNER_ENV)
        try:
            cmd = " ".join(proc.cmdline())[:120]
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.Error, OSError):
            continue
        found.append(Marked(proc.pid, value, int(owner) if owner and owner.isdigit() else None, cmd))
    return found


def _owner_alive(owner: int | None) -> bool:
    if owner is None:
        return False
    try:
        return psutil.Process(owner).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def leftovers(prefix: str, keep: str | None = None) -> list[Marked]:
    """Marked processes that nobody owns any more: the owner is dead, or it is this process
    (an earlier trial of a reused Ray actor), except this process's helpers (HELPERS), which
    serve its next trials too. ``keep`` names a marker that is never a leftover."""
    me = os.getpid()
    return [m for m in marked_processes(prefix)
            if m.marker != keep and ((m.owner == me and not _is_helper(m.marker))
                                     or not _owner_alive(m.owner))]


# ---------------------------------------------------------------- killing trees


def kill_processes(pids: Iterable[int], grace: float) -> list[int]:
    """SIGTERM every process and its descendants, wait ``grace`` s, SIGKILL the rest
    (``grace`` 0: SIGKILL at once, every process of the trees together).

    Returns the pids that were still alive at the start (and so were signalled)."""
    procs: dict[int, psutil.Process] = {}
    protected = _protected_pids()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for p in [root, *root.children(recursive=True)]:
                if p.pid not in protected:
                    procs[p.pid] = p
        except psutil.Error:
            continue
    alive = list(procs.values())
    if grace > 0:
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGTERM)
        alive = _wait_exit(alive, timeout=grace)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    _wait_exit(alive, timeout=5)
    return sorted(procs)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def _wait_exit(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait until every process has exited; returns those still running after ``timeout``.

    A zombie has exited (no memory, port or GPU left): an orphan waits for init to reap it,
    which took 1.3 s on a test box, and psutil.wait_procs waited for that. Our own children
    are reaped here."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    alive = [p for p in procs if _running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.02)
        alive = [p for p in alive if _running(p)]
    psutil.wait_procs([p for p in procs if p not in alive], timeout=0)  # reap our children
    return alive


def reap(prefix: str, keep: str | None = None, grace: float = 3.0) -> list[int]:
    """Kill leftover marked process trees under ``prefix``; returns the pids killed."""
    found = leftovers(prefix, keep)
    return kill_processes((m.pid for m in found), grace) if found else []


def reap_all(prefix: str, grace: float = 3.0, exact: bool = False) -> list[int]:
    """Kill every marked process under ``prefix``, owned or not (end of a trial/experiment)."""
    found = marked_processes(prefix, exact)
    return kill_processes((m.pid for m in found), grace) if found else []


# ---------------------------------------------------------------- ports


def port_is_free(port: int, host: str = LOCALHOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOCALHOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_port_free(port: int, timeout: float, host: str = LOCALHOST) -> bool:
    deadline = time.monotonic() + timeout
    while not port_is_free(port, host):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# ---------------------------------------------------------------- one server tree


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


@dataclass(frozen=True)
class StopReport:
    seconds: float
    signalled: list[int]
    port_free: bool
    # Marked processes in a session of their own (setsid): Ray's process-group kill misses them.
    other_sessions: tuple[int, ...] = ()


class ServerProcess:
    """A started process tree that owns its log file; a context manager that always stops it."""

    def __init__(self, popen: subprocess.Popen[bytes], log_path: Path, marker: str,
                 port: int | None, host: str) -> None:
        self.popen = popen
        self.log_path = log_path
        self.marker = marker
        self.port = port
        self.host = host
        self.started = time.monotonic()
        self.ready_at: float | None = None
        self.stop_grace = 10.0  # seconds between SIGTERM and SIGKILL when stop() is not told
        self._stopped: StopReport | None = None

    @classmethod
    def spawn(cls, argv: Sequence[str], env: Mapping[str, str], log_path: Path, marker: str,
              port: int | None = None, host: str = LOCALHOST, cwd: Path | None = None
              ) -> ServerProcess:
        """Start ``argv`` (no shell) with exactly ``env`` plus the marker; output to ``log_path``.

        The process stays in the caller's process group, so a Ray stop that signals the
        worker's group reaches it too."""
        full_env = {**env, MARKER_ENV: marker, OWNER_ENV: str(os.getpid())}
        check_env_values(full_env)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(list(argv), env=full_env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=cwd, close_fds=True)
        return cls(popen, log_path, marker, port, host)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def log_text(self, max_bytes: int = 1 << 20) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - max_bytes))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def failure(self, message: str = "", kind: FailureKind | None = None) -> Failure:
        """A Failure from the current log and exit code (classified unless ``kind`` given)."""
        failure = Failure.from_log(self.log_text(), self.poll(), message)
        if kind is not None:
            failure.kind = kind
        return failure

    def wait_ready(self, probe: Callable[[], bool], timeout: float, interval: float = 0.05
                   ) -> float:
        """Poll ``probe`` until it is true; a dead or silent server raises TrialFailed."""
        deadline = self.started + timeout
        while True:
            code = self.poll()
            if code is not None:
                raise TrialFailed(self.failure())
            if probe():
                self.ready_at = time.monotonic()
                return self.ready_at - self.started
            if time.monotonic() > deadline:
                raise TrialFailed(self.failure(
                    f"not ready after {timeout:.0f} s (still running, no readiness)",
                    FailureKind.STARTUP_TIMEOUT))
            time.sleep(interval)

    def stop(self, grace: float | None = None, port_timeout: float = 10.0) -> StopReport:
        """TERM the whole tree (and anything with this marker), wait ``grace`` (default
        ``stop_grace``), then KILL."""
        if self._stopped is not None:
            return self._stopped
        grace = self.stop_grace if grace is None else grace
        began = time.monotonic()
        marked = [m.pid for m in marked_processes(self.marker, exact=True)]
        session = _session(self.pid)
        others = tuple(p for p in marked if session is not None and _session(p) not in
                       (session, None))
        signalled = kill_processes([self.pid, *marked], grace)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        for _ in range(3):  # a child forked as the TERM came was in no list: its marker tells
            late = [m.pid for m in marked_processes(self.marker, exact=True)]
            if not late:
                break
            signalled += kill_processes(late, grace)
        port_free = True
        if self.port is not None:
            port_free = wait_port_free(self.port, port_timeout, self.host)
        self._stopped = StopReport(time.monotonic() - began, signalled, port_free, others)
        return self._stopped

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
