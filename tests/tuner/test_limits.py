"""Limits on reported metrics: parsing at the CLI, the columns per concurrency level, the
figure a broken limit is reported with, the interval rule of the confirm stage, and the value
the search is told."""

from __future__ import annotations

import pytest

from tuner.cli.args import CliError, parse_limits
from tuner.limits import SEARCH_KEY, WORST, Limit, LimitTracker, breaks, level_column
from tuner.spec import Objective
from tuner.stats import interval


def test_parse_limits_reads_each_operator() -> None:
    got = parse_limits(["p99_itl_ms<=30", " median_ttft_ms < 200 ", "output_throughput>=1e3",
                        "accept_length>2.5"])
    assert [Limit(**d).text() for d in got] == [
        "p99_itl_ms<=30", "median_ttft_ms<200", "output_throughput>=1000", "accept_length>2.5"]


@pytest.mark.parametrize("text", ["p99_itl_ms=30", "p99_itl_ms<=", "<=30", "p99_itl_ms<=30ms",
                                  "p99_itl_ms<=nan", "p99_itl_ms<=inf", "p99 itl<=3"])
def test_a_malformed_limit_is_bad_input(text: str) -> None:
    with pytest.raises(CliError, match="expected METRIC<=NUMBER"):
        parse_limits([text])


def test_a_limit_reads_its_level_column() -> None:
    lim = Limit(metric="p99_itl_ms", op="<=", bound=30)
    assert lim.column(4, (1, 4)) == "p99_itl_ms_c4"
    assert lim.column(4, (4,)) == "p99_itl_ms"  # one level: no suffix
    assert lim.column(None, (1, 4)) == "p99_itl_ms"  # the plain names: the decided level
    assert level_column("p99_itl_ms_c16", 4, (4, 16)) == "p99_itl_ms_c16"  # named as is


def test_breaks_report_the_figure_and_a_missing_metric() -> None:
    limits = [Limit(metric="p99_itl_ms", op="<=", bound=30),
              Limit(metric="output_throughput", op=">", bound=100)]
    assert breaks({"p99_itl_ms": 29.9, "output_throughput": 101}, limits) == []
    assert breaks({"p99_itl_ms": 41.25, "output_throughput": 100}, limits) == [
        "p99_itl_ms 41.25 breaks <=30", "output_throughput 100 breaks >100"]
    assert breaks({"output_throughput": 150.0}, limits) == [
        "p99_itl_ms not measured (limit <=30)"]
    row = {"p99_itl_ms": 10.0, "p99_itl_ms_c4": 35.0, "output_throughput_c4": 500.0}
    assert breaks(row, limits, 4, (1, 4)) == ["p99_itl_ms_c4 35 breaks <=30"]


def test_the_confirm_stage_needs_the_whole_interval_within() -> None:
    upper = Limit(metric="p99_itl_ms", op="<=", bound=30)
    assert upper.check_interval(interval([27.0, 28.0, 27.5])) is None
    straddles = upper.check_interval(interval([26.0, 31.0, 29.0]))
    assert straddles is not None and "not within <=30" in straddles
    lower = Limit(metric="output_throughput", op=">=", bound=100)
    assert lower.check_interval(interval([120.0, 121.0])) is None
    assert lower.check_interval(interval([99.0, 130.0])) is not None
    assert "one launch" in str(upper.check_interval(interval([10.0])))
    assert "not measured" in str(upper.check_interval(interval([])))


def test_the_search_is_told_the_worst_value_once_a_limit_breaks() -> None:
    objective = Objective("output_throughput", "max", 3,
                          (Limit(metric="p99_itl_ms", op="<=", bound=30),))
    assert objective.search_metric == SEARCH_KEY and objective.worst == -WORST
    tracker = LimitTracker(objective.metric, objective.limits, objective.worst)
    assert tracker.update({"output_throughput": 100.0, "p99_itl_ms": 20.0}) == {
        SEARCH_KEY: 100.0}
    # the running mean (20 + 50) / 2 = 35 breaks the limit: the worst value from here on
    assert tracker.update({"output_throughput": 120.0, "p99_itl_ms": 50.0}) == {
        SEARCH_KEY: -WORST}
    assert tracker.update({"output_throughput": None}) == {}  # no objective, nothing to rank
    minimise = Objective("p99_ttft_ms", "min", 1, (Limit(metric="p99_itl_ms", op="<", bound=1),))
    tracker = LimitTracker(minimise.metric, minimise.limits, minimise.worst)
    assert tracker.update({"p99_ttft_ms": 5.0}) == {SEARCH_KEY: WORST}  # not measured: broken


def test_without_limits_the_search_ranks_the_metric_itself() -> None:
    objective = Objective("output_throughput", "max", 3)
    assert objective.search_metric == "output_throughput"
    assert LimitTracker(objective.metric, (), objective.worst).update(
        {"output_throughput": 1.0}) == {}
    levels = Objective("output_throughput", "max", 3, levels=(1, 4, 16), decide_at=4)
    assert levels.per_level and levels.column(16) == "output_throughput_c16"
