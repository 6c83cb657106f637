"""launchers.trace on a real trace: the proxy profiled on an H200 (CUDA graphs, torch.profiler),
trimmed by benchmarks/profile_gpu.py and committed as a fixture. Until the fixture exists the
GPU test skips; the script's own logic is checked here on CPU (gloo ranks) either way.

Capture it on a GPU machine:
    python -m benchmarks.profile_gpu --no-e2e --fixture tests/launchers/fixtures/proxy_trace_h200.json.gz
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launchers import trace
from launchers.process import marked_processes
from launchers.proxy.protocol import STEP_SPANS

FIXTURE = Path(__file__).parent / "fixtures" / "proxy_trace_h200.json.gz"
ROOT = Path(__file__).resolve().parents[2]


SPANS = (STEP_SPANS,)


def meta_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(path.read_bytes()))["servetune_fixture"]
    return data


def check(path: Path, device: str) -> trace.Summary:
    """What holds for any fixture the script writes."""
    assert path.stat().st_size < 200_000
    meta = meta_of(path)
    result = trace.read([path], SPANS)
    verify = result.main("verify")
    assert result.device == device and verify is not None, result.to_json()
    assert verify.steps == 2 and verify.ranks == 1  # rank 0's file, 2 steps kept
    assert sum(verify.split_ms.values()) == pytest.approx(verify.step_ms)
    assert verify.compute_ms > 0 and verify.top_kernels
    # the kept steps split as they did when the script wrote them (a parser change shows here)
    steps = trace.steps_of(trace.load_events(path), SPANS)
    assert len(steps) == len(meta["kept_steps"])
    for got, want in zip(steps, meta["kept_steps"], strict=True):
        assert got.kind == want["kind"] and got.step_us == pytest.approx(want["step_us"])
        assert got.split_us == pytest.approx(want["split_us"])
    return verify


@pytest.mark.skipif(not FIXTURE.exists(), reason=f"no {FIXTURE.name} yet: capture it on a GPU "
                    "with benchmarks/profile_gpu.py --fixture")
def test_real_h200_trace() -> None:
    meta = meta_of(FIXTURE)
    verify = check(FIXTURE, "gpu")
    assert meta["graph"] is True and "H200" in (meta["device_name"] or "")
    # one profiled replay against the CUDA-event time of one replay, both of the layers run
    assert 0.5 * meta["pass_ms_run"] <= verify.step_ms <= 2 * meta["pass_ms_run"]
    if meta["ranks"] == 1:  # NCCL runs no kernel for an in-place all-reduce of one rank
        assert verify.split_ms["collective"] == 0
        assert verify.compute_ms > 0.5 * verify.step_ms
    else:
        assert verify.split_ms["collective"] > 0


def test_capture_script_on_cpu(tmp_path: Path) -> None:
    """benchmarks/profile_gpu.py's capture and trim, run with 2 gloo ranks."""
    fixture = tmp_path / "fx.json.gz"
    argv = [sys.executable, "-m", "benchmarks.profile_gpu", "--device", "cpu", "--model",
            "tiny", "--layers", "2", "--ranks", "2", "--steps", "3", "--iters", "2",
            "--kv-len", "64", "--no-e2e", "--fixture", str(fixture), "--out",
            str(tmp_path / "work")]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"wrote {fixture}" in out.stdout
    verify = check(fixture, "cpu")
    assert verify.split_ms["collective"] > 0  # gloo, marked by servetune.comm spans
    meta = meta_of(fixture)
    assert meta["layers_run"] == 2 and meta["scale"] == 2.0 and meta["ranks"] == 2
    assert not marked_processes("profile-gpu-")
