"""Trials across nodes on a simulated Ray cluster (tests/integration/sim_cluster.py): a CPU
head and four nodes of 8 logical GPUs on this machine, joined with --address, two nodes per
trial, the stand-in server on each node (simulator/fake_nodes.py).

One run does it all (a cluster costs ~10 s and ~1 GiB): two trials at once on disjoint node
pairs; a follower's node killed mid-trial, then another trial's node 0 (the node the trial
itself runs on), each as a machine dies (its raylet, its Ray workers and its servers): both
trials fail as node_lost with the node named, no value is ruled out, the search goes on on the
nodes left, and nothing of the experiment is left on any node; each trial's plan and
best/launch.sh show both nodes' commands, and each follower served its own port. A shorter
run before it (a grid's first three points) has one trial's follower fail at NCCL's init:
nccl_error with node 1 named, nothing ruled out, the run goes on. Another (the same grid) has
the third trial's follower find its meeting ports reserved on its node (each simulated node
has its own reservations): port_busy with node 1 named before any server of that trial starts,
nothing ruled out, the run goes on.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launchers.multinode import MEETING_PORTS
from launchers.ports import PortLease, ephemeral_range, meeting_range
from launchers.process import MARKER_ENV, ServerProcess, marked_processes
from simulator.runs import FAST, ROOT, Experiment, env_for
from tests.integration.gates import PAIR_WAIT_S, paired_server
from tests.integration.multinode_runs import find_victim, nodes_of, overlapping, run_args
from tests.integration.sim_cluster import SimCluster, left_on, sim_cluster
from tuner.run.multinode import NODE_ENV

# Two-node runs beside two busy loops took 213-451 s (40-82 s quiet): the 300 s default
# timeout would decide a verdict by the machine's load.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with sim_cluster(nodes=4) as simulated:
        yield simulated


def test_the_end_of_run_sweep_reaps_each_nodes_leftovers(cluster: SimCluster,
                                                         tmp_path: Path) -> None:
    """What a run's end does on every node (tuner.run.nodes.sweep, from a driver joined to the
    cluster): each node reaps the experiment's processes that run there, and those of no node."""
    prefix = f"sweep-{uuid.uuid4().hex[:6]}/"
    a, b = cluster.node_ids()[:2]
    left = {node: ServerProcess.spawn(["sleep", "900"], {"PATH": "/usr/bin:/bin",
                                                         **({NODE_ENV: node} if node else {})},
                                       tmp_path / f"{node}.log", f"{prefix}t1/node1")
            for node in (a, b, "")}
    code = (f"import json, ray\nray.init(address={cluster.address!r}, log_to_driver=False)\n"
            f"from tuner.run.nodes import sweep\nprint(json.dumps(sweep({prefix!r})))")
    try:
        done = subprocess.run([sys.executable, "-c", code], env=env_for(cluster.ray_tmp),
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        swept = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        survivors = marked_processes(prefix)
    finally:
        for server in left.values():
            server.stop(grace=0.5)
    assert done.returncode == 0, done.stderr[-3000:]
    assert left[a].pid in swept[a] and left[b].pid in swept[b], swept
    assert left[""].pid in {p for pids in swept.values() for p in pids}
    assert not survivors


def test_a_node_with_another_sglang_stops_the_run_in_one_line_before_anything_starts(
        cluster: SimCluster, tmp_path: Path) -> None:
    """A fifth node whose Python finds another SGLang distribution first (its PYTHONPATH: a
    dist-info of SGLang 0.0.1, as another install on that machine would be): exit 2, one
    line naming that node and both installs, no trial started. The node leaves after."""
    site = tmp_path / "other-site" / "sglang-0.0.1.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n")
    saved = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site.parent), saved])
    try:
        odd = cluster.cluster.add_node(num_cpus=1, num_gpus=8, temp_dir=str(cluster.ray_tmp))
    finally:
        os.environ["PYTHONPATH"] = saved
    try:
        cluster.cluster.wait_for_nodes()
        exp = Experiment.create(tmp_path, cluster.ray_tmp)
        result = exp.run(run_args(exp, cluster), timeout=180)
    finally:
        cluster.cluster.remove_node(odd)
    errors = [line for line in result.stderr.splitlines() if line.startswith("servetune: ")]
    assert result.returncode == 2 and len(errors) == 1, result
    assert re.match(rf"servetune: error: --address {re.escape(cluster.address)}: node "
                    rf"{odd.node_id[:16]} \(\S+\) has servetune \S+ .*with SGLang 0\.0\.1, the "
                    r"driver servetune \S+ .*with SGLang \S+: every node needs the driver's "
                    r"servetune and SGLang$", errors[0]), errors[0]
    assert not [e for e in exp.journal() if e.get("event") == "start"]
    assert not marked_processes(exp.prefix)


# A follower's fabric failing at NCCL's init, as SGLang logs it (its scheduler's exception).
NCCL_INIT_ERROR = """\
[2026-12-03 05:00:00 TP8] Scheduler hit an exception: Traceback (most recent call last):
  File "/root/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process
    scheduler = Scheduler(
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/\
ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL \
version 2.28.9
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device \
error.
Last error:
socket recv: Connection reset by peer
"""
# The stand-in, except node 1 of a trial whose environment sets FAULTY: that one prints the
# log above and dies as SGLang does (--fake-replay-log: SIGKILL of its own tree).
FOLLOWER_FAULT = """\
import os, sys
from simulator import sglang_server
argv = sys.argv[1:]
if os.environ.get({knob!r}) == {value!r} and argv[argv.index("--node-rank") + 1] == "1":
    argv += ["--fake-replay-log", {log!r}]
sys.exit(sglang_server.main(argv))
"""
# --search grid --samples 3: the baseline, then NCCL_PXN_DISABLE=0 and =1 (the grid's first
# points, whatever the seed): the faulty value is launched once, after the baseline has run (the
# same failure on node 0 there makes NCCL_PXN_DISABLE=1 a suspect: suspects.json).
FAULTY = ("NCCL_PXN_DISABLE", "1")


def test_a_follower_only_nccl_error_rules_nothing_out_and_the_run_goes_on(
        cluster: SimCluster, tmp_path: Path) -> None:
    """Before the node-killing test (it needs all four nodes). One trial's follower (node 1)
    fails at NCCL's init, its node 0 healthy: the trial fails as nccl_error with node 1 and
    both nodes named, node 0's server is stopped with it, nothing is ruled out nor suspect
    (one node's fabric says nothing about a setting until it repeats on other nodes), and
    the run ends as usual with every other trial measured and nothing left on any node."""
    log = tmp_path / "nccl-init-error.log"
    log.write_text(NCCL_INIT_ERROR)
    code = FOLLOWER_FAULT.format(knob=FAULTY[0], value=FAULTY[1], log=str(log))
    server = shlex.join([sys.executable, "-c", code, *FAST])
    exp = Experiment.create(tmp_path, cluster.ray_tmp)
    args = [*run_args(exp, cluster, server=server, samples=3, rounds=1), "--search", "grid"]
    try:
        result = exp.run(args, timeout=300)
        every_node = cluster.node_ids()
        left = {n: left_on(exp.prefix, n) for n in every_node}
        anywhere = marked_processes(exp.prefix)
    finally:
        leaked = exp.cleanup()
    assert result.returncode == 0, result
    assert not leaked and not anywhere and all(not found for found in left.values()), left

    starts = {e["trial_id"]: e["config"] for e in exp.journal() if e.get("event") == "start"}
    ends = {e["trial_id"]: e for e in exp.journal() if e.get("event") == "end"}
    [faulty] = [t for t, c in starts.items() if str(c.get(FAULTY[0])) == FAULTY[1]]
    assert len(starts) == len(ends) == 3, (starts, ends)
    failure = ends[faulty]["failure"]
    assert ends[faulty]["status"] == "failed" and failure["kind"] == "nccl_error", failure
    assert failure["details"]["node_rank"] == 1 and failure["message"].startswith(
        "node 1 (Ray node "), failure
    placed = nodes_of(exp, faulty) or []
    assert [n["rank"] for n in placed] == [0, 1], placed
    assert failure["details"]["placement"] == [n["node_id"] for n in placed], failure
    assert "ncclSystemError" in (exp.out / faulty / "node1" / "server.log").read_text()
    assert {ends[t]["status"] for t in ends if t != faulty} == {"ok"}, ends
    # Nothing ruled out, nor suspect: the value may be launched again.
    assert not (exp.out / "ruled_out.json").exists(), (exp.out / "ruled_out.json").read_text()
    assert not (exp.out / "suspects.json").exists(), (exp.out / "suspects.json").read_text()


# The stand-in, each launch noted (its marker) in GATE/launched; node 0 of a trial waits, once
# its followers are up, for GATE/held (GATE/node0.<pid> says it waits): the first two trials'
# followers pass their port checks before the test's reservations are taken, and both trials
# end only after (the third starts when one of them ends).
PORT_GATE = """\
import os, sys, time
from pathlib import Path
from simulator import sglang_server
argv, gate = sys.argv[1:], Path({gate!r})
with open(gate / "launched", "a") as noted:
    noted.write(os.environ.get({marker!r}, "") + "\\n")
if argv[argv.index("--node-rank") + 1] == "0":
    (gate / f"node0.{{os.getpid()}}").touch()
    deadline = time.monotonic() + 120
    while not (gate / "held").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
sys.exit(sglang_server.main(argv))
"""
HOLDER = "the test's reservations"


class Reservations:
    """Another owner's reservations (launchers.ports' lock files) of ``wanted`` ports in each
    node's folder, taken now; a port that a running trial holds there is retried every 10 ms
    until that trial's end lets it go."""

    def __init__(self, wanted: dict[Path, list[int]]) -> None:
        self.leases = [(PortLease(HOLDER, folder), ports) for folder, ports in wanted.items()]
        self.pending = [lease.take(ports, hosts=()) for lease, ports in self.leases]
        self._quit = threading.Event()
        self._retry = threading.Thread(target=self._retrying, daemon=True)
        self._retry.start()

    def _retrying(self) -> None:
        while any(self.pending) and not self._quit.wait(0.01):
            self.pending = [lease.take(busy, hosts=()) if busy else []
                            for (lease, _), busy in zip(self.leases, self.pending, strict=True)]

    def close(self) -> None:
        self._quit.set()
        self._retry.join()
        for lease, _ in self.leases:
            lease.close()


def _followers_blocked(cluster: SimCluster) -> dict[Path, list[int]]:
    """Per node, the meeting-port blocks (``launchers.ports.reserve_block``'s) that a trial's
    node 0 elsewhere may pick: node i's folder holds the first port of every block but every
    fourth from i on. A trial's node 0 on node i finds free only blocks that every other node
    holds: its follower, wherever it runs, finds its meeting port reserved (port_busy), its
    node 0 never does."""
    first, last = meeting_range(block=MEETING_PORTS)
    bases = range(first, last - MEETING_PORTS + 2, MEETING_PORTS)
    folders = list(cluster.port_locks.values())
    return {folder: [b for k, b in enumerate(bases) if k % len(folders) != i]
            for i, folder in enumerate(folders)}


def test_a_busy_follower_port_fails_the_trial_as_port_busy_before_anything_starts(
        cluster: SimCluster, tmp_path: Path) -> None:
    """Before the node-killing test (it needs all four nodes). Each simulated node has its own
    port reservations; once the first two trials (the baseline among them) are up, every
    meeting port a trial's node 0 can pick is reserved by another owner on every other node.
    The third trial fails as port_busy with its follower (node 1) named and the ports it found
    reserved there, before any server of that trial starts (no launch, no node log, no
    nodes.json); nothing is ruled out nor suspect, and the run ends as usual (exit 0, the
    other trials measured, nothing left on any node)."""
    gate = tmp_path / "gate"
    gate.mkdir()
    code = PORT_GATE.format(gate=str(gate), marker=MARKER_ENV)
    server = shlex.join([sys.executable, "-c", code, *FAST])
    exp = Experiment.create(tmp_path, cluster.ray_tmp)
    args = [*run_args(exp, cluster, server=server, samples=3, rounds=1), "--search", "grid",
            "--ready-timeout", "180"]
    blocked = _followers_blocked(cluster)
    held: Reservations | None = None
    run = exp.start(args)
    try:
        run.wait_for(lambda: len(list(gate.glob("node0.*"))) >= 2, timeout=240,
                     what="the first two trials' node 0 servers")
        held = Reservations(blocked)
        (gate / "held").touch()

        def three_ended() -> bool:
            return len([e for e in exp.journal() if e.get("event") == "end"]) >= 3

        run.wait_for(three_ended, timeout=240, what="three trials ended")
        held.close()
        held = None
        result = run.finish(timeout=240)
        left = {n: left_on(exp.prefix, n) for n in cluster.node_ids()}
        anywhere = marked_processes(exp.prefix)
    finally:
        if held is not None:
            held.close()
        leaked = exp.cleanup()
    assert result.returncode == 0, result
    assert not leaked and not anywhere and all(not found for found in left.values()), left

    order = exp.trial_ids()
    ends = {e["trial_id"]: e for e in exp.journal() if e.get("event") == "end"}
    assert len(order) == len(ends) == 3, (order, ends)
    late = order[2]
    failure = ends[late].get("failure") or {}
    assert ends[late]["status"] == "failed" and failure.get("kind") == "port_busy", ends[late]
    assert failure["details"]["node_rank"] == 1 and failure["message"].startswith(
        "node 1 (Ray node "), failure
    [follower] = [n for n in cluster.port_locks if n[:16] in failure["message"]]
    found = re.search(r"port\(s\) ([\d, ]+) reserved by another trial", failure["message"])
    assert found, failure
    busy = {int(p) for p in found.group(1).split(", ")}
    assert busy and busy <= set(blocked[cluster.port_locks[follower]]), (busy, follower)
    # Before anything of that trial started: no server launched on any node, no node's log.
    launched = (gate / "launched").read_text().splitlines()
    assert len(launched) == 4 and not [m for m in launched if late in m], launched
    assert not (exp.out / late / "node1" / "server.log").exists()
    assert not (exp.out / late / "server.log").exists()
    assert nodes_of(exp, late) is None
    assert {ends[t]["status"] for t in order[:2]} == {"ok"}, ends
    assert not (exp.out / "ruled_out.json").exists(), (exp.out / "ruled_out.json").read_text()
    assert not (exp.out / "suspects.json").exists(), (exp.out / "suspects.json").read_text()


def test_two_node_trials_two_at_once_survive_a_follower_and_a_node_0_killed_mid_trial(
        cluster: SimCluster, tmp_path: Path) -> None:
    """Run after the sweep test: it needs all four nodes, and kills two."""
    exp = Experiment.create(tmp_path, cluster.ray_tmp)
    # The first trial's node 0 starts once the second's has (tests/integration/gates.py); a
    # drain is never cut short (stop_grace)
    server = paired_server(tmp_path / "gate", "--fake-rendezvous-s", str(PAIR_WAIT_S + 60))
    run = exp.start([*run_args(exp, cluster, server=server, stop_grace=10),
                     "--ready-timeout", str(PAIR_WAIT_S + 60)])
    try:
        seen: dict[int, tuple[str, dict[str, Any]]] = {}
        killed_at: dict[int, float] = {}
        every_node = cluster.node_ids()
        for rank in (1, 0):  # a follower's node, then another trial's node 0

            def measuring(rank: int = rank) -> bool:
                found = find_victim(exp, rank, {t for t, _ in seen.values()})
                if found is not None:
                    seen[rank] = found
                return found is not None

            # a safety net past the gate: beside two busy loops at -n 4 the driver took 148 s
            # to its first server
            run.wait_for(measuring, timeout=PAIR_WAIT_S + 210,
                         what=f"a trial measuring (node {rank} to kill)")
            killed_at[rank] = time.time()
            cluster.kill_node(seen[rank][1]["node_id"])
        result = run.finish(timeout=240)
        prefix = exp.prefix
        left = {n: left_on(prefix, n) for n in every_node}
        anywhere = marked_processes(prefix)
    finally:
        leaked = exp.cleanup()
    assert result.returncode == 0, result
    assert not leaked and not anywhere, (leaked, anywhere)
    assert all(not found for found in left.values()), left  # per node, the killed one too

    records = exp.records()
    ends = {e["trial_id"]: e for e in exp.journal() if e.get("event") == "end"}
    for rank, (victim, node) in seen.items():  # node 0's trial died with it: the journal's
        failure = ends[victim]["failure"]
        assert ends[victim]["status"] == "failed" and failure["kind"] == "node_lost", failure
        assert failure["details"]["node_rank"] == rank, failure
        assert node["node_id"][:16] in failure["message"], failure
    # Nothing ruled out (nor suspect): a lost node says nothing about a setting.
    assert not (exp.out / "ruled_out.json").exists() and not (exp.out / "suspects.json").exists()
    # The search went on: every other trial ran to its end, one of them started after a kill.
    victims = {t for t, _ in seen.values()}
    others = {t: r for t, r in records.items() if t not in victims}
    assert len(ends) == 5 and {ends[t]["status"] for t in others} == {"ok"}, {
        t: (e["status"], e.get("failure")) for t, e in ends.items()}
    assert any(r["timings"]["wall_start"] > killed_at[1] for r in others.values())
    # Node 0 stopped first, its follower after it, on its own: no follower was killed after
    # the wait (nodes-stop.txt would say so), nothing was left on a node.
    stops = {t: (exp.out / t / "nodes-stop.txt") for t in others}
    assert not [p.read_text() for p in stops.values() if p.exists()], stops

    # Two trials at once, each on two nodes of its own.
    pairs = [(a, b) for a in records for b in records if a < b
             and overlapping(records[a], records[b])]
    assert pairs, "no two trials ran at once"
    a, b = pairs[0]
    nodes_a = {n["node_id"] for n in nodes_of(exp, a) or []}
    nodes_b = {n["node_id"] for n in nodes_of(exp, b) or []}
    assert len(nodes_a) == len(nodes_b) == 2 and not nodes_a & nodes_b

    # Every node's command: in each trial's plan, and in best/launch.sh.
    plan = json.loads((exp.out / b / "plan.json").read_text())
    argvs = [plan["argv"], *(p["argv"] for p in plan["peers"])]
    addr = {argv[argv.index("--dist-init-addr") + 1] for argv in argvs}
    assert [argv[argv.index("--node-rank") + 1] for argv in argvs] == ["0", "1"]
    assert len(addr) == 1 and all(argv[argv.index("--nnodes") + 1] == "2" for argv in argvs)
    meeting = int(next(iter(addr)).rpartition(":")[2])  # outside the ephemeral range
    assert meeting < ephemeral_range()[0] or meeting > ephemeral_range()[1], meeting
    assert plan["argv"][plan["argv"].index("--tp-size") + 1] == "16"  # 2 nodes x 8 GPUs
    script = (exp.out / "best" / "launch.sh").read_text()
    assert "--node-rank 0 --dist-init-addr \"${DIST_INIT_ADDR}\"" in script, script
    assert "--node-rank 1 --dist-init-addr \"${DIST_INIT_ADDR}\"" in script, script
    # Node 1's server log is in the trial's folder, from its own node, with the GPUs Ray gave
    # that node; the trial's environment reached both nodes' ranks (2 ranks each: 4 NCCL logs).
    # Node 1 served SGLang's dummy health server on a port of its own (the run's --port 0).
    node1_log = (exp.out / b / "node1" / "server.log").read_text()
    assert node1_log.count("joined at") == 1
    ports = [n["port"] for n in nodes_of(exp, b) or []]
    assert len(set(ports)) == 2 and f"health check server started in background thread at " \
        f"127.0.0.1:{ports[1]}" in node1_log, (ports, node1_log[-2000:])
    assert exp.server_gpus(b) == ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in node1_log
    nccl_logs = sorted((exp.out / b).glob("nccl.*.log"))
    assert len(nccl_logs) == 4 and all(
        "NCCL_NVLS_ENABLE set by environment to 0." in p.read_text() for p in nccl_logs)
    assert "each trial holds 8 GPU(s) on each of 2 nodes; at most 2 trial(s) at once" \
        in result.stdout, result
