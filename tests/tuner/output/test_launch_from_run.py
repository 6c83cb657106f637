"""best/launch.sh built from a run's folder with the real objects (spec, setup, journal,
the winner's resolved.json), read back flag by flag against the user's command plus the
winner's settings as its server ran them; and what ran in results.csv, the labels and the
report's line on the proposals never launched."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from launchers.sglang.launcher import SGLangArgs
from search_spaces.knobs import DUMMY, WEIGHTS, Value
from tests.tuner.output.launch_words import flags, script
from tuner.output import exports, proposals
from tuner.output.progress import settings_text
from tuner.output.ran import row_configs
from tuner.output.results import build_table, summary_lines
from tuner.record.files import JOURNAL, REJECTED
from tuner.record.spec_file import save_spec
from tuner.setup import Setup, prepare
from tuner.spec import ExperimentSpec

USER_ARGS = ["--mem-fraction-static", "0.7", "--context-length=4096", "--trust-remote-code"]
WINNER: dict[str, Value] = {"--speculative-num-steps": 5, "--speculative-eagle-topk": 1,
                            "--speculative-num-draft-tokens": 2}
RESOLVED = {"speculative_num_steps": 5, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 6, "cuda_graph_max_bs_decode": 8,
            "load_format": "dummy", "host": "127.0.0.1", "port": 31234}


def _setup(tmp_path: Path, **workload: Any) -> Setup:
    args = SGLangArgs(model="org/target", draft_model="org/draft", speculative_algorithm="EAGLE3",
                      server_args=USER_ARGS, concurrency=[1, 4], preflight=False,
                      measured=["output_throughput"], **workload)
    spec = ExperimentSpec(name="served", out_dir=tmp_path / "exp", space="speculative",
                          workload=args, weights="dummy", rounds=1, confirm=0)
    save_spec(spec)
    setup = prepare(spec)
    setup.gpus_per_trial = 1
    return setup


def _trial(out: Path, tid: str, order: int, config: dict[str, Value], score: float,
           resolved: dict[str, Any] | None) -> list[dict[str, Any]]:
    if resolved is not None:
        (out / tid).mkdir(parents=True, exist_ok=True)
        (out / tid / "server_resolved.json").write_text(json.dumps({"resolved": resolved}))
    now = time.time()
    return [{"time": now, "event": "start", "trial_id": tid, "order": order, "config": config,
             "stage": None, "dir": None, "phase": "search"},
            {"time": now, "event": "result", "trial_id": tid, "round": 1,
             "output_throughput": score},
            {"time": now, "event": "end", "trial_id": tid, "status": "ok"}]


def _run(setup: Setup) -> dict[str, Value]:
    """A search of two trials on random weights: the baseline, and the winner SGLang
    resolved to (5, 1, 6); the search's proposals SGLang answered or refused."""
    out = setup.out_dir
    baseline = {**setup.space.baseline(), WEIGHTS: DUMMY}
    winner = {**baseline, **WINNER}
    events = [*_trial(out, "base", 0, baseline, 171.0, None),
              *_trial(out, "win", 1, winner, 266.0, RESOLVED)]
    (out / JOURNAL).write_text("".join(json.dumps(e) + "\n" for e in events))
    twin = {**winner, "--speculative-num-draft-tokens": 4}
    refused = "SGLang's checks rejected the command: speculative_eagle_topk must be set"
    rejected = [{"config": twin, "invalid": [], "ruled_out": [], "repeat_of": "win"},
                {"config": winner, "invalid": [], "ruled_out": [], "repeat_of": "win"},
                {"config": {**winner, "--speculative-eagle-topk": None}, "invalid": [refused],
                 "ruled_out": []},
                {"config": baseline, "invalid": [], "ruled_out": ["steps=3 crashed"]}]
    (out / REJECTED).write_text("".join(json.dumps(e) + "\n" for e in rejected))
    return winner


def _export(setup: Setup, winner: dict[str, Value]) -> dict[str, Any]:
    df = build_table(setup.out_dir, setup.objective, setup.space.baseline())
    decision = {"kind": "unconfirmed", "config": winner, "source_trial": "win",
                "label": "search best", "text": "the search's best"}
    best = exports.export(setup, decision, df, None)
    assert best is not None
    return best


@pytest.mark.parametrize("host", [None, "0.0.0.0"])
def test_launch_sh_is_the_users_command_plus_the_winners_diff(tmp_path: Path,
                                                              host: str | None) -> None:
    setup = _setup(tmp_path, **({"host": host} if host else {}))
    best = _export(setup, _run(setup))
    argv, env, unset = script((setup.out_dir / "best" / "launch.sh").read_text())
    user = ["sglang", "serve", "--model-path", "org/target", "--speculative-draft-model-path",
            "org/draft", "--speculative-algorithm", "EAGLE3", "--tp-size", "1",
            *(["--host", host] if host else []), "--port", "30000", *USER_ARGS]
    # The winner's diff from the baseline, as its server ran it (draft tokens 6, not the 2
    # asked), and the space's pin.
    diff = ["--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "6"]
    assert argv[:2] == ["sglang", "serve"]
    assert flags(argv) == flags(user) | flags(diff)
    assert env == {"NCCL_NVLS_ENABLE": "0"} and unset == []
    text = (setup.out_dir / "best" / "launch.sh").read_text()
    assert "# --speculative-num-draft-tokens 6: what the trial's server resolved 2" in text
    assert best.config["--speculative-num-draft-tokens"] == 2
    assert best.served_config["--speculative-num-draft-tokens"] == 6
    assert best.argv == argv


def test_launch_sh_of_a_trial_never_resolved_is_the_asked_config(tmp_path: Path) -> None:
    setup = _setup(tmp_path, port=8123)
    winner = _run(setup)
    (setup.out_dir / "win" / "server_resolved.json").unlink()
    _export(setup, winner)
    argv, _, _ = script((setup.out_dir / "best" / "launch.sh").read_text())
    words = flags(argv)
    assert words["--speculative-num-draft-tokens"] == ("2",) and words["--port"] == ("8123",)
    assert not {"--host", "--load-format", "--cuda-graph-bs-decode", "--enable-metrics",
                "--skip-server-warmup", "--cuda-graph-backend-prefill"} & set(words)


def test_results_labels_and_report_show_what_ran(tmp_path: Path) -> None:
    setup = _setup(tmp_path)
    _run(setup)
    knobs = list(setup.space.domains)
    df = build_table(setup.out_dir, setup.objective, setup.space.baseline()).set_index("trial_id")
    win = df.loc["win"]
    assert win["--speculative-num-draft-tokens"] == 6
    assert win["--speculative-num-draft-tokens asked"] == 2
    assert win["--cuda-graph-max-bs-decode"] == 8  # the server's choice, asked unset
    assert win["--cuda-graph-max-bs-decode asked"] == "default"
    assert "--speculative-num-steps asked" not in df or df["--speculative-num-steps asked"].isna().all()
    asked, ran = row_configs(win.to_dict(), knobs)
    assert settings_text(asked, knobs, ran) == (
        "speculative-num-steps=5 speculative-eagle-topk=1 speculative-num-draft-tokens=6 "
        "(asked 2) cuda-graph-max-bs-decode=8 (the server's choice)")
    lines = summary_lines(df.reset_index(), setup.objective, knobs)
    assert any(line.startswith("win") and "speculative-num-draft-tokens=6 (asked 2)" in line
               for line in lines), lines
    assert proposals.lines(setup.out_dir) == [
        "proposals not launched: 4 (1 answered by a resolved twin (a trial the server runs "
        "alike), 1 answered by the same configuration's trial, 1 refused by SGLang's checks, "
        f"1 ruled out by the failure memory; {REJECTED})"]


def test_the_report_and_the_progress_lines_say_what_ran(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    from tuner.output.report import facts
    from tuner.run.progress import TrialLines

    setup = _setup(tmp_path)
    winner = _run(setup)
    df = build_table(setup.out_dir, setup.objective, setup.space.baseline())
    f = facts(setup, df, {"decision": {"kind": "unconfirmed", "config": winner,
                                       "source_trial": "win", "text": "best"}})
    assert "speculative-num-draft-tokens=6 (asked 2)" in f.chosen
    off = {**winner, **dict.fromkeys(WINNER)}  # served without speculative decoding
    f_off = facts(setup, df, {"decision": {"kind": "unconfirmed", "config": off,
                                           "source_trial": "win", "speculative": False}})
    assert "speculative" not in f_off.chosen and "choice" not in f_off.chosen, f_off.chosen
    assert ["not launched", proposals.lines(setup.out_dir)[0].partition(": ")[2]] in f.how
    assert any("speculative_eagle_topk must be set" in n for n in f.notes)
    assert any("speculative-num-draft-tokens=6 (asked 2)" in row[5] for row in f.top[1:])
    lines = TrialLines(setup.objective.metric, list(setup.space.domains), 1)
    trial = SimpleNamespace(trial_id="win", config=winner, status=Trial.TERMINATED,
                            last_result={"round": 1, "output_throughput": 266.0},
                            storage=SimpleNamespace(trial_fs_path=str(setup.out_dir / "win")))
    text = lines.line(trial, None)  # type: ignore[arg-type]
    assert text is not None and "speculative-num-draft-tokens=6 (asked 2)" in text, text


def test_the_proxys_launch_sh_keeps_working(tmp_path: Path) -> None:
    """The proxy's production plan is the base one: its trial's command, the configuration's
    env, no measuring env."""
    from launchers.base import TrialContext
    from launchers.proxy.launcher import ProxyArgs

    workload = ProxyArgs(device="cpu").build()
    ctx = TrialContext("exp", "best", tmp_path / "best", (), None)
    plan = workload.production_plan({"NCCL_ALGO": "allreduce:ring", WEIGHTS: DUMMY}, ctx)
    assert plan.env.get("NCCL_ALGO") == "allreduce:ring"
    assert not {"NCCL_DEBUG", "CUDA_VISIBLE_DEVICES"} & set(plan.env)
    assert flags(plan.argv[3:])["--device"] == ("cpu",)
