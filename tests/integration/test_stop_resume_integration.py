"""Stopping and resuming a real `servetune run` (issue 30): kill -9 of the driver at several
moments, each followed by `--resume`, ends with the whole budget run; SIGTERM/SIGINT bring
everything down within 5 s and say how to resume, a second signal included.

Each scenario is one experiment, run once per module and shared by its assertions; the
stand-in's trials are short (benchmarks/kill_resume.py times the same at 1, 3, 10 and 30 s).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from benchmarks.kill_resume import Kill, finished_search, ray_session_processes
from simulator.runs import Background, Experiment, Result, ray_tmpdir
from tuner.record.spec_file import has_spec

pytestmark = pytest.mark.integration

SAMPLES = 6
ARGS = ("--space", "nccl-pcie", "--samples", str(SAMPLES), "--rounds", "2",
        "--scheduler", "fifo", "--no-dashboard")
STOP_LIMIT_S = 5.0  # issue 30: every server gone, Ray down, the driver exited


def _started(exp: Experiment, count: int) -> bool:
    return sum(e.get("event") == "start" for e in exp.journal()) >= count


def _ended(exp: Experiment, count: int) -> bool:
    return sum(e.get("event") == "end" for e in exp.journal()) >= count


@dataclass
class Killed:
    """One experiment: killed with -9 at each moment in turn, resumed after each kill."""

    exp: Experiment
    ray_tmp: Path
    kills: list[Kill] = field(default_factory=list)
    final: Result | None = None


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Killed]:
    """Once the spec is written (before Ray), at the first trial's start (before Ray's first
    experiment checkpoint), and with two trials ended: each kill hits a run resumed from the
    last. (A kill 1 s in came, on a busy box, before the driver had written anything: the
    resume was then refused as no experiment, a verdict of the machine's load.)"""
    root = tmp_path_factory.mktemp("killed")
    moments = [("spec written", lambda exp, began: has_spec(exp.out)),
               ("first trial started", lambda exp, began: _started(exp, 1)),
               ("two trials ended", lambda exp, began: _ended(exp, 2))]
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp)
        run = Killed(exp, ray_tmp)
        try:
            argv = ["run", *exp.args(*ARGS)]
            for moment, ready in moments:
                background = exp.start(argv)
                began = time.monotonic()
                background.wait_for(lambda: ready(exp, began), 240, moment)  # noqa: B023
                run.kills.append(Kill.now(background, moment, ray_tmp))
                argv = ["run", "--resume", str(exp.out)]
            run.final = exp.run(argv, timeout=300)
            yield run
        finally:
            exp.cleanup()


def test_the_resumes_run_the_whole_budget(killed: Killed) -> None:
    assert killed.final is not None and killed.final.returncode == 0, killed.final
    table = killed.exp.table()
    assert len(finished_search(table)) == SAMPLES, table.to_string()
    # what was cut short is listed as such; what completed is there once
    assert set(table["status"]) <= {"ok", "stopped", "failed", "interrupted"}
    assert table["trial_id"].is_unique


def test_the_first_kill_left_a_resumable_folder(killed: Killed) -> None:
    assert killed.kills[0].had_spec, killed.kills[0]
    assert "resuming from the journal" in killed.final.stdout if killed.final else False


def test_nothing_of_a_killed_driver_outlives_the_resumes(killed: Killed) -> None:
    assert killed.exp.leftovers() == []
    for kill in killed.kills:
        alive = [p for p in kill.ray_pids if p.is_running() and p.status() != "zombie"]
        assert alive == [], f"{kill.moment}: Ray processes of the killed driver: {alive}"
    assert ray_session_processes(killed.ray_tmp) == []


# ---------------------------------------------------------------- SIGTERM / SIGINT


@dataclass
class Stop:
    moment: str
    result: Result
    seconds: float  # from the (first) signal until the driver exited
    leftovers: list[object]


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Experiment, list[Stop],
                                                                         Result]]:
    """One experiment: SIGTERM twice mid-trial, resumed; Ctrl-C (SIGINT to the whole
    foreground job) mid-trial, resumed to its end."""
    root = tmp_path_factory.mktemp("stopped")
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp)
        stops: list[Stop] = []
        try:
            argv = ["run", *exp.args(*ARGS)]
            for moment, send in (("SIGTERM, twice", _term_twice), ("Ctrl-C", _ctrl_c)):
                background = exp.start(argv)
                ended = sum(e.get("event") == "end" for e in exp.journal())
                background.wait_for(lambda: _mid_trial(exp, ended), 240,  # noqa: B023
                                    "a trial's first round")
                fired = time.monotonic()
                send(background)
                result = background.finish(timeout=60)
                seconds = time.monotonic() - fired
                left = [*exp.leftovers(), *ray_session_processes(ray_tmp)]
                stops.append(Stop(moment, result, seconds, left))
                argv = ["run", "--resume", str(exp.out)]
            final = exp.run(argv, timeout=300)
            yield exp, stops, final
        finally:
            exp.cleanup()


def _mid_trial(exp: Experiment, ended_before: int) -> bool:
    """A trial of this session has reported a round and not ended."""
    journal = exp.journal()
    ended = {e["trial_id"] for e in journal if e.get("event") == "end"}
    return len(ended) > ended_before and any(
        e.get("event") == "result" and e["trial_id"] not in ended for e in journal)


def _term_twice(background: Background) -> None:
    background.signal_driver(signal.SIGTERM)
    time.sleep(0.3)
    background.signal_driver(signal.SIGTERM)


def _ctrl_c(background: Background) -> None:
    background.signal_group(signal.SIGINT)


def test_a_signal_stops_everything_within_5_s(stopped: tuple[Experiment, list[Stop], Result]
                                              ) -> None:
    _, stops, _ = stopped
    for stop in stops:
        assert stop.seconds < STOP_LIMIT_S, f"{stop.moment}: {stop.seconds:.1f} s\n{stop.result}"
        assert stop.leftovers == [], f"{stop.moment}: {stop.leftovers}"


def test_the_exit_says_how_to_resume(stopped: tuple[Experiment, list[Stop], Result]) -> None:
    exp, stops, _ = stopped
    for stop, code in zip(stops, (128 + signal.SIGTERM, 130), strict=True):
        assert stop.result.returncode == code, stop.result
        assert f"servetune run --resume {exp.out.resolve()}" in stop.result.stdout, stop.result


def test_the_journal_is_saved_and_the_resume_completes(
        stopped: tuple[Experiment, list[Stop], Result]) -> None:
    exp, _, final = stopped
    assert final.returncode == 0, final
    table = exp.table()
    assert len(finished_search(table)) == SAMPLES, table.to_string()
    assert (table["status"] == "interrupted").sum() >= 1  # the trials the signals cut short
    assert exp.leftovers() == []
