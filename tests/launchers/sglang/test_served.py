"""The SGLang command as the user serves it (best/launch.sh's): the user's command plus the
configuration, nothing a trial adds only to measure; and what a trial's server ran."""

from __future__ import annotations

import json
from pathlib import Path

from launchers.base import TrialContext
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from launchers.sglang.ran import ran_values
from launchers.sglang.served import without_flag
from search_spaces.knobs import DUMMY, WEIGHTS, Value
from tests.tuner.output.launch_words import flags

USER_ARGS = ["--mem-fraction-static", "0.8", "--cuda-graph-max-bs-decode=16", "--trust-remote-code"]
CONFIG: dict[str, Value] = {"NCCL_ALGO": "allreduce:tree", "--speculative-num-steps": 3,
                            "--disable-custom-all-reduce": True, WEIGHTS: DUMMY}


def workload(**overrides: object) -> SGLangWorkload:
    args: dict[str, object] = {"model": "org/model", "draft_model": "org/draft",
                               "speculative_algorithm": "EAGLE3", "server_args": USER_ARGS,
                               "concurrency": [1, 8], "measured": ["verify_ms"]}
    return SGLangWorkload(SGLangArgs.model_validate({**args, **overrides}))


def ctx(tmp_path: Path, port: int = 30000) -> TrialContext:
    return TrialContext("exp", "best", tmp_path / "best", ("0", "1"), port)


def test_the_trial_measures_with_flags_the_user_never_gave(tmp_path: Path) -> None:
    """What the production command must leave out is there in a trial's."""
    trial = workload().plan(CONFIG, ctx(tmp_path))
    words = flags(trial.argv)
    assert words["--cuda-graph-bs-decode"] == ("1", "8", "16")
    assert {"--skip-server-warmup", "--cuda-graph-backend-prefill", "--host", "--load-format",
            "--enable-metrics"} <= set(words)
    assert {"NCCL_DEBUG", "SGLANG_LOG_MS", "CUDA_VISIBLE_DEVICES"} <= set(trial.env)


def test_production_is_the_users_command_plus_the_configuration(tmp_path: Path) -> None:
    plan = workload().production_plan(CONFIG, ctx(tmp_path))
    assert plan.argv[:2] == ("sglang", "serve")
    assert flags(plan.argv) == {
        "--model-path": ("org/model",), "--speculative-draft-model-path": ("org/draft",),
        "--speculative-algorithm": ("EAGLE3",), "--tp-size": ("2",), "--port": ("30000",),
        "--mem-fraction-static": ("0.8",), "--cuda-graph-max-bs-decode": ("16",),
        "--trust-remote-code": (), "--disable-custom-all-reduce": (),
        "--speculative-num-steps": ("3",)}
    assert dict(plan.env) == {"NCCL_ALGO": "allreduce:tree"} and plan.unset_env == ()


def test_production_keeps_what_the_user_gave_themselves(tmp_path: Path) -> None:
    """The user's host, their measuring-looking flags, and an env knob the configuration
    sets to a value a trial also sets to measure."""
    mine = ["--skip-server-warmup", "--enable-metrics", "--cuda-graph-bs-decode", "1", "2"]
    w = workload(host="0.0.0.0", server_args=mine, port=8000)
    plan = w.production_plan({"NCCL_DEBUG": "INFO"}, ctx(tmp_path, port=8000))
    words = flags(plan.argv)
    assert words["--host"] == ("0.0.0.0",) and words["--port"] == ("8000",)
    assert words["--cuda-graph-bs-decode"] == ("1", "2")
    assert "--skip-server-warmup" in words and "--enable-metrics" in words
    assert dict(plan.env) == {"NCCL_DEBUG": "INFO"}


def test_production_across_nodes_serves_every_node_as_the_user(tmp_path: Path) -> None:
    many = TrialContext("exp", "best", tmp_path / "best", ("0", "1"), 30000, 0, 2, "ADDR")
    plan = workload().production_plan(CONFIG, many)
    for node in (plan, *plan.peers):
        words = flags(node.argv)
        assert "--host" not in words and "--cuda-graph-bs-decode" not in words
        assert "--load-format" not in words and "NCCL_DEBUG" not in node.env
        assert words["--tp-size"] == ("4",)


def test_without_flag_takes_both_spellings() -> None:
    assert without_flag(("a", "--host", "h", "--port", "1", "--host=x"), "--host") == \
        ("a", "--port", "1")


def test_ran_reads_the_servers_resolution_first(tmp_path: Path) -> None:
    asked: dict[str, Value] = {"--speculative-num-steps": 5, "--speculative-eagle-topk": 1,
                               "--speculative-num-draft-tokens": 2, "NCCL_ALGO": "Ring",
                               "--attention-backend": None}
    assert ran_values(asked, tmp_path) == {}
    (tmp_path / "resolved.json").write_text(json.dumps({"ok": True, "resolved": {
        "speculative_num_steps": 5, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 6, "attention_backend": "triton"}}))
    assert ran_values(asked, tmp_path)["--speculative-num-draft-tokens"] == 6
    (tmp_path / "server_resolved.json").write_text(json.dumps({"resolved": {
        "speculative_num_steps": 5, "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 6, "attention_backend": "fa3", "cuda_graph_bs": [1]}}))
    assert ran_values(asked, tmp_path) == {
        "--speculative-num-steps": 5, "--speculative-eagle-topk": 1,
        "--speculative-num-draft-tokens": 6, "--attention-backend": "fa3"}


def test_a_value_the_configuration_sets_overrides_the_users() -> None:
    """The user's server args are the baseline: a trial's value replaces theirs (every word
    of it), an unset knob leaves theirs."""
    words = ["--cuda-graph-bs-decode", "1", "2", "--speculative-num-steps=5", "--trust-remote-code"]
    w = workload(server_args=words)
    plan = w.plan({"--speculative-num-steps": 2, "--cuda-graph-bs-decode": None},
                  TrialContext("exp", "t", Path("t"), ("0",), 31000))
    got = flags(plan.argv)
    assert got["--speculative-num-steps"] == ("2",) and got["--cuda-graph-bs-decode"] == ("1", "2")
    assert "--trust-remote-code" in got
    assert without_flag(("--a", "1", "2", "--b", "--c=3", "x"), "--a", "--c") == ("--b",)
