"""The stand-in's scheduler loop and Prometheus series (the simulator).

One thread batches requests like SGLang's scheduler: new requests get a prefill pass, then
every running request advances by one draft+verify cycle per pass, timed by cost_model and
counted in SGLang's metric names and labels (shared/reference/sglang.md). A request accepts
drafted tokens by its prompt's content (content.py) unless ``--fake-accept-length`` fixes it.

Every ``--decode-log-interval`` decode batches the loop does what SGLang 0.5.23's
``report_decode_stats`` does (srt/managers/scheduler_components/metrics_reporter.py): the
"Decode batch" line, the gauges, the lifetime accept-length totals, and, with
``SGLANG_RECORD_STEP_TIME``, one ``step_time_dict[<running requests>]`` entry: the time
since the previous entry (idle time included) / the interval, read on the model's deadline
clock (a late wake-up of a busy box that the next steps make up is not in it) and divided by
``--fake-time-scale``, like the device-timer counters.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from queue import Queue
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from simulator import cost_model
from simulator.fake_ranks import stamp

_print_lock = threading.Lock()
# How far the model clock may fall behind before it gives up catching up (a stalled box).
# Two seconds: a busy box's preemptions (tens of ms; with two busy loops and Ray's start
# beside it, stalls of a second) are made up by the next steps, so a round's figures stay the
# model's. A stall of 0.6 s inside a round took half a second from it with 0.5 s here (-30%);
# with 2 s it is made up but for what falls after the request's last model step.
CATCH_UP_S = 2.0


def log(message: str, tag: str = "") -> None:
    """SGLang's log format: ``[YYYY-mm-dd HH:MM:SS(.mmm) TP0] message``."""
    with _print_lock:
        print(f"{stamp(tag)} {message}", flush=True)


# ---------------------------------------------------------------- metrics


class Metrics:
    """SGLang's Prometheus series, with SGLang's names and labels."""

    def __init__(self, model_name: str, ranks: list[int]) -> None:
        self.registry = CollectorRegistry()
        self.labels = [{"model_name": model_name, "engine_type": "unified", "tp_rank": str(r),
                        "pp_rank": "0", "moe_ep_rank": "0"} for r in ranks]
        names = list(self.labels[0])
        r = self.registry
        self.forward_s = Counter(
            "sglang:forward_execution_seconds",
            "Total time that GPU is busy executing model forward passes. "
            "Refer to ForwardMode for category labels.", [*names, "category"], registry=r)
        self.passes = Counter("sglang:cuda_graph_passes",
                              "Total number of forward passes categorized by CUDA graph.",
                              [*names, "mode"], registry=r)
        self.prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.",
                                     names, registry=r)
        self.generation_tokens = Counter("sglang:generation_tokens",
                                         "Number of generation tokens processed.", names,
                                         registry=r)
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", names,
                             registry=r)
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
                            names, registry=r)
        self.gen_throughput = Gauge("sglang:gen_throughput", "The generation throughput (token/s).",
                                    names, registry=r)
        self.accept_length = Gauge("sglang:spec_accept_length",
                                   "The average acceptance length of speculative decoding.",
                                   names, registry=r)
        self.accept_rate = Gauge("sglang:spec_accept_rate",
                                 "The average acceptance rate of speculative decoding.", names,
                                 registry=r)
        self.is_cuda_graph = Gauge("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.",
                                   names, registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", names, registry=r,
                              buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0))

    def each(self, metric: Any, extra: dict[str, str] | None = None) -> list[Any]:
        return [metric.labels(**{**labels, **(extra or {})}) for labels in self.labels]

    def text(self) -> bytes:
        return generate_latest(self.registry)


# ---------------------------------------------------------------- the engine


@dataclass
class Request:
    rid: str
    prompt_len: int
    max_new: int
    created: float = field(default_factory=time.time)
    tokens: int = 0
    verify_ct: int = 0
    correct: int = 0
    proposed: int = 0
    accept_scale: float = 1.0  # content.accept_scale of the prompt
    carry: float = 0.0  # error diffusion: the mean accepted tokens per cycle is exact
    aborted: bool = False
    out: Queue[tuple[int, bool]] = field(default_factory=Queue)  # (completion tokens, finished)


class Server(Protocol):
    """What the loop reads of its server (sglang_server.FakeServer): its switches, the
    model's timing, its counters, and how it dies."""

    args: argparse.Namespace
    seed: int
    launch_factor: float
    metrics: Metrics
    spec: cost_model.SpecParams

    @property
    def device_timer(self) -> bool: ...

    @property
    def record_step_time(self) -> bool: ...

    def timing(self, batch: int) -> cost_model.Timing: ...

    def die(self, during_launch: bool = False) -> None: ...


class Engine(threading.Thread):
    """One scheduler loop: prefill new requests, then draft+verify cycles over the batch."""

    def __init__(self, server: Server) -> None:
        super().__init__(name="scheduler", daemon=True)
        self.server = server
        self.cond = threading.Condition()
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.finished = 0
        self.passes = 0
        self.rng = random.Random(server.seed)
        self.accepted_total = 0  # lifetime, folded in per log interval: avg_spec_accept_length
        self.verify_total = 0
        self.step_times: dict[str, list[float]] = {}
        self.decode_ct = 0  # decode batches since start or /flush_cache (forward_ct_decode)
        self.last_tic = time.monotonic()  # end of the previous step-time window (model clock)
        self.window: list[tuple[int, int, int]] = []  # (tokens, verify ct, correct) per batch
        self.halted = False
        self.due: float | None = None  # the model clock's deadline (monotonic s); None idle

    def submit(self, req: Request) -> None:
        with self.cond:
            self.waiting.append(req)
            self.cond.notify()

    def flush(self) -> None:
        """SGLang's reset_metrics: the lifetime totals and the decode count, not the step
        times nor the window's start."""
        with self.cond:
            self.accepted_total = self.verify_total = self.decode_ct = 0

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and not self.running:
                    self.due = None  # idle: the model clock restarts with the next request
                    self.cond.wait()
                new = list(self.waiting)
                self.waiting.clear()
            if self.halted:
                time.sleep(3600)
            if new:
                self._prefill(new)
            self.running = [r for r in self.running if not r.aborted]
            if self.running:
                self._cycle()

    def _sleep(self, model_ms: float) -> None:
        """Model time on a deadline clock: a late wake-up on a busy box is made up by the
        next steps, so the steps' total is model time whenever the box keeps up on average
        (the faster settings' shorter steps would otherwise lose the most to the load)."""
        now = time.monotonic()
        if self.due is None or now - self.due > CATCH_UP_S:
            self.due = now
        self.due += model_ms * self.server.args.fake_time_scale / 1000.0
        if self.due > now:
            time.sleep(self.due - now)

    def _prefill(self, new: list[Request]) -> None:
        s = self.server
        ms = cost_model.noisy(cost_model.PREFILL_MS * len(new) * s.launch_factor,
                              s.args.fake_noise, self.rng)
        self._sleep(ms)
        if s.device_timer:
            for c in s.metrics.each(s.metrics.forward_s, {"category": "extend"}):
                c.inc(ms / 1000.0)
        for c in s.metrics.each(s.metrics.passes, {"mode": "prefill_none"}):
            c.inc()
        for c in s.metrics.each(s.metrics.prompt_tokens):
            c.inc(sum(r.prompt_len for r in new))
        for req in new:
            req.tokens = 1  # prefill samples the first token
            req.out.put((1, req.max_new <= 1))
            for h in s.metrics.each(s.metrics.ttft):
                h.observe(time.time() - req.created)
            if req.max_new <= 1:
                self._finish(req)
            else:
                self.running.append(req)

    def _cycle(self) -> None:
        s = self.server
        batch = len(self.running)
        t = s.timing(batch)
        noise = s.args.fake_noise
        launch = s.launch_factor  # this launch's speed (--fake-launch-spread)
        verify = cost_model.noisy(t.verify_ms * launch, noise, self.rng)
        draft = cost_model.noisy(t.draft_ms * launch, noise, self.rng)
        cycle = verify + draft + t.overhead_ms * launch
        self._sleep(cycle)
        m = s.metrics
        if s.device_timer:
            if s.spec.on:
                for c in m.each(m.forward_s, {"category": "target_verify"}):
                    c.inc(verify / 1000.0)
                for c in m.each(m.forward_s, {"category": "eagle_draft"}):
                    c.inc(0.8 * draft / 1000.0)
                for c in m.each(m.forward_s, {"category": "eagle_draft_extend"}):
                    c.inc(0.2 * draft / 1000.0)
            else:
                for c in m.each(m.forward_s, {"category": "decode"}):
                    c.inc(verify / 1000.0)
        for c in m.each(m.passes, {"mode": "decode_cuda_graph" if t.graph else "decode_none"}):
            c.inc()
        for g in m.each(m.is_cuda_graph):
            g.set(1 if t.graph else 0)
        _, _, drafts = s.spec.resolved()
        fixed = s.args.fake_accept_length is not None
        emitted = 0
        for req in list(self.running):
            scale = 1.0 if fixed else req.accept_scale
            req.carry += 1.0 + (t.accept_length - 1.0) * scale
            k = max(1, min(int(req.carry), req.max_new - req.tokens))
            req.carry -= int(req.carry)
            req.tokens += k
            req.verify_ct += 1
            req.correct += k - 1
            req.proposed += drafts - 1
            emitted += k
            done = req.tokens >= req.max_new
            req.out.put((req.tokens, done))
            if done:
                self.running.remove(req)
                self._finish(req)
        for c in m.each(m.generation_tokens):
            c.inc(emitted)
        self.passes += 1
        self.decode_ct += 1
        self.window.append((emitted, batch, emitted - batch))
        if self.decode_ct % max(1, s.args.decode_log_interval) == 0:
            self._report_decode(t.graph, batch)

    def _report_decode(self, graph: bool, batch: int) -> None:
        s = self.server
        # The window ends on the model clock (the deadline the last step slept to): a late
        # wake-up that the next steps make up is the box's, not the model's; idle time and
        # a stall past CATCH_UP_S restart the clock, so they are in, as in SGLang's wall time.
        now = self.due if self.due is not None else time.monotonic()
        gap, self.last_tic = now - self.last_tic, now
        interval = max(1, s.args.decode_log_interval)
        tokens = sum(w[0] for w in self.window)
        verifies = sum(w[1] for w in self.window)
        correct = sum(w[2] for w in self.window)
        self.window.clear()
        with self.cond:
            self.accepted_total += tokens
            self.verify_total += verifies
            if s.record_step_time:
                model_s = gap / s.args.fake_time_scale
                self.step_times.setdefault(str(batch), []).append(model_s / interval)
        accept = tokens / verifies if verifies else 0.0
        _, _, drafts = s.spec.resolved()
        rate = correct / (verifies * max(1, drafts - 1)) if verifies else 0.0
        throughput = tokens / (gap / s.args.fake_time_scale) if gap > 0 else 0.0
        m = s.metrics
        for g in m.each(m.gen_throughput):
            g.set(throughput)
        for g in m.each(m.running):
            g.set(len(self.running))
        for g in m.each(m.queued):
            g.set(len(self.waiting))
        spec = ""
        if s.spec.on:
            spec = f"accept len: {accept:.2f}, accept rate: {rate:.2f}, "
            for g in m.each(m.accept_length):
                g.set(accept)
            for g in m.each(m.accept_rate):
                g.set(rate)
        used = sum(r.prompt_len + r.tokens for r in self.running)
        log(f"Decode batch, #running-req: {batch}, #token: {used}, "
            f"token usage: {used / 500000:.2f}, {spec}cuda graph: {graph}, "
            f"gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self.waiting)}",
            "TP0")

    def _finish(self, req: Request) -> None:
        self.finished += 1
        fault = self.server.args.fake_fault
        if self.finished >= self.server.args.fake_die_after:
            if fault == "die-mid-round":
                self.server.die()
            elif fault == "hang-mid-round":
                self.halted = True
