"""Run `servetune` as a user does (a subprocess, real Ray, the stand-in server) and read back
what it left: results.csv, each trial's trial.json and server.log, and marked processes.

Shared by the integration tests and the benchmarks (faults, kill_resume, weights,
confirm_e2e). Every run gets its own Ray temp dir (RAY_TMPDIR, short: Ray's socket paths are
length-limited) so that concurrent test runs on one box never share /tmp/ray.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from launchers.process import Marked, kill_processes, marked_processes
from tuner.record.files import JOURNAL, read_journal
from tuner.record.spec_file import has_spec, load_spec
from tuner.spec import ExperimentSpec

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = (sys.executable, "-m", "simulator.sglang_server")
# Short, steady rounds: model time dominates the HTTP overhead even on a busy 2-core box.
FAST = ("--fake-time-scale", "0.2", "--fake-startup-s", "0.2", "--fake-noise", "0.01")
GPU_LINE = re.compile(r"CUDA_VISIBLE_DEVICES=(\S*)")


def stand_in(*switches: str) -> str:
    """A --server-cmd that runs the stand-in with these --fake-* switches."""
    return shlex.join([*STAND_IN, *FAST, *switches])


def owned_tuner(argv: Sequence[str]) -> list[str]:
    """``python -m tuner ARGV``, stopped (SIGTERM) if this process dies first
    (simulator/owned.py): a killed test worker or benchmark leaves no driver running. To be
    started from the caller's main thread (the tie is to the thread that starts it)."""
    return [sys.executable, "-m", "simulator.owned", str(os.getpid()), "tuner", *argv]


def env_for(ray_tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    parts = [str(ROOT), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env["RAY_TMPDIR"] = str(ray_tmp)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def read_results(path: Path) -> pd.DataFrame:
    """A results.csv, trial ids as text: pandas reads an id such as ``52e91234`` as a float
    (inf), which once sent a fault test looking for trial ``inf``."""
    return pd.read_csv(path, dtype={"trial_id": str})


@contextlib.contextmanager
def ray_tmpdir() -> Iterator[Path]:
    """A short, private folder for Ray's temp files."""
    path = Path(tempfile.mkdtemp(prefix="st-ray-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def __str__(self) -> str:
        return (f"$ {shlex.join(self.argv)}\nexit {self.returncode} after {self.seconds:.1f} s\n"
                f"--- stdout\n{self.stdout[-6000:]}\n--- stderr\n{self.stderr[-6000:]}")


@dataclass
class Experiment:
    """One experiment folder and the servetune runs made on it."""

    out: Path
    ray_tmp: Path
    model: Path
    base_args: list[str] = field(default_factory=list)
    runs: list[Result] = field(default_factory=list)

    @classmethod
    def create(cls, root: Path, ray_tmp: Path, name: str = "exp", model: Path | None = None,
               **kwargs: Any) -> Experiment:
        if model is None:
            model = root / "model"
        model.mkdir(parents=True, exist_ok=True)
        return cls(root / name, ray_tmp, model, **kwargs)

    # ------------------------------------------------------------ running
    def args(self, *extra: str, server: str | None = None, ready_timeout: float = 90.0
             ) -> list[str]:
        """The usual flags: the stand-in, 8 logical GPUs, short rounds, no confirm stage.
        ``ready_timeout`` is a safety net for healthy servers, never a verdict: on a loaded
        2-core box a stand-in that is ready in 1 s idle took 14 s to print its first line."""
        # --launch-spread: the stand-in's launches differ by its round noise alone (1%)
        return ["--model", str(self.model), "--server-cmd", server or stand_in(),
                "--launch-spread", "0.02",
                "--num-gpus", "8", "--port", "0", "--confirm", "0", "--input-len", "16",
                "--output-len", "32", "--requests-per-round", "2", "--stop-grace", "1",
                "--ready-timeout", str(ready_timeout), "--no-preflight", *self.base_args,
                *extra, "--out", str(self.out)]

    def command(self, argv: Sequence[str]) -> list[str]:
        return owned_tuner(argv)

    def run(self, argv: Sequence[str], timeout: float = 240.0) -> Result:
        """``python -m tuner ARGV`` to its end. If the caller stops waiting (the timeout, a
        test's own timeout, a signal to a benchmark), the driver is stopped as a user stops
        it (SIGTERM: it ends its servers and its Ray), then killed, and whatever carries the
        experiment's marker is reaped: a cut run leaves no process behind."""
        cmd = self.command(argv)
        began = time.monotonic()
        proc = subprocess.Popen(cmd, env=env_for(self.ray_tmp), cwd=ROOT, text=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            self.stop(proc)
            raise
        result = Result(cmd, proc.returncode, stdout, stderr, time.monotonic() - began)
        self.runs.append(result)
        return result

    def stop(self, proc: subprocess.Popen[Any], grace: float = 10.0) -> None:
        """A driver the caller gave up on: SIGTERM (servetune's own stop), SIGKILL after
        ``grace``, then the experiment's marked processes (its servers, its Ray)."""
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        self.cleanup()

    def start(self, argv: Sequence[str]) -> Background:
        """``python -m tuner ARGV`` in the background, in its own process group (a terminal's
        foreground job), its output to files."""
        cmd = self.command(argv)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        stdout = self.out.parent / f"{self.out.name}.stdout.{len(self.runs)}"
        stderr = self.out.parent / f"{self.out.name}.stderr.{len(self.runs)}"
        with open(stdout, "w") as out, open(stderr, "w") as err:
            popen = subprocess.Popen(cmd, env=env_for(self.ray_tmp), cwd=ROOT, stdout=out,
                                     stderr=err, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        return Background(self, cmd, popen, stdout, stderr, time.monotonic())

    # ------------------------------------------------------------ reading back
    @property
    def spec(self) -> ExperimentSpec:
        return load_spec(self.out)

    @property
    def prefix(self) -> str:
        """The marker prefix of this experiment's processes."""
        return f"{self.spec.marker_id}/"

    def journal(self) -> list[dict[str, Any]]:
        return read_journal(self.out / JOURNAL)

    def table(self) -> pd.DataFrame:
        return read_results(self.out / "results.csv")

    def trial_ids(self) -> list[str]:
        """Trials in launch order (the journal's start events)."""
        starts = [e for e in self.journal() if e.get("event") == "start"]
        return list(dict.fromkeys(e["trial_id"] for e in sorted(starts, key=lambda e: e["order"])))

    def record(self, trial_id: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / trial_id / "trial.json").read_text())
        return data

    def records(self) -> dict[str, dict[str, Any]]:
        return {t: self.record(t) for t in self.trial_ids()
                if (self.out / t / "trial.json").exists()}

    def server_gpus(self, trial_id: str) -> list[str]:
        """The CUDA_VISIBLE_DEVICES the trial's server logged."""
        text = (self.out / trial_id / "server.log").read_text(errors="replace")
        match = GPU_LINE.search(text)
        return match.group(1).split(",") if match and match.group(1) else []

    def finished_ok(self) -> list[str]:
        """Trials the journal saw end normally (their results must never be lost)."""
        return [e["trial_id"] for e in self.journal()
                if e.get("event") == "end" and e.get("status") == "ok"]

    def rounds_reported(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.journal():
            if e.get("event") == "result":
                counts[e["trial_id"]] = counts.get(e["trial_id"], 0) + 1
        return counts

    def leftovers(self) -> list[Marked]:
        return marked_processes(self.prefix) if has_spec(self.out) else []

    def cleanup(self) -> list[Marked]:
        """Kill whatever this experiment left (the test then fails on what was found)."""
        left = self.leftovers()
        if left:
            kill_processes([m.pid for m in left], grace=1.0)
        return left


@dataclass
class Background:
    experiment: Experiment
    argv: list[str]
    popen: subprocess.Popen[bytes]
    stdout_path: Path
    stderr_path: Path
    began: float

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.popen.poll() is not None:
                raise AssertionError(f"servetune exited before {what}:\n{self.finish(0)}")
            if time.monotonic() > deadline:
                self.popen.kill()
                raise AssertionError(f"timed out waiting for {what}:\n{self.finish(5)}")
            time.sleep(0.05)

    def signal_group(self, sig: int) -> None:
        """Like Ctrl-C in a terminal: the signal goes to the whole foreground job."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def signal_driver(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.popen.pid, sig)

    def finish(self, timeout: float) -> Result:
        try:
            code = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait()
        result = Result(self.argv, code, self.stdout_path.read_text(),
                        self.stderr_path.read_text(), time.monotonic() - self.began)
        self.experiment.runs.append(result)
        return result
