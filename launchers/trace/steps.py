"""One rank's steps: the work each step span covers, and its time split into classes."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launchers.trace.events import (
    CLASSES,
    CPU_WORK_CATS,
    GPU_CATS,
    LAUNCH_CATS,
    StepSpans,
    classify_cpu_op,
    classify_kernel,
    correlation,
    dur,
    resolve,
    step_kind,
    x_events,
)


def _split(intervals: Sequence[tuple[float, float, int]], start: float, end: float
           ) -> list[float]:
    """Time in [start, end] per class rank (the lowest active rank wins), then the gap."""
    out = [0.0] * (len(CLASSES))
    points: list[tuple[float, int, int]] = []
    for a, b, rank in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            points.append((a, 1, rank))
            points.append((b, -1, rank))
    points.sort(key=lambda p: (p[0], p[1]))
    active = [0] * len(CLASSES)
    gap = len(CLASSES) - 1
    t = start
    for when, delta, rank in points:
        if when > t:
            top = next((r for r, n in enumerate(active) if n > 0), gap)
            out[top] += when - t
            t = when
        active[rank] += delta
    if end > t:
        out[gap] += end - t
    return out



@dataclass
class Step:
    """One step: its span and where its time went, in microseconds."""

    name: str
    kind: str
    batch_size: int | None
    start_us: float
    step_us: float
    split_us: dict[str, float]
    kernel_us: dict[str, float]
    kernels: dict[str, float]  # work name -> time (sums, this step)
    classes: dict[str, str]  # work name -> class




@dataclass(frozen=True)
class Span:
    name: str
    pid: Any
    tid: Any
    ts: float
    end: float




class _ThreadIndex:
    """Events of one kind per (pid, tid), sorted by start, for range look-ups."""

    def __init__(self) -> None:
        self.events: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
        self.starts: dict[tuple[Any, Any], list[float]] = {}

    def add(self, e: dict[str, Any]) -> None:
        self.events[(e.get("pid"), e.get("tid"))].append(e)

    def freeze(self) -> None:
        for key, items in self.events.items():
            items.sort(key=lambda e: float(e["ts"]))
            self.starts[key] = [float(e["ts"]) for e in items]

    def within(self, span: Span) -> list[dict[str, Any]]:
        key = (span.pid, span.tid)
        starts = self.starts.get(key)
        if not starts:
            return []
        lo = bisect.bisect_left(starts, span.ts)
        hi = bisect.bisect_right(starts, span.end)
        return self.events[key][lo:hi]


def steps_of(events: Sequence[dict[str, Any]], spans: Sequence[StepSpans] | None = None
             ) -> list[Step]:
    """Every step span of one trace (one rank), with its split; ``spans``: the workloads'
    step span names (default: every workload's)."""
    names = resolve(spans)
    found: list[Span] = []
    launches, cpu_work = _ThreadIndex(), _ThreadIndex()
    gpu_by_corr: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    gpu_all: list[dict[str, Any]] = []
    gpu_windows: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
    for e in x_events(events):
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat in GPU_CATS:
            gpu_all.append(e)
            corr = correlation(e)
            if corr is not None:
                gpu_by_corr[corr].append(e)
        elif cat in LAUNCH_CATS:
            launches.add(e)
        elif cat == "gpu_user_annotation":
            if step_kind(name, names) is not None:
                gpu_windows[name].append((float(e["ts"]), float(e["ts"]) + dur(e), e.get("pid")))
        elif cat in CPU_WORK_CATS:
            if cat == "user_annotation" and step_kind(name, names) is not None:
                found.append(Span(name, e.get("pid"), e.get("tid"), float(e["ts"]),
                                   float(e["ts"]) + dur(e)))
            else:
                cpu_work.add(e)
    launches.freeze()
    cpu_work.freeze()
    gpu_all.sort(key=lambda e: float(e["ts"]))
    gpu_starts = [float(e["ts"]) for e in gpu_all]
    on_gpu = bool(gpu_all)
    used_windows: dict[str, int] = defaultdict(int)
    steps = []
    for span in sorted(found, key=lambda s: s.ts):
        kind = step_kind(span.name, names)
        assert kind is not None
        if on_gpu:
            work = [k for launch in launches.within(span)
                    for k in gpu_by_corr.get(correlation(launch), [])]
            window: tuple[float, float] | None = None
            if not work and gpu_windows.get(span.name):  # no links: the GPU-side span
                i = used_windows[span.name]
                used_windows[span.name] += 1
                if i < len(gpu_windows[span.name]):
                    a, b, pid = gpu_windows[span.name][i]
                    window = (a, b)
                    hi = bisect.bisect_right(gpu_starts, b)
                    work = [k for k in gpu_all[:hi] if k.get("pid") == pid
                            and float(k["ts"]) + dur(k) > a]
            if not work:
                continue  # a step with no GPU work seen (kernels not traced?)
            if window is None:
                window = (min(float(k["ts"]) for k in work),
                          max(float(k["ts"]) + dur(k) for k in work))
            classified = [(k, classify_kernel(str(k.get("name", "")), str(k.get("cat"))))
                          for k in work]
        else:
            window = (span.ts, span.end)
            classified = [(o, classify_cpu_op(str(o.get("name", "")), names))
                          for o in _top_level(cpu_work.within(span))]
        steps.append(_step(span, kind, window, classified))
    return steps


def _top_level(ops: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operators not inside another one (``ops`` sorted by start)."""
    out: list[dict[str, Any]] = []
    end = float("-inf")
    for op in ops:
        if float(op["ts"]) >= end:
            out.append(op)
            end = float(op["ts"]) + dur(op)
    return out


def _step(span: Span, kind: tuple[str, int | None], window: tuple[float, float],
          classified: Sequence[tuple[dict[str, Any], str]]) -> Step:
    start, end = window
    rank = {c: i for i, c in enumerate(CLASSES)}
    intervals = [(float(e["ts"]), float(e["ts"]) + dur(e), rank[c]) for e, c in classified]
    split = dict(zip(CLASSES, _split(intervals, start, end), strict=True))
    sums = dict.fromkeys(CLASSES[:-1], 0.0)
    kernels: dict[str, float] = defaultdict(float)
    classes: dict[str, str] = {}
    for e, c in classified:
        sums[c] += dur(e)
        name = str(e.get("name", ""))
        kernels[name] += dur(e)
        classes[name] = c
    return Step(span.name, kind[0], kind[1], start, end - start, split, sums, dict(kernels),
                classes)


