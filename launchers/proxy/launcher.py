"""Proxy launcher: args, one process tree of one rank per GPU (or 2 gloo ranks on CPU)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from launchers.base import LaunchPlan, TrialContext, Workload, WorkloadArgs, knob_env
from launchers.failures import Failure, FailureKind, TrialFailed
from launchers.options import CliOption
from launchers.process import ServerProcess, port_is_free
from launchers.proxy import acceptance, fitting, multinode, options, topology
from launchers.proxy import paths as proxy_paths
from launchers.proxy.comm import native, settings
from launchers.proxy.protocol import CONTROL_FILE, ROUNDS_FILE, STEP_SPANS
from launchers.proxy.running import ProxyRunning, nccl_log
from launchers.proxy.shapes import (
    Shape,
    architecture,
    load_shape,
    preset_names,
    reference_key,
    shape_name,
)
from launchers.proxy.timing import ROUND_METRICS
from launchers.trace.events import StepSpans
from search_spaces.knobs import SPECULATIVE_KNOBS, Knob, KnobKind, Value
from search_spaces.space import SearchSpace


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
    accept_length: float = Field(3.0, gt=0, description="assumed, for est_tok_s of a shape "
                                 "with no measured accept length")
    accept_lengths: list[acceptance.MeasuredAccept] = Field([], description=(
        "measured accept length per speculative shape (--accept-length-from): the shapes "
        "the proxy ranks"))
    draft_ms: float | None = Field(None, ge=0, description="assumed draft time per cycle")
    port: int = Field(0, ge=0, le=65535, description="rendezvous port; 0: a free one per trial")
    ready_timeout: float = Field(600.0, gt=0)
    round_timeout: float = Field(300.0, gt=0, description="seconds one round may take")
    hbm_bandwidth: float | None = Field(None, gt=0, description="B/s per GPU for hbm_floor_ms; "
                                        "default: 4.3e12 on H200, else measured")
    interconnect: Literal["auto", "nvlink", "pcie"] = Field(
        "auto", description="pcie: what a PCIe box has, on any GPUs (NCCL_P2P_DISABLE=1, "
        "SGLang's rules without NVLink); auto: as NVML reports the GPUs")
    proxy_comm: Literal["auto", "native", "emulated"] = Field("auto", description=(
        "native: the collectives through the installed SGLang's distributed layer; emulated: "
        "the proxy's own paths; auto: native where SGLang and its kernels import"))

    cli_options: ClassVar[tuple[CliOption, ...]] = options.CLI_OPTIONS

    def build(self) -> ProxyWorkload:
        return ProxyWorkload(self)

    def shape_source(self) -> str | None:
        return self.model

    def tp_ranks(self) -> int | None:
        return self.ranks

    multi_node: ClassVar[bool] = True  # ranks spread over the nodes (multinode.py)

    def checks(self, space: SearchSpace, experiment: str) -> list[str]:
        """--proxy-comm native where SGLang's distributed layer cannot run: bad input."""
        why = native.refusal(self.build().mode(None)) if self.proxy_comm == "native" else None
        return [why] if why else []


# ---------------------------------------------------------------- the workload

PROXY_LOG = "proxy.log"
# A baseline may carry these and still write the correctness reference: they turn a feature
# off (the multicast safety pin every shipped preset has) and choose no algorithm or protocol.
REFERENCE_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0"}


# Knobs the proxy models besides NCCL's and the speculative shape: SGLang's allreduce and
# fusion flags and variables (comm.settings), and the composite that expands into them.
MODELLED_FLAGS = frozenset(settings.FLAGS)
MODELLED_SGLANG_ENV = frozenset(settings.MODELLED_ENV)
COMPOSITE_KNOBS = frozenset({"allreduce-backend"})
WEIGHTS_LAYOUT = "arena-1"  # how weights are drawn: part of the reference key


def writes_reference(env: Mapping[str, str]) -> bool:
    """A configuration with no NCCL overrides: the one whose logits become the reference."""
    return all(REFERENCE_SAFE_ENV.get(k) == v for k, v in env.items() if k.startswith("NCCL_"))


def _cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


class ProxyWorkload(Workload):
    """The verify-pass proxy: one process tree of one rank per GPU (2 gloo ranks on CPU).

    Collectives: ``--proxy-comm`` (``comm.native``) runs them through the installed SGLang's
    distributed layer (native) or the proxy's own paths (emulated), for which the plan asks
    SGLang's rules (``comm.dispatch``) the path of the all-reduces and the logits all-gather,
    passes it to the ranks and says it in the notes; a path the mode cannot run fails in
    preflight as ``not_modelled`` (``unmodelled`` names those values for the engine).

    Correctness gate: the output compared is the verify pass's logits ([tokens x vocab],
    float32) after the graph replay. The first trial of an experiment that sets no NCCL
    variable (``writes_reference``) writes them to ``<experiment>/proxy_reference.<key>.pt``,
    keyed by everything that changes them (shape, layers, batch, draft tokens, KV length,
    ranks, device, dtype, seed, interconnect regime, weight layout); the variables an
    interconnect regime sets itself (NCCL_P2P_DISABLE under pcie) do not count as overrides.
    Every later trial with the same key compares at ready and after each round (relative L2
    error <= 2e-2 in bf16, 1e-4 in float32: reduction order may differ between NCCL
    algorithms and all-reduce paths, corruption does not stay that small) and fails as
    wrong_result. A trial whose key has no reference yet reports ``correctness:
    no_reference``."""

    kind: ClassVar[str] = "proxy"
    default_metric: ClassVar[str] = "est_tok_s"
    step_spans: ClassVar[tuple[StepSpans, ...]] = (STEP_SPANS,)
    default_mode: ClassVar[str] = "max"

    def __init__(self, args: ProxyArgs | None = None) -> None:
        self.args = args or ProxyArgs()

    def supports(self, knob: Knob) -> bool:
        """NCCL and other non-SGLang env knobs, the SGLANG_* variables and flags of the
        allreduce dispatch, the composite allreduce-backend, and the speculative shape."""
        name = knob.name
        if name in COMPOSITE_KNOBS or name in SPECULATIVE_KNOBS or name in MODELLED_FLAGS:
            return True
        if knob.kind is KnobKind.ENV:
            return not name.startswith("SGLANG_") or name in MODELLED_SGLANG_ENV
        return False

    def unmodelled(self, knob: Knob) -> dict[Value, str]:
        """Values of ``knob`` (its default choices, each alone) whose collectives the proxy
        cannot run on this machine, or that SGLang would refuse here, with the reason."""
        if not self.supports(knob) or knob.name in SPECULATIVE_KNOBS:
            return {}
        cuda = self._cuda(None)
        from launchers import gpu

        ranks = self.args.ranks or ((gpu.device_count() or 1) if cuda else 2)
        gpu_ids = tuple(str(i) for i in range(ranks)) if cuda else ()
        mode, out = self.mode(None), dict[Value, str]()
        for value in knob.choices:
            if value is None:
                continue
            found = self._paths({knob.name: value}, cuda, ranks, gpu_ids,
                                self.args.draft_tokens, self._model(cuda), mode)
            if found.error is not None:
                continue  # a value SGLang cannot parse: validation's business
            reasons = [r.describe() for r in (found.allreduce,) if r.error] + found.not_modelled
            if reasons:
                out[value] = "; ".join(reasons)
        return out

    # ------------------------------------------------------------ rendering (pure)
    def _cuda(self, gpu_ids: tuple[str, ...] | None) -> bool:
        """GPUs for a trial with ``gpu_ids`` (None: as the machine has them)."""
        a = self.args
        if a.device != "auto":
            return a.device == "cuda"
        if gpu_ids is None:
            from launchers import gpu

            return gpu.device_count() > 0 and _cuda_available()
        return bool(gpu_ids) and _cuda_available()

    def mode(self, folder: Path | None, cuda: bool | None = None) -> native.Mode:
        """Native or emulated collectives (``comm.native``), the probe kept in ``folder``."""
        return native.resolve(self.args.proxy_comm, self._cuda(None) if cuda is None else cuda,
                              folder / native.CACHE_FILE if folder is not None else None)

    def _model(self, cuda: bool) -> str:
        model = self.args.model or ("llama-3.1-70b" if cuda else "tiny")
        return model if model in preset_names() else str(Path(model).absolute())

    def _paths(self, config: Mapping[str, Value], cuda: bool, ranks: int,
               gpu_ids: tuple[str, ...], draft_tokens: int, model: str, mode: native.Mode
               ) -> proxy_paths.Paths:
        try:
            shape_config: dict[str, Any] = load_shape(model)
        except ValueError:
            shape_config = {}
        hidden = shape_config.get("hidden_size")
        return proxy_paths.resolve(
            config, ranks=ranks, cuda=cuda, interconnect=self.args.interconnect,
            topology=topology.probe(gpu_ids) if cuda else topology.Topology(None, None),
            graph=self.args.graph, architecture=architecture(model),
            tokens=self.args.batch * draft_tokens,
            hidden=hidden if isinstance(hidden, int) else 0, mode=mode.name,
            inherited=native.inherited_env(mode, os.environ, cuda))

    def plan(self, config: Mapping[str, Value], ctx: TrialContext) -> LaunchPlan:
        a = self.args
        cuda = self._cuda(ctx.gpu_ids)
        ranks = a.ranks or ((len(ctx.gpu_ids) or 1) if cuda else 2)  # on each node
        world = ranks * ctx.nodes
        model = self._model(cuda)
        drafts = config.get("--speculative-num-draft-tokens")
        draft_tokens = drafts if isinstance(drafts, int) else a.draft_tokens
        steps = config.get("--speculative-num-steps")
        port = ctx.port if ctx.port is not None else (a.port or None)
        folder = ctx.trial_dir.absolute()
        measured = acceptance.lookup(a.accept_lengths, config)
        accept = measured.accept_length if measured else a.accept_length

        env, unset = knob_env(config)
        reference = writes_reference(env)  # before the regime's own variables
        mode = self.mode(folder.parent, cuda)
        found = self._paths(config, cuda, ranks, ctx.gpu_ids, draft_tokens, model, mode)
        comm = native.plan_part(mode, config, cuda=cuda, route=found.allreduce.path, env=env,
                                unset=unset, interconnect=found.interconnect)
        env.update(found.env)
        env.update(comm.env)
        log = nccl_log() if cuda else None
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
            layers, fitted = fitting.fit_layers_for(shape_config, model, ctx.gpu_ids,
                                                    ranks=world, batch=a.batch,
                                                    draft_tokens=draft_tokens, kv_len=a.kv_len)
        key = reference_key(shape_name(model), shape_config, layers=layers, batch=a.batch,
                            draft_tokens=draft_tokens, kv_len=a.kv_len, ranks=world,
                            device="cuda" if cuda else "cpu", dtype=dtype, seed=ctx.seed,
                            interconnect=found.interconnect, weights=WEIGHTS_LAYOUT)
        argv = [sys.executable, "-m", "launchers.proxy.worker", "--spawn", str(ranks),
                "--device", "cuda" if cuda else "cpu", "--model", model,
                "--batch", str(a.batch), "--draft-tokens", str(draft_tokens),
                "--kv-len", str(a.kv_len),
                "--allreduce-path", found.allreduce_arg, "--allgather-path", found.allgather.path,
                "--interconnect", found.interconnect, *comm.argv,
                "--iters", str(a.iters_per_round or (50 if cuda else 10)),
                "--graph" if a.graph else "--no-graph", "--accept-length", str(accept),
                "--accept-length-source",
                acceptance.MEASURED if measured else acceptance.ASSUMED,
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
        notes.append(f"accept length {accept:g}, measured in {measured.source or 'a server run'}"
                     if measured else f"accept length {accept:g}, assumed (no measurement for "
                     "this speculative shape)")
        notes += [*found.notes, *comm.notes]
        if a.check_correctness and reference:
            notes.append("no NCCL overrides: writes the correctness reference if none exists")
        plan = LaunchPlan(workload=self.kind, argv=tuple(argv), env=env, unset_env=unset,
                          port=port, notes=tuple(notes))
        return multinode.spread(plan, ctx, ranks, cuda) if ctx.nodes > 1 else plan

    # ------------------------------------------------------------ checks and start
    def preflight(self, plan: LaunchPlan, ctx: TrialContext) -> list[str]:
        """The collectives are ones the proxy runs (else not_modelled), SGLang would accept
        the settings, the shape loads and splits over the ranks, the GPUs exist, the port is
        free."""
        from launchers.proxy.cli import parse_args
        from launchers.proxy.geometry import Geometry

        args = parse_args(plan.argv[3:])
        why = native.refusal(self.mode(ctx.trial_dir.parent, args.device == "cuda")) \
            if args.proxy_comm == native.NATIVE else None
        if why:
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, why))
        if args.allreduce_path == proxy_paths.INVALID:
            why = next((n.removeprefix(proxy_paths.INVALID_NOTE) for n in plan.notes
                        if n.startswith(proxy_paths.INVALID_NOTE)), "invalid settings")
            raise TrialFailed(Failure(FailureKind.INVALID_CONFIG, why))
        for what, path in (("all-reduce", args.allreduce_path),
                           ("all-gather", args.allgather_path)):
            unmodelled = native.not_modelled(args.proxy_comm)
            if path in unmodelled:
                raise TrialFailed(Failure(
                    FailureKind.NOT_MODELLED, f"SGLang would run the {what} as {path}, which "
                    f"the proxy does not model: {unmodelled[path]}"))
        try:
            shape = Shape.from_config(load_shape(args.model), shape_name(args.model))
            Geometry(shape, ranks=args.spawn * args.nnodes, batch=args.batch,
                     draft_tokens=args.draft_tokens,
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

    def metric_names(self) -> frozenset[str]:
        return frozenset([*ROUND_METRICS, "ready_s"])

    def rankable(self, space: SearchSpace) -> tuple[SearchSpace, list[str]]:
        """Speculative shapes only with a measured accept length (``acceptance``)."""
        return acceptance.rankable(space, self.args.accept_lengths)
