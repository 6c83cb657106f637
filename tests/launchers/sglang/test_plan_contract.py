"""Contract: the commands the sglang workload renders for issue 18 (dummy weights, capture
sizes from the concurrency levels, no warm-up) parse with the installed SGLang's own parser,
and mean there what servetune means."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from search_spaces.knobs import CATALOGUE, Group, Knob, KnobKind, Value
from tests.sglang_parser import CONTRACT
from tests.sglang_parser import sglang_parser as build_parser

pytestmark = CONTRACT


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.fixture
def weight_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two load-format knobs, shaped as SGLang's options, where the catalogue lacks them."""
    for name in ("--load-format", "--speculative-draft-load-format"):
        if name not in CATALOGUE:
            monkeypatch.setitem(CATALOGUE, name, Knob(name, KnobKind.FLAG, Group.GRAPH,
                                                      "weights", ("dummy",), lambda v: None))


def _parse(parser: argparse.ArgumentParser, concurrency: list[int],
           config: dict[str, Value], tmp_path: Path, server_args: list[str] | None = None
           ) -> argparse.Namespace:
    args = SGLangArgs(model="/models/x", draft_model="/models/d", speculative_algorithm="EAGLE3",
                      concurrency=concurrency, server_args=server_args or [])
    ctx = TrialContext("exp", "t", tmp_path, gpu_ids=("0", "1"), port=30000)
    plan = SGLangWorkload(args).plan(config, ctx)
    return parser.parse_args(list(plan.argv[len(args.server_cmd):]))


@pytest.mark.usefixtures("weight_knobs")
def test_dummy_weights_and_capture_sizes_parse(parser: argparse.ArgumentParser,
                                              tmp_path: Path) -> None:
    config: dict[str, Value] = {"--load-format": "dummy",
                                "--speculative-draft-load-format": "dummy",
                                "--cuda-graph-max-bs-decode": 8, "--speculative-num-steps": 3}
    parsed = _parse(parser, [16, 1, 4], config, tmp_path, ["--skip-server-warmup"])
    assert parsed.load_format == "dummy" and parsed.speculative_draft_load_format == "dummy"
    assert parsed.cuda_graph_bs_decode == [1, 4, 8]  # SGLang then captures up to max(bs) = 8
    assert parsed.cuda_graph_max_bs_decode == 8 and parsed.skip_server_warmup is True
    assert parsed.speculative_num_steps == 3 and parsed.tp_size == 2


def test_the_capture_list_does_not_swallow_later_words(parser: argparse.ArgumentParser,
                                                       tmp_path: Path) -> None:
    parsed = _parse(parser, [1, 2, 32], {"--enable-torch-compile": True}, tmp_path)
    assert parsed.cuda_graph_bs_decode == [1, 2, 32] and parsed.enable_torch_compile is True
