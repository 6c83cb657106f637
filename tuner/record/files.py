"""The experiment folder's files, their names and how they are written: JSON atomically,
the journal (results.jsonl) one flushed line per event. The typed records
(``tuner.record``) read and write through these; other modules name the files from here."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

SPEC_JSON = "servetune.json"  # the experiment's spec (tuner.spec.ExperimentSpec)
JOURNAL = "results.jsonl"  # every trial event as it happened
REJECTED = "rejected.jsonl"  # suggestions never launched (invalid, ruled out, repeats)
RESULTS_CSV = "results.csv"
BEST_JSON = "best.json"
BEST_DIR = "best"
CONFIRM_JSON = "confirm.json"
RULED_OUT_JSON = "ruled_out.json"
STAGES_JSON = "stages.json"
RUN_JSON = "run.json"
INPUTS_JSON = "inputs.json"  # what the workload measures with (its prompts)
SCREEN_JSON = "screen.json"  # --screen proxy: the proxy's ranking against the server's
BROKEN_JSON = "broken_environment.json"  # why the search stopped: the environment
SUSPECTS_JSON = "suspects.json"  # failed, not ruled out
COMPLETED = "completed.jsonl"  # suggestions completed with the baseline's partners
PLAN_JSON = "plan.json"  # a trial's launch plan: its command and environment
TRIAL_JSON = "trial.json"  # a trial's own record (launchers.base.TrialRecord)
EFFECTIVE_JSON = "effective.json"  # what NCCL ran in a trial
NODES_JSON = "nodes.json"  # a trial across nodes: its nodes once their servers started
PROFILE_DIR = "profile"  # servetune profile's outputs
PROFILE_JSON = "profile.json"  # in PROFILE_DIR: every configuration profiled
PROFILE_ENTRY_JSON = "entry.json"  # in PROFILE_DIR/<label>: one configuration's
FAILURE_JSON = "failure.json"  # a failed trial's failure, in its folder
LAUNCH_SH = "launch.sh"  # in BEST_DIR: the decided configuration's launch command


def _plain(value: Any) -> Any:
    """A record inside plain data as its file holds it (``Frozen.dump``); else its text."""
    dump = getattr(value, "dump", None)
    return dump() if callable(dump) else str(value)


_WRITES = itertools.count()  # this process's writes: each its own temp name


def write_whole(path: Path, write: Callable[[TextIO], object]) -> None:
    """``write`` into a temporary file of this writer's own beside ``path``, then renamed over
    it: a reader sees the old file or the new one, and two writers at once (the driver and a
    ``servetune report`` during its run) each rename their own (a shared temp name lost the
    race: one writer's rename found the file gone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_WRITES)}.tmp")
    try:
        with tmp.open("w") as handle:  # the umask's mode, as the file had before
            write(handle)
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_json(path: Path, data: Any) -> None:
    write_whole(path, lambda f: f.write(json.dumps(data, indent=2, default=_plain)))


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def append_jsonl(path: Path, entry: Mapping[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(entry, default=_plain) + "\n")
        f.flush()


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every complete line of a journal (a line cut by a crash is skipped)."""
    entries = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries
