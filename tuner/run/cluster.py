"""Which Ray a run uses, and what it holds.

Without ``--address`` (and without ``RAY_ADDRESS``, which the CLI treats as ``--address``), a
run always starts a private local Ray (``address="local"``): never a cluster that happens to
be named by Ray's own leftovers on this machine (its ``ray_current_cluster`` file can name a
dead cluster, and joining it hangs). Joining a cluster takes its resources as they are:
``--num-gpus``/``--num-cpus`` are refused there (bad input, checked before anything starts).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from launchers import gpu, process
from launchers.multinode import ONE_NODE, Placement
from launchers.priority import PRIVATE_RAY_ENV
from tuner.run.stopping import deaf_to_ctrl_c
from tuner.spec import ExperimentSpec, SpecError

ADDRESS_ENV = "RAY_ADDRESS"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
# A private Ray starts a worker when something asks for one, one at a time. Ray's default
# prestarts plain workers for the first driver and for queued tasks, and starts up to num_cpus
# at once: a 1-trial run left 3 idle, and a trial's one marker task (tuner/run/dashboard.py)
# brought up 2 workers. Each cost 1-2 s of CPU beside the trial's server starting; servetune
# runs one trial actor per node at a time and needs none of them.
LEAN_WORKERS_ENV = {"RAY_prestart_worker_first_driver": "0", "RAY_enable_worker_prestart": "0",
                    "RAY_worker_maximum_startup_concurrency": "1"}
# Ray's own words when its raylet missed its fixed start-up wait, and how often to start it.
RAY_START_TIMEOUT_TEXT = "timed out during startup"
RAY_START_TRIES = 2
# What a Ray this run starts is told on top of the run's marker.
PRIVATE_RAY_SETTINGS = {**PRIVATE_RAY_ENV, **LEAN_WORKERS_ENV}


@dataclass
class Cluster:
    nodes: int
    gpus_per_node: list[int]
    dashboard_url: str | None
    started_here: bool


def check_address(address: str, timeout: float = 3.0) -> None:
    """An unreachable address is bad input: fail before connecting (Ray would wait)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise SpecError(f"--address {address!r}: expected HOST:PORT")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise SpecError(f"--address {address}: unreachable ({err.strerror or err})") from None


def join_failure(address: str, err: BaseException) -> str:
    """One line for a cluster that would not let this driver in. Ray 2.60 turns token auth on
    by itself only for a local cluster it finds on its own, never for an address given to it
    (``--address`` or RAY_ADDRESS): joining a cluster with token auth needs RAY_AUTH_MODE=token
    and the cluster's token (RAY_AUTH_TOKEN, or the file ~/.ray/auth_token)."""
    text = f"{err} {err.__cause__ or ''}"
    if "AuthToken" in text or "Authentication" in text:
        return (f"--address {address}: the cluster requires token authentication: set "
                f"{AUTH_MODE_ENV}=token, with the cluster's token in RAY_AUTH_TOKEN or "
                "~/.ray/auth_token")
    return f"--address {address}: could not join the cluster ({str(err).splitlines()[0]})"


def check_installs(address: str) -> None:
    """Every node that can hold a trial has the driver's servetune and SGLang (nothing is
    shipped to the nodes: tuner/run/installs.py); else one line, before anything starts."""
    from tuner.run.installs import Install, mismatch
    from tuner.run.nodes import installs

    problem = mismatch(Install.here(), installs())
    if problem:
        raise SpecError(f"--address {address}: {problem}")


def check_joining(spec: ExperimentSpec) -> None:
    """Resources are declared only to a Ray this run starts."""
    if spec.address is None:
        return
    declared = [flag for flag, value in (("--num-gpus", spec.num_gpus),
                                         ("--num-cpus", spec.num_cpus)) if value is not None]
    if declared:
        raise SpecError(f"{' and '.join(declared)}: only for a Ray this run starts; the "
                        f"cluster at {spec.address} has its own resources")


def _tune_env(spec: ExperimentSpec) -> None:
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # our own progress lines
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "2")
    # A failed trial is data: its kind and message get one progress line, the traceback
    # stays in its folder (error.txt, failure.json) instead of filling the terminal.
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    # A reused trial actor waits this long for the previous trial's teardown (default 2 s).
    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", str(int(spec.stop_grace) + 5))


def _start_private_ray(spec: ExperimentSpec, marker_prefix: str,
                       echo: Callable[[str], None]) -> Any:
    """``ray.init`` of a private local Ray, tried once more if Ray's own start times out.

    Ray waits a fixed 30 s for its raylet to register with its GCS (not a setting); a head
    starting beside CPU-bound work (a loaded CI box, a node still building kernels) can miss
    it. What the failed start left (its marked processes) is reaped before the next."""
    import ray

    def start() -> Any:
        with deaf_to_ctrl_c():  # Ray's processes: only the driver's stop ends them
            return ray.init(address="local", num_cpus=spec.num_cpus, num_gpus=spec.num_gpus,
                            include_dashboard=spec.dashboard, dashboard_host="127.0.0.1",
                            log_to_driver=False, logging_level=logging.WARNING)

    for _ in range(RAY_START_TRIES - 1):
        try:
            return start()
        except Exception as err:  # Ray raises a bare Exception for this
            if RAY_START_TIMEOUT_TEXT not in str(err):
                raise
            ray.shutdown()
            left = process.reap_all(process.ray_marker(marker_prefix), exact=True)
            echo(f"Ray did not start ({err}); {len(left)} of its processes stopped, "
                 "starting it again")
    return start()


@contextlib.contextmanager
def ray_cluster(spec: ExperimentSpec, marker_prefix: str,
                echo: Callable[[str], None] = print,
                placement: Placement = ONE_NODE) -> Iterator[Cluster]:
    """Connect to ``spec.address`` or start a private local Ray (dashboard on 127.0.0.1, token
    auth on). Ray processes started here carry the experiment's marker so that a crashed
    run's leftovers can be reaped by the next ``--resume``. Trials across nodes: at the end,
    every node of the cluster is swept for the experiment's processes."""
    import ray

    _tune_env(spec)
    started_here = spec.address is None
    # The private Ray's processes carry the run's marker and owner, its workers (and the
    # servers they start) run at the driver's niceness, not Ray's +15, and they must not join
    # another cluster; joining one changes nothing here.
    private_env: dict[str, str | None] = {
        process.MARKER_ENV: process.ray_marker(marker_prefix), process.OWNER_ENV: str(os.getpid()),
        ADDRESS_ENV: None, **PRIVATE_RAY_SETTINGS}
    with process.environ(private_env if started_here else {}):
        if started_here:
            info = _start_private_ray(spec, marker_prefix, echo)
        else:
            check_joining(spec)
            check_address(str(spec.address))
            try:
                info = ray.init(address=spec.address, log_to_driver=False,
                                logging_level=logging.WARNING)
            except ConnectionError as err:
                ray.shutdown()
                raise SpecError(join_failure(str(spec.address), err)) from None
    try:
        alive = [n for n in ray.nodes() if n.get("Alive")]
        gpus = [int(n.get("Resources", {}).get("GPU", 0)) for n in alive]
        url = getattr(info, "dashboard_url", None) or None
        if not started_here:
            check_installs(str(spec.address))
        yield Cluster(len(alive), gpus, f"http://{url}" if url else None, started_here)
    finally:
        try:
            if placement.across_nodes:
                from tuner.run.nodes import sweep

                for node, pids in sweep(marker_prefix).items():
                    if pids:
                        echo(f"reaped {len(pids)} leftover processes on node {node[:16]}")
        finally:  # a sweep that fails (Ray gone) must not skip this host's cleanup
            ray.shutdown()
            # Servers this experiment left on this host (the marker names this experiment's
            # folder, so with --address nothing of other drivers is touched).
            process.reap_all(marker_prefix)


def gpus_per_trial(spec: ExperimentSpec, cluster: Cluster) -> int:
    """All GPUs of a node (the smallest node with GPUs), or --gpus-per-trial."""
    with_gpus = [g for g in cluster.gpus_per_node if g > 0]
    if spec.gpus_per_trial is not None:
        if not with_gpus or spec.gpus_per_trial > max(with_gpus):
            raise SpecError(f"--gpus-per-trial {spec.gpus_per_trial}: no node has that many "
                            f"GPUs (nodes: {cluster.gpus_per_node})")
        return spec.gpus_per_trial
    return min(with_gpus) if with_gpus else 0


def trial_slots(cluster: Cluster, gpus: int, placement: Placement = ONE_NODE) -> int:
    """How many whole-node trials run at once: one per node that can hold one (a trial of
    several nodes: one per group of them, SpecError when there is none)."""
    if placement.across_nodes:
        able = sum(1 for g in cluster.gpus_per_node if g >= gpus) if gpus else cluster.nodes
        if able < placement.nodes:
            raise SpecError(f"{placement.flag}: the cluster has {able} node(s) with "
                            f"{gpus} GPU(s) (GPUs per node: {cluster.gpus_per_node})")
        return able // placement.nodes
    if not gpus:
        return 1
    return max(1, sum(1 for g in cluster.gpus_per_node if g >= gpus))


def local_gpu_count(spec: ExperimentSpec) -> int | None:
    """GPUs a local run will see, known before Ray starts (None when joining a cluster)."""
    if spec.address is not None:
        return None
    if spec.num_gpus is not None:
        return spec.num_gpus
    return gpu.device_count()
