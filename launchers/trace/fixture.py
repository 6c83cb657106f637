"""``trim``: a small trace holding what the parser reads, for test fixtures."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from launchers.trace.events import (
    CPU_WORK_CATS,
    GPU_CATS,
    LAUNCH_CATS,
    StepSpans,
    correlation,
    dur,
    resolve,
    step_kind,
    x_events,
)
from launchers.trace.steps import Span


def trim(events: Sequence[dict[str, Any]], steps_per_kind: int = 2,
         kinds: Sequence[str] = ("verify", "compute_only", "comm_alone", "draft"),
         spans: Sequence[StepSpans] | None = None) -> dict[str, Any]:
    """A small trace holding only what ``steps_of`` reads for ``steps_per_kind`` steps of each
    of ``kinds`` (the first of each kind is left out: it can carry the profiler's start-up):
    the spans, their launches, their GPU work or CPU operators, with ``args`` cut down to the
    correlation id. Deterministic: the same trace gives the same events in the same order."""
    names = resolve(spans)
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(x_events(events), key=lambda e: float(e["ts"])):
        kind = step_kind(str(e.get("name", "")), names)
        if e.get("cat") == "user_annotation" and kind is not None and kind[0] in kinds:
            found[kind[0]].append(e)
    keep_spans = [e for kind in kinds for e in found.get(kind, [])[1:steps_per_kind + 1]]
    windows = [Span(str(e["name"]), e.get("pid"), e.get("tid"), float(e["ts"]),
                     float(e["ts"]) + dur(e)) for e in keep_spans]
    keep: list[dict[str, Any]] = list(keep_spans)
    corrs = set()
    for e in x_events(events):
        cat = e.get("cat")
        inside = any(w.pid == e.get("pid") and w.tid == e.get("tid")
                     and w.ts <= float(e["ts"]) <= w.end for w in windows)
        if inside and cat in LAUNCH_CATS:
            keep.append(e)
            corrs.add(correlation(e))
        elif inside and cat in CPU_WORK_CATS and e not in keep_spans:
            keep.append(e)
    keep += [e for e in x_events(events) if e.get("cat") in GPU_CATS
             and correlation(e) is not None and correlation(e) in corrs]
    slim = []
    for e in sorted(keep, key=lambda e: (float(e["ts"]), str(e.get("name")))):
        item: dict[str, Any] = {k: e[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur")
                                if k in e}
        corr = correlation(e)
        if corr is not None:
            item["args"] = {"correlation": corr}
        slim.append(item)
    return {"traceEvents": slim, "servetune_trimmed": {"steps_per_kind": steps_per_kind,
                                                       "kinds": list(kinds)}}

