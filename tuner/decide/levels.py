"""The decision per concurrency level. Each round measures every level (the workload reports
each metric per level as ``<name>_c<level>``); the search optimises one (``--decide-at``),
but each level gets its own winner from the same evidence: the confirm launches' intervals
at that level, or the search's means at that level when nothing was confirmed, each within
the limits at that level. ``same_winner`` says whether one configuration wins them all.
``level`` None means the plain names (the level the search decides at)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tuner.decide.candidates import Candidate
from tuner.decide.confirm import attach, decide_confirmed, unconfirmed
from tuner.decide.decision import Decision
from tuner.record.rows import BREAKS, Rows, by_id, level_key, rows_of, search_rows
from tuner.spec import Objective
from tuner.stats import finite


def entries_at(entries: Sequence[Mapping[str, Any]], level: int | None, objective: Objective
               ) -> list[dict[str, Any]]:
    """Confirm entries with the figures of ``level`` in place of the plain ones."""
    if level is None or not objective.per_level:
        return [dict(e) for e in entries]
    return [{**e, **(e.get("levels") or {}).get(str(level), {})} for e in entries]


def candidates_at(table: Rows, cands: Sequence[Candidate], level: int | None,
                  objective: Objective) -> tuple[list[Candidate], list[str]]:
    """The candidates scored at ``level`` (the baseline first, then the best first), those
    outside the level's limits left out; and the limits the baseline breaks there."""
    search = by_id(search_rows(rows_of(table)))
    column = objective.column(level)
    within = {tid for tid, r in search.items() if r.within(level, objective)}

    def at(cand: Candidate) -> Candidate:
        row = search.get(cand.source_trial) if cand.source_trial else None
        score = finite(row.cell(column)) if row is not None else None
        return Candidate(cand.label, cand.config, cand.source_trial, score)

    others = [at(c) for c in cands[1:] if c.source_trial in within]
    others = sorted((c for c in others if c.search_score is not None),
                    key=lambda c: c.search_score or 0.0, reverse=objective.mode == "max")
    base = search.get(cands[0].source_trial or "") if cands else None
    broken = base.cell(level_key(BREAKS, level, objective)) if base is not None else None
    base_breaks = [b for b in str(broken).split("; ") if b] if isinstance(broken, str) else []
    return [at(cands[0]), *others] if cands else [], base_breaks


def unconfirmed_at(table: Rows, cands: Sequence[Candidate], level: int | None,
                   objective: Objective, repeats: int) -> Decision:
    """The search's best at ``level`` within its limits, unchecked against noise."""
    rows = rows_of(table)
    scored, base_breaks = candidates_at(rows, cands, level, objective)
    return unconfirmed(rows, scored, repeats, objective.mode, base_breaks)


def per_level(objective: Objective, table: Rows, cands: Sequence[Candidate],
              entries: Sequence[Mapping[str, Any]] | None, repeats: int) -> list[dict[str, Any]]:
    """Each level's decision: from the confirm entries when they decided, else the search's
    means. Empty with one level."""
    if not objective.per_level:
        return []
    out = []
    rows = rows_of(table)
    for level in objective.levels:
        column = objective.column(level)
        if entries:
            decision = attach(decide_confirmed(entries_at(entries, level, objective), column,
                                               objective.mode, repeats), cands)
        else:
            decision = unconfirmed_at(rows, cands, level, objective, repeats)
        out.append({"level": level, "metric": column, "decision": decision.to_json()})
    return out


def same_winner(levels: Sequence[Mapping[str, Any]], decide_at: int | None) -> dict[str, Any]:
    """Whether one configuration wins at every level, in words."""
    if not levels:
        return {}
    configs = [(d["level"], d["decision"].get("config"), d["decision"].get("label"))
               for d in levels]
    keys = {json.dumps(c, sort_keys=True, default=str) for _, c, _ in configs}
    every = ", ".join(str(level) for level, _, _ in configs)
    if any(c is None for _, c, _ in configs):
        missing = ", ".join(str(level) for level, c, _ in configs if c is None)
        same, text = False, (f"no configuration decided at concurrency {missing}: no config "
                             "wins at every level")
    elif len(keys) == 1:
        same, text = True, (f"one configuration ({configs[0][2]}) wins at every concurrency "
                            f"level ({every})")
    else:
        each = "; ".join(f"c{level}: {label}" for level, _, label in configs)
        same, text = False, (f"the winner differs by concurrency level ({each}): "
                             f"best/launch.sh is the config for --decide-at {decide_at}, "
                             "best.json holds every level's")
    return {"same_config": same, "same_config_text": text}
