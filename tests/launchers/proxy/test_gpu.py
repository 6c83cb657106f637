"""The proxy on a real GPU: NCCL, CUDA graphs, the Kimi shape, the presets' NCCL values.

Written for one GPU (an H200 here): with one rank NCCL skips its algorithm and protocol
checks, so every preset value must capture; with more GPUs a global NCCL_ALGO=Tree would
fail (shared/reference/nccl.md), which the presets avoid (allreduce:tree)."""

from __future__ import annotations

import os

import pytest
import torch

from launchers import trace
from launchers.failures import FailureKind, TrialFailed
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from search_spaces.space import load_preset, preset_names
from tests.launchers.proxy.conftest import MakeCtx
from tests.launchers.proxy.helpers import REQUIRED, run_trial

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TINY = {"model": "tiny", "device": "cuda", "ranks": 1, "kv_len": 1024, "iters_per_round": 20,
        "proxy_comm": "emulated"}  # native mode: test_gpu_native.py


def one_gpu() -> tuple[str, ...]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return (visible or "0",)


def test_tiny_captures_and_times(make_ctx: MakeCtx) -> None:
    running, info, rounds = run_trial(ProxyWorkload(ProxyArgs(**TINY)), {},
                                      make_ctx(gpu_ids=one_gpu()), rounds=2)
    assert info["graph"] is True and info["dtype"] == "bfloat16"
    assert info["device"] == f"cuda:{info['device_name']}" and info["device_name"]
    assert info["nccl"]
    assert info["correctness"] == "reference_written"
    for m in rounds:
        assert set(REQUIRED) <= set(m)
        assert m["graph"] is True and m["ranks"] == 1 and m["scaled"] is False
        assert m["verify_ms"] > 0 and m["verify_p10_ms"] <= m["verify_ms"] <= m["verify_p90_ms"]
        assert m["correctness"] == "pass" and m["rel_err"] < 1e-3  # replays repeat the pass
        assert m["est_tok_s"] > 0 and m["hbm_floor_ms"] > 0
    assert isinstance(running.effective().get("warnings", []), list)


def test_graph_not_slower_than_eager(make_ctx: MakeCtx) -> None:
    gpus = one_gpu()
    _, _, graph = run_trial(ProxyWorkload(ProxyArgs(**TINY)), {}, make_ctx("graph", gpus),
                            rounds=2)
    _, info, eager = run_trial(ProxyWorkload(ProxyArgs(**TINY, graph=False)), {},
                               make_ctx("eager", gpus), rounds=2)
    assert info["graph"] is False and eager[-1]["graph"] is False
    assert eager[-1]["correctness"] == "pass"  # eager output matches the graph's reference
    assert graph[-1]["verify_ms"] <= eager[-1]["verify_ms"] * 1.05


def test_kimi_two_layers_one_gpu(make_ctx: MakeCtx) -> None:
    args = ProxyArgs(model="kimi-k2.5", layers=2, device="cuda", ranks=1, iters_per_round=10,
                     proxy_comm="emulated")
    _, info, rounds = run_trial(ProxyWorkload(args), {}, make_ctx(gpu_ids=one_gpu()),
                                rounds=2, ready_timeout=600)
    assert info["layers_run"] == 2 and info["layer_kinds"] == "mm" and info["scaled"] is True
    # tp 1, batch 1, 4 tokens, 4096 KV; INT4 routed experts (test_shapes has the arithmetic)
    assert info["bytes_per_pass"] == 68_944_789_504
    assert info["bytes_per_pass_unquantized"] == 190_495_719_424
    assert info["quantized_checkpoint"] is True
    assert info["quantization"]["bytes_per_weight"] == {"routed_experts": 0.5625}
    m = rounds[-1]
    assert m["scaled"] is True and m["correctness"] == "pass"
    # memory-bound: not faster than reading the bytes, and not wildly slower
    assert 0.5 * m["hbm_floor_ms"] <= m["verify_ms"] <= 10 * m["hbm_floor_ms"]
    assert abs(m["exposed_comm_share"]) < 0.1  # one rank: the all-reduces cost next to nothing


def test_explicit_layers_that_do_not_fit_fail_as_oom(make_ctx: MakeCtx) -> None:
    """--layers is authoritative: all 80 layers of Llama-3.1-70B (130.7 GiB) on one GPU."""
    args = ProxyArgs(model="llama-3.1-70b", layers=80, device="cuda", ranks=1,
                     proxy_comm="emulated")
    with pytest.raises(TrialFailed) as err:
        run_trial(ProxyWorkload(args), {}, make_ctx(gpu_ids=one_gpu()))
    assert err.value.failure.kind is FailureKind.CUDA_OOM
    assert "--layers" in err.value.failure.log_tail


def test_default_model_fits_its_layers(make_ctx: MakeCtx) -> None:
    """No --layers: the default Llama-3.1-70B runs the layers that fit, scaled, not an OOM."""
    args = ProxyArgs(device="cuda", ranks=1, kv_len=1024, iters_per_round=5,
                     proxy_comm="emulated")
    _, info, rounds = run_trial(ProxyWorkload(args), {}, make_ctx(gpu_ids=one_gpu()),
                                rounds=1, ready_timeout=600)
    assert info["shape"] == "llama-3.1-70b" and info["scaled"] is True
    assert 40 < info["layers_run"] < 80 and info["layers_source"].startswith("fit: ")
    assert rounds[0]["scaled"] is True and rounds[0]["verify_ms"] > 0


def test_profile_on_gpu(make_ctx: MakeCtx) -> None:
    """torch.profiler over CUDA graph replays: the verify steps' kernels are found and their
    split adds up; the step is about the CUDA-event time of a replay."""
    w = ProxyWorkload(ProxyArgs(**TINY))
    ctx = make_ctx(gpu_ids=one_gpu())
    plan = w.plan({}, ctx)
    w.preflight(plan, ctx)
    with w.start(plan, ctx) as running:
        running.wait_ready(120)
        measured = running.measure(0)
        files = running.profile(5)
    result = trace.read(files, ProxyWorkload.step_spans)
    verify = result.main("verify")
    assert result.device == "gpu" and verify is not None and verify.steps == 5, result.to_json()
    assert verify.compute_ms > 0 and verify.top_kernels
    assert sum(verify.split_ms.values()) == pytest.approx(verify.step_ms)
    assert 0.3 * measured["verify_ms"] <= verify.step_ms <= 3 * measured["verify_ms"]


def preset_nccl_values() -> list[tuple[str, str]]:
    values = {(name, value) for preset in preset_names()
              for name, domain in load_preset(preset).domains.items()
              if name in ("NCCL_ALGO", "NCCL_PROTO") for value in domain
              if isinstance(value, str)}
    return sorted(values)


def test_preset_algo_and_proto_values_capture(make_ctx: MakeCtx) -> None:
    values = preset_nccl_values()
    assert ("NCCL_ALGO", "allreduce:tree") in values and ("NCCL_PROTO", "LL128") in values
    gpus = one_gpu()
    w = ProxyWorkload(ProxyArgs(**{**TINY, "iters_per_round": 5}))
    run_trial(w, {}, make_ctx("baseline", gpus))
    for index, (name, value) in enumerate(values):
        _, info, rounds = run_trial(w, {name: value}, make_ctx(f"t{index}", gpus))
        assert info["graph"] is True, (name, value)
        assert info["correctness"] == "pass" and rounds[0]["correctness"] == "pass", (name, value)
        assert rounds[0]["verify_ms"] > 0
