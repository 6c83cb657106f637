"""The HTTP load generator: rounds of streaming ``/generate`` requests at a fixed concurrency.

Requests use SGLang's native endpoint with the dataset's prompts (launchers/sglang/datasets.py:
text, or token ids for ``random``) and ``ignore_eos``, so every request generates exactly its
output length. Streaming chunks are CUMULATIVE (shared/reference/sglang.md): tokens are
counted from ``meta_info.completion_tokens``, never by adding chunk lengths up.

Round metrics carry the names of SGLang's bench_serving (benchmark/serving.py
``calculate_metrics``), computed the way it computes them for its native backend:
- ``output_throughput``: completion tokens of the completed requests / ``duration`` (the
  round's wall time); ``total_input_tokens`` / ``total_output_tokens`` as the server counted
  them (``meta_info.prompt_tokens`` / ``completion_tokens``).
- TTFT: request sent -> first chunk with ``completion_tokens > 0``.
- ITL, per token: a chunk that raises ``completion_tokens`` by k after a gap of g seconds
  since the previous token-carrying chunk gives k samples of g / k. With speculative
  decoding one chunk is one draft+verify cycle, so this is cycle time / accepted tokens.
- TPOT, per request: (end-to-end latency - TTFT) / (output tokens - 1), requests of more
  than one token; end-to-end latency: request sent -> ``data: [DONE]``.
- ``mean_`` / ``median_`` / ``p99_`` of each (numpy's linear percentiles), in ms.
- ``accept_length``: sum(completion_tokens) / sum(spec_verify_ct) over the round's requests
  whose final chunk reports ``spec_verify_ct``; None when none does. bench_serving's figure:
  it counts each request's first token, which the prefill made, not a verify pass (64 tokens
  in 63 passes that accepted no draft: 1.016).
- ``verify_accept_length``: the same without that first token, sum(completion_tokens - 1) /
  sum(spec_verify_ct): tokens per verify pass, SGLang's own definition of its
  ``avg_spec_accept_length`` (1.0 when no draft is accepted).
A value that cannot be computed is None (missing), never 0.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import requests
from urllib3.exceptions import ReadTimeoutError

from launchers.sglang.datasets import Dataset, Prompt, RandomIds
from launchers.stats import percentile

# (key prefix, percentile): bench_serving's mean / median / p99
_SUMMARIES = (("mean", None), ("median", 50.0), ("p99", 99.0))
LATENCIES = ("ttft", "itl", "tpot", "e2e_latency")
ROUND_KEYS = ("output_throughput", "total_input_tokens", "total_output_tokens", "completed",
              "failed", "duration",
              *(f"{s}_{what}_ms" for what in LATENCIES for s, _ in _SUMMARIES),
              "accept_length", "verify_accept_length")


class BenchError(Exception):
    """The server could not be reached, dropped a stream, or did not answer in time."""

    def __init__(self, message: str, timed_out: bool) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out


@dataclass(frozen=True)
class BenchSettings:
    input_len: int = 256
    output_len: int = 256
    requests_per_round: int | None = None  # None: 4 x concurrency
    request_timeout: float = 300.0
    seed: int = 0


@dataclass
class _Outcome:
    ok: bool
    tokens: int = 0
    prompt_tokens: int | None = None
    ttft: float | None = None
    latency: float | None = None  # sent -> [DONE]
    itl: list[float] = field(default_factory=list)
    verify_ct: int | None = None
    error: str = ""


class Bench:
    """Rounds of streaming requests against one server."""

    def __init__(self, base_url: str, settings: BenchSettings, dataset: Dataset | None = None
                 ) -> None:
        self.url = base_url.rstrip("/") + "/generate"
        self.settings = settings
        self.dataset = dataset or RandomIds(settings.input_len, settings.output_len,
                                            settings.seed)

    def prompt(self, stream: str, index: int) -> Prompt:
        """Request ``index`` of ``stream``: the same in every trial, distinct per request."""
        return self.dataset.prompt(stream, index)

    def warmup(self, n: int) -> None:
        """``n`` requests one after another; results are discarded, errors raise BenchError."""
        with requests.Session() as session:
            for i in range(n):
                outcome = self._request(session, self.prompt("warmup", i))
                if not outcome.ok:
                    raise BenchError(f"warm-up request failed: {outcome.error}", timed_out=False)

    def round(self, concurrency: int, round_index: int) -> dict[str, float | None]:
        """One measured round at ``concurrency``; raises BenchError if the server fails.

        Each (round, concurrency) has prompts of its own, so that no level of a round finds
        the previous level's prompts in the server's prefix cache."""
        total = self.settings.requests_per_round or 4 * concurrency
        prompts = [self.prompt(f"round{round_index}c{concurrency}", i) for i in range(total)]
        sessions: queue.Queue[requests.Session] = queue.Queue()
        for _ in range(concurrency):
            sessions.put(requests.Session())
        abort = threading.Event()

        def one(prompt: Prompt) -> _Outcome | None:
            if abort.is_set():
                return None
            session = sessions.get()
            try:
                return self._request(session, prompt)
            except BenchError:
                abort.set()
                raise
            finally:
                sessions.put(session)

        began = time.perf_counter()
        pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench")
        try:
            futures = [pool.submit(one, prompt) for prompt in prompts]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            errors = [f.exception() for f in done if f.exception() is not None]
            if errors:
                abort.set()
                pool.shutdown(wait=True, cancel_futures=True)
                error = errors[0]
                raise error if isinstance(error, BenchError) else BenchError(str(error), False)
            outcomes = [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            while not sessions.empty():
                sessions.get().close()
        return summarize([o for o in outcomes if o is not None], time.perf_counter() - began)

    def _request(self, session: requests.Session, prompt: Prompt) -> _Outcome:
        s = self.settings
        body = {**prompt.body(), "stream": True,
                "sampling_params": {"max_new_tokens": prompt.output_len, "temperature": 0,
                                    "ignore_eos": True}}
        sent = time.perf_counter()
        deadline = sent + s.request_timeout
        try:
            with session.post(self.url, json=body, stream=True,
                              timeout=(min(5.0, s.request_timeout), s.request_timeout)) as resp:
                if resp.status_code != 200:
                    return _Outcome(False, error=f"HTTP {resp.status_code}: {resp.text[:200]}")
                return _read_stream(resp.iter_lines(), sent, deadline)
        except requests.RequestException as err:
            # A read timeout while streaming surfaces as a ConnectionError wrapping urllib3's
            # ReadTimeoutError, not as requests.Timeout.
            timed_out = isinstance(err, requests.Timeout) or any(
                isinstance(arg, ReadTimeoutError) for arg in err.args)
            if timed_out:
                raise BenchError(f"no answer within {s.request_timeout:g} s: {err}", True) from err
            raise BenchError(f"request failed: {err}", False) from err


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _read_stream(lines: Iterator[bytes], sent: float, deadline: float) -> _Outcome:
    """Follow one SSE stream of cumulative chunks to ``data: [DONE]``."""
    outcome = _Outcome(ok=False)
    last_tokens, last_at = 0, sent
    meta: dict[str, object] = {}
    for raw in lines:
        now = time.perf_counter()
        if now > deadline:
            raise BenchError("request ran past its timeout while streaming", True)
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            outcome.ok = "error" not in meta
            outcome.latency = now - sent
            break
        try:
            chunk = json.loads(payload)
        except ValueError:
            continue
        if not isinstance(chunk, dict):
            continue
        if "error" in chunk:
            meta = {"error": chunk["error"]}
            outcome.error = str(chunk["error"])[:200]
            continue
        meta = chunk.get("meta_info") or {}
        tokens = meta.get("completion_tokens")
        if not isinstance(tokens, int) or tokens <= last_tokens:
            continue
        if outcome.ttft is None:
            outcome.ttft = now - sent
        else:
            gap = (now - last_at) / (tokens - last_tokens)
            outcome.itl.extend([gap] * (tokens - last_tokens))
        last_tokens, last_at = tokens, now
    else:
        outcome.error = outcome.error or "stream ended without [DONE]"
    outcome.tokens = last_tokens
    outcome.prompt_tokens = _int(meta.get("prompt_tokens"))
    outcome.verify_ct = _int(meta.get("spec_verify_ct"))
    return outcome


def _summaries(name: str, seconds: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for prefix, q in _SUMMARIES:
        if not seconds:
            out[f"{prefix}_{name}_ms"] = None
        elif q is None:
            out[f"{prefix}_{name}_ms"] = 1000.0 * sum(seconds) / len(seconds)
        else:
            value = percentile(seconds, q)
            out[f"{prefix}_{name}_ms"] = None if value is None else 1000.0 * value
    return out


def summarize(outcomes: list[_Outcome], duration: float) -> dict[str, float | None]:
    """Round metrics from per-request outcomes (missing values are None, never 0)."""
    good = [o for o in outcomes if o.ok]
    tokens = sum(o.tokens for o in good)
    prompt_counts = [o.prompt_tokens for o in good]
    out: dict[str, float | None] = {
        "output_throughput": tokens / duration if good and duration > 0 else None,
        "total_input_tokens": (float(sum(c for c in prompt_counts if c is not None))
                               if good and None not in prompt_counts else None),
        "total_output_tokens": float(tokens) if good else None,
        "completed": float(len(good)),
        "failed": float(len(outcomes) - len(good)),
        "duration": duration,
    }
    tpot = [(o.latency - o.ttft) / (o.tokens - 1) for o in good
            if o.latency is not None and o.ttft is not None and o.tokens > 1]
    out.update(_summaries("ttft", [o.ttft for o in good if o.ttft is not None]))
    out.update(_summaries("itl", [x for o in good for x in o.itl]))
    out.update(_summaries("tpot", tpot))
    out.update(_summaries("e2e_latency", [o.latency for o in good if o.latency is not None]))
    spec = [o for o in good if o.verify_ct is not None]
    verify = sum(o.verify_ct or 0 for o in spec)
    out["accept_length"] = sum(o.tokens for o in spec) / verify if spec and verify > 0 else None
    out["verify_accept_length"] = (sum(o.tokens - 1 for o in spec) / verify
                                   if spec and verify > 0 else None)
    return out
