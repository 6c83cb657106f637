"""The worker's pure parts (round metrics, the gate's comparison, argv) and its CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from launchers.proxy import worker
from launchers.proxy.model import Geometry
from launchers.proxy.shapes import Shape, load_shape


def geo(name: str = "tiny", **kw: int) -> Geometry:
    return Geometry(Shape.from_config(load_shape(name), name), **kw)


def samples(pass_ms: float, head: float = 1.0, allreduce: float = 2.0, allgather: float = 0.5
            ) -> dict[str, list[float]]:
    return {"pass": [pass_ms * f for f in (0.9, 1.0, 1.1)], "head": [head] * 3,
            "allreduce": [allreduce] * 3, "allgather": [allgather] * 3}


def test_summarize_unscaled() -> None:
    g = geo(batch=2, draft_tokens=4)
    m = worker.summarize(samples(10.0), g, accept_length=3.0, draft_ms=2.0, draft_steps=3,
                         bandwidth=1e12)
    assert m["verify_ms"] == pytest.approx(10.0)
    assert m["verify_p10_ms"] == pytest.approx(9.2) and m["verify_p90_ms"] == pytest.approx(10.8)
    assert m["allreduce_ms"] == pytest.approx(2.5) and m["compute_ms"] == pytest.approx(7.5)
    assert m["allreduce_share"] == pytest.approx(0.25)
    assert m["per_allreduce_us"] == pytest.approx(2.0 / 8 * 1000)  # 2 per layer, 4 layers
    assert m["est_tok_s"] == pytest.approx(2 * 3.0 / (12.0 / 1000))
    assert m["assumed_draft_ms"] == 2.0 and m["draft_ms_source"] == "given"
    assert m["bytes_per_pass"] == g.bytes_per_pass()["total"]
    assert m["hbm_floor_ms"] == pytest.approx(m["bytes_per_pass"] / 1e12 * 1000)
    assert m["scaled"] is False


def test_summarize_scales_layers_not_the_head() -> None:
    g = geo(layers=1, draft_tokens=4)  # 1 of 4 layers
    m = worker.summarize(samples(3.0, head=1.0), g, accept_length=9.0, draft_ms=None,
                         draft_steps=2, bandwidth=1e12)
    assert m["scaled"] is True
    assert m["verify_ms"] == pytest.approx(1.0 + 2.0 * 4)
    layer = (m["verify_ms"] - 1.0) / 4
    assert m["assumed_draft_ms"] == pytest.approx(2 * (layer + 1.0))
    assert m["draft_ms_source"].startswith("estimated: 2 steps")
    assert m["assumed_accept_length"] == 4.0  # at most the draft tokens


def test_compare() -> None:
    ref = torch.randn(4, 16)
    assert worker.compare(ref + 1e-6, ref, 1e-4)["rel_err"] < 1e-4
    with pytest.raises(worker.WrongResult, match="relative L2"):
        worker.compare(ref * 1.5, ref, 2e-2)
    with pytest.raises(worker.WrongResult, match="NaN"):
        worker.compare(torch.full((4, 16), float("nan")), ref, 2e-2)
    with pytest.raises(worker.WrongResult, match="shape"):
        worker.compare(ref[:2], ref, 2e-2)


def test_requests() -> None:
    assert worker.Request.parse("7\n") == worker.Request(7, "round", 7)  # by hand: a round
    assert worker.Request.parse("3 profile 10") == worker.Request(3, "profile", 10)
    assert worker.Request.parse(worker.Request(4, "round", 2).line()) == \
        worker.Request(4, "round", 2)
    for bad in ("", "x", "1 dance 2", "1 round"):
        assert worker.Request.parse(bad) is None


def test_check_fits_names_the_layers_that_would() -> None:
    llama = geo("llama-3.1-70b", batch=1, draft_tokens=4, kv_len=4096)  # 130.7 GiB
    worker._check_fits(llama, free=146 << 30, total=150 << 30)  # 0.9 x free is enough
    with pytest.raises(torch.OutOfMemoryError, match=r"130\.7 GiB per GPU, 138\.7 GiB free: "
                       r"run fewer layers \(--layers 7\d\)"):
        worker._check_fits(llama, free=int(138.7 * 2**30), total=150_119_600_128)


def test_rank_argv_drops_spawn() -> None:
    assert worker._without_spawn(["--spawn", "2", "--model", "tiny", "--spawn=3", "-x"]) == \
        ["--model", "tiny", "-x"]


def test_args_defaults() -> None:
    args = worker.parse_args([])
    assert args.rounds == 3 and args.spawn is None and args.graph is True
    assert worker.parse_args(["--out", "/tmp/x"]).rounds is None


def test_help_runs() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "--spawn" in out.stdout and "--fail-at" not in out.stdout


def test_cli_two_ranks_by_hand() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2",
                          "--device", "cpu", "--rounds", "1", "--iters", "2", "--kv-len", "16"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    events = [line for line in out.stdout.splitlines() if line.startswith('{"event"')]
    assert [e.split('"')[3] for e in events] == ["ready", "round"]


def test_cli_failing_rank_stops_the_root() -> None:
    out = subprocess.run([sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2",
                          "--device", "cpu", "--kv-len", "16", "--fail-at", "init"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "rank 1 exited with code 1; stopping the other ranks" in out.stdout
    assert "injected failure at init" in out.stdout + out.stderr
