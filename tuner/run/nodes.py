"""A trial across nodes on Ray: its placement group, the agents that start and stop each
node's server on that node, and the sweep of every node at the end of an experiment.

A trial of N nodes holds one placement group of N bundles, each a whole node's GPUs (and one
CPU), spread strictly over N nodes (``placement``). The trial itself runs in bundle 0, on
node 0, and starts node 0's server there as any trial does. For bundles 1..N-1 it starts a
``NodeAgent`` actor pinned to that bundle: the agent spawns that node's server as a marked
process tree on its own node (with the GPUs Ray gave the agent, and the trial's environment,
once its port and GPUs are free there: tuner/run/node_server.py), answers whether it still
runs, and stops it by PID and marker there, after node 0's. An agent dies with its
trial (Ray kills actors whose owner died, and their process groups with them); at the end of
the experiment a task on every live node reaps whatever the experiment's marker still names
there (``sweep``). Ray-free logic (the watch, the failures) is in tuner/run/multinode.py.
"""

from __future__ import annotations

import atexit
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import ray
from ray.tune import PlacementGroupFactory
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import (
    NodeAffinitySchedulingStrategy,
    PlacementGroupSchedulingStrategy,
)

from launchers import process
from launchers.base import LaunchPlan, TrialContext, Workload
from launchers.failures import TrialFailed
from launchers.multinode import MEETING_PORTS, Placement
from launchers.ports import reserve_block
from launchers.priority import match_parent_priority
from tuner.run.installs import Install
from tuner.run.multinode import (
    NODE_ENV,
    Here,
    MultiNodeWorkload,
    NodeLost,
    named,
    node_label,
    node_log,
    node_marker,
)
from tuner.run.node_server import STOP_BUDGET_S, NodeServer

CALL_TIMEOUT_S = 10.0  # a node that does not answer a call in this long is taken as lost
PLACE_TIMEOUT_S = 120.0  # the agents' start (their bundles are already reserved)


def bundles(resources: Mapping[str, float], placement: Placement) -> PlacementGroupFactory:
    """A trial's resources over ``placement``'s whole nodes: one bundle per node, strictly
    spread."""
    bundle = {"CPU": float(resources.get("cpu", 1))}
    if resources.get("gpu"):
        bundle["GPU"] = float(resources["gpu"])
    return PlacementGroupFactory([dict(bundle) for _ in range(placement.nodes)],
                                 strategy="STRICT_SPREAD")


# ---------------------------------------------------------------- the agent on each node


class NodeAgent:
    """Runs on one node of a trial (a Ray actor in that node's bundle): its server's owner."""

    def __init__(self, rank: int, gpu_timeout: float, own_port: bool) -> None:
        self.priority = match_parent_priority()  # not Ray's worker niceness for the server
        self.node = NodeServer(rank, ray.get_runtime_context().get_node_id(),
                               tuple(str(g) for g in ray.get_gpu_ids()), gpu_timeout, own_port,
                               ray.util.get_node_ip_address())
        atexit.register(self._exit)

    def describe(self) -> dict[str, Any]:
        return {"rank": self.node.rank, "node_id": self.node.node_id,
                "address": ray.util.get_node_ip_address(), "hostname": socket.gethostname(),
                "gpu_ids": list(self.node.gpu_ids), "priority": self.priority}

    def start(self, plan: LaunchPlan, log_path: str, marker: str) -> dict[str, Any]:
        return self.node.start(plan, Path(log_path), marker)

    def poll(self) -> int | None:
        return self.node.poll()

    def log_tail(self, max_bytes: int) -> str:
        return self.node.log_tail(max_bytes)

    def stop(self, wait: float) -> list[str]:
        return self.node.stop(wait)

    def _exit(self) -> None:
        with suppress(Exception):
            self.stop(wait=0.0)


class RayNodes:
    """Nodes 1..N-1 of the trial this process runs (``tuner.run.multinode.Nodes``)."""

    def __init__(self, count: int, gpu_timeout: float = 60.0, own_port: bool = False) -> None:
        pg = get_current_placement_group()
        if pg is None:
            raise RuntimeError("a trial across nodes runs in a placement group (placement())")
        spec = pg.bundle_specs
        agent = ray.remote(NodeAgent)
        self.agents: list[Any] = [agent.options(
            num_cpus=spec[rank].get("CPU", 0), num_gpus=spec[rank].get("GPU", 0),
            max_restarts=0, max_task_retries=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=rank)).remote(rank, gpu_timeout, own_port)
            for rank in range(1, count)]
        self.gpu_timeout = gpu_timeout
        self.info: dict[int, dict[str, Any]] = {}

    def _get(self, rank: int, ref: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        try:
            return ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            raise NodeLost(rank, f"no answer in {timeout:.0f} s") from None
        except ray.exceptions.RayError as err:
            cause = getattr(err, "cause", None)
            if isinstance(cause, TrialFailed):  # the node's own check (its port, its GPUs)
                raise TrialFailed(named(cause.failure, self, rank)) from None
            raise NodeLost(rank, str(err).strip().splitlines()[0][:300]) from None

    def _each(self, calls: Sequence[Any], timeout: float = CALL_TIMEOUT_S) -> list[Any]:
        return [self._get(rank, ref, timeout) for rank, ref in enumerate(calls, 1)]

    def describe(self) -> list[dict[str, Any]]:
        infos = self._each([a.describe.remote() for a in self.agents], PLACE_TIMEOUT_S)
        self.info = {info["rank"]: info for info in infos}
        return infos

    def label(self, rank: int) -> str:
        info = self.info.get(rank)
        if info is None:
            return f"node {rank}"
        return node_label(rank, info)

    def start(self, plans: Sequence[LaunchPlan], folder: Path, marker: str
              ) -> list[dict[str, Any]]:
        pairs = enumerate(zip(self.agents, plans, strict=True), 1)
        return self._each([a.start.remote(plan, str(node_log(folder, r)), node_marker(marker, r))
                           for r, (a, plan) in pairs], self.gpu_timeout + CALL_TIMEOUT_S)

    def poll(self) -> list[int | None]:
        return self._each([a.poll.remote() for a in self.agents])

    def log_tail(self, rank: int) -> str:
        try:
            text: str = self._get(rank, self.agents[rank - 1].log_tail.remote(1 << 16))
        except NodeLost:
            return ""
        return text

    def stop(self, wait: float) -> list[str]:
        refs = [a.stop.remote(wait) for a in self.agents]
        problems = []
        for rank, ref in enumerate(refs, 1):
            try:
                problems += [f"{self.label(rank)}: {p}"
                             for p in self._get(rank, ref, wait + STOP_BUDGET_S + CALL_TIMEOUT_S)]
            except NodeLost as lost:
                problems.append(f"{self.label(rank)}: not stopped there: {lost.reason}")
        return problems

    def close(self) -> None:
        for agent in self.agents:
            with suppress(Exception):
                ray.kill(agent)


@contextmanager
def across_nodes(ctx: TrialContext, workload: Workload, placement: Placement,
                 gpu_timeout: float = 60.0, own_ports: bool = False
                 ) -> Iterator[tuple[TrialContext, Workload]]:
    """This trial's context and workload over ``placement``'s nodes (as they are for one): the
    meeting address is this node's and a block of ``MEETING_PORTS`` ports here, outside the
    ephemeral range and reserved for the trial until it ends (``launchers.ports``; each other
    node reserves and checks them there too); each other node waits up to ``gpu_timeout``
    for its GPUs and serves on a free port of its own with ``own_ports`` (the run leaves
    ports to each trial); the agents go when the trial ends."""
    if not placement.across_nodes:
        yield ctx, workload
        return
    nodes = placement.nodes
    address = ray.util.get_node_ip_address()
    here = Here(ray.get_runtime_context().get_node_id(), address)
    hosts = tuple(dict.fromkeys((address, process.LOCALHOST)))
    with reserve_block(ctx.marker, MEETING_PORTS, hosts) as lease:
        ctx = replace(ctx, nodes=nodes, dist_init_addr=f"{address}:{lease.ports[0]}")
        others = RayNodes(nodes, gpu_timeout, own_ports)
        try:
            yield ctx, MultiNodeWorkload(workload, others, here)
        finally:
            others.close()


# ---------------------------------------------------------------- every node: installs, sweep


def _install_here() -> Install:
    return Install.here()


def installs(timeout: float = 120.0) -> dict[str, Install | str]:
    """The servetune and SGLang of every live node that can hold a trial (those with GPUs,
    where any has; else every node), by "<Ray node id> (<address>)"; a node that cannot run
    servetune's task, or does not answer in ``timeout``, says why instead. The task needs a
    fresh Ray worker on each node, as ``sweep``'s: 60 s was not enough on a 2-core box with
    two busy loops and another run beside it (the run refused the cluster as bad input)."""
    alive = [n for n in ray.nodes() if n.get("Alive")]
    able = [n for n in alive if n.get("Resources", {}).get("GPU", 0) > 0] or alive
    task = ray.remote(num_cpus=0, max_retries=0)(_install_here)
    refs = {f"{n['NodeID'][:16]} ({n.get('NodeManagerAddress')})": task.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in able}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    out: dict[str, Install | str] = {}
    for node, ref in refs.items():
        try:
            out[node] = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            out[node] = f"did not answer in {timeout:.0f} s"
        except ray.exceptions.RayError as err:
            first = str(err).strip().splitlines()
            out[node] = f"cannot run servetune ({first[-1][:200] if first else type(err).__name__})"
    return out


def _node_of(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get(NODE_ENV)
    except (psutil.Error, OSError):
        return None


def _sweep_here(prefix: str) -> tuple[str, list[int]]:
    """This node's leftovers of the experiment (those of another node sharing this machine,
    in a simulated cluster, are left to that node's sweep; a private Ray's own processes to
    the reap after its shutdown)."""
    node = ray.get_runtime_context().get_node_id()
    ray_here = process.ray_marker(prefix)  # the Ray this sweep runs on
    found = [m.pid for m in process.marked_processes(prefix)
             if m.marker != ray_here and _node_of(m.pid) in (node, None)]
    return node, process.kill_processes(found, grace=3.0) if found else []


def sweep(prefix: str, timeout: float = 120.0) -> dict[str, list[int]]:
    """Reap the experiment's marked processes on every live node; returns the pids per node
    (nodes that did not answer in ``timeout`` are missing). Each node's task needs a fresh Ray
    worker there: on a busy 2-core box with two busy loops beside it 30 s was not enough, and
    the node's leftovers stayed; the wait ends as soon as every node answered."""
    task = ray.remote(num_cpus=0, max_retries=0)(_sweep_here)
    alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
    refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
            .remote(prefix) for n in alive]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    out: dict[str, list[int]] = {}
    for ref in ready:
        with suppress(ray.exceptions.RayError):
            node, pids = ray.get(ref)
            out[node] = pids
    return out
