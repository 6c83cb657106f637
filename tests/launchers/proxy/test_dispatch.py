"""The proxy's reading of SGLang's allreduce dispatch (the rules themselves are tested in
tests/launchers/sglang/release/test_allreduce.py): the same routes from a configuration of any
knobs, and which of them the proxy runs."""

from __future__ import annotations

from typing import Any

import pytest

from launchers.proxy.comm import dispatch
from launchers.proxy.comm.dispatch import Machine, allgather_route, allreduce_route
from launchers.proxy.comm.settings import Settings
from tests.launchers.sglang.release.test_allreduce import CASES, KIMI_57K, LLAMA, REFUSED


def route(config: dict[str, Any], *, world: int = 2, nvlink: bool = True, sm: int | None = 9,
          multicast: bool = False, nbytes: int = KIMI_57K, arch: str = LLAMA,
          tokens: int = 4, graph: bool = True) -> dispatch.Route:
    m = Machine(world=world, nvlink=nvlink, sm_major=sm, multicast=multicast, graph=graph)
    return allreduce_route(Settings.from_config(config), m, nbytes, architecture=arch,
                           tokens=tokens)


@pytest.mark.parametrize("case, config, where, path", CASES, ids=[c[0] for c in CASES])
def test_allreduce_route(case: str, config: dict[str, Any], where: dict[str, Any],
                         path: str) -> None:
    r = route(config, **where)
    assert r.path == path, r.describe()
    assert r.error is None
    assert r.modelled is (path in dispatch.RUNNABLE), r.describe()


@pytest.mark.parametrize("config, where, match", REFUSED)
def test_configurations_sglang_refuses(config: dict[str, Any], where: dict[str, Any],
                                       match: str) -> None:
    r = route(config, **where)
    assert r.error is not None and match in r.error and not r.modelled
    assert r.describe().startswith("SGLang refuses")


def test_what_the_proxy_cannot_run_is_named() -> None:
    assert "not modelled" in route({"--enable-mscclpp": True}, world=8).describe()


def test_allgather_route() -> None:
    two = Machine(world=2, nvlink=True)
    assert allgather_route(Settings(), two).path == dispatch.NCCL
    assert allgather_route(Settings(enable_symm_mem=True), two).path == dispatch.NCCL_SYMM
    eight = Machine(world=8, nvlink=True)
    assert allgather_route(Settings(enable_mscclpp=True), eight).path == dispatch.MSCCLPP
