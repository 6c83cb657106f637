"""Contract: every command the weight policy makes parses with the installed SGLang's own parser,
rendered the way the launcher renders it (``SGLangWorkload.plan``: the knobs, the capture sizes
from the concurrency levels, the user's server arguments), and SGLang reads the load formats
as meant: random weights for the target and the draft where the plan says so, the checkpoint's
elsewhere.

Needs SGLang's parser importable on this interpreter (CPU is enough); skipped where it is not,
except on CI, where that fails (tests/requirements.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from launchers.sglang.launcher import SGLangArgs
from launchers.sglang.preflight import shared
from search_spaces.knobs import DUMMY, WEIGHTS
from tests.sglang_parser import CONTRACT
from tests.sglang_parser import sglang_parser as build_parser
from tuner.search.build import build_search, proposals
from tuner.setup import prepare
from tuner.spec import ExperimentSpec

pytestmark = CONTRACT

# (space, search, metric, speculative, the user's server arguments)
CASES = [
    ("verify-campaign", "staged", "verify_ms", True, []),
    ("verify-campaign", "staged", "cycle_ms", True, ["--skip-server-warmup"]),
    ("verify-campaign", "staged", "verify_ms", True, ["--cuda-graph-max-bs-decode", "8"]),
    ("nccl-pcie", "random", "output_throughput", False, ["--skip-server-warmup"]),
    ("fusion", "grid", "mean_itl_ms", False, []),
]


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    return build_parser()


def _commands(tmp_path: Path, space: str, search: str, metric: str, speculative: bool,
              server_args: list[str]) -> list[tuple[dict[str, Any], list[str]]]:
    """Every config the search would launch first, with its flags (the server command off)."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    args = SGLangArgs(model=str(model), tp=8, concurrency=[1, 4, 16], server_args=server_args,
                      speculative_algorithm="EAGLE3" if speculative else None,
                      draft_model=str(model) if speculative else None)
    spec = ExperimentSpec(name="c", out_dir=tmp_path / "out", space=space, search=search,
                          samples=24, metric=metric, mode="min", workload=args)
    setup = prepare(spec)
    stack = build_search(setup.space, setup.objective, search=search, stage_search="grid",
                         samples=spec.samples, seed=0, failure_aware=True, max_concurrent=1,
                         out_dir=None, weights=setup.weights)
    out = []
    for trial_id, config in proposals(stack, stack.num_samples):
        plan = setup.workload.plan(config, setup.context(trial_id, port=30000))
        out.append((config, list(plan.argv[len(args.server_cmd):])))
    return out


@pytest.mark.parametrize(("space", "search", "metric", "speculative", "server_args"), CASES)
def test_weight_policy_commands_parse_as_meant(
        tmp_path: Path, sglang_parser: argparse.ArgumentParser, space: str, search: str,
        metric: str, speculative: bool, server_args: list[str]) -> None:
    commands = _commands(tmp_path, space, search, metric, speculative, server_args)
    assert commands
    # one reader for the module's cases (each fresh one is ~8 s of SGLang's import)
    results = shared().check_many([argv for _, argv in commands])
    failures = [f"{' '.join(argv)}\n    -> {r.error or '; '.join(r.warnings)}"
                for (_, argv), r in zip(commands, results, strict=True)
                if not r.ok or r.warnings]
    assert not failures, "\n".join(failures[:5])
    dummy = 0
    for config, argv in commands:
        parsed = sglang_parser.parse_args(argv)
        expected = "dummy" if config.get(WEIGHTS) == DUMMY else "auto"
        assert parsed.load_format == expected, argv
        assert parsed.speculative_draft_load_format == (
            "dummy" if expected == "dummy" else None), argv
        assert parsed.cuda_graph_bs_decode, argv  # the levels measured (or up to the largest)
        dummy += expected == "dummy"
    assert dummy, "the policy put no stage on random weights"
    if search == "staged":  # the speculative stage loads the checkpoint
        assert dummy < len(commands)
