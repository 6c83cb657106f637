"""What the failure memory ruled out and what it only suspects, as the experiment folder keeps
them (ruled_out.json, suspects.json, written at the end of a run from the journal) and as a
report shows them: plain data, no Ray, so ``servetune report DIR`` reads them as they are.

Ruled out: failed where nothing else explains it, in contexts that differ in the levers that
matter for the failure's kind; not launched again. Suspect: failed, but only beside one
setting of those levers (or never at the end the failure table points to); retried beside
other values of them, not ruled out."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tuner.record.experiment import Folder, loaded
from tuner.record.files import RULED_OUT_JSON, SUSPECTS_JSON
from tuner.record.info import write_entries

__all__ = ["SUSPECTS_JSON", "evidence_lines", "load", "ruled_out_table", "suspects_table",
           "write"]
Table = list[list[str]]  # the first row is the header


def _value(value: Any) -> str:
    return "unset" if value is None else str(value)


def _setting(item: Mapping[str, Any]) -> str:
    return f"{item.get('knob')}={_value(item.get('value'))}"


def _trials(item: Mapping[str, Any]) -> str:
    return ", ".join(map(str, item.get("trials") or []))


def where_text(where: Iterable[Mapping[str, Any]]) -> str:
    """The levers' values in each failure: ``a=1, b=unset; a=2, b=unset``."""
    return "; ".join(", ".join(f"{n}={_value(v)}" for n, v in w.items()) for w in where)


def evidence_lines(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """ruled_out.json's entries (``FailureMemory.evidence``) as lines: what was ruled out, in
    which trials, where (the levers that matter and their values) and why."""
    lines = []
    for item in items:
        where = where_text(item.get("where") or [])
        lines.append(f"{_setting(item)}: {item.get('kind')} in {_trials(item)}"
                     + (f", beside {where}" if where else "") + f" ({item.get('why')})")
    return lines


def ruled_out_table(items: Sequence[Mapping[str, Any]]) -> Table:
    """What the failure memory ruled out, each with its evidence: the failing trials and
    the trials that cleared the rest of their settings."""
    if not items:
        return []
    rows: Table = [["setting", "failure", "failed in", "evidence"]]
    rows += [[_setting(item), str(item.get("kind")), _trials(item), str(item.get("why") or "-")]
             for item in items]  # (the why names the levers' values it failed beside)
    return rows


def suspects_table(items: Sequence[Mapping[str, Any]]) -> Table:
    """What only failed beside one setting of the levers that matter: suspect, not ruled out."""
    if not items:
        return []
    rows: Table = [["setting", "failure", "failed in", "beside", "why not ruled out"]]
    rows += [[_setting(item), str(item.get("kind")), _trials(item),
              where_text(item.get("where") or []) or "-", str(item.get("why") or "-")]
             for item in items]
    return rows


def write(out: Path, ruled: Sequence[Mapping[str, Any]],
          suspects: Sequence[Mapping[str, Any]]) -> None:
    """ruled_out.json and suspects.json, each where it has entries; an older one (a resumed
    run's earlier end) is removed where it has none now."""
    for name, items in ((RULED_OUT_JSON, ruled), (SUSPECTS_JSON, suspects)):
        if items:
            write_entries(out / name, [dict(i) for i in items])
        else:
            with contextlib.suppress(FileNotFoundError):
                (out / name).unlink()


def load(folder: Folder) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ruled out, suspects) as the folder keeps them; empty where a file is missing."""
    exp = loaded(folder)
    return [i.dump() for i in exp.ruled_out], [i.dump() for i in exp.suspects]
