"""What a test needs from the machine (SGLang importable, Chromium installed). Off CI a
missing need skips the test with its reason; on CI (``SERVETUNE_CI=1``, set by .ci/run) it
fails it, so that a broken SGLang import or a failed browser install never reads as
"skipped". GPU tests are not listed here: CI has no GPU."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

CI_ENV = "SERVETUNE_CI"


def on_ci() -> bool:
    return os.environ.get(CI_ENV, "") not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skip (off CI) or fail (on CI) the running test for a need the machine does not meet."""
    if on_ci():
        pytest.fail(f"{reason} (required on CI: {CI_ENV}=1)", pytrace=False)
    pytest.skip(reason)


def needs(condition: bool, reason: str) -> pytest.MarkDecorator:
    """A mark: the test needs ``condition`` (checked before it runs, see tests/conftest.py)."""
    return pytest.mark.needs(condition, reason=reason)
