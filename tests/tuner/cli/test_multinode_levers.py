"""The site's interfaces on the SGLang path across nodes: ``--pin GLOO_SOCKET_IFNAME`` (SGLang's
CPU group, gloo, spans the nodes) reaches every node's server env beside NCCL_SOCKET_IFNAME; on
one node per trial both leave with the network knobs, with a note."""

from __future__ import annotations

from pathlib import Path

from launchers.multinode import all_plans
from launchers.sglang.launcher import SGLangArgs
from tuner.setup import prepare
from tuner.spec import ExperimentSpec

PINS = {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "=eth1"}


def spec(tmp_path: Path, nodes: int) -> ExperimentSpec:
    return ExperimentSpec.model_validate({
        "name": "e", "out_dir": tmp_path / "e", "nodes_per_trial": nodes,
        "address": "10.0.0.1:6379", "workload": SGLangArgs(model=str(tmp_path)),
        "space": "nccl-multinode", "pins": PINS})


def test_a_pinned_gloo_interface_reaches_every_nodes_server(tmp_path: Path) -> None:
    setup = prepare(spec(tmp_path, 2))
    plan = setup.workload.plan(setup.space.baseline(), setup.context("t1", port=30001))
    nodes = all_plans(plan)
    assert len(nodes) == 2
    for node in nodes:
        assert {k: node.env.get(k) for k in PINS} == PINS


def test_one_node_per_trial_leaves_both_interfaces_out_with_a_note(tmp_path: Path) -> None:
    setup = prepare(spec(tmp_path, 1))
    assert not set(PINS) & set(setup.space.pins)
    assert len(setup.left_out) == 1 and all(name in setup.left_out[0] for name in PINS)
