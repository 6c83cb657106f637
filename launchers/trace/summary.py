"""Means over steps and ranks, and ``read``: one trace per rank into a Breakdown."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launchers.trace.events import (
    CLASSES,
    COMMUNICATION,
    GPU_CATS,
    OTHER,
    StepSpans,
    load_events,
    resolve,
    step_kind,
    x_events,
)
from launchers.trace.steps import Step, steps_of


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


def read(paths: Sequence[Path], spans: Sequence[StepSpans] | None = None) -> Breakdown:
    """Read one trace per rank and combine them; ``spans``: the workload's step span names
    (default: every workload's)."""
    names = resolve(spans)
    per_rank = []
    device = "cpu"
    skipped = 0
    for path in paths:
        events = load_events(path)
        if any(e.get("cat") in GPU_CATS for e in events):
            device = "gpu"
        steps = steps_of(events, names)
        marked = sum(1 for e in x_events(events) if e.get("cat") == "user_annotation"
                     and step_kind(str(e.get("name", "")), names) is not None)
        skipped += marked - len(steps)
        per_rank.append(summarize(steps))
    return Breakdown([str(p) for p in paths], combine(per_rank), device, skipped)

