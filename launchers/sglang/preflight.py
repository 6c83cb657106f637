"""Preflight: check server flags against the installed SGLang's own argument parser.

SGLang renames flags between releases; a renamed flag otherwise shows up only after a
ten-minute model load. Here the flags part of a command (what follows ``sglang serve`` or
``python -m sglang.launch_server``) is parsed by SGLang's real parser,
``ServerArgs.add_cli_args(argparse.ArgumentParser(prog="sglang serve"))``, exactly as
``sglang.srt.server_args.prepare_server_args`` builds it, and nothing past parsing runs:
no ``ServerArgs.from_cli_args``, no hardware.

The heavy import (torch, triton, ~1.5-2.5 s) runs in a subprocess of the interpreter that runs
SGLang, never in the driver or the trial. That subprocess stays up and parses every later
argv in milliseconds (one per checker and interpreter; it exits when its owner does). Answers are
cached per (interpreter, argv) in memory, and on disk in a JSON file when asked, keyed also
by the installed SGLang version so that an upgrade invalidates them. ``ok`` is None when
the check cannot run with that interpreter; the caller then launches unchecked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0  # seconds for one subprocess (import + parser build + parses)
CACHE_FORMAT = 1

# Runs in the target interpreter: one request per line on stdin (a JSON list of argvs), one
# JSON object per line on the original stdout, until EOF. Everything the import prints, at
# the Python or the C level, goes to stderr so that it cannot corrupt the answer.
_PARSE_SCRIPT = r"""
import json, logging, os, re, sys
_out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
_ansi = re.compile(r"\x1b\[[0-9;]*m")

def _reply(obj):
    _out.write(json.dumps(obj) + "\n")
    _out.flush()

try:
    import argparse
    from sglang.srt.server_args import ServerArgs

    class Rejected(Exception):
        pass

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise Rejected(message)

        def exit(self, status=0, message=None):
            raise Rejected((message or "").strip()
                           or "argparse exited with status %d (e.g. --help)" % status)

    parser = Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
except Exception as err:
    _reply({"importable": False, "error": "%s: %s" % (type(err).__name__, err)})
    sys.exit(0)
try:
    import sglang
    version = str(sglang.__version__)
except Exception:
    version = None

class Collect(logging.Handler):
    def __init__(self):
        logging.Handler.__init__(self, logging.WARNING)
        self.messages = []

    def emit(self, record):
        if record.name.startswith("sglang"):
            self.messages.append(_ansi.sub("", record.getMessage()))

def abbreviations(argv):
    # argparse accepts a unique prefix of an option: a flag renamed to a longer name still
    # parses, silently meaning the new one. Say so.
    found = []
    for word in argv:
        name = word.split("=", 1)[0]
        if name.startswith("--") and len(name) > 2 and name not in options:
            longer = sorted(o for o in options if o.startswith(name))
            found.append("%s is not an option of this SGLang: argparse took it as an "
                         "abbreviation of %s" % (name, " or ".join(longer) or "another option"))
    return found

options = parser._option_string_actions

def check(argvs):
    results = []
    for argv in argvs:
        collect = Collect()
        logging.getLogger().addHandler(collect)
        try:
            parser.parse_args(argv)
            results.append({"ok": True, "warnings": abbreviations(argv) + collect.messages})
        except Rejected as err:
            results.append({"ok": False, "error": str(err), "warnings": collect.messages})
        except Exception as err:
            results.append({"ok": False, "error": "%s: %s" % (type(err).__name__, err),
                            "warnings": collect.messages})
        finally:
            logging.getLogger().removeHandler(collect)
    return results

for line in sys.stdin:
    if line.strip():
        _reply({"importable": True, "version": version, "results": check(json.loads(line))})
"""

# The installed SGLang's version from its metadata: cheap (~50 ms, no torch), used to key
# the disk cache. null when there is no sglang distribution.
_VERSION_SCRIPT = r"""
import json
try:
    from importlib.metadata import version
    v = version("sglang")
except Exception:
    v = None
print(json.dumps(v))
"""


@dataclass(frozen=True)
class PreflightResult:
    """SGLang's verdict on one argv.

    ``ok`` is None when the check could not run (SGLang not importable with that
    interpreter, or the check timed out): the caller launches unchecked.
    """

    ok: bool | None
    error: str = ""  # SGLang's own argparse message when rejected
    sglang_version: str | None = None
    # Accepted, but worth a look: SGLang's own warnings while parsing (deprecated flags),
    # and words argparse took as an abbreviation of a longer option (a renamed flag).
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "sglang_version": self.sglang_version,
                "warnings": list(self.warnings)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreflightResult:
        return cls(ok=data["ok"], error=str(data.get("error", "")),
                   sglang_version=data.get("sglang_version"),
                   warnings=tuple(str(w) for w in data.get("warnings", ())))


SKIPPED = PreflightResult(ok=None)

Argv = tuple[str, ...]


class _Unavailable(Exception):
    """The check cannot run with that interpreter; the message says why, worded for the log.

    Not importable, not runnable, or too slow: the interpreter is then skipped for the rest
    of the process with one warning, so a broken setup costs one timeout, not one per trial.
    """


class ParserCheck:
    """The checker with its caches. The module functions use one shared instance."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, Argv], PreflightResult] = {}
        self._skipped: set[str] = set()  # interpreters the check cannot run with
        self._versions: dict[str, str | None] = {}
        self._residents: dict[str, _Resident] = {}
        weakref.finalize(self, _close_all, self._residents)  # at exit, or when dropped

    def close(self) -> None:
        """Stop the parser processes (they also stop by themselves when this process ends)."""
        with self._lock:
            _close_all(self._residents)

    # ------------------------------------------------------------ public
    def check_many(self, argvs: Sequence[Sequence[str]], python: str | None = None,
                   cache_path: Path | None = None) -> list[PreflightResult]:
        interpreter = _interpreter(python)
        wanted = [_argv(a) for a in argvs]
        known: dict[Argv, PreflightResult] = {}
        with self._lock:
            if interpreter in self._skipped:
                return [SKIPPED for _ in wanted]
            for a in wanted:
                if (interpreter, a) in self._memory:
                    known[a] = self._memory[(interpreter, a)]
        missing = _unique(a for a in wanted if a not in known)
        version = None
        if missing and cache_path is not None:
            version = self._installed_version(interpreter)
            if version is not None:
                on_disk = _load_cache(cache_path)
                for a in missing:
                    data = on_disk.get(_disk_key(interpreter, version, a))
                    if data is not None:
                        known[a] = PreflightResult.from_json(data)
                missing = [a for a in missing if a not in known]
        if missing:
            try:
                fresh = self._run_parser(interpreter, missing)
            except _Unavailable as why:
                self._skip(interpreter, why)
                return [known.get(a, SKIPPED) for a in wanted]
            known.update(fresh)
            if cache_path is not None and version is not None:
                _store_cache(cache_path, {_disk_key(interpreter, version, a): r.to_json()
                                          for a, r in fresh.items()})
        with self._lock:
            self._memory.update({(interpreter, a): r for a, r in known.items()})
        return [known[a] for a in wanted]

    def check_argv(self, argv: Sequence[str], python: str | None = None,
                   cache_path: Path | None = None) -> PreflightResult:
        return self.check_many([argv], python, cache_path)[0]

    # ------------------------------------------------------------ internals
    def _skip(self, interpreter: str, why: _Unavailable) -> None:
        with self._lock:
            first = interpreter not in self._skipped
            self._skipped.add(interpreter)
        if first:
            logger.warning("%s", why)

    def _installed_version(self, interpreter: str) -> str | None:
        with self._lock:
            if interpreter in self._versions:
                return self._versions[interpreter]
        try:
            done = _run([interpreter, "-c", _VERSION_SCRIPT], "", self.timeout)
            value = json.loads(done.stdout) if done.returncode == 0 else None
            version = value if isinstance(value, str) else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            version = None
        with self._lock:
            self._versions[interpreter] = version
        return version

    def _resident(self, interpreter: str) -> _Resident:
        with self._lock:
            resident = self._residents.get(interpreter)
            if resident is not None and resident.proc.poll() is not None:
                resident.close()  # it answered before and has died since: start another
                resident = None
            if resident is None:
                resident = self._residents[interpreter] = _Resident(interpreter)
            return resident

    def _run_parser(self, interpreter: str, argvs: list[Argv]) -> dict[Argv, PreflightResult]:
        skipped = f"SGLang not importable with {interpreter}: preflight skipped"
        try:
            resident = self._resident(interpreter)
            line = resident.ask(json.dumps([list(a) for a in argvs]), self.timeout)
        except subprocess.TimeoutExpired:
            self._drop(interpreter)
            raise _Unavailable(f"SGLang preflight with {interpreter} timed out after "
                               f"{self.timeout:g} s: preflight skipped") from None
        except OSError as err:
            raise _Unavailable(f"{skipped} (cannot run it: {err.strerror or err})") from None
        try:
            answer = json.loads(line) if line is not None else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not answer.get("importable"):
            code, stderr = self._drop(interpreter)
            if not isinstance(answer, dict):
                raise _Unavailable(f"{skipped} (exit {code}: {_tail(stderr)})")
            raise _Unavailable(f"{skipped} ({answer.get('error') or 'unknown error'})")
        version = answer.get("version")
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(argvs):
            raise _Unavailable(f"SGLang preflight with {interpreter} answered malformed "
                               "results: preflight skipped")
        return {
            argv: PreflightResult(ok=bool(r["ok"]), error=str(r.get("error", "")),
                                  sglang_version=version,
                                  warnings=tuple(str(w) for w in r.get("warnings", ())))
            for argv, r in zip(argvs, results, strict=True)
        }


    def _drop(self, interpreter: str) -> tuple[int | None, str]:
        """Stop an interpreter's parser; returns its exit code and the tail of its stderr."""
        with self._lock:
            resident = self._residents.pop(interpreter, None)
        return resident.close() if resident is not None else (None, "")


class _Resident:
    """A parser process that stays up: one request line in, one answer line out, until EOF
    on its stdin, so that it ends with the process that owns it, however that one ends.
    Its stderr (import noise, a crash) goes to a temporary file, read back on failure."""

    def __init__(self, interpreter: str) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.lock = threading.Lock()
        self.buffer = b""
        try:
            # Its own session: a timeout kills the whole group (a wrapper's children too).
            self.proc = subprocess.Popen([interpreter, "-c", _PARSE_SCRIPT],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.stderr, start_new_session=True)
        except OSError:
            self.stderr.close()
            raise

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


def _close_all(residents: dict[str, _Resident]) -> None:
    while residents:
        _, resident = residents.popitem()
        with contextlib.suppress(Exception):
            resident.close()


_checker = ParserCheck()


def check_argv(argv: Sequence[str], python: str | None = None,
               cache_path: Path | None = None) -> PreflightResult:
    """Parse one argv (flags only) with SGLang's parser in ``python`` (default: this one)."""
    return _checker.check_argv(argv, python, cache_path)


def check_many(argvs: Sequence[Sequence[str]], python: str | None = None,
               cache_path: Path | None = None) -> list[PreflightResult]:
    """Parse many argvs in one subprocess (cached ones are not parsed again)."""
    return _checker.check_many(argvs, python, cache_path)


# ---------------------------------------------------------------- the interpreter

_PYTHON_NAME = re.compile(r"^(python|pypy)")
# pip's /bin/sh trampoline (for long or spaced paths), and uv's relocatable one.
_SH_EXEC = re.compile(r"""^'''exec' (?P<q>["']?)(?P<path>[^$]+?)(?P=q) "\$0" "\$@"$""")
_SH_EXEC_RELOCATABLE = re.compile(
    r"""^'''exec' "\$\(dirname -- "\$\(realpath -- "\$0"\)"\)"/'(?P<name>[^']+)' "\$0" "\$@"$"""
)


def python_for(server_cmd: Sequence[str]) -> str | None:
    """The interpreter that runs SGLang for a server command, or None (use sys.executable).

    ``X [opts] -m sglang...`` -> X; a console script (``sglang serve``) -> the interpreter
    of its shebang (pip's ``/bin/sh`` trampoline for long paths included).
    """
    if not server_cmd:
        return None
    first = server_cmd[0]
    if _runs_sglang_module(server_cmd[1:]):
        found = shutil.which(first) or first
        return os.path.abspath(found) if os.sep in found else found
    script = shutil.which(first)
    if script is None:
        return None
    return _shebang_python(Path(script))


def _runs_sglang_module(args: Sequence[str]) -> bool:
    """Whether interpreter arguments are ``[options] -m sglang...``."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "-m":
            return i + 1 < len(args) and args[i + 1].split(".")[0] == "sglang"
        if not word.startswith("-") or word in ("-c", "-"):
            return False  # a script, a command string or stdin: not the module form
        i += 2 if word in ("-X", "-W") else 1
    return False


def _shebang_python(script: Path) -> str | None:
    try:
        with script.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    try:
        words = shlex.split(head[0][2:].strip())
    except ValueError:
        return None
    if not words:
        return None
    if Path(words[0]).name == "env":
        names = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        return (shutil.which(names[0]) or None) if names else None
    if Path(words[0]).name in ("sh", "bash") and len(head) > 1:
        line = head[1].strip()
        if match := _SH_EXEC.match(line):
            return match.group("path")
        if match := _SH_EXEC_RELOCATABLE.match(line):
            return str(script.resolve().parent / match.group("name"))
        return None
    return words[0] if _PYTHON_NAME.match(Path(words[0]).name) else None


# ---------------------------------------------------------------- helpers


def _run(cmd: list[str], stdin: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (no shell) in its own process group; on a timeout or an interrupt kill
    that group, so that nothing it started can keep the pipes open and hang the caller."""
    with subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _interpreter(python: str | None) -> str:
    """The cache identity of an interpreter: an absolute path, symlinks kept (a venv's
    python is a symlink to the base one, and the two see different packages)."""
    name = python or sys.executable
    found = shutil.which(name) or name
    return os.path.abspath(found) if os.sep in found else found


def _argv(argv: Sequence[str]) -> Argv:
    if isinstance(argv, str):
        raise TypeError("argv must be a sequence of words, not a string")
    return tuple(str(word) for word in argv)


def _unique(argvs: Any) -> list[Argv]:
    return list(dict.fromkeys(argvs))


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"


def _disk_key(interpreter: str, version: str, argv: Argv) -> str:
    return json.dumps([interpreter, version, list(argv)])


def _load_cache(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        logger.debug("preflight cache %s unreadable (%s): ignored", path, err)
        return {}
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(v, dict) and isinstance(v.get("ok"), bool)}


def _store_cache(path: Path, new: dict[str, dict[str, Any]]) -> None:
    """Merge ``new`` into the file: re-read, write a temp file beside it, os.replace.

    Concurrent writers never leave a torn file; at worst one's fresh entries are lost and
    parsed again later.
    """
    if not new:
        return
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = _load_cache(path)
        entries.update(new)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as handle:
            json.dump({"format": CACHE_FORMAT, "entries": entries}, handle, indent=0)
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        logger.warning("preflight cache %s not written: %s", path, err)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
