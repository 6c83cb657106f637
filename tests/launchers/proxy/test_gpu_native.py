"""Native mode on two real GPUs: the Kimi-shaped proxy through the installed SGLang's
GroupCoordinator captures in CUDA graphs and passes the correctness gate against the reference
an emulated NCCL baseline wrote, on every path SGLang takes at TP 2 (over NVLink and with
--interconnect pcie), and records which communicator served.

Needs 2 GPUs and SGLang with its kernels importable (the probe says why not, and the tests
skip with that reason). On the lent H200 pair: stage SGLang as
../shared/tools/device-sglang-prepare says, then, with NVLink multicast off,
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
  PYTHONPATH=/root/site:$PWD python3 -m pytest -m gpu tests/launchers/proxy/test_gpu_native.py
(or ``bash benchmarks/gpu_session.sh native-tests``)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from launchers.proxy.comm import native
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from search_spaces.knobs import Value
from tests.launchers.proxy.conftest import MakeCtx
from tests.launchers.proxy.helpers import REQUIRED, run_trial

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")]

KIMI: dict[str, Any] = {"model": "kimi-k2.5", "layers": 2, "device": "cuda", "ranks": 2,
                        "kv_len": 1024, "iters_per_round": 10}
NO_FUSION = {"--enforce-disable-flashinfer-allreduce-fusion": True}
# label -> (config, the paths the served all-reduce may take there)
SETTINGS: dict[str, tuple[dict[str, Value], set[str]]] = {
    "default": ({}, {"native:custom_ar"}),
    "custom allreduce": (NO_FUSION, {"native:custom_ar"}),
    "custom v1": ({"allreduce-backend": "custom-v1"}, {"native:custom_ar"}),
    "nccl": ({"allreduce-backend": "nccl"}, {"native:pynccl", "native:torch_distributed"}),
    "torch symm-mem": ({"allreduce-backend": "torch-symm-mem"},
                       {"native:torch_symm_mem", "native:pynccl"}),
    "pcie-ipc": ({"allreduce-backend": "pcie-ipc"}, {"native:pcie_ipc", "native:pynccl"}),
}


def two_gpus() -> tuple[str, ...]:
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()]
    return tuple(visible[:2]) if len(visible) >= 2 else ("0", "1")


@pytest.fixture(scope="module", autouse=True)
def sglang_native() -> native.Availability:
    found = native.availability(cuda=True)
    if not found.ok:
        pytest.skip(f"native mode cannot run here: {found.reason}")
    return found


@pytest.mark.parametrize("interconnect", ["nvlink", "pcie"])
def test_every_tp2_path_captures_and_passes_the_gate(interconnect: str, make_ctx: MakeCtx,
                                                     sglang_native: native.Availability
                                                     ) -> None:
    gpus = two_gpus()
    base = ProxyWorkload(ProxyArgs(**KIMI, interconnect=interconnect, proxy_comm="emulated"))
    _, info, _ = run_trial(base, {"allreduce-backend": "nccl"}, make_ctx("reference", gpus))
    assert info["correctness"] == "reference_written", info
    w = ProxyWorkload(ProxyArgs(**KIMI, interconnect=interconnect, proxy_comm="native"))
    for label, (config, served) in SETTINGS.items():
        _, info, rounds = run_trial(w, config, make_ctx(label.replace(" ", "-"), gpus),
                                    rounds=2)
        assert info["proxy_comm"] == "native" and info["graph"] is True, (label, info)
        assert info["sglang_version"] == sglang_native.version
        assert info["allreduce_path"] in served, (label, info["allreduce_served_by"])
        assert info["allreduce_served_by"] and info["allgather_served_by"], label
        assert info["correctness"] == "pass", (label, info)
        for m in rounds:
            assert set(REQUIRED) <= set(m), label
            assert m["correctness"] == "pass" and m["rel_err"] < 2e-2, (label, m)
            assert m["verify_ms"] > m["compute_ms"] > 0, (label, m)
            assert m["allreduce_path"] == info["allreduce_path"], label


def test_native_eager_matches_the_graphs(make_ctx: MakeCtx) -> None:
    """--no-graph: SGLang's eager choices (pynccl off outside capture), the same logits."""
    gpus = two_gpus()
    graph = ProxyWorkload(ProxyArgs(**KIMI, proxy_comm="native"))
    _, info, _ = run_trial(graph, {}, make_ctx("graph", gpus))
    assert info["correctness"] == "reference_written" and info["graph"] is True
    eager = ProxyWorkload(ProxyArgs(**KIMI, proxy_comm="native", graph=False))
    _, info, rounds = run_trial(eager, {}, make_ctx("eager", gpus))
    assert info["graph"] is False and info["allreduce_path"].startswith("native:")
    assert rounds[0]["correctness"] == "pass"
