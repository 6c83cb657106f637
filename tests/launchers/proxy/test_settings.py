"""The dispatch's settings from a configuration: inherited variables, composite knobs through
search_spaces.knobs.expand_config where it exists (what SGLang reads from the primitives is
tested in tests/launchers/sglang/release/test_allreduce_settings.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from launchers.proxy.comm import settings
from launchers.proxy.comm.settings import Settings


def test_a_configuration_reads_as_the_releases_rules_read_its_primitives() -> None:
    config = {"--disable-custom-all-reduce": True, "SGLANG_USE_1STAGE_ALLREDUCE": 1,
              "SGLANG_FORCE_CUSTOM_ALL_REDUCE_V2_PUSH_SIZE_KB": "64"}
    assert Settings.from_config({}) == Settings()
    assert Settings.from_config(config) == Settings.from_primitives(config)


def test_inherited_environment_counts_unless_the_config_unsets_it() -> None:
    env = {"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    assert Settings.from_config({}, env).custom_ar_v2 is False
    assert Settings.from_config({}, env).multicast_off is True
    unset = Settings.from_config({"SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": None}, env)
    assert unset.custom_ar_v2 is True  # None: the knob removes the variable, SGLang's default


def test_composites_expand_through_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """With expand_config in search_spaces.knobs the composite's primitives are read; without
    it (until it lands) the configuration is read as it is."""
    import search_spaces.knobs as knobs

    def expand_config(config: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in config.items() if k != "allreduce-backend"}
        if config.get("allreduce-backend") == "nccl":
            out["--disable-custom-all-reduce"] = True
        return out

    monkeypatch.setattr(knobs, "expand_config", expand_config, raising=False)
    assert Settings.from_config({"allreduce-backend": "nccl"}).disable_custom_all_reduce
    monkeypatch.delattr(knobs, "expand_config")
    assert settings.expand({"allreduce-backend": "nccl"}) == {"allreduce-backend": "nccl"}
    assert not Settings.from_config({"allreduce-backend": "nccl"}).disable_custom_all_reduce
