"""The files shared by the launcher and rank 0: requests in, events out."""

from __future__ import annotations

import json
import os
from pathlib import Path

from launchers.proxy.protocol import (
    CONTROL_FILE,
    STEP_SPANS,
    Events,
    Request,
    next_request,
    write_request,
)


def test_requests() -> None:
    assert Request.parse("7\n") == Request(7, "round", 7)  # by hand: a round
    assert Request.parse("3 profile 10") == Request(3, "profile", 10)
    assert Request.parse(Request(4, "round", 2).line()) == Request(4, "round", 2)
    for bad in ("", "x", "1 dance 2", "1 round"):
        assert Request.parse(bad) is None


def test_write_then_next_request(tmp_path: Path) -> None:
    write_request(tmp_path, Request(0, "round", 0))
    control = tmp_path / CONTROL_FILE
    assert next_request(control, -1, 1.0, os.getppid()) == Request(0, "round", 0)
    assert next_request(control, 0, 0.05, os.getppid()) is None  # nothing newer: idle
    write_request(tmp_path, Request(1, "profile", 5))
    assert next_request(control, 0, 1.0, os.getppid()) == Request(1, "profile", 5)
    assert next_request(control, -1, 1.0, -1) is None  # the parent is not ours: orphaned


def test_events_go_to_the_file_from_rank_0_only(tmp_path: Path) -> None:
    path = tmp_path / "rounds.jsonl"
    Events(path, active=True).emit("round", round=0, verify_ms=1.5)
    Events(path, active=False).emit("round", round=1)
    lines = path.read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"event": "round", "round": 0, "verify_ms": 1.5}]


def test_step_span_names() -> None:
    assert STEP_SPANS.kind("servetune.verify") == ("verify", None)
    assert STEP_SPANS.kind("servetune.compute_only") == ("compute_only", None)
    assert STEP_SPANS.kind("servetune.comm_alone") == ("comm_alone", None)
    assert STEP_SPANS.kind("servetune.comm.all_reduce") is None
    assert STEP_SPANS.kind("step[VERIFY bs=4]") is None  # SGLang's: not the proxy's
