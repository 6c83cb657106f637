"""Fast unit tests first, then the contract tests, the integration runs and the benchmark
smoke runs: a broken unit shows in seconds, not after the slow tiers."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from tests.requirements import unavailable

_TIERS = ("contract", "gpu", "integration", "bench")

# make test runs the suite on pytest-xdist workers. These files share one session's runs (the
# confirm stage's run; the weights campaigns, started in the background by the group's first
# test and waited for by its last) and so run on one worker, handed out first: it starts the
# minutes of shared runs while the other begins with the fast unit tests. Every other file is
# a unit of its own, given to whichever worker is free (xdist's load-by-scope), so that no
# worker ends alone minutes after the other. (pytest 9 broke pytest-xdist's own groups: its
# --dist loadgroup renames node ids.)
SHARED_GROUP = frozenset({
    "tests/integration/test_confirm_integration.py",
    "tests/integration/test_exports_integration.py",
    "tests/integration/test_report_integration.py",
    "tests/integration/test_weights_integration.py",
})


# Files that keep a worker busy for minutes (make test on the 2-core box: faults 442 s,
# multinode 171 s, run 128 s, Ray choice 103 s, scripts 103 s, stop/resume 99 s), given out
# first in their tier: one of them handed out last ends alone long after the other worker.
LONG_FILES = (
    "tests/integration/test_faults_integration.py",
    "tests/integration/test_multinode_integration.py",
    "tests/integration/test_run_integration.py",
    "tests/integration/test_ray_choice_integration.py",
    "tests/integration/test_stop_resume_integration.py",
    "tests/benchmarks/test_scripts.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs as in a terminal's foreground, however it was started: a shell starts a
    background job with SIGINT ignored, every process inherits that, and the drivers the tests
    stop with Ctrl-C would never see it (six tests failed so, while passing in a terminal)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _length_rank(nodeid: str) -> int:
    path = nodeid.split("::", 1)[0]
    return LONG_FILES.index(path) if path in LONG_FILES else len(LONG_FILES)


def _tier(item: pytest.Item) -> int:
    marks = {m.name for m in item.iter_markers()}
    return next((i + 1 for i, name in enumerate(_TIERS) if name in marks), 0)


def in_shared_group(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in SHARED_GROUP


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable: file order kept within a tier, its long files first; on xdist's workers the
    # shared group first
    workers = hasattr(config, "workerinput")
    items.sort(key=lambda item: (not (workers and in_shared_group(item.nodeid)), _tier(item),
                                 _length_rank(item.nodeid)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class SharedGroupFirst(LoadScopeScheduling):  # type: ignore[misc]
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False  # the collection's order: group, tiers

        def _split_scope(self, nodeid: str) -> str:
            return "shared group" if in_shared_group(nodeid) else nodeid.split("::", 1)[0]

    return SharedGroupFirst(config, log)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@needs(condition, reason)`` (tests/requirements.py): skip off CI, fail on CI."""
    for mark in item.iter_markers("needs"):
        if not mark.args[0]:
            unavailable(str(mark.kwargs.get("reason", "a need of this test is not met")))
