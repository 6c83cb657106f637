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
    limits = data.get("limits") or []
    if entries:
        stopped = f"; stopped at {data['stopped']}" if data.get("stopped") else ""
        out.append(f"confirm (fresh launches, alternating, at most {data['repeats']} each"
                   f"{stopped}; mean ± 95% CI half-width over launches):")
        out.append(f"  {'config':<12} {'from':<10} {metric:>24} {'verify_ms':>22}  failed"
                   + ("  limits" if limits else "") + "  against the baseline")
        comps = data.get("comparisons") or {}
        for e in entries:
            kept = "; ".join(e.get("limit_breaks") or []) or "kept"
            versus = comps.get(e["label"], {}).get("text", "") if e is not entries[0] else ""
            out.append(f"  {e['label']:<12} {e['source_trial'] or '-':<10} "
                       f"{_interval(e, 'objective').text():>24} "
                       f"{_interval(e, 'verify_ms').text():>22}  {len(e['failed']):>6}"
                       + (f"  {kept}" if limits else "") + (f"  {versus}" if versus else ""))
        spread = [f"{name} {data[key]:.1%}" for key, name in
                  (("launch_spread", "launch to launch"), ("round_spread", "within a launch"))
                  if data.get(key) is not None]
        if spread:
            out.append(f"spread (sd as a share of the mean): {', '.join(spread)}")
    if limits:
        out.append(f"limits: {', '.join(limits)} (a config is kept only within them; in the "
                   "confirm stage, its whole 95% interval)")
    decision = data.get("decision") or {}
    if decision.get("text"):
        out.append("decision: " + decision["text"])
    out += level_lines(data)
    spec = data.get("speculative")
    if spec and spec.get("text"):
        out.append(spec["text"])
    if data.get("interrupted"):
        out.append("the confirm stage was interrupted: its numbers are partial")
    return out


def level_lines(data: Mapping[str, Any]) -> list[str]:
    """The decision at each concurrency level, and whether one config wins them all."""
    levels = data.get("per_level") or []
    if not levels:
        return []
    out = [f"per concurrency level (the search decided at {data.get('decide_at')}):"]
    for item in levels:
        d = item.get("decision") or {}
        out.append(f"  c{item['level']}: {d.get('kind')}: {d.get('label') or '-'}: "
                   f"{d.get('text', '')}")
    if data.get("same_config_text"):
        out.append(str(data["same_config_text"]))
    return out
