"""ProxyWorkload: pure plans, preflight, and real 2-rank gloo trials on CPU."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from launchers import trace
from launchers.failures import FailureKind, TrialFailed
from launchers.process import LOCALHOST
from launchers.proxy import launcher
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload, writes_reference
from launchers.proxy.protocol import STEP_SPANS
from search_spaces.knobs import CATALOGUE, Group, Knob, KnobKind, Value
from tests.launchers.proxy.conftest import MakeCtx
from tests.launchers.proxy.helpers import REQUIRED, run_trial

FAST: dict[str, Any] = {"model": "tiny", "kv_len": 64, "iters_per_round": 3}


def argv_value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---------------------------------------------------------------- plans


def test_supports_the_knobs_it_models() -> None:
    w = ProxyWorkload()
    supported = {n for n, k in CATALOGUE.items() if w.supports(k)}
    assert {"NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "--speculative-num-draft-tokens",
            "--speculative-num-steps", "--speculative-eagle-topk", "--disable-custom-all-reduce",
            "--enable-torch-symm-mem", "--enable-symm-mem", "--enable-mscclpp",
            "--flashinfer-allreduce-fusion-backend",
            "--enforce-disable-flashinfer-allreduce-fusion"} <= supported
    assert not supported & {"--enable-torch-compile", "--cuda-graph-max-bs-decode",
                            "--enable-nccl-nvls"}
    sglang_env = Knob("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", KnobKind.ENV, Group.ALLREDUCE,
                      "", (0, 1), lambda v: None, {})
    other_env = Knob("SGLANG_SOMETHING_ELSE", KnobKind.ENV, Group.ALLREDUCE, "", (0, 1),
                     lambda v: None, {})
    assert w.supports(sglang_env) and not w.supports(other_env)
    assert (w.kind, w.default_metric, w.default_mode) == ("proxy", "est_tok_s", "max")


def test_unmodelled_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values whose collectives the proxy cannot run here, each with its reason; values that
    run (or change nothing here) are not listed."""
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    monkeypatch.setattr(launcher.topology, "probe",
                        lambda ids: launcher.topology.Topology(True, 9))
    two = ProxyWorkload(ProxyArgs(model="kimi-k2.5", device="cuda", ranks=2))
    assert two.unmodelled(CATALOGUE["--enable-symm-mem"]).keys() == {True}
    assert "NCCL symmetric memory" in two.unmodelled(CATALOGUE["--enable-symm-mem"])[True]
    # The backend sends both collectives to NCCL symmetric memory: the reason once, then why
    # each collective goes there.
    symm = two.unmodelled(CATALOGUE["allreduce-backend"])["nccl-symm-mem"]
    assert symm.count("NCCL symmetric memory (") == 1 and symm.count("not modelled") == 1, symm
    assert "all-reduce: " in symm and "all-gather: " in symm
    assert two.unmodelled(CATALOGUE["--enable-mscclpp"]) == {}  # no effect at 2 ranks
    assert two.unmodelled(CATALOGUE["--disable-custom-all-reduce"]) == {}
    assert two.unmodelled(CATALOGUE["--flashinfer-allreduce-fusion-backend"]) == {}
    assert two.unmodelled(CATALOGUE["NCCL_ALGO"]) == {}
    eight = ProxyWorkload(ProxyArgs(model="kimi-k2.5", device="cuda", ranks=8))
    assert "MSCCL++" in eight.unmodelled(CATALOGUE["--enable-mscclpp"])[True]
    refused = Knob("--flashinfer-allreduce-fusion-backend", KnobKind.FLAG, Group.FUSION, "",
                   ("trtllm", "cutedsl"), lambda v: None, {})
    assert set(two.unmodelled(refused)) == {"cutedsl"}
    assert two.unmodelled(CATALOGUE["--speculative-num-steps"]) == {}


def test_cpu_plan(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    w = ProxyWorkload(ProxyArgs(**FAST))
    config = {"NCCL_ALGO": "allreduce:tree", "NCCL_BUFFSIZE": None,
              "--speculative-num-draft-tokens": 6, "--speculative-num-steps": 5}
    plan = w.plan(config, ctx)
    assert plan == w.plan(config, ctx)  # pure
    assert plan.argv[:5] == (sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2")
    assert argv_value(plan.argv, "--device") == "cpu"
    assert argv_value(plan.argv, "--draft-tokens") == "6"
    assert argv_value(plan.argv, "--draft-steps") == "5"
    assert argv_value(plan.argv, "--out") == str(ctx.trial_dir.absolute())
    assert Path(argv_value(plan.argv, "--reference")).parent == ctx.trial_dir.parent.absolute()
    assert "--write-reference" not in plan.argv  # an NCCL override never writes it
    assert plan.env == {"NCCL_ALGO": "allreduce:tree"} and plan.unset_env == ("NCCL_BUFFSIZE",)
    assert any("no effect on CPU" in n for n in plan.notes)
    # tiny is a DeepSeek-V3 shape: SGLang would fuse its all-reduces; CPU runs gloo
    assert argv_value(plan.argv, "--allreduce-path") == "fusion"
    assert argv_value(plan.argv, "--allgather-path") == "nccl"
    assert argv_value(plan.argv, "--interconnect") == "nvlink"
    assert any(n.startswith("all-reduce (2 per layer") and "SGLang would run fusion" in n
               for n in plan.notes)
    assert any("every collective ran gloo" in n for n in plan.notes)


@pytest.mark.parametrize("config, path", [
    ({}, "fusion"),
    ({"--enforce-disable-flashinfer-allreduce-fusion": True}, "custom_ar_1shot"),
    ({"--enforce-disable-flashinfer-allreduce-fusion": True,
      "--disable-custom-all-reduce": True}, "nccl"),
    ({"--enable-symm-mem": True}, "fusion"),
])
def test_plan_passes_sglangs_path(config: dict[str, Value], path: str, make_ctx: MakeCtx,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    monkeypatch.setattr(launcher.topology, "probe",
                        lambda ids: launcher.topology.Topology(True, 9))
    plan = ProxyWorkload(ProxyArgs(model="kimi-k2.5", layers=2)).plan(
        config, make_ctx(gpu_ids=("0", "1")))
    assert argv_value(plan.argv, "--allreduce-path") == path
    notes = " ".join(plan.notes)
    assert "the proxy runs: " in notes
    assert ("fusion is emulated" in notes) is (path == "fusion")


def test_pcie_regime(make_ctx: MakeCtx, monkeypatch: pytest.MonkeyPatch) -> None:
    """pcie: NCCL through host memory, SGLang's rules without NVLink, said in the notes; the
    regime's own variable does not stop the baseline writing the (separately keyed) reference."""
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    monkeypatch.setattr(launcher.topology, "probe",
                        lambda ids: launcher.topology.Topology(True, 9))
    ctx = make_ctx(gpu_ids=("0", "1"))
    args = {"model": "llama-3.1-70b", "layers": 2}
    pcie = ProxyWorkload(ProxyArgs(**args, interconnect="pcie")).plan({}, ctx)
    nvlink = ProxyWorkload(ProxyArgs(**args)).plan({}, ctx)
    assert pcie.env["NCCL_P2P_DISABLE"] == "1" and "NCCL_P2P_DISABLE" not in nvlink.env
    assert argv_value(pcie.argv, "--interconnect") == "pcie"
    assert argv_value(nvlink.argv, "--interconnect") == "nvlink"  # auto: NVML says NVLink
    assert "--write-reference" in pcie.argv and "--write-reference" in nvlink.argv
    assert argv_value(pcie.argv, "--reference") != argv_value(nvlink.argv, "--reference")
    assert any("legacy CustomAllreduce 1stage" in n for n in pcie.notes)
    assert any("CustomAllReduceV2 1shot_push" in n for n in nvlink.notes)
    assert any("its time is not a PCIe box's" in n for n in pcie.notes)
    four = ProxyWorkload(ProxyArgs(**args, interconnect="pcie", ranks=4)).plan(
        {}, make_ctx(gpu_ids=("0", "1", "2", "3")))
    assert argv_value(four.argv, "--allreduce-path") == "nccl"


@pytest.mark.parametrize("config, kind, match", [
    ({"--enable-symm-mem": True, "--disable-custom-all-reduce": True}, "not_modelled",
     "NCCL symmetric memory"),
    ({"--enable-symm-mem": True}, "not_modelled", "all-gather as nccl_symm_mem"),
    ({"--flashinfer-allreduce-fusion-backend": "cutedsl"}, "invalid_config", "Blackwell"),
    ({"SGLANG_USE_1STAGE_ALLREDUCE": "perhaps"}, "invalid_config",
     "SGLANG_USE_1STAGE_ALLREDUCE"),
])
def test_preflight_refuses_what_the_proxy_cannot_run(config: dict[str, Value], kind: str,
                                                     match: str, make_ctx: MakeCtx,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    w = ProxyWorkload(ProxyArgs(**{**FAST, "model": "tiny-dense"}))
    ctx = make_ctx()
    for name in [n for n in config if n.startswith("SGLANG_")]:  # inherited, as SGLang reads
        monkeypatch.setenv(name, str(config.pop(name)))
    plan = w.plan(config, ctx)
    with pytest.raises(TrialFailed, match=match) as err:
        w.preflight(plan, ctx)
    assert err.value.failure.kind.value == kind


def test_baseline_writes_reference(make_ctx: MakeCtx) -> None:
    w = ProxyWorkload(ProxyArgs(**FAST))
    assert "--write-reference" in w.plan({"NCCL_ALGO": None}, make_ctx()).argv
    assert "--write-reference" in w.plan({"NCCL_NVLS_ENABLE": 0}, make_ctx()).argv  # the pin
    assert writes_reference({"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"})
    assert not writes_reference({"NCCL_NVLS_ENABLE": "1"})
    off = ProxyWorkload(ProxyArgs(**FAST, check_correctness=False)).plan({}, make_ctx())
    assert "--no-check" in off.argv and "--reference" not in off.argv


def test_reference_key_follows_the_output(make_ctx: MakeCtx) -> None:
    def ref(args: ProxyArgs, config: dict[str, int] | None = None) -> str:
        return argv_value(ProxyWorkload(args).plan(config or {}, make_ctx()).argv, "--reference")

    base = ref(ProxyArgs(**FAST))
    assert base == ref(ProxyArgs(**{**FAST, "iters_per_round": 9}, graph=False))  # timing only
    assert base == ref(ProxyArgs(**FAST, layers=4))  # all 4 layers: no subset
    assert base == ref(ProxyArgs(**FAST, layers=9))  # more than the model has: all of them
    assert base != ref(ProxyArgs(**FAST, layers=2))
    assert base != ref(ProxyArgs(**FAST, ranks=1))
    assert base != ref(ProxyArgs(**FAST, batch=2))
    assert base != ref(ProxyArgs(**FAST), {"--speculative-num-draft-tokens": 6})


def test_gpu_plan(make_ctx: MakeCtx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    ctx = make_ctx(gpu_ids=("2", "3"))
    plan = ProxyWorkload(ProxyArgs(model="kimi-k2.5", layers=2)).plan({"NCCL_PROTO": "LL"}, ctx)
    assert argv_value(plan.argv, "--device") == "cuda"
    assert argv_value(plan.argv, "--spawn") == "2"
    assert argv_value(plan.argv, "--layers") == "2"
    assert plan.env["CUDA_VISIBLE_DEVICES"] == "2,3" and plan.env["NCCL_PROTO"] == "LL"
    assert plan.env["NCCL_DEBUG"] == "INFO"  # launchers.nccl_log is present
    assert any("scaled" in n for n in plan.notes)
    default = ProxyWorkload().plan({}, ctx)
    assert argv_value(default.argv, "--model") == "llama-3.1-70b"
    cpu = ProxyWorkload().plan({}, make_ctx())  # no GPUs given: CPU
    assert argv_value(cpu.argv, "--device") == "cpu" and argv_value(cpu.argv, "--model") == "tiny"


def test_gpu_plan_fits_layers_to_memory(make_ctx: MakeCtx, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """No --layers: all layers when they fit, else the most that fit in 85% of the smallest
    GPU's memory, decided in the plan (NVML), so every trial runs the same layers."""
    from launchers import gpu

    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    ctx = make_ctx(gpu_ids=("0",))
    llama = ProxyWorkload(ProxyArgs(model="llama-3.1-70b"))  # 130.7 GiB at tp 1
    monkeypatch.setattr(gpu, "memory_total", lambda ids: 143_771_009_024)  # an H200
    plan = llama.plan({}, ctx)
    layers = int(argv_value(plan.argv, "--layers"))
    assert 60 < layers < 80 and "--fit-layers" in plan.argv
    assert any(f"runs {layers} of 80 layers" in n and "fitted" in n for n in plan.notes)
    explicit = ProxyWorkload(ProxyArgs(model="llama-3.1-70b", layers=80)).plan({}, ctx)
    assert "--layers" not in explicit.argv and "--fit-layers" not in explicit.argv  # authoritative
    kimi = ProxyWorkload(ProxyArgs(model="kimi-k2.5")).plan({}, ctx)  # INT4 experts: 64 GiB
    assert "--layers" not in kimi.argv and "--fit-layers" not in kimi.argv
    monkeypatch.setattr(gpu, "memory_total", lambda ids: None)  # no NVML: the ranks decide
    blind = llama.plan({}, ctx)
    assert "--layers" not in blind.argv and "--fit-layers" in blind.argv
    assert any("no NVML" in n for n in blind.notes)
    assert argv_value(blind.argv, "--reference") != argv_value(plan.argv, "--reference")


@pytest.mark.parametrize("args, match", [
    (ProxyArgs(model="no-such-model"), "unknown model shape"),
    (ProxyArgs(model="tiny", ranks=3), "split over 3"),
])
def test_preflight_rejects_bad_shapes(args: ProxyArgs, match: str, make_ctx: MakeCtx) -> None:
    w = ProxyWorkload(args)
    ctx = make_ctx()
    with pytest.raises(TrialFailed, match=match) as err:
        w.preflight(w.plan({}, ctx), ctx)
    assert err.value.failure.kind is FailureKind.INVALID_CONFIG


def test_preflight_port_busy(make_ctx: MakeCtx) -> None:
    with socket.socket() as sock:
        sock.bind((LOCALHOST, 0))
        sock.listen(1)
        w = ProxyWorkload(ProxyArgs(**FAST, port=sock.getsockname()[1]))
        ctx = make_ctx()
        with pytest.raises(TrialFailed) as err:
            w.preflight(w.plan({}, ctx), ctx)
    assert err.value.failure.kind is FailureKind.PORT_BUSY


# ---------------------------------------------------------------- real trials (2 gloo ranks)


def test_two_ranks_ready_and_rounds(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    running, info, rounds = run_trial(ProxyWorkload(ProxyArgs(**FAST)), {}, ctx, rounds=2)
    assert info["ranks"] == 2 and info["device"] == "cpu" and info["graph"] is False
    assert info["correctness"] == "reference_written"
    assert info["bytes_per_pass"] == info["bytes_breakdown"]["total"] > 0
    assert info["quantized_checkpoint"] is False and info["quantization"] is None
    assert info["bytes_per_pass_unquantized"] == info["bytes_per_pass"]
    assert info["layers_source"] == "all" and "device_name" in info
    assert len(info["approximation"]) >= 4
    for index, m in enumerate(rounds):
        assert set(REQUIRED) <= set(m)
        assert m["round"] == index and m["correctness"] == "pass" and m["rel_err"] == 0.0
        assert m["verify_ms"] > 0 and m["comm_alone_ms"] > 0 and m["est_tok_s"] > 0
        assert m["compute_ms"] > 0 and m["scaled"] is False
        assert m["exposed_comm_ms"] == pytest.approx(m["verify_ms"] - m["compute_ms"])
        assert m["allreduce_path"] == "gloo" and m["allgather_path"] == "gloo"
        assert m["sglang_allreduce_path"] == "fusion" and m["allreduce_count"] == 8
        assert m["bytes_per_pass"] == info["bytes_per_pass"]
    assert running.effective() == {}  # no NCCL on CPU
    assert (ctx.trial_dir / "proxy.log").exists()
    assert running.process.poll() is not None  # stopped


def test_profile_two_ranks(make_ctx: MakeCtx) -> None:
    """torch.profiler in each gloo rank: one Chrome trace per rank, read back by
    launchers.trace; rounds go on after a profile."""
    ctx = make_ctx()
    w = ProxyWorkload(ProxyArgs(**FAST))
    plan = w.plan({}, ctx)
    w.preflight(plan, ctx)
    with w.start(plan, ctx) as running:
        running.wait_ready(120)
        running.measure(0)
        files = running.profile(2)
        assert running.measure(1)["round"] == 1
    folder = ctx.trial_dir.absolute() / "traces"
    assert files == [folder / "rank0.trace.json.gz", folder / "rank1.trace.json.gz"]
    result = trace.read(files, ProxyWorkload.step_spans)
    assert result.device == "cpu" and result.skipped_steps == 0
    assert result == trace.read(files, [STEP_SPANS])
    assert trace.read(files).summaries == {}  # without the workload's span names: no step
    verify, compute = result.main("verify"), result.main("compute_only")
    collectives = result.main("comm_alone")
    assert verify is not None and compute is not None and collectives is not None
    assert (verify.ranks, verify.steps) == (2, 2)
    assert verify.communication_ms > 0 and verify.compute_ms > 0
    assert sum(verify.split_ms.values()) == pytest.approx(verify.step_ms)
    assert compute.split_ms["collective"] == 0  # no-ops: nothing communicated
    assert collectives.split_ms["collective"] > 0.5 * collectives.step_ms
    assert collectives.compute_ms < 0.2 * collectives.step_ms


def test_repeat_passes_and_tampered_reference_fails(make_ctx: MakeCtx) -> None:
    w = ProxyWorkload(ProxyArgs(**FAST))
    _, first, _ = run_trial(w, {}, make_ctx("base"))
    assert first["correctness"] == "reference_written"
    _, again, rounds = run_trial(w, {"NCCL_ALGO": "allreduce:ring"}, make_ctx("repeat"))
    assert again["correctness"] == "pass" and rounds[0]["correctness"] == "pass"

    path = Path(argv_value(w.plan({}, make_ctx()).argv, "--reference"))
    data = torch.load(path, weights_only=True)
    data["logits"] = data["logits"] * 1.1
    torch.save(data, path)
    with pytest.raises(TrialFailed) as err:
        run_trial(w, {"NCCL_ALGO": "allreduce:ring"}, make_ctx("tampered"))
    failure = err.value.failure
    assert failure.kind is FailureKind.WRONG_RESULT
    assert "relative L2 error" in failure.message


def test_rank_crash_mid_benchmark(make_ctx: MakeCtx) -> None:
    ctx = make_ctx()
    with pytest.raises(TrialFailed) as err:
        run_trial(ProxyWorkload(ProxyArgs(**FAST)), {}, ctx, extra_argv=("--fail-at", "round"))
    failure = err.value.failure
    assert failure.kind is FailureKind.CRASHED_MID_BENCHMARK
    assert failure.message.startswith("round 0:")
    assert "injected failure at round" in failure.log_tail
    assert "stopping the other ranks" in failure.log_tail


def test_rank_crash_at_start_is_classified(make_ctx: MakeCtx) -> None:
    """The combined log goes through classify(): NCCL's text names the kind."""
    text = ("NCCL error in: ProcessGroupNCCL.cpp:1, invalid usage, NCCL version 2.28.9 "
            "Last error: No algorithm/protocol available for function AllGather")
    with pytest.raises(TrialFailed) as err:
        run_trial(ProxyWorkload(ProxyArgs(**FAST)), {}, make_ctx(),
                  extra_argv=("--fail-at", "init", "--fail-rank", "0", "--fail-message", text))
    assert err.value.failure.kind is FailureKind.NCCL_INVALID_USAGE
    assert err.value.failure.returncode == 1


def test_round_timeout_is_a_hang(make_ctx: MakeCtx) -> None:
    w = ProxyWorkload(ProxyArgs(**{**FAST, "iters_per_round": 1_000_000}, round_timeout=1.0))
    with pytest.raises(TrialFailed) as err:
        run_trial(w, {}, make_ctx())
    assert err.value.failure.kind is FailureKind.BENCHMARK_HANG
