"""A trial across nodes without Ray (tuner/run/multinode.py): ``run_trial`` over the real
stand-in on two "nodes" of this machine, the other node held by ``LocalNodes`` (what the Ray
agents do, in this process): rounds through node 0, a node whose server dies or that stops
answering fails the trial with that node named, every node's tree gone after."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from launchers import process
from launchers.base import LaunchPlan, TrialContext
from launchers.failures import TrialFailed, follower_placement
from launchers.multinode import MEETING_PORTS, Placement
from launchers.ports import reserve_block
from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from search_spaces.space import load_preset
from simulator.runs import FAST, STAND_IN
from tuner.run.cluster import Cluster, trial_slots
from tuner.run.lifecycle import Limits
from tuner.run.multinode import (
    NODES_FILE,
    Here,
    MultiNodeWorkload,
    NodeLost,
    named,
    node_log,
    node_marker,
)
from tuner.run.node_server import NodeServer
from tuner.run.trial import FAILURE_FILE, run_trial
from tuner.spec import SpecError

SPACE = load_preset("nccl-multinode")
LIMITS = Limits(ready_timeout=120.0, stop_grace=1.0, gpu_clean_timeout=0.0)


class LocalNodes:
    """The other nodes, here: each node's server a marked tree of this process, started and
    stopped as the agent on that node does (``NodeServer``)."""

    def __init__(self, count: int, own_port: bool = True, gpu_ids: tuple[str, ...] = ("0",)
                 ) -> None:
        self.count = count
        self.nodes = {r: NodeServer(r, f"local{r}", gpu_ids, 0.0, own_port)
                      for r in range(1, count)}
        self.gone: set[int] = set()  # nodes that stopped answering
        self.stops: list[float] = []  # each stop's wait

    @property
    def servers(self) -> dict[int, process.ServerProcess]:
        return {r: n.server for r, n in self.nodes.items() if n.server is not None}

    def _alive(self, rank: int) -> None:
        if rank in self.gone:
            raise NodeLost(rank, "no answer in 10 s")

    def describe(self) -> list[dict[str, Any]]:
        return [{"rank": r, "node_id": f"local{r}", "address": process.LOCALHOST,
                 "gpu_ids": ["0"]} for r in range(1, self.count)]

    def label(self, rank: int) -> str:
        return f"node {rank} (local{rank})"

    def start(self, plans: Sequence[LaunchPlan], folder: Path, marker: str
              ) -> list[dict[str, Any]]:
        try:
            return [self.nodes[r].start(plan, node_log(folder, r), node_marker(marker, r))
                    for r, plan in enumerate(plans, 1)]
        except TrialFailed as failed:  # as RayNodes names the node
            rank = failed.failure.details["node_rank"]
            raise TrialFailed(named(failed.failure, self, rank)) from None

    def poll(self) -> list[int | None]:
        for rank in self.nodes:
            self._alive(rank)
        return [n.poll() for n in self.nodes.values()]

    def log_tail(self, rank: int) -> str:
        return self.nodes[rank].log_tail(1 << 20) if rank not in self.gone else ""

    def stop(self, wait: float) -> list[str]:
        self.stops.append(wait)
        problems = []
        for rank, node in self.nodes.items():
            if rank in self.gone:
                problems.append(f"{self.label(rank)}: not stopped there")
            problems += node.stop(wait)  # a test's own: gone or not, nothing may be left
        return problems


def meeting_addr() -> str:
    """Node 0's meeting address as a trial picks it (``across_nodes``): a block of ports
    outside the ephemeral range, let go at once here (node 0 and each follower check it)."""
    with reserve_block(f"test-{uuid.uuid4().hex[:6]}", MEETING_PORTS) as lease:
        return f"{process.LOCALHOST}:{lease.ports[0]}"


def trial(tmp_path: Path, nodes: LocalNodes, **switches: str
          ) -> tuple[TrialContext, MultiNodeWorkload, list[dict[str, Any]]]:
    extra = [w for k, v in switches.items() for w in (f"--fake-{k}", v)]
    args = SGLangArgs(model=str(tmp_path), server_cmd=[*STAND_IN, *FAST, *extra],
                      output_len=48, requests_per_round=2, preflight=False, nccl_debug=False)
    ctx = TrialContext(f"mn-{uuid.uuid4().hex[:6]}", "t1", tmp_path / "t1", ("0",),
                       process.free_port(), 0, nodes.count, meeting_addr())
    return ctx, MultiNodeWorkload(args.build(), nodes, Here("local0", process.LOCALHOST)), []


def run(ctx: TrialContext, workload: MultiNodeWorkload, reports: list[dict[str, Any]],
        rounds: int, on_round: Any = None) -> Any:
    def report(metrics: dict[str, Any]) -> None:
        reports.append(metrics)
        if on_round is not None:
            on_round(len(reports))

    config = {**SPACE.baseline(), "NCCL_IB_QPS_PER_CONNECTION": 2}
    return run_trial(config, space=SPACE, workload=workload, ctx=ctx, rounds=rounds,
                     report=report, limits=LIMITS, experiment_prefix=f"{ctx.experiment}/")


def leftovers(ctx: TrialContext) -> list[process.Marked]:
    return process.marked_processes(f"{ctx.experiment}/")


def test_a_two_node_trial_runs_its_rounds_through_node_0(tmp_path: Path) -> None:
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)
    record = run(ctx, workload, reports, rounds=2)
    assert record.status == "ok" and len(reports) == 2
    assert all(r["output_throughput"] > 0 for r in reports)
    placed = json.loads((ctx.trial_dir / NODES_FILE).read_text())
    assert [(n["rank"], n["node_id"], n["marker"]) for n in placed] == [
        (0, "local0", ctx.marker), (1, "local1", f"{ctx.marker}/node1")]
    assert "Node 1 of 2 joined" in node_log(ctx.trial_dir, 1).read_text()
    assert record.plan is not None and len(record.plan["peers"]) == 1
    assert not leftovers(ctx)


@pytest.mark.parametrize("lost", [False, True], ids=["server-dies", "node-stops-answering"])
def test_a_failed_node_fails_the_trial_named(tmp_path: Path, lost: bool) -> None:
    nodes = LocalNodes(2)
    ctx, workload, reports = trial(tmp_path, nodes)

    def after_round(count: int) -> None:
        if count == 1:
            if lost:
                nodes.gone.add(1)  # as when its machine is gone: its server with it
            nodes.servers[1].popen.kill()

    with pytest.raises(TrialFailed) as failed:
        run(ctx, workload, reports, rounds=6, on_round=after_round)
    failure = failed.value.failure
    assert failure.details["node_rank"] == 1
    assert failure.message.startswith("node 1 (local1)")
    assert failure.kind.value == ("node_lost" if lost else "crashed")
    assert json.loads((ctx.trial_dir / FAILURE_FILE).read_text())["kind"] == failure.kind.value
    if not lost:  # seen on a follower only: where, for the failure memory
        assert follower_placement(failure.to_json()) == "local0,local1"
    assert len(reports) < 6
    assert not leftovers(ctx), leftovers(ctx)


def test_a_node_that_never_answers_fails_before_launch(tmp_path: Path) -> None:
    nodes = LocalNodes(2)
    nodes.gone.add(1)
    nodes.describe = lambda: (_ for _ in ()).throw(NodeLost(1, "did not start"))  # type: ignore[method-assign]
    ctx, workload, reports = trial(tmp_path, nodes)
    with pytest.raises(TrialFailed) as failed:
        run(ctx, workload, reports, rounds=2)
    assert failed.value.failure.kind.value == "node_lost"
    assert "did not start" in failed.value.failure.message
    assert not leftovers(ctx)


def test_node_markers_keep_a_nodes_teardown_on_its_node() -> None:
    assert node_marker("e/t1", 0) == "e/t1"
    assert node_marker("e/t1", 2) == "e/t1/node2"


def test_a_placement_says_what_a_trial_holds() -> None:
    two = Placement(2)
    assert two.across_nodes and two.flag == "--nodes-per-trial 2"
    assert two.held(8) == "8 GPU(s) on each of 2 nodes" and two.meeting == "$DIST_INIT_ADDR"
    one = Placement()
    assert not one.across_nodes and one.held(0) == "no GPU(s)" and one.meeting is None
    with pytest.raises(ValueError, match="at least one node"):
        Placement(0)


def test_trials_at_once_are_the_groups_of_nodes_a_cluster_holds() -> None:
    cluster = Cluster(5, [0, 8, 8, 8, 8], None, False)  # a CPU head and four 8-GPU nodes
    assert trial_slots(cluster, 8) == 4
    assert trial_slots(cluster, 8, Placement(2)) == 2
    assert trial_slots(cluster, 8, Placement(3)) == 1
    with pytest.raises(SpecError, match="--nodes-per-trial 5: the cluster has 4 node"):
        trial_slots(cluster, 8, Placement(5))
    assert trial_slots(Cluster(3, [0, 0, 0], None, False), 0, Placement(2)) == 1


def test_the_proxy_spreads_its_ranks_over_two_nodes_on_gloo(tmp_path: Path) -> None:
    """Two ranks on each of two nodes, one group of four over gloo: rounds through node 0's
    rank 0, and node 1's ranks answer every request (rank 0 hands them over the group)."""
    nodes = LocalNodes(2)
    args = ProxyArgs(device="cpu", model="tiny", iters_per_round=2, ready_timeout=60)
    ctx = TrialContext(f"mn-{uuid.uuid4().hex[:6]}", "t1", tmp_path / "t1", (), None, 0, 2,
                       meeting_addr())
    workload = MultiNodeWorkload(args.build(), nodes, Here("local0", process.LOCALHOST))
    space = load_preset("nccl-multinode")
    reports: list[dict[str, Any]] = []
    record = run_trial(space.baseline(), space=space, workload=workload, ctx=ctx, rounds=2,
                       report=reports.append, limits=LIMITS,
                       experiment_prefix=f"{ctx.experiment}/")
    assert record.status == "ok", record.failure
    assert [r["ranks"] for r in reports] == [4, 4] and all(r["est_tok_s"] > 0 for r in reports)
    assert record.plan is not None
    peer = record.plan["peers"][0]["argv"]
    assert peer[peer.index("--node-rank") + 1] == "1" and "--port" not in peer
    assert not leftovers(ctx)
