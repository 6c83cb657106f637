"""launchers.trace on synthetic Chrome traces whose sums are known by construction."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from launchers import trace
from launchers.proxy.protocol import STEP_SPANS as PROXY_SPANS
from launchers.sglang.profile import STEP_SPANS as SGLANG_SPANS

CPU_PID, THREAD, GPU_PID, STREAM, STREAM2 = 100, 10, 0, 7, 8


SPANS = (PROXY_SPANS, SGLANG_SPANS)  # either workload's trace


def span(name: str, ts: float, dur: float, tid: int = THREAD) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": CPU_PID, "tid": tid,
            "ts": ts, "dur": dur}


def launch(ts: float, corr: int, name: str = "cudaGraphLaunch") -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": CPU_PID, "tid": THREAD,
            "ts": ts, "dur": 5, "args": {"correlation": corr}}


def kernel(name: str, ts: float, dur: float, corr: int | None, cat: str = "kernel",
           stream: int = STREAM) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": GPU_PID, "tid": stream,
                         "ts": ts, "dur": dur}
    if corr is not None:
        e["args"] = {"correlation": corr, "stream": stream}
    return e


def gpu_trace() -> list[dict[str, Any]]:
    """verify bs=4 twice, draft bs=4 once, verify bs=1 once; unrelated work in between.

    verify #1 (window 1100..1900 = 800 us): compute 300 + 130, NCCL 200 (a MoE kernel on a
    second stream hides behind it), custom allreduce 100, memcpy 20, gap 50.
    verify #2 (3100..3600 = 500 us): one GEMM."""
    return [
        {"ph": "M", "name": "process_name", "pid": CPU_PID, "args": {"name": "python"}},
        span("step[VERIFY bs=4]", 1000, 50), launch(1010, 1),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 1100, 300, 1),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 1400, 200, 1),
        kernel("fused_moe_kernel", 1450, 100, 1, stream=STREAM2),
        kernel("cross_device_reduce_1stage<bf16, 8>", 1650, 100, 1),
        kernel("Memcpy DtoD (Device -> Device)", 1750, 20, 1, cat="gpu_memcpy"),
        kernel("flash_fwd_splitkv_kernel", 1770, 130, 1),
        launch(1950, 99, "cudaLaunchKernel"),  # outside every span
        kernel("unrelated_kernel", 1950, 40, 99),
        span("step[DRAFT bs=4]", 2000, 30), launch(2005, 2),
        kernel("trtllm_fmha_kernel_decode", 2100, 100, 2),  # trtllm-gen attention: compute
        kernel("ncclDevKernel_AllGather_RING_LL", 2200, 50, 2),
        span("step[VERIFY bs=4 forward_id=7]", 3000, 40), launch(3001, 3),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 3100, 500, 3),
        span("step[VERIFY bs=1]", 4000, 10), launch(4001, 4),
        kernel("one_shot_all_reduce_kernel", 4100, 30, 4),
        span("step[DECODE bs=4]", 5000, 10),  # no GPU work seen: skipped
    ]


def write(path: Path, events: list[dict[str, Any]], gz: bool = False) -> Path:
    blob = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(blob) if gz else blob)
    return path


def test_classes() -> None:
    assert trace.classify_kernel("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL") == "collective"
    assert trace.classify_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t") == "collective"
    for name in ("cross_device_reduce_2stage", "allreduce_fusion_kernel_oneshot_lamport",
                 "twoshot_allreduce_kernel", "mscclpp_allreduce", "multimem_all_reduce_kernel"):
        assert trace.classify_kernel(name) == "custom_allreduce", name
    for name in ("trtllm_fmha_kernel", "fused_moe_kernel", "sm90_xmma_gemm", "rms_norm_kernel"):
        assert trace.classify_kernel(name) == "compute", name
    assert trace.classify_kernel("Memset (Device)", "gpu_memset") == "memcpy"
    assert trace.classify_cpu_op("servetune.comm.all_reduce") == "collective"
    assert trace.classify_cpu_op("c10d::allreduce_") == "collective"
    assert trace.classify_cpu_op("aten::mm") == "compute"
    assert trace.step_kind("step[VERIFY bs=16]", SPANS) == ("verify", 16)
    assert trace.step_kind("step[DRAFT bs=2 c_sq=3]", SPANS) == ("draft", 2)
    assert trace.step_kind("servetune.verify", SPANS) == ("verify", None)
    assert trace.step_kind("servetune.comm.all_reduce", SPANS) is None
    assert trace.step_kind("aten::mm", SPANS) is None


def test_gpu_steps_split_exactly() -> None:
    steps = trace.steps_of(gpu_trace(), SPANS)
    assert [(s.kind, s.batch_size) for s in steps] == [
        ("verify", 4), ("draft", 4), ("verify", 4), ("verify", 1)]
    first = steps[0]
    assert first.step_us == 800
    assert first.split_us == {"collective": 200, "custom_allreduce": 100, "compute": 430,
                              "memcpy": 20, "gap": 50}
    assert sum(first.split_us.values()) == first.step_us
    assert first.kernel_us["compute"] == 530  # the MoE kernel counted, hidden behind NCCL
    assert "unrelated_kernel" not in first.kernels
    assert steps[1].split_us["compute"] == 100 and steps[1].split_us["collective"] == 50
    assert steps[3].split_us["custom_allreduce"] == 30


def test_summary_means_and_sentence(tmp_path: Path) -> None:
    result = trace.read([write(tmp_path / "rank0.json", gpu_trace())], SPANS)
    assert result.device == "gpu" and result.skipped_steps == 1  # the DECODE span
    verify = result.main("verify")
    assert verify is not None and (verify.batch_size, verify.steps) == (4, 2)  # not bs=1
    assert verify.step_ms == pytest.approx(0.65)
    assert verify.split_ms["collective"] == pytest.approx(0.1)
    assert verify.split_ms["custom_allreduce"] == pytest.approx(0.05)
    assert verify.compute_ms == pytest.approx(0.465)
    assert verify.communication_ms == pytest.approx(0.15)
    assert verify.other_ms == pytest.approx(0.035)
    assert verify.communication_ms + verify.compute_ms + verify.other_ms == \
        pytest.approx(verify.step_ms)
    assert verify.sentence().startswith("verify 0.65 ms = 0.15 ms communication + ")
    assert verify.sentence().endswith(" compute + 0.04 ms other")
    assert verify.top_kernels[0] == {"name": "sm90_xmma_gemm_bf16bf16_bf16f32",
                                     "class": "compute", "ms": pytest.approx(0.4)}
    draft = result.main("draft")
    assert draft is not None and draft.step_ms == pytest.approx(0.15)
    data = json.loads(json.dumps(result.to_json()))
    assert {s["kind"] for s in data["summaries"]} == {"verify", "draft"}


def test_ranks_are_averaged_and_gzip_read(tmp_path: Path) -> None:
    slow = [dict(e, dur=e["dur"] * 2) if e.get("cat") == "kernel" and e["ts"] == 3100 else e
            for e in gpu_trace()]
    result = trace.read([write(tmp_path / "rank0.json.gz", gpu_trace(), gz=True),
                         write(tmp_path / "rank1.json", slow)], SPANS)
    verify = result.main("verify")
    assert verify is not None and verify.ranks == 2
    assert verify.step_ms_by_rank == pytest.approx([0.65, 0.9])
    assert verify.step_ms == pytest.approx(0.775)


def test_gpu_user_annotation_window_without_links() -> None:
    """No correlation ids: the GPU-side span's window picks the kernels."""
    events = [span("servetune.verify", 0, 20),
              {"ph": "X", "cat": "gpu_user_annotation", "name": "servetune.verify",
               "pid": GPU_PID, "tid": STREAM, "ts": 100, "dur": 300},
              kernel("gemm", 100, 200, None), kernel("ncclDevKernel_AllReduce", 300, 50, None),
              kernel("after_the_step", 500, 50, None)]
    (step,) = trace.steps_of(events, SPANS)
    assert step.step_us == 300
    assert step.split_us == {"collective": 50, "custom_allreduce": 0, "compute": 200,
                             "memcpy": 0, "gap": 50}


def test_cpu_trace_uses_top_level_operators() -> None:
    """gloo on CPU: the span is the step; nested operators are not counted twice."""
    events = [span("servetune.verify", 0, 1000),
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": CPU_PID, "tid": THREAD,
               "ts": 10, "dur": 300},
              {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": CPU_PID,
               "tid": THREAD, "ts": 20, "dur": 200},
              span("servetune.comm.all_reduce", 400, 200),
              {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": CPU_PID,
               "tid": THREAD, "ts": 410, "dur": 50},
              {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": CPU_PID, "tid": THREAD,
               "ts": 700, "dur": 100},
              {"ph": "X", "cat": "cpu_op", "name": "other_thread", "pid": CPU_PID, "tid": 99,
               "ts": 100, "dur": 800}]
    (step,) = trace.steps_of(events, SPANS)
    assert step.step_us == 1000
    assert step.split_us == {"collective": 200, "custom_allreduce": 0, "compute": 400,
                             "memcpy": 0, "gap": 400}
    assert set(step.kernels) == {"aten::mm", "servetune.comm.all_reduce", "aten::add"}


def test_trim_keeps_what_the_parser_reads() -> None:
    events = [
        *gpu_trace(), span("step[VERIFY bs=4]", 6000, 10), launch(6001, 6),
        kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 6100, 250, 6),
        {"ph": "X", "cat": "python_function", "name": "noise", "pid": CPU_PID, "tid": THREAD,
         "ts": 6002, "dur": 1, "args": {"Python id": 5}}]
    small = trace.trim(events, steps_per_kind=2, spans=SPANS)
    assert small == trace.trim(list(reversed(events)), steps_per_kind=2, spans=SPANS)
    kept = trace.steps_of(small["traceEvents"], SPANS)
    full = {s.start_us: s for s in trace.steps_of(events, SPANS)}
    # the first verify step is left out; the next two verify steps are kept, as measured
    assert [s.start_us for s in kept if s.kind == "verify"] == [3100, 4100]
    for s in kept:
        assert s.split_us == full[s.start_us].split_us
    assert all(set(e.get("args", {})) <= {"correlation"} for e in small["traceEvents"])
    assert not any(e.get("name") == "noise" for e in small["traceEvents"])


def test_unreadable_trace(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(trace.TraceError, match="not a readable Chrome trace"):
        trace.read([bad], SPANS)
    (tmp_path / "list.json").write_text(json.dumps({"traceEvents": 5}))
    with pytest.raises(trace.TraceError, match="no traceEvents"):
        trace.load_events(tmp_path / "list.json")
