"""The exports of a real confirmed run against the stand-in (launch.sh, env, best.json,
nccl-tuner.csv, report.md)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.integration.conftest import Run
from tests.tuner.output.test_exports import plugin_rules
from tuner.output.tuner_csv import TUNER_COLUMNS

pytestmark = pytest.mark.integration


def test_exports_of_a_real_run(confirmed_run: Run) -> None:
    out = confirmed_run.exp.out
    best = json.loads((out / "best.json").read_text())
    assert best["decision"] == "confirmed" and best["confirmed"]["n"] == 3
    config = best["config"]
    # nccl-tuner.csv: one allreduce rule the plugin accepts, matching the chosen settings.
    [rule] = plugin_rules((out / "best" / "nccl-tuner.csv").read_text())
    algo = (config.get("NCCL_ALGO") or "").split(":")[-1].lower()
    if algo:
        assert rule["algorithm"] == algo
    if config.get("NCCL_PROTO"):
        assert rule["protocol"] == str(config["NCCL_PROTO"]).lower()
    assert (rule["nNodes"], rule["nRanks"]) == (1, 8)
    assert best["nccl_tuner_rule"] == ",".join(str(rule[c]) for c in TUNER_COLUMNS)
    # launch.sh and env: the chosen env without servetune's measuring variables.
    launch = (out / "best" / "launch.sh").read_text()
    subprocess.run(["bash", "-n", str(out / "best" / "launch.sh")], check=True)
    for key in best["env"]:
        assert f"export {key}=" in launch and key in (out / "best" / "env").read_text()
        assert not key.startswith("NCCL_DEBUG") and key != "CUDA_VISIBLE_DEVICES", key
    assert "--speculative-algorithm EAGLE3" in launch and "--port 30000" in launch
    md = (out / "best" / "report.md").read_text()
    assert "beats the default beyond noise" in md and "Speculative decoding pays off" in md


