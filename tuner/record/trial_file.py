"""A trial's own record, DIR/<trial id>/trial.json (written by the trial as it runs:
``launchers.base.TrialRecord``), read and brought in line with the journal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuner.record.files import EFFECTIVE_JSON, TRIAL_JSON

ENDED = ("ok", "stopped", "failed")


def read_trial(folder: Path) -> dict[str, Any] | None:
    """The trial's record as written; None when it has none (yet)."""
    try:
        data = json.loads((folder / TRIAL_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def reconcile(folder: Path, status: str) -> bool:
    """A trial whose worker was killed before it could record its end still says "running":
    ``status`` (how the journal says it ended) goes in, with a warning. True when changed."""
    record = read_trial(folder)
    if record is None or record.get("status") != "running" or status not in ENDED:
        return False
    record["status"] = status
    record.setdefault("warnings", []).append(
        "status taken from the journal: the trial's worker ended before it recorded its end")
    path = folder / TRIAL_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    tmp.replace(path)
    return True


def read_effective(folder: Path) -> dict[str, Any] | None:
    """What NCCL ran in the trial (its effective.json, from NCCL's own log); None without."""
    try:
        data = json.loads((folder / EFFECTIVE_JSON).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_nodes(path: Path) -> list[Any]:
    """A trial's nodes.json (its nodes once its servers started, node 0 first); [] without."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return []
    return data if isinstance(data, list) else []
