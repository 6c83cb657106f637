"""Self-tests of the stand-in: SGLang's CLI behaviour, NCCL lines, and its process hygiene."""

from __future__ import annotations

import math
import os
import signal
import statistics
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from launchers import nccl_log
from launchers.process import ServerProcess, free_port, kill_processes, marked_processes, reap_all
from search_spaces.knobs import CATALOGUE, KnobKind
from simulator import fake_ranks, sglang_server

ROOT = Path(__file__).resolve().parents[2]


def test_sglangs_parser_accepts_every_flag_knob() -> None:
    """The catalogue against SGLang's own parser (the stand-in's, captured from SGLang): a
    knob SGLang renamed or types differently fails here without SGLang installed."""
    parser = sglang_server.build_parser()
    for knob in CATALOGUE.values():
        if knob.kind is not KnobKind.FLAG:
            continue
        for value in knob.choices:
            args = parser.parse_args(["--model-path", "m", *knob.render_argv(value)])
            flags = sglang_server.flag_values(args)
            expected = [int(v) for v in str(value).split(",")] if knob.list_valued else value
            assert flags.get(knob.name) == (None if value is False else expected)


def test_parser_rejects_like_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    parser = sglang_server.build_parser()
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--model-path", "m", "--no-such-flag"])
    assert info.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # ambiguous since the decode/prefill split, as in 0.5.23
        parser.parse_args(["--model-path", "m", "--cuda-graph-max-bs", "8"])
    assert "ambiguous option" in capsys.readouterr().err


def test_binds_localhost_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        sglang_server.main(["--model-path", "m", "--host", "0.0.0.0"])
    assert "127.0.0.1 only" in capsys.readouterr().err


def test_nccl_lines_read_back() -> None:
    env = {"NCCL_ALGO": "allreduce:tree", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "4",
           "NCCL_BUFFSIZE": "1M", "NCCL_DEBUG": "INFO"}
    text = "".join(f"h:1:1 [0] NCCL INFO {line}\n" for line in fake_ranks.nccl_lines(env, 0, 8))
    eff = nccl_log.parse(text)
    assert eff.nranks == 8 and eff.coll_channels == 4 and eff.p2p_channels == 4
    assert eff.env["NCCL_BUFFSIZE"] == "1"  # strtoll, as NCCL reads "1M"
    assert eff.choices[0]["algo"] == "TREE" and eff.choices[0]["proto"] == "LL"
    one = nccl_log.parse("".join(f"h:1:1 [0] NCCL INFO {line}\n"
                                 for line in fake_ranks.nccl_lines(env, 0, 1)))
    assert "NCCL_ALGO" not in one.env and one.choices == []


# ---------------------------------------------------------------- processes


def _spawn(tmp_path: Path, *extra: str) -> tuple[ServerProcess, str]:
    marker = f"fake-selftest-{uuid.uuid4().hex[:8]}/t"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           **nccl_log.debug_env(tmp_path)}
    argv = [sys.executable, "-m", "simulator.sglang_server", "--model-path", "m",
            "--tp-size", "2", "--port", str(port), "--fake-startup-s", "0.1", *extra]
    proc = ServerProcess.spawn(argv, env, tmp_path / "server.log", marker, port=port)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return requests.get(url + "/health_generate", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    proc.wait_ready(ready, 20.0)
    return proc, marker


def _wait_gone(marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while marked_processes(marker, exact=True):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.integration
def test_sigterm_to_the_parent_leaves_nothing(tmp_path: Path) -> None:
    proc, marker = _spawn(tmp_path)
    try:
        assert len(marked_processes(marker, exact=True)) == 3  # server + 2 ranks
        assert "FAKE_READY_AT " in proc.log_text()
        assert len(nccl_log.debug_files(tmp_path)) == 2
        os.kill(proc.pid, signal.SIGTERM)  # the parent only
        proc.popen.wait(5)
        assert _wait_gone(marker, 3.0)
    finally:
        reap_all(marker, grace=0.5, exact=True)


@pytest.mark.integration
def test_ignore_sigterm_needs_kill(tmp_path: Path) -> None:
    proc, marker = _spawn(tmp_path, "--fake-fault", "ignore-sigterm")
    try:
        pids = [m.pid for m in marked_processes(marker, exact=True)]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.3)
        assert proc.poll() is None
        assert len(marked_processes(marker, exact=True)) == 3
        kill_processes([proc.pid], grace=0.2)  # TERM, grace, KILL
        assert _wait_gone(marker, 3.0)
    finally:
        reap_all(marker, grace=0.5, exact=True)


@pytest.mark.integration
def test_v1_models_answers_before_ready(tmp_path: Path) -> None:
    marker = f"fake-selftest-{uuid.uuid4().hex[:8]}/t"
    port = free_port()
    argv = [sys.executable, "-m", "simulator.sglang_server", "--model-path", "m", "--port",
            str(port), "--fake-fault", "hang-startup"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with ServerProcess.spawn(argv, env, tmp_path / "server.log", marker, port=port):
        deadline = time.monotonic() + 10
        while True:
            try:
                models = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except requests.RequestException:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert models.status_code == 200
        assert requests.get(f"http://127.0.0.1:{port}/health_generate", timeout=1
                            ).status_code == 503
    reap_all(marker, grace=0.5, exact=True)


def test_each_launch_draws_its_own_factor_on_model_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """--fake-launch-spread: one factor per launch (from the trial's marker), none without it."""
    from simulator.sglang_server import launch_factor

    assert launch_factor(0.0, 1) == 1.0
    factors = []
    for n in range(200):
        monkeypatch.setenv("SERVETUNE_TRIAL", f"exp/t{n}")
        factors.append(math.log(launch_factor(0.2, 7)))
    assert launch_factor(0.2, 7) == math.exp(factors[-1])  # the same launch, the same factor
    sd = statistics.stdev(factors)
    assert 0.15 < sd < 0.25 and abs(statistics.fmean(factors)) < 0.05
