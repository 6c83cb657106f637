"""Trials are findable in the Ray dashboard: during a real run with the defaults (dashboard
on, trial actors reused) the dashboard's own API lists the live trial actors as
``servetune_trial``, and every trial by name (``servetune_trial <experiment>/<trial id>``) in
its task list; callers without the token are refused."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from simulator.runs import Experiment, ray_tmpdir
from tuner.run.dashboard import TRAINABLE_NAME, auth_token, list_actors, list_tasks

pytestmark = pytest.mark.integration


def _dashboard_url(out: Path) -> str | None:
    try:
        url = json.loads((out / "run.json").read_text()).get("dashboard_url")
    except (OSError, ValueError):
        return None
    return str(url) if url else None


def test_live_trial_actors_are_named_in_the_dashboard(tmp_path: Path) -> None:
    seen: dict[int, dict[str, Any]] = {}  # pid -> the actor as the API showed it while alive
    names: set[str] = set()  # the trials' marker tasks
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(tmp_path, ray_tmp, name="dash")
        run = exp.start(["run", *exp.args("--space", "nccl-pcie", "--samples", "3", "--rounds",
                                          "3", "--requests-per-round", "3")])
        try:
            run.wait_for(lambda: _dashboard_url(exp.out) is not None, 120, "the dashboard URL")
            url = _dashboard_url(exp.out)
            assert url is not None and re.match(r"http://127\.0\.0\.1:\d+$", url)
            token = auth_token()
            assert token, "Ray 2.60 token auth: no token in $RAY_AUTH_TOKEN or ~/.ray/auth_token"
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"{url}/api/v0/actors", timeout=5)
            assert refused.value.code == 401
            while run.popen.poll() is None:
                try:
                    actors = list_actors(url, token, timeout=5)
                    # marker tasks only: an actor's own tasks are named "<its repr>.<method>"
                    names |= {str(t.get("name")) for t in list_tasks(url, token, timeout=5)
                              if str(t.get("name", "")).startswith(TRAINABLE_NAME + " ")
                              and t.get("type") == "NORMAL_TASK"}
                except (OSError, ValueError):
                    actors = []  # the dashboard starting up or going away
                for actor in actors:
                    if actor.get("class_name") == TRAINABLE_NAME and actor.get("state") == "ALIVE":
                        seen[actor["pid"]] = actor
                time.sleep(0.25)
            result = run.finish(30)
        finally:
            left = exp.cleanup()
    assert result.returncode == 0, result
    assert not left, f"processes survived the run: {left}"
    assert f"Ray dashboard: {url}" in result.stdout and "ray get-auth-token" in result.stdout
    assert f"TensorBoard: tensorboard --logdir {exp.out}" in result.stdout
    trials = set(exp.trial_ids())
    expected = {f"{TRAINABLE_NAME} {exp.spec.name}/{t}" for t in trials}
    assert seen, "no live servetune_trial actor seen"
    assert {a["repr_name"] for a in seen.values()} <= expected  # an actor names its first trial
    # Reused actors: every trial is found by its own name in the task list.
    assert names == expected, (names, expected)
