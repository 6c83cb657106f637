"""The load generator against a tiny in-process server speaking SGLang's streaming format."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

import pytest

from launchers.process import free_port
from launchers.sglang.bench import (
    TOKEN_ID_RANGE,
    Bench,
    BenchError,
    BenchSettings,
    _Outcome,
    _read_stream,
    summarize,
)
from tests.fakes.http_stub import serve


@dataclass
class Behaviour:
    per_chunk: int = 3  # tokens a verify cycle adds
    gap_s: float = 0.004
    spec: bool = True
    status: int = 200
    stall_s: float = 0.0  # sleep before the first byte


def sse(chunk: dict[str, object]) -> bytes:
    return f"data: {json.dumps(chunk)}\n\n".encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    behaviour = Behaviour()
    bodies: list[dict[str, object]] = []  # noqa: RUF012 - shared with the test on purpose

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        b = self.behaviour
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        if b.stall_s:
            time.sleep(b.stall_s)
        if b.status != 200:
            data = b'{"error": {"message": "boom"}}'
            self.send_response(b.status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        n = body["sampling_params"]["max_new_tokens"]
        tokens, cycles = 1, 0
        ids = list(range(1000, 1000 + n))
        while True:
            done = tokens >= n
            meta: dict[str, object] = {"id": "r", "finish_reason": None, "prompt_tokens": 4,
                                       "completion_tokens": tokens, "cached_tokens": 0}
            if done:
                meta["finish_reason"] = {"type": "length", "length": n}
                meta["e2e_latency"] = 0.1
                if b.spec:
                    meta["spec_verify_ct"] = cycles
                    meta["spec_accept_length"] = tokens / max(1, cycles)
            # cumulative: text and output_ids hold everything so far
            self._chunk(sse({"text": "x" * tokens, "output_ids": ids[:tokens], "meta_info": meta}))
            if done:
                break
            time.sleep(b.gap_s)
            tokens = min(n, tokens + b.per_chunk)
            cycles += 1
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def stub() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("Handler", (_Handler,), {"behaviour": Behaviour(), "bodies": []})
    with serve(handler) as url:
        yield url, handler


def test_round_counts_cumulative_tokens(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    bench = Bench(url, BenchSettings(input_len=16, output_len=31, requests_per_round=4, seed=3))
    result = bench.round(concurrency=2, round_index=0)
    assert result["completed"] == 4 and result["failed"] == 0
    # 31 tokens per request: 1 from prefill + 10 cycles of 3; never the sum of chunk lengths
    assert result["accept_length"] == pytest.approx(31 / 10)
    assert result["output_tok_s"] == pytest.approx(4 * 31 / result["round_s"])  # type: ignore[operator]
    for key in ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms",
                "itl_p99_ms"):
        assert result[key] is not None and result[key] > 0  # type: ignore[operator]
    # ITL per token: a 4 ms cycle carrying 3 tokens is ~1.3 ms per token
    assert result["itl_p50_ms"] < 4.0  # type: ignore[operator]
    body = handler.bodies[0]
    assert body["stream"] is True
    assert body["sampling_params"] == {"max_new_tokens": 31, "temperature": 0, "ignore_eos": True}
    assert len(body["input_ids"]) == 16  # type: ignore[arg-type]


def test_no_spec_fields_means_no_accept_length(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    handler.behaviour.spec = False
    result = Bench(url, BenchSettings(input_len=4, output_len=5, requests_per_round=2)).round(1, 0)
    assert result["accept_length"] is None
    assert result["completed"] == 2


def test_http_errors_count_as_failed(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    handler.behaviour.status = 500
    result = Bench(url, BenchSettings(input_len=4, output_len=5, requests_per_round=3)).round(3, 0)
    assert result["completed"] == 0 and result["failed"] == 3
    assert result["output_tok_s"] is None and result["ttft_p50_ms"] is None


def test_unreachable_server_raises_not_timed_out() -> None:
    bench = Bench(f"http://127.0.0.1:{free_port()}", BenchSettings(input_len=4, output_len=4))
    with pytest.raises(BenchError) as info:
        bench.round(2, 0)
    assert info.value.timed_out is False
    with pytest.raises(BenchError):
        bench.warmup(1)


def test_silent_server_raises_timed_out(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    handler.behaviour.stall_s = 0.5
    bench = Bench(url, BenchSettings(input_len=4, output_len=4, requests_per_round=1,
                                     request_timeout=0.15))
    began = time.monotonic()
    with pytest.raises(BenchError) as info:
        bench.round(1, 0)
    assert info.value.timed_out is True
    assert time.monotonic() - began < 1.0


def test_stall_mid_stream_is_a_timeout(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    handler.behaviour.gap_s = 0.5
    bench = Bench(url, BenchSettings(input_len=4, output_len=10, requests_per_round=1,
                                     request_timeout=0.15))
    with pytest.raises(BenchError) as info:
        bench.round(1, 0)
    assert info.value.timed_out is True


def test_prompts_are_seeded_and_distinct() -> None:
    settings = BenchSettings(input_len=64, output_len=1, seed=7)
    a, b = Bench("http://x", settings), Bench("http://x", settings)
    assert a.prompt("round0", 0) == b.prompt("round0", 0)
    assert a.prompt("round0", 0) != a.prompt("round0", 1)
    assert a.prompt("round0", 0) != Bench("http://x", BenchSettings(64, 1, seed=8)).prompt(
        "round0", 0)
    low, high = TOKEN_ID_RANGE
    assert all(low <= t < high for t in a.prompt("round1", 3))
    assert len(a.prompt("warmup", 0)) == 64


def test_read_stream_uses_completion_tokens() -> None:
    def line(tokens: int, **extra: object) -> bytes:
        meta = {"completion_tokens": tokens, **extra}
        return b"data: " + json.dumps({"text": "ab" * tokens, "meta_info": meta}).encode()

    lines = [line(1), b"", line(4), b"", line(4), line(6, spec_verify_ct=2), b"data: [DONE]"]
    out = _read_stream(iter(lines), time.perf_counter(), time.perf_counter() + 5)
    assert out.ok and out.tokens == 6 and out.verify_ct == 2
    assert len(out.itl) == 5  # one sample per token after the first chunk
    truncated = _read_stream(iter(lines[:3]), time.perf_counter(), time.perf_counter() + 5)
    assert not truncated.ok and "[DONE]" in truncated.error


def test_summarize_is_none_for_missing_values() -> None:
    out = summarize([_Outcome(ok=False, error="x")], 1.0)
    assert out["output_tok_s"] is None and out["itl_p99_ms"] is None
    assert out["accept_length"] is None and out["failed"] == 1
    good = summarize([_Outcome(ok=True, tokens=10, ttft=0.1, itl=[0.01] * 9, verify_ct=4)], 2.0)
    assert good["output_tok_s"] == 5.0 and good["accept_length"] == 2.5
    assert good["ttft_p50_ms"] == pytest.approx(100.0)
    assert good["itl_p90_ms"] == pytest.approx(10.0)
