"""The sglang workload's preflight reads every SGLANG_* value as SGLang would: a name SGLang
does not declare, or a value its env type rejects, is an invalid_config trial, not a launch."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from launchers import process
from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port
from launchers.sglang import preflight
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from search_spaces import space as sp
from tests.launchers.sglang.fake_sglang import FakePython


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePython:
    checker = preflight.ParserCheck()
    monkeypatch.setattr(preflight, "_checker", checker)
    yield FakePython(tmp_path / "python")
    checker.close()


def _space(tmp_path: Path, knobs: str) -> sp.SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(f"name: x\nknobs:\n{knobs}")
    return sp.load(str(path))


def _preflight(fake: FakePython, tmp_path: Path, config: dict[str, object]) -> list[str]:
    workload = SGLangWorkload(SGLangArgs(model="/models/x", server_cmd=[str(fake), "-m",
                                                                        "sglang.launch_server"],
                                         preflight_python=str(fake), metrics=False,
                                         nccl_debug=False, capture_concurrency=False,
                                         fast_start=False))
    ctx = TrialContext("exp@3", "t1", tmp_path / "exp" / "t1", port=free_port())
    return workload.preflight(workload.plan(config, ctx), ctx)  # type: ignore[arg-type]


def test_values_sglang_reads_pass(fake: FakePython, tmp_path: Path) -> None:
    assert _preflight(fake, tmp_path, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1,
                                       "SGLANG_PCIE_IPC_MAX_NUMEL": 262144}) == []
    (resident,) = preflight._checker._residents.values()
    assert psutil.Process(resident.proc.pid).environ()[process.MARKER_ENV] == "exp@3/preflight"


def test_a_value_its_env_type_rejects_is_invalid_config(fake: FakePython, tmp_path: Path) -> None:
    space = _space(tmp_path, "  SGLANG_OLD_SPELLING: {env: str, values: [maybe]}\n")
    point = dict(next(p for p in space.grid() if p["SGLANG_OLD_SPELLING"]))
    with pytest.raises(TrialFailed) as info:
        _preflight(fake, tmp_path, point)
    assert info.value.failure.kind is FailureKind.INVALID_CONFIG
    assert info.value.failure.message == (
        "SGLANG_OLD_SPELLING='maybe': SGLang 0.0.1 reads it as EnvBool and rejects it "
        "(\"maybe\" is not a valid boolean value); it would run with its default instead")


def test_a_name_sglang_lacks_is_invalid_config(fake: FakePython, tmp_path: Path) -> None:
    with pytest.raises(TrialFailed) as info:
        _preflight(fake, tmp_path, {"SGLANG_PCIE_IPC_MAX_NUMELL": 4})
    assert info.value.failure.kind is FailureKind.INVALID_CONFIG
    assert info.value.failure.message == (
        "SGLANG_PCIE_IPC_MAX_NUMELL: SGLang 0.0.1 has no such environment variable (it would "
        "ignore it; closest: SGLANG_PCIE_IPC_MAX_NUMEL)")


def test_the_readings_are_cached_in_the_experiment_folder(fake: FakePython, tmp_path: Path
                                                         ) -> None:
    _preflight(fake, tmp_path, {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1})
    entries = json.loads((tmp_path / "exp" / "preflight-cache.json").read_text())["entries"]
    asked = [json.loads(key)[-1] for key in entries]
    assert {"env": "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "value": "1"} in asked
