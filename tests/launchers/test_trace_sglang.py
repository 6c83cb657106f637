"""Profiling an SGLang server through its own endpoints (launchers.sglang.profile), against a
small HTTP server on 127.0.0.1 that answers as SGLang 0.5.23 does and writes one trace per
rank; the traces are SGLang-style (``step[VERIFY bs=N]`` spans) and read back by
launchers.trace."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from launchers import trace
from launchers.sglang import profile
from simulator.http_stub import serve
from tests.launchers.test_trace import gpu_trace

SPANS = (profile.STEP_SPANS,)


class FakeProfiler:
    """What the server saw, and how it behaves: ``auto_stop`` writes the traces at
    /start_profile time (num_steps reached during the round), else at /stop_profile."""

    def __init__(self, ranks: int, auto_stop: bool, refuse: bool = False) -> None:
        self.ranks, self.auto_stop, self.refuse = ranks, auto_stop, refuse
        self.calls: list[tuple[str, Any]] = []
        self.active: dict[str, Any] | None = None

    def export(self) -> None:
        assert self.active is not None
        out = Path(self.active["output_dir"])
        for rank in range(self.ranks):
            blob = json.dumps({"traceEvents": gpu_trace()}).encode()
            (out / f"{self.active['profile_id']}-TP-{rank}.trace.json.gz").write_bytes(
                gzip.compress(blob))
        self.active = None


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, FakeProfiler]]:
    state = FakeProfiler(**request.param)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            state.calls.append((self.path, body))
            if self.path == "/start_profile" and state.refuse:
                code, text = 500, "Profiling is already in progress. Call /stop_profile first."
            elif self.path == "/start_profile":
                state.active = body
                code, text = 200, "Start profiling.\n"
                if state.auto_stop:
                    state.export()
            elif self.path == "/stop_profile" and state.active is not None:
                state.export()
                code, text = 200, "Stop profiling. This will take some time.\n"
            else:
                code, text = 500, "Profiling is not in progress. Call /start_profile first."
            self.send_response(code)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text.encode())

    with serve(Handler) as url:
        yield url, state


@pytest.mark.parametrize("server", [{"ranks": 2, "auto_stop": True},
                                    {"ranks": 2, "auto_stop": False}], indirect=True)
def test_capture_reads_back(server: tuple[str, FakeProfiler], tmp_path: Path) -> None:
    url, state = server
    rounds: list[int] = []
    files = profile.capture(url, tmp_path / "traces", 8, 2, lambda: rounds.append(1),
                            timeout=10, profile_id="pid-1")
    assert rounds == [1]
    assert [f.name for f in files] == ["pid-1-TP-0.trace.json.gz", "pid-1-TP-1.trace.json.gz"]
    start = state.calls[0]
    assert start[0] == "/start_profile"
    assert start[1] == {"output_dir": str((tmp_path / "traces").absolute()), "num_steps": 8,
                        "activities": ["CPU", "GPU"], "with_stack": False,
                        "record_shapes": False, "profile_id": "pid-1"}
    assert [c[0] for c in state.calls] == ["/start_profile", "/stop_profile"]
    result = trace.read(files, SPANS)
    verify = result.main("verify")
    assert verify is not None and verify.ranks == 2 and verify.step_ms == pytest.approx(0.65)


@pytest.mark.parametrize("server", [{"ranks": 1, "auto_stop": False, "refuse": True}],
                         indirect=True)
def test_refused_profile(server: tuple[str, FakeProfiler], tmp_path: Path) -> None:
    url, _ = server
    with pytest.raises(profile.ProfileError, match="already in progress"):
        profile.capture(url, tmp_path, 8, 1, lambda: None, timeout=5)


@pytest.mark.parametrize("server", [{"ranks": 1, "auto_stop": True}], indirect=True)
def test_missing_rank_times_out(server: tuple[str, FakeProfiler], tmp_path: Path) -> None:
    url, _ = server
    with pytest.raises(profile.ProfileError, match="1 of 2 trace files"):
        profile.capture(url, tmp_path, 8, 2, lambda: None, timeout=1.5)


def test_a_real_0516_trace_names_its_verify_step_by_forward_mode() -> None:
    """SGLang 0.5.16 on the H200 wrote ``step[TARGET_VERIFY bs=1]`` (0.5.23: ``VERIFY``), and
    `servetune profile` found no verify step in it. The trace, trimmed to three verify steps
    and one extend (launchers.trace.trim), is read as verify steps."""
    path = Path(__file__).parent / "fixtures" / "sglang_0516_trace_h200.json.gz"
    names = {e["name"] for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
             if e.get("cat") == "user_annotation"}
    assert "step[TARGET_VERIFY bs=1]" in names and "step[VERIFY bs=1]" not in names
    result = trace.read([path], SPANS)
    verify = result.main("verify")
    assert result.device == "gpu" and verify is not None and verify.steps == 3
    assert verify.batch_size == 1 and 0.3 < verify.step_ms < 2.0
    assert verify.split_ms["compute"] > 0 and result.main("target_verify") is None
