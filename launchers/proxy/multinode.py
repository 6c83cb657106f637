"""The proxy across nodes, planned: its ranks spread over a trial's nodes (each node runs
its own root with ``--spawn N``; launchers/proxy/nodes.py numbers the ranks and meets them),
so the network's NCCL settings are screened in seconds, as the server would run them.

Across nodes SGLang runs its tensor-parallel all-reduce through NCCL: its custom all-reduce
(v1 and v2) turns itself off when the group spans nodes
(``sglang/srt/distributed/device_communicators/custom_all_reduce_utils.py``,
``custom_all_reduce_v2.py``), and symmetric memory and the fused paths need every GPU on one
NVLink domain; the plan says so and runs NCCL.
"""

from __future__ import annotations

from dataclasses import replace

from launchers.base import LaunchPlan, TrialContext
from launchers.multinode import ADDR_PLACEHOLDER, node_flags
from launchers.proxy.comm import dispatch

PATHS = ("--allreduce-path", "--allgather-path")
# Paths that need every rank on one node (peer loads over NVLink): NCCL runs across nodes.
ONE_NODE = (dispatch.CUSTOM_1SHOT, dispatch.CUSTOM_2SHOT, dispatch.TORCH_SYMM_2SHOT,
            dispatch.FUSION)


def spread(plan: LaunchPlan, ctx: TrialContext, ranks: int, cuda: bool) -> LaunchPlan:
    """``plan`` (one node's ranks) as ``ctx.nodes`` nodes' plans: node 0's, the others in
    ``peers``; NCCL for what needs one node, the rendezvous at the meeting address."""
    addr = ctx.dist_init_addr or ADDR_PLACEHOLDER
    words: list[str] = []
    changed: list[str] = []
    argv = iter(plan.argv)
    for word in argv:
        if word == "--port":
            next(argv, None)  # the meeting address holds the port
            continue
        words.append(word)
        if word in PATHS:
            path = next(argv, dispatch.NCCL)
            if cuda and path in ONE_NODE:
                changed.append(f"{word[2:]} {path}")
                path = dispatch.NCCL
            words.append(path)
    nodes = [replace(plan, argv=(*words, *node_flags(ctx.nodes, rank, addr)), port=None,
                     notes=())
             for rank in range(ctx.nodes)]
    notes = [f"{ctx.nodes} nodes x {ranks} ranks ({ctx.nodes * ranks} in all), meeting at "
             f"{addr}: {'NCCL over the network' if cuda else 'gloo'} between nodes"]
    if changed:
        notes.append(f"across nodes SGLang runs NCCL, not {', '.join(changed)} (custom "
                     "all-reduce turns itself off when the group spans nodes)")
    return replace(nodes[0], peers=tuple(nodes[1:]), notes=(*plan.notes, *notes))
