"""What the search proposed and never launched (rejected.jsonl, written by the searchers'
filter): proposals answered by an earlier trial (the same configuration, or a resolved twin:
another configuration the server resolves alike), refused by SGLang's own checks (its text
kept), invalid under the space's rules, or ruled out by the failure memory."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from search_spaces.knobs import without_weights
from tuner.record.experiment import Folder, loaded
from tuner.record.files import REJECTED


@dataclass
class NotLaunched:
    repeats: int = 0  # the configuration of an earlier trial, proposed again
    twins: int = 0  # another configuration that resolves as an earlier trial's
    refused: Counter[str] = field(default_factory=Counter)  # SGLang's text -> proposals
    invalid: int = 0  # the space's own rules
    ruled_out: int = 0  # the failure memory

    @property
    def total(self) -> int:
        return self.repeats + self.twins + sum(self.refused.values()) + self.invalid + \
            self.ruled_out

    def line(self) -> str | None:
        """The run's one line about them (None: every proposal was launched)."""
        if not self.total:
            return None
        parts = [f"{self.twins} answered by a resolved twin (a trial the server runs alike)"
                 if self.twins else "",
                 f"{self.repeats} answered by the same configuration's trial"
                 if self.repeats else "",
                 f"{sum(self.refused.values())} refused by SGLang's checks"
                 if self.refused else "",
                 f"{self.invalid} invalid under the space's rules" if self.invalid else "",
                 f"{self.ruled_out} ruled out by the failure memory" if self.ruled_out else ""]
        return (f"proposals not launched: {self.total} ("
                + ", ".join(p for p in parts if p) + f"; {REJECTED})")


def read(folder: Folder) -> NotLaunched:
    out = NotLaunched()
    exp = loaded(folder)
    launched = exp.settings()
    for entry in exp.rejected:
        if entry.repeat:
            first = launched.get(str(entry.repeat_of))
            if first is not None and first == without_weights(entry.config):
                out.repeats += 1
            else:
                out.twins += 1
            continue
        sglang = [r for r in entry.invalid if "SGLang" in r]
        if sglang:
            out.refused[" ".join(sglang[0].split())] += 1
        elif entry.invalid:
            out.invalid += 1
        elif entry.ruled_out:
            out.ruled_out += 1
    return out


def lines(folder: Folder) -> list[str]:
    """The end-of-search line (none when every proposal was launched)."""
    text = read(folder).line()
    return [text] if text else []


def refusals(folder: Folder, top: int = 3) -> list[str]:
    """SGLang's own words on the proposals it refused, most frequent first."""
    return [f"refused by SGLang's checks ({n}x, never launched): {text[:300]}"
            for text, n in read(folder).refused.most_common(top)]
