"""confirm.json on disk, and its text: the confirm table and the verdicts for the terminal
and report.md."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.output.files import CONFIRM_JSON, read_json, write_json
from tuner.stats import Interval


def load(out: Path) -> dict[str, Any] | None:
    data = read_json(out / CONFIRM_JSON)
    return data if isinstance(data, dict) else None


def write(out: Path, data: Mapping[str, Any]) -> None:
    write_json(out / CONFIRM_JSON, data)


def _interval(entry: Mapping[str, Any], key: str) -> Interval:
    return Interval(**entry[key])


def lines(data: Mapping[str, Any]) -> list[str]:
    """The confirm table and the verdicts."""
    out: list[str] = []
    entries = data.get("entries") or []
    metric = data.get("metric", "score")
    if entries:
        out.append(f"confirm ({data['repeats']} fresh launches each, mean ± 95% CI half-width):")
        out.append(f"  {'config':<12} {'from':<10} {metric:>24} {'verify_ms':>22}  failed")
        for e in entries:
            out.append(f"  {e['label']:<12} {e['source_trial'] or '-':<10} "
                       f"{_interval(e, 'objective').text():>24} "
                       f"{_interval(e, 'verify_ms').text():>22}  {len(e['failed'])}")
    decision = data.get("decision") or {}
    if decision.get("text"):
        out.append("decision: " + decision["text"])
    spec = data.get("speculative")
    if spec and spec.get("text"):
        out.append(spec["text"])
    if data.get("interrupted"):
        out.append("the confirm stage was interrupted: its numbers are partial")
    return out
