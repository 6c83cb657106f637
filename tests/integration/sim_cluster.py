"""A Ray cluster of several simulated nodes on this one machine, for the tests of trials
across nodes. TEST EQUIPMENT ONLY.

Ray's own test cluster (``ray.cluster_utils.Cluster``): a head node without GPUs (where the
driver joins) and N worker nodes, each its own raylet with its own node id, 8 logical GPUs
and one CPU; all share this machine's address, so they are told apart by node id. Its
daemons live in a private RAY_TMPDIR, and its processes are the test's to end, by PID.

A node is killed as a machine dies: its raylet and everything under it (the Ray workers it
started and the servers they started), SIGKILL by PID, then the node is removed. Processes
of a trial across nodes carry the Ray node they run on (SERVETUNE_NODE), so that what a node
leaves behind is found per node although every "node" shares this machine's /proc.

Each node has its own folder of port reservations (launchers/ports.py's lock dir, set in its
raylet's environment and so in every Ray worker there: ``SimCluster.port_locks``), as each
machine of a real cluster has its own /tmp: a reservation made on one node is not seen on
another (a bound port still is: all share one address).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from launchers.ports import LOCK_DIR_ENV
from launchers.process import Marked, marked_processes
from simulator.runs import ROOT, ray_tmpdir
from tuner.run.multinode import NODE_ENV

# GCS notices a dead node after health_check_failure_threshold x health_check_period_ms.
FAST_HEALTH_CHECK = {"health_check_period_ms": 1000, "health_check_failure_threshold": 3}


@dataclass
class SimCluster:
    cluster: Any  # ray.cluster_utils.Cluster
    ray_tmp: Path
    port_locks: dict[str, Path]  # each worker node's folder of port reservations, by node id

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def node_ids(self) -> list[str]:
        """Every worker node's Ray id (the head is no trial's: it has no GPUs)."""
        return [n.node_id for n in self.cluster.worker_nodes]

    def kill_node(self, node_id: str) -> list[int]:
        """The node's machine dies: SIGKILL its raylet's whole tree, then Ray forgets it.
        Returns the pids killed."""
        node = next(n for n in self.cluster.worker_nodes if n.node_id == node_id)
        roots = [info.process.pid for infos in node.all_processes.values() for info in infos]
        tree: list[psutil.Process] = []
        for pid in roots:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(pid)
                tree += [root, *root.children(recursive=True)]
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(tree, timeout=10)
        self.cluster.remove_node(node, allow_graceful=False)
        return sorted(p.pid for p in tree)


def node_of(pid: int) -> str | None:
    try:
        return psutil.Process(pid).environ().get(NODE_ENV)
    except (psutil.Error, OSError):
        return None


def left_on(prefix: str, node_id: str) -> list[Marked]:
    """Marked processes of the experiment (``prefix``) that run on ``node_id``."""
    return [m for m in marked_processes(prefix) if node_of(m.pid) == node_id]


@contextlib.contextmanager
def sim_cluster(nodes: int) -> Iterator[SimCluster]:
    """A head without GPUs and ``nodes`` nodes of 8 logical GPUs and one CPU each."""
    from ray.cluster_utils import Cluster

    with ray_tmpdir() as ray_tmp, pytest_env(ray_tmp):
        (ray_tmp / "ray").mkdir()  # where Ray writes ray_current_cluster
        cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
            "num_cpus": 1, "num_gpus": 0, "temp_dir": str(ray_tmp), "include_dashboard": False,
            "_system_config": FAST_HEALTH_CHECK})
        try:
            locks = {}
            for index in range(nodes):
                folder = ray_tmp / "ports" / f"node{index}"
                with environ(LOCK_DIR_ENV, str(folder)):  # the raylet's, and its workers'
                    node = cluster.add_node(num_cpus=1, num_gpus=8, temp_dir=str(ray_tmp))
                locks[node.node_id] = folder
            yield SimCluster(cluster, ray_tmp, locks)
        finally:
            cluster.shutdown()


@contextlib.contextmanager
def environ(key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in this process's environment for a while."""
    saved = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = saved


@contextlib.contextmanager
def pytest_env(ray_tmp: Path) -> Iterator[None]:
    """The daemons' environment: the private temp dir, and this checkout importable by the
    Ray workers (the trials) and the servers they start."""
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "PYTHONPATH")}
    parts = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    os.environ["RAY_TMPDIR"] = str(ray_tmp)
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
