"""SGLang launcher: args, command + env rendering, preflight, start, readiness, rounds."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field

from launchers import nccl_log
from launchers.base import LaunchPlan, Metrics, Running, TrialContext, Workload, knob_argv, knob_env
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.process import ServerProcess, port_is_free
from launchers.sglang import metrics
from launchers.sglang import preflight as sglang_parser
from launchers.sglang.bench import Bench, BenchError, BenchSettings
from search_spaces.knobs import SPECULATIVE_KNOBS, Value


class SGLangArgs(BaseModel):
    """Base arguments of the sglang workload (validated at the CLI edge)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["sglang"] = "sglang"
    model: str
    draft_model: str | None = None
    tp: int | None = Field(None, ge=1, description="default: all GPUs of the trial")
    speculative_algorithm: str | None = None
    server_args: list[str] = []
    server_cmd: list[str] = ["sglang", "serve"]
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=0, le=65535, description="0: a free port per trial")
    ready_timeout: float = Field(1800.0, gt=0)
    input_len: int = Field(256, ge=1)
    output_len: int = Field(256, ge=1)
    concurrency: list[int] = Field([1], min_length=1)
    objective_concurrency: int | None = None
    requests_per_round: int | None = Field(None, ge=1, description="default: 4 x concurrency")
    warmup_requests: int = Field(2, ge=0)
    request_timeout: float = Field(300.0, gt=0)
    nccl_debug: bool = True
    metrics: bool = True
    preflight: bool = True
    preflight_python: str | None = None

    def without_speculative(self) -> SGLangArgs | None:
        """These args with speculative decoding off (no draft model, no ``--speculative-*``
        server args), or None when they do not turn it on: the reference run that tells
        whether speculative decoding pays off at all on a machine."""
        if not SGLangWorkload(self).speculative:
            return None
        kept: list[str] = []
        words = iter(self.server_args)
        for word in words:
            name = _flag_name(word)
            if name is None or not name.startswith("--speculative-"):
                kept.append(word)
                continue
            if "=" not in word:  # its value, if any, is the next word
                nxt = next(words, None)
                if nxt is not None and nxt.startswith("--"):
                    kept.append(nxt)
        return self.model_copy(update={"speculative_algorithm": None, "draft_model": None,
                                       "server_args": kept})


# ---------------------------------------------------------------- the workload

# Flags servetune renders itself (with SGLang's aliases); user server_args must not repeat them.
PREFLIGHT_CACHE = "preflight-cache.json"
OWN_FLAGS = ("--model-path", "--model", "--tp-size", "--tensor-parallel-size", "--host", "--port")
_HEALTH_TIMEOUT = (0.5, 5.0)  # connect, read: one readiness probe
_EXIT_WAIT_S = 2.0  # how long a dropped connection may take to show up as a dead process
PROFILE_ROUND = 1_000_000  # the bench round index of a profile (its own prompts)


def _flag_name(word: str) -> str | None:
    return word.split("=", 1)[0] if word.startswith("--") else None


def conflicting_server_args(server_args: list[str], knob_names: Iterable[str],
                            also: Iterable[str] = ()) -> list[str]:
    """User ``server_args`` that repeat a searched/pinned knob flag or a flag servetune sets
    itself (``--flag value`` and ``--flag=value`` alike). ``also``: further flags the
    workload renders (e.g. ``--speculative-algorithm`` when the args set it)."""
    knob_flags = {n for n in knob_names if n.startswith("--")}
    own = set(OWN_FLAGS) | set(also)
    out: list[str] = []
    for word in server_args:
        name = _flag_name(word)
        if name is None:
            continue
        if name in knob_flags:
            out.append(f"server_args sets {name}, a knob of the search space: "
                       "tune or pin it there instead")
        elif name in own:
            out.append(f"server_args sets {name}, which servetune sets itself")
    return out


def env_rejection(name: str, text: str, reading: sglang_parser.EnvResult) -> str | None:
    """Why SGLang would not read ``name=text`` as given (None: it would). SGLang itself never
    says: an unknown name is ignored, a malformed value replaced by the default."""
    version = f"SGLang {reading.sglang_version}" if reading.sglang_version else "SGLang"
    if reading.known is False:
        hint = f"; closest: {reading.closest}" if reading.closest else ""
        return f"{name}: {version} has no such environment variable (it would ignore it{hint})"
    if reading.ok is False:
        return (f"{name}={text!r}: {version} reads it as {reading.env_type} and rejects it "
                f"({reading.error}); it would run with its default instead")
    return None


class SGLangWorkload(Workload):
    """An SGLang server with the trial's NCCL env and flags, benchmarked over HTTP."""

    kind: ClassVar[str] = "sglang"
    default_metric: ClassVar[str] = "output_tok_s"
    default_mode: ClassVar[str] = "max"

    def __init__(self, args: SGLangArgs) -> None:
        self.args = args

    # ------------------------------------------------------------ rendering (pure)
    @property
    def speculative(self) -> bool:
        a = self.args
        return bool(a.speculative_algorithm or a.draft_model or any(
            _flag_name(w) == "--speculative-algorithm" for w in a.server_args))

    def rendered_flags(self) -> list[str]:
        """Flags this workload renders besides the knobs and OWN_FLAGS."""
        a = self.args
        flags = ["--enable-metrics"] if a.metrics else []
        if a.draft_model:
            flags.append("--speculative-draft-model-path")
        if a.speculative_algorithm:
            flags.append("--speculative-algorithm")
        return flags

    def conflicts(self, knob_names: Iterable[str]) -> list[str]:
        rendered = [f for f in self.rendered_flags() if f != "--enable-metrics"]
        return conflicting_server_args(self.args.server_args, knob_names, rendered)

    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        a = self.args
        port = ctx.port if ctx.port is not None else a.port
        if not port:
            raise ValueError("no port: the trial context has none and args.port is 0")
        tp = a.tp or len(ctx.gpu_ids) or 1
        argv = [*a.server_cmd, "--model-path", a.model]
        if a.draft_model:
            argv += ["--speculative-draft-model-path", a.draft_model]
        if a.speculative_algorithm:
            argv += ["--speculative-algorithm", a.speculative_algorithm]
        argv += ["--tp-size", str(tp), "--host", a.host, "--port", str(port)]
        if a.metrics:
            argv.append("--enable-metrics")
        argv += [*a.server_args, *knob_argv(config)]

        env, unset = knob_env(config)
        if self.speculative and a.metrics:
            env["SGLANG_ENABLE_METRICS_DEVICE_TIMER"] = "1"  # verify/draft seconds in /metrics
            env["SGLANG_RECORD_STEP_TIME"] = "1"  # step_time_dict in /server_info
        if a.nccl_debug:
            env.update(nccl_log.debug_env(ctx.trial_dir))
        if ctx.gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(ctx.gpu_ids)

        notes = []
        if not self.speculative and any(config.get(k) is not None for k in SPECULATIVE_KNOBS):
            notes.append("speculative knobs are set but speculative decoding is off")
        if tp == 1:
            notes.append("tp 1: NCCL runs no collectives between GPUs; NCCL knobs have no effect")
        return LaunchPlan(workload=self.kind, argv=tuple(argv), env=env, unset_env=unset,
                          port=port, host=a.host, notes=tuple(notes))

    # ------------------------------------------------------------ checks and start
    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        """Port free, then the flags against the installed SGLang's own parser and every
        ``SGLANG_*`` variable against its env registry (cached in the experiment folder).
        Returns SGLang's warnings (deprecated flags)."""
        if plan.port is not None and not port_is_free(plan.port, plan.host):
            raise TrialFailed(Failure(FailureKind.PORT_BUSY,
                                      f"port {plan.port} on {plan.host} is already in use"))
        if not self.args.preflight:
            return []
        flags = list(plan.argv[len(self.args.server_cmd):])
        # SGLang's parser runs in the interpreter that runs SGLang (a console script's shebang)
        python = self.args.preflight_python or sglang_parser.python_for(self.args.server_cmd)
        cache = ctx.trial_dir.parent / PREFLIGHT_CACHE
        result = sglang_parser.check_argv(flags, python=python, cache_path=cache,
                                          experiment=ctx.experiment)
        if result.ok is False:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG,
                                      "SGLang rejected the command: " + result.error))
        sglang_env = sorted((k, v) for k, v in plan.env.items() if k.startswith("SGLANG_"))
        readings = sglang_parser.check_env(sglang_env, python=python, cache_path=cache,
                                           experiment=ctx.experiment)
        for (name, text), reading in zip(sglang_env, readings, strict=True):
            reason = env_rejection(name, text, reading)
            if reason:
                raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, reason))
        return [f"SGLang: {w}" for w in result.warnings]

    def start(self, plan: LaunchPlan, ctx: TrialContext) -> SGLangRunning:
        env = plan.full_env()
        process = ServerProcess.spawn(plan.argv, env, ctx.trial_dir / "server.log", ctx.marker,
                                      port=plan.port, host=plan.host)
        return SGLangRunning(process, plan, ctx, self.args, env)

    def describe(self) -> dict[str, Any]:
        return self.args.model_dump()


class SGLangRunning(Running):
    """A started SGLang server: readiness over ``/health_generate``, rounds over ``/generate``."""

    def __init__(self, process: ServerProcess, plan: LaunchPlan, ctx: TrialContext,
                 args: SGLangArgs, env: Mapping[str, str]) -> None:
        self.process = process
        self.plan = plan
        self.ctx = ctx
        self.args = args
        self.env = dict(env)
        host = "127.0.0.1" if plan.host in ("0.0.0.0", "") else plan.host
        self.base_url = f"http://{host}:{plan.port}"
        self.bench = Bench(self.base_url, BenchSettings(
            input_len=args.input_len, output_len=args.output_len,
            requests_per_round=args.requests_per_round, request_timeout=args.request_timeout,
            seed=ctx.seed))
        self.objective = args.objective_concurrency or args.concurrency[0]
        self.concurrencies = list(dict.fromkeys([*args.concurrency, self.objective]))

    def _healthy(self) -> bool:
        try:
            resp = requests.get(self.base_url + "/health_generate", timeout=_HEALTH_TIMEOUT)
        except requests.RequestException:
            return False
        return resp.status_code == 200

    def wait_ready(self, timeout: float) -> float:
        return self.process.wait_ready(self._healthy, timeout, interval=0.05)

    def warmup(self) -> None:
        try:
            self.bench.warmup(self.args.warmup_requests)
        except BenchError as err:
            raise TrialFailed(self._bench_failure(err, "warm-up")) from err

    def _bench_failure(self, err: BenchError, where: str) -> Failure:
        """Dead server: crashed_mid_benchmark; alive but silent past the timeout: hang."""
        deadline = time.monotonic() + (0 if err.timed_out else _EXIT_WAIT_S)
        while self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        dead = self.process.poll() is not None
        kind = (FailureKind.BENCHMARK_HANG if err.timed_out and not dead
                else FailureKind.CRASHED_MID_BENCHMARK)
        state = "server exited" if dead else "server still running"
        failure = self.process.failure(f"{where}: {err.message} ({state})")
        if failure.kind is not FailureKind.CRASHED:
            failure.details["log_kind"] = failure.kind.value
        failure.kind = kind
        return failure

    def measure(self, round_index: int) -> Metrics:
        where = f"round {round_index}"
        info: dict[str, Any] | None = None
        per: dict[int, dict[str, float | None]] = {}
        for c in self.concurrencies:
            before = metrics.scrape(self.base_url) if self.args.metrics else None
            try:
                result = self.bench.round(c, round_index)
            except BenchError as err:
                raise TrialFailed(self._bench_failure(err, where)) from err
            if self.process.poll() is not None or not result["completed"]:
                what = ("the server exited during the round" if self.process.poll() is not None
                        else f"all {int(result['failed'] or 0)} requests of the round failed")
                raise TrialFailed(self._bench_failure(BenchError(what, False), where))
            after = metrics.scrape(self.base_url) if self.args.metrics else None
            result.update(metrics.per_cycle(before, after))
            per[c] = result
        info = metrics.server_info(self.base_url)
        for c, result in per.items():
            spec: dict[str, float | None] = {"server_accept_length": None, "cycle_ms": None}
            if info is not None:
                spec = metrics.spec_from_server_info(info, c)
            result.update(spec)
        report: Metrics = dict(per[self.objective])
        if len(per) > 1:
            for c, result in per.items():
                report.update({f"{k}_c{c}": v for k, v in result.items()})
        return report

    def profile(self, steps: int) -> list[Path]:
        """SGLang's own profiler (``/start_profile``) over ``steps`` forward steps of a bench
        round at the objective concurrency; one trace per rank under traces/."""
        from launchers.sglang import profile as sglang_profile

        argv = list(self.plan.argv)
        ranks = int(argv[argv.index("--tp-size") + 1]) if "--tp-size" in argv else 1

        def load() -> None:
            try:
                self.bench.round(self.objective, PROFILE_ROUND)
            except BenchError as err:
                raise TrialFailed(self._bench_failure(err, "profile")) from err

        try:
            return sglang_profile.capture(self.base_url, self.ctx.trial_dir / "traces", steps,
                                          ranks, load)
        except sglang_profile.ProfileError as err:
            raise TrialFailed(self._bench_failure(BenchError(str(err), True), "profile")
                              ) from err

    def effective(self) -> dict[str, Any]:
        eff = nccl_log.parse_files(nccl_log.debug_files(self.ctx.trial_dir))
        inherited = {k: v for k, v in self.env.items()
                     if k.startswith("NCCL_") and k not in self.plan.env}
        data = eff.to_json()
        data["columns"] = eff.to_columns()
        data["warnings"] = nccl_log.mismatches(self.plan.env, eff, inherited)
        return data
