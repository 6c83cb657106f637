"""nccl-tuner.csv read back the way NCCL's example tuner plugin reads and applies it
(NVIDIA/nccl plugins/tuner/example/plugin.c, summarized in shared/reference/nccl.md):

- ``fgets`` into 256 bytes, so a line must stay under 255; a line starting with '#' or
  empty is skipped; fields are split on ',' with runs of commas as one (``strtok``) and
  blanks trimmed; 8 to 10 fields make a rule, others are ignored; an unknown collective,
  algorithm or protocol name silently becomes allreduce / ring / simple;
- per collective: channels start at 1; the first rule whose type, [min, max] bytes, nodes
  and ranks (-1: any) match wins; its channel count replaces the 1 unless it is -1.

Every choice NCCL logged must come back out of the file unchanged, at the size the plugin is
asked about (an all-gather's whole buffer), and every size of those collectives must match.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from launchers import nccl_log
from tuner.output.tuner_csv import (
    MAX_BYTES,
    PLUGIN_LINE_MAX,
    TUNER_COLUMNS,
    tuner_csv,
    tuner_rules,
)

COLLECTIVES = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")


@dataclass
class PluginRule:
    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int
    ranks: int
    pipe_ops: int = -1
    reg_buff: int = -1


def plugin_load(text: str) -> list[PluginRule]:
    """The plugin's loadConfig, in Python; asserts where the plugin would silently misread."""
    rules = []
    for raw in text.splitlines(keepends=True):
        assert len(raw.rstrip("\n")) < PLUGIN_LINE_MAX, f"fgets would cut: {raw[:60]!r}"
        if raw.startswith(("#", "\n")):
            continue
        line = raw.rstrip("\n")
        if not line:
            continue
        tokens = [t.strip(" \t") for t in line.split(",") if t != ""][:10]
        assert 8 <= len(tokens) <= 10, f"the plugin would ignore: {line!r}"
        assert tokens[0] in COLLECTIVES and tokens[3] in ALGORITHMS and tokens[4] in PROTOCOLS, \
            f"an unknown name the plugin would read as its default: {line!r}"
        numbers = [int(t) for t in tokens[5:]]
        rules.append(PluginRule(tokens[0], int(tokens[1]), int(tokens[2]), tokens[3], tokens[4],
                                *numbers))
    return rules


def plugin_choice(rules: list[PluginRule], collective: str, nbytes: int, nodes: int = 1,
                  ranks: int = 2) -> tuple[str | None, str | None, int]:
    """The plugin's getCollInfo: (algorithm, protocol) forced by the first matching rule
    (None: NCCL's own), and the channel count NCCL is told."""
    channels = 1  # set before any rule is looked at
    for r in rules:
        if r.collective == collective and r.min_bytes <= nbytes <= r.max_bytes \
                and r.nodes in (-1, nodes) and r.ranks in (-1, ranks):
            return r.algorithm, r.protocol, channels if r.channels == -1 else r.channels
    return None, None, channels


def choice(collective: str, nbytes: int, algo: str, proto: str, channels: int) -> dict[str, Any]:
    return {"collective": collective, "bytes": nbytes, "algo": algo, "proto": proto,
            "channels": channels}


# A verify pass at TP 2 as NCCL logs it (rank 0): the layers' all-reduces, a barrier's 4-byte
# all-reduce, the logits all-gather (one rank's part), and a second all-reduce size.
PASS = {"nranks": 2, "choices": [
    choice("AllReduce", 4, "RING", "LL", 1),
    choice("AllReduce", 57344, "RING", "LL", 4),
    choice("AllReduce", 114688, "RING", "LL", 4),
    choice("AllReduce", 8388608, "RING", "SIMPLE", 16),
    choice("AllGather", 1048576, "RING", "SIMPLE", 8),
]}
CONFIG = {"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": None, "NCCL_MAX_NCHANNELS": 16}


def load(config: dict[str, Any] = CONFIG, effective: dict[str, Any] = PASS, ranks: int = 2
         ) -> tuple[list[PluginRule], str, list[str]]:
    rules, notes = tuner_rules(config, effective, ranks)
    text = tuner_csv(rules, notes, "exp", "trial t1")
    return plugin_load(text), text, notes


def test_every_choice_nccl_logged_comes_back_from_the_plugin() -> None:
    rules, _, _ = load()
    for c in PASS["choices"]:
        coll = c["collective"].lower()
        asked = c["bytes"] * (2 if coll == "allgather" else 1)  # the plugin sees the whole buffer
        assert plugin_choice(rules, coll, asked) == \
            (c["algo"].lower(), c["proto"].lower(), c["channels"]), c
    assert all(r.channels >= 1 for r in rules)  # never -1: that would mean 1 channel


def test_every_size_of_the_issued_collectives_matches_a_rule() -> None:
    rules, _, _ = load()
    for coll in ("allreduce", "allgather"):
        for nbytes in (0, 1, 5, 57343, 57345, 80000, 114689, 10**6, 2**31, 2**40, MAX_BYTES):
            algo, _, channels = plugin_choice(rules, coll, nbytes)
            assert algo is not None and channels >= 1, (coll, nbytes)
    # bins meet between the measured sizes: nearer to 57344 than to 8 MiB keeps 4 channels
    assert plugin_choice(rules, "allreduce", 600000)[2] == 4
    assert plugin_choice(rules, "allreduce", 5000000)[2] == 16


def test_sizes_with_the_same_choice_share_one_bin() -> None:
    rules, _, _ = load()
    allreduce = [(r.min_bytes, r.max_bytes, r.channels) for r in rules
                 if r.collective == "allreduce"]
    assert len(allreduce) == 3  # 4 B | 56 KiB and 112 KiB | 8 MiB
    assert allreduce[0][0] == 0 and allreduce[-1][1] == MAX_BYTES
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(allreduce))
    assert 4 < allreduce[0][1] < 57344 and 114688 < allreduce[1][1] < 8388608


def test_the_file_says_what_the_plugin_does_outside_its_rules() -> None:
    rules, text, _ = load()
    assert plugin_choice(rules, "broadcast", 4096) == (None, None, 1)
    assert plugin_choice(rules, "allreduce", 4096, ranks=8) == (None, None, 1)
    outside = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "ONE channel" in outside and "broadcast, reduce, reducescatter" in outside
    assert "channels -1" in outside and "NCCL_TUNER_CONFIG_FILE" in outside
    assert "# " + ",".join(TUNER_COLUMNS) in text
    # The example plugin of NCCL before 2.29.7 crashes on every file (seen on 2.28.9): the
    # file says which build to use and the one-line fix for an older NCCL.
    assert "2.29.7" in outside and "nccl#1974" in outside
    assert "(float (*)[NCCL_NUM_PROTOCOLS])collCostTable" in outside


def test_settings_left_to_nccl_or_an_unlogged_run_give_no_rules() -> None:
    rules, text, notes = load({"NCCL_ALGO": None, "NCCL_BUFFSIZE": 262144})
    assert rules == [] and "do not load the plugin" in text and "no rules" in notes[0]
    rules, text, notes = load(CONFIG, {"nranks": 2, "choices": []})
    assert rules == [] and any("TUNING" in n for n in notes)
    rules, _, _ = load(CONFIG, {})
    assert rules == []


def test_one_size_run_two_ways_keeps_the_most_channels_and_says_so() -> None:
    twice = {"nranks": 2, "choices": [choice("AllReduce", 1024, "RING", "LL", 2),
                                      choice("AllReduce", 1024, "TREE", "LL", 1)]}
    rules, _, notes = load(CONFIG, twice)
    assert plugin_choice(rules, "allreduce", 1024) == ("ring", "ll", 2)
    assert any("ran 2 ways" in n for n in notes)


def test_nccl_running_another_algorithm_than_asked_is_noted() -> None:
    _, _, notes = load({"NCCL_ALGO": "allreduce:tree"}, PASS)
    assert any("NCCL ran ring" in n for n in notes)
    _, _, notes = load(CONFIG, PASS)
    assert not any("NCCL ran" in n for n in notes)


def test_unknown_names_are_left_out_not_misread() -> None:
    odd = {"nranks": 2, "choices": [choice("SendRecv", 64, "RING", "SIMPLE", 1),
                                    choice("AllReduce", 64, "RING", "LL", 2)]}
    rules, _, notes = load(CONFIG, odd)
    assert [r.collective for r in rules] == ["allreduce"]
    assert any("SendRecv" in n for n in notes)


def test_from_nccl_s_own_log_lines() -> None:
    """The whole way: NCCL's TUNING lines -> effective.json's choices -> the plugin's rules."""
    prefix = "gpu1:4242:4250 [0] NCCL INFO "
    text = "\n".join(prefix + line for line in [
        "comm 0x55d0c0001000 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
        "AllReduce: 57344 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}",
        "AllReduce: 57344 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}",
        "AllGather: 131072 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..1}",
    ])
    effective = nccl_log.parse(text).to_json()
    rules, _, _ = load({"NCCL_PROTO": "LL"}, effective, 2)
    assert plugin_choice(rules, "allreduce", 57344) == ("ring", "ll", 4)
    assert plugin_choice(rules, "allgather", 262144) == ("ring", "simple", 2)
    assert all(r.ranks == 2 and r.nodes == 1 for r in rules)


@pytest.mark.parametrize("width", [1, 120, 400])
def test_long_notes_and_names_stay_under_the_plugins_line_limit(width: int) -> None:
    rules, notes = tuner_rules(CONFIG, PASS, 2)
    text = tuner_csv(rules, [*notes, "word " * 200, "/" + "x" * width], "e" * width)
    assert len(plugin_load(text)) == len(rules)  # asserts every line's length too
