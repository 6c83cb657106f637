"""SGLang 0.5.23's custom allreduce v2 size thresholds (``launchers/sglang/release/v2_tables``)."""

from __future__ import annotations

from launchers.sglang.release import v2_tables

KB, MB = 1024, 1024 * 1024


def test_v2_forced_sizes() -> None:
    """SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_{PUSH,PULL}_SIZE_KB move the thresholds: a forced
    push size is 1shot_push's ceiling; a forced pull size of 0 turns the pull half off."""
    table = v2_tables.SM90[2]

    def algo(nbytes: int, push: int | None = None, pull: int | None = None) -> str | None:
        return v2_tables.v2_algorithm(table, 2, nbytes, graph=True, max_size_kb=16 * 1024,
                                      force_pull_kb=pull, force_push_kb=push, multicast=False)

    assert algo(64 * KB, push=64) == "1shot_push"
    assert algo(64 * KB + 16, push=64) == "1shot_pull"
    assert algo(64 * KB + 16, push=64, pull=0) is None
    assert algo(16 * MB) == "1shot_push" and algo(16 * MB + 16) is None  # the 16 MB cap
    # a forced pull size lifts the pull half past the cap; push stays at 16 MB
    assert algo(16 * MB + 16, pull=64 * 1024) == "1shot_pull"
    assert algo(64 * MB, pull=64 * 1024) == "1shot_pull"
    assert algo(64 * MB + 16, pull=64 * 1024) is None
