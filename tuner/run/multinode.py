"""A trial across nodes, without Ray: any workload whose plan holds a plan per node
(``LaunchPlan.peers``, launchers/multinode.py) run as one configuration.

Node 0's server starts here, as the workload starts it (this process runs on node 0); the
other nodes' servers start on their own nodes through ``Nodes`` (tuner/run/nodes.py: Ray
actors pinned to the trial's placement-group bundles, each checking its port and GPUs there,
tuner/run/node_server.py). While the trial runs, a watch asks every node about its server:
when one exits, or its node stops answering, node 0's server is stopped too (SGLang's other
ranks would wait in NCCL until a timeout) and the trial fails with that node named: the
node's own failure kind read from its log (with the trial's nodes, its ``placement``: a
failure seen on a follower only is held back by the failure memory until it repeats on other
nodes), or ``node_lost``. Teardown stops node 0 first (SGLang's followers ignore SIGTERM and
end with rank 0), then each other node's tree on its node after a bounded wait (by PID and by
that node's marker).

Each node's processes carry a marker of their own, ``<experiment>/<trial>/node<R>`` under the
trial's, so that a node's teardown never reaches past its node, even where several
"nodes" share one machine (the CPU tests' simulated cluster).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Protocol

from launchers.base import LaunchPlan, Metrics, Running, TrialContext, Workload
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.multinode import MEETING_PORTS, meeting_addr, meeting_ports
from launchers.process import LOCALHOST, port_is_free
from search_spaces.knobs import Value
from tuner.record.files import NODES_JSON
from tuner.record.trial_file import NodeRecord, write_nodes

NODE_ENV = "SERVETUNE_NODE"  # the Ray node a server of a multi-node trial runs on
NODES_FILE = NODES_JSON  # (its name where tests look for it)
WATCH_INTERVAL_S = 0.5
FOLLOWER_WAIT_S = 5.0  # at most, once node 0 is down, for a follower to end on its own


def node_label(rank: int, info: Mapping[str, Any]) -> str:
    """How a failure names node ``rank`` from what is known of it (``describe``, nodes.json):
    its Ray node id, host name where known, and address."""
    host = f"{info['hostname']} " if info.get("hostname") else ""
    return f"node {rank} (Ray node {str(info['node_id'])[:16]}, {host}{info.get('address')})"


def node_marker(marker: str, rank: int) -> str:
    """The marker of node ``rank``'s processes (node 0 keeps the trial's own)."""
    return marker if rank == 0 else f"{marker}/node{rank}"


def trial_marker(marker: str, rank: int) -> str:
    """The trial's marker from node ``rank``'s (``node_marker``'s inverse)."""
    return marker.removesuffix(f"/node{rank}") if rank else marker


def node_log(folder: Path, rank: int) -> Path:
    return folder / f"node{rank}" / "server.log"


class NodeLost(Exception):
    """A node of the trial stopped answering (its machine, its Ray node, or the agent there)."""

    def __init__(self, rank: int, reason: str) -> None:
        super().__init__(reason)
        self.rank = rank
        self.reason = reason


class Nodes(Protocol):
    """The other nodes of a trial, ranks 1..N-1 (tuner/run/nodes.py holds them on Ray)."""

    def describe(self) -> list[dict[str, Any]]:
        """Per node: rank, node_id, address, gpu_ids. Raises NodeLost."""

    def label(self, rank: int) -> str:
        """How a failure names node ``rank``."""

    def start(self, plans: Sequence[LaunchPlan], folder: Path, marker: str
              ) -> list[dict[str, Any]]:
        """Start node r's plan (``plans[r - 1]``) on node r, logging to ``node_log(folder,
        r)`` there, marked ``node_marker(marker, r)``, once its port and GPUs are free there;
        returns each node's pid and port. Raises NodeLost, or TrialFailed (``port_busy``,
        ``gpu_busy``) with the node named."""

    def poll(self) -> list[int | None]:
        """Each node's server exit code (None: running). Raises NodeLost."""

    def log_tail(self, rank: int) -> str:
        """The end of node ``rank``'s server log ("" when it cannot be read)."""

    def stop(self, wait: float) -> list[str]:
        """Stop every node's server tree on its node, each after up to ``wait`` s for it to
        end on its own (node 0 is down); returns what could not be done."""


@dataclass
class Here:
    """Node 0: where this trial process runs."""

    node_id: str
    address: str


class MultiNodeWorkload(Workload):
    """``inner``'s configuration across its plan's nodes (the Workload contract, unchanged
    for the lifecycle that drives it)."""

    kind: ClassVar[str] = "multi-node"
    default_metric: ClassVar[str] = ""

    def __init__(self, inner: Workload, nodes: Nodes, here: Here) -> None:
        self.inner = inner
        self.nodes = nodes
        self.here = here

    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        plan = self.inner.plan(config, ctx)
        if len(plan.peers) + 1 != ctx.nodes:
            raise ValueError(f"the {self.inner.kind} workload planned {len(plan.peers) + 1} "
                             f"nodes for a trial of {ctx.nodes}")
        return plan

    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        """Every node's command through the workload's own checks (SGLang's parser); a
        node's port is checked on that node (``Nodes.start``), not here."""
        warnings = self.inner.preflight(plan, ctx)
        for peer in plan.peers:
            warnings += [w for w in self.inner.preflight(replace(peer, port=None), ctx)
                         if w not in warnings]
        return warnings

    def _check_meeting(self, plan: LaunchPlan) -> None:
        """The meeting ports (reserved for this trial on this node, ``across_nodes``) still
        free here before anything starts: ``port_busy`` with node 0 named."""
        hosts = dict.fromkeys((self.here.address, LOCALHOST))
        busy = [p for p in meeting_ports(plan) if not all(port_is_free(p, h) for h in hosts)]
        if busy:
            label = node_label(0, {"node_id": self.here.node_id, "address": self.here.address})
            raise TrialFailed(Failure(FailureKind.PORT_BUSY, (
                f"{label}: port(s) {', '.join(map(str, busy))} already in use: the trial meets "
                f"at {meeting_addr(plan)}, and SGLang checks that port and the "
                f"{MEETING_PORTS - 1} after it"), details={"node": label, "node_rank": 0}))

    def start(self, plan: LaunchPlan, ctx: TrialContext) -> MultiNodeRunning:
        self._check_meeting(plan)
        try:
            described = self.nodes.describe()
            started = self.nodes.start(plan.peers, ctx.trial_dir, ctx.marker)
        except NodeLost as lost:
            self.nodes.stop(wait=0.0)
            raise TrialFailed(lost_failure(self.nodes, lost)) from None
        except BaseException:  # a node's port or GPUs busy there (TrialFailed, named)
            self.nodes.stop(wait=0.0)
            raise
        try:
            running = self.inner.start(replace(plan, env={**plan.env,
                                                          NODE_ENV: self.here.node_id}), ctx)
        except BaseException:
            self.nodes.stop(wait=0.0)
            raise
        record = [NodeRecord.model_validate({
            "rank": 0, "node_id": self.here.node_id, "address": self.here.address,
            "gpu_ids": list(ctx.gpu_ids), "pid": running.process.pid, "port": plan.port,
            "marker": ctx.marker})]
        record += [NodeRecord.model_validate({**info, **node,
                                              "marker": node_marker(ctx.marker, info["rank"])})
                   for info, node in zip(described, started, strict=True)]
        write_nodes(ctx.trial_dir, record)
        return MultiNodeRunning(running, self.nodes, len(plan.peers), ctx.trial_dir,
                                [str(n.node_id) for n in record])


def named(failure: Failure, nodes: Nodes, rank: int, placement: Sequence[str] = ()) -> Failure:
    """``failure`` as node ``rank``'s: its label in the message, its rank (and the trial's
    nodes) in the details."""
    label = nodes.label(rank)
    failure.message = f"{label}: {failure.message}"
    failure.details.update(node=label, node_rank=rank)
    if placement:
        failure.details["placement"] = list(placement)
    return failure


def lost_failure(nodes: Nodes, lost: NodeLost) -> Failure:
    return Failure(FailureKind.NODE_LOST, f"{nodes.label(lost.rank)} lost: {lost.reason}",
                   details={"node": nodes.label(lost.rank), "node_rank": lost.rank})


class MultiNodeRunning(Running):
    """Node 0's started workload, with the other nodes watched: what node 0 serves is what
    every node computes, so node 0's readiness and rounds are the trial's."""

    def __init__(self, inner: Running, nodes: Nodes, peers: int, folder: Path,
                 placement: Sequence[str] = ()) -> None:
        self.inner = inner
        self.peers = peers
        self.placement = list(placement)  # every node's Ray id, node 0 first
        self.process = inner.process
        self.nodes = nodes
        self.folder = folder
        self.failure: Failure | None = None  # the first node that failed, named
        self._quit = threading.Event()
        self._lock = threading.Lock()
        self._watch = threading.Thread(target=self._watching, name="node-watch", daemon=True)
        self._watch.start()

    # ------------------------------------------------------------ the watch
    def check(self) -> Failure | None:
        """Ask every node now; the first failure found stops node 0's server."""
        with self._lock:
            if self.failure is not None:
                return self.failure
            try:
                codes = self.nodes.poll()
            except NodeLost as lost:
                self.failure = lost_failure(self.nodes, lost)
            else:
                rank = next((r for r, c in enumerate(codes, 1) if c is not None), None)
                if rank is not None:
                    self.failure = self._exited(rank, codes[rank - 1])
        if self.failure is not None:
            self.process.stop(grace=1.0)  # node 0 alone would wait for its peers
        return self.failure

    def _exited(self, rank: int, code: int | None) -> Failure:
        return named(Failure.from_log(self.nodes.log_tail(rank), code), self.nodes, rank,
                     self.placement)

    def _watching(self) -> None:
        while not self._quit.wait(WATCH_INTERVAL_S):
            if self.check() is not None:
                return

    def _explain(self, err: TrialFailed) -> TrialFailed:
        """Node 0 failed: when another node failed first, that node is the cause (raised
        ``from None``: Ray's error record would name the chained one)."""
        failure = self.check()
        if failure is None:
            return err
        failure.details.setdefault("node0", err.failure.message)
        return TrialFailed(failure)

    # ------------------------------------------------------------ the Running contract
    def wait_ready(self, timeout: float) -> float:
        try:
            return self.inner.wait_ready(timeout)
        except TrialFailed as err:
            raise self._explain(err) from None

    def warmup(self) -> None:
        try:
            self.inner.warmup()
        except TrialFailed as err:
            raise self._explain(err) from None

    def measure(self, round_index: int) -> Metrics:
        try:
            metrics = self.inner.measure(round_index)
        except TrialFailed as err:
            raise self._explain(err) from None
        if self.failure is not None:  # a node failed while node 0 still answered
            raise TrialFailed(self.failure)
        return metrics

    def effective(self) -> dict[str, Any]:
        return self.inner.effective()

    def startup(self) -> dict[str, float | None]:
        return self.inner.startup()

    def profile(self, steps: int) -> list[Path]:
        return self.inner.profile(steps)

    def stop(self) -> None:
        """Node 0's tree here first (SGLang's followers ignore SIGTERM: they end with rank 0,
        on its ShutdownReq or when their collectives find it gone), then every other node's
        on its node after a bounded wait for it to end on its own; a node that is gone, a
        server that had to be killed there, or its port or GPUs not back, is noted
        (nodes-stop.txt)."""
        self._quit.set()
        try:
            self.inner.stop()
        finally:
            problems = self.nodes.stop(wait=min(self.process.stop_grace, FOLLOWER_WAIT_S))
        if problems:
            (self.folder / "nodes-stop.txt").write_text("\n".join(problems) + "\n")
        for rank in range(1, self.peers + 1):
            self._keep_log(rank)

    def _keep_log(self, rank: int) -> None:
        """A node's log into the trial's folder when that node wrote it on its own disk."""
        path = node_log(self.folder, rank)
        if path.exists():
            return
        tail = self.nodes.log_tail(rank)
        if tail:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(tail)
