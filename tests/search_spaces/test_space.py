"""Spaces from YAML: validation with file/key/reason, pins, baseline, enumeration."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from search_spaces import space as sp


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_every_preset_loads_with_a_valid_baseline() -> None:
    names = sp.preset_names()
    assert {"verify-campaign", "nccl-pcie", "nccl-nvlink", "fusion", "speculative"} <= set(names)
    for name in names:
        space = sp.load_preset(name)
        assert space.validate(space.baseline()) == []
        assert space.size > 1


def test_baseline_is_first_grid_point_and_leaves_knobs_unset() -> None:
    space = sp.load_preset("nccl-nvlink")
    first = next(space.grid())
    assert first == space.baseline()
    assert first["NCCL_ALGO"] is None and first["NCCL_NVLS_ENABLE"] == 0


def test_pins_remove_a_knob_from_the_search() -> None:
    space = sp.load_preset("nccl-pcie").with_pins({"NCCL_PROTO": "LL"})
    assert "NCCL_PROTO" not in space.domains
    assert space.baseline()["NCCL_PROTO"] == "LL"
    assert all(p["NCCL_PROTO"] == "LL" for p in (space.sample(random.Random(s)) for s in range(20)))


def test_pin_out_of_domain_is_an_error() -> None:
    with pytest.raises(sp.SpaceError, match="NCCL_NTHREADS"):
        sp.load_preset("nccl-pcie").with_pins({"NCCL_NTHREADS": 100})


def test_unknown_preset_names_the_presets() -> None:
    with pytest.raises(sp.SpaceError, match=r"unknown preset 'nope'.*verify-campaign"):
        sp.load("nope")


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs: [unclosed\n")
    with pytest.raises(sp.SpaceError) as err:
        sp.load(str(path))
    assert str(path) in str(err.value) and "malformed YAML" in str(err.value)


def test_unknown_knob_names_file_key_and_valid_names(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs:\n  NCCL_FOO: [1]\n")
    with pytest.raises(sp.SpaceError) as err:
        sp.load(str(path))
    message = str(err.value)
    assert str(path) in message and "knobs.NCCL_FOO" in message and "NCCL_ALGO" in message


def test_value_out_of_domain_names_the_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs:\n  NCCL_NTHREADS: [100]\n")
    with pytest.raises(sp.SpaceError, match=r"knobs.NCCL_NTHREADS: must be a multiple of 32"):
        sp.load(str(path))


def test_empty_space_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs: {}\n")
    with pytest.raises(sp.SpaceError, match="empty"):
        sp.load(str(path))


def test_unknown_top_level_key_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs:\n  NCCL_PROTO: [LL]\nextra: 1\n")
    with pytest.raises(sp.SpaceError, match="extra"):
        sp.load(str(path))


def test_default_word_means_unset(tmp_path: Path) -> None:
    path = _write(tmp_path, "name: x\nknobs:\n  NCCL_PROTO: [default, LL]\n")
    assert sp.load(str(path)).domains["NCCL_PROTO"] == (None, "LL")


def test_invalid_points_are_counted_not_hidden() -> None:
    space = sp.load_preset("nccl-pcie")
    valid = space.valid_size()
    assert valid is not None and 0 < valid < space.size  # MIN > MAX channels exist


def test_stage_space_pins_earlier_winners() -> None:
    space = sp.load_preset("verify-campaign")
    winners = {**space.baseline(), "NCCL_ALGO": "allreduce:tree"}
    second = space.stage_space(space.stages[1], winners)
    assert set(second.domains) == set(space.stages[1].knobs)
    assert second.baseline()["NCCL_ALGO"] == "allreduce:tree"
