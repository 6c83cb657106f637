"""``--nodes-per-trial N`` at the command line: what is bad input (one line, exit 2, nothing
started), what ``plan`` shows (every node's command), and the network knobs left out with a
note on one node per trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from launchers.multinode import Placement
from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from search_spaces.space import load_preset
from tests.tuner.cli.test_cli_bad_input import assert_bad_input, run_args, servetune
from tuner.cli.args import CliError
from tuner.cli.nodes import check_nodes
from tuner.setup import prepare
from tuner.spec import ExperimentSpec


def spec(tmp_path: Path, **fields: object) -> ExperimentSpec:
    data: dict[str, object] = {"name": "e", "out_dir": tmp_path / "e", "nodes_per_trial": 2,
                               "address": "10.0.0.1:6379",
                               "workload": SGLangArgs(model=str(tmp_path))}
    return ExperimentSpec.model_validate({**data, **fields})


def checked(given: ExperimentSpec, node_gpus: int | None, *, planning: bool) -> list[str]:
    """``check_nodes`` with the spec's placement, as check_before_launch passes it."""
    return check_nodes(given, Placement(given.nodes_per_trial), node_gpus, planning=planning)


class OneNodeArgs(ProxyArgs):
    """A workload that cannot span nodes (both shipped ones can)."""

    multi_node: ClassVar[bool] = False


def test_a_workload_of_one_node_is_refused(tmp_path: Path) -> None:
    one = spec(tmp_path).model_copy(update={"workload": OneNodeArgs()})
    with pytest.raises(CliError, match="--nodes-per-trial 2: the proxy workload runs on one"):
        checked(one, 8, planning=False)
    assert checked(spec(tmp_path, workload=ProxyArgs()), 8, planning=False) == []


@pytest.mark.parametrize(("fields", "named"), [
    ({"screen": "proxy"}, "--screen proxy"),
    ({"profile": True}, "--profile"),
    ({"address": None}, "--address"),
])
def test_what_a_trial_across_nodes_refuses(tmp_path: Path, fields: dict[str, object],
                                           named: str) -> None:
    with pytest.raises(CliError, match="--nodes-per-trial 2") as err:
        checked(spec(tmp_path, **fields), 8, planning=False)
    assert named in str(err.value)


def test_tp_must_split_over_the_nodes_and_fit_them(tmp_path: Path) -> None:
    uneven = spec(tmp_path, workload=SGLangArgs(model=str(tmp_path), tp=9))
    with pytest.raises(CliError, match="--tp 9 does not split evenly over 2 nodes"):
        checked(uneven, 8, planning=False)
    large = spec(tmp_path, workload=SGLangArgs(model=str(tmp_path), tp=32))
    with pytest.raises(CliError, match="--tp 32 is larger than the 16 GPUs of 2 nodes"):
        checked(large, 8, planning=False)
    fits = spec(tmp_path, workload=SGLangArgs(model=str(tmp_path), tp=16))
    assert checked(fits, 8, planning=False) == []


def test_plan_only_notes_a_missing_cluster(tmp_path: Path) -> None:
    notes = checked(spec(tmp_path, address=None), None, planning=True)
    assert len(notes) == 1 and "--address" in notes[0]
    assert checked(spec(tmp_path, nodes_per_trial=1, address=None), None,
                       planning=False) == []


def test_network_knobs_leave_a_one_node_space_with_a_note(tmp_path: Path) -> None:
    one = prepare(spec(tmp_path, nodes_per_trial=1, space="nccl-multinode",
                       pins={"NCCL_IB_HCA": "mlx5_0:1"}))
    assert "NCCL_IB_QPS_PER_CONNECTION" not in one.space.domains
    assert "NCCL_IB_HCA" not in one.space.pins and "NCCL_ALGO" in one.space.domains
    assert len(one.left_out) == 1 and "NCCL_IB_HCA" in one.left_out[0]
    two = prepare(spec(tmp_path, space="nccl-multinode", pins={"NCCL_IB_HCA": "mlx5_0:1"}))
    assert "NCCL_IB_QPS_PER_CONNECTION" in two.space.domains and two.left_out == []
    assert two.space.pins["NCCL_IB_HCA"] == "mlx5_0:1"


def test_run_without_a_cluster_is_one_line(tmp_path: Path) -> None:
    args = run_args(tmp_path, "--nodes-per-trial", "2")
    del args[args.index("--num-gpus"):args.index("--num-gpus") + 2]
    assert_bad_input(servetune(tmp_path, *args), "--nodes-per-trial 2", "--address")


def test_plan_shows_every_nodes_command(tmp_path: Path) -> None:
    args = run_args(tmp_path, "--nodes-per-trial", "2", "--space", "nccl-multinode",
                    "--samples", "2", "--json", "--no-preflight")
    args[0] = "plan"
    del args[args.index("--num-gpus"):args.index("--num-gpus") + 2]
    done = servetune(tmp_path, *args)
    assert done.code == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(entries) == 2
    for entry in entries:
        node0, node1 = entry["argv"], entry["peers"][0]["argv"]
        assert node0[node0.index("--node-rank") + 1] == "0"
        assert node1[node1.index("--node-rank") + 1] == "1"
        assert entry["peers"][0]["env"] == entry["env"]
    network = {n for n in load_preset("nccl-multinode").domains if n.startswith("NCCL_")}
    assert network & set(entries[1]["env"])  # the inter-node levers: not left out across nodes
