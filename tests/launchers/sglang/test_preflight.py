"""Preflight without SGLang: a stand-in ``sglang`` package and stand-in interpreters.

The stand-in interpreter is a shell script that logs each call and runs this Python with a
fake ``sglang`` first on PYTHONPATH, so the real subprocess path (``-c`` script, JSON on
stdin, argparse errors captured) runs end to end in a few hundred milliseconds.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from launchers.sglang import preflight
from launchers.sglang.preflight import ParserCheck, PreflightResult, check_argv, python_for

FAKE_SERVER_ARGS = '''
import argparse
import logging


class _Deprecated(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        logging.getLogger("sglang.fake").warning(
            "\\033[1;33m'%s' is deprecated\\033[0m", option_string)
        setattr(namespace, self.dest, True)


class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", required=True)
        parser.add_argument("--tp-size", type=int, default=1)
        parser.add_argument("--cuda-graph-max-bs-decode", type=int)
        parser.add_argument("--cuda-graph-max-bs-prefill", type=int)
        parser.add_argument("--enable-symm-mem", action="store_true")
        parser.add_argument("--disable-cuda-graph", action=_Deprecated)
'''

BASE = ["--model-path", "/models/x"]


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _fake_sglang(root: Path, version: str = "0.0.1", broken: bool = False) -> Path:
    """A fake ``sglang`` package (and its dist-info, for the version) under ``root``."""
    package = root / "sglang"
    (package / "srt").mkdir(parents=True, exist_ok=True)
    if broken:
        (package / "__init__.py").write_text("import triton_is_not_here  # noqa\n")
    else:
        (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "srt" / "__init__.py").write_text("")
    (package / "srt" / "server_args.py").write_text(FAKE_SERVER_ARGS)
    for old in root.glob("sglang-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    dist = root / f"sglang-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return root


class FakePython:
    """An interpreter path that runs this Python with the fake sglang, logging each call."""

    def __init__(self, folder: Path, *, broken: bool = False) -> None:
        self.site = _fake_sglang(folder / "site", broken=broken)
        self.log = folder / "calls.log"
        self.path = _executable(folder / "python-fake", (
            "#!/bin/sh\n"
            f'case "$2" in *add_cli_args*) echo parse >> "{self.log}";; '
            f'*) echo other >> "{self.log}";; esac\n'
            f'PYTHONPATH="{self.site}" exec "{sys.executable}" "$@"\n'
        ))

    @property
    def parses(self) -> int:
        return self.log.read_text().count("parse") if self.log.exists() else 0

    def set_version(self, version: str) -> None:
        _fake_sglang(self.site, version)

    def __str__(self) -> str:
        return str(self.path)


@pytest.fixture
def fake(tmp_path: Path) -> FakePython:
    return FakePython(tmp_path)


@pytest.fixture
def fresh_default(monkeypatch: pytest.MonkeyPatch) -> ParserCheck:
    """A fresh shared checker for the module functions (restored after the test)."""
    checker = ParserCheck()
    monkeypatch.setattr(preflight, "_checker", checker)
    return checker


# ---------------------------------------------------------------- parsing


def test_accepts_and_rejects_with_sglangs_own_message(fake: FakePython) -> None:
    good, ambiguous, bad_type, missing = ParserCheck().check_many(
        [[*BASE, "--tp-size", "8"], [*BASE, "--cuda-graph-max-bs", "8"],
         [*BASE, "--tp-size", "eight"], ["--tp-size", "8"]], python=str(fake))
    assert good == PreflightResult(ok=True, sglang_version="0.0.1")
    assert ambiguous.ok is False
    assert ambiguous.error.startswith("ambiguous option: --cuda-graph-max-bs could match")
    assert "--cuda-graph-max-bs-decode" in ambiguous.error
    assert bad_type.ok is False and "invalid int value: 'eight'" in bad_type.error
    assert missing.ok is False and "required: --model-path" in missing.error
    assert fake.parses == 1  # one subprocess for all four


def test_warnings_for_deprecated_flags_and_abbreviations(fake: FakePython) -> None:
    deprecated, abbreviated = ParserCheck().check_many(
        [[*BASE, "--disable-cuda-graph"], [*BASE, "--enable-symm"]], python=str(fake))
    assert deprecated.ok is True
    assert deprecated.warnings == ("'--disable-cuda-graph' is deprecated",)  # colours gone
    assert abbreviated.ok is True
    assert abbreviated.warnings == (
        "--enable-symm is not an option of this SGLang: argparse took it as an abbreviation "
        "of --enable-symm-mem",)


def test_help_does_not_print_into_the_answer(fake: FakePython) -> None:
    result = ParserCheck().check_argv(["--help"], python=str(fake))
    assert result.ok is False and "exited" in result.error


def test_argv_must_be_words_not_a_string(fake: FakePython) -> None:
    with pytest.raises(TypeError):
        ParserCheck().check_argv("--model-path /x", python=str(fake))


def test_check_many_of_nothing_starts_nothing(fake: FakePython) -> None:
    assert ParserCheck().check_many([], python=str(fake)) == []
    assert not fake.log.exists()


# ---------------------------------------------------------------- caches


def test_memory_cache_per_argv(fake: FakePython) -> None:
    checker = ParserCheck()
    a, b = [*BASE, "--tp-size", "2"], [*BASE, "--tp-size", "4"]
    first = checker.check_many([a, a, b], python=str(fake))
    assert [r.ok for r in first] == [True, True, True]
    assert fake.parses == 1
    assert checker.check_argv(tuple(a), python=str(fake)) == first[0]
    assert checker.check_many([b, a], python=str(fake)) == [first[2], first[0]]
    assert fake.parses == 1
    # A new argv goes to the same parser process: SGLang is imported once per checker.
    assert checker.check_argv([*BASE, "--tp-size", "8"], python=str(fake)).ok is True
    assert checker.check_argv([*BASE, "--tp-size", "x"], python=str(fake)).ok is False
    assert fake.parses == 1
    checker.close()
    checker.check_argv([*BASE, "--tp-size", "16"], python=str(fake))
    assert fake.parses == 2
    checker.close()


def test_parser_process_ends_with_its_owner(fake: FakePython, tmp_path: Path) -> None:
    """The resident parser exits at EOF on its stdin: a SIGKILLed owner leaves nothing."""
    script = (
        "import sys, time\n"
        "from launchers.sglang.preflight import ParserCheck\n"
        "c = ParserCheck()\n"
        f"assert c.check_argv({BASE!r}, python={str(fake)!r}).ok\n"
        "print(next(iter(c._residents.values())).proc.pid, flush=True)\n"
        "time.sleep(60)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[3])
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
        assert psutil.pid_exists(pid)
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and psutil.pid_exists(pid) and \
            psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_memory_cache_is_per_interpreter(tmp_path: Path) -> None:
    one, two = FakePython(tmp_path / "one"), FakePython(tmp_path / "two")
    checker = ParserCheck()
    checker.check_argv(BASE, python=str(one))
    checker.check_argv(BASE, python=str(two))
    assert (one.parses, two.parses) == (1, 1)


def test_disk_cache_survives_the_process(fake: FakePython, tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "preflight.json"
    first = ParserCheck().check_many([BASE, [*BASE, "--bogus"]], python=str(fake),
                                     cache_path=cache)
    assert fake.parses == 1
    data = json.loads(cache.read_text())
    assert data["format"] == preflight.CACHE_FORMAT and len(data["entries"]) == 2
    # A new checker stands for a new process: answers come from the file.
    again = ParserCheck().check_many([[*BASE, "--bogus"], BASE], python=str(fake),
                                     cache_path=cache)
    assert again == [first[1], first[0]]
    assert again[0].ok is False and "unrecognized arguments: --bogus" in again[0].error
    assert fake.parses == 1
    # Only what is missing is parsed; the file keeps the old entries too.
    ParserCheck().check_many([BASE, [*BASE, "--tp-size", "2"]], python=str(fake),
                             cache_path=cache)
    assert fake.parses == 2
    assert len(json.loads(cache.read_text())["entries"]) == 3
    assert [p.name for p in cache.parent.iterdir()] == ["preflight.json"]  # no temp files


def test_disk_cache_is_keyed_by_sglang_version(fake: FakePython, tmp_path: Path) -> None:
    cache = tmp_path / "preflight.json"
    ParserCheck().check_argv(BASE, python=str(fake), cache_path=cache)
    fake.set_version("0.0.2")
    result = ParserCheck().check_argv(BASE, python=str(fake), cache_path=cache)
    assert fake.parses == 2
    assert result.sglang_version == "0.0.2"


def test_unreadable_disk_cache_is_ignored_and_rewritten(fake: FakePython, tmp_path: Path) -> None:
    cache = tmp_path / "preflight.json"
    cache.write_text("{ torn")
    assert ParserCheck().check_argv(BASE, python=str(fake), cache_path=cache).ok is True
    assert len(json.loads(cache.read_text())["entries"]) == 1


def test_concurrent_writers_never_tear_the_file(tmp_path: Path) -> None:
    cache = tmp_path / "preflight.json"
    entry = PreflightResult(ok=True, sglang_version="0.0.1").to_json()
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            for j in range(20):
                preflight._store_cache(cache, {f"{index}-{j}": entry})
                json.loads(cache.read_text())  # always a whole file
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    entries = json.loads(cache.read_text())["entries"]
    assert entries and all(v == entry for v in entries.values())
    assert [p.name for p in tmp_path.iterdir()] == ["preflight.json"]


# ---------------------------------------------------------------- SGLang not there


def test_not_importable_gives_none_and_one_warning(
        tmp_path: Path, fresh_default: ParserCheck, caplog: pytest.LogCaptureFixture) -> None:
    broken = FakePython(tmp_path, broken=True)
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    first = check_argv(BASE, python=str(broken))
    second = preflight.check_many([BASE, [*BASE, "--x"]], python=str(broken))
    assert first == PreflightResult(ok=None)
    assert [r.ok for r in second] == [None, None]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert messages[0].startswith(f"SGLang not importable with {broken}: preflight skipped")
    assert "triton_is_not_here" in messages[0]
    assert broken.parses == 1  # not tried again in this process


def test_python_without_sglang(
        tmp_path: Path, fresh_default: ParserCheck, caplog: pytest.LogCaptureFixture) -> None:
    # -I hides PYTHONPATH and the user site; an empty sglang path hides any installed one.
    empty = tmp_path / "empty"
    (empty / "sglang").mkdir(parents=True)
    (empty / "sglang" / "__init__.py").write_text("raise ImportError('no sglang here')\n")
    python = _executable(tmp_path / "python-bare", (
        f'#!/bin/sh\nPYTHONPATH="{empty}" exec "{sys.executable}" "$@"\n'))
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    assert check_argv(BASE, python=str(python)).ok is None
    assert check_argv(BASE, python=str(python)).ok is None
    assert len(caplog.records) == 1
    assert "no sglang here" in caplog.records[0].getMessage()


def test_missing_interpreter(fresh_default: ParserCheck,
                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    assert check_argv(BASE, python="/nonexistent/bin/python").ok is None
    assert check_argv(BASE, python="/nonexistent/bin/python").ok is None
    assert [r.getMessage() for r in caplog.records] == [
        "SGLang not importable with /nonexistent/bin/python: preflight skipped "
        "(cannot run it: No such file or directory)"]


def test_garbage_answer_is_a_skip(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    python = _executable(tmp_path / "python-junk",
                         "#!/bin/sh\necho not json\necho 'Segmentation fault' >&2\nexit 139\n")
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    assert ParserCheck().check_argv(BASE, python=str(python)).ok is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert "exit 139: Segmentation fault" in message


def test_timeout_is_a_skip_not_a_hang(tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    # The child of the shell holds the pipes too: the whole group must die.
    python = _executable(tmp_path / "python-slow", "#!/bin/sh\nsleep 60\necho late\n")
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    checker = ParserCheck(timeout=0.5)
    start = time.monotonic()
    assert checker.check_argv(BASE, python=str(python)).ok is None
    assert checker.check_argv([*BASE, "--tp-size", "2"], python=str(python)).ok is None
    assert time.monotonic() - start < 10
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == f"SGLang preflight with {python} timed out after 0.5 s: preflight skipped"


# ---------------------------------------------------------------- python_for


def test_python_for_module_form(tmp_path: Path) -> None:
    assert python_for([sys.executable, "-m", "sglang.launch_server", "--model-path", "m"]) \
        == sys.executable
    assert python_for([sys.executable, "-u", "-X", "dev", "-m", "sglang.launch_server"]) \
        == sys.executable
    assert python_for(["python-not-on-path", "-m", "sglang.launch_server"]) \
        == "python-not-on-path"
    assert python_for([sys.executable, "-m", "vllm.entrypoints"]) is None
    assert python_for([]) is None


def test_python_for_console_script_on_path(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "sglang", "#!/opt/venv/bin/python3.11\nimport sys\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert python_for(["sglang", "serve", "--model-path", "m"]) == "/opt/venv/bin/python3.11"
    assert python_for([str(bin_dir / "sglang"), "serve"]) == "/opt/venv/bin/python3.11"


@pytest.mark.parametrize(("shebang", "expected"), [
    ("#!/srv/venv/bin/python -E\n", "/srv/venv/bin/python"),
    ("#!/bin/sh\n'''exec' \"/a path/with spaces/python\" \"$0\" \"$@\"\n' '''\n",
     "/a path/with spaces/python"),
    ("#!/bin/sh\n'''exec' /long/venv/bin/python3 \"$0\" \"$@\"\n' '''\n",
     "/long/venv/bin/python3"),
    ("#!/bin/bash\nexec something-else \"$@\"\n", None),
    ("#!/usr/bin/perl\n", None),
    ("no shebang at all\n", None),
])
def test_python_for_shebangs(tmp_path: Path, shebang: str, expected: str | None) -> None:
    script = _executable(tmp_path / "sglang", shebang)
    assert python_for([str(script), "serve"]) == expected


def test_python_for_env_shebang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    interpreter = _executable(bin_dir / "python3", "#!/bin/sh\n")
    script = _executable(tmp_path / "sglang", "#!/usr/bin/env python3\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert python_for([str(script), "serve"]) == str(interpreter)


def test_python_for_uv_relocatable_trampoline(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = _executable(bin_dir / "sglang", (
        "#!/bin/sh\n"
        "'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n' '''\n"))
    assert python_for([str(script), "serve"]) == str(bin_dir.resolve() / "python")


def test_python_for_unknown_command() -> None:
    assert python_for(["no-such-command-anywhere", "serve"]) is None
