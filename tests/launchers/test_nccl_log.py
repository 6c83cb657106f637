"""NCCL INFO log parsing, on NCCL's own lines (shared/reference/nccl.md)."""

from __future__ import annotations

from pathlib import Path

from launchers import nccl_log
from launchers.nccl_log import EffectiveNccl, mismatches, parse, parse_files


def rank_log(lines: list[str], pid: int = 4242, host: str = "gpu-node", dev: int = 0) -> str:
    return "".join(f"{host}:{pid}:{pid} [{dev}] NCCL INFO {line}\n" for line in lines)


# Lines as nccl.md quotes them (8 GPUs, NCCL 2.28.9, TUNING on).
EIGHT_RANKS = [
    "NCCL version 2.28.9+cuda13.0",
    "NCCL_ALGO set by environment to Tree",
    "NCCL_MAX_NCHANNELS set by environment to 4.",
    "comm 0x471fdf90 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
    "Channel 00/24 : 0 1 2 3 4 5 6 7",
    "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, "
    "32 p2p channels per peer",
    "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "Channel 01/0 : 0[0] -> 1[1] via P2P/IPC",
    "Channel 02/0 : 0[0] -> 1[1] via SHM/direct",
    "comm 0x471fdf90 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 18000 commId 0x1 - Init COMPLETE",
    "AllReduce: 114688 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}",
    "AllReduce: 114688 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}",
]

# Seen on one H200, nranks 1 (nccl.md), including an ALL-subsystem per-call line.
ONE_RANK = [
    "NCCL version 2.28.9+cuda13.0",
    "NCCL_MAX_NCHANNELS set by environment to 4.",
    "NCCL_P2P_LEVEL set by environment to NVL",
    "comm 0x471fdf90 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
    "Channel 00/04 : 0",
    "4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 4 p2p channels per peer",
    "AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 28672 datatype 9 op 0 root 0 "
    "comm 0x471fdf90 [nranks=1] stream 0x5500",
]


def test_parse_eight_ranks() -> None:
    eff = parse(rank_log(EIGHT_RANKS))
    assert eff.version == "2.28.9+cuda13.0"
    assert eff.nranks == 8
    assert (eff.coll_channels, eff.nvls_channels, eff.p2p_channels) == (24, 0, 32)
    assert eff.transports == ["P2P/CUMEM/read", "P2P/IPC", "SHM/direct"]
    assert eff.env == {"NCCL_ALGO": "Tree", "NCCL_MAX_NCHANNELS": "4"}  # trailing period gone
    assert eff.choices == [{"collective": "AllReduce", "bytes": 114688, "algo": "RING",
                            "proto": "LL", "channels": 4}]  # de-duplicated
    assert eff.ranks_seen == 1


def test_columns_and_json() -> None:
    eff = parse(rank_log(EIGHT_RANKS))
    cols = eff.to_columns()
    assert cols["nccl_version"] == "2.28.9+cuda13.0"
    assert cols["nccl_nranks"] == 8
    assert cols["nccl_coll_channels"] == 24
    assert cols["nccl_transports"] == "P2P/CUMEM/read+P2P/IPC+SHM/direct"
    assert cols["nccl_allreduce_algos"] == "RING/LL"
    assert all(k.startswith("nccl_") for k in cols)
    assert eff.to_json()["env"]["NCCL_ALGO"] == "Tree"


def test_empty_text_gives_nothing_invented() -> None:
    eff = parse("no nccl here\n")
    assert eff == EffectiveNccl()
    assert eff.to_columns()["nccl_transports"] is None
    assert mismatches({"NCCL_ALGO": "allreduce:tree"}, eff) == []


def test_one_rank_lines_and_no_tuning_choice_from_per_call_lines() -> None:
    eff = parse(rank_log(ONE_RANK))
    assert eff.nranks == 1
    assert eff.coll_channels == 4 and eff.p2p_channels == 4
    assert eff.choices == []  # the opCount line is not a TUNING choice
    assert eff.env == {"NCCL_MAX_NCHANNELS": "4", "NCCL_P2P_LEVEL": "NVL"}


def test_one_rank_does_not_judge_algorithm_settings() -> None:
    eff = parse(rank_log(ONE_RANK))
    asked = {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "4",
             "NCCL_P2P_LEVEL": "NVL"}
    warnings = mismatches(asked, eff)
    assert len(warnings) == 1
    assert "one rank" in warnings[0] and "NCCL_ALGO" in warnings[0] and "NCCL_PROTO" in warnings[0]


def test_mismatch_messages() -> None:
    text = rank_log(["NCCL version 2.28.9+cuda13.0",
                     "NCCL_CUMEM_ENABLE set by environment to 0.",
                     "NCCL_GRAPH_REGISTER set by environment to 0.",
                     "NCCL_ALGO set by environment to Tree",
                     "NCCL_SOCKET_IFNAME set by environment to eth0",
                     "comm 0x471fdf90 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0"])
    eff = parse(text)
    asked = {"NCCL_CUMEM_ENABLE": "1", "NCCL_ALGO": "tree", "NCCL_BUFFSIZE": "1048576",
             "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": "/x/nccl.%h.%p.log", "CUDA_VISIBLE_DEVICES": "0"}
    warnings = mismatches(asked, eff, inherited={"NCCL_SOCKET_IFNAME": "eth0"})
    assert "asked NCCL_CUMEM_ENABLE=1, NCCL ran with 0" in warnings
    assert "NCCL_GRAPH_REGISTER=0 was set by the server, not by servetune" in warnings
    assert any(w.startswith("asked NCCL_BUFFSIZE=1048576") and "no 'set by environment'" in w
               for w in warnings)
    assert any("NCCL_SOCKET_IFNAME=eth0 came from the inherited environment" in w for w in warnings)
    assert not any("NCCL_ALGO" in w for w in warnings)  # case-insensitive match
    assert not any("NCCL_DEBUG" in w for w in warnings)
    assert len(warnings) == 4


def test_integer_values_compare_as_numbers() -> None:
    eff = parse(rank_log(EIGHT_RANKS))
    assert mismatches({"NCCL_MAX_NCHANNELS": "04", "NCCL_ALGO": "Tree"}, eff) == []
    assert mismatches({"NCCL_MAX_NCHANNELS": "8", "NCCL_ALGO": "Tree"}, eff) == [
        "asked NCCL_MAX_NCHANNELS=8, NCCL ran with 4"]


def test_parse_files_merges_ranks(tmp_path: Path) -> None:
    (tmp_path / "nccl.gpu-node.100.log").write_text(rank_log(EIGHT_RANKS, pid=100))
    other = [line.replace("rank 0 nRanks", "rank 1 nRanks") for line in EIGHT_RANKS]
    other.append("AllReduce: 1048576 Bytes -> Algo TREE proto SIMPLE channel{Lo..Hi}={0..23}")
    (tmp_path / "nccl.gpu-node.101.log").write_text(rank_log(other, pid=101, dev=1))
    eff = parse_files([*nccl_log.debug_files(tmp_path), tmp_path / "missing.log"])
    assert eff.ranks_seen == 2
    assert eff.nranks == 8
    assert len(eff.choices) == 2
    assert eff.to_columns()["nccl_allreduce_algos"] == "RING/LL+TREE/SIMPLE"


def test_largest_communicator_wins_and_net_transports_lose_device_index() -> None:
    lines = [
        "comm 0x1000 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
        "Channel 00/64 : 0",
        "64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, "
        "64 p2p channels per peer",
        "comm 0x2000 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
        "Channel 00/16 : 0 1 2 3 4 5 6 7",
        "16 coll channels, 16 collnet channels, 0 nvls channels, 32 p2p channels, "
        "32 p2p channels per peer",
        "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA",
        "Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/1/GDRDMA",
    ]
    eff = parse(rank_log(lines))
    assert eff.nranks == 8 and eff.coll_channels == 16
    assert eff.transports == ["NET/IB/GDRDMA"]


def test_lines_inside_a_server_log_are_found() -> None:
    text = ("[2026-01-15 10:02:03 TP0] Load weight end.\n"
            + rank_log(EIGHT_RANKS[:3])
            + "[2026-01-15 10:02:04 TP0] Capture cuda graph begin.\n")
    eff = parse(text)
    assert eff.version == "2.28.9+cuda13.0"
    assert eff.lines == 3


def test_debug_env_and_files(tmp_path: Path) -> None:
    env = nccl_log.debug_env(tmp_path)
    assert env == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
                   "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}
    assert nccl_log.debug_files(tmp_path) == []
    (tmp_path / "nccl.host.7.log").write_text("")
    (tmp_path / "server.log").write_text("")
    assert nccl_log.debug_files(tmp_path) == [tmp_path / "nccl.host.7.log"]
