"""One configuration across several nodes, whatever the workload: node 0's plan holds the
other nodes' plans (``LaunchPlan.peers``); every node runs its own plan on its own machine,
with the same environment (its own GPUs aside), and node 0 is the one served and measured.

Where the nodes meet (``--dist-init-addr`` for SGLang) is rank 0's node address and a free
port there, known only once a trial holds its nodes; a plan made outside a trial (``servetune
plan``, ``best/launch.sh``) carries ``ADDR_PLACEHOLDER`` instead, which the launch script
takes from its command line. Each node's command carries SGLang's flags for it (``node_flags``: the
proxy takes the same); tuner/run/nodes.py starts each node's plan on its node.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace

from launchers.base import LaunchPlan

ADDR_VARIABLE = "DIST_INIT_ADDR"
ADDR_PLACEHOLDER = "$" + ADDR_VARIABLE  # where the nodes meet, outside a trial
GPUS_ENV = "CUDA_VISIBLE_DEVICES"
NNODES, NODE_RANK, DIST_INIT_ADDR = "--nnodes", "--node-rank", "--dist-init-addr"
# The ports a trial's nodes meet at: the dist-init port and the six after it. SGLang 0.5.23,
# srt/server_args.py, PortArgs.init_new: with DP attention (attn_dp_size > 1) and
# --dist-init-addr, port_base = dist_init_port + 1 and every node's engine
# (entrypoints/engine.py, Engine._launch_subprocesses -> PortArgs.init_new) waits for
# dist_init_port, port_base .. port_base + 4 and, with --nnodes > 1, port_base + 5
# (load_collector_port) to be free on its own host (wait_port_available; a busy one fails the
# launch after SGLANG_WAIT_PORT_TIMEOUT, 30 s). attn_dp_size is resolved by SGLang (its
# flags, and model hooks), not known from the plan, so every trial reserves and checks all
# seven on every node; without DP attention only node 0 binds the first (torch.distributed's
# TCP store).
MEETING_PORTS = 7


@dataclass(frozen=True)
class Placement:
    """Where one trial runs: ``nodes`` whole nodes (``--nodes-per-trial``), one server on each,
    node 0 served and measured. Built once per experiment (``tuner.setup.Setup``) and passed
    down to what places, checks, plans and names a trial."""

    nodes: int = 1

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a trial runs on at least one node, not {self.nodes}")

    @property
    def across_nodes(self) -> bool:
        return self.nodes > 1

    @property
    def flag(self) -> str:
        """How the user asked for it."""
        return f"--nodes-per-trial {self.nodes}"

    @property
    def meeting(self) -> str | None:
        """Where the nodes meet in a plan made outside a trial: ``ADDR_PLACEHOLDER`` (None
        on one node)."""
        return ADDR_PLACEHOLDER if self.across_nodes else None

    def held(self, gpus: int) -> str:
        """What one trial holds, in words."""
        return f"{gpus or 'no'} GPU(s)" + (f" on each of {self.nodes} nodes"
                                           if self.across_nodes else "")


ONE_NODE = Placement()


def node_flags(nodes: int, rank: int, addr: str) -> tuple[str, ...]:
    """Node ``rank``'s place among ``nodes`` nodes meeting at ``addr`` (SGLang's flags)."""
    return (NNODES, str(nodes), NODE_RANK, str(rank), DIST_INIT_ADDR, addr)


def all_plans(plan: LaunchPlan) -> list[LaunchPlan]:
    """Every node's plan, node 0 first."""
    return [plan, *plan.peers]


def meeting_addr(plan: LaunchPlan) -> str | None:
    """The ``HOST:PORT`` of ``plan``'s ``--dist-init-addr``; None outside a trial (no
    address, or the placeholder)."""
    argv = list(plan.argv)
    if DIST_INIT_ADDR not in argv[:-1]:
        return None
    addr = argv[argv.index(DIST_INIT_ADDR) + 1]
    return addr if addr.rpartition(":")[2].isdigit() else None


def meeting_ports(plan: LaunchPlan) -> tuple[int, ...]:
    """The ports every node of ``plan``'s trial needs free: ``MEETING_PORTS`` from the port of
    its ``--dist-init-addr`` (none outside a trial)."""
    addr = meeting_addr(plan)
    if addr is None:
        return ()
    port = int(addr.rpartition(":")[2])
    return tuple(range(port, port + MEETING_PORTS))


def on_node(plan: LaunchPlan, gpu_ids: tuple[str, ...]) -> LaunchPlan:
    """``plan`` with the GPUs its node holds (Ray assigns them per node)."""
    if GPUS_ENV not in plan.env or not gpu_ids:
        return plan
    return replace(plan, env={**plan.env, GPUS_ENV: ",".join(gpu_ids)})


def with_port(plan: LaunchPlan, port: int) -> LaunchPlan:
    """``plan`` serving on ``port`` (its ``--port`` word and ``port``): a node's own port."""
    argv = list(plan.argv)
    if "--port" in argv[:-1]:
        argv[argv.index("--port") + 1] = str(port)
    return replace(plan, argv=tuple(argv), port=port)


def _word(word: str) -> str:
    """A shell word: quoted, the meeting address left to the shell's variable."""
    if ADDR_PLACEHOLDER in word:
        return '"' + word.replace(ADDR_PLACEHOLDER, "${" + ADDR_VARIABLE + "}") + '"'
    return shlex.quote(word)


def _exports(env: Mapping[str, str]) -> list[str]:
    return [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]


def shell_script(plan: LaunchPlan) -> str:
    """A bash script for every node of a multi-node plan: ``launch.sh NODE_RANK
    DIST_INIT_ADDR`` runs that node's command (the same script on every node)."""
    plans = all_plans(plan)
    last = len(plans) - 1
    usage = f"usage: launch.sh NODE_RANK (0..{last}) {ADDR_VARIABLE} (node 0's HOST:PORT)"
    lines = ["#!/usr/bin/env bash",
             f"# written by servetune: one server per node, {len(plans)} nodes. On every node:",
             f"#   ./launch.sh NODE_RANK {ADDR_VARIABLE}",
             "# NODE_RANK 0 on the node that serves clients; "
             f"{ADDR_VARIABLE}: node 0's address and a free",
             "# port there, e.g. 10.0.0.1:5000, the same on every node.",
             "set -euo pipefail",
             f'NODE_RANK=${{1:?"{usage}"}}',
             f'{ADDR_VARIABLE}=${{2:?"{usage}"}}']
    lines += [f"unset {name}" for name in plan.unset_env]
    lines += _exports(plan.env)
    lines.append('case "$NODE_RANK" in')
    for rank, node in enumerate(plans):
        own = {k: v for k, v in node.env.items() if plan.env.get(k) != v}
        gone = [k for k in plan.env if k not in node.env]
        command = " ".join(_word(w) for w in node.argv)
        steps = [*(f"unset {k}" for k in gone), *_exports(own), f"exec {command}"]
        lines.append(f"  {rank}) " + "; ".join(steps) + " ;;")
    lines.append(f'  *) echo "NODE_RANK must be 0..{last}, got $NODE_RANK" >&2; exit 2 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"
