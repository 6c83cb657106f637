"""SGLang's log-line formats (``launchers/sglang/release/logs``), on SGLang's own lines."""

from __future__ import annotations

from launchers.sglang import resolution
from launchers.sglang.release import logs


def test_a_line_with_rank_tags_and_milliseconds() -> None:
    match = logs.LINE.match("[2026-01-02 03:04:05.678 DP0 TP1 EP0] Load weight end. x")
    assert match is not None
    assert match.groups() == ("2026-01-02 03:04:05", "678", " DP0 TP1 EP0", "Load weight end. x")
    assert logs.LINE_START.match("[2026-12-01 16:28:21.155] Received sigquit from a child")
    assert not logs.LINE_START.match('  File ".../scheduler.py", line 4623, in run')


def test_the_watchdogs_exit_line() -> None:
    match = logs.SUBPROCESS_EXIT.search("Subprocess scheduler_0 (pid=796) crashed with exit "
                                        "code -9")
    assert match is not None and match.group(1) == "-9"


def test_the_resident_readers_argument_code_is_the_same() -> None:
    """resolution.py runs in SGLang's interpreter and spells the paths itself."""
    assert resolution.ARGUMENT_CODE == logs.ARGUMENT_CODE_PATHS
    for path in logs.ARGUMENT_CODE_PATHS:
        assert logs.ARGUMENT_CODE.search(f"/x/site-packages{path}hook.py")
