"""Preflight: check a command and its env against the installed SGLang, before any launch.

SGLang renames flags between releases; a renamed flag otherwise shows up only after a
ten-minute model load, and SGLang reads a misspelt or malformed ``SGLANG_*`` variable without
a word (``EnvField.get`` falls back to the default with a Python warning). Here the flags
part of a command (what follows ``sglang serve`` or ``python -m sglang.launch_server``) is
parsed by SGLang's real parser, and each ``SGLANG_*`` value by its field in SGLang's env
registry (``EnvBool``, ``EnvInt``, ... ``parse``), in SGLang's own interpreter: the resident
reader of ``parser_server.py`` (``resident.py``), which imports SGLang once (torch, triton,
~1.5-2.5 s) and then answers in milliseconds. Answers are cached per (interpreter, question)
in memory, and on disk when asked (``preflight_cache.py``, keyed also by the installed SGLang
version). ``ok`` is None when the check cannot run with that interpreter; the caller then
launches unchecked.
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import weakref
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from launchers.sglang import preflight_cache
from launchers.sglang.interpreter import interpreter_id, python_for
from launchers.sglang.parser_server import VERSION_ARG
from launchers.sglang.resident import Resident, close_all, marker_for, run_marked, server_source

__all__ = ["SKIPPED", "EnvResult", "ParserCheck", "PreflightResult", "Resolution",
           "SGLangUnavailable", "check_argv", "check_env", "check_many", "python_for", "resolve"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0  # seconds for one answer (the first includes SGLang's import)
Argv = tuple[str, ...]
EnvValue = tuple[str, str]


@dataclass(frozen=True)
class PreflightResult:
    """SGLang's verdict on one argv; ``ok`` None: the check could not run."""

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


@dataclass(frozen=True)
class EnvResult:
    """SGLang's reading of one env variable's value; ``ok`` None: the check could not run.
    ``known`` False: SGLang's registry has no such name (it would ignore the variable)."""

    ok: bool | None
    known: bool | None = None
    error: str = ""  # the field's own parse error (e.g. '"x" is not a valid integer value')
    env_type: str | None = None  # EnvBool, EnvInt, ...
    sglang_version: str | None = None
    closest: str | None = None  # the registry's nearest name to an unknown one

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "known": self.known, "error": self.error,
                "env_type": self.env_type, "sglang_version": self.sglang_version,
                "closest": self.closest}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvResult:
        return cls(ok=data["ok"], known=data.get("known"), error=str(data.get("error", "")),
                   env_type=data.get("env_type"), sglang_version=data.get("sglang_version"),
                   closest=data.get("closest"))


@dataclass(frozen=True)
class Resolution:
    """SGLang's own resolution of one argv (``ServerArgs`` and its checks, resolution.py):
    ``ok`` None when it could not run; ``error`` SGLang's rejection; ``resolved`` what the
    server would run (its resolved fields); ``skipped`` checks that need hardware not here."""

    ok: bool | None
    error: str = ""
    resolved: dict[str, Any] | None = None
    skipped: tuple[str, ...] = ()
    placeholders: tuple[str, ...] = ()
    device: str | None = None
    sglang_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "error": self.error, "resolved": self.resolved,
                "skipped": list(self.skipped), "placeholders": list(self.placeholders),
                "device": self.device, "sglang_version": self.sglang_version}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Resolution:
        return cls(ok=data["ok"], error=str(data.get("error", "")),
                   resolved=data.get("resolved"), skipped=tuple(data.get("skipped", ())),
                   placeholders=tuple(data.get("placeholders", ())),
                   device=data.get("device"), sglang_version=data.get("sglang_version"))

    def at_port(self, port: int | None) -> Resolution:
        """This resolution for a launch on ``port`` (an answer from the disk cache may have
        been resolved for another port: the keys leave the port out)."""
        if port is None or not self.resolved or "port" not in self.resolved:
            return self
        return replace(self, resolved={**self.resolved, "port": port})


SKIPPED = PreflightResult(ok=None)
RESOLVE_SKIPPED = Resolution(ok=None)
ENV_SKIPPED = EnvResult(ok=None)


class SGLangUnavailable(Exception):
    """SGLang cannot be read with that interpreter (not importable, not runnable, too slow);
    the message says why, worded for the log."""


class ParserCheck:
    """The checker with its caches and resident readers. The module functions share one."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, Hashable], Any] = {}
        self._skipped: set[str] = set()  # interpreters the check cannot run with
        self._versions: dict[str, str | None] = {}
        self._stored: set[tuple[Path, str]] = set()  # (cache file, key) written or read
        self._residents: dict[tuple[str, str], Resident] = {}
        weakref.finalize(self, close_all, self._residents)  # at exit, or when dropped

    def close(self) -> None:
        """Stop the reader processes (they also stop by themselves when this process ends)."""
        with self._lock:
            close_all(self._residents)

    # ------------------------------------------------------------ public
    def check_many(self, argvs: Sequence[Sequence[str]], python: str | None = None,
                   cache_path: Path | None = None, experiment: str | None = None
                   ) -> list[PreflightResult]:
        """Parse many argvs (flags only) with SGLang's parser; cached ones are not parsed again.
        ``experiment`` names the reader's marker (``<experiment>/preflight``)."""
        wanted = [_argv(a) for a in argvs]
        answers = self._cached(wanted, python, cache_path, experiment, "parse")
        return [a if isinstance(a, PreflightResult) else SKIPPED for a in answers]

    def check_argv(self, argv: Sequence[str], python: str | None = None,
                   cache_path: Path | None = None, experiment: str | None = None
                   ) -> PreflightResult:
        return self.check_many([argv], python, cache_path, experiment)[0]

    def check_env(self, values: Sequence[EnvValue], python: str | None = None,
                  cache_path: Path | None = None, experiment: str | None = None
                  ) -> list[EnvResult]:
        """Read each (name, text) with SGLang's env registry, as SGLang would."""
        wanted = [(str(n), str(t)) for n, t in values]
        answers = self._cached(wanted, python, cache_path, experiment, "env")
        return [a if isinstance(a, EnvResult) else ENV_SKIPPED for a in answers]

    def resolve_many(self, argvs: Sequence[Sequence[str]], python: str | None = None,
                     cache_path: Path | None = None, experiment: str | None = None
                     ) -> list[Resolution]:
        """Each argv (flags only) through SGLang's own resolution and checks."""
        wanted = [_argv(a) for a in argvs]
        answers = self._cached(wanted, python, cache_path, experiment, "resolve")
        return [a if isinstance(a, Resolution) else RESOLVE_SKIPPED for a in answers]

    def read_levers(self, python: str | None = None, experiment: str | None = None
                    ) -> dict[str, Any]:
        """SGLang's options and env registry as ``parser_server`` describes them (``version``,
        ``options``, ``env``, ``env_error``). Raises SGLangUnavailable."""
        return self._ask(interpreter_id(python), experiment, {"op": "levers"})

    # ------------------------------------------------------------ caching
    def _cached(self, wanted: list[Any], python: str | None, cache_path: Path | None,
                experiment: str | None, op: str) -> list[Any]:
        interpreter = interpreter_id(python)
        known: dict[Any, Any] = {}
        with self._lock:
            if interpreter in self._skipped:
                return [None for _ in wanted]
            for q in wanted:
                if (interpreter, (op, q)) in self._memory:
                    known[q] = self._memory[(interpreter, (op, q))]
        missing = list(dict.fromkeys(q for q in wanted if q not in known))
        version = None
        if cache_path is not None:
            version = self._installed_version(interpreter, experiment)
        if missing and cache_path is not None and version is not None:
            on_disk = preflight_cache.load(cache_path)
            for q in missing:
                data = on_disk.get(_disk_key(op, interpreter, version, q))
                if data is not None:
                    known[q] = _from_json(op, data)
            with self._lock:
                self._stored.update((cache_path, _disk_key(op, interpreter, version, q))
                                    for q in missing if q in known)
            missing = [q for q in missing if q not in known]
        if missing:
            try:
                fresh = self._fresh(interpreter, experiment, op, missing)
            except SGLangUnavailable as why:
                self._skip(interpreter, why)
                return [known.get(q) for q in wanted]
            known.update(fresh)
        if cache_path is not None and version is not None:
            # Answers this process holds go to the file once, those from memory included: the
            # driver's answers (the search's identity) are what the trials read back there.
            self._store(cache_path, {_disk_key(op, interpreter, version, q): known[q]
                                     for q in wanted})
        with self._lock:
            self._memory.update({(interpreter, (op, q)): r for q, r in known.items()})
        return [known[q] for q in wanted]

    def _store(self, cache_path: Path, answers: dict[str, Any]) -> None:
        with self._lock:
            new = {k: r for k, r in answers.items() if (cache_path, k) not in self._stored}
            self._stored.update((cache_path, k) for k in new)
        preflight_cache.store(cache_path, {k: r.to_json() for k, r in new.items()})

    def _fresh(self, interpreter: str, experiment: str | None, op: str, questions: list[Any]
               ) -> dict[Any, Any]:
        if op in ("parse", "resolve"):
            answer = self._ask(interpreter, experiment,
                               {"op": op, "argvs": [list(a) for a in questions]})
        else:
            answer = self._ask(interpreter, experiment,
                               {"op": "env", "values": [list(v) for v in questions]})
        version = answer.get("version")
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(questions):
            raise SGLangUnavailable(f"SGLang preflight with {interpreter} answered malformed "
                                    f"results ({answer.get('error') or 'no results'}): "
                                    "preflight skipped")
        if op == "resolve":
            return {q: Resolution.from_json({**r, "sglang_version": version})
                    for q, r in zip(questions, results, strict=True)}
        if op == "parse":
            return {q: PreflightResult(ok=bool(r["ok"]), error=str(r.get("error", "")),
                                       sglang_version=version,
                                       warnings=tuple(str(w) for w in r.get("warnings", ())))
                    for q, r in zip(questions, results, strict=True)}
        return {q: EnvResult(ok=bool(r["ok"]), known=bool(r["known"]),
                             error=str(r.get("error", "")), env_type=r.get("type"),
                             sglang_version=version, closest=r.get("closest"))
                for q, r in zip(questions, results, strict=True)}

    # ------------------------------------------------------------ the reader process
    def _ask(self, interpreter: str, experiment: str | None, request: dict[str, Any]
             ) -> dict[str, Any]:
        """One answer from the interpreter's resident reader; raises SGLangUnavailable."""
        skipped = f"SGLang not importable with {interpreter}: preflight skipped"
        marker = marker_for(experiment)
        try:
            line = self._resident(interpreter, marker).ask(json.dumps(request), self.timeout)
        except subprocess.TimeoutExpired:
            self._drop(interpreter, marker)
            raise SGLangUnavailable(f"SGLang preflight with {interpreter} timed out after "
                                    f"{self.timeout:g} s: preflight skipped") from None
        except OSError as err:
            raise SGLangUnavailable(f"{skipped} (cannot run it: {err.strerror or err})") from None
        try:
            answer = json.loads(line) if line is not None else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or not answer.get("importable"):
            code, stderr = self._drop(interpreter, marker)
            if not isinstance(answer, dict):
                raise SGLangUnavailable(f"{skipped} (exit {code}: {_tail(stderr)})")
            raise SGLangUnavailable(f"{skipped} ({answer.get('error') or 'unknown error'})")
        return answer

    def _resident(self, interpreter: str, marker: str) -> Resident:
        with self._lock:
            resident = self._residents.get((interpreter, marker))
            if resident is not None and not resident.alive():
                resident.close()  # it answered before and has died since: start another
                resident = None
            if resident is None:
                resident = self._residents[(interpreter, marker)] = Resident(interpreter, marker)
            return resident

    def _drop(self, interpreter: str, marker: str) -> tuple[int | None, str]:
        """Stop a reader; returns its exit code and the tail of its stderr."""
        with self._lock:
            resident = self._residents.pop((interpreter, marker), None)
        return resident.close() if resident is not None else (None, "")

    def _skip(self, interpreter: str, why: SGLangUnavailable) -> None:
        """Not importable, not runnable, or too slow: the interpreter is skipped for the rest
        of the process with one warning, so a broken setup costs one timeout, not one per trial."""
        with self._lock:
            first = interpreter not in self._skipped
            self._skipped.add(interpreter)
        if first:
            logger.warning("%s", why)

    def _installed_version(self, interpreter: str, experiment: str | None) -> str | None:
        """The installed SGLang's version (its metadata, ~50 ms, no torch) for the disk keys."""
        with self._lock:
            if interpreter in self._versions:
                return self._versions[interpreter]
        try:
            done = run_marked([interpreter, "-c", server_source(), VERSION_ARG], "",
                              self.timeout, marker_for(experiment))
            value = json.loads(done.stdout) if done.returncode == 0 else None
            version = value if isinstance(value, str) else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            version = None
        with self._lock:
            self._versions[interpreter] = version
        return version


def _argv(argv: Sequence[str]) -> Argv:
    if isinstance(argv, str):
        raise TypeError("argv must be a sequence of words, not a string")
    return tuple(str(word) for word in argv)


def per_launch_free(argv: Argv) -> Argv:
    """The argv with its ``--port`` value blanked, for the disk keys: a trial's port is picked
    when it starts, and the port is per launch (resolved.PER_LAUNCH), so the driver's answers
    for a configuration serve every trial of it. (SGLang derives a port from it only in its
    legacy gRPC mode: ``--grpc-port`` defaults to port + 10000.)"""
    words = list(argv)
    for i, word in enumerate(words):
        if word == "--port" and i + 1 < len(words):
            words[i + 1] = ""
        elif word.startswith("--port="):
            words[i] = "--port="
    return tuple(words)


def _disk_key(op: str, interpreter: str, version: str, question: Any) -> str:
    if op == "parse":
        return preflight_cache.argv_key(interpreter, version, per_launch_free(question))
    if op == "resolve":
        return preflight_cache.resolve_key(interpreter, version, per_launch_free(question))
    return preflight_cache.env_key(interpreter, version, *question)


def _from_json(op: str, data: dict[str, Any]) -> PreflightResult | EnvResult | Resolution:
    if op == "resolve":
        return Resolution.from_json(data)
    return PreflightResult.from_json(data) if op == "parse" else EnvResult.from_json(data)


def _tail(text: str, lines: int = 3) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "no output"


_checker = ParserCheck()


def check_argv(argv: Sequence[str], python: str | None = None, cache_path: Path | None = None,
               experiment: str | None = None) -> PreflightResult:
    """Parse one argv (flags only) with SGLang's parser in ``python`` (default: this one)."""
    return _checker.check_argv(argv, python, cache_path, experiment)


def check_many(argvs: Sequence[Sequence[str]], python: str | None = None,
               cache_path: Path | None = None, experiment: str | None = None
               ) -> list[PreflightResult]:
    """Parse many argvs in one request (cached ones are not parsed again)."""
    return _checker.check_many(argvs, python, cache_path, experiment)


def resolve(argv: Sequence[str], python: str | None = None, cache_path: Path | None = None,
            experiment: str | None = None) -> Resolution:
    """One argv (flags only) through SGLang's own resolution and checks in ``python``."""
    return _checker.resolve_many([argv], python, cache_path, experiment)[0]


def check_env(values: Sequence[EnvValue], python: str | None = None,
              cache_path: Path | None = None, experiment: str | None = None
              ) -> list[EnvResult]:
    """Read each (name, text) with SGLang's env registry in ``python``."""
    return _checker.check_env(values, python, cache_path, experiment)


def shared() -> ParserCheck:
    """The checker the module functions use (its reader stays up for later questions)."""
    return _checker
