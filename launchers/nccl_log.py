"""What NCCL actually ran with, read from its own ``NCCL_DEBUG=INFO`` log lines.

Every NCCL line starts with ``host:pid:tid [dev] NCCL INFO `` (shared/reference/nccl.md).
servetune asks each rank to write its own file (``NCCL_DEBUG_FILE=<trial>/nccl.%h.%p.log``)
and reads back: the version, every ``X set by environment to V`` line, the communicator
size, channel counts, transports, and the per-collective choices of the TUNING subsystem.
Lines from other programs in the same text are ignored.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEBUG_FILE_PATTERN = "nccl.%h.%p.log"  # NCCL expands %h (host) and %p (pid)
# NCCL reads these itself while setting up its logger; they print no "set by environment" line.
_DEBUG_VARS = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
# With one rank NCCL never runs its tuning model, so these are neither printed nor checked.
_ALGO_VARS = ("NCCL_ALGO", "NCCL_PROTO")

_PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[[^\]]*\] "
                     r"NCCL INFO (?P<msg>.*)$")
_ANYWHERE = re.compile(r"\bNCCL INFO (?P<msg>.*)$")
_VERSION = re.compile(r"^NCCL version (\S+)")
_SET_BY_ENV = re.compile(r"^(NCCL_[A-Z0-9_]+) set by environment to (.*)$")
_COMM = re.compile(r"^comm \S+ rank (\d+) nRanks (\d+) ")
_COUNTS = re.compile(r"^(\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels, "
                     r"(\d+) p2p channels")
_RING = re.compile(r"^Channel \d+/(\d+) :(?!.* via )")
_VIA = re.compile(r"^Channel \d+(?:/\d+)? : .* via (\S+)")
_TUNING = re.compile(r"^(\w+): (\d+) Bytes -> Algo (\S+) proto (\S+) "
                     r"channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")


@dataclass
class EffectiveNccl:
    """The settings NCCL reported, merged over ranks. ``None``: NCCL printed nothing about it."""

    version: str | None = None
    nranks: int | None = None
    coll_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    transports: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    choices: list[dict[str, Any]] = field(default_factory=list)
    ranks_seen: int = 0
    lines: int = 0  # NCCL lines read; 0 means there was no log to judge from

    def allreduce_algos(self) -> list[str]:
        """Distinct ``ALGO/PROTO`` pairs NCCL chose for AllReduce, sorted."""
        return sorted({f"{c['algo']}/{c['proto']}" for c in self.choices
                       if str(c["collective"]).lower() == "allreduce"})

    def to_columns(self) -> dict[str, object]:
        """Flat result columns, all prefixed ``nccl_``; unknown values are None."""
        return {
            "nccl_version": self.version,
            "nccl_nranks": self.nranks,
            "nccl_coll_channels": self.coll_channels,
            "nccl_nvls_channels": self.nvls_channels,
            "nccl_p2p_channels": self.p2p_channels,
            "nccl_transports": "+".join(self.transports) or None,
            "nccl_allreduce_algos": "+".join(self.allreduce_algos()) or None,
            "nccl_ranks_seen": self.ranks_seen,
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class _Reader:
    """Accumulates lines of one or more rank logs."""

    def __init__(self) -> None:
        self.eff = EffectiveNccl()
        self.ranks: set[tuple[str, str]] = set()
        self.transports: set[str] = set()
        self.choices: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.comm_size: dict[tuple[str, str, str], int] = {}  # (host, pid, tid) -> current nRanks
        self.counts: list[tuple[int, int, int, int]] = []  # (nRanks, coll, nvls, p2p) per comm
        self.ring_channels: list[tuple[int, int]] = []  # (nRanks, channels) from ring lines

    def feed(self, line: str, source: str) -> None:
        match = _PREFIX.match(line.rstrip("\r\n"))
        if match:
            host, pid, tid, msg = match["host"], match["pid"], match["tid"], match["msg"]
        else:
            loose = _ANYWHERE.search(line.rstrip("\r\n"))
            if not loose:
                return
            host, pid, tid, msg = source, "", "", loose["msg"]
        self.eff.lines += 1
        self.ranks.add((host, pid))
        self._message((host, pid, tid), msg.strip())

    def _message(self, thread: tuple[str, str, str], msg: str) -> None:
        eff = self.eff
        if m := _SET_BY_ENV.match(msg):
            value = m[2].strip()
            eff.env[m[1]] = value[:-1] if value.endswith(".") else value
        elif m := _VERSION.match(msg):
            eff.version = eff.version or m[1]
        elif m := _COMM.match(msg):
            self.comm_size[thread] = int(m[2])
            eff.nranks = max(eff.nranks or 0, int(m[2]))
        elif m := _COUNTS.match(msg):
            size = self.comm_size.get(thread, 0)
            self.counts.append((size, int(m[1]), int(m[3]), int(m[4])))
        elif m := _VIA.match(msg):
            # NET/IB/0/GDRDMA -> NET/IB/GDRDMA: device indexes would make every NIC distinct
            self.transports.add("/".join(p for p in m[1].split("/") if not p.isdigit()))
        elif m := _RING.match(msg):
            self.ring_channels.append((self.comm_size.get(thread, 0), int(m[1])))
        elif m := _TUNING.match(msg):
            choice = {"collective": m[1], "bytes": int(m[2]), "algo": m[3], "proto": m[4],
                      "channels": int(m[6]) - int(m[5]) + 1}
            self.choices.setdefault(tuple(choice.values()), choice)

    def result(self) -> EffectiveNccl:
        eff = self.eff
        eff.ranks_seen = len(self.ranks)
        eff.transports = sorted(self.transports)
        eff.choices = sorted(self.choices.values(),
                             key=lambda c: (c["collective"], c["bytes"], c["algo"], c["proto"]))
        # Servers open several communicators (a 1-rank one among them): report the largest.
        if self.counts:
            top = max(c[0] for c in self.counts)
            eff.coll_channels, eff.nvls_channels, eff.p2p_channels = _mode(
                [c[1:] for c in self.counts if c[0] == top])
        elif self.ring_channels:
            top = max(r[0] for r in self.ring_channels)
            eff.coll_channels = max(r[1] for r in self.ring_channels if r[0] == top)
        return eff


def _mode(values: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    return Counter(values).most_common(1)[0][0]


def parse(text: str) -> EffectiveNccl:
    """Read NCCL INFO lines out of ``text`` (one rank's file, or a mixed server log)."""
    reader = _Reader()
    for line in text.splitlines():
        reader.feed(line, "<text>")
    return reader.result()


def parse_files(paths: Iterable[Path]) -> EffectiveNccl:
    """Merge per-rank files, streamed line by line; missing or unreadable files are skipped."""
    reader = _Reader()
    for path in sorted(Path(p) for p in paths):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    reader.feed(line, str(path))
        except OSError:
            continue
    return reader.result()


def _same(asked: str, ran: str) -> bool:
    asked, ran = asked.strip(), ran.strip()
    if asked.lower() == ran.lower():
        return True
    try:
        return int(asked) == int(ran)
    except ValueError:
        return False


def mismatches(requested: Mapping[str, str], eff: EffectiveNccl,
               inherited: Mapping[str, str] | None = None) -> list[str]:
    """Warnings where NCCL's own log disagrees with the NCCL_* variables servetune set.

    ``inherited``: NCCL_* variables the server got from the caller's environment rather
    than from servetune (so they are not blamed on the server). No log, no warnings.
    """
    if eff.lines == 0:
        return []
    inherited = inherited or {}
    asked = {k: v for k, v in requested.items() if k.startswith("NCCL_") and k not in _DEBUG_VARS}
    out: list[str] = []
    one_rank = eff.nranks == 1
    unchecked = [k for k in _ALGO_VARS if k in asked] if one_rank else []
    if unchecked:
        out.append(f"NCCL ran with one rank: {', '.join(unchecked)} cannot be checked "
                   "(NCCL applies and prints algorithm settings only with 2 or more ranks)")
    for name, value in sorted(asked.items()):
        if name in unchecked:
            continue
        ran = eff.env.get(name)
        if ran is None:
            out.append(f"asked {name}={value}, NCCL printed no 'set by environment' line for it")
        elif not _same(value, ran):
            out.append(f"asked {name}={value}, NCCL ran with {ran}")
    for name, ran in sorted(eff.env.items()):
        if name in asked or name in _DEBUG_VARS:
            continue
        if name in inherited:
            out.append(f"{name}={ran} came from the inherited environment, not from servetune")
        else:
            out.append(f"{name}={ran} was set by the server, not by servetune")
    return out


def debug_env(trial_dir: Path) -> dict[str, str]:
    """The env that makes every rank write its INFO lines into the trial folder."""
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
        "NCCL_DEBUG_FILE": str(Path(trial_dir) / DEBUG_FILE_PATTERN),
    }


def debug_files(trial_dir: Path) -> list[Path]:
    """The per-rank files written under ``debug_env(trial_dir)``."""
    return sorted(Path(trial_dir).glob("nccl.*.log"))
