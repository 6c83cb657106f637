"""The followers of a trial across nodes (nodes of rank >= 1), as SGLang runs them and as
servetune starts and stops them (tuner/run/node_server.py), without Ray: each follower's port
and GPUs checked on its node before the launch, its dummy health server on its port while it
runs, node 0 stopped first and the follower after a bounded wait (it ignores SIGTERM), its
port free after."""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from launchers import gpu, process
from launchers.base import LaunchPlan, TrialContext
from launchers.failures import TrialFailed
from launchers.multinode import MEETING_PORTS
from launchers.ports import PortLease
from tests.tuner.run.test_multinode import SPACE, LocalNodes, leftovers, run, trial
from tuner.run.lifecycle import Limits
from tuner.run.multinode import FOLLOWER_WAIT_S, NODES_FILE
from tuner.run.node_server import KILL_GRACE_S, NodeServer
from tuner.run.trial import run_trial


def test_node_0_stops_first_and_its_follower_ends_with_it_in_seconds(tmp_path: Path) -> None:
    """A 10 s stop grace: node 0's tree is killed first (launchers/sglang/running.py), its
    follower ends on its own (its peer gone) within the bounded wait; no follower waits out a
    grace for a SIGTERM it ignores."""
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    health: list[int] = []

    def report(metrics: dict[str, Any]) -> None:
        reports.append(metrics)
        if len(reports) > 1:  # the last round is reported once the servers are down
            return
        placed = json.loads((ctx.trial_dir / NODES_FILE).read_text())
        port = placed[1]["port"]
        with urllib.request.urlopen(f"http://{process.LOCALHOST}:{port}/health", timeout=2) as r:
            health.append(int(r.status))

    record = run_trial({**SPACE.baseline(), "NCCL_IB_QPS_PER_CONNECTION": 2}, space=SPACE,
                       workload=workload, ctx=ctx, rounds=2, report=report,
                       limits=Limits(30.0, stop_grace=10.0, gpu_clean_timeout=0.0),
                       experiment_prefix=f"{ctx.experiment}/")
    assert record.status == "ok" and health == [200]
    placed = json.loads((ctx.trial_dir / NODES_FILE).read_text())
    assert placed[1]["port"] not in (None, ctx.port)  # a port of its own "node" (port 0 runs)
    assert nodes.stops == [FOLLOWER_WAIT_S]  # once, after node 0's stop
    assert nodes.servers[1].poll() == 1  # ended on its own (its peer gone), not killed
    assert not (ctx.trial_dir / "nodes-stop.txt").exists()  # nothing killed, all came back
    # no wait waited out (a killed follower would take FOLLOWER_WAIT_S + KILL_GRACE_S); the
    # record above says so without the clock, this bound only under a loaded box's delays
    assert record.timings["teardown_s"] < FOLLOWER_WAIT_S, record.timings
    assert process.port_is_free(placed[1]["port"])
    assert not leftovers(ctx)


def test_a_follower_port_busy_on_its_node_fails_the_trial_before_launch(tmp_path: Path
                                                                         ) -> None:
    """The same --port on every node (a port given to the run): free on node 0 when node 0
    checked it, taken on node 1 when node 1 does (one machine here: taken in between)."""
    nodes = LocalNodes(2, own_port=False)
    ctx, workload, reports = trial(tmp_path, nodes)
    describe = nodes.describe
    with socket.socket() as taken:

        def taking() -> list[dict[str, Any]]:
            taken.bind((process.LOCALHOST, ctx.port or 0))
            taken.listen()
            return describe()

        nodes.describe = taking  # type: ignore[method-assign]
        with pytest.raises(TrialFailed) as failed:
            run(ctx, workload, reports, rounds=2)
    failure = failed.value.failure
    assert failure.kind.value == "port_busy", failure
    assert failure.message.startswith(f"node 1 (local1): port {ctx.port} ")
    assert failure.details["node_rank"] == 1
    assert not nodes.servers and not (ctx.trial_dir / NODES_FILE).exists()  # nothing started
    assert not leftovers(ctx)


def _meeting_port(ctx: TrialContext, offset: int = 0) -> int:
    assert ctx.dist_init_addr is not None
    return int(ctx.dist_init_addr.rpartition(":")[2]) + offset


def test_a_follower_s_busy_meeting_neighbour_fails_the_trial_before_launch(tmp_path: Path
                                                                           ) -> None:
    """SGLang (DP attention) checks the dist-init port and the six after it on every node:
    one of them bound on node 1 (taken after node 0 checked its own) is port_busy there."""
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    neighbour = _meeting_port(ctx, 3)
    describe = nodes.describe
    with socket.socket() as taken:

        def taking() -> list[dict[str, Any]]:
            taken.bind((process.LOCALHOST, neighbour))
            taken.listen()
            return describe()

        nodes.describe = taking  # type: ignore[method-assign]
        with pytest.raises(TrialFailed) as failed:
            run(ctx, workload, reports, rounds=2)
    failure = failed.value.failure
    assert failure.kind.value == "port_busy", failure
    assert failure.message.startswith(f"node 1 (local1): port(s) {neighbour} reserved by "
                                      "another trial or in use here"), failure.message
    assert not nodes.servers and not (ctx.trial_dir / NODES_FILE).exists()
    assert not leftovers(ctx)


def test_another_trial_s_reservation_on_a_follower_s_host_is_port_busy(tmp_path: Path
                                                                        ) -> None:
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    with PortLease("another experiment/t9") as other:
        assert other.take([_meeting_port(ctx, 1)]) == []
        with pytest.raises(TrialFailed) as failed:
            run(ctx, workload, reports, rounds=2)
    assert failed.value.failure.kind.value == "port_busy"
    assert f"port(s) {_meeting_port(ctx, 1)} " in failed.value.failure.message
    assert not nodes.servers and not leftovers(ctx)


def test_node_0_s_busy_meeting_port_fails_the_trial_before_any_node_starts(tmp_path: Path
                                                                           ) -> None:
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    with socket.socket() as taken:
        taken.bind((process.LOCALHOST, _meeting_port(ctx)))
        taken.listen()
        with pytest.raises(TrialFailed) as failed:
            run(ctx, workload, reports, rounds=2)
    failure = failed.value.failure
    assert failure.kind.value == "port_busy" and failure.details["node_rank"] == 0
    assert failure.message.startswith(f"node 0 (Ray node local0, {process.LOCALHOST}): "
                                      f"port(s) {_meeting_port(ctx)} already in use")
    assert not nodes.servers and not leftovers(ctx)


def test_the_trial_s_own_reservation_is_shared_by_its_nodes_on_one_host(tmp_path: Path
                                                                         ) -> None:
    """Node 0 holds the block (as ``across_nodes`` does); its follower on the same machine
    (the simulated cluster's case) takes it as the trial's own, and lets its share go at the
    stop."""
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    block = [_meeting_port(ctx, k) for k in range(MEETING_PORTS)]
    with PortLease(ctx.marker) as own:
        assert own.take(block) == []
        record = run(ctx, workload, reports, rounds=1)
        assert record.status == "ok", record.failure
        assert PortLease("another trial").take(block[:1]) == block[:1]  # still node 0's
    assert nodes.nodes[1].lease is None
    assert PortLease("another trial").take(block) == []


def test_a_follower_waits_for_its_gpus_before_the_launch(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """Node 1's GPU still held by another process (the last trial's): gpu_busy, node 1
    named, before any server starts; node 0's GPU was free."""
    def snapshot(gpus: list[str]) -> list[gpu.GpuState]:
        return [gpu.GpuState(g, 1 << 30, (999_999,) if g == "1" else ()) for g in gpus]

    monkeypatch.setattr(gpu, "snapshot", snapshot)
    nodes = LocalNodes(2, gpu_ids=("1",))
    ctx, workload, reports = trial(tmp_path, nodes)
    with pytest.raises(TrialFailed) as failed:
        run(ctx, workload, reports, rounds=2)
    failure = failed.value.failure
    assert failure.kind.value == "gpu_busy", failure
    assert failure.message.startswith("node 1 (local1): GPUs still in use") and \
        "GPU 1: pids 999999" in failure.message
    assert not nodes.servers and not leftovers(ctx)


def test_a_follower_that_does_not_end_is_killed_after_the_bounded_wait(tmp_path: Path
                                                                        ) -> None:
    """Node 0 never shut it down (killed, say): the wait, then its tree, SIGTERM ignored."""
    ignoring = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
               "print('up', flush=True); time.sleep(60)"
    node = NodeServer(1, "local1")
    node.start(LaunchPlan("test", (sys.executable, "-c", ignoring), {}), tmp_path / "n1.log",
               f"followers-{uuid.uuid4().hex[:6]}/t/node1")
    server = node.server
    assert server is not None
    deadline = time.monotonic() + 10
    while "up" not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    assert node.stop(wait=0.5) == [
        "the server did not end within 0.5 s of node 0's stop: its tree was killed"]
    took = time.monotonic() - began
    assert server.poll() is not None and 0.5 <= took < 0.5 + KILL_GRACE_S + 1.0, took
