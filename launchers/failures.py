"""Failures are values: a FailureKind read from the server's own log text and exit code.

The patterns are SGLang's and NCCL's exact texts (shared/reference/sglang.md, nccl.md).
Order matters: the first match wins, most specific first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from launchers import exceptions
from launchers.sglang.release import logs


class FailureKind(str, Enum):
    INVALID_CONFIG = "invalid_config"
    PORT_BUSY = "port_busy"
    GPU_BUSY = "gpu_busy"
    GRAPH_CAPTURE = "graph_capture"
    NCCL_INVALID_USAGE = "nccl_invalid_usage"
    NCCL_ERROR = "nccl_error"
    KV_POOL_OOM = "kv_pool_oom"
    CUDA_OOM = "cuda_oom"
    WATCHDOG_HANG = "watchdog_hang"
    SCHEDULER_DIED = "scheduler_died"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASHED = "crashed"
    CRASHED_MID_BENCHMARK = "crashed_mid_benchmark"
    BENCHMARK_HANG = "benchmark_hang"
    WRONG_RESULT = "wrong_result"
    # The workload cannot run what this configuration asks for (a path it does not model);
    # says nothing about the hardware or the server.
    NOT_MODELLED = "not_modelled"
    # Read from the exception SGLang logs before it kills its own tree (exceptions.py).
    MISSING_WEIGHTS = "missing_weights"
    MISSING_MODULE = "missing_module"
    # A node of a trial across nodes went away (its machine, its Ray node, or servetune's
    # agent there): says nothing about the configuration either.
    NODE_LOST = "node_lost"

    def __str__(self) -> str:
        return self.value


# (kind, pattern) in priority order. Graph capture comes before NCCL: a capture killed by an
# NCCL enqueue error is reported by SGLang as a capture failure, and that is what to fix.
_SIGNATURES: tuple[tuple[FailureKind, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE if ci else 0))
    for kind, pattern, ci in [
        (FailureKind.GRAPH_CAPTURE, logs.GRAPH_CAPTURE_FAILED, True),
        (FailureKind.GRAPH_CAPTURE, r"operation not permitted when stream is capturing", True),
        (FailureKind.GRAPH_CAPTURE, r"cudaErrorStreamCaptureInvalidated", False),
        (FailureKind.NCCL_INVALID_USAGE, r"No algorithm/protocol available for function", True),
        (FailureKind.NCCL_INVALID_USAGE, r"ncclInvalidUsage|invalid usage", False),
        (FailureKind.NCCL_INVALID_USAGE, r"Unrecognized element token", False),
        (FailureKind.NCCL_ERROR, r"NCCL error|ncclSystemError|ncclInternalError|ncclUnhandledCudaError"
                                 r"|ncclRemoteError|DistBackendError", False),
        (FailureKind.KV_POOL_OOM, logs.KV_POOL_OOM, False),
        (FailureKind.CUDA_OOM, r"torch\.OutOfMemoryError|CUDA out of memory|torch\.cuda\.OutOfMemoryError",
         False),
        (FailureKind.WATCHDOG_HANG, logs.WATCHDOG_TIMEOUT, False),
        (FailureKind.SCHEDULER_DIED, logs.SCHEDULER_DIED, True),
        (FailureKind.SCHEDULER_DIED, logs.SIGQUIT, False),
        (FailureKind.PORT_BUSY, logs.PORT_BUSY + r"|address already in use|\[Errno 98\]", True),
    ]
)


def _by_signature(text: str) -> FailureKind | None:
    for kind, pattern in _SIGNATURES:
        if pattern.search(text):
            return kind
    return None


def classify(log_text: str, returncode: int | None) -> FailureKind:
    """The kind of a server failure from its log text and exit code (None: still running).

    The exception SGLang logged comes first (``Scheduler hit an exception: Traceback ...``,
    or a launching process's own traceback): its type and text say what went wrong, where
    the lines after it (``Received sigquit from a child process``, SGLang killing its own
    tree) say only that something did."""
    error = exceptions.logged_exception(log_text)
    if error is not None:
        return _from_exception(error)
    return _by_signature(log_text) or FailureKind.CRASHED


def _from_exception(error: exceptions.LoggedException) -> FailureKind:
    text = f"{error.type}: {error.message}\n{error.traceback}"
    if error.kind_hint == "weights":
        return FailureKind.MISSING_WEIGHTS
    if error.kind_hint == "module":
        return FailureKind.MISSING_MODULE
    if error.kind_hint == "arguments":
        return FailureKind.INVALID_CONFIG
    kind = _by_signature(text)
    if kind in (None, FailureKind.SCHEDULER_DIED, FailureKind.PORT_BUSY):
        return FailureKind.PORT_BUSY if kind is FailureKind.PORT_BUSY else FailureKind.CRASHED
    return kind


def hint(kind: FailureKind, log_text: str, returncode: int | None) -> str:
    """A short, actionable explanation where the text allows one."""
    if kind is FailureKind.SCHEDULER_DIED:
        match = logs.SCHEDULER_EXIT.search(log_text) or logs.SUBPROCESS_EXIT.search(log_text)
        if match and int(match.group(1)) == -9 and exceptions.logged_exception(log_text) is None:
            # SGLang kills its own tree with SIGKILL after any failure: only a scheduler
            # that was SIGKILLed with no exception logged points at the host
            return ("a scheduler process was killed (SIGKILL) with no exception logged: "
                    "the host's OOM killer is the usual cause (see dmesg)")
    if kind is FailureKind.MISSING_WEIGHTS:
        return "the checkpoint has no weights SGLang can read: check --model/--draft-model"
    if kind is FailureKind.MISSING_MODULE:
        return "a module SGLang needs for this configuration is not installed here"
    if kind is FailureKind.GRAPH_CAPTURE and "no algorithm/protocol available" in log_text.lower():
        return "NCCL rejected a collective inside capture: a global NCCL_ALGO? use allreduce:<algo>"
    if kind is FailureKind.KV_POOL_OOM:
        return "increase --mem-fraction-static"
    return ""


@dataclass
class Failure:
    """What went wrong in a trial: its kind, a one-line message, the exit code and log tail."""

    kind: FailureKind
    message: str
    returncode: int | None = None
    log_tail: str = ""
    hint: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kind"] = self.kind.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Failure:
        return cls(**{**data, "kind": FailureKind(data["kind"])})

    @classmethod
    def from_log(cls, log_text: str, returncode: int | None, message: str = "",
                 tail_lines: int = 40) -> Failure:
        """The failure a server's log shows. With an exception logged, the message is the
        exception (type and text) and the tail is its traceback's end, not the teardown
        lines after it."""
        kind = classify(log_text, returncode)
        error = exceptions.logged_exception(log_text)
        details: dict[str, Any] = {}
        if error is not None:
            tail = "\n".join(error.traceback.splitlines()[-tail_lines:])
            first = message or error.summary()
            details["exception"] = error.to_json()
        else:
            tail = "\n".join(log_text.splitlines()[-tail_lines:])
            first = message or _first_error_line(log_text) or f"exited with code {returncode}"
        return cls(kind, first, returncode, tail, hint(kind, log_text, returncode), details)


def _first_error_line(log_text: str) -> str:
    for kind, pattern in _SIGNATURES:
        for line in log_text.splitlines():
            if pattern.search(line):
                return line.strip()[:300]
        del kind
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


class TrialFailed(Exception):
    """Raised inside a trial; Ray records it, servetune's recorder reads the Failure back."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(f"[{failure.kind.value}] {failure.message}")
        self.failure = failure

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.failure.to_json(),))


def _rebuild(data: dict[str, Any]) -> TrialFailed:
    return TrialFailed(Failure.from_json(data))


_KIND_IN_TEXT = re.compile(r"TrialFailed: \[([a-z_]+)\] (.*)")
# Ray's texts for an actor (the trial, on node 0) whose node went away: its GCS's ("The actor
# died because its node has died. Node Id: ...", "the actor's node was terminated
# unexpectedly: ...") and, before the GCS has noticed, the driver's own (ActorUnavailableError:
# "The actor <id> is unavailable: ... RpcError: ... Socket closed", its node's raylet gone).
_NODE_DIED = re.compile(r"its node has died|the actor's node was (?:terminated|preempted)"
                        r"|NodeDiedError|The actor \w+ is unavailable")


def failure_from_error_text(text: str) -> Failure:
    """Recover a Failure from Ray's error text (error.txt) when the pickle is unavailable.
    A trial whose own node died (node 0 of a trial across nodes) is ``node_lost``."""
    match = _KIND_IN_TEXT.search(text)
    if match:
        try:
            return Failure(FailureKind(match.group(1)), match.group(2).strip(), log_tail=text[-4000:])
        except ValueError:
            pass
    died = _NODE_DIED.search(text)
    if died:
        line = next(ln.strip() for ln in text.splitlines() if died.group(0) in ln)
        return Failure(FailureKind.NODE_LOST, f"the trial's own node lost: {line[:300]}",
                       log_tail=text[-4000:], details={"node": "node 0", "node_rank": 0})
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return Failure(FailureKind.CRASHED, lines[-1][:300] if lines else "trial errored",
                   log_tail=text[-4000:])


# Kinds a node can meet by itself (its fabric, its GPUs' memory, its machine): read from a
# follower's log only, they say little about the configuration until they repeat elsewhere.
FOLLOWER_KINDS = frozenset({FailureKind.NCCL_ERROR.value, FailureKind.CRASHED.value,
                            FailureKind.CUDA_OOM.value})


def follower_placement(failure: Mapping[str, Any] | None) -> str | None:
    """Where a failure read from a follower's log only (a node of rank >= 1 named, a kind
    of FOLLOWER_KINDS) happened: the trial's nodes as one key (their set). None for any other
    failure (node 0's, one node's, another kind)."""
    if not failure or str(failure.get("kind")) not in FOLLOWER_KINDS:
        return None
    details = failure.get("details") or {}
    nodes = details.get("placement")
    if not isinstance(details.get("node_rank"), int) or details["node_rank"] < 1 or not nodes:
        return None
    return ",".join(sorted(str(n) for n in nodes))
