"""One rank of the proxy: join the group, build the model and its collectives, warm up and
capture six CUDA graphs (``timing.GRAPHS``), check the logits against the reference, report
ready, then time rounds and profiles as the launcher asks (``protocol``), or ``--rounds``.

The group is NCCL on GPUs, created eagerly through ``device_id`` so that no communicator is
first made inside graph capture, with a gloo group beside it for host-side barriers; gloo on
CPU. A rank that fails exits at once without tearing NCCL down (a broken communicator or a
peer gone can hang at exit); the root (``spawner``) then stops the others.

A profile (``Rank.profile``) runs torch.profiler (CPU, and CUDA on GPUs) over ``steps``
replays per span: the verify pass (``servetune.verify``), the compute-only pass
(``servetune.compute_only``, to set beside exposed_comm_ms) and the collectives alone
(``servetune.comm_alone``); one Chrome trace per rank for ``launchers.trace``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchers.process import LOCALHOST
from launchers.proxy import nodes, protocol
from launchers.proxy.gate import TOLERANCE, Gate, WrongResult
from launchers.proxy.geometry import Geometry
from launchers.proxy.timing import Timed, bandwidth, summarize

if TYPE_CHECKING:
    import torch

EXIT_WRONG_RESULT = 3


class _Done(Exception):
    """The --rounds run finished on every rank."""


def _maybe_fail(args: argparse.Namespace, stage: str, rank: int, world: int) -> None:
    target = world - 1 if args.fail_rank is None else args.fail_rank
    if args.fail_at == stage and rank == target:
        raise RuntimeError(args.fail_message or f"injected failure at {stage} (--fail-at)")


def _started_at() -> float:
    """When this rank was started: by the root (--spawn), else this process's start."""
    from launchers.proxy.spawner import SPAWNED_ENV

    given = os.environ.get(SPAWNED_ENV)
    if given:
        return float(given)
    import psutil

    return float(psutil.Process().create_time())


def init_group(rank: int, world: int, device: torch.device, port: int) -> Any:
    """The default group over a TCP store that listens on 127.0.0.1 only; returns a gloo
    group for host-side barriers (no NCCL call outside the graphs but the warm-up)."""
    import torch.distributed as dist

    if world > 1 and not port:
        raise ValueError("MASTER_PORT is needed with more than one rank (use --spawn)")
    host = os.environ.get("MASTER_ADDR") or LOCALHOST  # node 0's address across nodes
    if host == LOCALHOST and "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets on loopback
    elif host != LOCALHOST and (interface := nodes.gloo_interface(host)) is not None:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)  # node 0's network here
    timeout = datetime.timedelta(seconds=600)
    if rank == 0:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound, fd = sock.getsockname()[1], sock.detach()
        try:
            store = dist.TCPStore(host, bound, world, True, timeout=timeout,
                                  master_listen_fd=fd)
        except TypeError:  # a torch without master_listen_fd: its store binds every address
            os.close(fd)
            store = dist.TCPStore(host, bound, world, True, timeout=timeout)
    else:
        store = dist.TCPStore(host, port, world, False, timeout=timeout)
    if device.type == "cuda":
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world,
                                timeout=timeout, device_id=device)
        return dist.new_group(backend="gloo")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    return None


def check_fits(geo: Geometry, free: int, total: int) -> None:
    """Refuse a model that does not fit, naming the --layers that would (CUDA OOM kind)."""
    import torch

    from launchers.proxy.geometry import fit_layers

    need = geo.bytes_per_pass(full=False)["total"]
    if need <= 0.9 * free:
        return
    fit = fit_layers(replace(geo, layers=None), min(total, int(free / 0.9)))
    raise torch.OutOfMemoryError(
        f"the proxy needs {need / 2**30:.1f} GiB per GPU, {free / 2**30:.1f} GiB free: run "
        f"fewer layers (--layers {fit or 1}), or leave --layers out to fit them")


def _nccl_version() -> str:
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


class Rank:
    """One rank: set up (group, model, graphs, gate, ready line), then time rounds."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, local: int,
                 events: protocol.Events) -> None:
        self.args, self.rank, self.world, self.local, self.events = (
            args, rank, world, local, events)
        self.timed: dict[str, Timed] = {}
        self.fixed: dict[str, Any] = {}

    def setup(self) -> None:
        """Set up, timing each part from the rank's start (``setup_s`` in the ready line):
        python = interpreter and the proxy's modules, imports = torch and the model, group =
        the process group, collectives = the path's buffers (symmetric memory), build = the
        weights, capture = warm-up and the six graphs, gate = the first check, total = from
        the rank's start to ready."""
        started = _started_at()
        marks = {"python": time.time() - started}
        step = time.monotonic()
        import torch

        from launchers.proxy.comm import collectives, dispatch
        from launchers.proxy.model import ProxyModel, approximation
        from launchers.proxy.shapes import Shape, load_shape, shape_name

        marks["imports"] = time.monotonic() - step
        step = time.monotonic()
        args, rank, world = self.args, self.rank, self.world
        self.cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
        if self.cuda:
            self.device = torch.device("cuda", self.local)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        dtype = torch.bfloat16 if self.cuda else torch.float32
        name = shape_name(args.model)
        shape = Shape.from_config(load_shape(args.model), name)
        geo = self.geo = Geometry(shape, ranks=world, batch=args.batch,
                                  draft_tokens=args.draft_tokens, kv_len=args.kv_len,
                                  layers=args.layers, elem_bytes=dtype.itemsize)
        port = int(os.environ.get("MASTER_PORT") or args.port or 0)
        self.ctrl = init_group(rank, world, self.device, port)
        _maybe_fail(args, "init", rank, world)
        marks["group"] = time.monotonic() - step
        step = time.monotonic()
        native = args.proxy_comm == "native"  # SGLang's own group (comm.native_group)
        if native:
            from launchers.proxy.comm import native_group

            comm: collectives.Collectives = native_group.build(
                args.allreduce_path, world=world, rank=rank, local_rank=self.local,
                cuda=self.cuda, graph=args.graph, flags=[f for f in args.native_flags.split(",")
                                                         if f])
            comm.prepare(hidden=shape.hidden_size, rows=geo.tokens)
        else:
            comm = collectives.build(args.allreduce_path, world=world, cuda=self.cuda,
                                     max_numel=geo.tokens * shape.hidden_size, dtype=dtype,
                                     device=self.device)
        marks["collectives"] = time.monotonic() - step
        layers_source = "given" if args.layers else "all"
        if self.cuda and args.fit_layers:
            geo, layers_source = self._fit(geo)
            self.geo = geo
        self.bandwidth, bandwidth_source = bandwidth(args.hbm_bandwidth, self.device)
        run_bytes = geo.bytes_per_pass(full=False)
        if self.cuda:
            free, total = torch.cuda.mem_get_info(self.device)
            check_fits(geo, free, total)
        step = time.monotonic()
        model = ProxyModel(geo, rank=rank, device=self.device, dtype=dtype, seed=args.seed,
                           comm=comm)
        if self.cuda:
            torch.cuda.synchronize(self.device)  # to time the build; the capture syncs anyway
        marks["build"] = time.monotonic() - step
        step = time.monotonic()
        none = collectives.NoCollectives()
        n_allreduce = 2 * shape.num_hidden_layers
        work = {"pass": model.forward, "compute": lambda: model.forward(none),
                "head": model.head_pass, "compute_head": lambda: model.head_pass(none),
                "allreduce": lambda: model.collectives(n_allreduce),
                "allgather": model.gather_only}
        self.timed = {k: Timed(k, fn, self.device, args.graph) for k, fn in work.items()}
        with comm.capture():  # native: SGLang's; graphs replay after it (buffers registered)
            comm.observe(model.comm_buf, model.gather_buf, model.gather_src)
            for index, item in enumerate(self.timed.values()):
                # one eager pass warms every kernel and collective up (cuBLAS, NCCL, symmetric
                # memory); the other graphs run a subset of it and are captured directly
                item.prepare(warmup=1 if index == 0 else 0, replay=not native)
        for item in self.timed.values() if native else ():
            item.fill()
        marks["capture"] = time.monotonic() - step
        step = time.monotonic()
        dtype_name = str(dtype).removeprefix("torch.")
        self.gate = Gate(args.reference if args.check else None, bool(args.write_reference),
                         args.tolerance or TOLERANCE[dtype_name])
        status = self.gate.check(self.timed["pass"].out) if rank == 0 else {}
        self.barrier()
        marks["gate"] = time.monotonic() - step
        marks["total"] = time.time() - started
        _maybe_fail(args, "ready", rank, world)
        device_name = (torch.cuda.get_device_name(self.device) if self.cuda
                       else platform.processor() or platform.machine() or None)
        gather_path = getattr(comm, "gather_path", None) or (
            comm.path if comm.path in ("gloo", "local") else args.allgather_path)
        self.fixed = {
            "graph": bool(args.graph and self.cuda), "ranks": world,
            "device": f"cuda:{device_name}" if self.cuda else "cpu", "iters": args.iters,
            "interconnect": args.interconnect, "allreduce_path": comm.path,
            "allgather_path": gather_path, "sglang_allreduce_path": args.allreduce_path,
            "sglang_allgather_path": args.allgather_path, "allreduce_count": n_allreduce,
            "allgather_count": 1, "proxy_comm": args.proxy_comm,
            "proxy_comm_reason": args.proxy_comm_reason, **comm.record()}
        unquantized = replace(geo, quantize=False).bytes_per_pass()["total"]
        self.events.emit(
            "ready", shape=name, **self.fixed, device_name=device_name, dtype=dtype_name,
            allreduce_impl=dispatch.RUNS.get(comm.path, comm.path),
            symm_mem_multicast=getattr(comm, "multicast", None),
            symm_mem_backend=getattr(comm, "backend", None),
            batch=args.batch, draft_tokens=args.draft_tokens, kv_len=args.kv_len,
            **geo.describe(), layers_source=layers_source,
            bytes_per_pass=geo.bytes_per_pass()["total"], bytes_per_pass_run=run_bytes["total"],
            bytes_breakdown=geo.bytes_per_pass(), hbm_bandwidth=self.bandwidth,
            hbm_bandwidth_source=bandwidth_source, quantized_checkpoint=shape.quantized,
            bytes_per_pass_unquantized=unquantized, approximation=approximation(native),
            torch=torch.__version__, nccl=_nccl_version() if self.cuda else None,
            setup_s={k: round(v, 3) for k, v in marks.items()}, **status)

    def _fit(self, geo: Geometry) -> tuple[Geometry, str]:
        """--fit-layers: the layer count fitted to the smallest GPU's total memory (the same
        rule as the launcher's); the reference then names the layer count."""
        import torch

        from launchers.proxy.geometry import FIT_FRACTION, fit_layers

        total = self._min_over_ranks(int(torch.cuda.mem_get_info(self.device)[1]))
        n = geo.shape.num_hidden_layers
        if self.args.layers is None:
            fitted = fit_layers(geo, total)
            if fitted is None:
                return geo, "all"
            self.args.layers = fitted
            geo = replace(geo, layers=fitted)
            if self.args.reference is not None:  # another layer count, another reference
                ref = self.args.reference
                self.args.reference = ref.with_name(f"{ref.name.removesuffix('.pt')}-L{fitted}.pt")
        return geo, (f"fit: {geo.layers_run} of {n} layers fit in "
                     f"{FIT_FRACTION:.0%} of {total / 2**30:.1f} GiB per GPU")

    def _min_over_ranks(self, value: int) -> int:
        if self.world == 1:
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.ctrl)
        return int(t.item())

    def profile(self, steps: int, request: int | None = None) -> None:
        """Chrome traces of ``steps`` replays per span, one file per rank (rank 0 reports)."""
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        args = self.args
        folder = args.profile_dir or (args.out / protocol.PROFILE_DIR if args.out
                                      else Path(protocol.PROFILE_DIR))
        folder.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        spans = [(protocol.VERIFY_SPAN, ["pass"]), (protocol.COMPUTE_SPAN, ["compute"]),
                 (protocol.COMM_ALONE_SPAN, ["allreduce", "allgather"])]
        with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
            for name, items in spans:
                for item in items:  # unrecorded: the profiler's first-call costs stay out
                    self.timed[item].run()
                self.barrier()  # every rank's profiler runs; the ranks start the kind together
                for _ in range(steps):
                    with record_function(name):
                        for item in items:
                            self.timed[item].run()
            self.barrier()
        path = folder / protocol.trace_name(self.rank)
        prof.export_chrome_trace(str(path))
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.barrier()
        if self.rank == 0:
            self.events.emit("profile", request=request, steps=steps,
                             spans=[name for name, _ in spans], layers_run=self.geo.layers_run,
                             scaled=self.geo.scaled,
                             files=[str(folder / protocol.trace_name(r))
                                    for r in range(self.world)])

    def barrier(self) -> None:
        """All ranks here, the GPU idle (a gloo barrier: no NCCL call outside the graphs)."""
        import torch
        import torch.distributed as dist

        if self.cuda:
            torch.cuda.synchronize(self.device)
        if self.world > 1:
            dist.barrier(group=self.ctrl)

    def round(self, index: int) -> None:
        args = self.args
        _maybe_fail(args, "round", self.rank, self.world)
        self.barrier()
        for item in self.timed.values():
            item.run()
        samples = {name: item.times_ms(args.iters) for name, item in self.timed.items()}
        if self.rank == 0:
            metrics = summarize(samples, self.geo, accept_length=args.accept_length,
                                accept_source=args.accept_length_source,
                                draft_ms=args.draft_ms,
                                draft_steps=args.draft_steps or max(1, args.draft_tokens - 1),
                                bandwidth=self.bandwidth)
            check = self.gate.check(self.timed["pass"].out)
            self.events.emit("round", round=index, **metrics, **self.fixed, **check)


def _requests(control: Path, idle_timeout: float, parent: int) -> Iterator[protocol.Request]:
    """The launcher's requests from proxy_control, each once (every rank reads the file)."""
    last = -1
    while (request := protocol.next_request(control, last, idle_timeout, parent)) is not None:
        yield request
        last = request.seq


def run_rank(args: argparse.Namespace) -> int:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    parent = os.getppid()
    events = protocol.Events(args.out / protocol.ROUNDS_FILE if args.out else None,
                             active=rank == 0)
    try:
        worker = Rank(args, rank, world, local, events)
        worker.setup()
        if args.rounds is not None:
            for i in range(args.rounds):
                worker.round(i)
            if args.profile_dir is not None:
                worker.profile(args.profile_steps)
            # Every rank is done, then all exit below without tearing NCCL down:
            # destroy_process_group after graph capture hung 2 ranks on an H200 pair.
            worker.barrier()
            raise _Done
        assert args.out is not None  # rounds on request, until stopped (or idle, or orphaned)
        control = args.out / protocol.CONTROL_FILE
        requests = (nodes.shared_requests(rank, control, args.idle_timeout, parent, worker.ctrl)
                    if args.nnodes > 1 else _requests(control, args.idle_timeout, parent))
        for request in requests:
            if request.action == "profile":
                worker.profile(request.value, request.seq)
            else:
                worker.round(request.value)
        print(f"proxy: rank {rank}: no round asked for, or the launcher is gone", flush=True)
        code = 0
    except _Done:
        code = 0
    except WrongResult as err:
        events.emit("wrong_result", message=str(err))
        print(f"proxy: wrong result: {err}", flush=True)
        code = EXIT_WRONG_RESULT
    except BaseException as err:
        traceback.print_exc()
        print(f"proxy: rank {rank} failed: {type(err).__name__}: {err}", flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no teardown: a broken communicator (or a peer gone) can hang at exit
