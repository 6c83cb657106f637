"""The words for a broken environment: the search stopped because the default configuration
(or every one of the first trials, whatever its settings) failed the same way. Read back from
DIR/broken_environment.json, so ``servetune report`` says it too."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tuner.record.files import BROKEN_JSON
from tuner.record.info import BrokenRecord, read_record, write_record

TAIL_LINES = 12


def write(out_dir: Path, verdict: BrokenRecord | Mapping[str, Any]) -> None:
    write_record(out_dir / BROKEN_JSON, BrokenRecord.model_validate(verdict))


def load(out_dir: Path) -> BrokenRecord | None:
    return read_record(out_dir / BROKEN_JSON, BrokenRecord)


def set_aside(out_dir: Path) -> None:
    """A user's stop came with the verdict (the stop itself can fail the baseline's launch):
    the verdict is dropped, and ``--resume`` checks the environment again."""
    (out_dir / BROKEN_JSON).unlink(missing_ok=True)


def lines(data: BrokenRecord, out_dir: Path) -> list[str]:
    """One paragraph, then the server log's last lines, then what to do."""
    trials = data.trials
    first = trials[-1] if data.reason == "baseline" and trials else \
        (trials[0] if trials else "?")
    failed = f"{data.kind}: {data.message}"
    if data.reason == "baseline":
        what = f"The baseline (no overrides, trial {first}) failed ({failed})."
    else:
        what = (f"The first {len(trials)} trials ({', '.join(trials)}) all failed the same way "
                f"({failed}), and they have no setting in common.")
    hint = f" Hint: {data.hint}." if data.hint else ""
    paragraph = (f"{what} The environment, not a setting, is broken: the server command, the "
                 "model, the GPUs or the installed software fail whatever the settings, so the "
                 "search stopped here and ruled nothing out." + hint)
    out = ["", paragraph]
    tail = [ln for ln in data.log_tail.splitlines() if ln.strip()]
    if tail:
        out.append(f"last lines of {out_dir / first / 'server.log'}:")
        out += [f"    {ln}" for ln in tail[-TAIL_LINES:]]
    out.append(f"Fix the environment (the command is in {out_dir / first / 'plan.json'}) and "
               "start a new experiment.")
    return out
