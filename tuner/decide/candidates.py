"""What the confirm stage launches, from the search's typed rows (``tuner.record.rows``):
the baseline, then the best distinct configurations within the limits; and the search's own
pick when no confirm stage runs. No files: the rows and the settings are given."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from search_spaces.knobs import Value
from tuner.decide.decision import Decision
from tuner.record.rows import ResultRow, Rows, best, by_id, ranked, rows_of, search_rows
from tuner.spec import Objective
from tuner.stats import finite


@dataclass
class Candidate:
    label: str  # "baseline", "top 1", ...
    config: dict[str, Value]
    source_trial: str | None  # the search trial it comes from
    search_score: float | None


def key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(config), sort_keys=True, default=str)


def baseline_row(rows: Rows) -> ResultRow | None:
    """The search's first baseline row."""
    return next((r for r in search_rows(rows_of(rows)) if r.baseline), None)


def candidates(table: Rows, configs: Mapping[str, Mapping[str, Value]],
               baseline: Mapping[str, Value], mode: str, top: int,
               objective: Objective | None = None, spread: float = 0.0) -> list[Candidate]:
    """The baseline, then the best ``top`` distinct non-baseline configs that completed every
    round of the search within the limits, and after them any within ``spread`` (one
    launch's sd, on the log scale) of the best: a single launch cannot rank those (twice
    ``top`` at most); with several concurrency levels, also each other level's best
    (``best c<level>``) when it is not among them."""
    search = search_rows(rows_of(table))
    base = next((r for r in search if r.baseline), None)
    out = [Candidate("baseline", dict(baseline), base.trial_id if base else None,
                     finite(base.score) if base else None)]
    done = [r for r in search if r.done and not r.baseline]
    seen = {key(baseline)}
    first: float | None = None
    for row in ranked([r for r in done if r.within()], "score", mode):
        config = dict(configs.get(row.trial_id, {}))
        score = finite(row.score)
        if not config or key(config) in seen:
            continue
        first = score if first is None else first
        tied = score is not None and first is not None and score > 0 and first > 0 and \
            abs(math.log(score / first)) <= spread
        if len(out) > top and (not tied or len(out) > 2 * top):
            break
        seen.add(key(config))
        out.append(Candidate(f"top {len(out)}", config, row.trial_id, score))
    levels = objective.levels if objective is not None and objective.per_level else ()
    for level in levels:
        assert objective is not None
        column = objective.column(level)
        at = [r for r in done if r.within(level, objective)]
        for row in ranked(at, column, mode)[:1]:
            config = dict(configs.get(row.trial_id, {}))
            if config and key(config) not in seen and level != objective.decide_at:
                seen.add(key(config))
                out.append(Candidate(f"best c{level}", config, row.trial_id,
                                     finite(row.score)))
    return out


def search_decision(table: Rows, configs: Mapping[str, Mapping[str, Value]],
                    objective: Objective, why: str) -> Decision:
    """The search's best, unconfirmed (no confirm stage ran)."""
    row = best(search_rows(rows_of(table)), objective)
    if row is None or row.score is None:
        return Decision("none", "no trial completed every round: no configuration to recommend")
    tid = row.trial_id
    speedup = math.nan if row.speedup is None else row.speedup
    return Decision("unconfirmed", f"{tid} is the search's best ({objective.metric} "
                    f"{row.score:.4g}, {speedup:.3f}x the baseline), not checked "
                    f"against noise ({why})", "top 1", dict(configs.get(tid, {})), tid)


def search_score(table: Rows, trial_id: str | None) -> float | None:
    """A trial's score in the search (None when it has none)."""
    row = by_id(rows_of(table)).get(trial_id) if trial_id else None
    return finite(row.score) if row is not None else None
