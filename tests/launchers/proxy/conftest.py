"""Fixtures of the proxy tests: trial contexts whose processes must all be gone afterwards."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.process import marked_processes, reap_all

MakeCtx = Callable[..., TrialContext]


@pytest.fixture
def make_ctx(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MakeCtx]:
    """Trial contexts of one experiment (one folder, so trials share the reference); after
    the test no process carrying the experiment's marker may survive."""
    experiment = f"proxytest-{os.getpid()}-{request.node.name}"[:80]

    def make(trial_id: str = "t0", gpu_ids: tuple[str, ...] = ()) -> TrialContext:
        return TrialContext(experiment, trial_id, tmp_path / "exp" / trial_id, gpu_ids=gpu_ids)

    yield make
    left = marked_processes(f"{experiment}/")
    reap_all(f"{experiment}/")
    assert not left, f"processes survived the test: {left}"
