"""The user's traffic end to end: `servetune run` as a subprocess, real Ray, the stand-in
server, real HTTP.

- a concurrency sweep: every round measures levels 1 and 4, the search optimises 4
  (``--decide-at``), each level gets its own winner (the search's best at that level, read
  back from results.csv), best/launch.sh is level 4's, best.json holds both;
- a limit that excludes the unconstrained winner: the stand-in's fastest config accepts more
  drafted tokens than the limit allows, so it is reported outside the limits with its figure,
  the search is told the worst value for it, the confirm stage holds the limit against its
  intervals, and the chosen config keeps the limit; report.html draws the Pareto plot and
  loads in headless Chromium.

The limit is on ``accept_length`` because the stand-in makes it depend on the speculative
shape and the text only, not on timing: the test cannot flake on a busy box. A latency limit
works the same way (any reported metric).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from search_spaces.knobs import without_weights
from simulator import cost_model
from simulator.runs import Experiment, ray_tmpdir
from tests.integration.conftest import Run
from tests.integration.headless_browser import chromium_binary, load_page
from tuner.limits import SEARCH_KEY, WORST

pytestmark = pytest.mark.integration

SHAPES = """\
name: shapes
description: draft steps and tokens
knobs:
  --speculative-num-steps: [3, 4]
  --speculative-num-draft-tokens: [3, 6]
"""
ALGO_AND_DRAFTS = """\
name: algo-and-drafts
description: a faster allreduce, fewer drafted tokens
knobs:
  NCCL_ALGO: [allreduce:tree]
  --speculative-num-draft-tokens: [3]
pins:
  --speculative-num-steps: 3  # the stand-in's default; draft tokens alone are a partial shape
"""
LIMIT = "accept_length<=1.9"  # the default 4 draft tokens accept ~2.0 here, 3 accept ~1.8
COMMON = ("--speculative-algorithm", "EAGLE3", "--search", "grid", "--scheduler", "fifo",
          "--rounds", "2", "--no-dashboard")


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _run(root: Path, name: str, space: str, *extra: str) -> Iterator[Run]:
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp, name=name)
        space_file = root / f"{name}.yaml"
        space_file.write_text(space)
        result = exp.run(["run", *exp.args("--space", str(space_file), *COMMON, *extra)],
                         timeout=280)
        try:
            yield Run(exp, result)
        finally:
            left = exp.cleanup()
            assert not left, f"processes survived the run: {left}"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from _run(tmp_path_factory.mktemp("sweep"), "sweep", SHAPES, "--samples", "6",
                    "--concurrency", "1,4", "--decide-at", "4")


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    yield from _run(tmp_path_factory.mktemp("limited"), "limited", ALGO_AND_DRAFTS,
                    "--samples", "4", "--limit", LIMIT, "--confirm", "3", "--confirm-top", "2")


def _search(exp: Experiment) -> pd.DataFrame:
    table = exp.table()
    return table[(table["phase"] == "search") & (table["status"] == "ok")]


# ---------------------------------------------------------------- the concurrency sweep


def test_each_round_measures_every_level_and_the_search_optimises_decide_at(sweep: Run
                                                                            ) -> None:
    assert sweep.result.returncode == 0, sweep.result
    search = _search(sweep.exp)
    assert len(search) == 6
    for level in (1, 4):
        assert search[f"output_throughput_c{level}"].notna().all()
        assert search[f"p99_itl_ms_c{level}"].notna().all()
    # the plain names (the objective) are level 4's; level 4 runs four times the requests
    assert (search["output_throughput"] == search["output_throughput_c4"]).all()
    assert (search["score"] == search["output_throughput_c4"]).all()
    assert (search["output_throughput_c4"] > 1.5 * search["output_throughput_c1"]).all()


def test_each_level_gets_its_own_winner_and_launch_sh_is_decide_ats(sweep: Run) -> None:
    exp = sweep.exp
    best = _json(exp.out / "best.json")
    search = _search(exp)
    assert best["decide_at"] == 4 and [p["level"] for p in best["per_level"]] == [1, 4]
    for item in best["per_level"]:
        column = f"output_throughput_c{item['level']}"
        top = search.loc[search[column].idxmax()]
        assert item["trial_id"] == top["trial_id"], (item, search[["trial_id", column]])
        assert item["score"] == pytest.approx(top[column])
        # the launched config, less the weights it was measured on (never exported)
        assert item["config"] == without_weights(exp.record(str(top["trial_id"]))["config"])
    at4 = best["per_level"][1]
    assert (best["trial_id"], best["config"]) == (at4["trial_id"], at4["config"])
    script = (exp.out / "best" / "launch.sh").read_text()
    assert script.splitlines()[-1] == "exec " + " ".join(at4["argv"])
    same = best["per_level"][0]["config"] == at4["config"]
    assert best["same_config"] is same
    confirm = _json(exp.out / "confirm.json")
    assert confirm["same_config"] is same
    phrase = "one configuration" if same else "the winner differs by concurrency level"
    assert phrase in confirm["same_config_text"] and phrase in sweep.result.stdout
    md = (exp.out / "best" / "report.md").read_text()
    assert "### The winner per concurrency level" in md and "| 4 (--decide-at) |" in md


# ---------------------------------------------------------------- a limit and the trade-off


def test_a_limit_excludes_the_unconstrained_winner(limited: Run) -> None:
    exp, result = limited.exp, limited.result
    assert result.returncode == 0, result
    search = _search(exp)
    algo = search["NCCL_ALGO"]
    # what was asked (results.csv's knob column shows what the server ran: the default
    # draft tokens as SGLang resolved them, the asked value beside it)
    knob = "--speculative-num-draft-tokens"
    asked = search[f"{knob} asked"] if f"{knob} asked" in search else search[knob]
    drafts = asked.where(asked.notna(), search[knob]).map(
        lambda v: str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))
    # The stand-in's known answer without the limit: tree with the default draft tokens.
    fast = search[(algo == "allreduce:tree") & (drafts == "default")].iloc[0]
    slim = search[(algo == "allreduce:tree") & (drafts == "3")].iloc[0]
    model = {k: cost_model.config_timing({"NCCL_ALGO": "allreduce:tree",
                                          "--speculative-num-draft-tokens": d}).tok_s()
             for k, d in (("fast", None), ("slim", 3))}
    assert model["fast"] > 1.1 * model["slim"]
    assert fast["within_limits"] is False or str(fast["within_limits"]) == "False"
    assert fast["limit_breaks"].startswith("accept_length ")
    assert fast["limit_breaks"].endswith("breaks <=1.9")
    assert float(fast["limit_breaks"].split()[1]) == pytest.approx(fast["accept_length"],
                                                                   rel=1e-3)
    assert str(slim["within_limits"]) == "True"
    # The search was told the worst value for every round of a trial outside the limit.
    told = {e["trial_id"]: (e[SEARCH_KEY], e["output_throughput"]) for e in exp.journal()
            if e.get("event") == "result" and SEARCH_KEY in e}
    assert told[fast["trial_id"]][0] == -WORST
    assert told[slim["trial_id"]][0] == told[slim["trial_id"]][1]
    # Chosen: a config within the limit, confirmed over its intervals; the default breaks it.
    best = _json(exp.out / "best.json")
    assert best["trial_id"] != fast["trial_id"] and best["limits"] == [LIMIT]
    assert best["config"]["--speculative-num-draft-tokens"] == 3
    confirm = _json(exp.out / "confirm.json")
    base = confirm["entries"][0]
    assert base["label"] == "baseline" and base["limit_breaks"]
    assert base["limit_breaks"][0].startswith("accept_length ")
    chosen = next(e for e in confirm["entries"] if e["label"] == best["label"])
    assert chosen["limit_breaks"] == [] and chosen["limits"]["accept_length"]["high"] <= 1.9
    assert confirm["decision"]["kind"] == "confirmed"
    assert "keeps the limits and the default does not" in confirm["decision"]["text"]
    assert "limits: accept_length<=1.9" in result.stdout


def test_the_report_draws_the_trade_off(limited: Run) -> None:
    out = limited.exp.out
    page = (out / "report.html").read_text()
    assert (out / "plots" / "pareto.png").stat().st_size > 10_000
    assert 'id="pareto"' in page and "output_throughput against p99_itl_ms" in page
    assert "breaks &lt;=1.9" in page  # the figure in the trials table


@pytest.mark.skipif(chromium_binary() is None,
                    reason="Chromium is not installed (`apt-get install chromium`; .ci/run does)")
def test_the_report_with_limits_loads_in_headless_chromium(limited: Run) -> None:
    page = load_page(limited.exp.out / "report.html")
    assert page.errors == [], page.errors
    assert any(i["alt"] == "throughput against latency" for i in page.images)
    for image in page.images:
        assert image["complete"] and image["naturalWidth"] >= 500, image
