"""Every node of a cluster has the driver's servetune and SGLang, or the run stops in one line
before anything starts (tuner/run/installs.py, tuner/run/cluster.py's check_installs). The
real cluster case: tests/integration/test_multinode_integration.py (a node with another SGLang)."""

from __future__ import annotations

from importlib import metadata

import pytest

from tuner.run import cluster, nodes
from tuner.run.installs import Install, mismatch
from tuner.spec import SpecError

DRIVER = Install("0.1.0", "0123456789abcdef0123", "0.5.23")


def test_this_machine_s_install_is_read_from_its_distributions_and_checkout() -> None:
    here = Install.here()
    assert here.servetune == metadata.version("servetune")
    assert here.sglang == metadata.version("sglang")
    assert here.commit is None or len(here.commit) == 40


def test_the_same_install_everywhere_passes() -> None:
    assert mismatch(DRIVER, {"a (10.0.0.1)": DRIVER, "b (10.0.0.2)": DRIVER}) is None


def test_a_node_with_another_sglang_is_named_in_one_line() -> None:
    other = Install("0.1.0", DRIVER.commit, "0.5.22")
    line = mismatch(DRIVER, {"a (10.0.0.1)": DRIVER, "b (10.0.0.2)": other})
    assert line == ("node b (10.0.0.2) has servetune 0.1.0 (commit 0123456789ab) with SGLang "
                    "0.5.22, the driver servetune 0.1.0 (commit 0123456789ab) with SGLang "
                    "0.5.23: every node needs the driver's servetune and SGLang")


def test_another_commit_a_missing_install_and_a_silent_node_all_count() -> None:
    line = mismatch(DRIVER, {"a (10.0.0.1)": Install("0.1.0", "fedcba9876543210", "0.5.23"),
                             "b (10.0.0.2)": Install(None, None, None),
                             "c (10.0.0.3)": "did not answer in 60 s"})
    assert line is not None and "\n" not in line
    assert line.startswith("node a (10.0.0.1) has servetune 0.1.0 (commit fedcba987654)")
    assert "(and 2 more node(s))" in line
    line = mismatch(DRIVER, {"b (10.0.0.2)": Install(None, None, None)})
    assert line is not None and "servetune not installed with SGLang not installed" in line
    assert mismatch(DRIVER, {"c": "did not answer in 60 s"}) == (
        "node c did not answer in 60 s, the driver servetune 0.1.0 (commit 0123456789ab) with "
        "SGLang 0.5.23: every node needs the driver's servetune and SGLang")


def test_a_differing_node_is_bad_input_before_anything_starts(monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    here = Install.here()
    monkeypatch.setattr(nodes, "installs", lambda: {"a (10.0.0.1)": here})
    cluster.check_installs("10.0.0.1:6379")  # the same: nothing said
    monkeypatch.setattr(nodes, "installs", lambda: {
        "a (10.0.0.1)": here, "b (10.0.0.2)": Install(here.servetune, here.commit, "0.0.1")})
    with pytest.raises(SpecError, match=r"^--address 10.0.0.1:6379: node b \(10.0.0.2\) has "
                                        r"servetune .* with SGLang 0.0.1, the driver"):
        cluster.check_installs("10.0.0.1:6379")
