"""SGLangWorkload rendering (pure), conflicts, and preflight; nothing is launched."""

from __future__ import annotations

import shlex
import socket
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

import launchers.sglang.answers
import launchers.sglang.launcher
from launchers.base import TrialContext
from launchers.failures import FailureKind, TrialFailed
from launchers.process import free_port
from launchers.sglang.datasets import DatasetError
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload, conflicting_server_args
from launchers.sglang.preflight import EnvResult, Resolution
from search_spaces.knobs import CATALOGUE, Group, Knob, KnobKind, Value

CONFIG: dict[str, Value] = {
    "NCCL_ALGO": "allreduce:tree",
    "NCCL_MAX_NCHANNELS": 4,
    "NCCL_BUFFSIZE": None,  # unset: removed from the inherited env
    "--disable-custom-all-reduce": True,
    "--enable-mscclpp": False,
    "--speculative-num-steps": 3,
}


def ctx(tmp_path: Path, gpus: tuple[str, ...] = ("0", "1", "2", "3"), port: int | None = 31000
        ) -> TrialContext:
    return TrialContext("exp", "t1", tmp_path / "t1", gpu_ids=gpus, port=port, seed=1)


def workload(**overrides: object) -> SGLangWorkload:
    args: dict[str, object] = {"model": "meta-llama/Llama-3.1-70B-Instruct",
                               "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B",
                               "speculative_algorithm": "EAGLE3",
                               "server_args": ["--mem-fraction-static", "0.8"]}
    args.update(overrides)
    return SGLangWorkload(SGLangArgs.model_validate(args))


def test_plan_argv_and_env(tmp_path: Path) -> None:
    plan = workload().plan(CONFIG, ctx(tmp_path))
    assert plan.argv == (
        "sglang", "serve", "--model-path", "meta-llama/Llama-3.1-70B-Instruct",
        "--speculative-draft-model-path", "yuhuili/EAGLE3-LLaMA3.1-Instruct-70B",
        "--speculative-algorithm", "EAGLE3", "--tp-size", "4", "--host", "127.0.0.1",
        "--port", "31000", "--enable-metrics", "--mem-fraction-static", "0.8",
        "--disable-custom-all-reduce", "--speculative-num-steps", "3",
        "--cuda-graph-bs-decode", "1", "--skip-server-warmup")
    trial = tmp_path / "t1"
    assert dict(plan.env) == {
        "NCCL_ALGO": "allreduce:tree", "NCCL_MAX_NCHANNELS": "4", "SGLANG_LOG_MS": "1",
        "SGLANG_ENABLE_METRICS_DEVICE_TIMER": "1", "SGLANG_RECORD_STEP_TIME": "1",
        "NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING",
        "NCCL_DEBUG_FILE": str(trial / "nccl.%h.%p.log"), "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert plan.unset_env == ("NCCL_BUFFSIZE",)
    assert plan.port == 31000 and plan.host == "127.0.0.1" and plan.workload == "sglang"


def test_plan_is_pure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = workload()
    first = w.plan(CONFIG, ctx(tmp_path))
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    monkeypatch.chdir(tmp_path)
    assert w.plan(dict(reversed(list(CONFIG.items()))), ctx(tmp_path)) == first


def test_options_off(tmp_path: Path) -> None:
    w = workload(draft_model=None, speculative_algorithm=None, metrics=False, nccl_debug=False,
                 tp=2, server_args=[], server_cmd=["python", "-m", "sglang.launch_server"],
                 capture_concurrency=False, fast_start=False)
    plan = w.plan({"NCCL_PROTO": "LL"}, ctx(tmp_path, gpus=()))
    assert plan.argv == ("python", "-m", "sglang.launch_server", "--model-path",
                         "meta-llama/Llama-3.1-70B-Instruct", "--tp-size", "2", "--host",
                         "127.0.0.1", "--port", "31000")
    assert dict(plan.env) == {"NCCL_PROTO": "LL", "SGLANG_LOG_MS": "1"}


def _captured(argv: Sequence[str]) -> list[str] | None:
    """The words after --cuda-graph-bs-decode (nargs="+": up to the next flag)."""
    if "--cuda-graph-bs-decode" not in argv:
        return None
    rest = list(argv)[list(argv).index("--cuda-graph-bs-decode") + 1:]
    return [w for w in rest[:next((i for i, w in enumerate(rest) if w.startswith("--")),
                                  len(rest))]]


def test_capture_sizes_are_the_concurrency_levels(tmp_path: Path) -> None:
    w = workload(concurrency=[16, 1, 4], objective_concurrency=8)
    plan = w.plan({}, ctx(tmp_path))
    assert _captured(plan.argv) == ["1", "4", "8", "16"]
    assert plan.argv[-6] == "--cuda-graph-bs-decode"  # after the user's flags and knobs
    assert plan.argv[-1] == "--skip-server-warmup"  # measuring only (fast_start)
    assert any("batch sizes 1 4 8 16 only" in n for n in plan.notes)


def test_largest_captured_batch_stays_a_knob(tmp_path: Path) -> None:
    """SGLang takes max_bs = max(bs) when a list is given: the knob's value closes the list."""
    w = workload(concurrency=[1, 4, 16, 64])
    plan = w.plan({"--cuda-graph-max-bs-decode": 32}, ctx(tmp_path))
    assert _captured(plan.argv) == ["1", "4", "16", "32"]
    assert plan.argv[plan.argv.index("--cuda-graph-max-bs-decode") + 1] == "32"
    assert _captured(w.plan({"--cuda-graph-max-bs-decode": 2}, ctx(tmp_path)).argv) == ["1", "2"]
    from_args = workload(concurrency=[1, 4, 16], server_args=["--cuda-graph-max-bs-decode=8"])
    assert _captured(from_args.plan({}, ctx(tmp_path)).argv) == ["1", "4", "8"]


@pytest.mark.parametrize("server_args", [
    ["--cuda-graph-bs-decode", "1", "2", "3"],
    ["--cuda-graph-config", '{"decode": {"bs": [2]}}'],
    ["--disable-decode-cuda-graph"],
    ["--cuda-graph-backend-decode", "disabled"],
])
def test_user_capture_settings_win(tmp_path: Path, server_args: list[str]) -> None:
    plan = workload(concurrency=[1, 4], server_args=server_args).plan({}, ctx(tmp_path))
    assert plan.argv.count("--cuda-graph-bs-decode") == server_args.count("--cuda-graph-bs-decode")
    assert not any("batch sizes" in n for n in plan.notes)
    assert workload(capture_concurrency=False).plan({}, ctx(tmp_path)).argv.count(
        "--cuda-graph-bs-decode") == 0


def test_config_capture_settings_win(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that sets the capture list (a knob of the catalogue) renders only its own."""
    knob = Knob("--cuda-graph-bs-decode", KnobKind.FLAG, Group.GRAPH, "capture list",
                ("1 2",), lambda v: None)
    monkeypatch.setitem(CATALOGUE, "--cuda-graph-bs-decode", knob)
    plan = workload(concurrency=[1, 4]).plan({"--cuda-graph-bs-decode": "1 2"}, ctx(tmp_path))
    assert plan.argv.count("--cuda-graph-bs-decode") == 1
    assert _captured(plan.argv) == ["1 2"]


@pytest.mark.parametrize("name", ["--load-format", "--speculative-draft-load-format"])
def test_dummy_weights_render_from_the_config(tmp_path: Path, name: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if name not in CATALOGUE:  # added to the catalogue by its own change; shaped as SGLang's
        monkeypatch.setitem(CATALOGUE, name, Knob(name, KnobKind.FLAG, Group.GRAPH, "weights",
                                                  ("dummy",), lambda v: None))
    plan = workload().plan({name: "dummy"}, ctx(tmp_path))
    assert plan.argv[plan.argv.index(name) + 1] == "dummy"
    assert "--cuda-graph-bs-decode" in plan.argv  # the capture list still follows


def test_tp_defaults(tmp_path: Path) -> None:
    assert _tp(workload().plan({}, ctx(tmp_path, gpus=())).argv) == "1"
    assert _tp(workload().plan({}, ctx(tmp_path)).argv) == "4"
    assert _tp(workload(tp=8).plan({}, ctx(tmp_path)).argv) == "8"
    notes = workload().plan({}, ctx(tmp_path, gpus=())).notes
    assert any("tp 1" in n for n in notes)


def _tp(argv: Sequence[str]) -> str:
    return argv[list(argv).index("--tp-size") + 1]


def test_port_from_args_when_context_has_none(tmp_path: Path) -> None:
    assert "30123" in workload(port=30123).plan({}, ctx(tmp_path, port=None)).argv
    with pytest.raises(ValueError, match="port"):  # the default 0: a free port per trial
        workload().plan({}, ctx(tmp_path, port=None))


def test_speculative_env_only_with_speculative_decoding(tmp_path: Path) -> None:
    off = workload(draft_model=None, speculative_algorithm=None).plan({}, ctx(tmp_path))
    assert "SGLANG_ENABLE_METRICS_DEVICE_TIMER" not in off.env
    via_args = workload(draft_model=None, speculative_algorithm=None,
                        server_args=["--speculative-algorithm=EAGLE3"]).plan({}, ctx(tmp_path))
    assert via_args.env["SGLANG_RECORD_STEP_TIME"] == "1"
    notes = workload(draft_model=None, speculative_algorithm=None).plan(
        {"--speculative-num-steps": 3}, ctx(tmp_path)).notes
    assert any("speculative" in n for n in notes)


HOSTILE = ["; rm -rf / #", "$(reboot)", "`id`", "a b\tc", "'\"", "--port", "-x"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_inert(tmp_path: Path, value: str) -> None:
    w = workload(model=value, server_args=["--served-model-name", value])
    plan = w.plan(CONFIG, ctx(tmp_path))
    # one argv word each, verbatim
    assert plan.argv[plan.argv.index("--model-path") + 1] == value
    assert plan.argv[plan.argv.index("--served-model-name") + 1] == value
    script = plan.shell_script()
    exec_line = next(line for line in script.splitlines() if line.startswith("exec "))
    assert shlex.split(exec_line)[1:] == list(plan.argv)


def test_newline_in_env_is_refused(tmp_path: Path) -> None:
    w = workload()
    plan = w.plan(CONFIG, ctx(tmp_path))
    with pytest.raises(ValueError, match="newline"):
        plan.full_env({"EVIL": "x\nNCCL_ALGO=Tree"})


def test_conflicting_server_args() -> None:
    knobs = ["NCCL_ALGO", "--enable-mscclpp", "--speculative-num-steps"]
    found = conflicting_server_args(
        ["--port", "1", "--tp-size=2", "--enable-mscclpp", "--speculative-num-steps=3",
         "--mem-fraction-static", "0.8", "--model", "m", "NCCL_ALGO"], knobs)
    assert len(found) == 5
    assert any("--port" in f and "servetune sets itself" in f for f in found)
    assert any("--tp-size" in f for f in found)
    assert any("--model" in f for f in found)
    assert any("--enable-mscclpp" in f and "knob" in f for f in found)
    assert any("--speculative-num-steps" in f for f in found)
    assert conflicting_server_args(["--mem-fraction-static", "0.8"], CATALOGUE) == []


def test_workload_conflicts_include_rendered_speculative_flags() -> None:
    w = workload(server_args=["--speculative-algorithm", "EAGLE"])
    assert any("--speculative-algorithm" in c for c in w.conflicts([]))
    assert workload(speculative_algorithm=None, draft_model=None,
                    server_args=["--speculative-algorithm", "EAGLE"]).conflicts([]) == []


# ---------------------------------------------------------------- preflight


@dataclass
class _Result:
    ok: bool | None
    error: str = ""
    warnings: tuple[str, ...] = ()


@dataclass
class _Preflight:
    """Stands in for launchers.sglang.preflight (written separately): records its calls."""

    result: _Result
    calls: list[tuple[list[str], str | None]]


@pytest.fixture
def fake_preflight(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Preflight]:
    state = _Preflight(_Result(True), [])
    module = types.ModuleType("launchers.sglang.preflight")

    def check_argv(argv: Sequence[str], python: str | None = None,
                   cache_path: Path | None = None, experiment: str | None = None) -> _Result:
        state.calls.append((list(argv), python))
        return state.result

    def check_env(values: Sequence[tuple[str, str]], python: str | None = None,
                  cache_path: Path | None = None, experiment: str | None = None
                  ) -> list[EnvResult]:
        return [EnvResult(ok=True, known=True) for _ in values]

    def resolve(argv: Sequence[str], python: str | None = None, cache_path: Path | None = None,
                experiment: str | None = None) -> Resolution:
        return Resolution(ok=None)  # SGLang's resolution could not run: no verdict

    module.check_argv = check_argv  # type: ignore[attr-defined]
    module.resolve = resolve  # type: ignore[attr-defined]
    module.check_env = check_env  # type: ignore[attr-defined]
    module.python_for = lambda server_cmd: None  # type: ignore[attr-defined]
    monkeypatch.setattr(launchers.sglang.launcher, "sglang_parser", module)
    monkeypatch.setattr(launchers.sglang.answers, "sglang_parser", module)
    yield state


def test_preflight_passes_flags_only(tmp_path: Path, fake_preflight: _Preflight) -> None:
    w = workload(server_cmd=["python", "-m", "sglang.launch_server"], preflight_python="/py")
    c = ctx(tmp_path, port=free_port())
    plan = w.plan(CONFIG, c)
    w.preflight(plan, c)
    (argv, python), = fake_preflight.calls
    assert argv == list(plan.argv[3:]) and argv[0] == "--model-path"
    assert python == "/py"


def test_preflight_rejection_is_invalid_config(tmp_path: Path, fake_preflight: _Preflight
                                               ) -> None:
    fake_preflight.result = _Result(False, "unrecognized arguments: --bogus")
    w = workload()
    c = ctx(tmp_path, port=free_port())
    with pytest.raises(TrialFailed) as info:
        w.preflight(w.plan(CONFIG, c), c)
    assert info.value.failure.kind is FailureKind.INVALID_CONFIG
    assert info.value.failure.message == ("SGLang rejected the command: "
                                          "unrecognized arguments: --bogus")


def test_preflight_unknown_sglang_is_not_a_failure(tmp_path: Path, fake_preflight: _Preflight
                                                   ) -> None:
    fake_preflight.result = _Result(None)
    w = workload()
    c = ctx(tmp_path, port=free_port())
    w.preflight(w.plan(CONFIG, c), c)
    assert len(fake_preflight.calls) == 1
    workload(preflight=False).preflight(w.plan(CONFIG, c), c)
    assert len(fake_preflight.calls) == 1


def test_preflight_busy_port(tmp_path: Path, fake_preflight: _Preflight) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        c = ctx(tmp_path, port=sock.getsockname()[1])
        w = workload()
        with pytest.raises(TrialFailed) as info:
            w.preflight(w.plan(CONFIG, c), c)
    assert info.value.failure.kind is FailureKind.PORT_BUSY
    assert fake_preflight.calls == []


def test_describe_and_class_attributes(tmp_path: Path) -> None:
    w = workload(workdir=tmp_path)
    assert (w.kind, w.default_metric, w.default_mode) == ("sglang", "output_throughput", "max")
    described = w.describe()
    assert described["kind"] == "sglang" and described["dataset"] == "builtin"
    assert described["workdir"] == str(tmp_path)  # JSON-ready


def test_dataset_info_and_a_bad_dataset(tmp_path: Path) -> None:
    info = workload(input_len=64).dataset_info()
    assert info["name"] == "builtin" and info["input_len_cap"] == 64
    bad = workload(dataset=str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetError, match=r"missing\.jsonl"):
        bad.dataset_info()
    c = ctx(tmp_path)
    with pytest.raises(TrialFailed) as info_:  # in a trial: invalid_config, nothing launched
        bad.start(bad.plan({}, c), c)
    assert info_.value.failure.kind is FailureKind.INVALID_CONFIG
    assert info_.value.failure.message.startswith("dataset: ")
    assert not (c.trial_dir / "server.log").exists()


def test_preflight_with_an_interpreter_that_cannot_parse(tmp_path: Path) -> None:
    """SGLang's parser cannot run there: the command launches unchecked (no failure, no
    warning), while a busy port is still caught."""
    w = workload(preflight_python=str(tmp_path / "no-such-python"))
    c = ctx(tmp_path, port=free_port())
    assert w.preflight(w.plan(CONFIG, c), c) == []
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        busy = ctx(tmp_path, port=sock.getsockname()[1])
        with pytest.raises(TrialFailed) as info:
            w.preflight(w.plan(CONFIG, busy), busy)
    assert info.value.failure.kind is FailureKind.PORT_BUSY


@pytest.mark.parametrize(("measured", "prefill_off"), [
    (["verify_ms"], True), (["cycle_ms", "p99_itl_ms_c8"], True),
    (["output_throughput"], False), (["verify_ms", "p99_ttft_ms"], False), ([], False)])
def test_fast_start_skips_only_what_the_measurement_does_not_use(
        tmp_path: Path, measured: list[str], prefill_off: bool) -> None:
    """servetune warms up itself, so SGLang's own warm-up request goes; the prefill's CUDA
    graphs go only when every measured metric times the decode phase."""
    w = workload(measured=measured)
    argv = w.plan(CONFIG, ctx(tmp_path)).argv
    assert "--skip-server-warmup" in argv
    assert ("--cuda-graph-backend-prefill" in argv) is prefill_off
    production = w.production_plan(CONFIG, ctx(tmp_path)).argv
    assert "--skip-server-warmup" not in production
    assert "--cuda-graph-backend-prefill" not in production


def test_fast_start_leaves_the_users_own_settings(tmp_path: Path) -> None:
    w = workload(measured=["verify_ms"], server_args=["--warmups", "2",
                                                      "--disable-prefill-cuda-graph"])
    argv = w.plan(CONFIG, ctx(tmp_path)).argv
    assert "--skip-server-warmup" not in argv and "--cuda-graph-backend-prefill" not in argv
    assert "--skip-server-warmup" not in workload(fast_start=False).plan(
        CONFIG, ctx(tmp_path)).argv
