"""One trial without Ray (``run_trial``): rounds reported with the last one after the server
is down, failures recorded as data, an invalid config never launched, the server's tree gone
on every path."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from launchers import process
from launchers.base import LaunchPlan, Metrics, Running, TrialContext, Workload
from launchers.failures import Failure, FailureKind, TrialFailed
from search_spaces.knobs import Value
from search_spaces.space import from_mapping
from tuner.run.lifecycle import Limits
from tuner.run.trial import run_trial

SPACE = from_mapping({"name": "t", "knobs": {"NCCL_PROTO": ["LL", "Simple"]}}, "test")
FAST = Limits(ready_timeout=120.0, stop_grace=1.0, gpu_clean_timeout=0.0)


class SleepRunning(Running):
    """A real process (so that stop and reap are real) measured by a counter."""

    def __init__(self, proc: process.ServerProcess, fail_at: int | None, events: list[str]
                 ) -> None:
        self.process = proc
        self.fail_at = fail_at
        self.events = events

    def wait_ready(self, timeout: float) -> float:
        return self.process.wait_ready(lambda: "up" in self.process.log_text(), timeout)

    def measure(self, round_index: int) -> Metrics:
        if round_index == self.fail_at:
            raise TrialFailed(Failure(FailureKind.CRASHED_MID_BENCHMARK, "died in round"))
        self.events.append(f"round {round_index}")
        return {"tok_s": 100.0 + round_index, "verify_ms": None}

    def stop(self) -> None:
        self.events.append("stop")
        super().stop()


class SleepWorkload(Workload):
    kind: ClassVar[str] = "sleep"
    default_metric: ClassVar[str] = "tok_s"

    def __init__(self, fail_at: int | None = None, preflight_error: bool = False) -> None:
        self.fail_at = fail_at
        self.preflight_error = preflight_error
        self.events: list[str] = []

    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        code = "import time; print('up', flush=True); time.sleep(60)"
        return LaunchPlan("sleep", (sys.executable, "-c", code), {"X_PROTO": str(config)})

    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        if self.preflight_error:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, "the server refused it"))
        return ["a warning from preflight"]

    def start(self, plan: LaunchPlan, ctx: TrialContext) -> Running:
        self.events.append("start")
        proc = process.ServerProcess.spawn(plan.argv, plan.full_env(), ctx.trial_dir / "log",
                                           ctx.marker)
        return SleepRunning(proc, self.fail_at, self.events)


def _ctx(tmp_path: Path) -> TrialContext:
    return TrialContext(f"trialtest-{uuid.uuid4().hex[:6]}", "t1", tmp_path / "t1")


def test_rounds_are_reported_and_the_last_after_the_server_is_down(tmp_path: Path) -> None:
    workload, ctx = SleepWorkload(), _ctx(tmp_path)
    reports: list[dict[str, Any]] = []

    def report(metrics: dict[str, Any]) -> None:
        reports.append(metrics)
        workload.events.append(f"report {metrics['round']}")

    record = run_trial(SPACE.baseline(), space=SPACE, workload=workload, ctx=ctx, rounds=3,
                       report=report, limits=FAST)
    assert record.status == "ok" and [r["tok_s"] for r in reports] == [100.0, 101.0, 102.0]
    assert workload.events.index("stop") < workload.events.index("report 3")
    assert "verify_ms" not in reports[0]  # missing, not zero
    saved = json.loads((ctx.trial_dir / "trial.json").read_text())
    assert saved["status"] == "ok" and "a warning from preflight" in saved["warnings"]
    assert {"setup_s", "ready_s", "warmup_s", "bench_s", "teardown_s", "total_s"} <= set(
        saved["timings"])
    assert json.loads((ctx.trial_dir / "plan.json").read_text())["workload"] == "sleep"
    assert process.marked_processes(ctx.marker, exact=True) == []


def test_a_failing_round_is_a_failed_trial_with_its_kind_and_no_process_left(tmp_path: Path
                                                                            ) -> None:
    workload, ctx = SleepWorkload(fail_at=1), _ctx(tmp_path)
    with pytest.raises(TrialFailed):
        run_trial(SPACE.baseline(), space=SPACE, workload=workload, ctx=ctx, rounds=3,
                  report=lambda m: None, limits=FAST)
    failure = json.loads((ctx.trial_dir / "failure.json").read_text())
    assert failure["kind"] == "crashed_mid_benchmark"
    saved = json.loads((ctx.trial_dir / "trial.json").read_text())
    assert saved["status"] == "failed" and len(saved["rounds"]) == 1
    assert "stop" in workload.events
    assert process.marked_processes(ctx.marker, exact=True) == []


def test_an_invalid_config_is_never_launched(tmp_path: Path) -> None:
    workload, ctx = SleepWorkload(), _ctx(tmp_path)
    with pytest.raises(TrialFailed) as err:
        run_trial({"NCCL_PROTO": "bogus"}, space=SPACE, workload=workload, ctx=ctx, rounds=1,
                  report=lambda m: None, limits=FAST)
    assert err.value.failure.kind is FailureKind.INVALID_CONFIG
    assert workload.events == [] and not (ctx.trial_dir / "plan.json").exists()


def test_a_preflight_refusal_keeps_the_plan_and_launches_nothing(tmp_path: Path) -> None:
    workload, ctx = SleepWorkload(preflight_error=True), _ctx(tmp_path)
    with pytest.raises(TrialFailed):
        run_trial(SPACE.baseline(), space=SPACE, workload=workload, ctx=ctx, rounds=1,
                  report=lambda m: None, limits=FAST)
    saved = json.loads((ctx.trial_dir / "trial.json").read_text())
    assert saved["status"] == "failed" and saved["plan"]["workload"] == "sleep"
    assert workload.events == []


def test_a_stop_from_ray_is_stopped_not_failed(tmp_path: Path) -> None:
    workload, ctx = SleepWorkload(), _ctx(tmp_path)

    def report(metrics: dict[str, Any]) -> None:
        raise SystemExit  # what tune.report does when the scheduler stops the trial

    with pytest.raises(SystemExit):
        run_trial(SPACE.baseline(), space=SPACE, workload=workload, ctx=ctx, rounds=3,
                  report=report, limits=FAST)
    saved = json.loads((ctx.trial_dir / "trial.json").read_text())
    assert saved["status"] == "stopped" and not (ctx.trial_dir / "failure.json").exists()
    assert process.marked_processes(ctx.marker, exact=True) == []
