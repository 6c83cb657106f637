"""The SGLang stand-in across nodes (the simulator).

With ``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` (SGLang's own flags), the
stand-in's nodes meet as SGLang's do through torch.distributed's store: node 0 listens at the
address and waits for the other N-1 nodes, which connect to it; nobody starts loading before
every node has joined, and a node that is missing past the rendezvous timeout fails the
start with the store's own text. Node 0 then runs the server as on one node; the other nodes
("followers") run only their ranks and, once those are ready, SGLang's dummy health server on
the same ``--host``/``--port`` (``/health``, ``/health_generate``, ``/ping``: 200), as
``Engine._launch_subprocesses`` does for node_rank >= 1 (sglang/srt/entrypoints/engine.py,
tests/contract/test_sglang_followers.py). From then on a follower ignores SIGTERM, logging
SGLang's warning: it ends when node 0 shuts down (node 0's SIGTERM drain sends its ranks
SGLang's ShutdownReq, broadcast to every node: the follower exits 0) or goes away.

Every link stays open while the servers run. When a node's link to a peer closes without a
shutdown (the peer died, or its machine went away), the node logs NCCL's remote-error text
and dies ``--fake-peer-loss-s`` later, as SGLang does when NCCL's next collective finds the
peer gone (the delay is NCCL noticing, not a choice of the stand-in's: without it the order in
which the nodes die would be arbitrary).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from simulator.fake_startup import target_load_s

Log = Callable[..., None]
JOIN = b"node "
GO = b"go\n"
SHUTDOWN = b"shutdown\n"  # rank 0's ShutdownReq, as its broadcast reaches every node
# SGLang 0.5.23's own lines (srt/entrypoints/engine.py, srt/utils/common.py).
FOLLOWER_SIGTERM = ("SIGTERM received on node_rank {rank}; waiting for the rank-0 ShutdownReq "
                    "broadcast to stop the schedulers.")
HEALTH_STARTED = "Dummy health check server started in background thread at {host}:{port}"
HEALTH_STOPPED = "Dummy health check server stopped at {host}:{port}"
HEALTH_PATHS = ("/health", "/health_generate", "/ping")
# torch.distributed's TCPStore when clients are missing, and NCCL's text for a peer gone.
STORE_TIMEOUT = ("torch.distributed.DistStoreError: Timed out after {s:.0f} seconds waiting "
                 "for clients. {joined}/{n} clients joined.")
REMOTE_ERROR = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                "distributed/c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was "
                "a network error, NCCL version 2.28.9\nncclRemoteError: A call failed possibly "
                "due to a network error or a remote process exiting prematurely.\nLast error:\n"
                "socket recv: connection to node {peer} closed")


def add_switches(group: Any) -> None:
    """The stand-in's switches for its nodes (its parser's group of --fake-* switches)."""
    group.add_argument("--fake-rendezvous-s", type=float, default=60.0,
                       help="across nodes: how long node 0 waits for the others")
    group.add_argument("--fake-peer-loss-s", type=float, default=1.0,
                       help="across nodes: a node dies this long after a peer's link closed")


def _address(args: argparse.Namespace) -> tuple[str, int]:
    host, _, port = str(args.dist_init_addr).rpartition(":")
    return host.strip("[]"), int(port)


class Peers:
    """This node's open links to the other nodes of the server."""

    def __init__(self, args: argparse.Namespace, links: dict[int, socket.socket]) -> None:
        self.args = args
        self.links = links
        self.closed: tuple[int, float] | None = None  # (peer node, when its link closed)
        self.shut_down = threading.Event()  # node 0 asked every node to stop
        self.reported = False
        for peer, link in links.items():
            threading.Thread(target=self._watch, args=(peer, link), daemon=True).start()

    def _watch(self, peer: int, link: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := link.recv(64):
                if SHUTDOWN in data:
                    self.shut_down.set()
        if self.closed is None:
            self.closed = (peer, time.monotonic())

    def shutdown(self) -> None:
        """Node 0: tell every other node to stop (its ShutdownReq broadcast)."""
        for link in self.links.values():
            with contextlib.suppress(OSError):
                link.sendall(SHUTDOWN)

    def lost(self, log: Log) -> bool:
        """True once a link has been closed for --fake-peer-loss-s without a shutdown
        (logged once)."""
        if self.shut_down.is_set() or self.closed is None or \
                time.monotonic() < self.closed[1] + self.args.fake_peer_loss_s:
            return False
        if not self.reported:
            self.reported = True
            log(REMOTE_ERROR.format(peer=self.closed[0]), f"TP{self.args.node_rank}")
        return True


def join(args: argparse.Namespace, log: Log) -> Peers | None:
    """Meet the other nodes (None on one node); raises RuntimeError with the store's text."""
    if args.nnodes <= 1:
        return None
    if not args.dist_init_addr:
        raise RuntimeError("--dist-init-addr is required when --nnodes > 1")
    deadline = time.monotonic() + args.fake_rendezvous_s
    links = _lead(args, deadline) if args.node_rank == 0 else _follow(args, deadline)
    log(f"Node {args.node_rank} of {args.nnodes} joined at {args.dist_init_addr}",
        f"TP{args.node_rank}")
    return Peers(args, links)


def _lead(args: argparse.Namespace, deadline: float) -> dict[int, socket.socket]:
    links: dict[int, socket.socket] = {}
    with socket.create_server(_address(args)) as server:
        while len(links) < args.nnodes - 1:
            server.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                link, _ = server.accept()
            except TimeoutError:
                raise RuntimeError(STORE_TIMEOUT.format(
                    s=args.fake_rendezvous_s, joined=len(links) + 1, n=args.nnodes)) from None
            link.settimeout(5.0)
            hello = link.recv(64)
            link.settimeout(None)
            if hello.startswith(JOIN):
                links[int(hello[len(JOIN):].strip() or 0)] = link
    for link in links.values():
        link.sendall(GO)
    return links


def _follow(args: argparse.Namespace, deadline: float) -> dict[int, socket.socket]:
    while True:
        try:
            link = socket.create_connection(_address(args), timeout=1.0)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(STORE_TIMEOUT.format(s=args.fake_rendezvous_s, joined=0,
                                                        n=args.nnodes)) from None
            time.sleep(0.05)
    link.sendall(JOIN + f"{args.node_rank}\n".encode())
    link.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        ready = link.recv(len(GO))
    except TimeoutError:
        ready = b""
    if ready != GO:
        raise RuntimeError(STORE_TIMEOUT.format(s=args.fake_rendezvous_s, joined=0,
                                                n=args.nnodes))
    link.settimeout(None)
    return {0: link}


class HealthHandler(BaseHTTPRequestHandler):
    """SGLang's dummy health server: 200 on its three paths (and /metrics with metrics on)."""

    protocol_version = "HTTP/1.1"
    metrics = False

    def log_message(self, format: str, *args: Any) -> None:  # quiet access log
        pass

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        found = path in HEALTH_PATHS or (path == "/metrics" and self.metrics)
        body = b"" if found else b'{"detail":"Not Found"}'
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve_health(args: argparse.Namespace, log: Log) -> ThreadingHTTPServer | None:
    """The dummy health server on --host/--port, in a thread. A port taken is logged as
    uvicorn's error in SGLang's thread, and the follower runs on without it (as SGLang's)."""
    where = {"host": args.host, "port": args.port}
    handler = type("Health", (HealthHandler,), {"metrics": bool(args.enable_metrics)})
    try:
        http = ThreadingHTTPServer((args.host, args.port), handler)
    except OSError as err:
        log(f"[Errno {err.errno}] error while attempting to bind on address ('{args.host}', "
            f"{args.port}): {(err.strerror or str(err)).lower()}")
        log(HEALTH_STOPPED.format(**where))
        return None
    threading.Thread(target=http.serve_forever, name="health-check-server", daemon=True).start()
    log(HEALTH_STARTED.format(**where))
    return http


def follower(server: Any, log: Log) -> int:
    """A node of rank >= 1: its ranks load and capture, no HTTP but the dummy health server
    once they are ready; then SIGTERM only logs, and it runs until node 0 shuts it down, a
    rank dies, or a peer's link closes."""
    a = server.args
    tag = f"TP{a.node_rank}"
    ignore = a.fake_fault == "ignore-sigterm"
    signal.signal(signal.SIGTERM, signal.SIG_IGN if ignore else signal.SIG_DFL)  # no handler yet
    log("Init torch distributed begin.", tag)
    try:
        peers = join(a, log)
    except RuntimeError as err:
        log(str(err), tag)
        return 1
    load_s = target_load_s(a) * a.fake_startup_scale
    server.ranks.start(min(server.tp, max(1, a.fake_max_ranks)), server.tp,
                       server.startup_fault(), load_s, a.fake_fault == "ignore-sigterm",
                       a.fake_fault == "setsid-grandchild")
    server.startup.weights_begin()
    problem = server.ranks.wait(time.monotonic() + load_s + 30.0)
    if problem:
        log(problem, tag)
        server.ranks.stop()
        return 1
    server.startup.weights_end(load_s)
    server.startup.capture("target")
    asked = threading.Event()  # a flag, not a log line, in the handler (the log holds a lock)
    if not ignore:
        signal.signal(signal.SIGTERM, lambda *_: asked.set())
    serve_health(a, log)
    while True:
        if asked.is_set():
            asked.clear()
            log(FOLLOWER_SIGTERM.format(rank=a.node_rank))
        if peers is not None and peers.shut_down.is_set():
            server.ranks.stop(grace=0.2)  # the schedulers end on the ShutdownReq
            return 0
        dead = server.ranks.any_dead()
        if dead:
            log("Received sigquit from a child process. It usually means the child failed.")
        if dead or (peers is not None and peers.lost(log)):
            server.ranks.stop(grace=0.2)
            return 1
        time.sleep(0.05)
