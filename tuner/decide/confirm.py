"""Which configuration wins: the confirm stage's statistics and verdicts over typed rows
(``tuner.decide.candidates`` picks what to confirm; no Ray, no files, no launches:
``tuner.run.confirm`` runs the launches, ``tuner.decide.sequential`` decides
which launch comes next and when a candidate is decided).

Confirm: the baseline (the user's settings) and the search's best candidates are launched
afresh, alternating, until each candidate is shown better or worse than the baseline beyond
launch-to-launch noise, cannot be told apart within the cap, or the cap is reached. Each
launch's score is the mean of its rounds; the unit of evidence is a launch. A candidate is
declared the winner only when the interval of its ratio to the baseline leaves 1; otherwise
the decision is the baseline's settings, said plainly with the ratios found.

Speculative reference: when the workload's arguments turn speculative decoding on, the decided
settings are launched with it off too, and ``speculative_verdict`` compares the two sides by
the same rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from search_spaces.knobs import SPECULATIVE_KNOBS, Value
from tuner.decide.candidates import Candidate, candidates, search_decision, search_score
from tuner.decide.decision import Decision
from tuner.decide.sequential import MIN_LAUNCHES, Comparison, Plan, compare
from tuner.record.confirm import ConfirmRecord, DecisionRecord, Launch
from tuner.record.rows import ResultRow, Rows, rows_of, search_rows
from tuner.setup import Setup, prepare
from tuner.spec import Objective
from tuner.stats import Interval, finite, interval

__all__ = ["Candidate", "attach", "candidates", "comparisons", "decide_confirmed",
           "entry_interval", "open_stage", "search_decision", "search_score", "served",
           "speculative_verdict", "summarize", "unconfirmed", "without_speculative_knobs"]

# ---------------------------------------------------------------- statistics and the verdict


def _column(rows: Sequence[ResultRow], name: str) -> list[float | None]:
    if not any(r.has(name) for r in rows):
        return []
    return [finite(r.cell(name)) for r in rows]


def summarize(cand: Candidate, ids: Sequence[str], table: Rows,
              objective: Objective | None = None, environmental: Collection[str] = ()
              ) -> dict[str, Any]:
    """A candidate's confirm launches: the objective's interval and verify ms; with limits,
    each limited metric's interval and the limits it is not shown to keep (``limit_breaks``);
    with several concurrency levels, the same per level (``levels``). Launches that failed
    for a reason outside the configuration (``environmental`` kinds) are ``lost``, not
    ``failed``."""
    rows = [r for r in rows_of(table) if r.trial_id in set(ids)]
    ok = [r for r in rows if r.done]
    ended = [Launch(trial_id=r.trial_id, kind=r.failure_kind).dump()
             for r in rows if r.status == "failed"]
    entry = {
        "label": cand.label, "source_trial": cand.source_trial, "search_score": cand.search_score,
        "config": cand.config, "trials": list(ids), "scores": _column(ok, "score"),
        "failed": [f for f in ended if f["kind"] not in environmental],
        "lost": [f for f in ended if f["kind"] in environmental],
        "objective": interval(_column(ok, "score")).to_json(),
        "verify_ms": interval(_column(ok, "verify_ms")).to_json(),
    }
    if objective is None:
        return entry
    entry.update(_within(ok, objective, None))
    if objective.per_level:
        entry["levels"] = {str(level): {"scores": _column(ok, objective.column(level)),
                                        "objective": interval(_column(
                                            ok, objective.column(level))).to_json(),
                                        **_within(ok, objective, level)}
                           for level in objective.levels}
    return entry


def _within(ok: Sequence[ResultRow], objective: Objective, level: int | None
            ) -> dict[str, Any]:
    """The limited metrics' intervals over the launches, and the limits they do not keep."""
    if not objective.limits:
        return {}
    levels = objective.levels if level is not None else ()
    ivs = {lim.column(level, levels): interval(_column(ok, lim.column(level, levels)))
           for lim in objective.limits}
    broken = [r for lim in objective.limits
              if (r := lim.check_interval(ivs[lim.column(level, levels)],
                                          lim.column(level, levels)))]
    return {"limits": {k: iv.to_json() for k, iv in ivs.items()}, "limit_breaks": broken}


def _iv(entry: Mapping[str, Any], key: str = "objective") -> Interval:
    return entry_interval(entry, key)


def _fmt(iv: Interval) -> str:
    return iv.text()


def _plan(plan: Plan | int) -> Plan:
    return plan if isinstance(plan, Plan) else Plan(cap=max(plan, 2))


def comparisons(entries: Sequence[Mapping[str, Any]], mode: str, plan: Plan | int
                ) -> dict[str, Comparison]:
    """Each candidate's comparison with the baseline (entries[0]) over their launch means."""
    base = [v for v in entries[0].get("scores") or [] if v is not None]
    return {str(e["label"]): compare([v for v in e.get("scores") or [] if v is not None], base,
                                     mode, _plan(plan), failed=bool(e["failed"]))
            for e in entries[1:]}


def _launches(entry: Mapping[str, Any]) -> int:
    return len([v for v in entry.get("scores") or [] if v is not None])


def decide_confirmed(entries: Sequence[Mapping[str, Any]], metric: str, mode: str,
                     plan: Plan | int, stopped: str | None = None) -> Decision:
    """The winner, only when the sequential rule shows it better than the baseline (its
    interval on the ratio of launch means leaves 1); ``attach`` then fills in the chosen
    candidate's config. ``stopped``: why the stage stopped launching, for the text."""
    plan = _plan(plan)
    base = entries[0]
    base_iv = _iv(base)
    within = [e for e in entries[1:] if not e["failed"] and not e.get("limit_breaks")]
    excluded = [e["label"] for e in entries[1:] if e.get("limit_breaks")]
    pick = max if mode == "max" else min
    why = f"; stopped at {stopped}" if stopped else ""
    if base.get("limit_breaks"):  # any config shown within the limits beats one that is not
        if not within:
            return Decision("none", f"No configuration was confirmed within the limits: the "
                            f"default's {'; '.join(base['limit_breaks'])}, and no candidate's "
                            "95% intervals keep them either")
        best = pick(within, key=lambda e: _iv(e).mean or 0.0)
        return Decision("confirmed", f"{best['label']} ({best['source_trial']}) keeps the "
                        f"limits and the default does not ({'; '.join(base['limit_breaks'])}): "
                        f"{metric} {_fmt(_iv(best))}, 95% intervals over "
                        f"{_launches(best)} fresh launches", best["label"])
    if base_iv.n < MIN_LAUNCHES:
        return Decision("unconfirmed", f"the baseline completed {base_iv.n} confirm launches "
                        f"(at most {plan.cap}), too few to compare: nothing can be declared "
                        f"better than it{why}")
    comps = comparisons(entries, mode, plan)
    winners = [e for e in within if comps[e["label"]].verdict == "better"]
    if not winners:
        outside = f" ({', '.join(excluded)} not shown within the limits)" if excluded else ""
        each = "; ".join(f"{label}: {c.text()}" for label, c in comps.items())
        return Decision("default", f"No configuration beat the baseline beyond launch-to-launch "
                        f"noise: the baseline's {metric} is {_fmt(base_iv)}; candidate / "
                        f"baseline {each}{outside}{why}. Keep the baseline settings.",
                        "baseline")
    best = pick(winners, key=lambda e: comps[e["label"]].ratio or 0.0)
    comp = comps[best["label"]]
    return Decision("confirmed", f"{best['label']} ({best['source_trial']}) beats the baseline "
                    f"beyond launch-to-launch noise: {metric} {_fmt(_iv(best))} against "
                    f"{_fmt(base_iv)}, {comp.text()}{why}", best["label"])


def speculative_verdict(with_scores: Sequence[float], without_scores: Sequence[float],
                        metric: str, mode: str, plan: Plan | int,
                        reference_failed: str | None = None) -> dict[str, Any]:
    """Does speculative decoding pay off? The decided settings' launch means with it on
    against those with it off, by the confirm stage's rule; the ratio is stated either way."""
    with_iv, without_iv = interval(with_scores), interval(without_scores)
    data: dict[str, Any] = {"with": with_iv.mean, "without": without_iv.mean,
                            "with_interval": with_iv.to_json(),
                            "without_interval": without_iv.to_json(), "pays_off": None}
    if reference_failed or without_iv.mean is None:
        data["text"] = (f"the reference run without speculative decoding did not complete "
                        f"({reference_failed or 'not run'}): no verdict on speculative decoding")
        return data
    if with_iv.mean is None:
        data["text"] = (f"without speculative decoding: {metric} {without_iv.mean:.4g}; the run "
                        "with it has no score to compare")
        return data
    comp = compare(list(with_scores), list(without_scores), mode, _plan(plan))
    data["comparison"] = comp.to_json()
    ratio = with_iv.mean / without_iv.mean if without_iv.mean else float("nan")
    both = (f"{metric} {with_iv.mean:.4g} with it against {without_iv.mean:.4g} without "
            f"({ratio:.2f}x; {comp.text()})")
    if comp.verdict == "better":
        data["pays_off"] = True
        data["text"] = f"Speculative decoding pays off here: {both}"
    elif comp.verdict == "worse":
        data["pays_off"] = False
        data["text"] = (f"Speculative decoding does NOT pay off here: {both}; the decision "
                        "serves without it")
    else:
        data["text"] = (f"Speculative decoding makes no difference that launch-to-launch noise "
                        f"lets us see here: {both}")
    return data


def unconfirmed(table: Rows, cands: Sequence[Candidate], repeats: int, mode: str,
                base_breaks: Sequence[str] = ()) -> Decision:
    """The decision when no confirm stage decided: the search's best, unchecked against
    noise, or the default when the baseline was not beaten in the search (``cands``: the
    baseline, then the others best first, all within the limits; ``base_breaks``: the
    limits the baseline breaks, when it does)."""
    best = next((c for c in cands[1:]), None)
    base_ok = any(r.baseline and r.status == "ok" for r in search_rows(rows_of(table)))
    why = "--confirm 0" if repeats == 0 else "nothing to confirm"
    if base_breaks:
        if best is None:
            return Decision("none", "no configuration kept the limits in the search (the "
                            f"default: {'; '.join(base_breaks)})")
        return attach(Decision("unconfirmed", f"{best.label} ({best.source_trial}) is the "
                               "search's best within the limits, which the default breaks "
                               f"({'; '.join(base_breaks)}); not checked against noise ({why})",
                               best.label), cands)
    if best is None:
        if base_ok:
            return attach(Decision("default", f"only the baseline completed the search ({why})",
                                    "baseline"), cands)
        return Decision("none", "no trial completed every round")
    base = cands[0].search_score
    if base is not None and best.search_score is not None and base_ok and not (
            best.search_score > base if mode == "max" else best.search_score < base):
        return attach(Decision(
            "default", f"no configuration beat the baseline in the search ({best.label} "
            f"{best.search_score:.4g} against {base:.4g}; {why}): keep the default settings",
            "baseline"), cands)
    score = "" if best.search_score is None else f" at {best.search_score:.4g}" + (
        f" against {base:.4g} for the baseline" if base else "")
    return attach(Decision("unconfirmed", f"{best.label} ({best.source_trial}) is the search's "
                            f"best{score}, not checked against noise ({why})", best.label),
                   cands)


def open_stage(table: Rows, settings: Mapping[str, Mapping[str, Value]], mode: str,
               plan: Plan) -> list[str]:
    """What an interrupted confirm stage had found (its journal's ended launches, no
    confirm.json yet): each configuration's launch means and each candidate's comparison with
    the baseline by the stage's own rule. Empty when the journal has no confirm launch."""
    groups: dict[str, tuple[bool, list[float]]] = {}
    launches = 0
    for r in rows_of(table):
        if r.phase != "confirm" or r.variant is not None or not r.done or r.score is None:
            continue
        key = " ".join(f"{k.lstrip('-')}={v}" for k, v in
                       sorted(settings.get(r.trial_id, {}).items())) or "every knob unset"
        groups.setdefault(key, (r.baseline, []))[1].append(r.score)
        launches += 1
    base = next((scores for is_base, scores in groups.values() if is_base), None)
    if not launches or base is None:
        return []
    lines = [f"confirm stage interrupted after {launches} launches (the journal's; resume to "
             f"go on): baseline {', '.join(f'{v:.4g}' for v in base)}"]
    for key, (is_base, scores) in groups.items():
        if not is_base:
            lines.append(f"  {key}: {', '.join(f'{v:.4g}' for v in scores)}; "
                         f"{compare(scores, base, mode, plan).text()}")
    return lines


def attach(decision: Decision, cands: Sequence[Candidate]) -> Decision:
    """The decision with its candidate's config and source trial filled in (an unconfirmed
    decision with no label takes the search's best)."""
    chosen = next((c for c in cands if c.label == decision.label), None)
    if decision.kind == "unconfirmed" and chosen is None and len(cands) > 1:
        chosen = cands[1]
    decision.config = dict(chosen.config) if chosen else None
    decision.source_trial = chosen.source_trial if chosen else None
    decision.label = chosen.label if chosen else None
    return decision


def without_speculative_knobs(config: Mapping[str, Value]) -> dict[str, Value]:
    return {k: (None if k in SPECULATIVE_KNOBS else v) for k, v in config.items()}


def entry_interval(entry: Mapping[str, Any], key: str = "objective") -> Interval:
    """A confirm entry's interval (``objective`` or ``verify_ms``) from confirm.json."""
    return Interval(**entry[key])


def served(setup: Setup, confirm_data: ConfirmRecord | Mapping[str, Any]
           ) -> tuple[Setup, DecisionRecord]:
    """The setup and decision the exports serve: where speculative decoding lost beyond noise,
    the decided settings with it off (the reference's args and config), said in the decision."""
    record = confirm_data if isinstance(confirm_data, ConfirmRecord) else \
        ConfirmRecord.model_validate(dict(confirm_data))
    decision = record.decided
    verdict = record.speculative
    if verdict is None or verdict.pays_off is not False or decision.config is None:
        return setup, decision
    args = setup.spec.workload.without_speculative()
    if args is None:
        return setup, decision
    decision = decision.model_copy(update={
        "config": without_speculative_knobs(decision.config),
        "label": f"{decision.label} without speculative decoding",
        "text": f"{decision.text}. Speculative decoding does NOT pay off here, beyond "
                "launch-to-launch noise: serve without it",
        "speculative": False})
    return prepare(setup.spec.model_copy(update={"workload": args})), decision
