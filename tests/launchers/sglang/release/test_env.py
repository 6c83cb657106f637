"""SGLang's env registry parsing, where SGLang is not run (``launchers/sglang/release/env``)."""

from __future__ import annotations

from launchers.sglang.release.env import parse_bool, parse_int


def test_parsing() -> None:
    assert [parse_bool("X", v) for v in ("1", "TRUE", "y", True, 1)] == [True] * 5
    assert [parse_bool("X", v) for v in ("0", "no", "N", False, 0)] == [False] * 5
    assert parse_int("X", " 12 ") == 12
