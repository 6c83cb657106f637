"""confirm.json on disk (as ``tuner.record.confirm.ConfirmRecord``), and its text: the
confirm table and the verdicts for the terminal and report.md."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.record.confirm import ConfirmRecord
from tuner.record.files import CONFIRM_JSON
from tuner.record.info import read_record, write_record

Confirm = ConfirmRecord | Mapping[str, Any]


def load(out: Path) -> ConfirmRecord | None:
    return read_record(out / CONFIRM_JSON, ConfirmRecord)


def write(out: Path, data: Confirm) -> ConfirmRecord:
    """confirm.json through its record; the record written."""
    record = ConfirmRecord.of(data)
    assert record is not None
    write_record(out / CONFIRM_JSON, record)
    return record


def lines(data: Confirm) -> list[str]:
    """The confirm table and the verdicts."""
    record = ConfirmRecord.of(data)
    assert record is not None
    out: list[str] = []
    entries = record.entries
    metric = record.metric
    limits = record.limits
    if entries:
        stopped = f"; stopped at {record.stopped}" if record.stopped else ""
        out.append(f"confirm (fresh launches, alternating, at most {record.repeats} each"
                   f"{stopped}; mean ± 95% CI half-width over launches):")
        out.append(f"  {'config':<12} {'from':<10} {metric:>24} {'verify_ms':>22}  failed"
                   + ("  limits" if limits else "") + "  against the baseline")
        comps = record.comparisons
        for e in entries:
            kept = "; ".join(e.limit_breaks or []) or "kept"
            versus = comps.get(e.label, {}).get("text", "") if e is not entries[0] else ""
            out.append(f"  {e.label:<12} {e.source_trial or '-':<10} "
                       f"{e.objective.text():>24} "
                       f"{e.verify_ms.text():>22}  {len(e.failed):>6}"
                       + (f"  {kept}" if limits else "") + (f"  {versus}" if versus else ""))
        spread = [f"{name} {value:.1%}" for value, name in
                  ((record.launch_spread, "launch to launch"),
                   (record.round_spread, "within a launch")) if value is not None]
        if spread:
            out.append(f"spread (sd as a share of the mean): {', '.join(spread)}")
    if limits:
        out.append(f"limits: {', '.join(limits)} (a config is kept only within them; in the "
                   "confirm stage, its whole 95% interval)")
    if record.decided.text:
        out.append("decision: " + record.decided.text)
    out += level_lines(record)
    if record.speculative is not None and record.speculative.text:
        out.append(record.speculative.text)
    if record.interrupted:
        out.append("the confirm stage was interrupted: its numbers are partial")
    return out


def level_lines(data: Confirm) -> list[str]:
    """The decision at each concurrency level, and whether one config wins them all."""
    record = ConfirmRecord.of(data)
    if record is None or not record.per_level:
        return []
    out = [f"per concurrency level (the search decided at {record.decide_at}):"]
    for item in record.per_level:
        d = item.decision
        out.append(f"  c{item.level}: {d.kind}: {d.label or '-'}: {d.text}")
    if record.same_config_text:
        out.append(str(record.same_config_text))
    return out
