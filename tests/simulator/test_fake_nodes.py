"""The stand-in across nodes (simulator/fake_nodes.py): node 0 waits for the others, and
tells when one never comes with torch.distributed's own text; a follower behaves as SGLang's
(its health server, SIGTERM ignored until node 0 shuts down)."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from launchers.failures import FailureKind
from launchers.process import LOCALHOST, ServerProcess, free_port, wait_port_free
from simulator import fake_nodes
from simulator.runs import FAST, STAND_IN


def test_node_0_alone_fails_its_start_with_the_stores_text(tmp_path: Path) -> None:
    argv = [*STAND_IN, *FAST, "--model-path", str(tmp_path), "--tp-size", "4",
            "--port", str(free_port()), "--nnodes", "2", "--node-rank", "0",
            "--dist-init-addr", f"{LOCALHOST}:{free_port()}", "--fake-rendezvous-s", "0.5"]
    server = ServerProcess.spawn(argv, {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(
        Path(__file__).resolve().parents[2])}, tmp_path / "server.log",
        f"fake-nodes-{uuid.uuid4().hex[:6]}/t")
    try:
        assert server.popen.wait(timeout=30) == 1
    finally:
        server.stop(grace=0.5)
    text = server.log_text()
    assert "Timed out after 0 seconds waiting for clients. 1/2 clients joined." in text, text
    assert server.failure().kind is FailureKind.CRASHED


def _until(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://{LOCALHOST}:{port}{path}", timeout=2) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_a_follower_serves_health_on_its_port_ignores_sigterm_and_ends_with_node_0(
        tmp_path: Path) -> None:
    """As SGLang's node_rank >= 1 (tests/contract/test_sglang_followers.py): the dummy health
    server on its --host/--port once ready, SIGTERM logged and ignored, exit 0 once node 0
    shuts down (its SIGTERM drain); its port free again after."""
    addr, marker = f"{LOCALHOST}:{free_port()}", f"fake-nodes-{uuid.uuid4().hex[:6]}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    ports = [free_port(), free_port()]  # "nodes" of one machine: a port each
    servers = [ServerProcess.spawn(
        [*STAND_IN, *FAST, "--model-path", str(tmp_path), "--tp-size", "4", "--port",
         str(port), "--nnodes", "2", "--node-rank", str(rank), "--dist-init-addr", addr],
        env, tmp_path / f"node{rank}.log", f"{marker}/node{rank}", port=port)
        for rank, port in enumerate(ports)]
    node0, node1 = servers
    try:
        assert _until(lambda: fake_nodes.HEALTH_STARTED.format(host=LOCALHOST, port=ports[1])
                      in node1.log_text(), 30), node1.log_text()
        assert [_status(ports[1], p) for p in fake_nodes.HEALTH_PATHS] == [200, 200, 200]
        assert _status(ports[1], "/generate") == 404
        node1.popen.send_signal(signal.SIGTERM)
        assert _until(lambda: fake_nodes.FOLLOWER_SIGTERM.format(rank=1) in node1.log_text(), 5)
        time.sleep(0.5)
        assert node1.poll() is None, "a follower does not end on SIGTERM"
        began = time.monotonic()
        node0.popen.send_signal(signal.SIGTERM)
        assert node1.popen.wait(timeout=10) == 0
        assert time.monotonic() - began < 3
        assert wait_port_free(ports[1], 5)
    finally:
        for server in servers:
            server.stop(grace=0.5)
    assert "NCCL error" not in node1.log_text()  # a shutdown, not a peer lost
