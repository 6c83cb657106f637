"""SGLang launcher: args, command + env rendering, preflight, start (the started server:
running.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from launchers import nccl_log
from launchers.base import LaunchPlan, TrialContext, Workload, WorkloadArgs, knob_argv, knob_env
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.options import CliOption
from launchers.process import LOCALHOST, ServerProcess, port_is_free
from launchers.sglang import answers, datasets, levers, multinode, resolved, served, weights
from launchers.sglang import preflight as sglang_parser
from launchers.sglang import startup as sglang_startup
from launchers.sglang.bench import ROUND_KEYS
from launchers.sglang.options import CLI_OPTIONS
from launchers.sglang.profile import STEP_SPANS
from launchers.sglang.ran import ran_values
from launchers.sglang.running import SGLangRunning
from launchers.sglang.server_args import (
    conflicting_server_args,
    flag_name,
    missing_path,
    server_arg,
)
from launchers.sglang.startup import STARTUP_KEYS
from launchers.trace.events import StepSpans
from search_spaces.knobs import SPECULATIVE_KNOBS, Value, primitive_names
from search_spaces.space import SearchSpace, UnknownName

# What a round reports per concurrency level: bench_serving's names (bench.py) and the
# server-side figures (metrics.py). With several levels, each also as ``<name>_c<level>``.
SERVER_KEYS = ("server_accept_length", "verify_ms", "draft_ms", "cycle_ms")
METRIC_KEYS = (*ROUND_KEYS, *SERVER_KEYS)


class SGLangArgs(WorkloadArgs):
    """Base arguments of the sglang workload (validated at the CLI edge)."""

    kind: Literal["sglang"] = "sglang"
    model: str
    draft_model: str | None = None
    tp: int | None = Field(None, ge=1, description="default: all GPUs of the trial")
    speculative_algorithm: str | None = None
    server_args: list[str] = Field(default_factory=list)
    server_cmd: list[str] = Field(default_factory=lambda: ["sglang", "serve"])
    host: str | None = Field(None, description="default: 127.0.0.1 for a trial, SGLang's own "
                             "in best/launch.sh")
    port: int = Field(0, ge=0, le=65535, description="0: a free port per trial")
    ready_timeout: float = Field(1800.0, gt=0)
    dataset: str = Field(datasets.BUILTIN, min_length=1, description=(
        "prompts: 'builtin' (Python's pydoc text), 'random' (token ids), or the path of a "
        "ShareGPT JSON / custom JSONL file"))
    input_len: int = Field(256, ge=1, description="prompt length (tokens; the cap for text)")
    output_len: int = Field(256, ge=1, description="output length (the cap for a file's)")
    concurrency: list[int] = Field([1], min_length=1)
    capture_concurrency: bool = Field(True, description=(
        "trials capture decode CUDA graphs for the concurrency levels only "
        "(--cuda-graph-bs-decode), unless server_args or the config set the capture sizes; "
        "best/launch.sh keeps SGLang's own list"))
    objective_concurrency: int | None = Field(None, ge=1, description=(
        "the level whose metrics carry the plain names, the one the search optimises "
        "(--decide-at); default: the first of concurrency"))
    requests_per_round: int | None = Field(None, ge=1, description="default: 4 x concurrency")
    warmup_requests: int = Field(2, ge=0)
    request_timeout: float = Field(300.0, gt=0)
    nccl_debug: bool = True
    metrics: bool = True
    preflight: bool = True
    preflight_python: str | None = None
    fast_start: bool = Field(True, description=(
        "trials skip what their measurement does not use (startup.py: fast_start_flags): "
        "SGLang's own warm-up request, and the prefill CUDA graphs when every measured "
        "metric times the decode phase; best/launch.sh keeps SGLang's defaults"))
    measured: list[str] = Field(default_factory=list, description=(
        "the metrics the experiment measures (objective, limits): set by the CLI"))

    cli_options: ClassVar[tuple[CliOption, ...]] = CLI_OPTIONS
    cli_selectors: ClassVar[tuple[str, ...]] = ("model",)
    production_port: ClassVar[int | None] = 30000  # SGLang's own default
    multi_node: ClassVar[bool] = True  # --nnodes/--node-rank/--dist-init-addr (multinode.py)

    def build(self) -> SGLangWorkload:
        return SGLangWorkload(self)

    def checks(self, space: SearchSpace, experiment: str) -> list[str]:
        """Model paths exist; server_args repeat no flag the space sets (the composite
        knobs' primitives included); the knobs the space declares exist in the installed
        SGLang (its env registry and parser)."""
        problems = [f"model path {m!r} does not exist" for m in (self.model, self.draft_model)
                    if m is not None and missing_path(m)]
        names = primitive_names([*space.domains, *space.pins])
        problems += [f"--server-arg {c}" for c in SGLangWorkload(self).conflicts(names)]
        if self.preflight and not problems:
            python = self.preflight_python or sglang_parser.python_for(self.server_cmd)
            try:
                levers.check_space(space, python=python, experiment=experiment)
            except UnknownName as err:
                problems.append(str(err))
        if self.preflight and not problems:
            problems += self._baseline_rejected(space, experiment)
        return problems

    def _baseline_rejected(self, space: SearchSpace, experiment: str) -> list[str]:
        """The command with no overrides through SGLang's own checks (its ServerArgs): if
        SGLang asserts on it (the user's server args, the pins), no trial could start."""
        workload = SGLangWorkload(self)
        ctx = TrialContext(experiment, "baseline", Path("baseline"), port=self.port or 30000)
        flags = list(workload.plan(space.baseline(), ctx).argv[len(self.server_cmd):])
        python = self.preflight_python or sglang_parser.python_for(self.server_cmd)
        verdict = sglang_parser.check_argv(flags, python=python, experiment=experiment)
        if verdict.ok is False:
            return [f"SGLang's parser rejects the command with no overrides: {verdict.error}"]
        resolution = sglang_parser.resolve(flags, python, None, experiment)
        if resolution.ok is False:
            version = f"SGLang {resolution.sglang_version}" if resolution.sglang_version \
                else "SGLang"
            return [f"{version}'s own checks reject the command with no overrides (the server "
                    f"args and pins): {resolution.error}"]
        return []

    def gpu_shortfall(self, node_gpus: int | None) -> str | None:
        if self.tp is not None and node_gpus is not None and self.tp > node_gpus:
            return f"--tp {self.tp} is larger than the {node_gpus} GPUs a node has"
        return None

    def speculative_label(self) -> str | None:
        return self.speculative_algorithm if SGLangWorkload(self).speculative else None

    def shape_source(self) -> str | None:
        config = Path(self.model).expanduser() / "config.json"
        return str(config) if config.is_file() else None

    def tp_ranks(self) -> int | None:
        return self.tp

    def levels(self) -> list[int]:
        return sorted({*self.concurrency, self.decide_level()})

    def decide_level(self) -> int:
        return self.objective_concurrency or self.concurrency[0]
    def server_flags(self) -> frozenset[str]:
        return frozenset(n for w in self.server_args if (n := flag_name(w)) is not None)

    def with_measured(self, metrics: list[str]) -> SGLangArgs:
        return self.model_copy(update={"measured": list(metrics)})

    def without_speculative(self) -> SGLangArgs | None:
        """These args with speculative decoding off (no draft model, no ``--speculative-*``
        server args), or None when they do not turn it on: the reference run that tells
        whether speculative decoding pays off at all on a machine."""
        if not SGLangWorkload(self).speculative:
            return None
        kept: list[str] = []
        words = iter(self.server_args)
        for word in words:
            name = flag_name(word)
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

class SGLangWorkload(Workload):
    """An SGLang server with the trial's NCCL env and flags, benchmarked over HTTP."""

    kind: ClassVar[str] = "sglang"
    default_metric: ClassVar[str] = "output_throughput"
    step_spans: ClassVar[tuple[StepSpans, ...]] = (STEP_SPANS,)
    default_mode: ClassVar[str] = "max"
    launch_spread: ClassVar[float] = 0.10  # the H200's launches: ~20% apart (real-sglang.md)
    measurement_env: ClassVar[tuple[str, ...]] = (
        *Workload.measurement_env,
        "SGLANG_ENABLE_METRICS_DEVICE_TIMER", "SGLANG_RECORD_STEP_TIME", "SGLANG_LOG_MS")

    speculative_metrics: ClassVar[tuple[str, ...]] = weights.SPECULATIVE_ONLY

    def __init__(self, args: SGLangArgs) -> None:
        self.args = args

    def weight_free(self, metric: str) -> bool | None:
        return weights.weight_free(metric, self.speculative)

    # ------------------------------------------------------------ rendering (pure)
    @property
    def speculative(self) -> bool:
        a = self.args
        return bool(a.speculative_algorithm or a.draft_model or any(
            flag_name(w) == "--speculative-algorithm" for w in a.server_args))

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
        tp = a.tp or (len(ctx.gpu_ids) or 1) * ctx.nodes
        argv = [*a.server_cmd, "--model-path", a.model]
        if a.draft_model:
            argv += ["--speculative-draft-model-path", a.draft_model]
        if a.speculative_algorithm:
            argv += ["--speculative-algorithm", a.speculative_algorithm]
        argv += ["--tp-size", str(tp), "--host", a.host or LOCALHOST, "--port", str(port)]
        if a.metrics:
            argv.append("--enable-metrics")
        argv += [*served.overridden(a.server_args, config), *knob_argv(config)]
        sizes = self.capture_sizes(config)
        if sizes:
            argv += ["--cuda-graph-bs-decode", *map(str, sizes)]
        skipped = sglang_startup.fast_start_flags(a.fast_start, a.measured, a.server_args, config)
        argv += skipped

        env, unset = knob_env(config)
        env["SGLANG_LOG_MS"] = "1"  # log times to the millisecond: the startup split
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
        if sizes:
            notes.append("decode CUDA graphs captured for batch sizes "
                         f"{' '.join(map(str, sizes))} only (from the concurrency levels measured)")
        if skipped:
            notes.append(f"measuring only: {' '.join(skipped)} (the measurement does not use "
                         "them; best/launch.sh keeps SGLang's defaults)")
        plan = LaunchPlan(workload=self.kind, argv=tuple(argv), env=env, unset_env=unset,
                          port=port, host=a.host or LOCALHOST, notes=tuple(notes))
        return multinode.spread(plan, ctx, tp) if ctx.nodes > 1 else plan

    @property
    def levels(self) -> list[int]:
        """The concurrency levels a round measures, the objective's included, sorted."""
        a = self.args
        return sorted({*a.concurrency, a.objective_concurrency or a.concurrency[0]})

    def capture_sizes(self, config: Mapping[str, Value]) -> list[int] | None:
        """Decode batch sizes to capture: the benchmark's concurrency levels, or None to leave
        SGLang's own list (off, capture sizes set by server_args or the config, or decode
        graphs disabled).

        SGLang 0.5.23 takes the largest captured batch from the list when one is given,
        ignoring ``--cuda-graph-max-bs-decode`` (srt/arg_groups/memory_hook.py: ``max_bs =
        max(bs)``). So a largest batch M set by the config or server_args stays in force
        through the list: the levels up to M, and M itself."""
        a = self.args
        if not a.capture_concurrency:
            return None
        given = {flag_name(w) for w in a.server_args}
        if given & {"--cuda-graph-bs-decode", "--cuda-graph-config", "--disable-cuda-graph",
                    "--disable-decode-cuda-graph"}:
            return None
        if any(config.get(name) not in (None, False) for name in
               ("--cuda-graph-bs-decode", "--disable-cuda-graph", "--disable-decode-cuda-graph")):
            return None
        backend = config.get("--cuda-graph-backend-decode") or server_arg(
            a.server_args, "--cuda-graph-backend-decode")
        if backend == "disabled":
            return None
        largest = config.get("--cuda-graph-max-bs-decode")
        if largest is None:
            text = server_arg(a.server_args, "--cuda-graph-max-bs-decode")
            largest = int(text) if text is not None and text.isdigit() else None
        if not isinstance(largest, int) or isinstance(largest, bool):
            return self.levels
        return sorted({c for c in self.levels if c <= largest} | {largest})

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
        result, resolution, _ = asked = self._answers(plan, ctx)
        if resolution is not None:
            resolved.record(ctx.trial_dir, resolution, plan.env)
        reason = answers.rejection(*asked)  # (it names a missing resolution too)
        if reason is not None or resolution is None:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, str(reason)))
        notes = [f"SGLang: {w}" for w in result.warnings]
        if resolution.skipped:
            notes.append("SGLang's checks that need what this machine lacks did not run: "
                         + "; ".join(resolution.skipped))
        return notes

    def _answers(self, plan: LaunchPlan, ctx: TrialContext) -> answers.Answers:
        """SGLang's answers on a plan (answers.ask), in the interpreter that runs SGLang."""
        a = self.args
        return answers.ask(plan, ctx, len(a.server_cmd),
                           a.preflight_python or sglang_parser.python_for(a.server_cmd))

    def identity(self, config: Mapping[str, Value], ctx: TrialContext) -> str | None:
        """SGLang's own resolution of the command as a key (what resolves alike is one point),
        its answers left in the experiment's cache: a trial's preflight then starts no reader."""
        if not self.args.preflight:
            return None
        _, resolution, _ = self._answers(self.plan(config, ctx), ctx)
        return resolved.key(resolution, knob_env(config)[0]) if resolution else None

    def refusal(self, config: Mapping[str, Value], ctx: TrialContext) -> str | None:
        """What the trial's preflight would reject (the answers stay in the cache)."""
        if not self.args.preflight:
            return None
        return answers.rejection(*self._answers(self.plan(config, ctx), ctx))

    def resolved_knobs(self, config: Mapping[str, Value], ctx: TrialContext
                       ) -> dict[str, Value] | None:
        """SGLang's resolution of the command as knob values (resolved.knob_values), cached."""
        if not self.args.preflight:
            return None
        return resolved.knob_values(self._answers(self.plan(config, ctx), ctx)[1])

    def dataset(self, seed: int = 0) -> datasets.Dataset:
        """The prompts this workload sends. Raises datasets.DatasetError."""
        a = self.args
        return datasets.load(a.dataset, a.input_len, a.output_len, seed)

    def dataset_info(self, seed: int = 0) -> dict[str, Any]:
        """The dataset as recorded with an experiment: name, path, sha256, prompts, lengths.
        Raises datasets.DatasetError (call it at the CLI: a bad file fails before any trial)."""
        return self.dataset(seed).describe()

    def inputs(self, seed: int) -> dict[str, Any] | None:
        return {"dataset": self.dataset_info(seed)}

    def start(self, plan: LaunchPlan, ctx: TrialContext) -> SGLangRunning:
        try:
            dataset = self.dataset(ctx.seed)
        except datasets.DatasetError as err:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, f"dataset: {err}")) from err
        env = plan.full_env()
        launched = time.time()
        process = ServerProcess.spawn(plan.argv, env, ctx.trial_dir / "server.log", ctx.marker,
                                      port=plan.port, host=plan.host, cwd=self.args.workdir)
        return SGLangRunning(process, plan, ctx, self.args, env, dataset, launched)

    def production_plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        """As the user serves it: nothing that only measuring needs (served.py)."""
        serving = SGLangWorkload(self.args.model_copy(update=served.MEASURING_ONLY))
        return served.production_plan(serving, config, ctx, self.args.host is not None)

    def ran(self, config: Mapping[str, Value], trial_dir: Path) -> dict[str, Value]:
        return ran_values(config, trial_dir)

    def describe(self) -> dict[str, Any]:
        return self.args.model_dump(mode="json")

    def metric_names(self) -> frozenset[str]:
        """What a round reports: METRIC_KEYS (per level too, with several), the startup
        split and the time to ready."""
        levels = self.args.levels()
        per_level = [f"{k}_c{c}" for k in METRIC_KEYS for c in levels] if len(levels) > 1 else []
        return frozenset([*METRIC_KEYS, *per_level, *STARTUP_KEYS, "ready_s"])
