"""The workload contract every workload passes (plan -> preflight -> start -> wait_ready ->
measure -> stop), run on the SGLang stand-in and on the proxy over gloo: the plan is pure,
one launch measures the workload's own metric and leaves nothing running, and a launch that
cannot come up fails with a FailureKind and leaves nothing running either."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from launchers.base import TrialContext, WorkloadArgs
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port, marked_processes, port_is_free, reap_all
from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from search_spaces.knobs import Value

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STAND_IN = [sys.executable, "-m", "simulator.sglang_server", "--fake-time-scale", "0.05",
            "--fake-startup-s", "0.2", "--fake-noise", "0"]


@dataclass(frozen=True)
class Case:
    """One workload under the contract: how to build it (``broken``: one that cannot come
    up), a config that sets something, and the kinds its broken launch may fail with."""

    name: str
    build: Callable[[Path, bool], WorkloadArgs]
    config: dict[str, Value]
    broken_kinds: frozenset[FailureKind]


def _sglang(root: Path, broken: bool) -> WorkloadArgs:
    (root / "model").mkdir(parents=True, exist_ok=True)
    fault = ["--fake-fault", "crash-startup"] if broken else []
    return SGLangArgs(model=str(root / "model"), server_cmd=[*STAND_IN, *fault],
                      speculative_algorithm="EAGLE3", input_len=16, output_len=16,
                      requests_per_round=2, warmup_requests=1, preflight=False,
                      ready_timeout=120)


def _proxy(root: Path, broken: bool) -> WorkloadArgs:
    return ProxyArgs(model="tiny", kv_len=64, iters_per_round=2, device="cpu",
                     ready_timeout=0.05 if broken else 120)


CASES = [
    Case("sglang", _sglang, {"NCCL_PROTO": "LL"},
         frozenset({FailureKind.GRAPH_CAPTURE, FailureKind.CRASHED})),
    Case("proxy", _proxy, {"NCCL_PROTO": "LL"}, frozenset({FailureKind.STARTUP_TIMEOUT})),
]


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TrialContext]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    context = TrialContext(f"contract-{uuid.uuid4().hex[:8]}", "t0", tmp_path / "t0",
                           port=free_port())
    try:
        yield context
    finally:
        reap_all(context.marker, grace=0.5, exact=True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_plan_is_pure(case: Case, ctx: TrialContext, tmp_path: Path) -> None:
    workload = case.build(tmp_path, False).build()
    first, again = workload.plan(case.config, ctx), workload.plan(dict(case.config), ctx)
    assert first == again and first.workload == workload.kind
    assert not ctx.trial_dir.exists()  # planning writes nothing
    assert workload.plan({}, ctx) != first  # the config is in the plan


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_one_launch_measures_and_leaves_nothing(case: Case, ctx: TrialContext,
                                                tmp_path: Path) -> None:
    args = case.build(tmp_path, False)
    workload = args.build()
    plan = workload.plan(case.config, ctx)
    assert isinstance(workload.preflight(plan, ctx), list)
    with workload.start(plan, ctx) as running:
        assert running.wait_ready(args.ready_timeout) >= 0
        running.warmup()
        metrics = running.measure(0)
    value = metrics.get(workload.default_metric)
    assert isinstance(value, float) and value > 0, metrics
    assert marked_processes(ctx.marker, exact=True) == []
    assert plan.port is None or port_is_free(plan.port, plan.host)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_launch_that_cannot_come_up_fails_with_a_kind(case: Case, ctx: TrialContext,
                                                         tmp_path: Path) -> None:
    args = case.build(tmp_path, True)
    workload = args.build()
    plan = workload.plan(case.config, ctx)
    workload.preflight(plan, ctx)
    with pytest.raises(TrialFailed) as failed, workload.start(plan, ctx) as running:
        running.wait_ready(args.ready_timeout)
    assert failed.value.failure.kind in case.broken_kinds, failed.value.failure
    assert marked_processes(ctx.marker, exact=True) == []
