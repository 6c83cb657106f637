"""A stand-in for an SGLang server. TEST EQUIPMENT ONLY, never the product's default.

Run as ``python -m tests.fakes.sglang_server <sglang flags> [--fake-* switches]``. It parses
SGLang's CLI (unknown flags are an argparse error, like SGLang), logs SGLang's real lines,
serves SGLang's endpoints (``/health_generate``, ``/health``, ``/ready``, ``/server_info``,
``/metrics``, streaming ``/generate``, ...) with SGLang's formats (shared/reference/sglang.md),
and takes its timing from tests/fakes/cost_model.py through a batching scheduler loop
(fake_engine.py). Rank processes (fake_ranks.py) are started from this process's
environment and write NCCL's INFO lines, so the NCCL_* settings a test passes can be read
back from NCCL-format logs.

Times are model milliseconds; the server sleeps ``ms * --fake-time-scale``. The device-timer
counters and step times report model time, so ``verify_ms`` reads back exactly what the
model (or ``--fake-verify-ms``) says, while measured tok/s is model tok/s / time scale.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from search_spaces.knobs import CATALOGUE, KnobKind, Value
from tests.fakes import cost_model
from tests.fakes.cost_model import SpecParams, Timing
from tests.fakes.fake_engine import Engine, Metrics, Request, log

VERSION = "0.5.23"
FAULTS = ("crash-startup", "hang-startup", "oom-startup", "die-mid-round", "hang-mid-round",
          "ignore-sigterm", "setsid-grandchild", "slow")
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
READY_LINE = "The server is fired up and ready to roll!"
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- the CLI


def _knob_type(choices: tuple[Value, ...]) -> type:
    values = [c for c in choices if c is not None]
    return int if values and all(isinstance(c, int) and not isinstance(c, bool) for c in values) \
        else str


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang serve")
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path")
    p.add_argument("--served-model-name")
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--dp-size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--enable-metrics-for-all-schedulers", action="store_true")
    p.add_argument("--speculative-algorithm", choices=SPEC_ALGORITHMS)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft")
    p.add_argument("--mem-fraction-static", type=float)
    p.add_argument("--random-seed", type=int)
    p.add_argument("--log-level", default="info")
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--watchdog-timeout", type=float, default=300.0)
    p.add_argument("--max-running-requests", type=int)
    p.add_argument("--load-format", default="auto")
    p.add_argument("--skip-tokenizer-init", action="store_true")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--context-length", type=int)
    p.add_argument("--dtype", default="auto")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--attention-backend")
    p.add_argument("--chunked-prefill-size", type=int)
    p.add_argument("--cuda-graph-max-bs-prefill", type=int)
    p.add_argument("--cuda-graph-bs-decode", type=int, nargs="+")
    p.add_argument("--cuda-graph-backend-decode", choices=("full", "breakable", "disabled"))
    p.add_argument("--disable-decode-cuda-graph", action="store_true")
    p.add_argument("--disable-prefill-cuda-graph", action="store_true")
    p.add_argument("--disable-cuda-graph", action="store_true")  # deprecated, still parses
    p.add_argument("--torch-compile-max-bs", type=int)
    p.add_argument("--enable-flashinfer-allreduce-fusion", action="store_true")  # -> auto
    p.add_argument("--pre-warm-nccl", action="store_true")
    p.add_argument("--incremental-streaming-output", action="store_true")
    for knob in CATALOGUE.values():  # every flag servetune can tune, as SGLang spells it
        if knob.kind is not KnobKind.FLAG:
            continue
        if knob.is_switch:
            p.add_argument(knob.name, action="store_true")
        else:
            p.add_argument(knob.name, type=_knob_type(knob.choices))

    g = p.add_argument_group("stand-in switches (test equipment only)")
    g.add_argument("--fake-startup-s", type=float, default=0.3, help="time to ready")
    g.add_argument("--fake-time-scale", type=float, default=0.05,
                   help="real seconds per model second")
    g.add_argument("--fake-noise", type=float, default=0.02, help="multiplicative noise (sd)")
    g.add_argument("--fake-seed", type=int, help="noise seed (default: --random-seed or 0)")
    g.add_argument("--fake-verify-ms", type=float, help="override the model's verify ms")
    g.add_argument("--fake-draft-ms", type=float, help="override the model's draft ms")
    g.add_argument("--fake-accept-length", type=float, help="override the accept length")
    g.add_argument("--fake-fault", choices=FAULTS)
    g.add_argument("--fake-fault-if", action="append", default=[],
                   metavar="FAULT:NAME=VALUE[,NAME=VALUE]",
                   help="FAULT (in place of --fake-fault) when every NAME (an env var or a "
                        "flag) has VALUE; repeatable, the first match wins. Lets one config "
                        "of a search fail its own way")
    g.add_argument("--fake-slow-factor", type=float, default=4.0,
                   help="slow: verify and draft take this many times longer")
    g.add_argument("--fake-die-after", type=int, default=4,
                   help="die-mid-round / hang-mid-round: after this many finished requests")
    g.add_argument("--fake-no-tree-crash", action="store_true",
                   help="a global NCCL_ALGO=Tree does not crash graph capture")
    g.add_argument("--fake-allow-any-host", action="store_true")
    g.add_argument("--fake-max-ranks", type=int, default=2,
                   help="rank processes started (at most --tp-size)")
    return p


def flag_values(args: argparse.Namespace) -> dict[str, Value]:
    """The catalogue's flags as set on the command line (knob name -> value)."""
    out: dict[str, Value] = {}
    for knob in CATALOGUE.values():
        if knob.kind is KnobKind.FLAG:
            value = getattr(args, knob.name[2:].replace("-", "_"))
            if value is not None and value is not False:
                out[knob.name] = value
    if args.enable_flashinfer_allreduce_fusion and \
            "--flashinfer-allreduce-fusion-backend" not in out:
        out["--flashinfer-allreduce-fusion-backend"] = "auto"
    return out


# ---------------------------------------------------------------- HTTP


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet access log
        pass

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def do_GET(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate", "/ready"):
            self._send(200 if fake.ready.is_set() else 503, b"")
        elif path == "/metrics":
            if not fake.args.enable_metrics:
                self._send(404, b'{"detail":"Not Found"}')
            else:
                self._send(200, fake.metrics.text(), CONTENT_TYPE_LATEST)
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, fake.server_info())
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, {"model_path": fake.args.model_path,
                             "tokenizer_path": fake.args.tokenizer_path, "is_generation": True})
        elif path == "/v1/models":  # answers before warm-up ends, as SGLang's does
            self._json(200, {"object": "list", "data": [{"id": fake.model_name,
                                                          "object": "model"}]})
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if path == "/flush_cache":
            fake.engine.flush()
            self._send(200, b"Cache flushed.\n", "text/plain")
            return
        if path != "/generate":
            self._send(404, b'{"detail":"Not Found"}')
            return
        if not fake.ready.is_set():
            self._json(503, {"error": {"message": "The server is not ready."}})
            return
        try:
            body = json.loads(raw or b"{}")
            ids = body.get("input_ids")
            text = body.get("text")
            prompt_len = len(ids) if isinstance(ids, list) else len(str(text or "").split())
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
        except (ValueError, TypeError, AttributeError) as err:
            self._json(400, {"error": {"message": f"bad request: {err}"}})
            return
        if prompt_len == 0 or max_new < 1:
            self._json(400, {"error": {"message": "input_ids or text and max_new_tokens >= 1"}})
            return
        req = Request(uuid.uuid4().hex, prompt_len, max_new)
        fake.engine.submit(req)
        try:
            if body.get("stream"):
                self._stream(req)
            else:
                tokens, done = 0, False
                while not done:
                    tokens, done = req.out.get()
                self._json(200, fake.chunk(req, tokens, True))
        except (BrokenPipeError, ConnectionResetError):
            req.aborted = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, req: Request) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        done = False
        while not done:
            tokens, done = req.out.get()
            payload = json.dumps(fake.chunk(req, tokens, done))
            self._write_chunk(f"data: {payload}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeServer


# ---------------------------------------------------------------- the server


class FakeServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tp = args.tp_size
        self.model_name = args.served_model_name or args.model_path
        self.seed = args.fake_seed if args.fake_seed is not None else (args.random_seed or 0)
        self.flags = flag_values(args)
        self.spec = SpecParams(args.speculative_algorithm, args.speculative_num_steps,
                               args.speculative_eagle_topk, args.speculative_num_draft_tokens)
        self.ready = threading.Event()
        self.children: list[tuple[int, subprocess.Popen[bytes]]] = []
        self._dying = threading.Lock()
        ranks = list(range(self.tp)) if args.enable_metrics_for_all_schedulers else [0]
        self.metrics = Metrics(self.model_name, ranks)
        self.engine = Engine(self)
        self._timings: dict[int, Timing] = {}

    # ------------------------------------------------------------ settings
    @property
    def device_timer(self) -> bool:
        return os.environ.get("SGLANG_ENABLE_METRICS_DEVICE_TIMER", "").lower() in ("1", "true")

    @property
    def record_step_time(self) -> bool:
        return os.environ.get("SGLANG_RECORD_STEP_TIME", "").lower() in ("1", "true")

    def nccl_env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}

    def timing(self, batch: int) -> Timing:
        if batch not in self._timings:
            t = cost_model.timing(self.nccl_env(), self.flags, self.tp, self.spec, batch)
            a = self.args
            self._timings[batch] = replace(
                t,
                verify_ms=t.verify_ms if a.fake_verify_ms is None else a.fake_verify_ms,
                draft_ms=t.draft_ms if a.fake_draft_ms is None else a.fake_draft_ms,
                accept_length=t.accept_length if a.fake_accept_length is None
                else a.fake_accept_length)
            if a.fake_fault == "slow":
                t = self._timings[batch]
                self._timings[batch] = replace(t, verify_ms=t.verify_ms * a.fake_slow_factor,
                                               draft_ms=t.draft_ms * a.fake_slow_factor)
        return self._timings[batch]

    def apply_sglang_env(self) -> None:
        """The NCCL variables SGLang edits itself before starting its ranks (sglang.md)."""
        symm = bool(self.flags.get("--enable-symm-mem"))
        nvls = bool(self.flags.get("--enable-nccl-nvls"))
        if "NCCL_CUMEM_ENABLE" not in os.environ:
            os.environ["NCCL_CUMEM_ENABLE"] = "1" if symm else "0"
        if "NCCL_NVLS_ENABLE" not in os.environ or nvls or symm:
            os.environ["NCCL_NVLS_ENABLE"] = str(int(nvls or symm))
        if self.tp > 1 and not self.args.disable_cuda_graph:
            os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"

    def startup_fault(self) -> str | None:
        fault = self.args.fake_fault
        if fault == "crash-startup":
            return "crash"
        if fault == "oom-startup":
            return "oom"
        if cost_model.crash_reason(self.nccl_env(), self.tp) and not self.args.fake_no_tree_crash:
            return "global-tree"
        return None

    # ------------------------------------------------------------ endpoints' data
    def chunk(self, req: Request, tokens: int, done: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid, "finish_reason": {"type": "length", "length": tokens} if done else None,
            "prompt_tokens": req.prompt_len, "completion_tokens": tokens, "cached_tokens": 0,
            "reasoning_tokens": 0, "num_retractions": 0, "weight_version": "default",
        }
        if done:
            meta["e2e_latency"] = time.time() - req.created
            if self.spec.on:
                verify = max(1, req.verify_ct)
                meta.update({"spec_verify_ct": req.verify_ct,
                             "spec_accept_length": tokens / verify,
                             "spec_accept_rate": req.correct / req.proposed if req.proposed else 0.0,
                             "spec_num_correct_drafts": req.correct,
                             "spec_num_proposed_drafts": req.proposed})
        ids = [1000 + (7919 * i) % 19000 for i in range(tokens)]
        out: dict[str, Any] = {"output_ids": ids, "meta_info": meta}
        if not self.args.skip_tokenizer_init:
            out["text"] = "".join(f" tok{i}" for i in ids)
        return out

    def server_info(self) -> dict[str, Any]:
        args = {k: v for k, v in vars(self.args).items() if not k.startswith("fake_")}
        state: dict[str, Any] = {
            "last_gen_throughput": 0.0,
            "memory_usage": {"weight": 15.0, "kvcache": 40.0, "token_capacity": 500000,
                             "graph": 0.5},
        }
        with self.engine.cond:
            state["step_time_dict"] = {k: list(v) for k, v in self.engine.step_times.items()}
            if self.spec.on and self.engine.verify_total:
                state["avg_spec_accept_length"] = (self.engine.accepted_total
                                                   / self.engine.verify_total)
        return {**args, "version": VERSION, "internal_states": [state]}

    # ------------------------------------------------------------ processes
    def _start_ranks(self, fault: str | None) -> int:
        """Start the rank processes; returns the read end of their readiness pipe."""
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)  # inherited: the marker and every NCCL_* reach the ranks
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        for rank in range(min(self.tp, max(1, self.args.fake_max_ranks))):
            cmd = [sys.executable, "-m", "tests.fakes.fake_ranks", "--rank", str(rank),
                   "--tp", str(self.tp), "--ready-fd", str(write_fd)]
            if fault:
                cmd += ["--fault", fault]
            if self.args.fake_fault == "ignore-sigterm":
                cmd.append("--ignore-sigterm")
            if self.args.fake_fault == "setsid-grandchild":
                cmd.append("--grandchild")
            proc = subprocess.Popen(cmd, env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL)
            self.children.append((rank, proc))
        os.close(write_fd)
        return read_fd

    def _wait_ranks(self, read_fd: int, deadline: float) -> str | None:
        """Wait until every rank reported ready; returns the failure line, if any."""
        reported: set[int] = set()
        buffer = b""
        while len(reported) < len(self.children):
            for rank, proc in self.children:
                if rank not in reported and proc.poll() is not None:
                    return (f"Rank {rank} scheduler died during initialization "
                            f"(exit code: {proc.returncode})")
            if time.monotonic() > deadline:
                return "Rank 0 scheduler did not start in time"
            readable, _, _ = select.select([read_fd], [], [], 0.02)
            if readable:
                data = os.read(read_fd, 4096)
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                reported.update(int(x) for x in lines if x.strip())
        return None

    def stop_children(self, grace: float = 1.0) -> None:
        for _, proc in self.children:
            if proc.poll() is None:
                proc.terminate()
        end = time.monotonic() + grace
        for _, proc in self.children:
            try:
                proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def die(self) -> None:
        """A scheduler crash mid-serving: SGLang's parent logs it and kills its tree."""
        if not self._dying.acquire(blocking=False):
            return
        time.sleep(0.05)  # let the response that just finished reach its client
        if self.children:
            self.children[0][1].kill()
        log("Received sigquit from a child process. It usually means the child failed.")
        self.stop_children(grace=0.2)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        log("Received SIGTERM. Shutting down.")
        self.stop_children()
        sys.stdout.flush()
        os._exit(0)

    # ------------------------------------------------------------ main
    def run(self) -> int:
        a = self.args
        started = time.monotonic()
        if a.fake_fault == "ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        shown = {k: v for k, v in vars(a).items() if not k.startswith("fake_")}
        log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")")
        self.apply_sglang_env()
        try:
            http = _HTTPServer((a.host, a.port), Handler)
        except OSError as err:
            log(f"ERROR:    [Errno {err.errno}] error while attempting to bind on address "
                f"('{a.host}', {a.port}): {err.strerror.lower() if err.strerror else err}")
            return 1
        http.fake = self
        threading.Thread(target=http.serve_forever, name="http", daemon=True).start()
        log("Init torch distributed begin.", "TP0")
        fault = self.startup_fault()
        read_fd = self._start_ranks(fault)
        problem = self._wait_ranks(read_fd, started + max(30.0, a.fake_startup_s + 30.0))
        os.close(read_fd)
        if problem:
            log(problem)
            self.stop_children()
            return 1
        log("Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, "
            "mem usage=15.00 GB.", "TP0")
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=44.50 GB",
            "TP0")
        while time.monotonic() < started + a.fake_startup_s or a.fake_fault == "hang-startup":
            self._check_children()
            time.sleep(0.02)
        log("Capture cuda graph end. Time elapsed: 0.30 s. mem usage=0.50 GB. avail mem=44.00 GB.",
            "TP0")
        log(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        self.engine.start()
        self.ready.set()
        log(READY_LINE)
        print(f"FAKE_READY_AT {time.time():.6f}", flush=True)
        while True:
            self._check_children()
            time.sleep(0.05)

    def _check_children(self) -> None:
        if any(proc.poll() is not None for _, proc in self.children):
            self.die()


def chosen_fault(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The first --fake-fault-if whose conditions all hold, else --fake-fault."""
    flags = flag_values(args)
    for rule in args.fake_fault_if:
        fault, _, conditions = rule.partition(":")
        if fault not in FAULTS:
            raise SystemExit(f"--fake-fault-if {rule!r}: unknown fault {fault!r}")
        holds = True
        for condition in conditions.split(","):
            name, _, value = condition.partition("=")
            actual = flags.get(name) if name.startswith("--") else env.get(name)
            holds = holds and actual is not None and str(actual) == value
        if holds:
            return fault
    return str(args.fake_fault) if args.fake_fault else None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1" and not args.fake_allow_any_host:
        parser.error("the stand-in binds 127.0.0.1 only (--fake-allow-any-host to override)")
    args.fake_fault = chosen_fault(args, os.environ)
    # The GPUs this server was given (tests check that each server saw a whole node).
    log(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
    return FakeServer(args).run()


if __name__ == "__main__":
    sys.exit(main())
