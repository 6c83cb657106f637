"""SGLang across nodes: one server process per node, each with SGLang's own multi-node
arguments (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``, read in
``sglang/srt/arg_groups/fields/parallel.py``), the same command otherwise. Node 0 runs the
HTTP server and the tokenizer; the other nodes ("followers") run only their schedulers, and
serve a dummy health server (``/health``, ``/health_generate``, ``/ping``: 200) on the same
``--host``/``--port`` once their schedulers are ready (``srt/entrypoints/engine.py``,
``Engine._launch_subprocesses``: ``launch_dummy_health_check_server`` for node_rank >= 1).
So every node's plan holds the port, checked free on its own node before the launch and
waited for after the stop (tuner/run/node_server.py). A follower ignores SIGTERM (it waits for
rank 0's ShutdownReq broadcast): node 0 is stopped first. ``--tp-size`` counts every GPU of
every node, and SGLang requires it to split evenly over the nodes
(``srt/arg_groups/validation_hook.py``).
"""

from __future__ import annotations

from dataclasses import replace

from launchers.base import LaunchPlan, TrialContext
from launchers.multinode import ADDR_PLACEHOLDER, DIST_INIT_ADDR, NNODES, NODE_RANK, node_flags

# Flags servetune sets for a trial across nodes (SGLang's alias of --dist-init-addr too).
FLAGS = (NNODES, NODE_RANK, DIST_INIT_ADDR, "--nccl-init-addr")


def spread(plan: LaunchPlan, ctx: TrialContext, tp: int) -> LaunchPlan:
    """``plan`` (one node's command) as ``ctx.nodes`` nodes' commands: node 0's plan, the
    others in ``peers``. Pure, like the plan it extends."""
    addr = ctx.dist_init_addr or ADDR_PLACEHOLDER
    nodes = [replace(plan, argv=(*plan.argv, *node_flags(ctx.nodes, rank, addr)), notes=())
             for rank in range(ctx.nodes)]
    peers = tuple(nodes[1:])  # each on --port too: the followers' dummy health server
    note = (f"{ctx.nodes} nodes, one server each: --tp-size {tp} over "
            f"{ctx.nodes} x {tp // ctx.nodes} GPUs; node 0 serves and is benchmarked; NCCL "
            "crosses the network between nodes")
    if ctx.dist_init_addr is None:
        note += (f"; {DIST_INIT_ADDR} is node 0's address and a free port there "
                 f"({ADDR_PLACEHOLDER} here)")
    return replace(nodes[0], peers=peers, notes=(*plan.notes, note))

