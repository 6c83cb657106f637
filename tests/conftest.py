"""Fast unit tests first, then the contract tests, the integration runs and the benchmark
smoke runs: a broken unit shows in seconds, not after the slow tiers."""

from __future__ import annotations

import pytest

from tests.requirements import unavailable

_TIERS = ("contract", "gpu", "integration", "bench")


def _tier(item: pytest.Item) -> int:
    marks = {m.name for m in item.iter_markers()}
    return next((i + 1 for i, name in enumerate(_TIERS) if name in marks), 0)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_tier)  # stable: file order kept within a tier
    if getattr(config.option, "numprocesses", None):
        # In parallel (make test: -n 2 --dist loadgroup): the files marked ``long`` on one
        # worker, everything else on the other in tier order (module fixtures run once).
        for item in items:
            group = "long" if item.get_closest_marker("long") else "main"
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@needs(condition, reason)`` (tests/requirements.py): skip off CI, fail on CI."""
    for mark in item.iter_markers("needs"):
        if not mark.args[0]:
            unavailable(str(mark.kwargs.get("reason", "a need of this test is not met")))
