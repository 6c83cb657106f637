"""Which Ray a run uses (issue 16, item 5), with clusters the tests start themselves with
``ray start --head`` in a private RAY_TMPDIR (their daemons carry a marker of the test's own,
and are killed by it, never by name):

- a live cluster on the machine is left alone: without --address (and without RAY_ADDRESS)
  servetune starts its own private Ray;
- a dead one that Ray's ``ray_current_cluster`` file still names (stopped uncleanly) is
  ignored: no hang retrying it;
- RAY_ADDRESS is taken as --address, said on the first line; --num-gpus with it is bad input;
  a cluster with token auth (Ray's default) needs RAY_AUTH_MODE=token to be joined by address,
  and says so in one line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from launchers.process import MARKER_ENV, free_port, marked_processes
from simulator.runs import Experiment, env_for, ray_tmpdir

pytestmark = pytest.mark.integration

RAY = str(Path(sys.executable).parent / "ray")


@dataclass
class RayStart:
    """A `ray start --head` cluster of the test's own."""

    ray_tmp: Path
    marker: str

    @property
    def address_file(self) -> Path:
        return self.ray_tmp / "ray" / "ray_current_cluster"

    @property
    def address(self) -> str:
        return self.address_file.read_text().strip()

    def alive(self) -> bool:
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=2):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        """An unclean stop: SIGKILL to every daemon (and to any it starts meanwhile), Ray's
        files left as they are."""
        deadline = time.monotonic() + 20
        while (left := marked_processes(self.marker)) and time.monotonic() < deadline:
            for m in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, signal.SIGKILL)
            time.sleep(0.2)
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture
def ray_start(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, RayStart]]:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with ray_tmpdir() as ray_tmp:
        marker = f"test-ray-start-{uuid.uuid4().hex[:8]}/"
        cluster = RayStart(ray_tmp, marker)
        try:
            yield ray_tmp, cluster
        finally:
            cluster.kill()


def start_cluster(cluster: RayStart, num_cpus: int, num_gpus: int) -> None:
    env = {**env_for(cluster.ray_tmp), MARKER_ENV: f"{cluster.marker}head"}
    done = subprocess.run([RAY, "start", "--head", f"--port={free_port()}",
                           f"--num-cpus={num_cpus}", f"--num-gpus={num_gpus}",
                           "--include-dashboard=false", "--disable-usage-stats",
                           f"--ray-client-server-port={free_port()}",
                           f"--dashboard-agent-listen-port={free_port()}"],
                          env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert cluster.address_file.is_file() and cluster.alive()


def short_run(exp: Experiment, *extra: str, gpus: bool = True) -> list[str]:
    args = exp.args("--space", "nccl-pcie", "--samples", "2", "--rounds", "1",
                    "--no-dashboard", *extra)
    if not gpus:
        del args[args.index("--num-gpus"):args.index("--num-gpus") + 2]
    return ["run", *args]


def test_a_live_cluster_on_the_machine_is_left_alone(
        ray_start: tuple[Path, RayStart], tmp_path: Path) -> None:
    ray_tmp, cluster = ray_start
    start_cluster(cluster, num_cpus=1, num_gpus=3)
    exp = Experiment.create(tmp_path, ray_tmp)
    try:
        result = exp.run(short_run(exp), timeout=150)  # --num-gpus 8: a Ray of its own
    finally:
        left = exp.cleanup()
    assert not left
    assert result.returncode == 0, result
    assert "1 node(s), GPUs per node [8]" in result.stdout, result  # not the cluster's 3
    assert "joining" not in result.stdout
    assert set(exp.table()["status"]) == {"ok"}
    assert cluster.alive() and marked_processes(cluster.marker)  # untouched


def test_a_dead_cluster_that_rays_file_still_names_is_ignored(
        ray_start: tuple[Path, RayStart], tmp_path: Path) -> None:
    ray_tmp, cluster = ray_start
    start_cluster(cluster, num_cpus=1, num_gpus=0)
    dead = cluster.address
    cluster.kill()
    assert cluster.address_file.read_text().strip() == dead and not cluster.alive()
    exp = Experiment.create(tmp_path, ray_tmp)
    try:  # no --num-gpus: the case that hung retrying the dead cluster's GCS
        result = exp.run(short_run(exp, gpus=False), timeout=110)
    finally:
        left = exp.cleanup()
    assert not left
    assert result.returncode == 0, result
    assert "1 node(s)" in result.stdout and "joining" not in result.stdout
    assert set(exp.table()["status"]) == {"ok"}


def test_ray_address_is_taken_as_address(ray_start: tuple[Path, RayStart], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    ray_tmp, cluster = ray_start
    start_cluster(cluster, num_cpus=2, num_gpus=8)
    monkeypatch.setenv("RAY_ADDRESS", cluster.address)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    refused_exp = Experiment.create(tmp_path, ray_tmp, name="refused")
    refused = refused_exp.run(short_run(refused_exp), timeout=60)  # with --num-gpus 8
    # Ray 2.60 turns token auth on by itself only for a cluster it finds on its own.
    locked_exp = Experiment.create(tmp_path, ray_tmp, name="locked")
    locked = locked_exp.run(short_run(locked_exp, gpus=False), timeout=90)
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    exp = Experiment.create(tmp_path, ray_tmp)
    try:
        result = exp.run(short_run(exp, gpus=False), timeout=150)
    finally:
        left = exp.cleanup() + locked_exp.cleanup()
    assert not left
    assert refused.returncode == 2, refused
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and "--num-gpus" in lines[0] and cluster.address in lines[0], lines
    assert not refused_exp.out.exists()
    assert locked.returncode == 2, locked
    assert locked.stdout.splitlines()[0] == \
        f"Ray: joining the cluster at {cluster.address} (from RAY_ADDRESS)", locked
    last = locked.stderr.splitlines()[-1]
    assert last.startswith("servetune: error: ") and "RAY_AUTH_MODE=token" in last, locked
    assert "Traceback" not in locked.stderr, locked
    assert result.returncode == 0, result
    assert result.stdout.splitlines()[0] == \
        f"Ray: joining the cluster at {cluster.address} (from RAY_ADDRESS)", result
    assert "1 node(s), GPUs per node [8]" in result.stdout  # the cluster's own
    assert set(exp.table()["status"]) == {"ok"}
    assert exp.spec.address == cluster.address  # recorded: a resume joins it again
    assert cluster.alive()  # a joined cluster is not shut down
