"""Where a verify step's time goes, read from a torch.profiler Chrome trace (JSON, or gzipped).

Steps are found through their spans: SGLang's ``step[VERIFY bs=N]`` / ``step[DRAFT bs=N]``
(any ``step[STAGE bs=N ...]``), and the proxy's own ``servetune.verify`` /
``servetune.allreduce_only`` (``record_function`` spans, category ``user_annotation``).

On a GPU trace the step's work is the GPU activity (kernels, memcpy, memset) whose
correlation id matches a CUDA runtime or driver call made inside the span, on the span's
thread (a CUDA graph replay is one ``cudaGraphLaunch`` whose kernels all carry its id). Where a
trace has no such links, the kernels inside the span's ``gpu_user_annotation`` window are used.
The step's length is its GPU window: first start to last end of its work. On a CPU-only trace
(the proxy over gloo) the work is the operators inside the span on its thread, and the length
is the span's.

The window is cut into classes, each instant going to the first class active then:
  collective        NCCL kernels (``nccl*``); on CPU, gloo/c10d collectives and the proxy's
                    ``servetune.comm.*`` spans
  custom_allreduce  other all-reduce/all-gather kernels: custom, one-shot/two-shot, Lamport,
                    MSCCL++, FlashInfer/TRT-LLM fusion, symmetric memory (name patterns below)
  compute           every other kernel (GEMM, attention, MoE, norms, ...)
  memcpy            memory copies and sets
  gap               nothing running: launch overhead, idle, waiting on the host
so the classes add up to the step exactly; ``kernel_us`` keeps the plain sums per class, which
exceed the window where streams overlap. Communication = collective + custom_allreduce;
other = memcpy + gap.

No Ray, no torch: this module reads JSON only.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

CLASSES = ("collective", "custom_allreduce", "compute", "memcpy", "gap")
LABELS = {"collective": "NCCL collectives", "custom_allreduce": "custom/fused allreduce",
          "compute": "compute (GEMM, attention, MoE)", "memcpy": "memcpy/memset",
          "gap": "gaps (launch, idle)"}
COMMUNICATION = ("collective", "custom_allreduce")
OTHER = ("memcpy", "gap")

STEP_RE = re.compile(r"^step\[(?P<stage>[A-Za-z_]+) bs=(?P<bs>\d+)")
PROXY_PREFIX = "servetune."
PROXY_COMM_PREFIX = "servetune.comm."
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
CPU_WORK_CATS = ("cpu_op", "user_annotation")
# Kernel names of all-reduce implementations other than NCCL's own (matched lower-case). A
# bare "trtllm" is not among them: FlashInfer's trtllm-gen attention and MoE kernels carry it.
CUSTOM_ALLREDUCE = ("allreduce", "all_reduce", "cross_device_reduce", "oneshot", "one_shot",
                    "twoshot", "two_shot", "mscclpp", "custom_ar", "lamport", "allgather",
                    "all_gather", "reduce_scatter", "reducescatter", "multimem")
CPU_COLLECTIVE = ("gloo", "c10d::", "nccl", "allreduce", "all_reduce", "allgather",
                  "all_gather", "record_param_comms", "reduce_scatter", "broadcast")


class TraceError(ValueError):
    """The file is not a Chrome trace servetune can read."""


# ---------------------------------------------------------------- reading


def load_events(path: Path) -> list[dict[str, Any]]:
    """The ``traceEvents`` of a Chrome trace file, gzipped or not."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as err:
        raise TraceError(f"{path}: not a readable Chrome trace ({err})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def step_kind(name: str) -> tuple[str, int | None] | None:
    """(kind, batch size) of a step span's name, or None when the name is not a step."""
    m = STEP_RE.match(name)
    if m:
        return m.group("stage").lower(), int(m.group("bs"))
    if name.startswith(PROXY_PREFIX) and not name.startswith(PROXY_COMM_PREFIX):
        return name[len(PROXY_PREFIX):], None
    return None


def classify_kernel(name: str, cat: str = "kernel") -> str:
    """The class of one piece of GPU work."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "memcpy"
    low = name.lower()
    if low.startswith("nccl"):
        return "collective"
    if any(p in low for p in CUSTOM_ALLREDUCE):
        return "custom_allreduce"
    return "compute"


def classify_cpu_op(name: str) -> str:
    low = name.lower()
    if name.startswith(PROXY_COMM_PREFIX) or any(p in low for p in CPU_COLLECTIVE):
        return "collective"
    return "compute"


# ---------------------------------------------------------------- intervals


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


# ---------------------------------------------------------------- steps


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
class _Span:
    name: str
    pid: Any
    tid: Any
    ts: float
    end: float


def _x_events(events: Iterable[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    for e in events:
        if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)):
            yield e


def _dur(e: Mapping[str, Any]) -> float:
    d = e.get("dur", 0.0)
    return float(d) if isinstance(d, (int, float)) else 0.0


def _correlation(e: Mapping[str, Any]) -> Any:
    args = e.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


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

    def within(self, span: _Span) -> list[dict[str, Any]]:
        key = (span.pid, span.tid)
        starts = self.starts.get(key)
        if not starts:
            return []
        lo = bisect.bisect_left(starts, span.ts)
        hi = bisect.bisect_right(starts, span.end)
        return self.events[key][lo:hi]


def steps_of(events: Sequence[dict[str, Any]]) -> list[Step]:
    """Every step span of one trace (one rank), with its split."""
    spans: list[_Span] = []
    launches, cpu_work = _ThreadIndex(), _ThreadIndex()
    gpu_by_corr: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    gpu_all: list[dict[str, Any]] = []
    gpu_windows: dict[str, list[tuple[float, float, Any]]] = defaultdict(list)
    for e in _x_events(events):
        cat, name = e.get("cat"), str(e.get("name", ""))
        if cat in GPU_CATS:
            gpu_all.append(e)
            corr = _correlation(e)
            if corr is not None:
                gpu_by_corr[corr].append(e)
        elif cat in LAUNCH_CATS:
            launches.add(e)
        elif cat == "gpu_user_annotation":
            if step_kind(name) is not None:
                gpu_windows[name].append((float(e["ts"]), float(e["ts"]) + _dur(e), e.get("pid")))
        elif cat in CPU_WORK_CATS:
            if cat == "user_annotation" and step_kind(name) is not None:
                spans.append(_Span(name, e.get("pid"), e.get("tid"), float(e["ts"]),
                                   float(e["ts"]) + _dur(e)))
            else:
                cpu_work.add(e)
    launches.freeze()
    cpu_work.freeze()
    gpu_all.sort(key=lambda e: float(e["ts"]))
    gpu_starts = [float(e["ts"]) for e in gpu_all]
    on_gpu = bool(gpu_all)
    used_windows: dict[str, int] = defaultdict(int)
    steps = []
    for span in sorted(spans, key=lambda s: s.ts):
        kind = step_kind(span.name)
        assert kind is not None
        if on_gpu:
            work = [k for launch in launches.within(span)
                    for k in gpu_by_corr.get(_correlation(launch), [])]
            window: tuple[float, float] | None = None
            if not work and gpu_windows.get(span.name):  # no links: the GPU-side span
                i = used_windows[span.name]
                used_windows[span.name] += 1
                if i < len(gpu_windows[span.name]):
                    a, b, pid = gpu_windows[span.name][i]
                    window = (a, b)
                    hi = bisect.bisect_right(gpu_starts, b)
                    work = [k for k in gpu_all[:hi] if k.get("pid") == pid
                            and float(k["ts"]) + _dur(k) > a]
            if not work:
                continue  # a step with no GPU work seen (kernels not traced?)
            if window is None:
                window = (min(float(k["ts"]) for k in work),
                          max(float(k["ts"]) + _dur(k) for k in work))
            classified = [(k, classify_kernel(str(k.get("name", "")), str(k.get("cat"))))
                          for k in work]
        else:
            window = (span.ts, span.end)
            classified = [(o, classify_cpu_op(str(o.get("name", ""))))
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
            end = float(op["ts"]) + _dur(op)
    return out


def _step(span: _Span, kind: tuple[str, int | None], window: tuple[float, float],
          classified: Sequence[tuple[dict[str, Any], str]]) -> Step:
    start, end = window
    rank = {c: i for i, c in enumerate(CLASSES)}
    intervals = [(float(e["ts"]), float(e["ts"]) + _dur(e), rank[c]) for e, c in classified]
    split = dict(zip(CLASSES, _split(intervals, start, end), strict=True))
    sums = dict.fromkeys(CLASSES[:-1], 0.0)
    kernels: dict[str, float] = defaultdict(float)
    classes: dict[str, str] = {}
    for e, c in classified:
        sums[c] += _dur(e)
        name = str(e.get("name", ""))
        kernels[name] += _dur(e)
        classes[name] = c
    return Step(span.name, kind[0], kind[1], start, end - start, split, sums, dict(kernels),
                classes)


# ---------------------------------------------------------------- summaries


@dataclass
class Summary:
    """The mean step of one kind (and batch size) over its steps, in milliseconds."""

    kind: str
    batch_size: int | None
    steps: int
    step_ms: float
    split_ms: dict[str, float]
    kernel_ms: dict[str, float]
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    ranks: int = 1
    step_ms_by_rank: list[float] = field(default_factory=list)

    @property
    def communication_ms(self) -> float:
        return sum(self.split_ms[c] for c in COMMUNICATION)

    @property
    def compute_ms(self) -> float:
        return self.split_ms["compute"]

    @property
    def other_ms(self) -> float:
        return sum(self.split_ms[c] for c in OTHER)

    def sentence(self) -> str:
        return (f"{self.kind} {self.step_ms:.2f} ms = {self.communication_ms:.2f} ms "
                f"communication + {self.compute_ms:.2f} ms compute + {self.other_ms:.2f} ms other")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(communication_ms=self.communication_ms, compute_ms=self.compute_ms,
                    other_ms=self.other_ms, sentence=self.sentence())
        return data


def summarize(steps: Sequence[Step], top: int = 8) -> dict[tuple[str, int | None], Summary]:
    """Steps grouped by (kind, batch size): the mean of each class, and the top kernels."""
    groups: dict[tuple[str, int | None], list[Step]] = defaultdict(list)
    for step in steps:
        groups[(step.kind, step.batch_size)].append(step)
    out = {}
    for key, group in groups.items():
        n = len(group)
        kernels: dict[str, float] = defaultdict(float)
        classes: dict[str, str] = {}
        for step in group:
            for name, us in step.kernels.items():
                kernels[name] += us
            classes.update(step.classes)
        ranked = sorted(kernels.items(), key=lambda kv: -kv[1])[:top]
        out[key] = Summary(
            kind=key[0], batch_size=key[1], steps=n,
            step_ms=sum(s.step_us for s in group) / n / 1000,
            split_ms={c: sum(s.split_us[c] for s in group) / n / 1000 for c in CLASSES},
            kernel_ms={c: sum(s.kernel_us[c] for s in group) / n / 1000 for c in CLASSES[:-1]},
            top_kernels=[{"name": name, "class": classes[name], "ms": us / n / 1000}
                         for name, us in ranked])
        out[key].step_ms_by_rank = [out[key].step_ms]
    return out


def combine(per_rank: Sequence[Mapping[tuple[str, int | None], Summary]]
            ) -> dict[tuple[str, int | None], Summary]:
    """The mean over ranks of each (kind, batch size) every rank has."""
    if not per_rank:
        return {}
    keys = [k for k in per_rank[0] if all(k in r for r in per_rank)]
    out = {}
    for key in keys:
        items = [r[key] for r in per_rank]
        n = len(items)
        first = items[0]
        out[key] = Summary(
            kind=first.kind, batch_size=first.batch_size, steps=min(s.steps for s in items),
            step_ms=sum(s.step_ms for s in items) / n,
            split_ms={c: sum(s.split_ms[c] for s in items) / n for c in CLASSES},
            kernel_ms={c: sum(s.kernel_ms[c] for s in items) / n for c in CLASSES[:-1]},
            top_kernels=first.top_kernels, ranks=n,
            step_ms_by_rank=[s.step_ms for s in items])
    return out


@dataclass
class Breakdown:
    """A profile's traces read back: per (kind, batch size), the mean over ranks."""

    files: list[str]
    summaries: dict[tuple[str, int | None], Summary]
    device: str  # "gpu" or "cpu"
    skipped_steps: int = 0  # step spans with no work found

    def main(self, kind: str = "verify") -> Summary | None:
        """The ``kind`` summary at its most frequent batch size (the measured one)."""
        found = [s for (k, _), s in self.summaries.items() if k == kind]
        return max(found, key=lambda s: (s.steps, s.batch_size or 0)) if found else None

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "device": self.device,
                "skipped_steps": self.skipped_steps,
                "summaries": [s.to_json() for s in self.summaries.values()]}


def read(paths: Sequence[Path]) -> Breakdown:
    """Read one trace per rank and combine them."""
    per_rank = []
    device = "cpu"
    skipped = 0
    for path in paths:
        events = load_events(path)
        if any(e.get("cat") in GPU_CATS for e in events):
            device = "gpu"
        steps = steps_of(events)
        spans = sum(1 for e in _x_events(events) if e.get("cat") == "user_annotation"
                    and step_kind(str(e.get("name", ""))) is not None)
        skipped += spans - len(steps)
        per_rank.append(summarize(steps))
    return Breakdown([str(p) for p in paths], combine(per_rank), device, skipped)


# ---------------------------------------------------------------- fixtures


def trim(events: Sequence[dict[str, Any]], steps_per_kind: int = 2,
         kinds: Sequence[str] = ("verify", "allreduce_only", "draft")) -> dict[str, Any]:
    """A small trace holding only what ``steps_of`` reads for ``steps_per_kind`` steps of each
    of ``kinds`` (the first of each kind is left out: it can carry the profiler's start-up):
    the spans, their launches, their GPU work or CPU operators, with ``args`` cut down to the
    correlation id. Deterministic: the same trace gives the same events in the same order."""
    spans: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(_x_events(events), key=lambda e: float(e["ts"])):
        kind = step_kind(str(e.get("name", "")))
        if e.get("cat") == "user_annotation" and kind is not None and kind[0] in kinds:
            spans[kind[0]].append(e)
    keep_spans = [e for kind in kinds for e in spans.get(kind, [])[1:steps_per_kind + 1]]
    windows = [_Span(str(e["name"]), e.get("pid"), e.get("tid"), float(e["ts"]),
                     float(e["ts"]) + _dur(e)) for e in keep_spans]
    keep: list[dict[str, Any]] = list(keep_spans)
    corrs = set()
    for e in _x_events(events):
        cat = e.get("cat")
        inside = any(w.pid == e.get("pid") and w.tid == e.get("tid")
                     and w.ts <= float(e["ts"]) <= w.end for w in windows)
        if inside and cat in LAUNCH_CATS:
            keep.append(e)
            corrs.add(_correlation(e))
        elif inside and cat in CPU_WORK_CATS and e not in keep_spans:
            keep.append(e)
    keep += [e for e in _x_events(events) if e.get("cat") in GPU_CATS
             and _correlation(e) is not None and _correlation(e) in corrs]
    slim = []
    for e in sorted(keep, key=lambda e: (float(e["ts"]), str(e.get("name")))):
        item: dict[str, Any] = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur")
                                if k in e}
        corr = _correlation(e)
        if corr is not None:
            item["args"] = {"correlation": corr}
        slim.append(item)
    return {"traceEvents": slim, "servetune_trimmed": {"steps_per_kind": steps_per_kind,
                                                       "kinds": list(kinds)}}
