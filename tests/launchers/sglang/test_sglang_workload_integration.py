"""SGLangWorkload end to end against the stand-in server: real processes, real HTTP.

The stand-in (tests/fakes/sglang_server.py) is told exactly what to produce (verify ms,
draft ms, accept length, no noise) and the workload must read the same numbers back through
/metrics, /server_info, the streamed meta_info and NCCL's log files.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port, marked_processes, reap_all
from launchers.sglang.launcher import SGLangArgs, SGLangRunning, SGLangWorkload
from search_spaces.knobs import Value
from tests.fakes.cost_model import OVERHEAD_MS

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SERVER = [sys.executable, "-m", "tests.fakes.sglang_server"]
EXACT = ["--fake-verify-ms", "20", "--fake-draft-ms", "5", "--fake-accept-length", "2.5",
         "--fake-noise", "0", "--fake-startup-s", "0.2", "--decode-log-interval", "10"]


@dataclass
class Trial:
    ctx: TrialContext

    def workload(self, fake_args: list[str], **args: object) -> SGLangWorkload:
        fields: dict[str, object] = {
            "model": "fake/llama-70b", "draft_model": "fake/eagle3",
            "speculative_algorithm": "EAGLE3", "server_cmd": SERVER, "server_args": fake_args,
            "input_len": 32, "output_len": 128, "concurrency": [1], "requests_per_round": 3,
            "warmup_requests": 1, "request_timeout": 10.0, "preflight": False,
        }
        fields.update(args)
        return SGLangWorkload(SGLangArgs.model_validate(fields))

    def start(self, workload: SGLangWorkload, config: dict[str, Value]) -> SGLangRunning:
        plan = workload.plan(config, self.ctx)
        workload.preflight(plan, self.ctx)
        return workload.start(plan, self.ctx)


@pytest.fixture
def trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Trial]:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the stand-in runs as a module of this repo
    ctx = TrialContext(f"it-{uuid.uuid4().hex[:8]}", "t0", tmp_path / "trial",
                       gpu_ids=("0", "1"), port=free_port())
    try:
        yield Trial(ctx)
        left = marked_processes(ctx.marker, exact=True)
        assert left == [], f"processes survived the trial: {left}"
    finally:
        reap_all(ctx.marker, grace=0.5, exact=True)


def test_rounds_read_back_what_the_stand_in_produces(trial: Trial) -> None:
    config: dict[str, Value] = {"NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": 4,
                                "NCCL_BUFFSIZE": None, "--speculative-num-steps": 3}
    with trial.start(trial.workload(EXACT), config) as server:
        assert server.wait_ready(30.0) < 30.0
        server.warmup()
        rounds = [server.measure(0), server.measure(1)]
        effective = server.effective()
    for m in rounds:
        assert m["completed"] == 3 and m["failed"] == 0
        assert m["output_tok_s"] > 0
        assert m["verify_ms"] == pytest.approx(20.0, rel=1e-6)
        assert m["draft_ms"] == pytest.approx(5.0, rel=1e-6)
        assert m["cycle_ms"] == pytest.approx(20.0 + 5.0 + OVERHEAD_MS, rel=1e-6)
        assert m["accept_length"] == pytest.approx(2.5, rel=0.03)
        assert m["server_accept_length"] == pytest.approx(2.5, rel=0.03)
        assert m["ttft_p50_ms"] > 0 and m["itl_p99_ms"] > 0
    assert effective["nranks"] == 2 and effective["ranks_seen"] == 2
    assert effective["env"]["NCCL_ALGO"] == "allreduce:tree"
    assert effective["env"]["NCCL_MAX_NCHANNELS"] == "4"
    assert effective["coll_channels"] == 4
    assert effective["columns"]["nccl_allreduce_algos"] == "TREE/LL"
    warnings = effective["warnings"]
    assert "NCCL_GRAPH_REGISTER=0 was set by the server, not by servetune" in warnings
    assert not any(w.startswith("asked ") for w in warnings), warnings
    log = (trial.ctx.trial_dir / "server.log").read_text()
    assert "The server is fired up and ready to roll!" in log
    assert "Decode batch, #running-req: 1" in log


def test_several_concurrencies_report_each(trial: Trial) -> None:
    workload = trial.workload(EXACT, concurrency=[1, 2], objective_concurrency=2,
                              requests_per_round=2, output_len=32)
    with trial.start(workload, {}) as server:
        server.wait_ready(30.0)
        m = server.measure(0)
    assert m["output_tok_s"] == m["output_tok_s_c2"]
    assert m["output_tok_s_c1"] is not None and m["verify_ms_c1"] == pytest.approx(20.0)
    assert m["cycle_ms_c2"] == pytest.approx(25.5)


@pytest.mark.parametrize(("fake_args", "config", "kind"), [
    (["--fake-fault", "crash-startup"], {}, FailureKind.GRAPH_CAPTURE),
    ([], {"NCCL_ALGO": "Tree"}, FailureKind.GRAPH_CAPTURE),  # global Tree, tp 2
    (["--fake-fault", "oom-startup"], {}, FailureKind.KV_POOL_OOM),
])
def test_startup_failures_are_classified(trial: Trial, fake_args: list[str],
                                         config: dict[str, Value], kind: FailureKind) -> None:
    with trial.start(trial.workload(fake_args), config) as server, \
            pytest.raises(TrialFailed) as info:
        server.wait_ready(30.0)
    failure = info.value.failure
    assert failure.kind is kind
    assert failure.returncode == 1
    if config:
        assert "No algorithm/protocol available for function AllGather" in failure.log_tail
        assert "allreduce:" in failure.hint  # failures.hint points at the per-collective form


def test_global_tree_with_one_rank_runs(trial: Trial) -> None:
    ctx = TrialContext(trial.ctx.experiment, trial.ctx.trial_id, trial.ctx.trial_dir,
                       gpu_ids=("0",), port=trial.ctx.port)
    workload = trial.workload(EXACT, output_len=16)
    plan = workload.plan({"NCCL_ALGO": "Tree"}, ctx)
    with workload.start(plan, ctx) as server:
        server.wait_ready(30.0)
        server.measure(0)
        warnings = server.effective()["warnings"]
    assert any("one rank" in w and "NCCL_ALGO" in w for w in warnings)


def test_hang_at_startup_times_out(trial: Trial) -> None:
    began = time.monotonic()
    with trial.start(trial.workload(["--fake-fault", "hang-startup"]), {}) as server, \
            pytest.raises(TrialFailed) as info:
        server.wait_ready(1.5)
    assert info.value.failure.kind is FailureKind.STARTUP_TIMEOUT
    assert time.monotonic() - began < 8.0


def test_death_mid_round(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "die-mid-round", "--fake-die-after", "2"]
    with trial.start(trial.workload(fake), {}) as server:
        server.wait_ready(30.0)
        server.warmup()
        with pytest.raises(TrialFailed) as info:
            server.measure(0)
    failure = info.value.failure
    assert failure.kind is FailureKind.CRASHED_MID_BENCHMARK
    assert "Received sigquit from a child process" in failure.log_tail


def test_hang_mid_round(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "hang-mid-round", "--fake-die-after", "2"]
    with trial.start(trial.workload(fake, request_timeout=1.0), {}) as server:
        server.wait_ready(30.0)
        server.warmup()
        with pytest.raises(TrialFailed) as info:
            server.measure(0)
    assert info.value.failure.kind is FailureKind.BENCHMARK_HANG


def test_grandchild_in_its_own_session_is_reaped(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "setsid-grandchild"]
    with trial.start(trial.workload(fake), {}) as server:
        server.wait_ready(30.0)
        deadline = time.monotonic() + 5
        while len(marked_processes(trial.ctx.marker, exact=True)) < 4:  # server, 2 ranks, sleeper
            assert time.monotonic() < deadline, "the grandchild never appeared"
            time.sleep(0.05)
    # the fixture asserts that nothing with this trial's marker survived stop()
