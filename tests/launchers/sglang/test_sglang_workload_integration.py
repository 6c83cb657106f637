"""SGLangWorkload end to end against the stand-in server: real processes, real HTTP.

The stand-in (simulator/sglang_server.py) is told what to produce (verify ms, draft ms,
accept length, no noise) and the workload must read it back through /metrics, /server_info,
the streamed meta_info, the server's log and NCCL's log files: exactly where SGLang's own
figures are exact (device-timer counters), within a tolerance where SGLang measures wall
time (step-time windows include the server's own overheads and idle time).
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port, marked_processes, reap_all
from launchers.sglang.launcher import METRIC_KEYS, SGLangArgs, SGLangRunning, SGLangWorkload
from launchers.sglang.startup import STARTUP_KEYS
from search_spaces.knobs import Value
from simulator.cost_model import OVERHEAD_MS

pytestmark = pytest.mark.integration

# A healthy stand-in's readiness wait: a safety net (a loaded box starts Python slowly)
READY_S = 120.0
ROOT = Path(__file__).resolve().parents[3]
SERVER = [sys.executable, "-m", "simulator.sglang_server"]
EXACT = ["--fake-verify-ms", "20", "--fake-draft-ms", "5", "--fake-accept-length", "2.5",
         "--fake-noise", "0", "--fake-startup-s", "0.2", "--decode-log-interval", "5",
         "--fake-time-scale", "0.2"]
CYCLE_MS = 20.0 + 5.0 + OVERHEAD_MS


@dataclass
class Trial:
    ctx: TrialContext

    def workload(self, fake_args: list[str], **args: object) -> SGLangWorkload:
        fields: dict[str, object] = {
            "model": "fake/llama-70b", "draft_model": "fake/eagle3",
            "speculative_algorithm": "EAGLE3", "server_cmd": SERVER, "server_args": fake_args,
            "input_len": 32, "output_len": 64, "concurrency": [1], "requests_per_round": 3,
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
        assert server.wait_ready(READY_S) < READY_S
        server.warmup()
        rounds = [server.measure(0), server.measure(1)]
        effective = server.effective()
    for m in rounds:
        assert set(m) == set(METRIC_KEYS)
        assert m["completed"] == 3 and m["failed"] == 0
        assert m["output_throughput"] > 0 and m["total_output_tokens"] == 3 * 64
        assert m["total_input_tokens"] > 0  # as the server counted the built-in text
        assert m["verify_ms"] == pytest.approx(20.0, rel=1e-3)  # device-timer counters: exact
        assert m["draft_ms"] == pytest.approx(5.0, rel=1e-3)
        # Step-time windows on the stand-in's deadline clock (a late wake-up of a busy box is
        # made up, not counted); the idle time between requests is in the windows that hold it.
        assert 0.98 * CYCLE_MS <= m["cycle_ms"] < 1.3 * CYCLE_MS
        assert m["accept_length"] == pytest.approx(2.5, rel=0.03)
        assert m["server_accept_length"] == pytest.approx(2.5, rel=0.05)
        assert 0 < m["median_ttft_ms"] <= m["p99_ttft_ms"] < m["mean_e2e_latency_ms"]
        assert 0 < m["median_itl_ms"] <= m["p99_itl_ms"] and m["mean_tpot_ms"] > 0
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
                              requests_per_round=4, output_len=32)
    with trial.start(workload, {}) as server:
        server.wait_ready(READY_S)
        m = server.measure(0)
    for c in (1, 2):
        assert {f"{k}_c{c}" for k in METRIC_KEYS} <= set(m)
        assert m[f"verify_ms_c{c}"] == pytest.approx(20.0, rel=1e-3)
        assert 0.98 * CYCLE_MS <= m[f"cycle_ms_c{c}"] < 1.3 * CYCLE_MS
    assert {k: m[k] for k in METRIC_KEYS} == {k: m[f"{k}_c2"] for k in METRIC_KEYS}
    assert m["completed_c1"] == m["completed_c2"] == 4
    log = (trial.ctx.trial_dir / "server.log").read_text()
    assert "Capture target verify CUDA graph end. bs=[1, 2], " in log  # the levels only


def test_accept_length_follows_the_text(trial: Trial, tmp_path: Path) -> None:
    """Predictable text accepts more drafted tokens than random ids (issue 17)."""
    fake = ["--fake-noise", "0", "--fake-startup-s", "0.1", "--fake-time-scale", "0.02"]
    accept = {}
    for i, dataset in enumerate(("builtin", "random")):
        ctx = TrialContext(trial.ctx.experiment, f"t{i}", tmp_path / f"t{i}",
                           gpu_ids=("0", "1"), port=free_port())
        workload = trial.workload(fake, dataset=dataset, output_len=48, requests_per_round=4)
        plan = workload.plan({}, ctx)
        try:
            with workload.start(plan, ctx) as server:
                server.wait_ready(READY_S)
                accept[dataset] = server.measure(0)["accept_length"]
        finally:
            reap_all(ctx.marker, grace=0.5, exact=True)
    assert accept["builtin"] > 1.3 * accept["random"] > 1.3


def test_without_speculative_decoding_server_figures_are_missing(trial: Trial) -> None:
    workload = trial.workload(EXACT, draft_model=None, speculative_algorithm=None)
    with trial.start(workload, {}) as server:
        server.wait_ready(READY_S)
        m = server.measure(0)
    assert m["completed"] == 3 and m["output_throughput"] > 0
    for key in ("verify_ms", "draft_ms", "cycle_ms", "accept_length", "server_accept_length"):
        assert m[key] is None, key


def test_counters_that_did_not_move_are_missing_not_zero(trial: Trial) -> None:
    """Issue 16, item 7: the server exposes its verify and draft seconds (device timer on),
    its decode passes move, the seconds do not: that is no measurement, not 0 ms."""
    import requests

    from launchers.sglang.metrics import parse_metrics_text

    still = [*EXACT, "--fake-verify-ms", "0", "--fake-draft-ms", "0"]
    with trial.start(trial.workload(still), {}) as server:
        server.wait_ready(READY_S)
        server.warmup()  # the labelled series appear with the first decode passes
        before = parse_metrics_text(requests.get(server.base_url + "/metrics", timeout=5).text)
        m = server.measure(0)
        after = parse_metrics_text(requests.get(server.base_url + "/metrics", timeout=5).text)
    assert before.verify_s == after.verify_s == 0.0 and after.draft_s == 0.0  # exposed, still
    assert after.passes is not None and before.passes is not None and after.passes > before.passes
    assert m["completed"] == 3 and m["output_throughput"] > 0
    assert m["verify_ms"] is None and m["draft_ms"] is None


def test_startup_split_by_load_format(trial: Trial, tmp_path: Path) -> None:
    """150 s of real weights against 5 s of dummy ones, on a clock 100 times faster; SGLang's
    own log lines give the split; the server runs in the workload's working directory."""
    fake = [*EXACT, "--fake-startup-s", "0", "--fake-load-s", "150", "--fake-draft-load-s", "6",
            "--fake-dummy-load-s", "5", "--fake-capture-s", "10", "--fake-startup-scale", "0.01"]
    splits = {}
    for fmt in ("auto", "dummy"):
        workdir = tmp_path / fmt
        workdir.mkdir()
        ctx = TrialContext(trial.ctx.experiment, fmt, tmp_path / f"trial-{fmt}",
                           gpu_ids=("0", "1"), port=free_port())
        workload = trial.workload([*fake, "--load-format", fmt], concurrency=[1, 4],
                                  workdir=workdir)
        try:
            with workload.start(workload.plan({}, ctx), ctx) as server:
                server.wait_ready(READY_S)
                assert psutil.Process(server.process.pid).cwd() == str(workdir)
                splits[fmt] = server.startup()
        finally:
            reap_all(ctx.marker, grace=0.5, exact=True)
    real, dummy = splits["auto"], splits["dummy"]
    assert set(real) == set(STARTUP_KEYS) and None not in real.values()
    # sleeps are lower bounds; the upper ones leave room for a loaded machine
    assert 1.55 <= real["startup_weights_s"] < 1.8  # target 1.5 + draft 0.06 (logged .2f)
    assert 0.09 <= dummy["startup_weights_s"] < 0.3  # 0.05 each
    for split in (real, dummy):  # two sizes (1, 4), 0.1 s each, for the target and the draft
        assert 0.39 <= split["startup_graphs_s"] < 0.8
        assert split["startup_weights_at_s"] < split["startup_graphs_at_s"]
        assert split["startup_graphs_at_s"] <= split["startup_ready_at_s"]
    # The ready time counts the weights and the graphs, each launch on its own clock (a
    # comparison across the two launches adds their Python start-ups, which a loaded box
    # stretched by 0.7 s): the sleeps are lower bounds; the logs' .2f rounding is allowed for.
    for split in (real, dummy):
        held = split["startup_ready_at_s"] - split["startup_load_begin_at_s"]
        assert held >= split["startup_weights_s"] + split["startup_graphs_s"] - 0.02, split
    assert real["startup_weights_at_s"] > 1.5


@pytest.mark.parametrize(("fake_args", "config", "kind"), [
    (["--fake-fault", "crash-startup"], {}, FailureKind.GRAPH_CAPTURE),
    ([], {"NCCL_ALGO": "Tree"}, FailureKind.GRAPH_CAPTURE),  # global Tree, tp 2
    (["--fake-fault", "oom-startup"], {}, FailureKind.KV_POOL_OOM),
    (["--fake-fault", "no-weights-startup"], {}, FailureKind.MISSING_WEIGHTS),
    (["--fake-fault", "missing-module-startup"], {}, FailureKind.MISSING_MODULE),
])
def test_startup_failures_are_classified(trial: Trial, fake_args: list[str],
                                         config: dict[str, Value], kind: FailureKind) -> None:
    with trial.start(trial.workload(fake_args), config) as server, \
            pytest.raises(TrialFailed) as info:
        server.wait_ready(READY_S)
    failure = info.value.failure
    assert failure.kind is kind
    assert failure.returncode == -9  # SGLang kills its own tree, itself included
    assert "OOM" not in failure.hint and "sigquit" not in failure.message.lower()
    if config:
        assert "No algorithm/protocol available for function AllGather" in failure.log_tail
        assert "allreduce:" in failure.hint  # failures.hint points at the per-collective form


def test_global_tree_with_one_rank_runs(trial: Trial) -> None:
    ctx = TrialContext(trial.ctx.experiment, trial.ctx.trial_id, trial.ctx.trial_dir,
                       gpu_ids=("0",), port=trial.ctx.port)
    workload = trial.workload(EXACT, output_len=16)
    plan = workload.plan({"NCCL_ALGO": "Tree"}, ctx)
    with workload.start(plan, ctx) as server:
        server.wait_ready(READY_S)
        server.measure(0)
        warnings = server.effective()["warnings"]
    assert any("one rank" in w and "NCCL_ALGO" in w for w in warnings)


def test_hang_at_startup_times_out(trial: Trial) -> None:
    with trial.start(trial.workload(["--fake-fault", "hang-startup"]), {}) as server, \
            pytest.raises(TrialFailed) as info:
        began = time.monotonic()  # the wait itself: a loaded box may start the process slowly
        server.wait_ready(1.5)
    waited = time.monotonic() - began
    assert info.value.failure.kind is FailureKind.STARTUP_TIMEOUT
    assert waited < 8.0, waited


def test_death_mid_round(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "die-mid-round", "--fake-die-after", "2"]
    with trial.start(trial.workload(fake), {}) as server:
        server.wait_ready(READY_S)
        server.warmup()
        with pytest.raises(TrialFailed) as info:
            server.measure(0)
    failure = info.value.failure
    assert failure.kind is FailureKind.CRASHED_MID_BENCHMARK
    # SGLang's watchdog names the scheduler's exit, then its SIGQUIT handler kills the tree
    assert "crashed with exit code -9. Triggering SIGQUIT for cleanup" in failure.log_tail
    assert "SIGQUIT received" in failure.log_tail
    assert "OOM" in failure.hint  # a SIGKILLed scheduler with no exception logged


def test_hang_mid_round(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "hang-mid-round", "--fake-die-after", "2"]
    with trial.start(trial.workload(fake, request_timeout=1.0), {}) as server:
        server.wait_ready(READY_S)
        server.warmup()
        with pytest.raises(TrialFailed) as info:
            server.measure(0)
    assert info.value.failure.kind is FailureKind.BENCHMARK_HANG


def test_grandchild_in_its_own_session_is_reaped(trial: Trial) -> None:
    fake = [*EXACT, "--fake-fault", "setsid-grandchild"]
    with trial.start(trial.workload(fake), {}) as server:
        server.wait_ready(READY_S)
        deadline = time.monotonic() + 5
        while len(marked_processes(trial.ctx.marker, exact=True)) < 4:  # server, 2 ranks, sleeper
            assert time.monotonic() < deadline, "the grandchild never appeared"
            time.sleep(0.05)
    # the fixture asserts that nothing with this trial's marker survived stop()


LOGS = Path(__file__).resolve().parents[1] / "logs"


@pytest.mark.parametrize(("log", "kind", "message"), [
    ("noweights", FailureKind.MISSING_WEIGHTS,
     "RuntimeError: Cannot find any model weights with `.models/tiny-llama`"),
    ("fa3", FailureKind.MISSING_MODULE,
     "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."),
])
def test_real_failure_logs_replayed_come_out_named(trial: Trial, log: str, kind: FailureKind,
                                                   message: str) -> None:
    """Real SGLang 0.5.16's logs (H200), replayed by a server that then dies as SGLang does:
    named by their own exception, not the sigquit line, and no OOM hint."""
    fake = ["--fake-replay-log", str(LOGS / f"sglang-0.5.16-h200-{log}.log")]
    with trial.start(trial.workload(fake), {}) as server, pytest.raises(TrialFailed) as info:
        server.wait_ready(READY_S)
    failure = info.value.failure
    assert (failure.kind, failure.message, failure.returncode) == (kind, message, -9)
    assert "OOM" not in failure.hint


def test_a_stop_servetune_asks_for_is_no_failure(trial: Trial) -> None:
    """Done with a server, servetune kills its tree at once: no SGLang crash path (no 5 s
    'crash diagnostics' sleep), well under SGLang's own SIGTERM stop of 6 s."""
    with trial.start(trial.workload(EXACT), {}) as server:
        server.wait_ready(READY_S)
        began = time.monotonic()
        server.stop()
        assert time.monotonic() - began < 2.0
    text = server.process.log_text()
    assert "SIGQUIT" not in text and "crashed with exit code" not in text
