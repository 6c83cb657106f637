"""A trial's own files in DIR/<trial id>/: trial.json (written by the trial as it runs:
``launchers.base.TrialRecord``), read and brought in line with the journal; effective.json
(what NCCL ran, from its own log) and failure.json (how a failed trial failed), written by
``tuner.run.trial``; nodes.json (a trial across nodes), written by ``tuner.run.multinode``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from tuner.record.base import Record
from tuner.record.events import FailureInfo
from tuner.record.files import (
    EFFECTIVE_JSON,
    FAILURE_JSON,
    NODES_JSON,
    PLAN_JSON,
    TRIAL_JSON,
    write_json,
    write_whole,
)
from tuner.record.info import Entry, read_entries, read_record, write_entries, write_record

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
    write_whole(folder / TRIAL_JSON, lambda f: f.write(json.dumps(record, indent=1, default=str)))
    return True


class Effective(Record):
    """effective.json: what NCCL ran in a trial, as the workload read it from NCCL's own log
    (``launchers.nccl_log.EffectiveNccl.to_json``, its table columns and the mismatches with
    what was asked); its other keys kept as written."""

    nranks: int | None = None
    choices: list[dict[str, Any]] = Field(default_factory=list)  # NCCL's TUNING lines
    columns: dict[str, Any] = Field(default_factory=dict)  # for results.csv
    warnings: list[str] = Field(default_factory=list)


def read_effective(folder: Path) -> Effective | None:
    """What NCCL ran in the trial (its effective.json); None without, or unreadable."""
    return read_record(folder / EFFECTIVE_JSON, Effective)


def write_plan(folder: Path, plan: Mapping[str, Any]) -> None:
    """The trial's plan.json (``launchers.base.LaunchPlan.to_json``), before it launches."""
    write_json(folder / PLAN_JSON, dict(plan))


def write_effective(folder: Path, effective: Mapping[str, Any]) -> None:
    """The trial's effective.json (the workload's reading of NCCL's log, kept as it gave it)."""
    write_record(folder / EFFECTIVE_JSON, Effective.model_validate(effective))


def write_failure(folder: Path, failure: FailureInfo | Mapping[str, Any]) -> None:
    """The trial's failure.json (``launchers.failures.Failure.to_json``)."""
    write_json(folder / FAILURE_JSON, FailureInfo.model_validate(failure).dump())


class NodeRecord(Entry):
    """One node of a trial across nodes, as its nodes.json has it (``tuner.run.multinode``
    writes it once the trial's servers start; its other keys kept as written)."""

    rank: int | None = None
    node_id: str | None = None
    address: str | None = None
    hostname: str | None = None


def read_nodes(path: Path) -> list[NodeRecord]:
    """A trial's nodes.json (its nodes once its servers started, node 0 first); [] without."""
    return list(read_entries(path, NodeRecord))


def write_nodes(folder: Path, nodes: Sequence[NodeRecord]) -> None:
    """The trial's nodes.json, node 0 first (each node's keys as given)."""
    write_entries(folder / NODES_JSON, [n.dump() for n in nodes])
