"""Contract: every node's command of a trial across nodes parses with the installed SGLang's
own parser, and says to SGLang what servetune means: the node count, this node's rank, the
one address where the nodes meet, a --tp-size that splits evenly over the nodes
(``sglang/srt/arg_groups/validation_hook.py`` asserts it). Run both in this process and
through the preflight that a run uses (SGLang's interpreter, its own message on rejection).

Needs SGLang's parser importable on this interpreter (CPU is enough); skipped with the reason
where it is not.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import pytest

from launchers.base import LaunchPlan, TrialContext
from launchers.multinode import ADDR_PLACEHOLDER, all_plans
from launchers.sglang.launcher import SGLangArgs
from launchers.sglang.preflight import shared
from search_spaces.space import load_preset
from tests.sglang_parser import CONTRACT
from tests.sglang_parser import sglang_parser as build_parser

pytestmark = CONTRACT

ARGS = SGLangArgs(model="/models/x", speculative_algorithm="EAGLE3", draft_model="/models/d",
                  concurrency=[1, 8])
ADDR = "10.0.0.1:5000"


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    return build_parser()


def plans(nodes: int, gpus: int, addr: str | None) -> list[tuple[dict[str, object], LaunchPlan]]:
    """The nccl-multinode preset's baseline and seeded points, and verify-campaign's baseline,
    as the trial (or best/launch.sh, with the placeholder) renders them."""
    workload = ARGS.build()
    ctx = TrialContext("exp", "t", Path("/tmp/exp/t"), tuple(map(str, range(gpus))), 30001, 0,
                       nodes, addr)
    space = load_preset("nccl-multinode")
    rng = random.Random("multinode-contract")
    points = [space.baseline(), *(space.sample(rng) for _ in range(8)),
              load_preset("verify-campaign").baseline()]
    return [(point, workload.plan(point, ctx)) for point in points]


def flags(plan: LaunchPlan) -> list[str]:
    return list(plan.argv[len(ARGS.server_cmd):])


@pytest.mark.parametrize(("nodes", "gpus"), [(2, 8), (4, 8), (2, 1)])
def test_every_nodes_command_parses_as_that_node(
        sglang_parser: argparse.ArgumentParser, nodes: int, gpus: int) -> None:
    for _, plan in plans(nodes, gpus, ADDR):
        assert len(all_plans(plan)) == nodes
        for rank, node in enumerate(all_plans(plan)):
            parsed = sglang_parser.parse_args(flags(node))
            assert (parsed.nnodes, parsed.node_rank, parsed.dist_init_addr) == (nodes, rank, ADDR)
            assert parsed.tp_size == nodes * gpus and parsed.tp_size % parsed.nnodes == 0
            assert parsed.port == 30001 and parsed.host == "127.0.0.1"


def test_the_launch_scripts_commands_parse(sglang_parser: argparse.ArgumentParser) -> None:
    """best/launch.sh's commands, with the address the script is given in place of the
    placeholder."""
    production = ARGS.build().production_plan({}, TrialContext(
        "exp", "best", Path("/tmp/exp/best"), ("0", "1"), 30000, 0, 2, ADDR_PLACEHOLDER))
    for rank, node in enumerate(all_plans(production)):
        words = [ADDR if w == ADDR_PLACEHOLDER else w for w in flags(node)]
        parsed = sglang_parser.parse_args(words)
        assert (parsed.node_rank, parsed.dist_init_addr) == (rank, ADDR)


def test_the_preflight_accepts_every_nodes_command() -> None:
    """What a run checks before launching (launchers/sglang/preflight.py), for every node."""
    argvs = [flags(node) for _, plan in plans(2, 8, ADDR) for node in all_plans(plan)]
    results = shared().check_many(argvs)
    bad = [f"{' '.join(a)} -> {r.error or r.warnings}" for a, r in zip(argvs, results, strict=True)
           if not r.ok or r.warnings]
    assert all(r.ok is not None for r in results), "the preflight did not run"
    assert not bad, "\n".join(bad[:5])
