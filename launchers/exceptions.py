"""The exception a failed server logged, read from its log text.

After any exception in a scheduler, SGLang logs it whole and then tears its own tree down
(shared/reference/real-sglang.md; the lines as SGLang 0.5.16 printed them on an H200)::

    [2026-12-01 16:28:21.155] Scheduler hit an exception: Traceback (most recent call last):
      File ".../sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process
    ...
    RuntimeError: Cannot find any model weights with `.models/tiny-llama`

    [2026-12-01 16:28:21.155] Received sigquit from a child process. It usually means the child failed.
    [2026-12-01 16:28:21.155] kill_process_tree called: parent_pid=796, include_parent=True, pid=796

(with ``TP<n>`` tags in the brackets at TP > 1, one block per failing rank). A check of
SGLang's own arguments fails in the launching process instead, as a plain Python traceback
(``prepare_server_args`` ... ``AssertionError``). The lines after the exception say only that
something failed; the exception says what.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from launchers.sglang.release.logs import ARGUMENT_CODE as _ARGUMENT_CODE
from launchers.sglang.release.logs import LINE_START as _LOG_LINE
from launchers.sglang.release.logs import SCHEDULER_EXCEPTION

TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Exit|Interrupt|Failure))"
    r"(?::\s?(.*))?$")
_CHAINING = ("During handling of the above exception", "The above exception was the direct")
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+), in (\S+)')
_WEIGHTS = re.compile(r"Cannot find any model weights|does not appear to have a file named "
                      r"\S*\.(?:safetensors|bin|pt)\b|no file named \S*(?:safetensors|\.bin)")


@dataclass(frozen=True)
class LoggedException:
    """One logged exception: its type, text, the innermost frame and the traceback."""

    type: str
    message: str
    where: str  # "file:line in function" of the innermost frame
    traceback: str
    scheduler: bool  # logged by a scheduler ("Scheduler hit an exception")
    code: str = ""  # the innermost frame's source line, as the traceback shows it

    @property
    def kind_hint(self) -> str | None:
        """What the exception is about: weights, module, arguments; None: say nothing."""
        name = self.type.rsplit(".", 1)[-1]
        if _WEIGHTS.search(self.message):
            return "weights"
        if name in ("ModuleNotFoundError", "ImportError"):
            return "module"
        if name in ("AssertionError", "ValueError") and _ARGUMENT_CODE.search(self.where):
            return "arguments"
        return None

    def summary(self) -> str:
        """One line: ``Type: message`` (a bare assert: where it is)."""
        text = " ".join(self.message.split())
        if text:
            return f"{self.type}: {text}"[:300]
        code = f": {self.code}" if self.code else ""
        return f"{self.type} in {self.where}{code}"[:300]

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        del data["traceback"]
        return data


def _blocks(lines: list[str]) -> list[tuple[int, bool]]:
    """(start line, logged by a scheduler) of every traceback in the log."""
    found = []
    for i, line in enumerate(lines):
        if SCHEDULER_EXCEPTION in line and TRACEBACK in line:
            found.append((i, True))
        elif line.rstrip() == TRACEBACK:
            found.append((i, False))
    return found


def _read_block(lines: list[str], start: int, scheduler: bool) -> LoggedException | None:
    """The traceback from ``start`` to the next log line (or the end)."""
    end = start + 1
    while end < len(lines) and not _LOG_LINE.match(lines[end]):
        if lines[end].rstrip() == TRACEBACK and not scheduler:
            break
        end += 1
    body = lines[start:end]
    exception_at = None
    frame = code = ""
    for i, line in enumerate(body[1:], start=1):
        frame_match = _FRAME.match(line)
        if frame_match:
            path, number, function = frame_match.groups()
            if "/sglang/" in path:  # from the package on: the same on every machine
                path = "/sglang/" + path.split("/sglang/", 1)[1]
            frame = f"{path}:{number} in {function}"
            following = body[i + 1].strip() if i + 1 < len(body) else ""
            code = "" if set(following) <= set("^~ ") else following
            continue
        if not line.startswith((" ", "\t")) and _EXCEPTION_LINE.match(line.rstrip()):
            exception_at = i
    if exception_at is None:
        return None
    match = _EXCEPTION_LINE.match(body[exception_at].rstrip())
    assert match is not None
    rest = [ln.rstrip() for ln in body[exception_at + 1:]
            if ln.strip() and not ln.startswith(_CHAINING)]
    message = "\n".join([match.group(2) or "", *rest]).strip()
    return LoggedException(match.group(1), message, frame, "\n".join(body).rstrip(), scheduler,
                           code)


def logged_exception(log_text: str) -> LoggedException | None:
    """The exception that failed the server: the first one a scheduler logged (at TP > 1 the
    other ranks often fail after it, of it), else the last plain traceback through SGLang's
    code (the launching process's own); None when the log holds none."""
    lines = log_text.splitlines()
    blocks = _blocks(lines)
    for start, scheduler in blocks:
        if scheduler:
            found = _read_block(lines, start, True)
            if found is not None:
                return found
    for start, _ in reversed(blocks):
        found = _read_block(lines, start, False)
        # SGLang's own (a server thread's unrelated error, e.g. a client that hung up, is not)
        if found is not None and '/sglang/' in found.traceback:
            return found
    return None
