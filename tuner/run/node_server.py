"""One follower's server (a node of rank >= 1 of a trial across nodes), on its own node: what
the agent there does (tuner/run/nodes.py), without Ray.

Before the launch, the checks node 0's trial makes on node 0, made here: this node's GPUs
free of other processes (``gpu.wait_clean``, or ``gpu_busy``), and the port. SGLang's follower
serves a dummy health server on the same ``--host``/``--port`` as node 0
(``srt/entrypoints/engine.py``: ``launch_dummy_health_check_server`` for node_rank >= 1), so
that port must be free here (else ``port_busy``); where the run leaves ports to each trial,
the follower gets a free one of its own node instead of node 0's.

The stop comes after node 0's: a follower ignores SIGTERM (its handler only logs; its
schedulers stop on rank 0's ShutdownReq broadcast, or fail once their collectives find rank 0
gone), so it gets a bounded wait to end on its own, then its tree is killed by PID and by its
marker (never by name); then its port must be released and its GPUs' memory come back.
"""

from __future__ import annotations

import subprocess
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launchers import gpu, process
from launchers.base import LaunchPlan
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.multinode import on_node, with_port
from tuner.run.multinode import NODE_ENV

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
    server: process.ServerProcess | None = None
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

    def start(self, plan: LaunchPlan, log_path: Path, marker: str) -> dict[str, Any]:
        """This node's plan, here (its own GPUs, its port); its pid and port. Raises
        TrialFailed (``port_busy``, ``gpu_busy``) before anything starts."""
        plan = self._port(on_node(plan, self.gpu_ids))
        if self.gpu_ids:
            try:
                self._gpus_before = gpu.wait_clean(self.gpu_ids, self.gpu_timeout)
            except TrialFailed as busy:
                raise self._fail(FailureKind.GPU_BUSY, busy.failure.message) from None
        env = {**plan.full_env(), NODE_ENV: self.node_id}
        self.server = process.ServerProcess.spawn(plan.argv, env, log_path, marker,
                                                  port=plan.port, host=plan.host)
        return {"pid": self.server.pid, "port": plan.port}

    def poll(self) -> int | None:
        return self.server.poll() if self.server is not None else None

    def log_tail(self, max_bytes: int) -> str:
        return self.server.log_text(max_bytes) if self.server is not None else ""

    def stop(self, wait: float) -> list[str]:
        """Node 0 is down: up to ``wait`` s for the server to end on its own, then its tree
        killed; returns what did not come back (its port, its GPUs' memory)."""
        if self.server is None:
            return []
        with suppress(subprocess.TimeoutExpired):
            self.server.popen.wait(timeout=max(0.0, wait))
        report = self.server.stop(grace=KILL_GRACE_S, port_timeout=PORT_RELEASE_S)
        problems = []
        if not report.port_free:
            problems.append(f"port {self.server.port} still in use {PORT_RELEASE_S:.0f} s "
                            "after the stop")
        problems += gpu.wait_memory_back(self._gpus_before, timeout=MEMORY_BACK_S)
        self._gpus_before = []
        return problems
