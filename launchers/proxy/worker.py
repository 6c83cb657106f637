"""The proxy's processes: with ``--spawn N`` this is the root of one process tree that starts
N ranks and watches them; without it, it is one rank.

A rank joins the process group (NCCL on GPUs, created eagerly through ``device_id`` so that no
communicator is first made inside graph capture; gloo on CPU), builds the model, warms up
outside capture, captures four CUDA graphs (the verify pass; the LM head and its all-gather
alone; the full model's all-reduces alone; the all-gather alone), checks the logits against
the reference, reports ready, then times rounds. The root exits non-zero, after stopping the
other ranks, as soon as one rank fails.

Files in ``--out`` (the launcher's contract):
  proxy_rounds.jsonl  rank 0 appends one JSON line per event: ready, round, profile,
                      wrong_result
  proxy_control       the launcher's latest request, ``<seq> round <index>`` or
                      ``<seq> profile <steps>`` (a bare ``<index>``: that round); requests are
                      served in order of ``seq``
  traces/             ``rank<R>.trace.json.gz`` per rank after a profile request (or
                      ``--profile-dir``)

By hand: ``python -m launchers.proxy.worker --spawn 2 --device cpu --model tiny --rounds 3``;
add ``--profile-dir DIR`` to profile after the rounds.

A profile (``Rank.profile``) runs torch.profiler (CPU, and CUDA on GPUs) over ``steps``
replays of the verify pass, each inside a ``record_function`` span named ``servetune.verify``,
then ``steps`` replays of the all-reduce-only graph in ``servetune.allreduce_only`` spans, and
exports one Chrome trace per rank; ``launchers.trace`` reads them back.

What a round reports (``summarize``): ``verify_ms`` is the p50 of per-replay times of the
verify-pass graph (``iters`` replays, CUDA events; perf_counter on CPU); ``allreduce_ms`` is
measured separately, by graphs holding the same collectives and no compute (2 x
num_hidden_layers all-reduces + the logits all-gather); ``compute_ms = verify_ms -
allreduce_ms`` is derived. ``assumed_draft_ms``, unless given, is estimated as draft steps x
(one layer + the LM head), both from this measurement: an EAGLE-3 draft is one decoder layer
and an LM head run once per step.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launchers.process import LOCALHOST, free_port
from launchers.stats import percentile

if TYPE_CHECKING:  # ranks import torch where they need it: the root stays light
    import torch

    from launchers.proxy.model import Geometry

ROUNDS_FILE = "proxy_rounds.jsonl"
CONTROL_FILE = "proxy_control"
PROFILE_DIR = "traces"
PROFILE_SPANS = ("servetune.verify", "servetune.allreduce_only")
H200_BANDWIDTH = 4.3e12  # B/s per GPU, small-batch matmuls measured here (shared/reference/nccl.md)
TOLERANCE = {"bfloat16": 2e-2, "float32": 1e-4}  # relative L2 error of the logits
EXIT_WRONG_RESULT = 3


def trace_name(rank: int) -> str:
    return f"rank{rank}.trace.json.gz"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m launchers.proxy.worker",
        description="Verify-pass proxy: a tensor-parallel decoder stack with a real model's "
                    "shapes, timed under CUDA graphs. Prints one JSON line per round.")
    p.add_argument("--spawn", type=int, metavar="N", help="start N ranks (one per GPU)")
    p.add_argument("--model", default="tiny", help="shape preset or path to a config.json")
    p.add_argument("--layers", type=int, help="run N layers and scale (model does not fit)")
    p.add_argument("--fit-layers", action="store_true",
                   help="GPUs: without --layers, run the most layers that fit in 85%% of GPU "
                   "memory when the whole model does not (with --layers: the launcher fitted N)")
    p.add_argument("--batch", type=int, default=1, help="requests in the verify batch")
    p.add_argument("--draft-tokens", type=int, default=4, help="tokens verified per request")
    p.add_argument("--draft-steps", type=int, help="draft steps per cycle, for the draft "
                   "estimate (default: draft tokens - 1)")
    p.add_argument("--kv-len", type=int, default=4096, help="KV cache entries per request")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--iters", type=int, default=50, help="replays timed per round")
    p.add_argument("--graph", action=argparse.BooleanOptionalAction, default=True,
                   help="time CUDA graph replays (--no-graph: eager)")
    p.add_argument("--accept-length", type=float, default=3.0, help="assumed, for est_tok_s")
    p.add_argument("--draft-ms", type=float, help="assumed draft time per cycle")
    p.add_argument("--hbm-bandwidth", type=float, help="B/s per GPU for hbm_floor_ms")
    p.add_argument("--port", type=int, default=0, help="rendezvous port (0: a free one)")
    p.add_argument("--out", type=Path, help="folder for proxy_rounds.jsonl; rounds are then "
                   "run when the launcher asks for them (proxy_control)")
    p.add_argument("--rounds", type=int, help="run N rounds and exit (default without --out: 3)")
    p.add_argument("--reference", type=Path, help="reference logits to compare with")
    p.add_argument("--write-reference", action="store_true",
                   help="write --reference when it does not exist yet")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="compare the logits with --reference")
    p.add_argument("--tolerance", type=float, help="relative L2 error allowed (default by dtype)")
    p.add_argument("--profile-dir", type=Path, help="where profile requests write their "
                   "traces (default <out>/traces); with --rounds: profile after the rounds")
    p.add_argument("--profile-steps", type=int, default=10,
                   help="replays per span in a --rounds profile")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--idle-timeout", type=float, default=3600.0,
                   help="exit when no round is asked for this long")
    # test only: make one rank fail at a stage, with a given message
    p.add_argument("--fail-at", choices=["init", "ready", "round"], help=argparse.SUPPRESS)
    p.add_argument("--fail-rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--fail-message", help=argparse.SUPPRESS)
    args = p.parse_args(list(argv))
    if args.rounds is None and args.out is None:
        args.rounds = 3
    return args


# ---------------------------------------------------------------- the root


def _without_spawn(argv: Sequence[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--spawn":
            skip = True
        elif not word.startswith("--spawn="):
            out.append(word)
    return out


def _exit_like(code: int) -> int:
    """Exit as the rank did: re-raise a fatal signal so the exit code keeps it (-9 stays -9)."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def spawn(n: int, argv: Sequence[str], port: int) -> int:
    """Start ranks 0..n-1 with the torch.distributed env; stop them all when one fails."""
    port = port or free_port()
    rank_argv = [sys.executable, "-m", "launchers.proxy.worker", *_without_spawn(argv)]
    children: list[subprocess.Popen[bytes]] = []

    def stop_all() -> None:
        for child in children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 5
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def on_signal(signum: int, _frame: object) -> None:
        stop_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    parent = os.getppid()
    for rank in range(n):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(n), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(n), "MASTER_ADDR": LOCALHOST, "MASTER_PORT": str(port)}
        children.append(subprocess.Popen(rank_argv, env=env, stdin=subprocess.DEVNULL))
    while True:
        codes = [child.poll() for child in children]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:  # the first is not always the cause: its peers fail on the broken link
            how = ", ".join(f"rank {rank} exited with " +
                            (f"signal {-code}" if code < 0 else f"code {code}")
                            for rank, code in failed)
            print(f"proxy: {how}; stopping the other ranks", flush=True)
            stop_all()
            return _exit_like(failed[0][1])
        if all(code == 0 for code in codes):
            return 0
        if os.getppid() != parent:
            print("proxy: the launcher is gone; stopping the ranks", flush=True)
            stop_all()
            return 1
        time.sleep(0.05)


# ---------------------------------------------------------------- a rank


class WrongResult(Exception):
    """The logits differ from the reference beyond the tolerance."""


class Events:
    """Rank 0's JSON lines: echoed to stdout (the log) and appended to the rounds file."""

    def __init__(self, path: Path | None, active: bool) -> None:
        self.path, self.active = path, active

    def emit(self, event: str, **data: Any) -> None:
        if not self.active:
            return
        line = json.dumps({"event": event, **data}, default=str)
        print(line, flush=True)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


def _maybe_fail(args: argparse.Namespace, stage: str, rank: int, world: int) -> None:
    target = world - 1 if args.fail_rank is None else args.fail_rank
    if args.fail_at == stage and rank == target:
        raise RuntimeError(args.fail_message or f"injected failure at {stage} (--fail-at)")


def _percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) of a non-empty sample."""
    value = percentile(values, q)
    if value is None:
        raise ValueError("no samples to summarize")
    return value


def summarize(samples: Mapping[str, Sequence[float]], geo: Geometry, *, accept_length: float,
              draft_ms: float | None, draft_steps: int, bandwidth: float) -> dict[str, Any]:
    """One round's metrics from per-call times in ms: pass, head, allreduce, allgather."""
    layers = geo.shape.num_hidden_layers
    head = _percentile(samples["head"], 50)
    # scaled: the layers' share of each pass times num_hidden_layers/N, the head as measured
    verify = [head + (p - head) * geo.scale for p in samples["pass"]]
    verify_ms = _percentile(verify, 50)
    allreduces = _percentile(samples["allreduce"], 50)
    allreduce_ms = allreduces + _percentile(samples["allgather"], 50)
    layer_ms = max(verify_ms - head, 0.0) / layers
    if draft_ms is None:
        draft_ms = draft_steps * (layer_ms + head)
        source = (f"estimated: {draft_steps} steps x (one layer {layer_ms:.3f} ms + "
                  f"LM head {head:.3f} ms)")
    else:
        source = "given"
    accept = min(accept_length, float(geo.draft_tokens))
    bytes_full = geo.bytes_per_pass()["total"]
    return {
        "verify_ms": verify_ms,
        "verify_p10_ms": _percentile(verify, 10),
        "verify_p90_ms": _percentile(verify, 90),
        "allreduce_ms": allreduce_ms,
        "compute_ms": max(verify_ms - allreduce_ms, 0.0),
        "allreduce_share": allreduce_ms / verify_ms if verify_ms > 0 else None,
        "per_allreduce_us": allreduces / (2 * layers) * 1000,
        "head_ms": head,
        "est_tok_s": geo.batch * accept / ((verify_ms + draft_ms) / 1000),
        "assumed_accept_length": accept,
        "assumed_draft_ms": draft_ms,
        "draft_ms_source": source,
        "bytes_per_pass": bytes_full,
        "hbm_floor_ms": bytes_full / bandwidth * 1000,
        "scaled": geo.scaled,
    }


def compare(logits: torch.Tensor, reference: torch.Tensor, tolerance: float) -> dict[str, float]:
    """Relative L2 and max abs error; raises WrongResult beyond ``tolerance``."""
    import torch

    got = logits.detach().float().cpu()
    if not bool(torch.isfinite(got).all()):
        raise WrongResult("the logits hold NaN or inf")
    if got.shape != reference.shape:
        raise WrongResult(f"logits shape {tuple(got.shape)} != reference {tuple(reference.shape)}")
    rel = float((got - reference).norm() / reference.norm().clamp_min(1e-12))
    max_abs = float((got - reference).abs().max())
    if not rel <= tolerance:
        raise WrongResult(f"logits differ from the reference: relative L2 error {rel:.3g} > "
                          f"{tolerance:.3g} (max abs error {max_abs:.3g})")
    return {"rel_err": rel, "max_abs_err": max_abs}


class Gate:
    """The correctness gate (rank 0): the first check writes the reference when allowed and
    absent, or loads it; every check compares the logits with it."""

    def __init__(self, args: argparse.Namespace, tolerance: float) -> None:
        self.path: Path | None = args.reference if args.check else None
        self.write = bool(args.write_reference)
        self.tolerance = tolerance
        self.reference: torch.Tensor | None = None
        self.status = "off" if self.path is None else "no_reference"

    def check(self, logits: torch.Tensor) -> dict[str, Any]:
        import torch

        if self.path is None:
            return {"correctness": "off"}
        if self.reference is None and self.path.exists():
            self.reference = torch.load(self.path, weights_only=True)["logits"]
        if self.reference is None and self.write:
            if not bool(torch.isfinite(logits).all()):
                raise WrongResult("the logits hold NaN or inf (not written as the reference)")
            self.reference = self._write(logits.detach().float().cpu())
            return {"correctness": "reference_written", "reference": str(self.path)}
        if self.reference is None:
            return {"correctness": "no_reference"}
        return {"correctness": "pass", **compare(logits, self.reference, self.tolerance)}

    def _write(self, logits: torch.Tensor) -> torch.Tensor:
        import torch

        assert self.path is not None
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        torch.save({"logits": logits}, tmp)
        try:
            os.link(tmp, self.path)  # never replaces one another trial wrote meanwhile
        except FileExistsError:
            logits = torch.load(self.path, weights_only=True)["logits"]
        finally:
            tmp.unlink(missing_ok=True)
        return logits


class Timed:
    """One piece of work, run by replaying its CUDA graph (or eagerly) and timed per call."""

    def __init__(self, name: str, fn: Callable[[], Any], device: torch.device, graph: bool
                 ) -> None:
        self.name, self.fn, self.device = name, fn, device
        self.graph: Any = None
        self.use_graph = graph and device.type == "cuda"
        self.out: Any = None

    def prepare(self, warmup: int = 2) -> None:
        """Eager warm-up calls, then the capture (graph mode)."""
        import torch

        if not self.use_graph:
            for _ in range(warmup):
                self.out = self.fn()
            return
        # Warm-up and capture fail alike, as in SGLang's graph runner (its warm-up runs are
        # part of the capture step): a global NCCL_ALGO=Tree then reads as graph_capture.
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    self.fn()
            torch.cuda.current_stream(self.device).wait_stream(side)
            torch.cuda.synchronize(self.device)
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: queries by NCCL's watchdog thread must not invalidate the capture
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.out = self.fn()
        except Exception as err:
            print(f"proxy: Capture cuda graph failed ({self.name}): {err}", flush=True)
            raise
        self.graph.replay()  # capture computes nothing: fill self.out
        torch.cuda.synchronize(self.device)

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.out = self.fn()

    def times_ms(self, iters: int) -> list[float]:
        import torch

        if self.device.type != "cuda":
            times = []
            for _ in range(iters):
                began = time.perf_counter()
                self.run()
                times.append((time.perf_counter() - began) * 1000)
            return times
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(iters)]
        for start, end in events:
            start.record()
            self.run()
            end.record()
        torch.cuda.synchronize(self.device)
        return [start.elapsed_time(end) for start, end in events]


def _bandwidth(args: argparse.Namespace, device: torch.device) -> tuple[float, str]:
    """Per-GPU memory bandwidth for hbm_floor_ms: given, known (H200), or measured."""
    import torch

    if args.hbm_bandwidth:
        return args.hbm_bandwidth, "given"
    if device.type == "cuda" and "H200" in torch.cuda.get_device_name(device):
        return H200_BANDWIDTH, "H200: 4.3e12 B/s, matmul weight reads (reference/nccl.md)"
    nbytes = (1 << 30) if device.type == "cuda" else (64 << 20)
    buf = torch.ones(nbytes // 4, device=device)
    times = []
    for _ in range(6):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        began = time.perf_counter()
        buf.sum()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - began)
    del buf
    return nbytes / _percentile(times[1:], 50), f"measured: read of {nbytes >> 20} MiB"


def _nccl_version() -> str:
    import torch

    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _init_group(rank: int, world: int, device: torch.device, port: int) -> Any:
    """The default group over a TCP store that listens on 127.0.0.1 only; returns a gloo
    group for host-side barriers (no NCCL call outside the graphs but the warm-up)."""
    import torch.distributed as dist

    if world > 1 and not port:
        raise ValueError("MASTER_PORT is needed with more than one rank (use --spawn)")
    if "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own sockets on loopback
    timeout = datetime.timedelta(seconds=600)
    if rank == 0:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((LOCALHOST, port))
        sock.listen(128)
        bound, fd = sock.getsockname()[1], sock.detach()
        try:
            store = dist.TCPStore(LOCALHOST, bound, world, True, timeout=timeout,
                                  master_listen_fd=fd)
        except TypeError:  # a torch without master_listen_fd: its store binds every address
            os.close(fd)
            store = dist.TCPStore(LOCALHOST, bound, world, True, timeout=timeout)
    else:
        store = dist.TCPStore(LOCALHOST, port, world, False, timeout=timeout)
    if device.type == "cuda":
        dist.init_process_group("nccl", store=store, rank=rank, world_size=world,
                                timeout=timeout, device_id=device)
        return dist.new_group(backend="gloo")
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    return None


@dataclass(frozen=True)
class Request:
    """One line of proxy_control: ``seq`` orders the requests; ``value`` is the round index of
    a round, the replays per span of a profile."""

    seq: int
    action: str  # "round" | "profile"
    value: int

    @classmethod
    def parse(cls, text: str) -> Request | None:
        words = text.split()
        try:
            if len(words) == 1:
                return cls(int(words[0]), "round", int(words[0]))
            if len(words) == 3 and words[1] in ("round", "profile"):
                return cls(int(words[0]), words[1], int(words[2]))
        except ValueError:
            pass
        return None

    def line(self) -> str:
        return f"{self.seq} {self.action} {self.value}\n"


def _next_request(control: Path, last: int, idle_timeout: float, parent: int
                  ) -> Request | None:
    """The launcher's next request (seq above ``last``); None when idle too long or orphaned."""
    deadline = time.monotonic() + idle_timeout
    while time.monotonic() < deadline and os.getppid() == parent:
        try:
            request = Request.parse(control.read_text())
        except OSError:
            request = None
        if request is not None and request.seq > last:
            return request
        time.sleep(0.005)
    return None


class _Done(Exception):
    """The --rounds run finished on every rank."""


def run_rank(args: argparse.Namespace) -> int:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    parent = os.getppid()
    events = Events(args.out / ROUNDS_FILE if args.out else None, active=rank == 0)
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
        last = -1
        while (request := _next_request(args.out / CONTROL_FILE, last, args.idle_timeout,
                                        parent)) is not None:
            if request.action == "profile":
                worker.profile(request.value, request.seq)
            else:
                worker.round(request.value)
            last = request.seq
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


class Rank:
    """One rank: set up (group, model, graphs, gate, ready line), then time rounds."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, local: int,
                 events: Events) -> None:
        self.args, self.rank, self.world, self.local, self.events = (
            args, rank, world, local, events)
        self.timed: list[Timed] = []
        self.fixed: dict[str, Any] = {}

    def setup(self) -> None:
        began = time.monotonic()
        import torch

        from launchers.proxy import model as proxy_model
        from launchers.proxy.shapes import Shape, load_shape, shape_name

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
        geo = self.geo = proxy_model.Geometry(
            shape, ranks=world, batch=args.batch, draft_tokens=args.draft_tokens,
            kv_len=args.kv_len, layers=args.layers, elem_bytes=dtype.itemsize)
        port = int(os.environ.get("MASTER_PORT") or args.port or 0)
        self.ctrl = _init_group(rank, world, self.device, port)
        _maybe_fail(args, "init", rank, world)
        layers_source = "given" if args.layers else "all"
        if self.cuda and args.fit_layers:
            geo, layers_source = self._fit(geo)
            self.geo = geo
        self.bandwidth, bandwidth_source = _bandwidth(args, self.device)
        run_bytes = geo.bytes_per_pass(full=False)
        if self.cuda:
            free, total = torch.cuda.mem_get_info(self.device)
            _check_fits(geo, free, total)
        comm = proxy_model.DistComm() if world > 1 or self.cuda else proxy_model.LocalComm()
        model = proxy_model.ProxyModel(geo, rank=rank, device=self.device, dtype=dtype,
                                       seed=args.seed, comm=comm)
        built = time.monotonic()
        n_allreduce = 2 * shape.num_hidden_layers
        self.timed = [Timed("pass", model.forward, self.device, args.graph),
                      Timed("head", lambda: model.head(model.x), self.device, args.graph),
                      Timed("allreduce", lambda: model.collectives(n_allreduce), self.device,
                            args.graph),
                      Timed("allgather", model.gather_only, self.device, args.graph)]
        for item in self.timed:
            item.prepare()
        captured = time.monotonic()
        dtype_name = str(dtype).removeprefix("torch.")
        self.gate = Gate(args, args.tolerance or TOLERANCE[dtype_name])
        status = self.gate.check(self.timed[0].out) if rank == 0 else {}
        self.barrier()
        _maybe_fail(args, "ready", rank, world)
        device_name = (torch.cuda.get_device_name(self.device) if self.cuda
                       else platform.processor() or platform.machine() or None)
        label = f"cuda:{device_name}" if self.cuda else "cpu"
        self.fixed = {"graph": bool(args.graph and self.cuda), "ranks": world, "device": label,
                      "iters": args.iters}
        unquantized = replace(geo, quantize=False).bytes_per_pass()["total"]
        self.events.emit(
            "ready", shape=name, **self.fixed, device_name=device_name, dtype=dtype_name,
            batch=args.batch, draft_tokens=args.draft_tokens, kv_len=args.kv_len,
            **geo.describe(), layers_source=layers_source,
            bytes_per_pass=geo.bytes_per_pass()["total"], bytes_per_pass_run=run_bytes["total"],
            bytes_breakdown=geo.bytes_per_pass(), hbm_bandwidth=self.bandwidth,
            hbm_bandwidth_source=bandwidth_source, quantized_checkpoint=shape.quantized,
            bytes_per_pass_unquantized=unquantized,
            approximation=proxy_model.approximation(), torch=torch.__version__,
            nccl=_nccl_version() if self.cuda else None,
            setup_s={"build": round(built - began, 3), "capture": round(captured - built, 3)},
            **status)

    def _fit(self, geo: Geometry) -> tuple[Geometry, str]:
        """--fit-layers: the layer count fitted to the smallest GPU's total memory (the same
        rule as the launcher's); the reference then names the layer count."""
        import torch

        from launchers.proxy import model as proxy_model

        total = self._min_over_ranks(int(torch.cuda.mem_get_info(self.device)[1]))
        n = geo.shape.num_hidden_layers
        if self.args.layers is None:
            fitted = proxy_model.fit_layers(geo, total)
            if fitted is None:
                return geo, "all"
            self.args.layers = fitted
            geo = replace(geo, layers=fitted)
            if self.args.reference is not None:  # another layer count, another reference
                ref = self.args.reference
                self.args.reference = ref.with_name(f"{ref.name.removesuffix('.pt')}-L{fitted}.pt")
        return geo, (f"fit: {geo.layers_run} of {n} layers fit in "
                     f"{proxy_model.FIT_FRACTION:.0%} of {total / 2**30:.1f} GiB per GPU")

    def _min_over_ranks(self, value: int) -> int:
        if self.world == 1:
            return value
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.ctrl)
        return int(t.item())

    def profile(self, steps: int, request: int | None = None) -> None:
        """Chrome traces of ``steps`` verify passes and ``steps`` all-reduce-only passes, one
        file per rank, each replay in a ``servetune.<name>`` span (rank 0 reports them)."""
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        args = self.args
        folder = args.profile_dir or (args.out / PROFILE_DIR if args.out else Path(PROFILE_DIR))
        folder.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU]
        if self.cuda:
            activities.append(ProfilerActivity.CUDA)
        spans = [(PROFILE_SPANS[0], self.timed[0]), (PROFILE_SPANS[1], self.timed[2])]
        with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
            for name, item in spans:
                item.run()  # unrecorded: the profiler's first-call costs stay out of the steps
                self.barrier()  # every rank's profiler runs; the ranks start the kind together
                for _ in range(steps):
                    with record_function(name):
                        item.run()
            self.barrier()
        path = folder / trace_name(self.rank)
        prof.export_chrome_trace(str(path))
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self.barrier()
        if self.rank == 0:
            self.events.emit("profile", request=request, steps=steps,
                             spans=[name for name, _ in spans], layers_run=self.geo.layers_run,
                             scaled=self.geo.scaled,
                             files=[str(folder / trace_name(r)) for r in range(self.world)])

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
        for item in self.timed:
            item.run()
        samples = {item.name: item.times_ms(args.iters) for item in self.timed}
        if self.rank == 0:
            metrics = summarize(samples, self.geo, accept_length=args.accept_length,
                                draft_ms=args.draft_ms,
                                draft_steps=args.draft_steps or max(1, args.draft_tokens - 1),
                                bandwidth=self.bandwidth)
            check = self.gate.check(self.timed[0].out)
            self.events.emit("round", round=index, **metrics, **self.fixed, **check)


def _check_fits(geo: Geometry, free: int, total: int) -> None:
    """Refuse a model that does not fit, naming the --layers that would (CUDA OOM kind)."""
    import torch

    from launchers.proxy.model import fit_layers

    need = geo.bytes_per_pass(full=False)["total"]
    if need <= 0.9 * free:
        return
    fit = fit_layers(replace(geo, layers=None), min(total, int(free / 0.9)))
    raise torch.OutOfMemoryError(
        f"the proxy needs {need / 2**30:.1f} GiB per GPU, {free / 2**30:.1f} GiB free: run "
        f"fewer layers (--layers {fit or 1}), or leave --layers out to fit them")


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(words)
    if args.spawn:
        return spawn(args.spawn, words, args.port)
    return run_rank(args)


if __name__ == "__main__":
    sys.exit(main())
