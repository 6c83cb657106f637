"""Meeting ports (launchers/ports.py): chosen outside the OS's ephemeral range, reserved per
trial on a host (a lock per port, dropped with its process), and busy when bound or another
trial's; concurrent trials on one host never share one."""

from __future__ import annotations

import multiprocessing
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchers import ports
from launchers.base import LaunchPlan
from launchers.multinode import MEETING_PORTS, meeting_addr, meeting_ports
from launchers.process import LOCALHOST


def test_the_ephemeral_range_is_read_from_proc_or_defaults(tmp_path: Path) -> None:
    given = tmp_path / "range"
    given.write_text("40000\t50000\n")
    assert ports.ephemeral_range(given) == (40000, 50000)
    assert ports.ephemeral_range(tmp_path / "missing") == ports.DEFAULT_EPHEMERAL


@pytest.mark.parametrize(("ephemeral", "expected"), [
    ((32768, 60999), (18000, 21999)),  # Linux's default: the preferred range, whole
    ((20000, 60999), (18000, 19999)),  # the part below the ephemeral range
    ((10000, 17000), (18000, 21999)),  # wholly above it
    ((10000, 60999), (6000, 9999)),  # the ports just below it
    ((1024, 60000), (60001, 64000)),  # ... or just above
])
def test_the_meeting_range_lies_outside_the_ephemeral_one(ephemeral: tuple[int, int],
                                                          expected: tuple[int, int]) -> None:
    first, last = ports.meeting_range(ephemeral, block=MEETING_PORTS)
    assert (first, last) == expected
    assert last < ephemeral[0] or first > ephemeral[1]


def test_no_room_outside_the_ephemeral_range_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="ephemeral range 1024-65535"):
        ports.meeting_range((1024, 65535), block=MEETING_PORTS)


def test_this_machine_s_meeting_block_is_outside_its_ephemeral_range(tmp_path: Path) -> None:
    low, high = ports.ephemeral_range()
    with ports.reserve_block("trial", MEETING_PORTS, directory=tmp_path) as lease:
        assert len(lease.ports) == MEETING_PORTS
        assert lease.ports == list(range(lease.ports[0], lease.ports[0] + MEETING_PORTS))
        assert all(p < low or p > high for p in lease.ports)


def test_another_owner_s_lock_makes_a_port_busy_and_the_same_owner_s_is_shared(
        tmp_path: Path) -> None:
    span = ports.meeting_range(block=MEETING_PORTS)
    held = ports.PortLease("10.0.0.1:18000", tmp_path)
    assert held.take([span[0]]) == []
    assert ports.PortLease("10.0.0.2:18000", tmp_path).take([span[0]]) == [span[0]]
    assert ports.PortLease("10.0.0.1:18000", tmp_path).take([span[0]]) == []  # one trial
    held.close()
    assert ports.PortLease("10.0.0.2:18000", tmp_path).take([span[0]]) == []


def test_a_bound_port_is_busy_and_its_block_is_passed_over(tmp_path: Path) -> None:
    first = ports.meeting_range(block=MEETING_PORTS)[0]
    span = (first, first + 2 * MEETING_PORTS - 1)  # two blocks
    with socket.socket() as taken:
        taken.bind((LOCALHOST, first + 3))  # a neighbour of the first block's port
        taken.listen()
        for seed in range(4):  # whichever block is tried first
            with ports.reserve_block("trial", MEETING_PORTS, span=span, directory=tmp_path,
                                     rng=random.Random(seed)) as lease:
                assert lease.ports[0] == first + MEETING_PORTS
        assert ports.PortLease("x", tmp_path).take([first + 3]) == [first + 3]


def _reserve(directory: str, span: tuple[int, int], barrier: object, out: object) -> None:
    # Every trial tries the same block first.
    lease = ports.reserve_block(f"trial{os.getpid()}", MEETING_PORTS, span=span,
                                directory=Path(directory), rng=random.Random(0))
    out.put(lease.ports[0])  # type: ignore[attr-defined]
    barrier.wait()  # type: ignore[attr-defined]  # every lease held at once
    lease.close()


def test_concurrent_trials_on_one_host_never_share_a_block(tmp_path: Path) -> None:
    first = ports.meeting_range(block=MEETING_PORTS)[0]
    trials = 4
    span = (first, first + trials * MEETING_PORTS - 1)  # exactly one block each
    spawn = multiprocessing.get_context("spawn")
    barrier, out = spawn.Barrier(trials), spawn.Queue()
    workers = [spawn.Process(target=_reserve, args=(str(tmp_path), span, barrier, out))
               for _ in range(trials)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0] * trials
    got = sorted(out.get(timeout=5) for _ in range(trials))
    assert got == [first + i * MEETING_PORTS for i in range(trials)]


def test_every_block_taken_is_an_error(tmp_path: Path) -> None:
    first = ports.meeting_range(block=MEETING_PORTS)[0]
    span = (first, first + MEETING_PORTS - 1)
    with ports.reserve_block("trial 1", MEETING_PORTS, span=span, directory=tmp_path), \
            pytest.raises(RuntimeError, match="every block of 7 ports"):
        ports.reserve_block("trial 2", MEETING_PORTS, span=span, directory=tmp_path)


def test_a_killed_trial_s_reservation_goes_with_it(tmp_path: Path) -> None:
    port = ports.meeting_range(block=MEETING_PORTS)[0]
    code = (f"import sys, time; from pathlib import Path; from launchers.ports import PortLease;"
            f"l = PortLease('other', Path({str(tmp_path)!r})); assert not l.take([{port}]);"
            "print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={"SERVETUNE_TRIAL": "test-ports/held",
                                   "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert ports.PortLease("mine", tmp_path).take([port]) == [port]
    finally:
        holder.kill()
        holder.wait(10)
    deadline = time.monotonic() + 5
    while ports.PortLease("mine", tmp_path).take([port]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ports.PortLease("mine", tmp_path).take([port]) == []


def test_a_plan_s_meeting_ports_come_from_its_dist_init_addr() -> None:
    plan = LaunchPlan("sglang", ("serve", "--nnodes", "2", "--dist-init-addr", "10.0.0.1:18007"),
                      {})
    assert meeting_addr(plan) == "10.0.0.1:18007"
    assert meeting_ports(plan) == tuple(range(18007, 18014))
    placeholder = LaunchPlan("sglang", ("serve", "--dist-init-addr", "$DIST_INIT_ADDR"), {})
    assert meeting_ports(placeholder) == () == meeting_ports(LaunchPlan("x", ("serve",), {}))
