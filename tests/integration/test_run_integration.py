"""The spine end to end: `servetune run` as a subprocess, real Ray (8 logical GPUs), real
server processes (the stand-in), real HTTP.

One experiment (a five-point grid, shared by most assertions here) holds every case the
spine must handle: the baseline, a good config, a global NCCL_ALGO=Tree that crashes CUDA
graph capture, a slow config that ASHA must stop, and a server that hangs before it is
ready. It also runs with the dashboard on (the default) and with hostile text in the model
path, a server argument and the experiment folder. A second test runs a two-node Ray cluster.
``--resume`` of an interrupted experiment (Ctrl-C, and a SIGKILLed driver) is shown, twice
each, by test_faults_integration.py.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from simulator.runs import ROOT, Experiment, Result, ray_tmpdir, stand_in
from tests.integration.gates import PAIR_WAIT_S, paired_server

pytestmark = pytest.mark.integration

# The hung server's wait, which every healthy server of the run must beat: on a loaded
# 2-core box a stand-in ready in 1 s idle took 14 s to print its first line.
READY_TIMEOUT = 45.0
ROUNDS = 3
# ASHA spares a trial within this launch spread of its rung's best (TiedASHA): the slow case
# is 4x slower (log 1.39 below), far outside it, while a loaded box's noise on the good case
# stays inside it. With the 0.02 of a quiet box a busy one stopped the good case once.
SPREAD = "0.5"
SPACE = """\
name: spine
description: one knob, one case per value
knobs:
  NCCL_ALGO: [allreduce:tree, Tree, allreduce:ring, allreduce:pat]
"""
SERVER_FAULTS = ("--fake-fault-if", "slow:NCCL_ALGO=allreduce:ring",
                 "--fake-fault-if", "hang-startup:NCCL_ALGO=allreduce:pat")


def hostile(canary: Path) -> str:
    """Text that runs ``touch canary`` if anything along the way hands it to a shell."""
    return (f"a b 'q' \"dq\" $(touch {canary}) `touch {canary}` ; touch {canary} && "
            f"$HOME ${{IFS}} \\ * ~")


@dataclass
class Spine:
    exp: Experiment
    result: Result
    canary: Path
    served_name: str
    dashboard_probe: dict[str, int] = field(default_factory=dict)

    def trial(self, algo: str | None) -> dict[str, object]:
        table = self.exp.table()
        rows = table[table["NCCL_ALGO"] == (algo or "default")]
        assert len(rows) == 1, f"{algo}: {len(rows)} rows\n{table}"
        return dict(rows.iloc[0])


def _probe_dashboard(exp: Experiment, stdout_path: Path, found: dict[str, int],
                     done: threading.Event) -> None:
    """While the run is on: the dashboard answers an API call without a token with 401."""
    while not done.is_set():
        text = stdout_path.read_text() if stdout_path.exists() else ""
        match = re.search(r"Ray dashboard: (http://\S+)", text)
        if match:
            url = match.group(1).rstrip("/") + "/api/version"
            try:
                with urllib.request.urlopen(url, timeout=3) as response:
                    found["status"] = response.status
            except urllib.error.HTTPError as err:
                found["status"] = err.code
            except OSError:
                time.sleep(0.2)
                continue
            return
        time.sleep(0.1)


@pytest.fixture(scope="module")
def spine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Spine]:
    root = tmp_path_factory.mktemp("spine")
    canary = root / "CANARY"
    # The model folder's name and a server argument carry shell syntax.
    model = root / ("model " + hostile(canary).replace("/", "_"))
    served = hostile(canary) + "\nsecond line"
    space = root / "spine.yaml"
    space.write_text(SPACE)
    with ray_tmpdir() as ray_tmp:
        # The experiment folder too (its name is not an experiment name: --name gives one).
        exp = Experiment.create(root, ray_tmp, name="out dir 'q' \"dq\" $x ;y", model=model,
                                base_args=["--name", "spine"])
        argv = ["run", *exp.args("--space", str(space), "--search", "grid", "--samples", "5",
                                 "--rounds", str(ROUNDS), "--launch-spread", SPREAD,
                                 "--server-arg", shlex.join(["--served-model-name", served]),
                                 server=stand_in(*SERVER_FAULTS), ready_timeout=READY_TIMEOUT)]
        background = exp.start(argv)
        probe: dict[str, int] = {}
        done = threading.Event()
        prober = threading.Thread(target=_probe_dashboard,
                                  args=(exp, background.stdout_path, probe, done), daemon=True)
        prober.start()
        try:
            result = background.finish(timeout=600)
            done.set()
            prober.join(5)
            yield Spine(exp, result, canary, served, probe)
        finally:
            done.set()
            exp.cleanup()


def test_run_completes(spine: Spine) -> None:
    assert spine.result.returncode == 0, str(spine.result)
    assert len(spine.exp.table()) == 5, str(spine.result)


def test_confirm_0_skips_the_stage(spine: Spine) -> None:
    """--confirm 0 (Experiment.args) without speculative decoding: no confirm launch, no
    reference run; the decision says why it is unconfirmed."""
    exp = spine.exp
    assert {e.get("phase", "search") for e in exp.journal() if e.get("event") == "start"} \
        == {"search"}
    data = json.loads((exp.out / "confirm.json").read_text())
    assert data["entries"] == [] and data.get("speculative") is None
    assert data["decision"]["kind"] in ("unconfirmed", "default")
    assert "--confirm 0" in data["decision"]["text"]
    assert set(exp.table()["phase"]) == {"search"}


def test_baseline_is_trial_0(spine: Spine) -> None:
    base = spine.trial(None)
    assert base["order"] == 0 and bool(base["baseline"]) and base["status"] == "ok"
    assert spine.exp.trial_ids()[0] == base["trial_id"]


def test_trials_never_overlap(spine: Spine) -> None:
    spans = sorted((r["timings"]["wall_start"], r["timings"]["wall_end"], t)
                   for t, r in spine.exp.records().items())
    assert len(spans) == 5
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        assert end <= start, f"{a} ran until {end:.3f}, {b} started at {start:.3f}"


def test_each_server_saw_8_gpus(spine: Spine) -> None:
    for trial_id in spine.exp.trial_ids():
        gpus = spine.exp.server_gpus(trial_id)
        assert sorted(gpus) == [str(i) for i in range(8)], f"{trial_id}: {gpus}"


def test_good_config_completes_every_round(spine: Spine) -> None:
    tree = spine.trial("allreduce:tree")
    assert tree["status"] == "ok" and tree["rounds"] == ROUNDS


def test_asha_stops_the_slow_trial_early(spine: Spine) -> None:
    slow = spine.trial("allreduce:ring")
    assert slow["status"] == "stopped" and 1 <= slow["rounds"] < ROUNDS, slow


def test_global_tree_crash_is_graph_capture(spine: Spine) -> None:
    crash = spine.trial("Tree")
    assert crash["status"] == "failed" and crash["failure_kind"] == "graph_capture", crash
    failure = json.loads((spine.exp.out / str(crash["trial_id"]) / "failure.json").read_text())
    assert "Capture cuda graph failed" in failure["log_tail"]


def test_hang_is_startup_timeout_within_the_timeout(spine: Spine) -> None:
    hang = spine.trial("allreduce:pat")
    assert hang["status"] == "failed" and hang["failure_kind"] == "startup_timeout", hang
    timings = spine.exp.record(str(hang["trial_id"]))["timings"]
    waited = timings["total_s"] - timings["setup_s"] - timings["teardown_s"]
    assert READY_TIMEOUT - 0.5 <= waited <= READY_TIMEOUT + 5.0, timings


def test_no_marked_process_survives(spine: Spine) -> None:
    assert spine.exp.leftovers() == []


def test_dashboard_on_localhost_with_token_auth(spine: Spine) -> None:
    lines = [ln for ln in spine.result.stdout.splitlines() if ln.startswith("Ray dashboard:")]
    assert lines and lines[0].startswith("Ray dashboard: http://127.0.0.1:"), \
        spine.result.stdout
    assert "token" in lines[0].lower()
    # An API call without the token is refused (Ray 2.60's token auth stays on).
    assert spine.dashboard_probe.get("status") in (401, 403), spine.dashboard_probe


def test_hostile_values_stay_inert(spine: Spine, tmp_path: Path) -> None:
    exp = spine.exp
    assert not spine.canary.exists()
    plan = json.loads((exp.out / exp.trial_ids()[0] / "plan.json").read_text())
    argv = plan["argv"]
    assert argv[argv.index("--model-path") + 1] == str(exp.model)
    assert argv[argv.index("--served-model-name") + 1] == spine.served_name
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    # best/launch.sh: valid bash, and bash hands the server exactly the planned argv and env.
    script = exp.out / "best" / "launch.sh"
    best = json.loads((exp.out / "best.json").read_text())
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    exec_part = text[text.index("\nexec ") + 1:]  # a quoted newline spans lines
    assert shlex.split(exec_part)[1:] == best["argv"]
    echo = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)}, "
            "sys.stdout)")
    probe = tmp_path / "probe.sh"
    probe.write_text(text.replace("exec ", f"exec {shlex.quote(sys.executable)} -c "
                                           f"{shlex.quote(echo)} ", 1))
    out = subprocess.run(["bash", str(probe)], check=True, capture_output=True, text=True,
                         cwd=tmp_path)
    seen = json.loads(out.stdout)
    assert seen["argv"] == best["argv"]
    assert {k: seen["env"].get(k) for k in best["env"]} == best["env"]
    assert not spine.canary.exists()


# ---------------------------------------------------------------- two nodes

TWO_NODE_TRIALS = 6


@pytest.mark.timeout(900)  # a safety net: ~3 min beside two busy loops alone
def test_two_nodes_run_two_trials_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    """Each trial holds one whole node: two at once on two nodes, never straddling."""
    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # Ray workers start the stand-in module
    with ray_tmpdir() as ray_tmp:
        monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
        node_args = {"num_cpus": 1, "num_gpus": 8, "temp_dir": str(ray_tmp / "ray"),
                     "include_dashboard": False}
        cluster = Cluster(initialize_head=True, head_node_args=node_args)
        exp = Experiment.create(tmp_path, ray_tmp)
        try:
            cluster.add_node(**{k: v for k, v in node_args.items() if k != "include_dashboard"})
            cluster.wait_for_nodes()
            ray.init(address=cluster.address)
            node_ids = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            ray.shutdown()
            # The first trial's server starts once the second's has (tests/integration/gates.py)
            argv = exp.args("--space", "nccl-pcie", "--search", "grid", "--samples",
                            str(TWO_NODE_TRIALS), "--rounds", "2", "--scheduler", "fifo",
                            "--address", cluster.address,
                            server=paired_server(tmp_path / "gate"),
                            ready_timeout=PAIR_WAIT_S + 60)
            argv.remove("--num-gpus")
            argv.remove("8")
            result = exp.run(["run", *argv])
            assert result.returncode == 0, str(result)
            assert "2 node(s)" in result.stdout and "at most 2 trial(s) at once" in result.stdout
            table = exp.table()
            assert len(table) == TWO_NODE_TRIALS and set(table["status"]) == {"ok"}, str(result)
            runs = []
            for trial_id in exp.trial_ids():
                nodes = {e["node_id"] for e in exp.journal()
                         if e.get("event") == "result" and e["trial_id"] == trial_id}
                assert len(nodes) == 1 and nodes <= node_ids, f"{trial_id} ran on {nodes}"
                assert sorted(exp.server_gpus(trial_id)) == [str(i) for i in range(8)]
                t = exp.record(trial_id)["timings"]
                runs.append((t["wall_start"], t["wall_end"], nodes.pop(), trial_id))
            overlapping = [(a, b) for i, a in enumerate(runs) for b in runs[i + 1:]
                           if a[0] < b[1] and b[0] < a[1]]
            assert overlapping, f"no two trials ran at once: {runs}"
            for a, b in overlapping:
                assert a[2] != b[2], f"{a[3]} and {b[3]} overlapped on one node"
            assert exp.leftovers() == []
        finally:
            ray.shutdown()
            exp.cleanup()
            cluster.shutdown()
