"""Native mode (--proxy-comm): how the mode is resolved, what the plan and each round record,
which values enter the space, and native mode on CPU through SGLang's own GroupCoordinator
over gloo (it runs where SGLang's distributed layer imports, else it fails with the reason)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launchers.failures import FailureKind, TrialFailed
from launchers.proxy import launcher
from launchers.proxy.comm import dispatch, native
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from search_spaces.knobs import CATALOGUE
from search_spaces.space import load_preset
from tests.launchers.proxy.conftest import MakeCtx
from tests.launchers.proxy.helpers import REQUIRED, run_trial

ROOT = Path(__file__).resolve().parents[3]
FAST: dict[str, Any] = {"model": "tiny", "kv_len": 64, "iters_per_round": 3}
OK = native.Availability(True, "SGLang 0.5.23 and sgl_kernel 0.4.5", "0.5.23", "0.4.5",
                         {"pcie_ipc_ar": True})


def argv_value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.fixture(autouse=True)
def fresh_answers() -> None:
    native._ANSWERS.clear()


def never(cuda: bool) -> native.Availability:
    raise AssertionError("the probe ran although an install was missing")


def installed(monkeypatch: pytest.MonkeyPatch, *present: str) -> None:
    """Only ``present`` of sglang and sgl_kernel are installed, as find_spec sees them."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name in ("sglang", native.KERNELS):
            return real("json") if name in present else None
        return real(name, *args)

    monkeypatch.setattr(native.importlib.util, "find_spec", find_spec)


def forced(monkeypatch: pytest.MonkeyPatch, answer: native.Availability) -> None:
    """Native mode's availability as ``answer`` says, for every plan of the test."""
    monkeypatch.setattr(native, "availability", lambda cuda, cache=None, probe=None: answer)


# ---------------------------------------------------------------- resolving the mode


def test_auto_without_sglang_or_its_kernels_is_emulated_without_probing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch)
    mode = native.resolve(native.AUTO, cuda=True, probe=never)
    assert (mode.name, mode.reason) == (native.EMULATED, "SGLang is not installed")
    installed(monkeypatch, "sglang")  # CI: SGLang with --no-deps, no kernels
    mode = native.resolve(native.AUTO, cuda=False, probe=never)
    assert mode.name == native.EMULATED and "sgl_kernel" in mode.reason
    assert mode.record()["proxy_comm"] == "emulated"
    assert mode.record()["sglang_version"] == importlib.metadata.version("sglang")
    assert native.refusal(mode) is None
    asked = native.resolve(native.NATIVE, cuda=False, probe=never)
    assert asked.name == native.NATIVE and not asked.available.ok  # never silently emulated
    assert native.refusal(asked) == f"--proxy-comm native: {mode.reason}"


def test_the_probe_decides_and_is_kept_per_process_and_in_the_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, "sglang", native.KERNELS)
    calls: list[bool] = []

    def probe(cuda: bool) -> native.Availability:
        calls.append(cuda)
        return OK

    cache = tmp_path / native.CACHE_FILE
    mode = native.resolve(native.AUTO, cuda=True, cache=cache, probe=probe)
    assert mode.name == native.NATIVE and "0.5.23" in mode.reason and calls == [True]
    assert native.resolve(native.AUTO, cuda=True, cache=cache, probe=probe).name == "native"
    assert calls == [True]  # kept in the process
    native._ANSWERS.clear()
    assert native.availability(True, cache, probe) == OK and calls == [True]  # in the file
    [entry] = json.loads(cache.read_text()).values()
    assert entry["ok"] is True and entry["version"] == "0.5.23"
    native.availability(False, cache, probe)  # CPU is asked apart
    assert calls == [True, False] and len(json.loads(cache.read_text())) == 2
    assert native.resolve(native.EMULATED, cuda=True, cache=cache, probe=never).name == \
        native.EMULATED  # asked for: no probe


@pytest.fixture(scope="module")
def probed() -> native.Availability:
    """The real subprocess probe of this venv, once (about 4 s)."""
    return native.run_probe(cuda=False)


def test_the_real_probe_answers_in_one_json_line(probed: native.Availability) -> None:
    """The subprocess probe of this venv: SGLang's version and why native mode cannot run or
    that it can; whatever it says agrees with what is installed."""
    answer = probed
    assert answer.version == importlib.metadata.version("sglang")
    assert answer.reason
    kernels = importlib.util.find_spec(native.KERNELS) is not None
    if not kernels:  # the layer's own failure comes first where there is one
        assert not answer.ok, answer
        assert native.KERNELS in answer.reason or answer.reason.startswith(
            "SGLang's distributed layer does not build here: "), answer
    if answer.capabilities:  # the layer imported: the modules this release ships
        assert answer.capabilities["custom_all_reduce"] is True
        spec = importlib.util.find_spec("sglang")  # the file, without importing SGLang here
        assert spec is not None and spec.origin is not None
        shipped = Path(spec.origin).parent / "srt/distributed/device_communicators/pcie_ipc_ar.py"
        assert answer.capabilities["pcie_ipc_ar"] == shipped.exists()


# ---------------------------------------------------------------- the plan's record


def test_plan_records_the_mode_and_why(make_ctx: MakeCtx, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    installed(monkeypatch, "sglang")
    plan = ProxyWorkload(ProxyArgs(**FAST)).plan({}, make_ctx())
    assert argv_value(plan.argv, "--proxy-comm") == "emulated"
    assert "sgl_kernel" in argv_value(plan.argv, "--proxy-comm-reason")
    assert any(n.startswith("proxy comm: emulated (auto: ") for n in plan.notes)
    assert "--native-flags" not in plan.argv and "SGLANG_USE_CPU_ENGINE" not in plan.env
    pinned = ProxyWorkload(ProxyArgs(**FAST, proxy_comm="emulated")).plan({}, make_ctx())
    assert any(n == "proxy comm: emulated (emulated: asked for)" for n in pinned.notes)


def test_native_plan(make_ctx: MakeCtx, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    monkeypatch.setattr(launcher.topology, "probe",
                        lambda ids: launcher.topology.Topology(True, 9))
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    forced(monkeypatch, OK)
    w = ProxyWorkload(ProxyArgs(model="kimi-k2.5", layers=2))
    ctx = make_ctx(gpu_ids=("0", "1"))
    plan = w.plan({"allreduce-backend": "pcie-ipc"}, ctx)
    assert plan == w.plan({"allreduce-backend": "pcie-ipc"}, ctx)  # pure
    assert argv_value(plan.argv, "--proxy-comm") == "native"
    assert argv_value(plan.argv, "--native-flags") == "disable-custom-all-reduce"
    assert argv_value(plan.argv, "--allreduce-path") == dispatch.PCIE_IPC  # the prediction
    assert plan.env["SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"] == "1"
    assert plan.env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"  # multicast stays off
    notes = " ".join(plan.notes)
    assert "SGLang 0.5.23 decides every collective" in notes and "not modelled" not in notes
    assert "GroupCoordinator" in notes
    w.preflight(plan, ctx)  # PCIe-IPC runs in native mode
    default = w.plan({}, ctx)  # Kimi on SM90: SGLang would fuse
    assert "--native-flags" not in default.argv
    assert native.FUSION_NOTE in default.notes
    asked = w.plan({"TORCH_SYMM_MEM_DISABLE_MULTICAST": 0}, ctx)
    assert asked.env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "0"  # the config's own value
    cpu = ProxyWorkload(ProxyArgs(**FAST, device="cpu")).plan({}, make_ctx())
    assert cpu.env["SGLANG_USE_CPU_ENGINE"] == "1"  # SGLang's CPU engine: gloo
    assert not any("every collective ran gloo" in n for n in cpu.notes)


def test_native_levers_enter_the_space(monkeypatch: pytest.MonkeyPatch) -> None:
    """PCIe-IPC and MSCCL++ leave "not modelled" in native mode; NCCL symmetric memory stays;
    emulated mode is as it was."""
    monkeypatch.setattr(launcher, "_cuda_available", lambda: True)
    monkeypatch.setattr(launcher.topology, "probe",
                        lambda ids: launcher.topology.Topology(True, 9))
    backend = CATALOGUE["allreduce-backend"]
    emulated = ProxyWorkload(ProxyArgs(model="kimi-k2.5", device="cuda", ranks=2,
                                       proxy_comm="emulated"))
    assert set(emulated.unmodelled(backend)) == {"nccl-symm-mem", "pcie-ipc"}
    eight = ProxyArgs(model="kimi-k2.5", device="cuda", ranks=8)
    assert "MSCCL++" in ProxyWorkload(eight).unmodelled(CATALOGUE["--enable-mscclpp"])[True]
    forced(monkeypatch, OK)
    two = ProxyWorkload(ProxyArgs(model="kimi-k2.5", device="cuda", ranks=2))
    assert set(two.unmodelled(backend)) == {"nccl-symm-mem"}
    assert "symmetric pool" in two.unmodelled(backend)["nccl-symm-mem"]
    assert ProxyWorkload(eight).unmodelled(CATALOGUE["--enable-mscclpp"]) == {}


def test_native_where_it_cannot_run_is_bad_input(make_ctx: MakeCtx,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch, "sglang")
    args = ProxyArgs(**FAST, proxy_comm="native")
    [line] = args.checks(load_preset("nccl-nvlink"), "exp")
    assert line.startswith("--proxy-comm native: ") and "sgl_kernel" in line
    assert ProxyArgs(**FAST).checks(load_preset("nccl-nvlink"), "exp") == []  # auto: fine
    w = ProxyWorkload(args)
    ctx = make_ctx()
    plan = w.plan({}, ctx)
    assert argv_value(plan.argv, "--proxy-comm") == "native"
    with pytest.raises(TrialFailed, match="sgl_kernel") as err:
        w.preflight(plan, ctx)
    assert err.value.failure.kind is FailureKind.INVALID_CONFIG


def test_cli_option_reaches_the_proxy_args(tmp_path: Path) -> None:
    from tuner.cli import build_parser
    from tuner.cli.args import spec_from_args

    parsed = build_parser().parse_args(["run", "--proxy-comm", "native", "--out",
                                        str(tmp_path / "x")])
    spec = spec_from_args(parsed, tmp_path)
    assert isinstance(spec.workload, ProxyArgs) and spec.workload.proxy_comm == "native"
    assert spec_from_args(build_parser().parse_args(["run", "--out", str(tmp_path / "y")]),
                          tmp_path).workload.proxy_comm == "auto"  # type: ignore[union-attr]


# ---------------------------------------------------------------- native on CPU, for real


def test_native_on_cpu_runs_sglangs_group_or_says_why(make_ctx: MakeCtx,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      probed: native.Availability) -> None:
    """Through the launcher, against the reference an emulated trial wrote: SGLang's
    GroupCoordinator over gloo (its CPU engine) where its distributed layer imports here (the
    kernels forced available: they play no part over gloo), else a crash naming the cause."""
    builds = probed.ok or not probed.reason.startswith("SGLang's distributed layer")
    _, info, _ = run_trial(ProxyWorkload(ProxyArgs(**FAST, proxy_comm="emulated")), {},
                           make_ctx("emulated"))
    assert info["correctness"] == "reference_written" and info["proxy_comm"] == "emulated"
    assert info["allreduce_path"] == "gloo" and "allreduce_served_by" not in info
    forced(monkeypatch, OK)
    w = ProxyWorkload(ProxyArgs(**FAST))
    if not builds:
        with pytest.raises(TrialFailed) as err:
            run_trial(w, {}, make_ctx("native"))
        text = err.value.failure.message + err.value.failure.log_tail
        assert "native mode: SGLang's" in text, text
        return
    _, info, rounds = run_trial(w, {}, make_ctx("native"), rounds=1)
    assert info["proxy_comm"] == "native"
    assert info["sglang_version"] == importlib.metadata.version("sglang")
    assert info["allreduce_path"] == info["allgather_path"] == "native:torch_distributed"
    assert info["allreduce_served_by"].endswith("(gloo)"), info["allreduce_served_by"]
    assert info["correctness"] == "pass"  # SGLang's sums match the emulated reference
    assert "GroupCoordinator" in " ".join(info["approximation"])
    [m] = rounds
    assert set(REQUIRED) <= set(m) and m["correctness"] == "pass"
    assert m["proxy_comm"] == "native" and m["allreduce_path"] == "native:torch_distributed"
    assert "SGLang" in m["proxy_comm_reason"]


def test_worker_native_failure_is_one_clear_line(tmp_path: Path) -> None:
    """The rank itself, with SGLang's distributed layer hidden: it exits at once, naming the
    import that failed (no hang, no traceback as the last word)."""
    shadow = tmp_path / "sglang"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('sglang hidden by the test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
           "SGLANG_USE_CPU_ENGINE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "launchers.proxy.worker", "--spawn", "2", "--device", "cpu",
         "--model", "tiny", "--rounds", "1", "--iters", "1", "--kv-len", "16", "--no-check",
         "--proxy-comm", "native"], capture_output=True, text=True, timeout=120, env=env,
        cwd=ROOT)
    assert done.returncode != 0
    assert "native mode: SGLang's distributed layer does not import: ImportError: sglang " \
           "hidden by the test" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


# ---------------------------------------------------------------- the rank's side, without SGLang


def test_switches_follow_the_installed_spelling() -> None:
    from launchers.proxy.comm.native_group import NativeUnavailable, _switches

    def v0523(group_ranks: Any, local_rank: Any, backend: Any, use_pynccl: Any = None,
              use_custom_allreduce: Any = None, group_name: Any = None, use_mscclpp: Any = None,
              use_torch_symm_mem_allreduce: Any = None) -> None: ...

    def v0516(group_ranks: Any, local_rank: Any, backend: Any, use_custom_allreduce: Any = None,
              use_mscclpp_allreduce: Any = None, use_torch_symm_mem_allreduce: Any = None
              ) -> None: ...

    def bare(group_ranks: Any, local_rank: Any, backend: Any) -> None: ...

    flags = ["disable-custom-all-reduce", "enable-mscclpp"]
    assert _switches(v0523, flags) == {"use_custom_allreduce": False, "use_mscclpp": True,
                                       "use_torch_symm_mem_allreduce": False}
    assert _switches(v0516, flags)["use_mscclpp_allreduce"] is True
    assert _switches(bare, []) == {}  # nothing asked beyond the defaults
    with pytest.raises(NativeUnavailable, match="no switch for mscclpp"):
        _switches(bare, ["enable-mscclpp"])


class _Comm:
    """A stand-in communicator: its module is where SGLang keeps them."""

    __module__ = "sglang.srt.distributed.device_communicators.fake"

    def __init__(self) -> None:
        self.calls = 0
        self.disabled = False

    def should_custom_ar(self, t: Any) -> bool:
        return True

    def custom_all_reduce(self, t: Any) -> Any:
        self.calls += 1
        return self.all_reduce(t)  # nested: only the outermost is recorded

    def all_reduce(self, t: Any) -> Any:
        return t


class _Group:
    def __init__(self, serve: bool) -> None:
        self.ca_comm: Any = _Comm()
        self.pynccl_comm: Any = None
        self.device_group = None
        self.serve = serve

    def all_reduce(self, t: Any) -> Any:
        return self.ca_comm.custom_all_reduce(t) if self.serve else t


def test_watch_names_the_outermost_communicator_and_restores_it() -> None:
    import torch

    from launchers.proxy.comm.native_group import NativeCollectives, communicators

    group = _Group(serve=True)
    assert list(communicators(group)) == ["ca_comm"]
    comm = NativeCollectives(group, predicted=dispatch.FUSION, cuda=False, graph=False)
    buf = torch.zeros(4)
    group.all_gather_into_tensor = lambda out, t: None  # type: ignore[attr-defined]
    comm.observe(buf, torch.zeros(8), buf)
    assert comm.path == "native:custom_ar" and comm.gather_path == "native:torch_distributed"
    record = comm.record()
    assert record["allreduce_served_by"] == "ca_comm.custom_all_reduce (_Comm)"
    assert record["native_fusion"] and record["native_communicators"] == "ca_comm (_Comm)"
    assert "custom_all_reduce" not in vars(group.ca_comm)  # unwrapped again
    assert group.ca_comm.calls == 1
    quiet = NativeCollectives(_Group(serve=False), predicted="nccl", cuda=False, graph=False)
    quiet.group.all_gather_into_tensor = lambda out, t: None
    quiet.observe(buf, torch.zeros(8), buf)
    assert quiet.path == "native:torch_distributed" and quiet.record()["native_fusion"] is None
