"""Suggestions completed with their partners (completed.jsonl, written by the searchers' filter):
a lever the workload's checks refuse alone (SGLang: topk or draft tokens without steps) ran
with its partners set as the workload resolved them for the baseline. No Ray."""

from __future__ import annotations

from collections import Counter

from tuner.record.experiment import Folder, loaded
from tuner.record.files import COMPLETED

__all__ = ["COMPLETED", "lines", "read"]


def read(folder: Folder) -> Counter[str]:
    """How many suggestions each set of partners completed (``--a=1, --b=2`` -> count)."""
    found: Counter[str] = Counter()
    for entry in loaded(folder).completed:
        found[", ".join(f"{n}={v}" for n, v in sorted(entry.partners.items()))] += 1
    return found


def lines(folder: Folder) -> list[str]:
    """The run's one line about them (none when no suggestion needed its partners)."""
    found = read(folder)
    if not found:
        return []
    shown = "; ".join(f"{text} ({n}x)" for text, n in found.most_common(3))
    more = f"; {len(found) - 3} more" if len(found) > 3 else ""
    return [f"partners completed: {sum(found.values())} suggestions the checks refuse alone ran "
            f"with the baseline's resolved values of their partners: {shown}{more} ({COMPLETED})"]
