"""The stand-in across nodes (tests/fakes/fake_nodes.py): node 0 waits for the others, and
tells when one never comes with torch.distributed's own text."""

from __future__ import annotations

import uuid
from pathlib import Path

from launchers.failures import FailureKind
from launchers.process import LOCALHOST, ServerProcess, free_port
from tests.integration.servetune_runs import FAST, STAND_IN


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
