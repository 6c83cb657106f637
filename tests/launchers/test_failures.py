"""classify() on SGLang's and NCCL's own texts (shared/reference/sglang.md, nccl.md)."""

from __future__ import annotations

import pickle

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


def test_older_nccl_lowercase_spelling_is_recognised() -> None:
    text = "NCCL WARN Error : no algorithm/protocol available for function AllGather"
    assert classify(text, 1) is K.NCCL_INVALID_USAGE
