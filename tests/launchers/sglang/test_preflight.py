"""Preflight without SGLang: the real subprocess path against a stand-in ``sglang``
(fake_sglang.py): argvs parsed, env values read, answers cached in memory and on disk."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from launchers.sglang import preflight, preflight_cache
from launchers.sglang.preflight import (
    EnvResult,
    ParserCheck,
    PreflightResult,
    SGLangUnavailable,
    check_argv,
)
from tests.launchers.sglang.fake_sglang import BASE, FakePython, executable


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
    assert data["format"] == preflight_cache.CACHE_FORMAT and len(data["entries"]) == 2
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


def test_disk_cache_leaves_the_port_out(fake: FakePython, tmp_path: Path) -> None:
    """A trial's port is picked when it starts: the driver's answer for a configuration (on
    SGLang's default port) serves every trial of it, whatever port that trial got."""
    cache = tmp_path / "preflight.json"
    ParserCheck().check_argv([*BASE, "--port", "30000"], python=str(fake), cache_path=cache)
    again = ParserCheck().check_many([[*BASE, "--port", "31234"], [*BASE, "--port=31235"]],
                                     python=str(fake), cache_path=cache)
    assert [r.ok for r in again] == [True, True] and fake.parses == 2  # one for --port=
    ParserCheck().check_argv([*BASE, "--port=40000"], python=str(fake), cache_path=cache)
    assert fake.parses == 2
    assert preflight.per_launch_free(("--tp-size", "2", "--port", "1")) == \
        ("--tp-size", "2", "--port", "")


def test_answers_held_in_memory_reach_a_cache_file_asked_later(fake: FakePython,
                                                                tmp_path: Path) -> None:
    """The driver may hold an answer from a question asked without a file (the baseline's
    check): asked again with the experiment's file, it is written there for the trials."""
    checker = ParserCheck()
    checker.check_argv(BASE, python=str(fake))
    cache = tmp_path / "preflight.json"
    checker.check_argv(BASE, python=str(fake), cache_path=cache)
    assert fake.parses == 1 and len(json.loads(cache.read_text())["entries"]) == 1
    assert ParserCheck().check_argv(BASE, python=str(fake), cache_path=cache).ok is True
    assert fake.parses == 1


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
                preflight_cache.store(cache, {f"{index}-{j}": entry})
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
    python = executable(tmp_path / "python-bare", (
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
    python = executable(tmp_path / "python-junk",
                         "#!/bin/sh\necho not json\necho 'Segmentation fault' >&2\nexit 139\n")
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    assert ParserCheck().check_argv(BASE, python=str(python)).ok is None
    (message,) = [r.getMessage() for r in caplog.records]
    assert "exit 139: Segmentation fault" in message


def test_timeout_is_a_skip_not_a_hang(tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    # The child of the shell holds the pipes too: the whole group must die.
    python = executable(tmp_path / "python-slow", "#!/bin/sh\nsleep 60\necho late\n")
    caplog.set_level(logging.WARNING, logger=preflight.__name__)
    checker = ParserCheck(timeout=0.5)
    start = time.monotonic()
    assert checker.check_argv(BASE, python=str(python)).ok is None
    assert checker.check_argv([*BASE, "--tp-size", "2"], python=str(python)).ok is None
    assert time.monotonic() - start < 10
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == f"SGLang preflight with {python} timed out after 0.5 s: preflight skipped"


# ---------------------------------------------------------------- the env registry


def test_env_values_are_read_with_sglangs_own_types(fake: FakePython) -> None:
    good, bad_bool, bad_int, unknown, alias = ParserCheck().check_env(
        [("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"), ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "2"),
         ("SGLANG_PCIE_IPC_MAX_NUMEL", "4M"), ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE", "1"),
         ("SGLANG_OLD_SPELLING", "yes")], python=str(fake))
    assert good == EnvResult(ok=True, known=True, env_type="EnvBool", sglang_version="0.0.1")
    assert (bad_bool.ok, bad_bool.known, bad_bool.error) == (
        False, True, '"2" is not a valid boolean value')
    assert (bad_int.ok, bad_int.env_type, bad_int.error) == (
        False, "EnvInt", '"4M" is not a valid integer value')
    assert (unknown.ok, unknown.known, unknown.closest) == (
        False, False, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")
    assert (alias.ok, alias.env_type) == (True, "EnvBool")  # an alias class reads as its type
    assert fake.parses == 1


def test_env_answers_are_cached_beside_the_argvs(fake: FakePython, tmp_path: Path) -> None:
    cache = tmp_path / "preflight.json"
    values = [("SGLANG_PCIE_IPC_MAX_NUMEL", "1024"), ("SGLANG_NOPE", "1")]
    first = ParserCheck().check_env(values, python=str(fake), cache_path=cache)
    ParserCheck().check_argv(BASE, python=str(fake), cache_path=cache)
    assert fake.parses == 2
    assert ParserCheck().check_env(values, python=str(fake), cache_path=cache) == first
    assert fake.parses == 2  # from the file
    assert len(json.loads(cache.read_text())["entries"]) == 3


def test_env_check_without_sglang_is_skipped(tmp_path: Path) -> None:
    broken = FakePython(tmp_path, broken=True)
    assert ParserCheck().check_env([("SGLANG_X", "1")], python=str(broken)) == [
        preflight.ENV_SKIPPED]


def test_levers_describe_options_and_registry(fake: FakePython) -> None:
    answer = ParserCheck().read_levers(python=str(fake))
    assert answer["version"] == "0.0.1"
    options = {o["names"][0]: o for o in answer["options"]}
    assert options["--enable-symm-mem"]["nargs"] == 0
    assert options["--tp-size"]["type"] == "int" and options["--tp-size"]["default"] == 1
    assert options["--disable-cuda-graph"]["deprecated"] is True
    assert {e["name"]: e["type"] for e in answer["env"]} == {
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "EnvBool", "SGLANG_PCIE_IPC_MAX_NUMEL": "EnvInt",
        "SGLANG_OLD_SPELLING": "EnvBool", "SGLANG_LOG_MS": "EnvBool"}


def test_levers_without_sglang_raise(tmp_path: Path) -> None:
    broken = FakePython(tmp_path, broken=True)
    with pytest.raises(SGLangUnavailable, match="triton_is_not_here"):
        ParserCheck().read_levers(python=str(broken))
