"""One rank ("scheduler") process of the SGLang stand-in, and how the server starts them.
Part of the simulator: a stand-in, never a measurement of SGLang.

Started by simulator/sglang_server.py (``Ranks``) with the server's own environment, like
SGLang's spawned schedulers. A rank writes NCCL-format INFO lines (shared/reference/nccl.md)
for the NCCL_* variables it inherited, loads its weights (``--delay``), fails with SGLang's
real error texts when told to (graph capture and the KV pool come after the weights), reports
readiness on a pipe, then stays alive until its parent goes away.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from search_spaces import knobs
from simulator.cost_model import strtoll

NCCL_VERSION = "2.28.9+cuda13.0"
DEFAULT_CHANNELS = 24  # what NCCL picks on the modelled 8-GPU PCIe node
DEFAULT_P2P_CHANNELS = 32
# Integer parameters print "<value>." after strtoll; others print the raw text.
INT_PARAMS = frozenset({
    "NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE", "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NTHREADS",
    "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_GRAPH_REGISTER",
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_PXN_DISABLE",
})
_NOT_PRINTED = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})

CAPTURE_HELP = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
_TRACEBACK = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", '
    "line 2966, in run_scheduler_process\n"
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
    "dp_rank)\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
    'cuda_graph_runner.py", line 389, in __init__\n'
    '    raise Exception(\n'
)
# NCCL >= 2.2x spelling (older releases: "Error : no algorithm/protocol available ...").
_NO_ALGO = ("No algorithm/protocol available for function AllGather with datatype "
            "ncclInt8. NCCL_ALGO was set to {algo}.")
# SGLang 0.5.16 on an H200 (tests/launchers/logs/sglang-0.5.16-h200-*.log), frames shortened.
_SCHEDULER = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/root/site/sglang/srt/managers/scheduler.py", line 4623, in run_scheduler_process\n'
    "    scheduler = Scheduler(\n"
    "                ^^^^^^^^^^\n")
STARTUP_FAULTS = {
    "crash": _TRACEBACK + "Exception: Capture cuda graph failed: CUDA error: an illegal memory "
             "access was encountered\n" + CAPTURE_HELP,
    "oom": "Scheduler hit an exception: Traceback (most recent call last):\n"
           "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
    "no-weights": _SCHEDULER +
    '  File "/root/site/sglang/srt/model_loader/loader.py", line 521, in _prepare_weights\n'
    "    raise RuntimeError(\n"
    "RuntimeError: Cannot find any model weights with `{model}`\n",
    "missing-module": (
        "Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/root/site/sgl_kernel/flash_attn.py", line 8, in <module>\n'
        "    from sgl_kernel import flash_ops\n"
        "ImportError: cannot import name 'flash_ops' from 'sgl_kernel' "
        "(/root/site/sgl_kernel/__init__.py)\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n" + _SCHEDULER.split("\n", 1)[1] +
        '  File "/root/site/sgl_kernel/flash_attn.py", line 10, in <module>\n'
        "    raise ImportError(\n"
        "ImportError: Can not import FA3 in sgl_kernel. Please check your installation.\n"),
    "global-tree": _TRACEBACK + "Exception: Capture cuda graph failed: NCCL error in: "
                   "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:94, invalid usage (run "
                   "with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
                   "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
                   "Last error:\n" + _NO_ALGO + "\n" + CAPTURE_HELP,
}


def nccl_lines(env: Mapping[str, str], rank: int, tp: int) -> list[str]:
    """The INIT/ENV/TUNING messages one rank prints (without the line prefix)."""
    lines = [f"NCCL version {NCCL_VERSION}"]
    for name in sorted(env):
        if not name.startswith("NCCL_") or name in _NOT_PRINTED:
            continue
        if tp == 1 and name in ("NCCL_ALGO", "NCCL_PROTO"):
            continue  # one rank: NCCL never reads its algorithm settings
        value = f"{strtoll(env[name])}." if name in INT_PARAMS else env[name]
        lines.append(f"{name} set by environment to {value}")
    comm = f"0x{0x55d0c0000000 + rank * 0x1000:x}"
    lines.append(f"comm {comm} rank {rank} nRanks {tp} nNodes 1 localRanks {tp} "
                 f"localRank {rank} MNNVL 0")
    high = strtoll(env["NCCL_MAX_NCHANNELS"]) if "NCCL_MAX_NCHANNELS" in env else DEFAULT_CHANNELS
    low = strtoll(env.get("NCCL_MIN_NCHANNELS", "1"))
    channels = max(1, min(64, max(low, min(high, DEFAULT_CHANNELS))))
    p2p = min(DEFAULT_P2P_CHANNELS, max(1, high)) if "NCCL_MAX_NCHANNELS" in env \
        else DEFAULT_P2P_CHANNELS
    nvls = 16 if tp > 1 and env.get("NCCL_NVLS_ENABLE", "0").strip() not in ("0", "") else 0
    ring = " ".join(str(r) for r in range(tp))
    lines += [f"Channel {c:02d}/{channels:02d} : {ring}" for c in range(channels)]
    lines.append(f"{channels} coll channels, {channels} collnet channels, {nvls} nvls channels, "
                 f"{p2p} p2p channels, {p2p} p2p channels per peer")
    if tp > 1:
        peer = (rank + 1) % tp
        p2p_off = env.get("NCCL_P2P_LEVEL", "").upper() == "LOC" or \
            env.get("NCCL_P2P_DISABLE", "0").strip() == "1"
        cumem = env.get("NCCL_CUMEM_ENABLE", "1").strip() != "0"
        via = "SHM/direct" if p2p_off else ("P2P/CUMEM/read" if cumem else "P2P/IPC")
        for c in range(channels):
            lines.append(f"Channel {c:02d}/0 : {rank}[{rank}] -> {peer}[{peer}] via {via}")
    lines.append(f"comm {comm} rank {rank} nranks {tp} cudaDev {rank} nvmlDev {rank} "
                 f"busId {0x18000 + rank * 0x1000:x} commId 0x7a1e5c0ffee - Init COMPLETE")
    if tp > 1:
        algo = _token(env.get("NCCL_ALGO"), "ring").upper()
        proto = _token(env.get("NCCL_PROTO"), "ll").upper()
        top = min(channels, 4) - 1
        lines.append(f"AllReduce: 114688 Bytes -> Algo {algo} proto {proto} "
                     f"channel{{Lo..Hi}}={{0..{top}}}")
    return lines


def _token(value: str | None, default: str) -> str:
    tokens = knobs.selector_for(value, "allreduce") or []
    plain = [t for t in tokens if not t.startswith("^")]
    return plain[0] if plain else default


def _nccl_out(env: Mapping[str, str]) -> TextIO | None:
    if env.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return None
    target = env.get("NCCL_DEBUG_FILE")
    if not target:
        return sys.stdout
    path = target.replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    return open(path, "a", encoding="utf-8")


def write_nccl_log(rank: int, tp: int, fault: str | None) -> None:
    env = dict(os.environ)
    out = _nccl_out(env)
    if out is None:
        return
    prefix = f"{socket.gethostname()}:{os.getpid()}:{threading.get_native_id()} [{rank}] NCCL"
    try:
        for message in nccl_lines(env, rank, tp):
            out.write(f"{prefix} INFO {message}\n")
        if fault == "global-tree":
            algo = env.get("NCCL_ALGO", "Tree")
            out.write(f"{prefix} WARN enqueue.cc:2003 {_NO_ALGO.format(algo=algo)}\n")
        out.flush()
    finally:
        if out is not sys.stdout:
            out.close()


def stamp(tag: str = "") -> str:
    """SGLang's line prefix, ``[YYYY-mm-dd HH:MM:SS(.mmm)( tag)]``: milliseconds with
    ``SGLANG_LOG_MS`` (srt/utils/common.py ``configure_logger``)."""
    now = time.time()
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true"):
        text += f".{int(now % 1 * 1000):03d}"
    return f"[{text}{' ' + tag if tag else ''}]"


class Ranks:
    """The server's side: start the rank processes, wait for them, stop them."""

    def __init__(self, root: Path) -> None:
        self.root = root  # on the ranks' PYTHONPATH
        self.children: list[tuple[int, subprocess.Popen[bytes]]] = []
        self._read_fd: int | None = None

    def start(self, count: int, tp: int, fault: str | None, delay: float,
              ignore_sigterm: bool, grandchild: bool, model: str = "") -> None:
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)  # inherited: the marker and every NCCL_* reach the ranks
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.root), env.get("PYTHONPATH"))
                                            if p)
        for rank in range(count):
            cmd = [sys.executable, "-m", "simulator.fake_ranks", "--rank", str(rank),
                   "--tp", str(tp), "--ready-fd", str(write_fd), "--delay", str(delay)]
            cmd += ["--fault", fault, "--model", model] if fault else []
            cmd += ["--ignore-sigterm"] if ignore_sigterm else []
            cmd += ["--grandchild"] if grandchild else []
            proc = subprocess.Popen(cmd, env=env, pass_fds=(write_fd,), stdin=subprocess.DEVNULL)
            self.children.append((rank, proc))
        os.close(write_fd)
        self._read_fd = read_fd

    def wait(self, deadline: float) -> str | None:
        """Wait until every rank reported ready; returns SGLang's failure line, if any."""
        assert self._read_fd is not None, "start() first"
        reported: set[int] = set()
        buffer = b""
        try:
            while len(reported) < len(self.children):
                for rank, proc in self.children:
                    if rank not in reported and proc.poll() is not None:
                        return (f"Rank {rank} scheduler died during initialization "
                                f"(exit code: {proc.returncode})")
                if time.monotonic() > deadline:
                    return "Rank 0 scheduler did not start in time"
                readable, _, _ = select.select([self._read_fd], [], [], 0.02)
                if readable:
                    buffer += os.read(self._read_fd, 4096)
                    *lines, buffer = buffer.split(b"\n")
                    reported.update(int(x) for x in lines if x.strip())
            return None
        finally:
            os.close(self._read_fd)
            self._read_fd = None

    def any_dead(self) -> bool:
        return any(proc.poll() is not None for _, proc in self.children)

    def kill_first(self) -> None:
        if self.children:
            self.children[0][1].kill()

    def first_pid(self) -> int:
        return self.children[0][1].pid if self.children else 0

    def first_exit_code(self) -> int | None:
        """Rank 0's exit code once it is gone (a killed rank: -9)."""
        if not self.children:
            return None
        try:
            return self.children[0][1].wait(2.0)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 1.0) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fake_ranks")
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--fault", choices=sorted(STARTUP_FAULTS))
    parser.add_argument("--delay", type=float, default=0.0, help="seconds loading weights")
    parser.add_argument("--model", default="", help="the model path a fault names")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    args = parser.parse_args(argv)
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    write_nccl_log(args.rank, args.tp, args.fault)
    time.sleep(args.delay)
    if args.fault and args.rank == 0:
        text = STARTUP_FAULTS[args.fault].replace("{algo}", os.environ.get("NCCL_ALGO", "Tree"))
        tag = f"TP{args.rank}" if args.tp > 1 else ""  # SGLang tags no rank at TP 1
        sys.stdout.write(f"{stamp(tag)} {text.replace('{model}', args.model)}\n")
        sys.stdout.flush()
        return 1
    if args.fault:  # the other ranks wait in a collective that rank 0 never joins
        while os.getppid() == parent:
            time.sleep(0.05)
        return 1
    if args.grandchild and args.rank == 0:
        # Deliberately left behind in its own session: the tuner must reap it by marker.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.write(args.ready_fd, f"{args.rank}\n".encode())
    os.close(args.ready_fd)
    while os.getppid() == parent:  # like SGLang's schedulers: never outlive the server
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
