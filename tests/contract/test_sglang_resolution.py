"""SGLang's own resolution and checks (its ServerArgs) in the preflight reader, against the
installed SGLang (0.5.23 on CI, on a CPU: resolved as for a CUDA device, nothing skipped).

The models are the configs of the tiny ones the GPU sessions serve (shared/data/tiny-llama*,
their config.json copied to tests/launchers/models/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.sglang import preflight as sglang_preflight
from launchers.sglang import resolved
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from launchers.sglang.preflight import ParserCheck, shared
from search_spaces.space import load_preset, preset_names
from tests.sglang_parser import CONTRACT

pytestmark = CONTRACT

MODELS = Path(__file__).resolve().parents[1] / "launchers" / "models"
TARGET, DRAFT = str(MODELS / "tiny-llama"), str(MODELS / "tiny-llama-eagle3")
BASE = ["--model-path", TARGET, "--load-format", "dummy", "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", DRAFT, "--tp-size", "1"]


def shape(steps: int | None, topk: int | None, drafts: int | None) -> list[str]:
    words = []
    for flag, value in (("--speculative-num-steps", steps), ("--speculative-eagle-topk", topk),
                        ("--speculative-num-draft-tokens", drafts)):
        words += [flag, str(value)] if value is not None else []
    return [*BASE, *words]


@pytest.fixture(scope="module")
def checker() -> ParserCheck:
    return shared()  # the worker's one reader: each fresh one is ~8 s of SGLang's import


def test_a_partial_shape_is_rejected_with_sglangs_own_assertion(checker: ParserCheck) -> None:
    (result,) = checker.resolve_many([shape(None, 1, None)])
    assert result.ok is False
    assert result.error.startswith("AssertionError in ")
    assert "_handle_eagle_family" in result.error and "speculative_eagle_topk is None" in result.error
    assert result.sglang_version


def test_topk_one_resolves_draft_tokens_to_steps_plus_one(checker: ParserCheck) -> None:
    four, eight, other = checker.resolve_many([shape(3, 1, 4), shape(3, 1, 8), shape(2, 1, 3)])
    assert all(r.ok for r in (four, eight, other)), (four.error, eight.error, other.error)
    assert eight.resolved is not None and eight.resolved["speculative_num_draft_tokens"] == 4
    assert resolved.key(four, {}) == resolved.key(eight, {})
    assert resolved.key(four, {}) != resolved.key(other, {})
    assert resolved.key(four, {"NCCL_ALGO": "Ring"}) != resolved.key(four, {})
    assert eight.device and "assumed" in eight.device and not eight.skipped


def test_no_steps_lets_sglang_choose_the_whole_shape(checker: ParserCheck) -> None:
    (auto,) = checker.resolve_many([BASE])
    assert auto.ok and auto.resolved is not None
    assert all(isinstance(auto.resolved[f"speculative_{n}"], int)
               for n in ("num_steps", "eagle_topk", "num_draft_tokens"))


def _workload(server_args: list[str]) -> SGLangWorkload:
    return SGLangArgs(model=TARGET, draft_model=DRAFT, speculative_algorithm="EAGLE3",
                      server_args=["--load-format", "dummy", *server_args]).build()


def test_a_partial_shape_is_an_invalid_config_trial_before_any_launch(tmp_path: Path) -> None:
    workload = _workload([])
    ctx = TrialContext("resolution-test", "t1", tmp_path / "t1", port=30123)
    plan = workload.plan({"--speculative-eagle-topk": 1}, ctx)
    with pytest.raises(TrialFailed) as info:
        workload.preflight(plan, ctx)
    failure = info.value.failure
    assert failure.kind is FailureKind.INVALID_CONFIG
    assert "SGLang's checks rejected the command: AssertionError" in failure.message
    assert not (tmp_path / "t1" / "server.log").exists()  # nothing launched
    assert (tmp_path / "t1" / resolved.RESOLVED_FILE).is_file()


def test_configurations_that_resolve_alike_share_an_identity(tmp_path: Path) -> None:
    workload = _workload([])
    ctx = TrialContext("resolution-test", "identity", tmp_path / "identity", port=30000)
    same = [workload.identity({"--speculative-num-steps": 3, "--speculative-eagle-topk": 1,
                               "--speculative-num-draft-tokens": d}, ctx)
            for d in (4, 8)]
    assert same[0] is not None and same[0] == same[1]
    other = workload.identity({"--speculative-num-steps": 2, "--speculative-eagle-topk": 1,
                               "--speculative-num-draft-tokens": 3}, ctx)
    assert other != same[0]


def test_the_drivers_identity_answers_the_trials_preflight(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """What the search's identity asked SGLang on the driver is in the experiment's cache: a
    trial of that configuration, on its own port, in a process of its own (a Ray worker),
    asks SGLang nothing (on the H200 each trial's own reader cost 18-25 s of SGLang's import)."""
    workload = _workload([])
    config = {"--speculative-num-steps": 3, "--speculative-eagle-topk": 1}
    driver = TrialContext("resolution-test", "identity", tmp_path / "identity", port=30000)
    assert workload.identity(config, driver) is not None
    trial_process = ParserCheck()

    def asked(*question: object) -> None:
        raise AssertionError(f"the trial asked SGLang {question!r}")

    monkeypatch.setattr(trial_process, "_fresh", asked)
    monkeypatch.setattr(sglang_preflight, "_checker", trial_process)
    ctx = TrialContext("resolution-test", "t1", tmp_path / "t1", port=30123)
    workload.preflight(workload.plan(config, ctx), ctx)
    data = json.loads((tmp_path / "t1" / resolved.RESOLVED_FILE).read_text())
    assert data["ok"] is True and data["resolved"]["port"] == 30123
    assert data["shown"]["speculative_num_draft_tokens"] == 4


def test_the_driver_refuses_what_the_trials_preflight_would(tmp_path: Path) -> None:
    """The search asks SGLang on the driver whether a configuration would start: the
    refusal is the text the trial's preflight fails with, and a shape SGLang accepts has
    none."""
    workload = _workload([])
    driver = TrialContext("resolution-test", "identity", tmp_path / "identity", port=30000)
    refused = workload.refusal({"--speculative-eagle-topk": 1}, driver)
    assert refused and refused.startswith("SGLang's checks rejected the command: AssertionError")
    assert workload.refusal({"--speculative-num-steps": 3, "--speculative-eagle-topk": 1},
                            driver) is None
    ctx = TrialContext("resolution-test", "t1", tmp_path / "t1", port=30123)
    with pytest.raises(TrialFailed) as info:
        workload.preflight(workload.plan({"--speculative-eagle-topk": 1}, ctx), ctx)
    assert info.value.failure.message == refused


@pytest.mark.parametrize("name", preset_names())
def test_no_preset_renders_a_shape_sglang_asserts_on(name: str, checker: ParserCheck) -> None:
    """Every valid point of every preset (and every stage's) resolves in SGLang's own checks."""
    space = load_preset(name)
    shape = frozenset(n for n in space.domains if n.startswith("--speculative-"))
    spec_space, _ = space.restricted_to(shape)  # every speculative shape the preset has
    points = [p for p in spec_space.grid() if not spec_space.validate(p)]
    workload = _workload([])
    ctx = TrialContext("resolution-test", "p", Path("p"), port=30000)
    argvs = [list(workload.plan(p, ctx).argv[2:]) for p in points
             if any(k.startswith("--speculative") for k, v in p.items() if v is not None)]
    rejected = [(argv, r.error) for argv, r in zip(argvs, checker.resolve_many(argvs), strict=True)
                if r.ok is False]
    assert not rejected, rejected[:3]
