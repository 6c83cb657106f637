"""The resident helper process: SGLang's reader kept up in SGLang's interpreter.

One request line in, one answer line out, until EOF on its stdin, so that it ends with the
process that owns it, however that one ends. It carries the marker env
(``SERVETUNE_TRIAL=<experiment>/preflight``, ``SERVETUNE_OWNER``): a reap between trials
leaves it alone while its owner lives (``launchers/process.py``, ``HELPERS``), and the
experiment's final sweep ends it. Its stderr (import noise, a crash) goes to a temporary
file, read back on failure.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from launchers.process import MARKER_ENV, OWNER_ENV, check_env_values, helper_marker

SERVER_SOURCE = Path(__file__).with_name("parser_server.py")
# Sent along with the reader, as a module of that name (the reader imports nothing of ours).
SENT_MODULES = {"servetune_resolution": Path(__file__).with_name("resolution.py")}
HELPER = "preflight"  # the trial part of the marker
UNOWNED_EXPERIMENT = "servetune"  # the marker's experiment when no experiment runs (plan, knobs)


def marker_for(experiment: str | None) -> str:
    return helper_marker(experiment or UNOWNED_EXPERIMENT, HELPER)


def marked_env(marker: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus the helper's marker and owner."""
    env = {**(os.environ if base is None else base), MARKER_ENV: marker,
           OWNER_ENV: str(os.getpid())}
    check_env_values(env)
    return env


def server_source() -> str:
    """The reader's source text, sent to the target interpreter with ``-c``: a bootstrap that
    loads the modules it needs as modules, then the reader as ``__main__``."""
    loads = "".join(f"_load({name!r}, {path.read_text()!r})\n"
                    for name, path in SENT_MODULES.items())
    return ("import sys, types\n"
            "def _load(name, text):\n"
            "    module = types.ModuleType(name)\n"
            "    sys.modules[name] = module\n"
            "    exec(compile(text, '<servetune ' + name + '>', 'exec'), module.__dict__)\n"
            f"{loads}"
            f"exec(compile({SERVER_SOURCE.read_text()!r}, '<servetune reader>', 'exec'))\n")


class Resident:
    """One reader process in one interpreter, marked, in a session of its own (a timeout
    kills its whole group: a wrapper script's children too)."""

    def __init__(self, interpreter: str, marker: str) -> None:
        self.marker = marker
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.lock = threading.Lock()
        self.buffer = b""
        try:
            self.proc = subprocess.Popen([interpreter, "-c", server_source()],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.stderr, env=marked_env(marker),
                                         start_new_session=True)
        except OSError:
            self.stderr.close()
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ask(self, request: str, timeout: float) -> str | None:
        """The answer line, or None when the process ended without one (TimeoutExpired)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self.lock:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.write(request.encode() + b"\n")
                self.proc.stdin.flush()
            fd = self.proc.stdout.fileno()
            deadline = time.monotonic() + timeout
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(self.proc.args, timeout)
                readable, _, _ = select.select([fd], [], [], left)
                if not readable:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:  # EOF: it ended
                    line, self.buffer = self.buffer, b""
                    return line.decode("utf-8", "replace") or None
                self.buffer += chunk
            line, _, self.buffer = self.buffer.partition(b"\n")
            return line.decode("utf-8", "replace")

    def close(self) -> tuple[int | None, str]:
        """EOF, a second to exit, then SIGKILL to the group; the exit code and stderr."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        text = ""
        with contextlib.suppress(OSError, ValueError):
            self.stderr.seek(0)
            text = self.stderr.read().decode("utf-8", "replace")
            self.stderr.close()
        return self.proc.returncode, text


def close_all(residents: dict[tuple[str, str], Resident]) -> None:
    while residents:
        _, resident = residents.popitem()
        with contextlib.suppress(Exception):
            resident.close()


def run_marked(cmd: list[str], stdin: str, timeout: float, marker: str
               ) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (no shell, marked) in its own process group; on a timeout or an interrupt
    kill that group, so that nothing it started can keep the pipes open and hang the caller."""
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=marked_env(marker),
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
