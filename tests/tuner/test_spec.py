"""The experiment spec: validated at the edge, saved and loaded as servetune.json, the
workload told apart by its kind, the marker naming the experiment's folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from tuner.record.files import SPEC_JSON
from tuner.record.spec_file import load_spec, save_spec
from tuner.spec import ExperimentSpec, Objective, SpecError


def test_the_default_workload_is_the_proxy_and_round_trips(tmp_path: Path) -> None:
    spec = ExperimentSpec(name="e", out_dir=tmp_path / "e")
    assert isinstance(spec.workload, ProxyArgs)
    save_spec(spec)
    again = load_spec(tmp_path / "e")
    assert again == spec


def test_servetune_json_carries_its_schema_version(tmp_path: Path) -> None:
    spec = ExperimentSpec(name="e", out_dir=tmp_path / "e")
    save_spec(spec)
    data = json.loads((spec.out_dir / SPEC_JSON).read_text())
    assert data["schema_version"] == 1 and data["name"] == "e"
    del data["schema_version"]  # a file written before versions: version 1
    (spec.out_dir / SPEC_JSON).write_text(json.dumps(data))
    assert load_spec(spec.out_dir) == spec


def test_the_workload_kind_picks_its_args(tmp_path: Path) -> None:
    spec = ExperimentSpec.model_validate({"name": "e", "out_dir": str(tmp_path),
                                          "workload": {"kind": "sglang", "model": "/m"}})
    assert isinstance(spec.workload, SGLangArgs) and spec.workload.port == 0
    with pytest.raises(ValueError, match="bogus"):
        ExperimentSpec.model_validate({"name": "e", "out_dir": str(tmp_path),
                                       "workload": {"kind": "sglang", "model": "/m",
                                                    "bogus": 1}})


def test_two_folders_with_one_name_have_two_markers(tmp_path: Path) -> None:
    a = ExperimentSpec(name="same", out_dir=tmp_path / "a")
    b = ExperimentSpec(name="same", out_dir=tmp_path / "b")
    assert a.marker_id != b.marker_id and a.marker_id.startswith("same@")


def test_a_folder_that_is_not_an_experiment_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not a servetune experiment"):
        load_spec(tmp_path)
    (tmp_path / SPEC_JSON).write_text(json.dumps({"name": "x"}))
    with pytest.raises(SpecError, match="unreadable experiment spec: out_dir"):
        load_spec(tmp_path)


def test_objective_speedup_by_mode() -> None:
    assert Objective("tok_s", "max", 3).speedup(120.0, 100.0) == pytest.approx(1.2)
    assert Objective("verify_ms", "min", 3).speedup(20.0, 25.0) == pytest.approx(1.25)
    assert Objective("tok_s", "max", 3).speedup(0.0, 100.0) != Objective(
        "tok_s", "max", 3).speedup(0.0, 100.0)  # NaN: no score, no speedup
    assert Objective("verify_ms", "min", 1).better(19.0, 20.0)
