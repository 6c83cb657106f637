"""Every all-reduce path the proxy runs, on two real GPUs: each captures in CUDA graphs, passes
the correctness gate against a reference written by the NCCL path, reports the path it ran,
and shows its kernels in a profile as the class launchers.trace gives them.

Needs 2 GPUs with peer access (an H200 pair here). Where NVLink multicast is off limits,
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 first:
the proxy never uses multicast, the plan then also knows SGLang's torch symm-mem is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from launchers import trace
from launchers.proxy.comm import dispatch
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from launchers.proxy.protocol import STEP_SPANS
from tests.launchers.proxy.conftest import MakeCtx
from tests.launchers.proxy.helpers import REQUIRED, run_trial

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")]

ROOT = Path(__file__).resolve().parents[3]
COMMON = ["--spawn", "2", "--device", "cuda", "--model", "tiny", "--kv-len", "1024",
          "--iters", "10", "--rounds", "2", "--profile-steps", "3"]


def two_gpus() -> tuple[str, ...]:
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    return tuple(visible[:2]) if len(visible) >= 2 else ("0", "1")


def run_path(path: str, reference: Path, traces: Path, write: bool = False
             ) -> list[dict[str, Any]]:
    argv = [sys.executable, "-m", "launchers.proxy.worker", *COMMON, "--allreduce-path", path,
            "--reference", str(reference), "--profile-dir", str(traces)]
    if write:
        argv.append("--write-reference")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(two_gpus())}
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, f"{path}: {out.stdout[-3000:]}{out.stderr[-3000:]}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{"event"')]


def test_every_path_captures_and_passes_the_gate(tmp_path: Path) -> None:
    reference = tmp_path / "reference.pt"
    for path in [dispatch.NCCL, *[p for p in dispatch.RUNNABLE if p != dispatch.NCCL]]:
        events = run_path(path, reference, tmp_path / path, write=path == dispatch.NCCL)
        ready, *rounds, profiled = events
        assert ready["event"] == "ready" and profiled["event"] == "profile", path
        assert ready["allreduce_path"] == path and ready["graph"] is True
        assert ready["correctness"] == ("reference_written" if path == dispatch.NCCL
                                        else "pass"), (path, ready)
        for m in rounds:
            assert set(REQUIRED) <= set(m), path
            assert m["correctness"] == "pass" and m["rel_err"] < 2e-2, (path, m)
            assert m["compute_ms"] > 0 and m["comm_alone_ms"] > 0
            assert m["exposed_comm_ms"] > 0, (path, m)  # 2 ranks: communication costs
        result = trace.read([Path(f) for f in profiled["files"]], [STEP_SPANS])
        verify, compute = result.main("verify"), result.main("compute_only")
        assert verify is not None and compute is not None, (path, result.to_json())
        assert compute.communication_ms == 0, (path, compute.to_json())
        if path == dispatch.NCCL:
            assert verify.split_ms["custom_allreduce"] == 0
        else:  # symmetric-memory kernels are custom allreduce; NCCL only gathers the logits
            assert verify.split_ms["custom_allreduce"] > 0, (path, verify.top_kernels)


def test_launcher_default_and_pcie_on_two_gpus(make_ctx: MakeCtx) -> None:
    """Through the launcher: SGLang's default for the DeepSeek-shaped tiny model at TP2 is the
    fused all-reduce (emulated); --interconnect pcie turns NCCL P2P off and still passes."""
    gpus = two_gpus()
    base = {"model": "tiny", "device": "cuda", "kv_len": 1024, "iters_per_round": 10,
            "proxy_comm": "emulated"}
    w = ProxyWorkload(ProxyArgs(**base))
    _, info, rounds = run_trial(w, {}, make_ctx("default", gpus), rounds=1)
    assert info["sglang_allreduce_path"] == dispatch.FUSION == info["allreduce_path"]
    assert info["correctness"] in ("reference_written", "pass")
    assert rounds[0]["correctness"] == "pass"
    nccl = {"--disable-custom-all-reduce": True,
            "--enforce-disable-flashinfer-allreduce-fusion": True}
    _, info, rounds = run_trial(w, nccl, make_ctx("nccl", gpus), rounds=1)
    assert info["allreduce_path"] == dispatch.NCCL and rounds[0]["correctness"] == "pass"
    pcie = ProxyWorkload(ProxyArgs(**base, interconnect="pcie"))
    running, info, rounds = run_trial(pcie, nccl, make_ctx("pcie", gpus), rounds=1)
    assert info["interconnect"] == "pcie" and running.plan.env["NCCL_P2P_DISABLE"] == "1"
    assert rounds[0]["correctness"] in ("pass", "no_reference")
