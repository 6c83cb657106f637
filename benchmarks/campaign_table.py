"""Per trial of a finished (or stopped) sglang experiment: what ran, how it ended, where its
start went and what it measured, as a Markdown table (BENCHMARKS.md's real-SGLang campaign).

    python -m benchmarks.campaign_table runs/sglang-h200

Reads each trial folder (the search's and the confirm stage's): trial.json (status, failure,
timings with SGLang's own startup milestones, rounds) and resolved.json / server_resolved.json
(what SGLang resolved before the launch and what the server reported). The import floor of a
start is launch -> ``Load weight begin`` (two processes importing SGLang, before any work that
depends on the configuration); the table gives each ready time against it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from launchers.sglang import resolved

COLUMNS = ("trial", "phase", "ended", "SGLang resolved (steps, topk, draft)", "setup s",
           "trial s", "ready s", "imported s", "scheduler s", "load begin s", "graphs s", "ready / floor",
           "teardown s", "verify ms", "tok/s")


def _mean(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if isinstance(r.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def _num(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def row(folder: Path, phase: str) -> list[str] | None:
    try:
        trial = json.loads((folder / "trial.json").read_text())
    except (OSError, ValueError):
        return None
    timings = trial.get("timings", {})
    failure = trial.get("failure") or {}
    ended = trial.get("status", "?") if not failure else f"{failure.get('kind')}"
    shown = resolved.load(folder)
    shape = ", ".join(str(shown.get(f"speculative_{k}", "-"))
                      for k in ("num_steps", "eagle_topk", "num_draft_tokens")) if shown else "-"
    ready, floor = timings.get("ready_s"), timings.get("startup_load_begin_at_s")
    ratio = f"{ready / floor:.2f}" if ready and floor else "-"
    rounds = trial.get("rounds", [])
    return [folder.name, phase, ended, shape, _num(timings.get("setup_s")),
            _num(timings.get("total_s")), _num(ready),
            _num(timings.get("startup_imported_at_s")),
            _num(timings.get("startup_scheduler_at_s")), _num(floor),
            _num(timings.get("startup_graphs_s")), ratio, _num(timings.get("teardown_s"), 2),
            _num(_mean(rounds, "verify_ms"), 4), _num(_mean(rounds, "output_throughput"))]


def rows(out: Path) -> list[list[str]]:
    """Every trial the journal (results.jsonl) started, in order, with its phase."""
    found: dict[str, list[str]] = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") != "start" or event["trial_id"] in found:
            continue
        where = str(event.get("dir", "")).split(f"/{out.name}/", 1)  # as run, elsewhere
        folder = out / where[1] if len(where) == 2 else out / event["trial_id"]
        line_ = row(folder, event.get("phase") or event.get("stage") or "search")
        if line_ is not None:
            found[event["trial_id"]] = line_
    return list(found.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", type=Path)
    args = p.parse_args(argv)
    table = rows(args.experiment)
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for line in table:
        print("| " + " | ".join(line) + " |")
    return 0 if table else 1


if __name__ == "__main__":
    sys.exit(main())
