"""Load a page in headless Chromium and read back what a user would see: console errors,
failed loads, the images' decoded sizes, and a full-page screenshot.

Talks the DevTools protocol over ``--remote-debugging-pipe`` (JSON messages ending in NUL on
fds 3 and 4), so no websocket library is needed. Chromium runs in its own session and its
whole process group is killed afterwards: it leaves nothing behind.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--disable-crash-reporter", "--disable-breakpad", "--remote-debugging-pipe")


# How long a fresh browser may take to answer its first command.
START_TIMEOUT = 20.0


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


@dataclass
class PageReport:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    images: list[dict[str, Any]] = field(default_factory=list)  # alt, complete, naturalWidth...
    title: str = ""
    screenshot: bytes = b""
    height: int = 0


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int) -> None:
        self.write_fd, self.read_fd = write_fd, read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.write_fd, json.dumps(message).encode() + b"\0")
        wanted = self.next_id
        deadline = time.monotonic() + timeout
        while True:
            for reply in self._read(deadline):
                if reply.get("id") == wanted:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    result: dict[str, Any] = reply.get("result", {})
                    return result
                self.events.append(reply)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.extend(self._read(deadline))

    def _read(self, deadline: float) -> list[dict[str, Any]]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("no answer from Chromium")
        ready, _, _ = select.select([self.read_fd], [], [], remaining)
        if not ready:
            raise TimeoutError("no answer from Chromium")
        chunk = os.read(self.read_fd, 1 << 20)
        if not chunk:
            raise RuntimeError("Chromium closed its DevTools pipe")
        self.buffer += chunk
        *messages, self.buffer = self.buffer.split(b"\0")
        return [json.loads(m) for m in messages if m]


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        method, params = e.get("method"), e.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.append(f"exception: {details.get('text')} {details.get('exception', {})}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = [a.get("value", a.get("description")) for a in params.get("args", [])]
            out.append(f"console.{params.get('type')}: {args}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.append(f"log {entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")
    return out


class ChromiumHung(TimeoutError):
    """Chromium stopped answering; the message carries what it logged and the last events."""


def load_page(path: Path, width: int = 1280, timeout: float = 20.0,
              attempts: int = 4) -> PageReport:
    """Open ``path`` (file://), wait for load, collect errors, image states, a screenshot.

    Chromium 156 on a loaded box sometimes never commits a navigation: every one of its
    processes asleep, the last event ``Page.frameStartedLoading`` (stop 28's CI; here, with
    three CPU hogs on the 2 cores, 10 of 60 loads of a one-line page). A load takes 1-3 s
    when it works, so a browser silent for ``timeout`` s (``START_TIMEOUT`` for its first
    answer) is replaced by a fresh one, ``attempts`` browsers in all. A page that hangs
    Chromium hangs each of them, and the failure then carries what each one saw and logged."""
    binary = chromium_binary()
    if binary is None:
        raise FileNotFoundError("chromium")
    hangs: list[str] = []
    for _ in range(attempts):
        try:
            return _load_once(binary, path, width, timeout)
        except ChromiumHung as hung:
            hangs.append(str(hung))
    raise ChromiumHung(f"{attempts} browsers hung:\n" + "\n---\n".join(hangs))


def _load_once(binary: str, path: Path, width: int, timeout: float) -> PageReport:
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    # Move the child's ends above fd 4 first, so that putting them on 3 and 4 in the child
    # never overwrites one with the other.
    high_r = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
    high_w = fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(cmd_r)
    os.close(out_w)

    def child_fds() -> None:  # DevTools reads commands from fd 3 and writes to fd 4
        os.dup2(high_r, 3)  # dup2 leaves the copies inheritable
        os.dup2(high_w, 4)

    profile = tempfile.mkdtemp(prefix="st-chromium-")
    log_path = Path(profile) / "chromium.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},900",
             "about:blank"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            close_fds=False, preexec_fn=child_fds, start_new_session=True)
    os.close(high_r)
    os.close(high_w)
    pipe = _Pipe(cmd_w, out_r)
    report = PageReport()
    started = time.monotonic()
    try:
        try:
            _drive(pipe, path, width, timeout, report)
        except TimeoutError as hung:
            seen = [e.get("method") for e in pipe.events][-12:]
            raise ChromiumHung(f"{hung} after {time.monotonic() - started:.1f} s; events seen: "
                               f"{seen}; chromium's log ends:\n{_tail(log_path)}") from None
    finally:
        with contextlib.suppress(OSError):
            os.close(cmd_w)
        with contextlib.suppress(OSError):
            os.close(out_r)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group we started, nothing else
        proc.wait(timeout=10)
        for pid in leftovers(profile):  # helpers that left the group carry our profile path
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
    return report


def _drive(pipe: _Pipe, path: Path, width: int, timeout: float, report: PageReport) -> None:
    # The first answer waits for the browser's own start too (over 6 s once beside the
    # suite's other workers on the 2-core box): a page's ``timeout`` starts after it.
    target = pipe.send("Target.createTarget", {"url": "about:blank"},
                       timeout=max(timeout, START_TIMEOUT))
    session = pipe.send("Target.attachToTarget",
                        {"targetId": target["targetId"], "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Page"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900,
              "deviceScaleFactor": 1, "mobile": False}, session=session)
    pipe.send("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
    pipe.wait_event("Page.loadEventFired", timeout)
    time.sleep(0.3)  # late console messages
    probe = ("JSON.stringify({title: document.title, height: "
             "document.documentElement.scrollHeight, images: Array.from(document.images)"
             ".map(i => ({alt: i.alt, complete: i.complete, naturalWidth: i.naturalWidth, "
             "naturalHeight: i.naturalHeight, width: i.width}))})")
    value = pipe.send("Runtime.evaluate", {"expression": probe, "returnByValue": True},
                      session=session)["result"]["value"]
    page = json.loads(value)
    report.title, report.images = page["title"], page["images"]
    report.height = min(int(page["height"]), 16000)
    pipe.send("Emulation.setDeviceMetricsOverride", {"width": width,
              "height": report.height, "deviceScaleFactor": 1, "mobile": False},
              session=session)
    shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session,
                     timeout=timeout)
    report.screenshot = base64.b64decode(shot["data"])
    report.errors = _errors(pipe.events)
    with contextlib.suppress(Exception):
        pipe.send("Browser.close", timeout=5)


def _tail(log_path: Path, lines: int = 15) -> str:
    """The log's last lines, less the D-Bus complaints a container always draws."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError as e:
        return f"(no log: {e})"
    kept = [line for line in text.splitlines() if "dbus" not in line.lower()]
    return "\n".join(kept[-lines:]) or "(only D-Bus complaints)"


def leftovers(profile: str) -> list[int]:
    """Live processes whose command line names this run's private profile folder."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if p.info["status"] != psutil.STATUS_ZOMBIE and \
                    any(profile in part for part in p.info["cmdline"] or []):
                found.append(p.pid)
    return found
