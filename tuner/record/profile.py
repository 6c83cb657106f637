"""``servetune profile``'s files: DIR/profile/<label>/entry.json (one configuration's
profile, written as it ends) and DIR/profile/profile.json (every entry, the breakdown table
and the plot's name), and the short form of profile.json that reports read
(``ProfileSummary``). Written by ``tuner.run.profile``, read by
``tuner.output.profile_report``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from launchers.trace import CLASSES
from tuner.record.base import Frozen, Record
from tuner.record.events import FailureInfo
from tuner.record.files import PROFILE_DIR, PROFILE_ENTRY_JSON, PROFILE_JSON, write_json
from tuner.record.info import read_record


class StepRecord(Frozen):
    """One kind of step, its mean over steps and ranks (``launchers.trace.Summary.to_json``),
    in milliseconds."""

    kind: str | None = None
    batch_size: int | None = None
    steps: int | None = None
    ranks: int | None = None
    step_ms: float = 0.0
    split_ms: dict[str, float] = Field(default_factory=dict)
    communication_ms: float = 0.0
    compute_ms: float = 0.0
    other_ms: float = 0.0
    sentence: str = ""
    top_kernels: list[dict[str, Any]] = Field(default_factory=list)

    def split(self, name: str) -> float:
        """The mean ms per step of one class of work (``launchers.trace.CLASSES``)."""
        return float(self.split_ms.get(name, 0.0))


class ProfileEntry(Record):
    """One configuration's profile: how it was launched, what its one measured round gave
    and where its verify step's time went (``verify``; None when it failed)."""

    label: str
    trial_id: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    status: str = "failed"  # ok | failed
    failure: FailureInfo | None = None
    notes: list[str] = Field(default_factory=list)
    measured: dict[str, Any] = Field(default_factory=dict)
    traces: list[str] = Field(default_factory=list)
    device: str | None = None
    skipped_steps: int | None = None
    breakdown: list[dict[str, Any]] = Field(default_factory=list)
    verify: StepRecord | None = None
    sentence: str | None = None
    draft: StepRecord | None = None
    profiled_exposed_ms: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.verify is not None

    @property
    def name(self) -> str:
        """How tables and plots name it: its label, with its trial where it has one."""
        return f"{self.label} ({self.trial_id})" if self.trial_id else self.label

    def measured_ms(self, metric: str) -> float | None:
        value = self.measured.get(metric)
        return float(value) if isinstance(value, (int, float)) else None


class ProfileRecord(Record):
    """profile.json."""

    version: int = 1
    workload: str | None = None
    steps: int | None = None
    created: str | None = None
    gpu_ids: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    entries: list[ProfileEntry] = Field(default_factory=list)
    table: list[str] = Field(default_factory=list)
    plot: str | None = None

    @property
    def on_cpu(self) -> bool:
        return any(e.device == "cpu" for e in self.entries)


class SummaryEntry(Frozen):
    """An entry of the short form: numbers in ms per verify step (None for a failed one)."""

    label: str
    trial_id: str | None = None
    status: str = "failed"
    failure_kind: str | None = None
    failure: str | None = None
    sentence: str | None = None
    step_ms: float | None = None
    communication_ms: float | None = None
    compute_ms: float | None = None
    other_ms: float | None = None
    collective_ms: float | None = None
    custom_allreduce_ms: float | None = None
    memcpy_ms: float | None = None
    gap_ms: float | None = None
    steps: int | None = None
    ranks: int | None = None
    batch_size: int | None = None
    measured_verify_ms: float | None = None
    device: str | None = None
    top_kernels: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, entry: ProfileEntry) -> SummaryEntry:
        v = entry.verify
        figures: dict[str, Any] = {} if v is None else {
            "step_ms": v.step_ms,
            "communication_ms": v.communication_ms, "compute_ms": v.compute_ms,
            "other_ms": v.other_ms, "steps": v.steps, "ranks": v.ranks,
            "batch_size": v.batch_size, "top_kernels": v.top_kernels,
            **{f"{c}_ms": v.split_ms.get(c) for c in CLASSES if c != "compute"}}
        failure = entry.failure
        return cls(label=entry.label, trial_id=entry.trial_id, status=entry.status,
                   sentence=entry.sentence,
                   failure_kind=failure.kind if failure else None,
                   failure=failure.message if failure else None,
                   measured_verify_ms=entry.measured_ms("verify_ms"), device=entry.device,
                   notes=entry.notes, **figures)


class ProfileSummary(Frozen):
    """profile.json in short form, for reports: ``plot`` is breakdown.png's absolute path
    (None without one), ``table`` the breakdown's text lines."""

    workload: str | None = None
    steps: int | None = None
    created: str | None = None
    plot: str | None = None
    table: list[str] = Field(default_factory=list)
    entries: list[SummaryEntry] = Field(default_factory=list)


def profile_dir(out_dir: Path) -> Path:
    return Path(out_dir) / PROFILE_DIR


def write_entry(folder: Path, entry: ProfileEntry) -> None:
    """A configuration's entry.json, in its own folder."""
    write_json(folder / PROFILE_ENTRY_JSON, entry.dump())


def write_profile(out_dir: Path, doc: ProfileRecord) -> None:
    write_json(profile_dir(out_dir) / PROFILE_JSON, doc.dump())


def read_profile(out_dir: Path) -> ProfileRecord | None:
    """An experiment's profile.json; None without one."""
    return read_record(profile_dir(out_dir) / PROFILE_JSON, ProfileRecord)
