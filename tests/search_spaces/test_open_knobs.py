"""Open knobs: a space declares what the catalogue lacks; names checked against SGLang's."""

from __future__ import annotations

from pathlib import Path

import pytest

from launchers.base import knob_argv, knob_env
from search_spaces import space as sp
from search_spaces.knob import KnobKind, Source

OPEN = """
name: open
knobs:
  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: [0, 1]
  SGLANG_SYMM_MEM_PREALLOC_GB_SIZE: {env: int, values: [4, 8]}
  SGLANG_DEBUG_SYMM_MEM: {env: bool, values: [true]}
  --enable-two-batch-overlap: {flag: bool, values: [true]}
  --cuda-graph-bs-prefill: {flag: str, values: ["1 2 4", "1 2 4 8"]}
  --dcp-comm-backend: {flag: str, values: [ag_rs, a2a]}
pins:
  --dcp-comm-backend: a2a
stages:
  - {name: one, knobs: [SGLANG_SYMM_MEM_PREALLOC_GB_SIZE, --enable-two-batch-overlap]}
"""


def _load(tmp_path: Path, text: str) -> sp.SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return sp.load(str(path))


def test_a_catalogue_knob_with_0_and_1_loads_and_renders(tmp_path: Path) -> None:
    space = _load(tmp_path, "name: x\nknobs:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: [0, 1]\n")
    assert space.domains["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == (None, 0, 1)
    assert not space.open_knobs
    for point in space.grid():
        assert space.validate(point) == []
    assert knob_env({"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1})[0] == {
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}


def test_declared_knobs_load_validate_and_render(tmp_path: Path) -> None:
    space = _load(tmp_path, OPEN)
    assert set(space.open_knobs) == {"SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", "SGLANG_DEBUG_SYMM_MEM",
                                     "--enable-two-batch-overlap", "--cuda-graph-bs-prefill",
                                     "--dcp-comm-backend"}
    assert space.knob("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE").source is Source.SGLANG_ENV
    assert space.knob("--enable-two-batch-overlap").kind is KnobKind.FLAG
    assert space.domains["--cuda-graph-bs-prefill"] == (None, "1 2 4", "1 2 4 8")
    assert space.domains["--enable-two-batch-overlap"] == (False, True)
    assert "--dcp-comm-backend" not in space.domains  # pinned
    assert space.stages[0].knobs == ("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE",
                                     "--enable-two-batch-overlap")
    baseline = space.baseline()
    assert space.validate(baseline) == []
    assert knob_argv(baseline) == ["--dcp-comm-backend", "a2a"]
    point = {**baseline, "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE": 8, "SGLANG_DEBUG_SYMM_MEM": True,
             "--enable-two-batch-overlap": True, "--cuda-graph-bs-prefill": "1 2 4"}
    assert space.validate(point) == []
    env, _ = knob_env(point)
    assert env["SGLANG_SYMM_MEM_PREALLOC_GB_SIZE"] == "8" and env["SGLANG_DEBUG_SYMM_MEM"] == "1"
    assert knob_argv(point) == ["--cuda-graph-bs-prefill", "1", "2", "4", "--dcp-comm-backend",
                                "a2a", "--enable-two-batch-overlap"]
    assert space.validate({**point, "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE": "8"}) == [
        "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE: must be an integer, got '8'"]
    assert space.with_pins({"SGLANG_DEBUG_SYMM_MEM": 1}).pins["SGLANG_DEBUG_SYMM_MEM"] == 1


@pytest.mark.parametrize(("knob", "message"), [
    ("SGLANG_X: {env: float, values: [1]}", "env type 'float': one of bool, int, str"),
    ("--x: {flag: list, values: [[1]]}", "flag type 'list': one of bool, int, str"),
    ("SGLANG_X: {env: int, values: []}", "values: a non-empty list"),
    ("SGLANG_X: {env: int, flag: int, values: [1]}", "declare a knob the catalogue lacks"),
    ("SGLANG_X: {env: int, value: 1}", "unknown keys: value"),
    ("sglang_x: {env: int, values: [1]}", "'sglang_x' is not a name (UPPER_CASE)"),
    ("--Two: {flag: bool, values: [true]}", "'--Two' is not a flag name"),
    ("SGLANG_X: {env: int, values: [x]}", "must be an integer, got 'x'"),
    ("SGLANG_X: {env: bool, values: [2]}", "must be 0, 1, true or false"),
    ("--x: {flag: bool, values: [1]}", "must be true or false"),
    ("NCCL_ALGO: {env: str, values: [ring]}", "NCCL_ALGO is in the catalogue"),
])
def test_bad_declarations_name_the_key(tmp_path: Path, knob: str, message: str) -> None:
    with pytest.raises(sp.SpaceError) as err:
        _load(tmp_path, f"name: x\nknobs:\n  {knob}\n")
    assert f"knobs.{knob.split(':')[0]}: " in str(err.value)
    assert message in str(err.value)


def test_a_misspelt_catalogue_name_is_refused_naming_the_real_one(tmp_path: Path) -> None:
    with pytest.raises(sp.SpaceError) as err:
        _load(tmp_path, "name: x\nknobs:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: [0, 1]\n")
    (line,) = str(err.value).splitlines()
    assert "knobs.SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: unknown knob" in line
    assert "did you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?" in line


REGISTRY = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "SGLANG_SYMM_MEM_PREALLOC_GB_SIZE",
            "SGLANG_DEBUG_SYMM_MEM"}
OPTIONS = {"--enable-two-batch-overlap", "--cuda-graph-bs-prefill", "--dcp-comm-backend"}


def test_declared_names_against_the_installed_sglang(tmp_path: Path) -> None:
    _load(tmp_path, OPEN).check_installed(REGISTRY, OPTIONS, "0.5.23")
    misspelt = _load(tmp_path, "name: x\nknobs:\n"
                               "  SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: {env: bool, values: [0, 1]}\n")
    with pytest.raises(sp.UnknownName) as err:
        misspelt.check_installed(REGISTRY, OPTIONS, "0.5.23")
    assert str(err.value) == (
        f"{tmp_path / 'space.yaml'}: knobs.SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: SGLang 0.5.23 has "
        "no environment variable SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE; did you mean "
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?")
    assert isinstance(err.value, sp.SpaceError)
    flag = _load(tmp_path, "name: x\nknobs:\n  --enable-two-batch-overlapp: {flag: bool, "
                           "values: [true]}\n")
    with pytest.raises(sp.UnknownName, match="did you mean --enable-two-batch-overlap"):
        flag.check_installed(REGISTRY, OPTIONS)
    # Unknown registry: nothing checked; other env families are not SGLang's to check.
    misspelt.check_installed(None, None)
    _load(tmp_path, "name: x\nknobs:\n  NCCL_FOO: {env: int, values: [1]}\n").check_installed(
        REGISTRY, OPTIONS)
