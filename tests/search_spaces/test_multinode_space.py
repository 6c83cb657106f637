"""The nccl-multinode space carries its dependencies: the split over queue pairs only with two
or more of them, no point-to-point-only lever for a TP allreduce, and gloo's interface beside
NCCL's as a site setting."""

from __future__ import annotations

import pytest

from search_spaces import knobs
from search_spaces.catalogue import POINT_TO_POINT_ONLY
from search_spaces.knob import Group, KnobKind, Source
from search_spaces.space import SpaceError, from_mapping, load_preset, preset_names

SPLIT, QPS = "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_QPS_PER_CONNECTION"


@pytest.mark.parametrize("qps", [None, 1])
def test_the_split_with_one_queue_pair_is_refused(qps: int | None) -> None:
    reasons = knobs.check_config({SPLIT: 1, QPS: qps})
    assert len(reasons) == 1 and "no effect with one queue pair" in reasons[0]
    assert knobs.check_config({SPLIT: 0, QPS: qps}) == []


@pytest.mark.parametrize("qps", [2, 4])
def test_the_split_with_more_queue_pairs_runs(qps: int) -> None:
    assert knobs.check_config({SPLIT: 1, QPS: qps}) == []


def test_the_presets_valid_points_never_split_over_one_queue_pair() -> None:
    space = load_preset("nccl-multinode")
    valid = [p for p in space.grid() if not space.validate(p)]
    assert valid and all(p[QPS] in (2, 4) for p in valid if p[SPLIT] == 1)
    assert any(p[SPLIT] == 1 for p in valid)  # still searched, with 2 or 4 queue pairs
    # a user who pins one queue pair leaves the split nothing to do
    pinned = space.with_pins({QPS: 1})
    assert all(p[SPLIT] != 1 for p in pinned.grid() if not pinned.validate(p))


def test_no_preset_holds_a_point_to_point_only_lever() -> None:
    """Every shipped space tunes a TP group's collectives; a send/recv-only lever would only
    repeat points. The catalogue keeps it, its scope stated."""
    for name in preset_names():
        space = load_preset(name)
        held = (set(space.domains) | set(space.pins)) & POINT_TO_POINT_ONLY
        assert not held, f"preset {name} holds point-to-point-only {sorted(held)}"
    for name in POINT_TO_POINT_ONLY:
        assert knobs.CATALOGUE[name].help.startswith("Point-to-point only")


def test_gloos_interface_is_a_site_lever_beside_nccls() -> None:
    gloo, nccl = knobs.CATALOGUE["GLOO_SOCKET_IFNAME"], knobs.CATALOGUE["NCCL_SOCKET_IFNAME"]
    assert (gloo.kind, gloo.group, gloo.choices) == (nccl.kind, nccl.group, ()) \
        == (KnobKind.ENV, Group.NETWORK, ())
    assert gloo.source is Source.TORCH  # PyTorch's ProcessGroupGloo reads it
    assert gloo.render_env("eth0,eth1") == "eth0,eth1"
    for good in ("eth0", "eth0,eth1", "enp1s0f0.100", "ib_0"):
        assert gloo.validate(good) is None
    for bad in ("^eth0", "=eth0", "eth0:1", "", "eth0 eth1", 3):
        assert gloo.validate(bad) is not None  # gloo takes exact names only
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):  # pinned, never searched
        with pytest.raises(SpaceError, match="no values to try"):
            from_mapping({"name": "s", "knobs": {name: None}}, "test")
        assert load_preset("nccl-multinode").with_pins({name: "eth1"}).pins[name] == "eth1"
