"""The exports of a real confirmed run against the stand-in (launch.sh, env, best.json,
nccl-tuner.csv, report.md)."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from launchers.base import knob_argv, knob_env
from simulator.runs import stand_in
from tests.integration.conftest import Run
from tests.tuner.output.launch_words import flags, script
from tests.tuner.output.test_tuner_csv import plugin_choice, plugin_load

# the shared confirm run takes ~100 s on a quiet box and minutes on a loaded one
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def test_exports_of_a_real_run(confirmed_run: Run) -> None:
    out = confirmed_run.exp.out
    best = json.loads((out / "best.json").read_text())
    confirm = json.loads((out / "confirm.json").read_text())
    launches = {len(e["trials"]) for e in confirm["entries"] if e["label"] == best["label"]}
    assert best["decision"] == "confirmed" and {best["confirmed"]["n"]} == launches
    config = best["config"]
    # nccl-tuner.csv: what NCCL ran in the winning trial, read back with the plugin's rules.
    text = (out / "best" / "nccl-tuner.csv").read_text()
    rules = plugin_load(text)
    effective = json.loads((out / best["trial_id"] / "effective.json").read_text())
    assert rules and effective["choices"], text
    for c in effective["choices"]:
        coll = c["collective"].lower()
        assert plugin_choice(rules, coll, c["bytes"], ranks=8) == \
            (c["algo"].lower(), c["proto"].lower(), c["channels"]), (c, text)
    algo = (config.get("NCCL_ALGO") or "").split(":")[-1].lower()
    if algo:
        assert {r.algorithm for r in rules if r.collective == "allreduce"} == {algo}
    assert all((r.nodes, r.ranks) == (1, 8) and r.channels >= 1 for r in rules)
    assert best["nccl_tuner_rules"] == [ln for ln in text.splitlines() if ln[:1].isalpha()]
    # launch.sh and env: the chosen env without servetune's measuring variables.
    launch = (out / "best" / "launch.sh").read_text()
    subprocess.run(["bash", "-n", str(out / "best" / "launch.sh")], check=True)
    for key in best["env"]:
        assert f"export {key}=" in launch and key in (out / "best" / "env").read_text()
        assert not key.startswith("NCCL_DEBUG") and key != "CUDA_VISIBLE_DEVICES", key
    # launch.sh flag by flag: the user's command (the stand-in's words, their model and
    # speculative algorithm, the GPUs' TP size, SGLang's port), plus the winner's settings
    # as its server ran them; nothing a trial adds only to measure, no --host of servetune's.
    argv, env, unset = script(launch)
    served = best["served_config"]
    user = [*shlex.split(stand_in()), "--model-path", str(confirmed_run.exp.model),
            "--speculative-algorithm", "EAGLE3", "--tp-size", "8", "--port", "30000"]
    assert argv[:len(shlex.split(stand_in()))] == shlex.split(stand_in())
    assert flags(argv) == flags(user) | flags(knob_argv(served)), argv
    assert env == knob_env(served)[0] and tuple(unset) == knob_env(served)[1]
    md = (out / "best" / "report.md").read_text()
    assert "beats the baseline beyond launch-to-launch noise" in md and "Speculative decoding pays off" in md


