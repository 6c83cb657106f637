"""The search-efficiency landscapes have the shape each one claims, and measured tables load
as landscapes whose space holds only the measured points."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks import landscape_table
from benchmarks.landscape_table import (
    Row,
    load_landscape,
    load_table,
    table_from_run,
    write_table,
)
from benchmarks.landscapes import (
    Landscape,
    best_depends_on,
    valid_points,
)
from benchmarks.search_efficiency import (
    SIZED,
    Check,
    Run,
    budgets_for,
    nearest_rank,
    ratio,
    run_search,
    spread,
)
from tuner.record.spec_file import save_spec
from tuner.search.budget import sized_budget
from tuner.spec import ExperimentSpec

DRAFTS = "--speculative-num-draft-tokens"


def _reaches_optimum(landscape: Landscape) -> bool:
    return landscape.close(landscape.staged_pass())


@pytest.mark.parametrize("name", ["bench", "separable", "plateau"])
def test_separable_landscapes_have_no_interaction(name: str) -> None:
    landscape = load_landscape(name)
    assert best_depends_on(landscape) == {n: set() for n in landscape.space.domains}
    assert _reaches_optimum(landscape)  # staged search's assumption holds here


def test_thresholds_one_point_and_many() -> None:
    assert load_landscape("bench").within == 1
    plateau = load_landscape("plateau")
    assert plateau.within >= 0.05 * plateau.valid


def test_interact_couples_stages_and_traps_one_staged_pass() -> None:
    landscape = load_landscape("interact")
    depends = best_depends_on(landscape)
    assert "NCCL_MAX_NCHANNELS" in depends["NCCL_PROTO"]
    assert "NCCL_PROTO" in depends["NCCL_MAX_NCHANNELS"]
    assert "--flashinfer-allreduce-fusion-backend" in depends["NCCL_ALGO"]
    assert not _reaches_optimum(landscape)


def test_wrong_order_last_stage_matters_most_and_sets_the_protocol() -> None:
    landscape = load_landscape("wrong-order")
    assert DRAFTS in landscape.space.stages[-1].knobs
    assert best_depends_on(landscape)["NCCL_PROTO"] == {DRAFTS}
    best = max(valid_points(landscape.space), key=lambda p: landscape.evaluate(p) or 0.0)

    def effect(name: str) -> float:  # best / worst over the knob's values, the rest optimal
        values = [landscape.evaluate({**best, name: v}) or 0.0
                  for v in landscape.space.domains[name]]
        return max(values) / min(values)

    assert max(landscape.space.domains, key=effect) == DRAFTS
    assert not _reaches_optimum(landscape)


def test_statistics_count_never_reached_as_the_budget() -> None:
    values = [None, 5, 7, None, 3]
    assert nearest_rank(values, 10, 0.5) == 7
    assert spread(values, 10) == "7 [3, >10]"
    assert ratio([2, 2, 2], [None, None, 8], 10) == "<0.20x"
    assert ratio([None, None], [4, 4], 10) == ">2.50x"


# ---------------------------------------------------------------- measured tables

KNOBS = ["NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE"]
# a made-up table (test data, not a measurement): a 3 x 3 grid less ring + Simple
SYNTHETIC: list[Row] = [
    (["default", "default", "0"], 100.0, 1, ""),
    (["allreduce:ring", "default", "0"], 101.0, 1, ""),
    (["allreduce:tree", "default", "0"], 103.0, 1, ""),
    (["default", "LL", "0"], 102.0, 1, ""),
    (["default", "Simple", "0"], 99.0, 1, ""),
    (["allreduce:ring", "LL", "0"], 104.0, 1, ""),
    (["allreduce:tree", "LL", "0"], 110.0, 2, ""),
    (["allreduce:tree", "Simple", "0"], 95.0, 1, ""),
]


def _table(tmp_path: Path, rows: list[Row] = SYNTHETIC,
           stages: str | None = "allreduce=NCCL_ALGO; proto=NCCL_PROTO") -> Path:
    path = tmp_path / "synthetic.csv"
    meta = {"landscape": "synthetic", "metric": "est_tok_s", "mode": "max",
            **({"stages": stages} if stages else {}), "source": "written by the test"}
    write_table(path, meta, KNOBS, "est_tok_s", rows)
    return path


def test_table_loads_as_a_landscape_of_its_points(tmp_path: Path) -> None:
    landscape = load_table(str(_table(tmp_path)))
    space = landscape.space
    assert landscape.name == "synthetic" and landscape.metric == "est_tok_s"
    assert dict(space.pins) == {"NCCL_NVLS_ENABLE": 0}
    assert [s.name for s in space.stages] == ["allreduce", "proto"]
    assert space.size == 9 and landscape.valid == 8
    assert landscape.optimum == 110.0 and landscape.within == 1
    assert space.validate({"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": "Simple"})
    assert not space.validate({"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": "LL"})
    assert landscape.evaluate({"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL"}) == 110.0
    # a stage's sub-space keeps the rule: with ring pinned, only ring's points are valid
    stage = space.stage_space(space.stages[1], {**space.baseline(), "NCCL_ALGO": "allreduce:ring"})
    assert [p["NCCL_PROTO"] for p in valid_points(stage)] == [None, "LL"]


def test_table_without_stages_gets_one_stage_per_knob(tmp_path: Path) -> None:
    landscape = load_table(str(_table(tmp_path, stages=None)))
    assert [s.knobs for s in landscape.space.stages] == [("NCCL_ALGO",), ("NCCL_PROTO",)]


@pytest.mark.parametrize("strategy", ["random", "staged+fa", "optuna"])
def test_searches_on_a_table_launch_only_measured_points(tmp_path: Path, strategy: str) -> None:
    landscape = load_table(str(_table(tmp_path)))  # evaluate raises on an unmeasured point
    run = run_search(landscape, strategy, seed=1, budget=20, rounds=2, noise=0.0,
                     out_dir=tmp_path)
    assert run.launched <= 8 and run.first is not None


def test_table_needs_the_baseline_and_distinct_rows(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="baseline"):
        load_table(str(_table(tmp_path, rows=SYNTHETIC[1:])))
    with pytest.raises(ValueError, match="measured twice"):
        load_table(str(_table(tmp_path, rows=[*SYNTHETIC, SYNTHETIC[1]])))


def _results_csv(folder: Path) -> None:
    """A results.csv as servetune writes it (the columns that matter here); values invented."""
    head = ["trial_id", "order", "phase", "variant", "stage", "baseline", "status", "rounds",
            "score", "NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "est_tok_s", "verify_ms",
            "failure_kind"]
    rows = [
        ["a", 0, "search", "", "", True, "ok", 6, 100, "default", "default", 0, 100, 20, ""],
        ["b", 1, "search", "", "", False, "ok", 6, 104, "allreduce:ring", "LL", 0, 104, 19, ""],
        ["c", 2, "search", "", "", False, "stopped", 1, 90, "allreduce:ring", "Simple", 0, 90,
         22, ""],
        ["d", 3, "search", "", "", False, "failed", 0, "", "Tree", "default", 0, "", "",
         "graph_capture"],
        ["e", 4, "confirm", "", "", False, "ok", 6, 102, "allreduce:ring", "LL", 0, 102, 19.5, ""],
        ["f", 5, "confirm", "", "", True, "ok", 6, 101, "default", "default", 0, 101, 20, ""],
        ["g", 6, "search", "", "", False, "failed", 0, "", "allreduce:tree", "LL", 0, "", "", ""],
        ["h", 7, "search", "", "", False, "failed", 0, "", "allreduce:tree", "Simple", 0, "", "",
         "port_busy"],  # says nothing about the configuration: left out
        ["i", 8, "search", "", "", False, "failed", 0, "", "allreduce:ring", "LL", 0, "", "",
         "crashed"],  # it ran twice: the table keeps what it measured
    ]
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "results.csv").open("w", newline="") as f:
        csv.writer(f).writerows([head, *rows])


def test_run_folder_becomes_a_table(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _results_csv(run)
    with (run / "results.csv").open(newline="") as f:
        names, rows = table_from_run(list(csv.DictReader(f)), "est_tok_s")
    assert names == KNOBS
    assert rows == [(["default", "default", "0"], 100.5, 2, ""),
                    (["allreduce:ring", "LL", "0"], 103.0, 2, ""),
                    (["Tree", "default", "0"], None, 1, "graph_capture"),
                    (["allreduce:tree", "LL", "0"], None, 1, "crashed")]


def test_table_command_takes_the_runs_objective_and_stages(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    run = tmp_path / "run"
    _results_csv(run)
    save_spec(ExperimentSpec(name="landscape", out_dir=run, space="verify-campaign"))
    out = tmp_path / "tables" / "h.csv"
    assert landscape_table.main([str(run), "--out", str(out), "--command", "servetune run"]) == 0
    meta, rows = landscape_table.read_table(out)
    assert meta["metric"] == "est_tok_s" and meta["mode"] == "max"  # the proxy's objective
    assert meta["stages"].startswith("allreduce=allreduce-backend,NCCL_ALGO,NCCL_PROTO; channels=")
    assert meta["command"] == "servetune run" and meta["landscape"] == "h"
    assert [r["launches"] for r in rows] == ["2", "2", "1", "1"]
    assert [r["kind"] for r in rows] == ["", "", "graph_capture", "crashed"]
    assert "4 configurations (2 that failed)" in capsys.readouterr().out
    landscape = load_table(str(out))
    assert landscape.optimum == pytest.approx(103.0)


def test_a_table_holds_failures_with_their_kinds(tmp_path: Path) -> None:
    rows: list[Row] = [*SYNTHETIC, (["allreduce:ring", "Simple", "0"], None, 2, "nccl_error")]
    landscape = load_table(str(_table(tmp_path, rows)))
    crash = {"NCCL_ALGO": "allreduce:ring", "NCCL_PROTO": "Simple"}
    assert landscape.valid == 9 and not landscape.space.validate(crash)
    assert landscape.evaluate(crash) is None and landscape.failure(crash) == "nccl_error"
    assert landscape.culprits == frozenset()  # ring and Simple each run elsewhere
    assert landscape.optimum == 110.0


def test_search_efficiency_takes_the_kind_from_the_table(tmp_path: Path) -> None:
    """An always-invalid value in a table: the failure memory learns it from the table's
    kind, and the default search launches it at most twice (beside the best point, then
    alone on the baseline)."""
    rows: list[Row] = [r for r in SYNTHETIC if r[0][1] != "Simple"] + [
        (["default", "Simple", "0"], None, 1, "invalid_config"),
        (["allreduce:ring", "Simple", "0"], None, 1, "invalid_config"),
        (["allreduce:tree", "Simple", "0"], None, 1, "invalid_config")]
    landscape = load_table(str(_table(tmp_path, rows)))
    assert landscape.culprits == frozenset({("NCCL_PROTO", "Simple")})
    run = run_search(landscape, "auto", seed=0, budget=20, rounds=2, noise=0.0,
                     out_dir=tmp_path)
    assert run.failing_launches <= 2 and run.ruled_out == ["NCCL_PROTO=Simple"]
    assert run.innocent == [] and run.first is not None


# ---------------------------------------------------------------- machines with failures


def test_the_founding_machine_has_one_backend_that_wins_and_three_that_crash() -> None:
    from benchmarks.machines import founding_verify_ms

    landscape = load_landscape("founding")
    base = landscape.space.baseline()
    ratio = founding_verify_ms(base) / founding_verify_ms({**base, "allreduce-backend": "pcie-ipc"})
    assert round(ratio, 1) == 3.7  # the pass, 3.7x faster
    assert landscape.culprits == {("allreduce-backend", v) for v in
                                  ("torch-symm-mem", "nccl-symm-mem", "flashinfer-fusion")}
    kinds = {landscape.failure({**base, "allreduce-backend": v}) for _, v in landscape.culprits}
    assert len(kinds) == 3  # each its own way
    assert all(p["allreduce-backend"] == "pcie-ipc" for p in valid_points(landscape.space)
               if landscape.close(landscape.evaluate(p)))


def test_the_needle_is_flat_but_for_one_pair() -> None:
    landscape = load_landscape("needle")
    base = landscape.space.baseline()
    for name, values in landscape.space.domains.items():  # one at a time: within 1%
        assert all(abs((landscape.evaluate({**base, name: v}) or 0) /
                       (landscape.evaluate(base) or 1) - 1) < 0.011 for v in values)
    both = {**base, "NCCL_PROTO": "LL128", "--flashinfer-allreduce-fusion-backend": "auto"}
    assert landscape.close(landscape.evaluate(both))
    assert not landscape.close(landscape.evaluate(base))


def test_the_failures_landscape_has_every_shape_of_failure() -> None:
    landscape = load_landscape("failures")
    assert landscape.mode == "min" and landscape.metric == "verify_ms"
    assert landscape.culprits == {("--flashinfer-allreduce-fusion-backend", "mnnvl"),
                                  ("NCCL_MAX_NCHANNELS", 1),
                                  ("--speculative-num-draft-tokens", 2)}
    base = landscape.space.baseline()
    pair = {**base, "NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL128"}
    assert landscape.evaluate(pair) is None and landscape.failure(pair) == "nccl_invalid_usage"
    assert landscape.innocent("NCCL_PROTO", "LL128") and landscape.innocent(
        "NCCL_ALGO", "allreduce:tree")
    assert landscape.failure({**base, "--flashinfer-allreduce-fusion-backend": "mnnvl"}) == \
        "invalid_config"


# ---------------------------------------------------------------- judged at its own budget


def _runs(reached: int, of: int) -> list[Run]:
    return [Run(5 if i < reached else None, 5 if i < reached else None, 10, 0, [], [], False)
            for i in range(of)]


def test_the_goal_is_judged_only_from_runs_made() -> None:
    landscape = load_landscape("bench")
    sized = sized_budget(landscape.space).trials
    assert budgets_for(landscape, [SIZED, "12", str(sized)]) == [(sized, True), (12, False)]
    check = Check([], [])
    check.add("bench", 40, {"auto": _runs(20, 20)}, sized=False)  # not its sized budget
    check.finish(["bench"])
    lines = check.lines([40], 20)
    assert "not judged" in lines[0] and "yes" not in lines[0]
    assert "not run at their sized budget: bench" in lines[1]
    check = Check([], [])
    check.add("bench", sized, {"auto": _runs(18, 20), "random+fa": _runs(19, 20)}, sized=True)
    check.finish(["bench"])
    lines = check.lines([sized], 20)
    assert lines[0].endswith(f"NO: bench 18/20 at {sized}")
    assert "NO: bench 18 vs 19" in lines[1]
    assert "optuna+fa" in lines[2] and "not judged" in lines[2]  # it was not run


def test_the_levers_landscapes_have_the_shape_they_claim() -> None:
    from benchmarks.landscapes_levers import three_levers_tok_s

    mis = load_landscape("mis-rated")
    best = max(valid_points(mis.space), key=lambda p: mis.evaluate(p) or 0.0)
    assert best["NCCL_BUFFSIZE"] == 1048576
    assert (mis.evaluate(best) or 0) / (mis.evaluate({**best, "NCCL_BUFFSIZE": None}) or 1) \
        == pytest.approx(1.15)
    base = {"NCCL_PROTO": "LL"}
    triple = {"NCCL_IB_QPS_PER_CONNECTION": 4, "NCCL_IB_SPLIT_DATA_ON_QPS": 1,
              "NCCL_NCHANNELS_PER_NET_PEER": 4}
    for name, value in triple.items():  # each alone, and each pair, slightly worse
        assert three_levers_tok_s({**base, name: value}) < three_levers_tok_s(base)
        others = {n: v for n, v in triple.items() if n != name}
        assert three_levers_tok_s({**base, **others}) < three_levers_tok_s(base)
    assert three_levers_tok_s({**base, **triple}) > 1.1 * three_levers_tok_s(base)


def test_the_default_finds_the_three_lever_optimum(tmp_path: Path) -> None:
    """Six fixed seeds at the default's sized budget: it gets within 2% in at least five of
    them (measured: 6 of these 6, 91 of seeds 0-99; 3 of these 6 before reverts, repeat
    passes ordered by what the values measured and the combined point of refine.py),
    random search with the failure memory in none."""
    landscape = load_landscape("three-levers")
    budget = sized_budget(landscape.space).trials
    ours = [run_search(landscape, "auto", seed, budget, 4, 0.02, tmp_path) for seed in range(6)]
    theirs = [run_search(landscape, "random+fa", seed, budget, 4, 0.02, tmp_path)
              for seed in range(6)]
    got = sum(r.first is not None for r in ours)
    assert got >= 5 and got > sum(r.first is not None for r in theirs)
