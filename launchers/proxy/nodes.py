"""The proxy's ranks across nodes, as the ranks see it (the plan: launchers/proxy/multinode.py):
N ranks on each node, numbered node by node (node R's local rank i is rank R x N + i of the
whole group), meeting at node 0's address (``--dist-init-addr``, rank 0's TCP store); gloo
between the nodes on CPU, NCCL over the network on GPUs.

Only rank 0 reads the launcher's requests (its trial folder is on node 0); it hands each one
to every rank over the group (``shared_requests``). Light on imports: every rank loads it.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from launchers.process import LOCALHOST
from launchers.proxy import protocol

WAIT_S = 30.0  # rank 0 tells the others at least this often that no request came yet


def meeting(addr: str | None) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); no address: this machine, port 0 (the root picks)."""
    if not addr:
        return LOCALHOST, 0
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def rank_env(local: int, per_node: int, nodes: int, node_rank: int, host: str, port: int
             ) -> dict[str, str]:
    """torch.distributed's variables for local rank ``local`` of node ``node_rank``."""
    return {"RANK": str(node_rank * per_node + local), "WORLD_SIZE": str(per_node * nodes),
            "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(per_node),
            "MASTER_ADDR": host, "MASTER_PORT": str(port)}


def gloo_interface(host: str) -> str | None:
    """The network interface that holds ``host`` (gloo's own sockets go there): ``lo`` for
    this machine's loopback; None when no interface here has it."""
    import psutil

    try:
        address = socket.gethostbyname(host)
    except OSError:
        return None
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == address for a in addrs):
            return name
    return None


def shared_requests(rank: int, control: Path, idle_timeout: float, parent: int,
                    group: Any) -> Iterator[protocol.Request]:
    """The launcher's requests as every rank of every node sees them: rank 0 reads them
    (``protocol.next_request``) and broadcasts each over ``group``; all stop together when
    it has none for ``idle_timeout`` or its launcher is gone."""
    import torch.distributed as dist

    last = -1
    deadline = time.monotonic() + idle_timeout
    while True:
        box: list[str | None] = [None]
        if rank == 0:
            wait = max(0.0, min(WAIT_S, deadline - time.monotonic()))
            request = protocol.next_request(control, last, wait, parent)
            if request is not None:
                box[0] = request.line()
            elif time.monotonic() >= deadline or os.getppid() != parent:
                box[0] = "stop"
            else:
                box[0] = "wait"
        dist.broadcast_object_list(box, src=0, group=group)
        word = box[0] or "stop"
        if word == "stop":
            return
        if word == "wait":
            continue
        request = protocol.Request.parse(word)
        if request is None:
            return
        last = request.seq
        deadline = time.monotonic() + idle_timeout
        yield request
