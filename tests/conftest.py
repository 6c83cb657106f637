"""Fast unit tests first, then the contract tests, the integration runs and the benchmark
smoke runs: a broken unit shows in seconds, not after the slow tiers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.requirements import unavailable

_TIERS = ("contract", "gpu", "integration", "bench")


def _tier(item: pytest.Item) -> int:
    marks = {m.name for m in item.iter_markers()}
    return next((i + 1 for i, name in enumerate(_TIERS) if name in marks), 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_tier)  # stable: file order kept within a tier


# make test runs the suite on two pytest-xdist workers: these files, minutes of runs that
# share the confirm stage's run or mostly wait, on one; everything else, in tier order, on the
# other. (pytest 9 broke pytest-xdist's own groups: its --dist loadgroup renames node ids.)
LONG_FILES = frozenset({
    "tests/integration/test_weights_integration.py",
    "tests/integration/test_faults_integration.py",
    "tests/integration/test_confirm_integration.py",
    "tests/integration/test_exports_integration.py",
    "tests/integration/test_report_integration.py",
    "tests/integration/test_study_integration.py",
    "tests/integration/test_multinode_integration.py",  # ~66 s: a simulated 4-node cluster
})


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class TwoWorkers(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "long" if nodeid.split("::", 1)[0] in LONG_FILES else "main"

    return TwoWorkers(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@needs(condition, reason)`` (tests/requirements.py): skip off CI, fail on CI."""
    for mark in item.iter_markers("needs"):
        if not mark.args[0]:
            unavailable(str(mark.kwargs.get("reason", "a need of this test is not met")))
