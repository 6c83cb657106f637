"""Proxy launcher: args, one process tree of one rank per GPU (or 2 gloo ranks on CPU)."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from launchers.base import (
    LaunchPlan,
    Metrics,
    Running,
    TrialContext,
    Workload,
    WorkloadArgs,
    knob_env,
)
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.process import ServerProcess, port_is_free
from launchers.proxy.shapes import Shape, load_shape, preset_names, reference_key, shape_name
from launchers.proxy.worker import CONTROL_FILE, ROUNDS_FILE, Request
from search_spaces.knobs import SPECULATIVE_KNOBS, Knob, KnobKind, Value


class ProxyArgs(WorkloadArgs):
    """Base arguments of the proxy workload."""

    kind: Literal["proxy"] = "proxy"
    model: str | None = Field(None, description="shape preset name or a config.json path; "
                              "default: 'tiny' on CPU, 'llama-3.1-70b' on GPU")
    layers: int | None = Field(None, ge=1, description="run a subset of layers, scale results")
    batch: int = Field(1, ge=1, description="requests in the verify batch")
    draft_tokens: int = Field(4, ge=1, description="used when the config does not set it")
    kv_len: int = Field(4096, ge=1)
    ranks: int | None = Field(None, ge=1, description="default: GPUs of the trial, or 2 on CPU")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    iters_per_round: int | None = Field(None, ge=1, description="replays timed per round; "
                                        "default 50 on GPU, 10 on CPU (eager and slow)")
    graph: bool = True
    check_correctness: bool = True
    accept_length: float = Field(3.0, gt=0, description="assumed, for est_tok_s")
    draft_ms: float | None = Field(None, ge=0, description="assumed draft time per cycle")
    port: int = Field(0, ge=0, le=65535, description="rendezvous port; 0: a free one per trial")
    ready_timeout: float = Field(600.0, gt=0)
    round_timeout: float = Field(300.0, gt=0, description="seconds one round may take")
    hbm_bandwidth: float | None = Field(None, gt=0, description="B/s per GPU for hbm_floor_ms; "
                                        "default: 4.3e12 on H200, else measured")

    cli_fields: ClassVar[Mapping[str, str]] = {
        "model_config": "model", "layers": "layers", "batch": "batch", "kv_len": "kv_len",
        "port": "port", "ready_timeout": "ready_timeout"}

    def build(self) -> ProxyWorkload:
        return ProxyWorkload(self)

    def shape_source(self) -> str | None:
        return self.model

    def tp_ranks(self) -> int | None:
        return self.ranks


# ---------------------------------------------------------------- the workload

PROXY_LOG = "proxy.log"
# A baseline may carry these and still write the correctness reference: they turn a feature
# off (the multicast safety pin every shipped preset has) and choose no algorithm or protocol.
REFERENCE_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0"}


def _nccl_log() -> Any | None:
    """launchers.nccl_log where this checkout has it."""
    try:
        return importlib.import_module("launchers.nccl_log")
    except ImportError:
        return None


def writes_reference(env: Mapping[str, str]) -> bool:
    """A configuration with no NCCL overrides: the one whose logits become the reference."""
    return all(REFERENCE_SAFE_ENV.get(k) == v for k, v in env.items() if k.startswith("NCCL_"))


def _fit_layers(shape_config: Mapping[str, Any], model: str, gpu_ids: tuple[str, ...], *,
                ranks: int, batch: int, draft_tokens: int, kv_len: int
                ) -> tuple[int | None, str | None]:
    """No --layers on GPUs: every layer when the model fits, else the most that fit in
    FIT_FRACTION of the smallest GPU's total memory (NVML); without NVML the worker fits them
    itself (``--fit-layers``). Returns (layers or None for all, a note or None)."""
    from launchers import gpu
    from launchers.proxy.model import FIT_FRACTION, Geometry, fit_layers

    try:
        geo = Geometry(Shape.from_config(shape_config, shape_name(model)), ranks=ranks,
                       batch=batch, draft_tokens=draft_tokens, kv_len=kv_len)
    except ValueError:
        return None, None  # preflight says why
    total = gpu.memory_total(gpu_ids)
    if total is None:
        return None, (f"no NVML here: if the whole model does not fit, the ranks run the most "
                      f"layers that fit in {FIT_FRACTION:.0%} of GPU memory (scaled: true)")
    n = fit_layers(geo, total)
    if n is None:
        return None, None
    need = geo.bytes_per_pass(full=False)["total"]
    return n, (f"fitted: the whole model needs {need / 2**30:.1f} GiB per GPU, more than "
               f"{FIT_FRACTION:.0%} of {total / 2**30:.1f} GiB; set --layers to choose")


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


class ProxyWorkload(Workload):
    """The verify-pass proxy: one process tree of one rank per GPU (2 gloo ranks on CPU).

    Correctness gate: the output compared is the verify pass's logits ([tokens x vocab],
    float32) after the graph replay. The first trial of an experiment that sets no NCCL
    variable (``writes_reference``) writes them to ``<experiment>/proxy_reference.<key>.pt``,
    keyed by everything that changes them (shape, layers, batch, draft tokens, KV length,
    ranks, device, dtype, seed); every later trial with the same key compares at ready and
    after each round (relative L2 error <= 2e-2 in bf16, 1e-4 in float32: reduction order may
    differ between NCCL algorithms, corruption does not stay that small) and fails as
    wrong_result. A trial whose key has no reference yet reports ``correctness:
    no_reference``."""

    kind: ClassVar[str] = "proxy"
    default_metric: ClassVar[str] = "est_tok_s"
    default_mode: ClassVar[str] = "max"

    def __init__(self, args: ProxyArgs | None = None) -> None:
        self.args = args or ProxyArgs()

    def supports(self, knob: Knob) -> bool:
        """NCCL and other env knobs, and the speculative shape; server flags do nothing here."""
        return knob.kind is KnobKind.ENV or knob.name in SPECULATIVE_KNOBS

    # ------------------------------------------------------------ rendering (pure)
    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        a = self.args
        cuda = a.device == "cuda" or (a.device == "auto" and bool(ctx.gpu_ids)
                                       and _cuda_available())
        ranks = a.ranks or ((len(ctx.gpu_ids) or 1) if cuda else 2)
        model = a.model or ("llama-3.1-70b" if cuda else "tiny")
        if model not in preset_names():
            model = str(Path(model).absolute())
        drafts = config.get("--speculative-num-draft-tokens")
        draft_tokens = drafts if isinstance(drafts, int) else a.draft_tokens
        steps = config.get("--speculative-num-steps")
        port = ctx.port if ctx.port is not None else (a.port or None)
        folder = ctx.trial_dir.absolute()

        env, unset = knob_env(config)
        reference = writes_reference(env)
        log = _nccl_log() if cuda else None
        if log is not None:
            env.update(log.debug_env(folder))
        if cuda and ctx.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(ctx.gpu_ids)

        dtype = "bfloat16" if cuda else "float32"
        try:
            shape_config: dict[str, Any] = load_shape(model)
        except ValueError:
            shape_config = {"unreadable": model}  # preflight says why
        layers = a.layers
        if layers is not None and layers >= int(shape_config.get("num_hidden_layers", 0) or 0):
            layers = None  # all layers: the same output as no --layers
        fitted: str | None = None  # how the layer count was fitted to GPU memory
        if cuda and a.layers is None:
            layers, fitted = _fit_layers(shape_config, model, ctx.gpu_ids, ranks=ranks,
                                         batch=a.batch, draft_tokens=draft_tokens,
                                         kv_len=a.kv_len)
        key = reference_key(shape_name(model), shape_config, layers=layers, batch=a.batch,
                            draft_tokens=draft_tokens, kv_len=a.kv_len, ranks=ranks,
                            device="cuda" if cuda else "cpu", dtype=dtype, seed=ctx.seed)
        argv = [sys.executable, "-m", "launchers.proxy.worker", "--spawn", str(ranks),
                "--device", "cuda" if cuda else "cpu", "--model", model,
                "--batch", str(a.batch), "--draft-tokens", str(draft_tokens),
                "--kv-len", str(a.kv_len),
                "--iters", str(a.iters_per_round or (50 if cuda else 10)),
                "--graph" if a.graph else "--no-graph", "--accept-length", str(a.accept_length),
                "--seed", str(ctx.seed), "--out", str(folder)]
        if layers is not None:
            argv += ["--layers", str(layers)]
        if fitted is not None:
            argv.append("--fit-layers")
        if isinstance(steps, int):
            argv += ["--draft-steps", str(steps)]
        if a.draft_ms is not None:
            argv += ["--draft-ms", str(a.draft_ms)]
        if a.hbm_bandwidth is not None:
            argv += ["--hbm-bandwidth", str(a.hbm_bandwidth)]
        if port:
            argv += ["--port", str(port)]
        if a.check_correctness:
            argv += ["--reference", str(folder.parent / f"proxy_reference.{key}.pt")]
            if reference:
                argv.append("--write-reference")
        else:
            argv.append("--no-check")

        notes = []
        if not cuda:
            notes.append(f"device cpu: {ranks} gloo ranks, float32. NCCL knobs have no effect on "
                         "CPU: these numbers time gloo and CPU matmuls, not NCCL")
        elif ranks == 1:
            notes.append("one rank: NCCL runs no algorithm choice, so NCCL_ALGO and NCCL_PROTO "
                         "have no effect and are not checked")
        if layers is not None:
            notes.append(f"runs {layers} of {shape_config.get('num_hidden_layers')} layers; "
                         "times are scaled to the whole model (scaled: true)"
                         + (f"; {fitted}" if fitted else ""))
        elif fitted:
            notes.append(fitted)
        if not isinstance(drafts, int):
            notes.append(f"draft tokens {draft_tokens} from the proxy's args (the config does "
                         "not set --speculative-num-draft-tokens)")
        if a.check_correctness and reference:
            notes.append("no NCCL overrides: writes the correctness reference if none exists")
        return LaunchPlan(workload=self.kind, argv=tuple(argv), env=env, unset_env=unset,
                          port=port, notes=tuple(notes))

    # ------------------------------------------------------------ checks and start
    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        """The shape loads and splits over the ranks, the GPUs exist, the port is free."""
        from launchers.proxy.model import Geometry
        from launchers.proxy.worker import parse_args

        args = parse_args(plan.argv[3:])
        try:
            shape = Shape.from_config(load_shape(args.model), shape_name(args.model))
            Geometry(shape, ranks=args.spawn, batch=args.batch, draft_tokens=args.draft_tokens,
                     kv_len=args.kv_len, layers=args.layers)
        except ValueError as err:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, str(err))) from None
        if args.device == "cuda":
            import torch

            have = len(ctx.gpu_ids) or torch.cuda.device_count()
            if args.spawn > have:
                raise TrialFailed(Failure(FailureKind.INVALID_CONFIG,
                                          f"{args.spawn} ranks but {have} GPUs"))
        if plan.port is not None and not port_is_free(plan.port, plan.host):
            raise TrialFailed(Failure(FailureKind.PORT_BUSY,
                                      f"port {plan.port} on {plan.host} is already in use"))
        return []

    def start(self, plan: LaunchPlan, ctx: TrialContext) -> ProxyRunning:
        folder = ctx.trial_dir
        folder.mkdir(parents=True, exist_ok=True)
        for name in (ROUNDS_FILE, CONTROL_FILE):  # an earlier attempt's, in a retried trial
            (folder / name).unlink(missing_ok=True)
        process = ServerProcess.spawn(plan.argv, plan.full_env(), folder / PROXY_LOG,
                                      ctx.marker, port=plan.port, host=plan.host)
        return ProxyRunning(process, plan, folder, self.args.round_timeout)

    def describe(self) -> dict[str, Any]:
        return self.args.model_dump()


class ProxyRunning(Running):
    """The started proxy. Readiness: rank 0's ``ready`` line in proxy_rounds.jsonl (after
    warm-up, capture and the first correctness check); a round or a profile: write the request
    to proxy_control, wait for its line."""

    def __init__(self, process: ServerProcess, plan: LaunchPlan, folder: Path,
                 round_timeout: float) -> None:
        self.process = process
        self.plan = plan
        self.folder = folder
        self.round_timeout = round_timeout
        self.info: dict[str, Any] = {}  # the ready line: shape, bytes, approximation, ...
        self.rounds: dict[int, Metrics] = {}
        self.profiles: dict[int, dict[str, Any]] = {}  # request seq -> the profile line
        self._seq = -1  # the last request written
        self._wrong: str | None = None
        self._offset = 0
        self._cuda = "cuda" in plan.argv[plan.argv.index("--device") + 1]

    def _read(self) -> None:
        """Take in the complete lines rank 0 appended since the last read."""
        try:
            with open(self.folder / ROUNDS_FILE, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            kind = event.pop("event", None)
            if kind == "ready":
                self.info = event
            elif kind == "round":
                self.rounds[int(event["round"])] = event
            elif kind == "profile" and event.get("request") is not None:
                self.profiles[int(event["request"])] = event
            elif kind == "wrong_result":
                self._wrong = str(event.get("message", "the logits differ from the reference"))

    def _raise_if_wrong(self) -> None:
        if self._wrong is not None:
            failure = self.process.failure(self._wrong, FailureKind.WRONG_RESULT)
            failure.hint = ("this configuration changes the proxy's logits beyond bf16 "
                            "rounding (see shared/reference/nccl.md: forced LL128)")
            raise TrialFailed(failure)

    def wait_ready(self, timeout: float) -> float:
        def probe() -> bool:
            self._read()
            self._raise_if_wrong()
            return bool(self.info)

        try:
            return self.process.wait_ready(probe, timeout, interval=0.02)
        except TrialFailed:
            self._read()  # a wrong_result line written just before the exit
            self._raise_if_wrong()
            raise

    def _request(self, action: str, value: int) -> int:
        """Write the next request to proxy_control (atomically); returns its seq."""
        self._seq += 1
        control = self.folder / CONTROL_FILE
        tmp = control.with_name(CONTROL_FILE + ".tmp")
        tmp.write_text(Request(self._seq, action, value).line())
        tmp.replace(control)
        return self._seq

    def _wait(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            dead = self.process.poll() is not None
            self._read()
            self._raise_if_wrong()
            if done():
                return
            if dead:
                failure = self.process.failure()
                if failure.kind is FailureKind.CRASHED:
                    failure.kind = FailureKind.CRASHED_MID_BENCHMARK
                failure.message = f"{what}: {failure.message}"
                raise TrialFailed(failure)
            if time.monotonic() > deadline:
                raise TrialFailed(self.process.failure(
                    f"{what}: no result after {timeout:.0f} s (ranks still running)",
                    FailureKind.BENCHMARK_HANG))
            time.sleep(0.02)

    def measure(self, round_index: int) -> Metrics:
        self._request("round", round_index)
        self._wait(f"round {round_index}", lambda: round_index in self.rounds,
                   self.round_timeout)
        return dict(self.rounds[round_index])

    def profile(self, steps: int) -> list[Path]:
        """torch.profiler in every rank over ``steps`` verify passes (``servetune.verify``
        spans) and ``steps`` all-reduce-only passes (``servetune.allreduce_only``): one Chrome
        trace per rank, under traces/ in the trial folder."""
        seq = self._request("profile", steps)
        self._wait("profile", lambda: seq in self.profiles, self.round_timeout + 120.0)
        return [Path(f) for f in self.profiles[seq]["files"]]

    def effective(self) -> dict[str, Any]:
        """What NCCL ran with, from its own log (GPU runs with launchers.nccl_log)."""
        log = _nccl_log() if self._cuda else None
        if log is None:
            return {}
        eff = log.parse_files(log.debug_files(self.folder))
        inherited = {k: v for k, v in os.environ.items()
                     if k.startswith("NCCL_") and k not in self.plan.env
                     and k not in self.plan.unset_env}
        data: dict[str, Any] = eff.to_json()
        data["columns"] = eff.to_columns()
        data["warnings"] = log.mismatches(dict(self.plan.env), eff, inherited)
        return data
