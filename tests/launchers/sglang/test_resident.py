"""The resident reader carries the marker and survives its owner's reaps between trials."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from launchers import process
from launchers.sglang.preflight import ParserCheck
from launchers.sglang.resident import marker_for
from tests.launchers.sglang.fake_sglang import BASE, FakePython


@pytest.fixture
def fake(tmp_path: Path) -> FakePython:
    return FakePython(tmp_path)


def _reader_pid(checker: ParserCheck) -> int:
    (resident,) = checker._residents.values()
    return resident.proc.pid


def test_reader_carries_the_experiments_marker(fake: FakePython) -> None:
    checker = ParserCheck()
    try:
        assert checker.check_argv(BASE, python=str(fake), experiment="exp@1").ok
        env = psutil.Process(_reader_pid(checker)).environ()
        assert env[process.MARKER_ENV] == "exp@1/preflight"
        assert env[process.OWNER_ENV] == str(os.getpid())
    finally:
        checker.close()


def test_without_an_experiment_the_marker_says_so() -> None:
    assert marker_for(None) == "servetune/preflight"
    with pytest.raises(ValueError, match="not a helper"):
        process.helper_marker("exp", "server")


def test_a_reap_between_trials_keeps_the_reader_the_final_sweep_ends_it(
        fake: FakePython) -> None:
    checker = ParserCheck()
    try:
        assert checker.check_argv(BASE, python=str(fake), experiment="exp@2").ok
        pid = _reader_pid(checker)
        # A trial's reap of its experiment's leftovers (owner: this process, alive).
        assert process.reap("exp@2/", keep="exp@2/trial_1") == []
        assert psutil.pid_exists(pid)
        # The same reader answers the next trial: no second import.
        assert checker.check_argv([*BASE, "--tp-size", "2"], python=str(fake),
                                  experiment="exp@2").ok
        assert fake.parses == 1
        # The experiment's end reaps everything it marked.
        assert pid in process.reap_all("exp@2/", grace=1.0)
    finally:
        checker.close()
    # The checker notices and starts another reader when asked again.
    assert checker.check_argv([*BASE, "--tp-size", "4"], python=str(fake),
                              experiment="exp@2").ok
    assert fake.parses == 2
    checker.close()


def test_one_reader_per_experiment(fake: FakePython) -> None:
    checker = ParserCheck()
    try:
        checker.check_argv(BASE, python=str(fake), experiment="a@1")
        checker.check_argv([*BASE, "--tp-size", "2"], python=str(fake), experiment="b@1")
        markers = sorted(marker for _, marker in checker._residents)
        assert markers == ["a@1/preflight", "b@1/preflight"]
    finally:
        checker.close()


def test_a_reader_whose_owner_died_is_reaped(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    env = {**os.environ, process.MARKER_ENV: "exp@5/preflight", process.OWNER_ENV: str(dead.pid)}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not process.marked_processes("exp@5/"):
            time.sleep(0.02)
        assert process.reap("exp@5/", grace=1.0) == [orphan.pid]
    finally:
        orphan.kill()
        orphan.wait()
