"""The broken-environment verdict: a failed baseline, or an opening streak of identical
failures with no setting in common; and what the failure memory may learn meanwhile."""

from __future__ import annotations

from typing import Any

from tuner.decide.environment import STREAK, EnvironmentCheck, signature

BASE: dict[str, Any] = {"NCCL_ALGO": None, "NCCL_PROTO": None, "NCCL_NVLS_ENABLE": 0}


def fail(message: str = "python: can't open file '/tmp/ray/work/3f2a9c1b/serve.py'",
         kind: str = "crashed") -> dict[str, Any]:
    return {"kind": kind, "message": message, "log_tail": f"line 1\n{message}", "hint": ""}


def cfg(**values: Any) -> dict[str, Any]:
    return {**BASE, **values}


def test_a_failed_baseline_is_a_broken_environment_at_once() -> None:
    check = EnvironmentCheck(BASE)
    assert check.observe("t0", BASE, fail()) == []  # the memory learns nothing from it
    assert check.verdict is not None
    assert (check.verdict.reason, check.verdict.kind, check.verdict.trials) == \
        ("baseline", "crashed", ["t0"])
    assert "serve.py" in check.verdict.log_tail
    # Trials still ending afterwards (other nodes) teach the memory nothing either.
    assert check.observe("t1", cfg(NCCL_ALGO="ring"), fail()) == []


def test_a_baseline_failing_late_still_counts() -> None:
    check = EnvironmentCheck(BASE)
    released = check.observe("t1", cfg(NCCL_ALGO="ring"), None)
    assert [o.trial_id for o in released] == ["t1"]
    check.observe("t0", BASE, fail(kind="cuda_oom"))
    assert check.verdict is not None and check.verdict.reason == "baseline"


def test_the_same_failure_whatever_the_settings_is_the_environment() -> None:
    check = EnvironmentCheck(BASE)
    configs = [cfg(NCCL_ALGO="ring"), cfg(NCCL_PROTO="LL"), cfg(NCCL_ALGO="tree", NCCL_PROTO="Simple")]
    for i, config in enumerate(configs):
        # the message differs only by numbers (a port, a trial id): the same failure
        assert check.observe(f"t{i}", config, fail(f"bind failed on port 3{i}004 (trial a{i}c)")) \
            == []
        assert (check.verdict is None) == (i < STREAK - 1)
    assert check.verdict is not None and check.verdict.reason == "streak"
    assert check.verdict.trials == ["t0", "t1", "t2"]


def test_failures_that_share_a_setting_are_the_settings_business() -> None:
    check = EnvironmentCheck(BASE)
    assert check.observe("t0", cfg(NCCL_ALGO="Tree", NCCL_PROTO="LL"), fail("capture")) == []
    released = check.observe("t1", cfg(NCCL_ALGO="Tree", NCCL_PROTO="Simple"), fail("capture"))
    assert [o.trial_id for o in released] == ["t0", "t1"]  # the memory gets both, in order
    assert [o.kind for o in released] == ["crashed", "crashed"]
    assert check.verdict is None and check.decided
    # the opening is over: later failures go straight to the memory
    assert [o.trial_id for o in check.observe("t2", cfg(NCCL_PROTO="LL"), fail("capture"))] \
        == ["t2"]
    assert check.verdict is None


def test_a_success_or_another_failure_ends_the_opening() -> None:
    check = EnvironmentCheck(BASE)
    check.observe("t0", cfg(NCCL_ALGO="ring"), fail("one thing"))
    released = check.observe("t1", cfg(NCCL_PROTO="LL"), fail("another thing"))
    assert [o.trial_id for o in released] == ["t0", "t1"] and check.verdict is None
    check = EnvironmentCheck(BASE)
    check.observe("t0", cfg(NCCL_ALGO="ring"), fail())
    released = check.observe("t1", cfg(NCCL_PROTO="LL"), None)
    assert [(o.trial_id, o.kind) for o in released] == [("t0", "crashed"), ("t1", None)]


def test_validation_failures_are_passed_over() -> None:
    check = EnvironmentCheck(BASE)
    check.observe("t0", cfg(NCCL_ALGO="ring"), fail())
    invalid = check.observe("t1", cfg(NCCL_PROTO="LL"), fail("MIN 8 > MAX 4", "invalid_config"))
    assert [o.trial_id for o in invalid] == ["t1"] and not check.decided
    check.observe("t2", cfg(NCCL_PROTO="Simple"), fail())
    check.observe("t3", cfg(NCCL_NVLS_ENABLE=1), fail())
    assert check.verdict is not None and check.verdict.trials == ["t0", "t2", "t3"]


def test_a_resume_opens_a_new_streak_and_releases_the_held_failures() -> None:
    check = EnvironmentCheck(BASE)
    check.observe("t0", cfg(NCCL_ALGO="ring"), fail())
    check.observe("t1", cfg(NCCL_PROTO="LL"), None)
    assert check.decided
    assert check.observe("t2", cfg(NCCL_PROTO="Simple"), fail()) != []
    released = check.restart()
    assert released == [] and not check.decided
    check.observe("t3", cfg(NCCL_ALGO="tree"), fail())
    assert [o.trial_id for o in check.restart()] == ["t3"]


def test_signature_blanks_numbers_and_ids_only() -> None:
    assert signature(fail("port 30001 busy")) == signature(fail("port 41234 busy"))
    assert signature(fail("port busy")) != signature(fail("model missing"))
    assert signature(fail("x", "crashed")) != signature(fail("x", "cuda_oom"))
