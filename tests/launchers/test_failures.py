"""classify() on SGLang's and NCCL's own texts (shared/reference/sglang.md, nccl.md)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from launchers.failures import (
    Failure,
    FailureKind,
    TrialFailed,
    classify,
    failure_from_error_text,
)

K = FailureKind


@pytest.mark.parametrize("text,code,kind", [
    ("Capture cuda graph failed: NCCL error: invalid usage\nPossible solutions: 1. set "
     "--mem-fraction-static to a smaller value", 1, K.GRAPH_CAPTURE),
    ("Capture prefill CUDA graph failed: out of memory", 1, K.GRAPH_CAPTURE),
    ("NCCL WARN No algorithm/protocol available for function AllGather with datatype "
     "ncclInt8. NCCL_ALGO was set to Tree.", 1, K.NCCL_INVALID_USAGE),
    ("torch.distributed.DistBackendError: NCCL error in: ... ncclInvalidUsage", 1,
     K.NCCL_INVALID_USAGE),
    ("NCCL WARN Unrecognized element token bogus", 1, K.NCCL_INVALID_USAGE),
    ("RuntimeError: NCCL error: unhandled system error", 1, K.NCCL_ERROR),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", 1,
     K.KV_POOL_OOM),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", 1, K.CUDA_OOM),
    ("Scheduler hit an exception: watchdog timeout (self.watchdog_timeout=300)", -9,
     K.WATCHDOG_HANG),
    ("Rank 3 scheduler died during initialization (exit code: -9)", 1, K.SCHEDULER_DIED),
    ("Received sigquit from a child process. It usually means the child failed.", -9,
     K.SCHEDULER_DIED),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
     "address already in use", 1, K.PORT_BUSY),
    ("Port is already in use.", 1, K.PORT_BUSY),
    ("Traceback (most recent call last):\nValueError: something else", 1, K.CRASHED),
])
def test_classify_real_texts(text: str, code: int, kind: FailureKind) -> None:
    assert classify(text, code) is kind


def test_scheduler_killed_by_oom_killer_gets_a_hint() -> None:
    failure = Failure.from_log("Rank 0 scheduler died during initialization (exit code: -9)", -9)
    assert failure.kind is K.SCHEDULER_DIED
    assert "OOM" in failure.hint


def test_graph_capture_with_global_tree_hints_per_collective() -> None:
    text = ("Capture cuda graph failed: ...\nNo algorithm/protocol available for function "
            "AllGather")
    assert "allreduce:" in Failure.from_log(text, 1).hint


def test_trial_failed_survives_pickling_with_its_kind() -> None:
    err = TrialFailed(Failure(K.GRAPH_CAPTURE, "capture failed", 1, "tail"))
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, TrialFailed) and back.failure.kind is K.GRAPH_CAPTURE
    assert str(back) == "[graph_capture] capture failed"


def test_kind_recovered_from_ray_error_text() -> None:
    text = "Traceback ...\nlaunchers.failures.TrialFailed: [startup_timeout] not ready after 5 s"
    failure = failure_from_error_text(text)
    assert failure.kind is K.STARTUP_TIMEOUT and failure.message == "not ready after 5 s"


def test_a_trial_whose_own_node_died_is_node_lost() -> None:
    """Node 0 of a trial across nodes is the trial's own node: Ray's text for its actor."""
    text = ("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this "
            "task.\n\tclass_name: ImplicitFunc\n\tactor_id: 5f1c\n\tpid: 4242\nThe actor "
            "died because its node has died. Node Id: 8a2bc1\n\tthe actor's node was "
            "terminated unexpectedly: health check failed")
    failure = failure_from_error_text(text)
    assert failure.kind is K.NODE_LOST and failure.details["node_rank"] == 0
    assert "Node Id: 8a2bc1" in failure.message
    other = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."
    assert failure_from_error_text(other).kind is K.CRASHED


def test_older_nccl_lowercase_spelling_is_recognised() -> None:
    text = "NCCL WARN Error : no algorithm/protocol available for function AllGather"
    assert classify(text, 1) is K.NCCL_INVALID_USAGE


# ---------------------------------------------------------------- real SGLang logs
# Logs of SGLang 0.5.16 on an H200 (benchmarks/gpu_session.sh sglang-probe), kept whole.
LOGS = Path(__file__).parent / "logs"


def _real(name: str) -> str:
    return (LOGS / f"sglang-0.5.16-h200-{name}.log").read_text()


@pytest.mark.parametrize("name,kind,message", [
    ("noweights", K.MISSING_WEIGHTS,
     "RuntimeError: Cannot find any model weights with `.models/tiny-llama`"),
    ("fa3", K.MISSING_MODULE,
     "ImportError: Can not import FA3 in sgl_kernel. Please check your installation."),
    ("topk", K.INVALID_CONFIG,
     "AssertionError in /sglang/srt/arg_groups/speculative_hook.py:560 in "
     "_handle_eagle_family: server_args.speculative_eagle_topk is None"),
])
def test_real_failures_are_named_by_their_own_exception(name: str, kind: FailureKind,
                                                        message: str) -> None:
    """SGLang logs the exception, then 'Received sigquit from a child process' and kills its
    own tree (exit -9): the kind and message come from the exception, and no OOM hint."""
    failure = Failure.from_log(_real(name), -9)
    assert failure.kind is kind
    assert failure.message == message
    assert "OOM" not in failure.hint and "sigquit" not in failure.message
    assert failure.log_tail.splitlines()[-1].startswith(message.split(" in ")[0].split(":")[0])
    assert "kill_process_tree" not in failure.log_tail  # the teardown after it is not the error


def test_the_first_scheduler_exception_wins_over_later_ones() -> None:
    """At TP > 1 every rank logs its own exception; the first is the cause."""
    first = _real("noweights").splitlines()
    block = [ln.replace("] Scheduler", " TP0] Scheduler") for ln in first]
    nccl = ["[2026-12-01 16:28:22.000 TP1] Scheduler hit an exception: Traceback (most recent "
            "call last):", '  File "/x/sglang/srt/managers/scheduler.py", line 1, in f',
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1",
            ""]
    failure = Failure.from_log("\n".join([*block, *nccl]), -9)
    assert failure.kind is K.MISSING_WEIGHTS


def test_oom_hint_needs_a_sigkilled_scheduler_and_no_exception() -> None:
    killed = ("[2026-12-01 10:00:00.000] Subprocess scheduler_0 (pid=12) crashed with exit code "
              "-9. Triggering SIGQUIT for cleanup...\n[2026-12-01 10:00:00.001] SIGQUIT "
              "received. signum=None, frame=None. It usually means one child failed.\n")
    assert "OOM" in Failure.from_log(killed, -9).hint
    assert Failure.from_log(killed, -9).kind is K.SCHEDULER_DIED
    assert Failure.from_log(_real("noweights") + killed, -9).hint.find("OOM") == -1


def test_a_plain_value_error_is_no_argument_check() -> None:
    text = ("Traceback (most recent call last):\n  File \"/x/app.py\", line 3, in main\n"
            "ValueError: something else\n")
    failure = Failure.from_log(text, 1)
    assert failure.kind is K.CRASHED and failure.message == "ValueError: something else"
