"""A trial across nodes at the command line (``--nodes-per-trial N``): what is bad input before
anything starts, and how ``servetune plan`` shows each node's command."""

from __future__ import annotations

import shlex

from launchers.base import LaunchPlan
from launchers.multinode import ADDR_PLACEHOLDER, Placement, all_plans
from tuner.cli.args import CliError
from tuner.spec import ExperimentSpec


def check_nodes(spec: ExperimentSpec, placement: Placement, node_gpus: int | None, *,
                planning: bool) -> list[str]:
    """Raises CliError on bad input for ``--nodes-per-trial`` (``placement``); returns notes
    for a plan."""
    if not placement.across_nodes:
        return []
    nodes, flag = placement.nodes, placement.flag
    if not spec.workload.multi_node:
        raise CliError(f"{flag}: the {spec.workload.kind} workload runs on one node")
    if spec.screen is not None:
        raise CliError(f"{flag}: the proxy screen runs on one node (--screen proxy): screen "
                       "on one node, then search across nodes")
    if spec.profile:
        raise CliError(f"{flag}: profiles run on one node (--profile)")
    tp = spec.workload.tp_ranks()
    if tp is not None and tp % nodes:
        raise CliError(f"--tp {tp} does not split evenly over {nodes} nodes")
    if tp is not None and node_gpus and tp > node_gpus * nodes:
        raise CliError(f"--tp {tp} is larger than the {node_gpus * nodes} GPUs of {nodes} "
                       f"nodes of {node_gpus}")
    if spec.address is None:
        need = (f"{flag}: a local Ray is one node; join a Ray cluster of at least {nodes} "
                "nodes with --address")
        if not planning:
            raise CliError(need)
        return [f"planned as given; {need}"]
    return []


def command_lines(plan: LaunchPlan) -> list[str]:
    """The env and the command of every node of ``plan``, as ``servetune plan`` prints them."""
    plans = all_plans(plan)
    lines: list[str] = []
    if any(ADDR_PLACEHOLDER in word for word in plan.argv):
        lines.append(f"# {ADDR_PLACEHOLDER}: node 0's address and a free port there (a run "
                     "picks them for each trial)")
    for rank, node in enumerate(plans):
        if len(plans) > 1:
            role = " (serves clients; benchmarked)" if rank == 0 else ""
            lines.append(f"# node {rank} of {len(plans)}{role}")
        lines += [f"{key}={shlex.quote(value)} \\" for key, value in sorted(node.env.items())]
        lines.append(" ".join(shlex.quote(a) for a in node.argv))
    return lines
