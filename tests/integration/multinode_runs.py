"""The multi-node integration tests' runs on the simulated cluster, and their readings of an
experiment's files (tests/integration/test_multinode_integration.py)."""

from __future__ import annotations

import json
from typing import Any

from search_spaces.space import load_preset
from simulator.runs import Experiment, stand_in
from tests.integration.sim_cluster import SimCluster


def run_args(exp: Experiment, cluster: SimCluster, server: str | None = None, samples: int = 5,
          rounds: int = 4, stop_grace: float = 1) -> list[str]:
    return ["run", "--address", cluster.address, "--nodes-per-trial", "2",
            "--model", str(exp.model), "--server-cmd", server or stand_in(), "--port", "0",
            "--space", "nccl-multinode", "--samples", str(samples), "--rounds", str(rounds),
            "--scheduler", "fifo", "--confirm", "0", "--input-len", "16", "--output-len", "96",
            "--requests-per-round", "3", "--stop-grace", f"{stop_grace:g}", "--ready-timeout", "60",
            "--no-preflight", "--out", str(exp.out)]


def nodes_of(exp: Experiment, trial: str) -> list[dict[str, Any]] | None:
    path = exp.out / trial / "nodes.json"
    try:
        data: list[dict[str, Any]] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


BASELINE = load_preset("nccl-multinode").baseline()


def find_victim(exp: Experiment, rank: int, spared: set[str]
            ) -> tuple[str, dict[str, Any]] | None:
    """A trial other than the baseline (a lost node there is no verdict on the environment,
    but no baseline to compare with either) and ``spared``, in the middle of its rounds, and
    its node ``rank``."""
    journal = exp.journal()
    ended = {e["trial_id"] for e in journal if e.get("event") == "end"}
    rounds = exp.rounds_reported()
    for event in journal:
        trial = event.get("trial_id")
        if event.get("event") != "start" or trial in ended | spared or rounds.get(trial, 0) < 1:
            continue
        if all(event["config"].get(k) == v for k, v in BASELINE.items()):
            continue
        nodes = nodes_of(exp, trial)
        if nodes:
            return trial, nodes[rank]
    return None


def overlapping(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both ran at once (a trial that died with its node 0 never wrote its end)."""
    ta, tb = a["timings"], b["timings"]
    if "wall_end" not in ta or "wall_end" not in tb:
        return False
    return ta["wall_start"] < tb["wall_end"] and tb["wall_start"] < ta["wall_end"]
