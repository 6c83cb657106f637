"""The proxy's file protocol with its launcher, and the names of its profile spans.

Files in ``--out``:
  proxy_rounds.jsonl  rank 0 appends one JSON line per event: ready, round, profile,
                      wrong_result
  proxy_control       the launcher's latest request, ``<seq> round <index>`` or
                      ``<seq> profile <steps>`` (a bare ``<index>``: that round); requests are
                      served in order of ``seq``
  traces/             ``rank<R>.trace.json.gz`` per rank after a profile request (or
                      ``--profile-dir``)

Profile spans (``record_function``, one per replay): ``servetune.verify`` (the verify pass),
``servetune.compute_only`` (the same pass with its collectives as no-ops) and
``servetune.comm_alone`` (the pass's collectives with nothing between them); a collective run
eagerly on CPU sits in a ``servetune.comm.<op>`` span. ``STEP_SPANS`` tells launchers.trace
how to read them. No torch here: the launcher and the trace reader import this module.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launchers.trace.events import StepSpans

ROUNDS_FILE = "proxy_rounds.jsonl"
CONTROL_FILE = "proxy_control"
PROFILE_DIR = "traces"

SPAN_PREFIX = "servetune."
COMM_SPAN_PREFIX = "servetune.comm."  # launchers.proxy.comm.collectives writes these
VERIFY_SPAN = SPAN_PREFIX + "verify"
COMPUTE_SPAN = SPAN_PREFIX + "compute_only"
COMM_ALONE_SPAN = SPAN_PREFIX + "comm_alone"
# any servetune.<kind> but a collective's span: older traces named their steps differently
STEP_PATTERN = re.compile(r"^servetune\.(?!comm\.)(?P<stage>[A-Za-z_]+)$")
STEP_SPANS = StepSpans(STEP_PATTERN, (COMM_SPAN_PREFIX,))


def trace_name(rank: int) -> str:
    return f"rank{rank}.trace.json.gz"


@dataclass(frozen=True)
class Request:
    """One line of proxy_control: ``seq`` orders the requests; ``value`` is the round index of
    a round, the replays per span of a profile."""

    seq: int
    action: str  # "round" | "profile"
    value: int

    @classmethod
    def parse(cls, text: str) -> Request | None:
        words = text.split()
        try:
            if len(words) == 1:
                return cls(int(words[0]), "round", int(words[0]))
            if len(words) == 3 and words[1] in ("round", "profile"):
                return cls(int(words[0]), words[1], int(words[2]))
        except ValueError:
            pass
        return None

    def line(self) -> str:
        return f"{self.seq} {self.action} {self.value}\n"


def write_request(folder: Path, request: Request) -> None:
    """Replace proxy_control atomically with ``request``."""
    control = folder / CONTROL_FILE
    tmp = control.with_name(CONTROL_FILE + ".tmp")
    tmp.write_text(request.line())
    tmp.replace(control)


def next_request(control: Path, last: int, idle_timeout: float, parent: int) -> Request | None:
    """The launcher's next request (seq above ``last``); None when idle too long or orphaned
    (the parent ``parent`` is gone)."""
    deadline = time.monotonic() + idle_timeout
    while time.monotonic() < deadline and os.getppid() == parent:
        try:
            request = Request.parse(control.read_text())
        except OSError:
            request = None
        if request is not None and request.seq > last:
            return request
        time.sleep(0.005)
    return None


class Events:
    """Rank 0's JSON lines: echoed to stdout (the log) and appended to the rounds file."""

    def __init__(self, path: Path | None, active: bool) -> None:
        self.path, self.active = path, active

    def emit(self, event: str, **data: Any) -> None:
        if not self.active:
            return
        line = json.dumps({"event": event, **data}, default=str)
        print(line, flush=True)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
