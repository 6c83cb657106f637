"""The allreduce-backend composite: expansion into primitives, contradictions, rendering."""

from __future__ import annotations

import pytest

from launchers.base import knob_argv, knob_env
from search_spaces import knobs
from search_spaces.composite import (
    ALLREDUCE_BACKEND,
    COMPOSITES,
    conflicts,
    expand_config,
    primitive_names,
)

BACKENDS = list(COMPOSITES[ALLREDUCE_BACKEND].expansions)


def test_the_backends_sglang_offers() -> None:
    assert BACKENDS == ["nccl", "custom-v1", "custom-v2", "one-stage", "torch-symm-mem",
                        "nccl-symm-mem", "mscclpp", "pcie-ipc", "flashinfer-fusion"]
    assert knobs.get("allreduce-backend").kind is knobs.KnobKind.COMPOSITE


def test_primitives_pass_through_and_unset_adds_nothing() -> None:
    config = {"NCCL_ALGO": "allreduce:tree", "--enable-symm-mem": True}
    assert expand_config(config) == config
    assert expand_config({**config, ALLREDUCE_BACKEND: None}) == config


def test_nccl_turns_custom_allreduce_and_fusion_off() -> None:
    expanded = expand_config({ALLREDUCE_BACKEND: "nccl", "NCCL_PROTO": "LL"})
    assert ALLREDUCE_BACKEND not in expanded
    assert expanded["NCCL_PROTO"] == "LL"
    assert expanded["--disable-custom-all-reduce"] is True
    assert expanded["--enforce-disable-flashinfer-allreduce-fusion"] is True
    assert expanded["--enable-symm-mem"] is False
    assert expanded["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] is None


@pytest.mark.parametrize(("backend", "on"), [
    ("custom-v1", ("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", 0)),
    ("custom-v2", ("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", 1)),
    ("one-stage", ("SGLANG_USE_1STAGE_ALLREDUCE", 1)),
    ("torch-symm-mem", ("--enable-torch-symm-mem", True)),
    ("nccl-symm-mem", ("--enable-symm-mem", True)),
    ("mscclpp", ("--enable-mscclpp", True)),
    ("pcie-ipc", ("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", 1)),
    ("flashinfer-fusion", ("--flashinfer-allreduce-fusion-backend", "auto")),
])
def test_each_backend_turns_itself_on(backend: str, on: tuple[str, object]) -> None:
    expanded = expand_config({ALLREDUCE_BACKEND: backend})
    assert expanded[on[0]] == on[1]
    # Custom allreduce comes before the others in SGLang's order: off unless it is the choice.
    custom = backend.startswith(("custom", "one-stage", "flashinfer"))
    assert expanded["--disable-custom-all-reduce"] is (not custom)
    assert expanded["--enforce-disable-flashinfer-allreduce-fusion"] is (backend != "flashinfer-fusion")


def test_rendering_goes_through_the_expansion() -> None:
    config = {ALLREDUCE_BACKEND: "pcie-ipc", "NCCL_ALGO": "allreduce:ring"}
    env, unset = knob_env(config)
    assert env == {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1", "NCCL_ALGO": "allreduce:ring"}
    assert "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2" in unset and ALLREDUCE_BACKEND not in unset
    assert knob_argv(config) == ["--enforce-disable-flashinfer-allreduce-fusion",
                                 "--disable-custom-all-reduce"]
    assert knob_env({ALLREDUCE_BACKEND: None}) == ({}, ())
    assert knob_argv({ALLREDUCE_BACKEND: None}) == []


def test_a_contradicting_primitive_is_invalid() -> None:
    config = {ALLREDUCE_BACKEND: "custom-v2", "--disable-custom-all-reduce": True}
    assert conflicts(config) == [
        "allreduce-backend=custom-v2 needs --disable-custom-all-reduce=false, "
        "but the config sets --disable-custom-all-reduce=true"]
    assert knobs.check_config(config) == conflicts(config)
    # The primitive still wins in the expansion: primitives pass through unchanged.
    assert expand_config(config)["--disable-custom-all-reduce"] is True


def test_an_agreeing_or_unset_primitive_is_valid() -> None:
    assert knobs.check_config({ALLREDUCE_BACKEND: "nccl", "--disable-custom-all-reduce": True}) == []
    assert knobs.check_config({ALLREDUCE_BACKEND: "nccl", "--disable-custom-all-reduce": False,
                               "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": None}) == []
    assert knobs.check_config({ALLREDUCE_BACKEND: "nccl", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": 1})


def test_constraints_see_the_expansion() -> None:
    reasons = knobs.check_config({ALLREDUCE_BACKEND: "nccl-symm-mem", "NCCL_CUMEM_ENABLE": 0})
    assert reasons == ["--enable-symm-mem needs NCCL_CUMEM_ENABLE=1 (or unset)"]


def test_an_unknown_choice_is_refused_by_the_domain() -> None:
    assert knobs.check_config({ALLREDUCE_BACKEND: "quick"}) == [
        "allreduce-backend: must be one of " + ", ".join(repr(b) for b in BACKENDS)]
    assert expand_config({ALLREDUCE_BACKEND: "quick"}) == {}


def test_primitive_names_of_a_space_with_the_composite() -> None:
    names = primitive_names(["NCCL_ALGO", ALLREDUCE_BACKEND])
    assert ALLREDUCE_BACKEND not in names
    assert {"NCCL_ALGO", "--disable-custom-all-reduce", "--enable-mscclpp",
            "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "--flashinfer-allreduce-fusion-backend"} <= names
    assert primitive_names(["NCCL_ALGO"]) == {"NCCL_ALGO"}


def test_every_switch_sglangs_dispatch_reads_is_set_by_each_backend() -> None:
    """The composite turns off, or on, every switch of SGLang's allreduce dispatch
    (launchers/sglang/release/allreduce_settings): none is left to the environment."""
    from launchers.sglang.release.allreduce_settings import ENV_BOOL, FLAGS

    for backend, expansion in COMPOSITES[ALLREDUCE_BACKEND].expansions.items():
        assert set(expansion) == {*FLAGS, *ENV_BOOL}, backend
