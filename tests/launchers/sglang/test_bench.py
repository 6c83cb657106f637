"""The load generator against a tiny in-process server speaking SGLang's streaming format."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler

import pytest

from launchers.process import free_port
from launchers.sglang import datasets
from launchers.sglang.bench import (
    ROUND_KEYS,
    Bench,
    BenchError,
    BenchSettings,
    _Outcome,
    _read_stream,
    summarize,
)
from launchers.sglang.datasets import TOKEN_ID_RANGE
from simulator.http_stub import serve


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

    def handle(self) -> None:
        # The client gave up on the stream (the timeout tests): nothing to report.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()

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
            prompt_tokens = len(body.get("input_ids") or str(body.get("text", "")).split())
            meta: dict[str, object] = {"id": "r", "finish_reason": None,
                                       "prompt_tokens": prompt_tokens,
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
    assert result["accept_length"] == pytest.approx(31 / 10)  # bench_serving's, with prefill
    assert result["verify_accept_length"] == pytest.approx(30 / 10)  # SGLang's: 3 per pass
    assert result["output_throughput"] == pytest.approx(4 * 31 / result["duration"])  # type: ignore[operator]
    assert result["total_output_tokens"] == 4 * 31 and result["total_input_tokens"] == 4 * 16
    assert set(result) == set(ROUND_KEYS)
    for key in ROUND_KEYS:
        if key != "failed":
            assert result[key] is not None and result[key] > 0, key  # type: ignore[operator]
    # ITL per token: a 4 ms cycle carrying 3 tokens is ~1.3 ms per token
    assert result["median_itl_ms"] < 4.0  # type: ignore[operator]
    # TPOT: (e2e - TTFT) / 30 tokens over 10 cycles of >= 4 ms: >= 4 * 10 / 30 ms per token
    assert 1.3 <= result["mean_tpot_ms"] < 4.0  # type: ignore[operator]
    assert result["mean_e2e_latency_ms"] >= 40.0  # type: ignore[operator]
    assert result["median_ttft_ms"] < result["median_e2e_latency_ms"]  # type: ignore[operator]
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
    assert result["output_throughput"] is None and result["median_ttft_ms"] is None
    assert result["total_output_tokens"] is None and result["mean_tpot_ms"] is None


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


def test_default_prompts_are_seeded_random_ids() -> None:
    settings = BenchSettings(input_len=64, output_len=1, seed=7)
    a, b = Bench("http://x", settings), Bench("http://x", settings)
    assert a.prompt("round0", 0) == b.prompt("round0", 0)
    assert a.prompt("round0", 0) != a.prompt("round0", 1)
    assert a.prompt("round0", 0) != Bench("http://x", BenchSettings(64, 1, seed=8)).prompt(
        "round0", 0)
    ids = a.prompt("round1", 3).input_ids
    low, high = TOKEN_ID_RANGE
    assert ids is not None and all(low <= t < high for t in ids)
    assert len(a.prompt("warmup", 0).input_ids or ()) == 64


def test_text_prompts_with_their_own_output_lengths(stub: tuple[str, type[_Handler]]) -> None:
    url, handler = stub
    handler.behaviour.per_chunk = 5
    dataset = datasets.load("builtin", input_len=32, output_len=12, seed=1)
    bench = Bench(url, BenchSettings(input_len=32, output_len=12, requests_per_round=2),
                  dataset)
    bench.round(concurrency=1, round_index=0)
    bench.round(concurrency=2, round_index=0)
    texts = [b["text"] for b in handler.bodies]
    assert all(isinstance(t, str) and t for t in texts)
    assert "input_ids" not in handler.bodies[0]
    assert len(set(texts)) == 4  # each level of a round has prompts of its own
    assert texts[0] == dataset.prompt("round0c1", 0).text
    assert all(b["sampling_params"]["max_new_tokens"] == 12 for b in handler.bodies)  # type: ignore[index]


def test_read_stream_uses_completion_tokens() -> None:
    def line(tokens: int, **extra: object) -> bytes:
        meta = {"completion_tokens": tokens, **extra}
        return b"data: " + json.dumps({"text": "ab" * tokens, "meta_info": meta}).encode()

    lines = [line(1), b"", line(4), b"", line(4), line(6, spec_verify_ct=2, prompt_tokens=9),
             b"data: [DONE]"]
    out = _read_stream(iter(lines), time.perf_counter(), time.perf_counter() + 5)
    assert out.ok and out.tokens == 6 and out.verify_ct == 2 and out.prompt_tokens == 9
    assert out.latency is not None and out.ttft is not None and out.latency >= out.ttft
    assert len(out.itl) == 5  # one sample per token after the first chunk
    truncated = _read_stream(iter(lines[:3]), time.perf_counter(), time.perf_counter() + 5)
    assert not truncated.ok and "[DONE]" in truncated.error


def test_summarize_is_none_for_missing_values() -> None:
    out = summarize([_Outcome(ok=False, error="x")], 1.0)
    assert out["output_throughput"] is None and out["p99_itl_ms"] is None
    assert out["accept_length"] is None and out["failed"] == 1
    good = summarize([_Outcome(ok=True, tokens=10, ttft=0.1, latency=0.19, itl=[0.01] * 9,
                               verify_ct=4, prompt_tokens=7)], 2.0)
    assert good["output_throughput"] == 5.0 and good["accept_length"] == 2.5
    assert good["median_ttft_ms"] == pytest.approx(100.0)
    assert good["p99_itl_ms"] == pytest.approx(10.0)
    assert good["mean_tpot_ms"] == pytest.approx(10.0)  # (190 - 100) ms / 9 tokens
    assert good["p99_e2e_latency_ms"] == pytest.approx(190.0)
    assert good["total_input_tokens"] == 7.0 and good["duration"] == 2.0


def test_summaries_follow_bench_serving() -> None:
    """mean, median (numpy's) and p99 over requests (TTFT, TPOT, E2E) or tokens (ITL)."""
    outcomes = [_Outcome(ok=True, tokens=3, ttft=t, latency=t + 0.02, itl=[0.01, 0.01])
                for t in (0.1, 0.2, 0.3, 0.6)]
    one_token = _Outcome(ok=True, tokens=1, ttft=0.05, latency=0.05)  # no TPOT sample
    out = summarize([*outcomes, one_token], 1.0)
    assert out["mean_ttft_ms"] == pytest.approx(250.0)
    assert out["median_ttft_ms"] == pytest.approx(200.0)
    assert out["p99_ttft_ms"] == pytest.approx(588.0)  # numpy.percentile(..., 99)
    assert out["mean_tpot_ms"] == pytest.approx(10.0) and out["median_itl_ms"] == pytest.approx(10.0)
    assert out["total_input_tokens"] is None  # the server did not report prompt_tokens
