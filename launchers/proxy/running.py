"""The started proxy: readiness from rank 0's ready line, rounds and profiles on request
(``launchers.proxy.protocol``), NCCL's own account of what ran."""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launchers.base import LaunchPlan, Metrics, Running
from launchers.failures import FailureKind, TrialFailed
from launchers.process import ServerProcess
from launchers.proxy.protocol import ROUNDS_FILE, Request, write_request


def nccl_log() -> Any | None:
    """launchers.nccl_log where this checkout has it."""
    try:
        return importlib.import_module("launchers.nccl_log")
    except ImportError:
        return None


class ProxyRunning(Running):
    """The started proxy. Readiness: rank 0's ``ready`` line in proxy_rounds.jsonl (after
    warm-up, capture and the first correctness check); a round or a profile: write the request
    to proxy_control, wait for its line."""

    def __init__(self, process: ServerProcess, plan: LaunchPlan, folder: Path,
                 round_timeout: float) -> None:
        self.process = process
        self.plan = plan
        self.folder = folder
        self.round_timeout = round_timeout
        self.info: dict[str, Any] = {}  # the ready line: shape, bytes, approximation, ...
        self.rounds: dict[int, Metrics] = {}
        self.profiles: dict[int, dict[str, Any]] = {}  # request seq -> the profile line
        self._seq = -1  # the last request written
        self._wrong: str | None = None
        self._offset = 0
        self._cuda = "cuda" in plan.argv[plan.argv.index("--device") + 1]

    def _read(self) -> None:
        """Take in the complete lines rank 0 appended since the last read."""
        try:
            with open(self.folder / ROUNDS_FILE, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = event.pop("event", None)
            if kind == "ready":
                self.info = event
            elif kind == "round":
                self.rounds[int(event["round"])] = event
            elif kind == "profile" and event.get("request") is not None:
                self.profiles[int(event["request"])] = event
            elif kind == "wrong_result":
                self._wrong = str(event.get("message", "the logits differ from the reference"))

    def _raise_if_wrong(self) -> None:
        if self._wrong is not None:
            failure = self.process.failure(self._wrong, FailureKind.WRONG_RESULT)
            failure.hint = ("this configuration changes the proxy's logits beyond bf16 "
                            "rounding (see shared/reference/nccl.md: forced LL128)")
            raise TrialFailed(failure)

    def wait_ready(self, timeout: float) -> float:
        def probe() -> bool:
            self._read()
            self._raise_if_wrong()
            return bool(self.info)

        try:
            return self.process.wait_ready(probe, timeout, interval=0.02)
        except TrialFailed:
            self._read()  # a wrong_result line written just before the exit
            self._raise_if_wrong()
            raise

    def _request(self, action: str, value: int) -> int:
        """Write the next request to proxy_control (atomically); returns its seq."""
        self._seq += 1
        write_request(self.folder, Request(self._seq, action, value))
        return self._seq

    def _wait(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            dead = self.process.poll() is not None
            self._read()
            self._raise_if_wrong()
            if done():
                return
            if dead:
                failure = self.process.failure()
                if failure.kind is FailureKind.CRASHED:
                    failure.kind = FailureKind.CRASHED_MID_BENCHMARK
                failure.message = f"{what}: {failure.message}"
                raise TrialFailed(failure)
            if time.monotonic() > deadline:
                raise TrialFailed(self.process.failure(
                    f"{what}: no result after {timeout:.0f} s (ranks still running)",
                    FailureKind.BENCHMARK_HANG))
            time.sleep(0.02)

    def measure(self, round_index: int) -> Metrics:
        self._request("round", round_index)
        self._wait(f"round {round_index}", lambda: round_index in self.rounds,
                   self.round_timeout)
        return dict(self.rounds[round_index])

    def profile(self, steps: int) -> list[Path]:
        """torch.profiler in every rank over ``steps`` replays each of the verify pass
        (``servetune.verify`` spans), the compute-only pass (``servetune.compute_only``) and
        the collectives alone (``servetune.comm_alone``): one Chrome trace per rank, under
        traces/ in the trial folder; read them with ``STEP_SPANS``."""
        seq = self._request("profile", steps)
        self._wait("profile", lambda: seq in self.profiles, self.round_timeout + 120.0)
        return [Path(f) for f in self.profiles[seq]["files"]]

    def effective(self) -> dict[str, Any]:
        """What NCCL ran with, from its own log (GPU runs with launchers.nccl_log)."""
        log = nccl_log() if self._cuda else None
        if log is None:
            return {}
        eff = log.parse_files(log.debug_files(self.folder))
        inherited = {k: v for k, v in os.environ.items()
                     if k.startswith("NCCL_") and k not in self.plan.env
                     and k not in self.plan.unset_env}
        data: dict[str, Any] = eff.to_json()
        data["columns"] = eff.to_columns()
        data["warnings"] = log.mismatches(dict(self.plan.env), eff, inherited)
        return data
