"""Landscapes that test how the default search reads its levers (made-up numbers, not
measurements; test data for the searchers):

- ``three-levers``: two nodes, the ``nccl-multinode`` preset's space with channels per
  network peer added back (the preset's space until it left that point-to-point-only lever
  out; 77,760 points, the split without a second queue pair invalid). The network's queue
  pairs per connection (2 or 4), splitting data over them and channels per network peer (2
  or 4) pay only together: one or two of them cost 1% (the setup of a path that is not
  used), the three together gain 12-14%. Made up: a TP allreduce does not read channels per
  network peer; here it is just a third lever that pays only with the other two. The rest
  is separable: Tree across the nodes, LL and GPUDirect at PHB gain a few percent each.
- ``mis-rated``: one node, NCCL's own knobs and the draft tokens (1,728 points). The
  catalogue rates ``NCCL_BUFFSIZE`` small (about 1%); here a 1 MiB buffer is worth 15% (256
  KiB 6%, 8 MiB 1% worse), more than any knob rated above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from benchmarks.landscapes import Config, Landscape
from search_spaces.knobs import Value
from search_spaces.space import SearchSpace, from_mapping, load

SOURCE = "benchmarks/landscapes_levers.py"
BASE = 100.0  # tok/s at the baseline

# ---------------------------------------------------------------- three levers


def _factor(config: Config, name: str, table: Mapping[Value, float]) -> float:
    return table.get(config.get(name), 1.0)


# separable levers: value -> factor (unset 1.0)
MULTINODE: dict[str, dict[Value, float]] = {
    "NCCL_ALGO": {"allreduce:tree": 1.05},
    "NCCL_PROTO": {"LL": 1.04, "Simple": 0.97},
    "NCCL_MAX_NCHANNELS": {8: 0.99, 16: 1.01},
    "NCCL_NET_GDR_LEVEL": {"PIX": 0.97, "PHB": 1.02, "SYS": 0.995},
    "NCCL_CROSS_NIC": {0: 1.005, 1: 0.99},
    "NCCL_PXN_DISABLE": {1: 0.985},
}
ALONE = 0.99  # one or two of the three levers set without the rest (the unused setup)
TOGETHER = {(4, 4): 1.14, (4, 2): 1.13, (2, 4): 1.13, (2, 2): 1.12}  # (QPs, channels per peer)


def _three_levers_space() -> SearchSpace:
    """The preset with channels per network peer where it stood (after NCCL_CROSS_NIC: the
    space's order breaks ties between levers)."""
    preset = load("nccl-multinode")
    domains: dict[str, tuple[Value, ...]] = {}
    for name, values in preset.domains.items():
        domains[name] = values
        if name == "NCCL_CROSS_NIC":
            domains["NCCL_NCHANNELS_PER_NET_PEER"] = (None, 1, 2, 4)
    return replace(preset, name="three-levers", domains=domains, source=SOURCE)


def three_levers_tok_s(config: Config) -> float:
    value = BASE
    for name, table in MULTINODE.items():
        value *= _factor(config, name, table)
    qps, peer = config.get("NCCL_IB_QPS_PER_CONNECTION"), config.get("NCCL_NCHANNELS_PER_NET_PEER")
    on = [qps in (2, 4), config.get("NCCL_IB_SPLIT_DATA_ON_QPS") == 1, peer in (2, 4)]
    if all(on):
        return value * TOGETHER[(int(qps or 0), int(peer or 0))]
    return value * (ALONE if any(on) else 1.0)


# ---------------------------------------------------------------- a mis-rated lever

MIS_RATED_SPACE: dict[str, Any] = {
    "name": "mis-rated",
    "knobs": {
        "NCCL_ALGO": ["allreduce:ring", "allreduce:tree"],
        "NCCL_PROTO": ["LL", "LL128", "Simple"],
        "NCCL_MAX_NCHANNELS": [4, 8, 16],
        "NCCL_NTHREADS": [128, 256],
        "NCCL_BUFFSIZE": [262144, 1048576, 8388608],
        "--speculative-num-draft-tokens": [3, 6],
    },
    "pins": {"NCCL_NVLS_ENABLE": 0, "--speculative-num-steps": 5},
}
MIS_RATED: dict[str, dict[Value, float]] = {
    "NCCL_ALGO": {"allreduce:tree": 1.03, "allreduce:ring": 0.99},
    "NCCL_PROTO": {"LL": 1.05, "LL128": 1.02, "Simple": 0.96},
    "NCCL_MAX_NCHANNELS": {4: 0.99, 8: 1.01},
    "NCCL_NTHREADS": {256: 1.005, 128: 0.99},
    "NCCL_BUFFSIZE": {262144: 1.06, 1048576: 1.15, 8388608: 0.99},
    "--speculative-num-draft-tokens": {3: 0.97, 6: 1.06},
}


def mis_rated_tok_s(config: Config) -> float:
    value = BASE
    for name, table in MIS_RATED.items():
        value *= _factor(config, name, table)
    return value


def lever_landscape(name: str) -> Landscape:
    if name == "three-levers":
        return Landscape(name, _three_levers_space(), three_levers_tok_s,
                         "two nodes: three network levers pay only together (+12-14%), each "
                         "alone 1% worse")
    if name == "mis-rated":
        return Landscape(name, from_mapping(MIS_RATED_SPACE, SOURCE), mis_rated_tok_s,
                         "NCCL_BUFFSIZE, rated small, is worth 15%")
    raise ValueError(f"unknown landscape {name!r}")
