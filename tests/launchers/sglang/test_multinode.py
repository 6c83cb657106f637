"""SGLang across nodes, rendered (launchers/sglang/multinode.py, launchers/multinode.py): one
command per node with SGLang's multi-node flags, and one launch script for every node."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.multinode import ADDR_PLACEHOLDER, all_plans, on_node, shell_script
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload

CONFIG = {"NCCL_ALGO": "allreduce:tree", "NCCL_IB_QPS_PER_CONNECTION": 4}


def workload(**args: object) -> SGLangWorkload:
    return SGLangArgs(model="/models/x", **args).build()  # type: ignore[arg-type]


def ctx(tmp_path: Path, nodes: int = 2, addr: str | None = "10.0.0.1:5000") -> TrialContext:
    return TrialContext("exp", "t1", tmp_path / "t1", tuple(str(i) for i in range(8)), 30001,
                        0, nodes, addr)


def value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_every_node_gets_the_same_command_with_its_rank(tmp_path: Path) -> None:
    plan = workload().plan(CONFIG, ctx(tmp_path, nodes=3))
    plans = all_plans(plan)
    assert len(plans) == 3
    for rank, node in enumerate(plans):
        assert value(node.argv, "--nnodes") == "3"
        assert value(node.argv, "--node-rank") == str(rank)
        assert value(node.argv, "--dist-init-addr") == "10.0.0.1:5000"
        assert value(node.argv, "--tp-size") == "24"  # every GPU of every node
        assert node.env == plan.env  # the trial's environment on every node
        cut = node.argv.index("--nnodes")
        assert node.argv[:cut] == plan.argv[:cut]
    # Node 0 serves; each follower serves SGLang's dummy health server on its --port too.
    assert plan.port == 30001 and all(p.port == 30001 for p in plan.peers)
    assert any("3 nodes, one server each: --tp-size 24 over 3 x 8 GPUs" in n for n in plan.notes)


def test_one_node_is_planned_as_before(tmp_path: Path) -> None:
    one = workload().plan(CONFIG, replace(ctx(tmp_path), nodes=1, dist_init_addr=None))
    assert one.peers == ()
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(one.argv)
    assert value(one.argv, "--tp-size") == "8"


def test_a_given_tp_is_kept_and_the_flags_are_servetunes(tmp_path: Path) -> None:
    plan = workload(tp=16).plan({}, ctx(tmp_path))
    assert value(plan.argv, "--tp-size") == "16"
    conflicts = workload(server_args=["--nnodes", "2", "--dist-init-addr=h:1"]).conflicts([])
    assert conflicts == ["server_args sets --nnodes, which servetune sets itself",
                         "server_args sets --dist-init-addr, which servetune sets itself"]


def test_a_plan_outside_a_trial_names_the_address_to_give(tmp_path: Path) -> None:
    plan = workload().plan({}, ctx(tmp_path, addr=None))
    assert value(plan.argv, "--dist-init-addr") == ADDR_PLACEHOLDER
    assert any(ADDR_PLACEHOLDER in n for n in plan.notes)


def test_a_node_runs_on_its_own_gpus(tmp_path: Path) -> None:
    peer = workload().plan({}, ctx(tmp_path)).peers[0]
    assert on_node(peer, ("4", "5")).env["CUDA_VISIBLE_DEVICES"] == "4,5"
    assert on_node(peer, ()).env == peer.env


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_launch_script_runs_each_nodes_command(tmp_path: Path) -> None:
    production = workload(server_cmd=["echo", "serve"]).production_plan(
        CONFIG, ctx(tmp_path, addr=ADDR_PLACEHOLDER))
    for node in all_plans(production):  # no measuring env on any node
        assert "NCCL_DEBUG" not in node.env and "CUDA_VISIBLE_DEVICES" not in node.env
    script = tmp_path / "launch.sh"
    script.write_text(shell_script(production))

    def launch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                              timeout=10, env={"PATH": "/usr/bin:/bin"})

    for rank in ("0", "1"):
        done = launch(rank, "10.0.0.7:5000")
        assert done.returncode == 0, done.stderr
        words = done.stdout.split()
        assert words[0] == "serve" and value(tuple(words), "--node-rank") == rank
        assert value(tuple(words), "--dist-init-addr") == "10.0.0.7:5000"
    assert launch("2", "h:1").returncode == 2
    assert launch("0").returncode != 0  # the address is required
    text = script.read_text()
    assert "export NCCL_IB_QPS_PER_CONNECTION=4" in text and text.count(") exec echo") == 2
