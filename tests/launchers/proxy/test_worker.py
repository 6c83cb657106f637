"""The proxy's processes from the command line: flags, the root and its ranks, fit checks."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from launchers.proxy.cli import parse_args
from launchers.proxy.geometry import Geometry
from launchers.proxy.rank import check_fits
from launchers.proxy.shapes import Shape, load_shape
from launchers.proxy.spawner import without_spawn


def geo(name: str = "tiny", **kw: int) -> Geometry:
    return Geometry(Shape.from_config(load_shape(name), name), **kw)


def test_check_fits_names_the_layers_that_would() -> None:
    llama = geo("llama-3.1-70b", batch=1, draft_tokens=4, kv_len=4096)  # 130.7 GiB
    check_fits(llama, free=146 << 30, total=150 << 30)  # 0.9 x free is enough
    with pytest.raises(torch.OutOfMemoryError, match=r"130\.7 GiB per GPU, 138\.7 GiB free: "
                       r"run fewer layers \(--layers 7\d\)"):
        check_fits(llama, free=int(138.7 * 2**30), total=150_119_600_128)


def test_rank_argv_drops_spawn() -> None:
    assert without_spawn(["--spawn", "2", "--model", "tiny", "--spawn=3", "-x"]) == \
        ["--model", "tiny", "-x"]


def test_args_defaults() -> None:
    args = parse_args([])
    assert args.rounds == 3 and args.spawn is None and args.graph is True
    assert args.allreduce_path == "nccl" and args.allgather_path == "nccl"
    assert parse_args(["--out", "/tmp/x"]).rounds is None


def test_help_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--spawn" in out.stdout and "--fail-at" not in out.stdout
    assert "--allreduce-path" in out.stdout


def test_cli_two_ranks_by_hand() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2",
                          "--device", "cpu", "--rounds", "1", "--iters", "2", "--kv-len", "16",
                          "--allreduce-path", "custom_ar_1shot"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    events = [line for line in out.stdout.splitlines() if line.startswith('{"event"')]
    assert [e.split('"')[3] for e in events] == ["ready", "round"]
    assert '"allreduce_path": "gloo"' in events[1]  # CPU runs gloo whatever SGLang would run
    assert '"sglang_allreduce_path": "custom_ar_1shot"' in events[1]


def test_cli_failing_rank_stops_the_root() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2",
                          "--device", "cpu", "--kv-len", "16", "--fail-at", "init"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "rank 1 exited with code 1; stopping the other ranks" in out.stdout
    assert "injected failure at init" in out.stdout + out.stderr
