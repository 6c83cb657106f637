"""Contract: the catalogue against the installed SGLang's parser and env registry, and every
plan of the presets that search SGLang's env levers through the workload's own preflight.

Needs SGLang's parser importable on this interpreter (CPU is enough):
    pip install -r requirements/sglang-parser.txt && pip install --no-deps sglang==0.5.23
Skipped, with the reason, where it is not.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port
from launchers.sglang import levers, preflight
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from search_spaces import space as sp
from search_spaces.knobs import Value
from tests.requirements import unavailable
from tests.sglang_parser import CONTRACT, INSTALL

pytestmark = CONTRACT

SAMPLES = 12  # as many random configurations as `servetune plan` prints by default


@pytest.fixture(scope="module")
def report() -> levers.LeverReport:
    try:
        return levers.check_catalogue(sys.executable, experiment="contract")
    except preflight.SGLangUnavailable as err:
        unavailable(f"{err} ({INSTALL})")


def test_no_catalogue_entry_is_missing_from_sglang(report: levers.LeverReport) -> None:
    assert report.missing == (), "\n".join(report.lines())


def test_every_communication_lever_is_searched_or_has_a_reason(report: levers.LeverReport
                                                               ) -> None:
    assert report.unexplained == (), "\n".join(report.lines())
    assert report.uncatalogued, "the selection rule found nothing: is it still reading SGLang?"


def test_not_searched_names_are_sglangs(report: levers.LeverReport) -> None:
    assert report.stale == (), "\n".join(report.lines())


def test_the_report_prints_both_sections(report: levers.LeverReport) -> None:
    lines = report.lines()
    assert lines[1].endswith("lacks: none")
    assert lines[2].startswith("(b) communication levers of SGLang")
    assert report.ok


# ---------------------------------------------------------------- plans through the preflight


def _workload() -> SGLangWorkload:
    return SGLangWorkload(SGLangArgs(
        model="/models/x", draft_model="/models/d", speculative_algorithm="EAGLE3", tp=8,
        server_cmd=[sys.executable, "-m", "sglang.launch_server"], preflight_python=sys.executable))


def _points(space: sp.SearchSpace) -> Iterator[dict[str, Value]]:
    """The baseline, SAMPLES seeded random configurations, and for every value of every knob
    one valid configuration that holds it."""
    rng = random.Random(f"contract:{space.name}")
    pool = [space.sample(rng) for _ in range(3000)]
    valid = [p for p in pool if not space.validate(p)]
    yield space.baseline()
    yield from valid[:SAMPLES]
    for name, values in space.domains.items():
        for value in values:
            holding = next((p for p in valid if p[name] == value), None)
            assert holding is not None, f"no valid configuration of {space.name} has {name}={value}"
            yield holding


@pytest.mark.parametrize("preset", ["nccl-pcie", "verify-campaign", "fusion"])
def test_every_rendered_plan_passes_the_preflight(preset: str, tmp_path: Path) -> None:
    space = sp.load_preset(preset)
    workload = _workload()
    envs = []
    for index, point in enumerate(_points(space)):
        ctx = TrialContext("contract", f"t{index}", tmp_path / f"t{index}", port=free_port())
        plan = workload.plan(point, ctx)
        assert workload.preflight(plan, ctx) == [], f"{preset} {point}: SGLang warned"
        envs.append(dict(plan.env))
    if preset == "nccl-pcie":
        assert any(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1" for env in envs)
    if preset == "verify-campaign":
        assert any(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") == "1"
                   and "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2" not in env for env in envs)


# ---------------------------------------------------------------- a space's own knobs


def _space(tmp_path: Path, knobs: str) -> sp.SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(f"name: x\nknobs:\n{knobs}")
    return sp.load(str(path))


def test_pcie_ipc_0_and_1_load_plan_and_pass(tmp_path: Path) -> None:
    space = _space(tmp_path, "  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: [0, 1]\n")
    levers.check_space(space, sys.executable)
    workload = _workload()
    for index, point in enumerate(space.grid()):
        ctx = TrialContext("contract", f"p{index}", tmp_path / f"p{index}", port=free_port())
        assert workload.preflight(workload.plan(point, ctx), ctx) == []


def test_a_misspelt_sglang_variable_is_refused_naming_the_real_one(tmp_path: Path) -> None:
    space = _space(tmp_path, "  SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: {env: bool, values: [0, 1]}\n")
    with pytest.raises(sp.UnknownName) as err:
        levers.check_space(space, sys.executable)
    (line,) = str(err.value).splitlines()
    assert line.endswith("has no environment variable SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE; did "
                         "you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?")


def test_a_value_sglang_would_not_read_is_an_invalid_config(tmp_path: Path) -> None:
    space = _space(tmp_path, "  SGLANG_SYMM_MEM_PREALLOC_GB_SIZE: {env: str, values: [4G]}\n")
    levers.check_space(space, sys.executable)  # the name is SGLang's
    point = {"SGLANG_SYMM_MEM_PREALLOC_GB_SIZE": "4G"}
    ctx = TrialContext("contract", "bad", tmp_path / "bad", port=free_port())
    workload = _workload()
    with pytest.raises(TrialFailed) as info:
        workload.preflight(workload.plan(point, ctx), ctx)
    assert info.value.failure.kind is FailureKind.INVALID_CONFIG
    assert "reads it as EnvInt and rejects it" in info.value.failure.message
