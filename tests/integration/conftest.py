"""Shared experiments of the tuner's integration tests (each one run once per session)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.integration.servetune_runs import Experiment, Result, ray_tmpdir


@dataclass
class Run:
    exp: Experiment
    result: Result


# Three repeats (t = 4.30; two would give t = 12.7) and rounds long enough (6 requests: 3 let
# the other test worker's load halve one launch's figure) that a busy 2-core box's noise stays
# well inside the stand-in's 1.5x gap between its optimum and the default.
# Random search (seed 0) lands on that gap within 4 samples; the default search would spend
# them on the largest levers first (NCCL_P2P_LEVEL), which the stand-in barely models.
CONFIRMED = ("--speculative-algorithm", "EAGLE3", "--space", "nccl-pcie", "--samples", "4",
             "--search", "random",
             "--rounds", "2", "--confirm", "3", "--confirm-top", "2", "--output-len", "96",
             "--requests-per-round", "6", "--no-dashboard")


@pytest.fixture(scope="session")
def confirmed_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A real short run against the stand-in with speculative decoding on: a 4-trial search,
    then the top 2 and the baseline three times each, then the speculative-off reference."""
    root = tmp_path_factory.mktemp("confirmed")
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp)
        result = exp.run(["run", *exp.args(*CONFIRMED)], timeout=280)
        try:
            yield Run(exp, result)
        finally:
            left = exp.cleanup()
            assert not left, f"processes survived the run: {left}"
