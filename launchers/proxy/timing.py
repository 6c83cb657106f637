"""Timing: a piece of work replayed from its CUDA graph (or run eagerly) and timed per call,
and one round's metrics from those times.

A round times six graphs, ``iters`` replays each (CUDA events; perf_counter on CPU):
  pass          the verify pass
  compute       the same pass with every collective a no-op on the same buffers
  head          the final norm, the LM head and its all-gather
  compute_head  the same with the all-gather a no-op
  allreduce     the pass's all-reduces (2 x num_hidden_layers) with nothing between them
  allgather     the logits all-gather alone
``summarize`` turns the per-replay times into the round's metrics:
  verify_ms            p50 of the pass (p10, p90 beside it)
  compute_ms           p50 of the compute-only pass: measured in its own graph, not derived
  exposed_comm_ms      verify_ms - compute_ms: the time the collectives add to the pass (it
                       can come out slightly negative when they cost nothing, one rank)
  exposed_comm_share   exposed_comm_ms / verify_ms
  exposed_per_allreduce_us  (exposed_comm_ms - allgather_alone_ms) / all-reduces per pass:
                       the all-gather's own time taken out (it runs on the same stream, nothing
                       to hide behind)
  comm_alone_ms        the collectives alone (allreduce + allgather graphs): back-to-back, the
                       pattern is not the pass's, so this is not what the pass pays
  comm_alone_per_allreduce_us, allgather_alone_ms
With --layers N below the model's, the layers' part of pass and compute is scaled by
num_hidden_layers/N and the head added as measured; the all-reduces alone are timed at the
full model's count. ``assumed_draft_ms``, unless given, is draft steps x (one layer + the LM
head), both from this measurement: an EAGLE-3 draft is one decoder layer and an LM head.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from launchers.proxy.geometry import Geometry
from launchers.stats import percentile

if TYPE_CHECKING:
    import torch

# The numbers a round reports (summarize's keys, besides the texts).
ROUND_METRICS = ("verify_ms", "verify_p10_ms", "verify_p90_ms", "compute_ms", "exposed_comm_ms",
                 "exposed_comm_share", "exposed_per_allreduce_us", "comm_alone_ms",
                 "comm_alone_per_allreduce_us", "allgather_alone_ms", "head_ms", "est_tok_s",
                 "est_accept_length", "assumed_draft_ms", "bytes_per_pass", "hbm_floor_ms")
H200_BANDWIDTH = 4.3e12  # B/s per GPU, small-batch matmuls measured here (shared/reference/nccl.md)
GRAPHS = ("pass", "compute", "head", "compute_head", "allreduce", "allgather")


def p(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of a non-empty sample."""
    value = percentile(values, q)
    if value is None:
        raise ValueError("no samples to summarize")
    return value


def summarize(samples: Mapping[str, Sequence[float]], geo: Geometry, *, accept_length: float,
              draft_ms: float | None, draft_steps: int, bandwidth: float,
              accept_source: str = "assumed") -> dict[str, Any]:
    """One round's metrics from per-call times in ms of the six graphs (``GRAPHS``).
    ``est_accept_length``: the accept length est_tok_s uses (at most the draft tokens), its
    ``accept_length_source`` "measured" (a server's, for this shape) or "assumed"."""
    layers = geo.shape.num_hidden_layers
    n_allreduce = 2 * layers
    head, compute_head = p(samples["head"], 50), p(samples["compute_head"], 50)
    # scaled: the layers' share of each pass times num_hidden_layers/N, the head as measured
    verify = [head + (t - head) * geo.scale for t in samples["pass"]]
    compute = [compute_head + (t - compute_head) * geo.scale for t in samples["compute"]]
    verify_ms, compute_ms = p(verify, 50), p(compute, 50)
    exposed = verify_ms - compute_ms
    allreduces, allgather = p(samples["allreduce"], 50), p(samples["allgather"], 50)
    layer_ms = max(verify_ms - head, 0.0) / layers
    if draft_ms is None:
        draft_ms = draft_steps * (layer_ms + head)
        source = (f"estimated: {draft_steps} steps x (one layer {layer_ms:.3f} ms + "
                  f"LM head {head:.3f} ms)")
    else:
        source = "given"
    accept = min(accept_length, float(geo.draft_tokens))
    bytes_full = geo.bytes_per_pass()["total"]
    return {
        "verify_ms": verify_ms,
        "verify_p10_ms": p(verify, 10),
        "verify_p90_ms": p(verify, 90),
        "compute_ms": compute_ms,
        "exposed_comm_ms": exposed,
        "exposed_comm_share": exposed / verify_ms if verify_ms > 0 else None,
        "exposed_per_allreduce_us": (exposed - allgather) / n_allreduce * 1000,
        "comm_alone_ms": allreduces + allgather,
        "comm_alone_per_allreduce_us": allreduces / n_allreduce * 1000,
        "allgather_alone_ms": allgather,
        "head_ms": head,
        "est_tok_s": geo.batch * accept / ((verify_ms + draft_ms) / 1000),
        "est_accept_length": accept,
        "accept_length_source": accept_source,
        "assumed_draft_ms": draft_ms,
        "draft_ms_source": source,
        "bytes_per_pass": bytes_full,
        "hbm_floor_ms": bytes_full / bandwidth * 1000,
        "scaled": geo.scaled,
    }


class Timed:
    """One piece of work, run by replaying its CUDA graph (or eagerly) and timed per call."""

    def __init__(self, name: str, fn: Callable[[], Any], device: torch.device, graph: bool
                 ) -> None:
        self.name, self.fn, self.device = name, fn, device
        self.graph: Any = None
        self.use_graph = graph and device.type == "cuda"
        self.out: Any = None

    def prepare(self, warmup: int = 2, replay: bool = True) -> None:
        """Eager warm-up calls, then the capture (graph mode) and, with ``replay``, one replay
        that fills ``out`` (else ``fill`` does, later: native mode replays only after SGLang's
        capture context has registered the captured buffers)."""
        import torch

        if not self.use_graph:
            for _ in range(warmup):
                self.out = self.fn()
            return
        # Warm-up and capture fail alike, as in SGLang's graph runner (its warm-up runs are
        # part of the capture step): a global NCCL_ALGO=Tree then reads as graph_capture.
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    self.fn()
            torch.cuda.current_stream(self.device).wait_stream(side)
            torch.cuda.synchronize(self.device)
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: queries by NCCL's watchdog thread must not invalidate the capture
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.out = self.fn()
        except Exception as err:
            print(f"proxy: Capture cuda graph failed ({self.name}): {err}", flush=True)
            raise
        if replay:
            self.fill()

    def fill(self) -> None:
        """One replay: capture computes nothing, this fills ``out``."""
        if self.graph is not None:
            self.graph.replay()

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.out = self.fn()

    def times_ms(self, iters: int) -> list[float]:
        import torch

        if self.device.type != "cuda":
            times = []
            for _ in range(iters):
                began = time.perf_counter()
                self.run()
                times.append((time.perf_counter() - began) * 1000)
            return times
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        for start, end in events:
            start.record()
            self.run()
            end.record()
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) for start, end in events]


def bandwidth(given: float | None, device: torch.device) -> tuple[float, str]:
    """Per-GPU memory bandwidth for hbm_floor_ms: given, known (H200), or measured."""
    import torch

    if given:
        return given, "given"
    if device.type == "cuda" and "H200" in torch.cuda.get_device_name(device):
        return H200_BANDWIDTH, "H200: 4.3e12 B/s, matmul weight reads (reference/nccl.md)"
    nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    buf = torch.ones(nbytes // 4, device=device)
    times = []
    for _ in range(6):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        buf.sum()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - began)
    del buf
    return nbytes / p(times[1:], 50), f"measured: read of {nbytes >> 20} MiB"
