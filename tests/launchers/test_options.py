"""Workloads declare their command-line options beside their args (``cli_options``); the
registry merges them and tuner/cli adds them: every option names a field of its workload's
args, a shared option is declared alike, and the CLI's workload group holds exactly the
workloads' options (and the engine's own ``--workload`` and ``--stop-grace``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from launchers.options import OFF, PATH_OR_NAME, PORT, CliOption, merged
from launchers.proxy.launcher import ProxyArgs
from launchers.registry import ARGS_MODELS, cli_options, screen_shape_option
from launchers.sglang.launcher import SGLangArgs
from tuner import cli


def test_each_option_sets_a_field_of_its_workload() -> None:
    for model in ARGS_MODELS:
        assert model.cli_options, model
        for option in model.cli_options:
            assert option.field in model.model_fields, (model.__name__, option.flag)
        assert set(model.cli_selectors) <= set(model.cli_fields())


def test_fields_by_dest() -> None:
    assert SGLangArgs.cli_fields()["decide_at"] == "objective_concurrency"
    assert SGLangArgs.cli_fields()["no_fast_start"] == "fast_start"
    assert ProxyArgs.cli_fields()["iters"] == "iters_per_round"
    assert ProxyArgs.cli_fields()["model_config"] == "model"


def test_shared_options_once_and_alike() -> None:
    flags = [o.flag for o in cli_options()]
    assert len(flags) == len(set(flags)) and flags.count("--port") == 1
    assert flags[0] == "--model" and flags[-1] == "--proxy-comm"
    other = CliOption("--port", "port", {"type": str})
    with pytest.raises(ValueError, match="--port: declared differently"):
        merged([[PORT], [other]])


def _workload_group(parser: argparse.ArgumentParser) -> list[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    group = next(g for g in run._action_groups if g.title == "workload")
    return [a.option_strings[0] for a in group._group_actions]


def test_the_cli_assembles_them() -> None:
    declared = [o.flag for o in cli_options()]
    shown = _workload_group(cli.build_parser())
    assert [f for f in shown if f not in ("--workload", "--stop-grace")] == declared
    assert shown[0] == "--workload"
    assert shown.index("--stop-grace") == shown.index("--ready-timeout") + 1


def test_the_cli_reads_every_declared_kind(tmp_path: Path) -> None:
    from tuner.cli.args import _READ, read_option

    for option in cli_options():
        assert option.value in _READ, option.flag
        assert (option.value == PATH_OR_NAME) == (option.names is not None), option.flag
    shape = screen_shape_option()
    assert shape.flag == "--model-config"
    assert read_option(shape, "tiny", tmp_path) == "tiny"  # a preset, kept
    assert read_option(shape, "cfg.json", tmp_path) == str(tmp_path / "cfg.json")
    dataset = next(o for o in cli_options() if o.flag == "--dataset")
    assert read_option(dataset, "random", tmp_path) == "random"
    concurrency = next(o for o in cli_options() if o.flag == "--concurrency")
    assert read_option(concurrency, "1,4", tmp_path) == [1, 4]
    off = next(o for o in cli_options() if o.flag == "--no-preflight")
    assert (off.value, read_option(off, True, tmp_path)) == (OFF, False)
