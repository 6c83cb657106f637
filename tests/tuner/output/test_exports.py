"""Exports: nccl-tuner.csv read back with the rules of NCCL's example tuner plugin
(NVIDIA/nccl plugins/tuner/example: README and plugin source), launch.sh run as is, the
dotenv file read back by a shell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launchers.base import LaunchPlan
from tuner.output.exports import dotenv_value, write_env, write_launch
from tuner.output.tuner_csv import PLUGIN_LINE_MAX, TUNER_COLUMNS, tuner_csv, tuner_rule

# What the plugin accepts, from its README and source: '#' lines and empty lines are
# skipped; a rule has 8, 9 or 10 comma-separated fields; the names below are matched
# exactly (an unknown name silently becomes the default, so it must never be written).
PLUGIN_COLLECTIVES = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"}
PLUGIN_ALGOS = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}
PLUGIN_PROTOS = {"ll", "ll128", "simple"}


def plugin_rules(text: str) -> list[dict[str, Any]]:
    rules = []
    for line in text.split("\n"):
        assert len(line) < PLUGIN_LINE_MAX, f"the plugin reads 255 bytes a line: {line!r}"
        assert "\r" not in line
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        assert 8 <= len(fields) <= 10, line
        rule = dict(zip(TUNER_COLUMNS, fields, strict=False))
        assert rule["collective_type"] in PLUGIN_COLLECTIVES, line
        assert rule["algorithm"] in PLUGIN_ALGOS, line
        assert rule["protocol"] in PLUGIN_PROTOS, line
        for name in ("min_bytes", "max_bytes", "channels", "nNodes", "nRanks", "numPipeOps",
                     "regBuff"):
            if name in rule:
                rule[name] = int(rule[name])
        assert 0 <= rule["min_bytes"] <= rule["max_bytes"] <= 2**32 - 1
        rules.append(rule)
    return rules


LOG_RING_LL = {"choices": [{"collective": "AllReduce", "bytes": 114688, "algo": "RING",
                            "proto": "LL", "channels": 4},
                           {"collective": "AllGather", "bytes": 4096, "algo": "RING",
                            "proto": "SIMPLE", "channels": 2}]}


def test_header_names_the_plugin_columns_in_its_order() -> None:
    assert TUNER_COLUMNS == ("collective_type", "min_bytes", "max_bytes", "algorithm",
                             "protocol", "channels", "nNodes", "nRanks", "numPipeOps", "regBuff")
    text = tuner_csv(None, [], "exp")
    assert "# " + ",".join(TUNER_COLUMNS) + "\n" in text
    assert plugin_rules(text) == []


def test_per_collective_algorithm_and_protocol_become_one_allreduce_rule() -> None:
    rule, notes = tuner_rule({"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL"}, None, 8)
    assert rule is not None and not notes
    [parsed] = plugin_rules(tuner_csv(rule, notes, "exp"))
    assert parsed == {"collective_type": "allreduce", "min_bytes": 0, "max_bytes": 4294967295,
                      "algorithm": "tree", "protocol": "ll", "channels": -1, "nNodes": 1,
                      "nRanks": 8, "numPipeOps": -1, "regBuff": -1}


@pytest.mark.parametrize(("algo", "expected"), [
    ("Ring", "ring"), ("allreduce:nvlstree", "nvls_tree"), ("allgather:ring;allreduce:TREE", "tree"),
    ("CollnetDirect", "collnet_direct"), ("allreduce:pat", "pat")])
def test_algorithm_spellings_map_to_the_plugins_names(algo: str, expected: str) -> None:
    rule, _ = tuner_rule({"NCCL_ALGO": algo, "NCCL_PROTO": "Simple"}, None, 8)
    assert rule is not None and (rule.algorithm, rule.protocol) == (expected, "simple")


def test_what_the_config_leaves_to_nccl_comes_from_ncclS_own_log() -> None:
    rule, _ = tuner_rule({"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": None}, LOG_RING_LL, 8)
    assert rule is not None and (rule.algorithm, rule.protocol) == ("ring", "ll")
    assert any("as NCCL chose it" in s for s in rule.sources)
    missing, notes = tuner_rule({"NCCL_ALGO": "allreduce:ring"}, None, 8)
    assert missing is None and any("does not name one allreduce protocol" in n for n in notes)


def test_channels_come_from_the_channel_knobs() -> None:
    logged, _ = tuner_rule({"NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 16}, LOG_RING_LL, 8)
    assert logged is not None and logged.channels == 4  # what NCCL used under the cap
    exact, _ = tuner_rule({"NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": 2,
                           "NCCL_MAX_NCHANNELS": 2}, {"choices": []}, 8)
    assert exact is None  # no algorithm known: no rule at all
    exact, _ = tuner_rule({"NCCL_ALGO": "ring", "NCCL_PROTO": "LL", "NCCL_MIN_NCHANNELS": 2,
                           "NCCL_MAX_NCHANNELS": 2}, None, 8)
    assert exact is not None and exact.channels == 2
    low, notes = tuner_rule({"NCCL_ALGO": "ring", "NCCL_PROTO": "LL",
                             "NCCL_MIN_NCHANNELS": 2}, None, 8)
    assert low is not None and low.channels == -1 and any("lower bound" in n for n in notes)


def test_nothing_expressible_gives_a_file_with_no_rule() -> None:
    rule, notes = tuner_rule({"NCCL_ALGO": None, "NCCL_BUFFSIZE": 262144}, LOG_RING_LL, 8)
    assert rule is None and "no rule" in notes[0]
    excluded, notes = tuner_rule({"NCCL_PROTO": "^LL128", "NCCL_ALGO": "ring"}, LOG_RING_LL, 8)
    assert excluded is not None and excluded.protocol == "ll"  # the exclusion left to the log
    assert any("^LL128" in n for n in notes)
    text = tuner_csv(None, notes, "exp")
    assert plugin_rules(text) == [] and "do not load the plugin" in text


def test_long_notes_are_wrapped_as_comments_below_the_plugins_line_limit() -> None:
    rule, _ = tuner_rule({"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL"}, None, -1)
    text = tuner_csv(rule, ["word " * 200], "x" * 120)
    assert len(plugin_rules(text)) == 1  # asserts every line's length too


# ---------------------------------------------------------------- launch.sh and env

TRICKY = {"NCCL_ALGO": "allreduce:tree;allgather:ring", "NCCL_PROTO": "^LL128",
          "WEIRD": 'a "quoted" $HOME \\ value', "SPACED": "two words"}


def test_launch_sh_runs_as_is(tmp_path: Path) -> None:
    show = "import os, sys; print(repr({k: os.environ.get(k) for k in sys.argv[1:]}))"
    plan = LaunchPlan("sglang", (sys.executable, "-c", show, *TRICKY, "GONE"), TRICKY,
                      unset_env=("GONE",))
    script = write_launch(tmp_path, plan)
    assert os.access(script, os.X_OK)
    env = {**os.environ, "GONE": "set before"}
    out = subprocess.run([str(script)], capture_output=True, text=True, env=env, check=True)
    assert eval(out.stdout) == {**TRICKY, "GONE": None}


def test_env_file_reads_back_in_a_shell(tmp_path: Path) -> None:
    plan = LaunchPlan("sglang", ("true",), TRICKY)
    path = write_env(tmp_path, plan)
    assert dotenv_value("allreduce:tree") == "allreduce:tree"
    show = f"import os; print(repr({{k: os.environ[k] for k in {sorted(TRICKY)!r}}}))"
    out = subprocess.run(["bash", "-c", f'set -a; . "{path}"; exec "{sys.executable}" -c "$0"',
                          show], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"]})
    assert eval(out.stdout) == TRICKY


def test_a_record_left_running_by_a_killed_worker_takes_the_journals_end(tmp_path: Path) -> None:
    import pandas as pd

    from tuner.output.results import reconcile_records

    (tmp_path / "t1").mkdir()
    (tmp_path / "t1" / "trial.json").write_text(json.dumps({"status": "running", "warnings": []}))
    (tmp_path / "t2").mkdir()
    (tmp_path / "t2" / "trial.json").write_text(json.dumps({"status": "ok", "warnings": []}))
    reconcile_records(tmp_path, pd.DataFrame({"trial_id": ["t1", "t2"],
                                              "status": ["stopped", "ok"]}))
    first = json.loads((tmp_path / "t1" / "trial.json").read_text())
    assert first["status"] == "stopped" and "journal" in first["warnings"][0]
    assert json.loads((tmp_path / "t2" / "trial.json").read_text())["warnings"] == []
