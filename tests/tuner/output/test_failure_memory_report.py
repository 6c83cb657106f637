"""What the end of a run says about failures (issue 31): ruled_out.json and suspects.json,
rebuilt from the journal as the live failure memory had them (the space's domains: its
levers and the ends the failure table points to), and the report's sections on both. No Ray."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from launchers.sglang.launcher import SGLangArgs
from tuner.output import partners, ruled_out
from tuner.output.report import facts, markdown
from tuner.output.results import build_table
from tuner.record.files import JOURNAL, RULED_OUT_JSON
from tuner.record.spec_file import save_spec
from tuner.run import finish
from tuner.search.memory import FailureMemory
from tuner.setup import Setup, prepare
from tuner.spec import ExperimentSpec

BS, MEM = "--cuda-graph-max-bs-decode", "--mem-fraction-static"
SPACE = f"""name: oom
knobs:
  {BS}: [16, 64]
  {MEM}: {{flag: str, values: ["0.7", "0.8"]}}
"""
Outcome = tuple[str, dict[str, Any], str | None]  # a trial, its settings, its failure kind


def _journal(out: Path, base: dict[str, Any], trials: list[Outcome]) -> None:
    events: list[dict[str, Any]] = []
    for order, (tid, config, kind) in enumerate(trials):
        events.append({"time": time.time(), "event": "start", "trial_id": tid, "order": order,
                       "config": {**base, **config}, "stage": None, "dir": None,
                       "phase": "search"})
        if kind is None:
            events.append({"event": "result", "trial_id": tid, "round": 1,
                           "output_throughput": 100.0 + order})
        events.append({"event": "end", "trial_id": tid, "status": "failed" if kind else "ok",
                       **({"failure": {"kind": kind, "message": "CUDA out of memory"}}
                          if kind else {})})
    (out / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in events))


def _setup(tmp_path: Path) -> Setup:
    (tmp_path / "space.yaml").write_text(SPACE)
    model = tmp_path / "model"
    model.mkdir()
    spec = ExperimentSpec(name="oom", out_dir=tmp_path / "exp", space=str(tmp_path / "space.yaml"),
                          rounds=1, workload=SGLangArgs(model=str(model), preflight=False))
    save_spec(spec)
    return prepare(spec)


# Decode batch 64 ran out of memory at the default memory fraction and at 0.8, never at 0.7,
# the end the failure table points to for torch's OOM: a suspect, as the live memory had it.
TRIALS: list[Outcome] = [("base", {}, None), ("mem08", {MEM: "0.8"}, None),
                         ("bs64", {BS: 64}, "cuda_oom"),
                         ("bs64-08", {BS: 64, MEM: "0.8"}, "cuda_oom")]


def test_the_end_of_run_memory_keeps_a_suspect_the_live_run_kept(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    base = setup.space.baseline()
    _journal(setup.out_dir, base, TRIALS)
    live = FailureMemory(base, setup.space.domains)  # as FilteringSearcher has it
    for tid, config, kind in TRIALS:
        live.record({**base, **config}, tid, kind)
    built = finish.memory(setup)
    assert built is not None
    assert built.evidence() == live.evidence() == []
    assert built.suspected() == live.suspected()
    [suspect] = built.suspected()
    assert (suspect["knob"], suspect["value"], suspect["trials"]) == (BS, 64, ["bs64", "bs64-08"])
    assert suspect["untried"] == {MEM: "0.7"} and "never at --mem-fraction-static=0.7" in \
        suspect["why"]
    # Without the space's domains (the replay before) the same journal convicted it.
    blind = FailureMemory.replay(base, [(t, {**base, **c}, k) for t, c, k in TRIALS])
    assert [e["knob"] for e in blind.evidence()] == [BS]


def test_the_report_says_what_is_only_suspect_and_what_was_ruled_out(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    base = setup.space.baseline()
    _journal(setup.out_dir, base, TRIALS)
    built = finish.memory(setup)
    assert built is not None
    ruled_out.write(setup.out_dir, built.evidence(), built.suspected())
    assert not (setup.out_dir / RULED_OUT_JSON).exists()
    df = build_table(setup.out_dir, setup.objective, base)
    md = markdown(facts(setup, df, None))
    assert "### Suspect, not ruled out" in md and "### Ruled out" not in md
    assert (f"| {BS}=64 | cuda_oom | bs64, bs64-08 | {MEM}=unset; {MEM}=0.8 | it failed beside "
            f"{MEM}=unset and beside {MEM}=0.8, never at {MEM}=0.7") in md
    # A retry at 0.7 that failed too convicts it: ruled out, the suspect file gone.
    _journal(setup.out_dir, base, [*TRIALS, ("mem07", {MEM: "0.7"}, None),
                                   ("bs64-07", {BS: 64, MEM: "0.7"}, "cuda_oom")])
    built = finish.memory(setup)
    assert built is not None and built.suspected() == []
    ruled_out.write(setup.out_dir, built.evidence(), built.suspected())
    assert not (setup.out_dir / ruled_out.SUSPECTS_JSON).exists()
    md = markdown(facts(setup, build_table(setup.out_dir, setup.objective, base), None))
    assert "### Ruled out, and on what evidence" in md and "Suspect, not ruled out" not in md
    assert ruled_out.evidence_lines(ruled_out.load(setup.out_dir)[0])[0].startswith(
        f"{BS}=64: cuda_oom in bs64, bs64-08, bs64-07, beside {MEM}=unset; {MEM}=0.8; "
        f"{MEM}=0.7")


def test_the_report_says_which_partners_completed_refused_suggestions(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    base = setup.space.baseline()
    _journal(setup.out_dir, base, TRIALS[:2])
    steps = {"--speculative-num-steps": 5}
    entries = [{"config": {}, "partners": steps, "refused": ["topk without steps"]}] * 2
    (setup.out_dir / partners.COMPLETED).write_text(
        "".join(json.dumps(e) + "\n" for e in entries))
    md = markdown(facts(setup, build_table(setup.out_dir, setup.objective, base), None))
    assert ("| partners completed | 2 suggestions the checks refuse alone ran with the "
            "baseline's resolved values of their partners: --speculative-num-steps=5 (2x) "
            "(completed.jsonl) |") in md
