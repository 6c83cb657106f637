"""A stand-in for an SGLang server: the simulator, never a measurement of SGLang
and never the product's default.

Run as ``python -m simulator.sglang_server <sglang flags> [--fake-* switches]``. It parses
SGLang's own CLI, captured from the installed SGLang into a fixture (fake_cli.py over
sglang_cli.py: unknown or ambiguous flags are argparse errors, as in SGLang), logs SGLang's real lines, serves
SGLang's endpoints (``/health_generate``, ``/health``, ``/ready``, ``/server_info``,
``/metrics``, streaming ``/generate``, ...) with SGLang's formats
(shared/reference/sglang.md), and takes its timing from simulator/cost_model.py through a
batching scheduler loop (fake_engine.py). Startup loads weights by load format and captures
decode graphs by batch size (fake_startup.py); acceptance depends on the prompt's content
(content.py), and on random weights (``--load-format dummy``) no drafted token is accepted.
Rank processes (fake_ranks.py) are started from this process's environment and write NCCL's
INFO lines, so the NCCL_* settings a test passes can be read back from NCCL-format logs.

Times are model milliseconds; the server sleeps ``ms * --fake-time-scale``. The device-timer
counters report model time, so ``verify_ms`` reads back what the model (or
``--fake-verify-ms``) says; step times are wall time on the model's clock (idle time
included, as SGLang's), and measured tok/s is model tok/s / time scale.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import sys
import threading
import time
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from simulator import cost_model, fake_nodes
from simulator.cost_model import SpecParams, Timing
from simulator.fake_cli import build_parser, chosen_fault, flag_values
from simulator.fake_engine import Engine, Metrics, Request, log
from simulator.fake_http import FakeHTTPServer
from simulator.fake_ranks import Ranks
from simulator.fake_startup import Startup, random_weights, target_load_s

VERSION = "0.5.23"
# SGLang's own lines around a failure and a stop (0.5.16, tests/launchers/logs/).
SIGQUIT_LAUNCH = "Received sigquit from a child process. It usually means the child failed."
SIGQUIT_RUNNING = "SIGQUIT received. signum=None, frame=None. It usually means one child failed."
READY_LINE = "The server is fired up and ready to roll!"
ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the server


def launch_factor(spread: float, seed: int) -> float:
    """This launch's factor on model time: exp(N(0, spread)), drawn from the trial's marker
    (a fresh launch, a fresh draw) and the seed."""
    if spread <= 0:
        return 1.0
    marker = os.environ.get("SERVETUNE_TRIAL", "") or str(os.getpid())
    rng = random.Random(zlib.crc32(f"{seed}/{marker}".encode()))
    return math.exp(rng.gauss(0.0, spread))


class FakeServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tp = args.tp_size
        self.model_name = args.served_model_name or args.model_path
        self.seed = args.fake_seed if args.fake_seed is not None else (args.random_seed or 0)
        self.launch_factor = launch_factor(args.fake_launch_spread, self.seed)
        self.flags = flag_values(args)
        self.spec = SpecParams(args.speculative_algorithm, args.speculative_num_steps,
                               args.speculative_eagle_topk, args.speculative_num_draft_tokens)
        self.startup = Startup(args, log, self._wait_watching, self.spec.on,
                               self.spec.resolved()[2])
        # SGLang captures the largest batch of the list (memory_hook.py): the cost model's knob
        self.flags["--cuda-graph-max-bs-decode"] = max(self.startup.sizes, default=0)
        self.ready = threading.Event()
        self.ranks = Ranks(ROOT)
        self.peers: fake_nodes.Peers | None = None  # the other nodes (--nnodes > 1)
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
            accept = 1.0 if random_weights(a) else t.accept_length  # random drafts: rejected
            self._timings[batch] = replace(
                t,
                verify_ms=t.verify_ms if a.fake_verify_ms is None else a.fake_verify_ms,
                draft_ms=t.draft_ms if a.fake_draft_ms is None else a.fake_draft_ms,
                accept_length=accept if a.fake_accept_length is None
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
        if self.tp > 1 and self.startup.sizes:
            os.environ.setdefault("NCCL_GRAPH_REGISTER", "0")
        os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"

    def startup_fault(self) -> str | None:
        fault = self.args.fake_fault
        if fault in ("crash-startup", "oom-startup", "no-weights-startup",
                     "missing-module-startup"):
            return {"crash-startup": "crash", "oom-startup": "oom",
                    "no-weights-startup": "no-weights",
                    "missing-module-startup": "missing-module"}[fault]
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
        if self.spec.on:  # what SGLang resolved, as its /server_info says
            steps, topk, drafts = self.spec.resolved()
            args.update(speculative_num_steps=steps, speculative_eagle_topk=topk,
                        speculative_num_draft_tokens=drafts)
        args["cuda_graph_bs_decode"] = self.startup.sizes
        state: dict[str, Any] = {
            "last_gen_throughput": 0.0,
            "memory_usage": {"weight": 15.0, "kvcache": 40.0, "token_capacity": 500000,
                             "graph": 0.5},
        }
        with self.engine.cond:
            if self.record_step_time:
                state["step_time_dict"] = {k: list(v) for k, v in self.engine.step_times.items()}
            if self.spec.on and self.engine.verify_total:
                state["avg_spec_accept_length"] = (self.engine.accepted_total
                                                   / self.engine.verify_total)
        return {**args, "version": VERSION, "internal_states": [state]}

    # ------------------------------------------------------------ processes
    def die(self, during_launch: bool = False) -> None:
        """A scheduler gone: SGLang's parent logs it and kills its own tree with SIGKILL
        (``kill_process_tree``), itself included (exit -9). Serving, its watchdog names the
        scheduler's exit code first."""
        if not self._dying.acquire(blocking=False):
            return
        time.sleep(0.05)  # let the response that just finished reach its client
        if during_launch:
            log(SIGQUIT_LAUNCH)
        else:
            self.ranks.kill_first()
            code = self.ranks.first_exit_code()
            log(f"Subprocess scheduler_0 (pid={self.ranks.first_pid()}) crashed with exit code "
                f"{code}. Triggering SIGQUIT for cleanup...")
            log(SIGQUIT_RUNNING)
        log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, "
            f"pid={os.getpid()}")
        self.ranks.stop(grace=0.0)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        """SGLang drains on SIGTERM, then kills its tree (the log of a stop asked for)."""
        log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        log("Gracefully exiting... Remaining number of requests 0. Remaining requests "
            "remaining_rids=[].")
        if self.peers is not None:  # its ShutdownReq, broadcast: every node's ranks stop
            self.peers.shutdown()
        log(f"kill_process_tree called: parent_pid={os.getpid()}, include_parent=True, "
            f"pid={os.getpid()}")
        self.ranks.stop()
        sys.stdout.flush()
        os._exit(0)

    def _wait_watching(self, seconds: float) -> None:
        """Sleep ``seconds`` (forever while hanging at startup), dying with a rank."""
        end = time.monotonic() + seconds
        while time.monotonic() < end or self.args.fake_fault == "hang-startup":
            self._check_children()
            time.sleep(min(0.02, max(0.0, end - time.monotonic())) or 0.02)

    # ------------------------------------------------------------ main
    def run(self) -> int:
        a = self.args
        started = time.monotonic()
        if a.fake_fault == "ignore-sigterm":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, self._on_sigterm)
        if self.spec.partial:  # SGLang's own check, in the launching process
            return partial_shape_crash()
        if self.spec.on and self.spec.topk == 1 and self.spec.num_steps is not None and \
                self.spec.draft_tokens not in (None, self.spec.num_steps + 1):
            log("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1")
        shown = {k: v for k, v in vars(a).items() if not k.startswith("fake_")}
        log("server_args=ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")")
        self.apply_sglang_env()
        if a.node_rank > 0:  # a follower: simulator/fake_nodes.py
            return fake_nodes.follower(self, log)
        try:
            http = FakeHTTPServer((a.host, a.port), self)
        except OSError as err:
            log(f"ERROR:    [Errno {err.errno}] error while attempting to bind on address "
                f"('{a.host}', {a.port}): {err.strerror.lower() if err.strerror else err}")
            return 1
        threading.Thread(target=http.serve_forever, name="http", daemon=True).start()
        log("Init torch distributed begin.", "TP0")
        try:
            self.peers = fake_nodes.join(a, log)  # waits for the other nodes (if any)
        except RuntimeError as err:
            log(str(err))
            return 1
        load_s = target_load_s(a) * a.fake_startup_scale  # the ranks load, then capture
        fault = self.startup_fault()
        self.ranks.start(min(self.tp, max(1, a.fake_max_ranks)), self.tp, fault,
                         load_s, a.fake_fault == "ignore-sigterm",
                         a.fake_fault == "setsid-grandchild", a.model_path)
        self.startup.weights_begin()
        problem = self.ranks.wait(time.monotonic() + load_s + max(30.0, a.fake_startup_s + 30.0))
        if problem and fault is not None:  # the scheduler logged its exception, then died
            self.die(during_launch=True)
        if problem:
            log(problem)
            self.ranks.stop()
            return 1
        self.startup.weights_end(load_s)  # the ranks' own start-up is not loading
        self.startup.capture_begin("target")
        if a.fake_fault == "hang-startup":
            self._wait_watching(0.0)
        self.startup.capture("target")
        if self.spec.on:
            self.startup.draft()
        self._wait_watching(started + a.fake_startup_s - time.monotonic())
        log(f"Uvicorn running on http://{a.host}:{a.port} (Press CTRL+C to quit)")
        self.engine.start()
        self.startup.warmup()
        self.ready.set()
        log(READY_LINE)
        print(f"FAKE_READY_AT {time.time():.6f}", flush=True)
        while True:
            self._check_children()
            time.sleep(0.05)

    def _check_children(self) -> None:
        if self.ranks.any_dead() or (self.peers is not None and self.peers.lost(log)):
            self.die()


def partial_shape_crash() -> int:
    """SGLang 0.5.16 on a partial speculative shape (tests/launchers/logs/...-topk.log): its
    argument check fails in the launching process, a plain traceback, exit code 1."""
    sys.stdout.write(
        "Traceback (most recent call last):\n"
        '  File "/root/site/sglang/srt/server_args.py", line 8224, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        '  File "/root/site/sglang/srt/arg_groups/speculative_hook.py", line 560, in '
        "_handle_eagle_family\n"
        "    server_args.speculative_eagle_topk is None\n"
        "AssertionError\n")
    sys.stdout.flush()
    return 1


def replay(path: Path) -> int:
    """A real server's log, line by line, then SGLang's end after a failure: its own tree
    killed with SIGKILL (the log's last lines say so), this process included."""
    for line in path.read_text(errors="replace").splitlines():
        print(line, flush=True)
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGKILL)
    return 137  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.host != "127.0.0.1" and not args.fake_allow_any_host:
        parser.error("the stand-in binds 127.0.0.1 only (--fake-allow-any-host to override)")
    args.fake_fault = chosen_fault(args, os.environ)
    if args.fake_replay_log is not None:
        return replay(args.fake_replay_log)
    # The GPUs this server was given (tests check that each server saw a whole node).
    log(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}")
    return FakeServer(args).run()


if __name__ == "__main__":
    sys.exit(main())
