"""The catalogue against an SGLang's answer (pure), and declared knobs against a stand-in."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from launchers.sglang import levers
from launchers.sglang.levers import compare, is_communication_lever
from launchers.sglang.preflight import EnvResult, ParserCheck
from search_spaces import space as sp
from search_spaces.knobs import CATALOGUE
from tests.launchers.sglang.fake_sglang import FakePython


@pytest.mark.parametrize(("name", "selected"), [
    ("--disable-custom-all-reduce", True), ("--enable-mscclpp", True),
    ("--enable-symm-mem", True), ("--pre-warm-nccl", True), ("--dcp-comm-backend", True),
    ("--enable-quant-communications", True), ("--cuda-graph-bs-decode", True),
    ("--cuda-graph-max-bs-prefill", True), ("--speculative-num-draft-tokens", True),
    ("--speculative-dflash-block-size", True), ("--flashinfer-allreduce-fusion-backend", True),
    ("--mem-fraction-static", False), ("--cuda-graph-backend-decode", False),
    ("--speculative-algorithm", False), ("--disable-shared-experts-fusion", False),
    ("--compilation-config", False),
    ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", True), ("SGLANG_USE_1STAGE_ALLREDUCE", True),
    ("SGLANG_K3_AR_FUSION", True), ("SGLANG_M3_ALLOW_CUSTOM_AR", True),
    ("SGLANG_PP_COMM_OVERLAP", True), ("SGLANG_SYMM_MEM_PREALLOC_GB_SIZE", True),
    ("SGLANG_USE_PICKLE_IPC", False), ("SGLANG_CLEAR_CACHE", False),
    ("SGLANG_VAR_AR", True), ("SGLANG_RECORD_STEP_TIME", False), ("SGLANG_COMMIT", False),
])
def test_the_selection_rule(name: str, selected: bool) -> None:
    assert is_communication_lever(name) is selected


def _option(name: str, nargs: Any = None, type_: str | None = None, **extra: Any
            ) -> dict[str, Any]:
    return {"names": [name], "nargs": nargs, "type": type_, "default": None, "choices": None,
            "deprecated": False, "hidden": False, "help": "", **extra}


def _answer(drop: tuple[str, ...] = (), options: list[dict[str, Any]] | None = None,
            env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """An answer in which SGLang has exactly the catalogue's levers, less ``drop``."""
    opts = []
    for knob in CATALOGUE.values():
        if knob.name.startswith("--") and knob.name not in drop:
            nargs = 0 if knob.is_switch else "+" if knob.list_valued else None
            opts.append(_option(knob.name, nargs, None if knob.is_switch else "int"))
    registry = [{"name": k.name, "type": "EnvInt", "default": None} for k in CATALOGUE.values()
                if k.name.startswith("SGLANG_") and k.name not in drop]
    return {"importable": True, "version": "9.9", "options": opts + (options or []),
            "env": registry + (env or [])}


def test_a_matching_sglang_gives_a_clean_report() -> None:
    report = compare(_answer(), {}, None)
    assert report.missing == () and report.uncatalogued == ()
    assert report.ok is False  # NOT_SEARCHED names this stand-in lacks are stale
    assert set(report.stale) == set(levers.NOT_SEARCHED)
    assert "NCCL_ALGO" in report.not_sglangs


def test_renamed_deprecated_and_reshaped_flags_are_missing() -> None:
    answer = _answer(drop=("--enable-mscclpp", "--enable-symm-mem", "--cuda-graph-bs-decode",
                           "SGLANG_PCIE_IPC_MAX_NUMEL"),
                     options=[_option("--enable-mscclpp-allreduce", 0),
                              _option("--enable-symm-mem", 0, deprecated=True,
                                      help="(Deprecated: use --symm-mem)"),
                              _option("--cuda-graph-bs-decode", None, "int")],
                     env=[{"name": "SGLANG_PCIE_IPC_MAX_NUMELS", "type": "EnvInt",
                           "default": 0}])
    missing = dict(compare(answer, {}).missing)
    assert missing["--enable-mscclpp"] == ("not an option (renamed or removed) "
                                           "(closest: --enable-mscclpp-allreduce)")
    assert missing["--enable-symm-mem"] == "deprecated: (Deprecated: use --symm-mem)"
    assert missing["--cuda-graph-bs-decode"] == ("SGLang's option takes int; the knob renders "
                                                 "a list")
    assert missing["SGLANG_PCIE_IPC_MAX_NUMEL"] == (
        "not in SGLang's env registry (renamed or removed) (closest: SGLANG_PCIE_IPC_MAX_NUMELS)")


def test_choices_and_env_values_sglang_would_not_take() -> None:
    answer = _answer(drop=("--flashinfer-allreduce-fusion-backend",),
                     options=[_option("--flashinfer-allreduce-fusion-backend", None, "str",
                                      choices=["auto", "mnnvl"])])
    readings = {("SGLANG_USE_1STAGE_ALLREDUCE", "1"): EnvResult(
        ok=False, known=True, error='"1" is not a valid integer value', env_type="EnvInt")}
    missing = dict(compare(answer, readings).missing)
    assert missing["--flashinfer-allreduce-fusion-backend"] == (
        "SGLang's choices ['auto', 'mnnvl'] lack ['trtllm']")
    assert missing["SGLANG_USE_1STAGE_ALLREDUCE"] == (
        "SGLang reads it as EnvInt and rejects '1': \"1\" is not a valid integer value")


def test_uncatalogued_levers_need_a_reason() -> None:
    answer = _answer(options=[_option("--pre-warm-nccl", 0), _option("--enable-new-allreduce", 0),
                              _option("--mem-fraction-static", None, "float"),
                              _option("--old-nccl-thing", 0, deprecated=True),
                              _option("--nccl-init-addr", None, "str") | {
                                  "names": ["--dist-init-addr", "--nccl-init-addr"]}],
                     env=[{"name": "SGLANG_NEW_ALLREDUCE", "type": "EnvBool", "default": False}])
    report = compare(answer, {})
    assert [lev.name for lev in report.uncatalogued] == [
        "--pre-warm-nccl", "--enable-new-allreduce", "--dist-init-addr", "SGLANG_NEW_ALLREDUCE"]
    assert [lev.name for lev in report.unexplained] == ["--enable-new-allreduce",
                                                        "SGLANG_NEW_ALLREDUCE"]
    lines = report.lines()
    assert lines[1] == "(a) catalogue entries SGLang 9.9 lacks: none"
    assert lines[2] == ("(b) communication levers of SGLang 9.9 the catalogue lacks: 4 "
                        "(2 not searched, with a reason)")
    assert "    --enable-new-allreduce [SGLang flag, switch, default None]: NOT IN THE CATALOGUE" \
        in lines
    assert any(line.startswith("    --pre-warm-nccl [") and "not searched: " in line
               for line in lines)


def test_an_unreadable_registry_is_reported_for_every_env_knob() -> None:
    answer = {**_answer(), "env": None, "env_error": "ImportError: no environ"}
    missing = dict(compare(answer, {}).missing)
    assert missing["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == (
        "SGLang's env registry unreadable: ImportError: no environ")


def test_every_not_searched_entry_gives_a_reason() -> None:
    assert all(len(reason) > 15 for reason in levers.NOT_SEARCHED.values())
    assert not set(levers.NOT_SEARCHED) & set(CATALOGUE)
    assert all(is_communication_lever(name) for name in levers.NOT_SEARCHED
               if name != "--dist-init-addr")  # selected through its alias --nccl-init-addr


# ---------------------------------------------------------------- declared knobs, end to end


def _space(tmp_path: Path, name: str) -> sp.SearchSpace:
    path = tmp_path / "space.yaml"
    path.write_text(f"name: x\nknobs:\n  {name}: {{env: bool, values: [0, 1]}}\n")
    return sp.load(str(path))


def test_check_space_names_the_closest_variable_of_the_installed_sglang(tmp_path: Path) -> None:
    fake = FakePython(tmp_path)
    checker = ParserCheck()
    try:
        levers.check_space(_space(tmp_path, "SGLANG_OLD_SPELLING"), str(fake), checker=checker)
        with pytest.raises(sp.UnknownName) as err:
            levers.check_space(_space(tmp_path, "SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE"), str(fake),
                               checker=checker)
        (line,) = str(err.value).splitlines()
        assert line.endswith("SGLang 0.0.1 has no environment variable "
                             "SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE; did you mean "
                             "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?")
    finally:
        checker.close()


def test_check_space_starts_nothing_without_declared_knobs(tmp_path: Path) -> None:
    fake = FakePython(tmp_path)
    levers.check_space(sp.load_preset("nccl-pcie"), str(fake), checker=ParserCheck())
    assert fake.parses == 0


def test_check_space_without_sglang_warns_and_passes(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    broken = FakePython(tmp_path, broken=True)
    caplog.set_level(logging.WARNING, logger=levers.__name__)
    levers.check_space(_space(tmp_path, "SGLANG_NOPE"), str(broken), checker=ParserCheck())
    assert "declared knobs not checked" in caplog.text
