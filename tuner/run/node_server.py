"""One follower's server (a node of rank >= 1 of a trial across nodes), on its own node: what
the agent there does (tuner/run/nodes.py), without Ray.

Before the launch, the checks node 0's trial makes on node 0, made here: this node's GPUs
free of other processes (``gpu.wait_clean``, or ``gpu_busy``), and the port. SGLang's follower
serves a dummy health server on the same ``--host``/``--port`` as node 0
(``srt/entrypoints/engine.py``: ``launch_dummy_health_check_server`` for node_rank >= 1), so
that port must be free here (else ``port_busy``); where the run leaves ports to each trial,
the follower gets a free one of its own node instead of node 0's. The ports the nodes meet at
(the dist-init port and the six after it, ``launchers.multinode.MEETING_PORTS``: SGLang checks
them on every node with DP attention) are reserved here for the trial (``launchers.ports``:
another trial's reservation on this host, or a bound port, is ``port_busy``) until the stop.

The stop comes after node 0's: a follower ignores SIGTERM (its handler only logs; its
schedulers stop on rank 0's ShutdownReq broadcast, or fail once their collectives find rank 0
gone), so it gets a bounded wait to end on its own, then its tree is killed by PID and by its
marker (never by name); then its port must be released and its GPUs' memory come back.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launchers import gpu, process
from launchers.base import LaunchPlan
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.multinode import meeting_addr, meeting_ports, on_node, with_port
from launchers.ports import PortLease
from tuner.run.multinode import NODE_ENV, trial_marker

KILL_GRACE_S = 1.0  # SIGTERM to SIGKILL in a follower's tree kill (its main ignores SIGTERM)
PORT_RELEASE_S = 5.0  # how long a stopped follower's port may take to be free again
MEMORY_BACK_S = 30.0
# What a stop takes beyond its wait, at most: the kill, the port, the GPUs' memory.
STOP_BUDGET_S = KILL_GRACE_S + 5.0 + PORT_RELEASE_S + MEMORY_BACK_S


@dataclass
class NodeServer:
    rank: int
    node_id: str
    gpu_ids: tuple[str, ...] = ()
    gpu_timeout: float = 60.0
    own_port: bool = False  # the run leaves ports to each trial: a free one of this node
    address: str = ""  # this node's (its meeting ports are checked free there and locally)
    server: process.ServerProcess | None = None
    lease: PortLease | None = None
    _gpus_before: list[gpu.GpuState] = field(default_factory=list)

    def _fail(self, kind: FailureKind, message: str) -> TrialFailed:
        return TrialFailed(Failure(kind, message, details={"node_rank": self.rank}))

    def _port(self, plan: LaunchPlan) -> LaunchPlan:
        if plan.port is None:
            return plan
        if self.own_port:
            port = process.free_port(plan.host)
            while port == plan.port:  # node 0's, where "nodes" share a machine
                port = process.free_port(plan.host)
            return with_port(plan, port)
        if not process.port_is_free(plan.port, plan.host):
            raise self._fail(FailureKind.PORT_BUSY,
                             f"port {plan.port} on {plan.host} is already in use")
        return plan

    def _meet(self, plan: LaunchPlan, marker: str) -> None:
        """Reserve the trial's meeting ports on this node (shared with node 0's reservation
        where node 0 is this host: one owner, the trial), or ``port_busy``."""
        addr, ports = meeting_addr(plan), meeting_ports(plan)
        if addr is None or not ports:
            return
        self.lease = PortLease(trial_marker(marker, self.rank))
        hosts = tuple(dict.fromkeys(h for h in (process.LOCALHOST, self.address) if h))
        busy = self.lease.take(ports, hosts)
        if busy:
            self.lease.close()
            raise self._fail(FailureKind.PORT_BUSY, (
                f"port(s) {', '.join(map(str, busy))} reserved by another trial or in use "
                f"here: the trial meets at {addr}, and SGLang checks that port and the "
                f"{len(ports) - 1} after it on every node"))

    def start(self, plan: LaunchPlan, log_path: Path, marker: str) -> dict[str, Any]:
        """This node's plan, here (its own GPUs, its port, the meeting ports); its pid and
        port. Raises TrialFailed (``port_busy``, ``gpu_busy``) before anything starts."""
        plan = self._port(on_node(plan, self.gpu_ids))
        self._meet(plan, marker)
        if self.gpu_ids:
            try:
                self._gpus_before = gpu.wait_clean(self.gpu_ids, self.gpu_timeout)
            except TrialFailed as busy:
                self._release()
                raise self._fail(FailureKind.GPU_BUSY, busy.failure.message) from None
        env = {**plan.full_env(), NODE_ENV: self.node_id}
        self.server = process.ServerProcess.spawn(plan.argv, env, log_path, marker,
                                                  port=plan.port, host=plan.host)
        return {"pid": self.server.pid, "port": plan.port}

    def poll(self) -> int | None:
        return self.server.poll() if self.server is not None else None

    def log_tail(self, max_bytes: int) -> str:
        return self.server.log_text(max_bytes) if self.server is not None else ""

    def _release(self) -> None:
        if self.lease is not None:
            self.lease.close()
            self.lease = None

    def stop(self, wait: float) -> list[str]:
        """Node 0 is down: up to ``wait`` s for the server to end on its own, then its tree
        killed, then the meeting ports let go; returns what did not go as it should (a server
        that had to be killed, its port, its GPUs' memory)."""
        if self.server is None:
            self._release()
            return []
        problems = []
        try:
            self.server.popen.wait(timeout=max(0.0, wait))
        except subprocess.TimeoutExpired:
            problems.append(f"the server did not end within {wait:g} s of node 0's stop: "
                            "its tree was killed")
        report = self.server.stop(grace=KILL_GRACE_S, port_timeout=PORT_RELEASE_S)
        if not report.port_free:
            problems.append(f"port {self.server.port} still in use {PORT_RELEASE_S:.0f} s "
                            "after the stop")
        self._release()
        problems += gpu.wait_memory_back(self._gpus_before, timeout=MEMORY_BACK_S)
        self._gpus_before = []
        return problems
