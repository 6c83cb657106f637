"""Ports a trial across nodes meets at (``--dist-init-addr HOST:PORT``), chosen outside the
OS's ephemeral range and reserved on every host that uses them.

Why outside the ephemeral range: ``bind(0)`` and every outgoing ``connect()`` take their
local port from ``/proc/sys/net/ipv4/ip_local_port_range``; a port picked there (bind to 0,
close) can be handed to anyone before the server binds it, seconds later, after its model
starts loading. SGLang keeps its own NCCL port below that range for the same reason
(``srt/utils/network.py``: ``get_free_port_below_ephemeral``, 22000..29999); servetune's
meeting ports come from below SGLang's (``PREFERRED``), clipped to lie outside the ephemeral
range, so neither picks the other's.

Why a reservation: two trials on one host (two trials of one run, or two runs) would both
find a port free until one server binds it. Each port taken is a lock file
(``<lock dir>/<port>.lock``, ``flock``, exclusive) held by the trial's process until the
trial ends, naming its owner (the trial); the kernel drops the lock with
the process, so a killed trial leaves nothing held. Another owner's lock makes a port busy;
the same owner's (node 0 and a follower of one trial on one host, as in the simulated
cluster: the owner is the trial's marker) is shared. A port is also checked free by a bind,
as SGLang checks it. Different users of one host each have a lock dir: their reservations
do not see each other's, only their bound ports.
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO

from launchers.process import LOCALHOST, port_is_free

EPHEMERAL_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's default, where the file cannot be read
PREFERRED = (18000, 21999)  # below SGLang's own NCCL port pick (22000..29999)
LOCK_DIR_ENV = "SERVETUNE_PORT_LOCKS"
LOWEST = 1024  # never a privileged port


def ephemeral_range(path: Path = EPHEMERAL_FILE) -> tuple[int, int]:
    """The OS's ephemeral port range (its first and last port)."""
    try:
        low, high = (int(w) for w in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def meeting_range(ephemeral: tuple[int, int] | None = None, block: int = 1,
                  preferred: tuple[int, int] = PREFERRED) -> tuple[int, int]:
    """Where meeting ports come from: ``preferred`` outside the ephemeral range (its part
    below it, else above it), else the ports just below or above the range; each candidate
    holds at least two blocks. Raises RuntimeError when the ephemeral range leaves no room."""
    low_e, high_e = ephemeral or ephemeral_range()
    lo, hi = preferred
    candidates = [(lo, min(hi, low_e - 1)), (max(lo, high_e + 1), hi),
                  (max(LOWEST, low_e - (hi - lo + 1)), low_e - 1),
                  (high_e + 1, min(65535, high_e + (hi - lo + 1)))]
    for first, last in candidates:
        first = max(first, LOWEST)
        if last - first + 1 >= 2 * block:
            return first, last
    raise RuntimeError(f"no ports outside the ephemeral range {low_e}-{high_e} "
                       f"({EPHEMERAL_FILE}) for a meeting port")


def lock_dir() -> Path:
    """This user's lock files of reserved ports on this host (every run of the user)."""
    given = os.environ.get(LOCK_DIR_ENV)
    return Path(given) if given else Path(tempfile.gettempdir()) / f"servetune-ports-{os.getuid()}"


class PortLease:
    """Ports held by ``owner`` on this host: a lock per port, released by ``close`` (or the
    process's end)."""

    def __init__(self, owner: str, directory: Path | None = None) -> None:
        self.owner = owner
        self.directory = directory or lock_dir()
        self.ports: list[int] = []
        self._files: list[IO[str]] = []

    def _lock(self, port: int) -> bool:
        """Takes ``port``'s lock (True), or finds it this owner's already (True) or another
        owner's (False)."""
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle = open(self.directory / f"{port}.lock", "a+")  # noqa: SIM115 - held open
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            held_by = handle.read().strip()
            handle.close()
            return held_by == self.owner
        handle.seek(0)
        handle.truncate()
        handle.write(self.owner)
        handle.flush()
        self._files.append(handle)
        return True

    def take(self, ports: Iterable[int], hosts: Sequence[str] = (LOCALHOST,)) -> list[int]:
        """Reserves ``ports``; returns those busy (another owner's, or bound on one of
        ``hosts``). The free ones are held even so: ``close`` lets them go."""
        busy = []
        for port in ports:
            if not self._lock(port) or not all(port_is_free(port, h) for h in hosts):
                busy.append(port)
            else:
                self.ports.append(port)
        return busy

    def close(self) -> None:
        for handle in self._files:
            handle.close()  # drops the lock; the file stays (an unlocked file is free)
        self._files.clear()
        self.ports.clear()

    def __enter__(self) -> PortLease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reserve_block(owner: str, size: int, hosts: Sequence[str] = (LOCALHOST,),
                  span: tuple[int, int] | None = None, directory: Path | None = None,
                  rng: random.Random | None = None) -> PortLease:
    """``size`` consecutive ports, free on ``hosts`` and reserved on this host, from ``span``
    (default ``meeting_range``), held for ``owner``: blocks aligned on ``size``, tried from a
    random one on. Raises RuntimeError when every block is taken."""
    first, last = span or meeting_range(block=size)
    count = (last - first + 1) // size
    start = (rng or random.Random()).randrange(count)
    for index in range(count):
        base = first + ((start + index) % count) * size
        lease = PortLease(owner, directory)
        if not lease.take(range(base, base + size), hosts):
            return lease
        lease.close()
    raise RuntimeError(f"every block of {size} ports in {first}-{last} is reserved or in use")
