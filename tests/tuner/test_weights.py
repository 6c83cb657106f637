"""The weight policy: which stages load random weights, which the checkpoint's, and when the
policy steps aside."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from launchers.sglang.weights import weight_free
from search_spaces.knobs import DUMMY, WEIGHTS
from search_spaces.space import SearchSpace, load_preset
from tuner.setup import prepare
from tuner.spec import ExperimentSpec, Objective, SpecError
from tuner.weights import LIMIT, StageWeights, WeightPlan, plan


def _spec(tmp_path: Path, *, speculative: bool = True, server_args: tuple[str, ...] = (),
          **fields: Any) -> ExperimentSpec:
    args = SGLangArgs(model=str(tmp_path), server_args=list(server_args),
                      speculative_algorithm="EAGLE3" if speculative else None)
    data: dict[str, Any] = {"name": "w", "out_dir": tmp_path / "out", "workload": args,
                            "search": "staged", **fields}
    return ExperimentSpec.model_validate(data)


def _plan(spec: ExperimentSpec, metric: str, space: SearchSpace | None = None) -> WeightPlan:
    space = space or load_preset(spec.space).with_pins(spec.pins)
    return plan(spec, space, spec.workload.build(), Objective(metric, "min", 2))


def _kinds(weights: WeightPlan) -> dict[str, str]:
    return {s.stage: DUMMY if s.dummy else "real" for s in weights.stages}


def test_verify_ms_campaign_loads_random_weights_except_for_the_speculative_stage(
        tmp_path: Path) -> None:
    weights = _plan(_spec(tmp_path), "verify_ms")
    assert _kinds(weights) == {"baseline": DUMMY, "allreduce": DUMMY, "channels": DUMMY,
                               "speculative": "real"}
    assert weights.pins("channels") == {WEIGHTS: DUMMY}
    assert weights.pins("speculative") == {WEIGHTS: None}
    text = "\n".join(weights.lines())
    assert "baseline, allreduce, channels: random (--load-format dummy" in text
    assert "speculative: the checkpoint's: it tunes the speculative shape" in text
    assert "confirm: the checkpoint's: it decides" in text
    assert LIMIT in text and "--weights real loads the checkpoint everywhere" in text


@pytest.mark.parametrize("metric", ["output_throughput", "mean_tpot_ms", "accept_length",
                                    "no_such_metric", "output_throughput_c4"])
def test_an_objective_that_depends_on_acceptance_loads_the_checkpoint_everywhere(
        tmp_path: Path, metric: str) -> None:
    weights = _plan(_spec(tmp_path), metric)
    assert set(_kinds(weights).values()) == {"real"}
    assert all(f"{metric} depends on the weights' values" in s.why
               for s in weights.stages if s.stage != "speculative")
    assert not any("limit" in line for line in weights.lines())


def test_without_speculative_decoding_throughput_times_fixed_work(tmp_path: Path) -> None:
    spec = _spec(tmp_path, speculative=False, search="random", space="nccl-pcie")
    weights = _plan(spec, "output_throughput")
    assert _kinds(weights) == {"baseline": DUMMY, "search": DUMMY}
    assert weight_free("p99_itl_ms_c16", speculative=False)
    assert not weight_free("p99_itl_ms", speculative=True)
    assert weight_free("cycle_ms_c4", speculative=True)


def test_a_search_that_is_not_staged_is_one_stage(tmp_path: Path) -> None:
    weights = _plan(_spec(tmp_path, search="random"), "verify_ms")
    assert _kinds(weights) == {"baseline": "real", "search": "real"}  # speculative knobs in it
    pinned = _spec(tmp_path, search="optuna", pins={"--speculative-num-steps": 3,
                                                    "--speculative-eagle-topk": 1,
                                                    "--speculative-num-draft-tokens": 4})
    assert _kinds(_plan(pinned, "cycle_ms")) == {"baseline": DUMMY, "search": DUMMY}


def test_the_user_overrides_per_run(tmp_path: Path) -> None:
    real = _plan(_spec(tmp_path, weights="real"), "verify_ms")
    assert set(_kinds(real).values()) == {"real"}
    dummy = _plan(_spec(tmp_path, weights="dummy"), "output_throughput")
    assert set(_kinds(dummy).values()) == {DUMMY}
    assert any("stage speculative ranks on random weights although it tunes" in w
               for w in dummy.warnings)
    assert "(--weights dummy)" in dummy.summary()


def test_the_users_own_load_format_turns_the_policy_off(tmp_path: Path) -> None:
    spec = _spec(tmp_path, server_args=("--load-format", "safetensors"))
    weights = _plan(spec, "verify_ms")
    assert not weights.applies and weights.pins("allreduce") == {}
    assert weights.lines() == ["weights: --server-arg sets --load-format: every trial loads "
                               "as it says"]
    with pytest.raises(SpecError, match="--weights dummy: --server-arg sets --load-format"):
        _plan(_spec(tmp_path, weights="dummy", server_args=("--load-format=dummy",)),
              "verify_ms")
    pinned = load_preset("verify-campaign").with_pins({"--speculative-draft-load-format": "pt"})
    assert not _plan(_spec(tmp_path), "verify_ms", pinned).applies
    with pytest.raises(SpecError, match="weights: set by --weights"):
        _plan(_spec(tmp_path), "verify_ms", load_preset("verify-campaign").with_pins(
            {WEIGHTS: DUMMY}))


def test_a_workload_without_weights_is_left_alone(tmp_path: Path) -> None:
    spec = ExperimentSpec(name="p", out_dir=tmp_path, workload=ProxyArgs(), search="staged")
    setup = prepare(spec)
    assert not setup.weights.applies and setup.weights.lines() == []
    real = prepare(spec.model_copy(update={"weights": "real"}))
    assert real.weights.lines() == ["weights: the proxy workload loads no weights: --weights "
                                    "real has no effect"]


def test_prepare_plans_the_weights_of_the_experiment(tmp_path: Path) -> None:
    setup = prepare(_spec(tmp_path, metric="verify_ms", mode="min"))
    assert setup.weights.stage_pins() == {"baseline": {WEIGHTS: DUMMY},
                                          "allreduce": {WEIGHTS: DUMMY},
                                          "channels": {WEIGHTS: DUMMY},
                                          "speculative": {WEIGHTS: None}}
    assert setup.weights.stages[3] == StageWeights(
        "speculative", False, "it tunes the speculative shape, which acceptance judges")


def test_weights_dummy_means_random_weights_everywhere_the_confirm_stage_included(
        tmp_path: Path) -> None:
    """A machine without the checkpoint (the GPU session's tiny models): the confirm stage and
    the reference without speculative decoding load random weights too, and the run says so."""
    weights = _plan(_spec(tmp_path, weights="dummy"), "output_throughput")
    assert weights.pins("confirm") == {WEIGHTS: DUMMY}
    assert all(weights.pins(s.stage) == {WEIGHTS: DUMMY} for s in weights.stages)
    text = "\n".join(weights.lines())
    assert "confirm: random (--weights dummy)" in text and "the checkpoint's" not in text
    assert "the checkpoint's" not in weights.summary()
    assert _plan(_spec(tmp_path), "verify_ms").pins("confirm") == {WEIGHTS: None}


def test_no_confirm_text_without_a_confirm_stage(tmp_path: Path) -> None:
    weights = _plan(_spec(tmp_path, confirm=0), "verify_ms")
    assert not weights.confirm
    assert "confirm" not in "\n".join(weights.lines()) and "confirm" not in weights.summary()
