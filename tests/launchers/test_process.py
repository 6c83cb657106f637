"""Marked process trees: spawn, readiness, stop (TERM, grace, KILL), reap by marker."""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from launchers import process
from launchers.failures import FailureKind, TrialFailed

PY = sys.executable


def _marker() -> str:
    return f"test-{uuid.uuid4().hex[:8]}/t0"


def _spawn(tmp_path: Path, code: str, marker: str) -> process.ServerProcess:
    return process.ServerProcess.spawn([PY, "-c", code], dict(os.environ),
                                       tmp_path / "log.txt", marker)


def test_children_and_setsid_grandchildren_carry_the_marker_and_all_die(tmp_path: Path) -> None:
    marker = _marker()
    code = ("import subprocess,sys,time\n"
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'])\n"
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'],"
            " start_new_session=True)\n"
            "print('up', flush=True); time.sleep(60)\n")
    server = _spawn(tmp_path, code, marker)
    deadline = time.monotonic() + 10
    while len(process.marked_processes(marker, exact=True)) < 3:
        assert time.monotonic() < deadline, "children did not start"
        time.sleep(0.05)
    report = server.stop(grace=2)
    assert len(report.signalled) >= 3
    assert process.marked_processes(marker, exact=True) == []


def test_a_child_forked_as_the_stop_came_is_stopped_too(tmp_path: Path) -> None:
    """A server whose SIGTERM arrives while it starts a rank (the proxy's spawner, seen under
    load: the rank was forked after the tree was listed and outlived the stop)."""
    marker = _marker()
    code = ("import signal,subprocess,sys,time\n"
            "def late(*_):\n"
            "    subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'])\n"
            "    sys.exit(0)\n"
            "signal.signal(signal.SIGTERM, late)\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    server = _spawn(tmp_path, code, marker)
    server.wait_ready(lambda: "ready" in server.log_text(), timeout=10)
    report = server.stop(grace=10)  # the server exits as soon as its child is started
    assert process.marked_processes(marker, exact=True) == []
    assert len(report.signalled) == 2


def test_sigterm_ignored_means_kill_after_grace(tmp_path: Path) -> None:
    marker = _marker()
    code = ("import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(60)\n")
    server = _spawn(tmp_path, code, marker)
    server.wait_ready(lambda: "ready" in server.log_text(), timeout=10)
    report = server.stop(grace=0.5)
    assert 0.5 <= report.seconds < 3
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"


def test_killed_tree_with_orphaned_children_ends_at_grace_not_at_inits_reap(
        tmp_path: Path) -> None:
    """SIGKILLed ranks of a SIGKILLed server are orphan zombies until init reaps them (1.3 s
    on a test box): they count as exited, so the stop ends right after the grace."""
    marker = _marker()
    rank = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    code = ("import signal,subprocess,sys,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            f"ranks = [subprocess.Popen([sys.executable, '-c', {rank!r}]) for _ in range(2)]\n"
            "time.sleep(0.5)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    server = _spawn(tmp_path, code, marker)
    server.wait_ready(lambda: "ready" in server.log_text(), timeout=10)
    ranks = psutil.Process(server.pid).children()
    assert len(ranks) == 2
    report = server.stop(grace=0.5)
    assert 0.5 <= report.seconds < 1.0
    for proc in ranks:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE


def test_exit_during_startup_is_classified_from_the_log(tmp_path: Path) -> None:
    code = "print('Capture cuda graph failed: boom'); raise SystemExit(1)"
    server = _spawn(tmp_path, code, _marker())
    with pytest.raises(TrialFailed) as err:
        server.wait_ready(lambda: False, timeout=10)
    assert err.value.failure.kind is FailureKind.GRAPH_CAPTURE
    assert err.value.failure.returncode == 1
    assert "Capture cuda graph failed" in err.value.failure.log_tail
    server.stop()


def test_hang_is_a_startup_timeout_within_the_timeout(tmp_path: Path) -> None:
    server = _spawn(tmp_path, "import time; time.sleep(60)", _marker())
    began = time.monotonic()
    with pytest.raises(TrialFailed) as err:
        server.wait_ready(lambda: False, timeout=1.0)
    assert err.value.failure.kind is FailureKind.STARTUP_TIMEOUT
    assert time.monotonic() - began < 2.5
    server.stop(grace=1)


def test_reap_spares_live_owners_and_kills_orphans(tmp_path: Path) -> None:
    prefix = f"reap-{uuid.uuid4().hex[:8]}/"
    env = {**os.environ, process.MARKER_ENV: prefix + "orphan", process.OWNER_ENV: "999999999"}
    orphan = psutil.Popen([PY, "-c", "import time; time.sleep(60)"], env=env)
    owned = _spawn(tmp_path, "import time; time.sleep(60)", prefix + "owned")
    try:
        deadline = time.monotonic() + 10
        while len(process.marked_processes(prefix)) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # The owned server's owner is this process: it counts as a leftover unless kept.
        killed = process.reap(prefix, keep=prefix + "owned")
        assert orphan.pid in killed and owned.pid not in killed
        assert owned.poll() is None
    finally:
        owned.stop(grace=1)
        if orphan.poll() is None:
            orphan.kill()
        orphan.wait()


def test_env_values_with_newlines_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="newline"):
        process.ServerProcess.spawn([PY, "-c", "pass"], {"X": "a\nb"}, tmp_path / "l", _marker())


def test_port_helpers() -> None:
    port = process.free_port()
    assert process.port_is_free(port)
    import socket

    with socket.socket() as sock:
        sock.bind((process.LOCALHOST, port))
        sock.listen()
        assert not process.port_is_free(port)
    assert process.wait_port_free(port, 1.0)


def test_server_starts_in_the_given_working_directory(tmp_path: Path) -> None:
    """A relative program path (``python serve.py``) means what it means in the user's shell
    when the server starts in the user's directory, not in the trial's."""
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    (user_dir / "serve.py").write_text("import os\nprint('cwd=' + os.getcwd(), flush=True)\n")
    server = process.ServerProcess.spawn([PY, "serve.py"], dict(os.environ),
                                         tmp_path / "trial" / "server.log", _marker(),
                                         cwd=user_dir)
    assert server.popen.wait(10) == 0
    assert f"cwd={user_dir}" in server.log_text()
    elsewhere = process.ServerProcess.spawn([PY, "serve.py"], dict(os.environ),
                                            tmp_path / "other.log", _marker(), cwd=tmp_path)
    assert elsewhere.popen.wait(10) != 0  # no serve.py there
    assert "serve.py" in elsewhere.log_text()
    server.stop()
    elsewhere.stop()


def test_environ_sets_and_removes_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ST_KEEP", "before")
    monkeypatch.delenv("ST_NEW", raising=False)
    with pytest.raises(RuntimeError), process.environ({"ST_KEEP": None, "ST_NEW": "x"}):
        assert "ST_KEEP" not in os.environ and os.environ["ST_NEW"] == "x"
        raise RuntimeError("restored even so")
    assert os.environ["ST_KEEP"] == "before" and "ST_NEW" not in os.environ
