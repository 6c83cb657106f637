"""The stand-in's models, in-process: content-dependent acceptance, capture sizes and load times
by SGLang's rules, and step_time_dict as SGLang 0.5.23 fills it."""

from __future__ import annotations

import time

import pytest

from launchers.sglang import datasets
from simulator import content, fake_engine, fake_startup, sglang_server
from simulator.fake_engine import Request

PROSE = ("Paris is the capital of France. It is known for the Eiffel Tower and its museums, "
         "which attract millions of visitors each year.")
CODE = "def f(x):\n    return [y for y in range(x) if y % 2]\nclass A(B):\n    pass"


def args(*argv: str) -> object:
    return sglang_server.build_parser().parse_args(["--model-path", "m", *argv])


def test_predictable_text_accepts_more() -> None:
    builtin = datasets.load("builtin", 256, 16)
    passages = [builtin.prompt("t", i).text for i in range(50)]
    mean = sum(content.accept_scale(t) for t in passages) / len(passages)
    assert content.accept_scale(None) == content.FLOOR  # token ids: no text to predict
    assert content.accept_scale(CODE) < content.accept_scale(PROSE) == 1.0
    assert mean > 0.85 > content.FLOOR
    assert content.predictability("the of and") == 1.0 and content.predictability("") == 0.0
    assert content.count_tokens("Hello, world!") == 4


@pytest.mark.parametrize(("argv", "speculative", "sizes"), [
    (["--cuda-graph-bs-decode", "16", "1", "4", "4"], True, [1, 4, 16]),
    (["--cuda-graph-max-bs-decode", "12"], True, [1, 2, 3, 4, 5, 6, 7, 8, 10, 12]),
    (["--cuda-graph-max-bs-decode", "20"], False, [1, 2, 4, 8, 12, 16, 20]),
    (["--cuda-graph-max-bs-decode", "9"], False, [1, 2, 4, 8, 9]),
    ([], False, [1, 2, 4, 8, 12, 16, 24, 32]),  # the stand-in's default largest batch: 32
    (["--disable-decode-cuda-graph"], True, []),
    (["--cuda-graph-backend-decode", "disabled"], True, []),
])
def test_capture_sizes_follow_sglang(argv: list[str], speculative: bool, sizes: list[int]
                                     ) -> None:
    assert fake_startup.decode_capture_sizes(args(*argv), speculative) == sizes


def test_the_largest_captured_batch_is_the_lists() -> None:
    server = sglang_server.FakeServer(args("--cuda-graph-bs-decode", "1", "4",
                                           "--cuda-graph-max-bs-decode", "64"))
    assert server.flags["--cuda-graph-max-bs-decode"] == 4  # SGLang: max_bs = max(bs)
    assert server.timing(4).graph and not server.timing(5).graph


def test_load_time_by_load_format() -> None:
    real = args("--fake-load-s", "60", "--fake-draft-load-s", "6", "--fake-dummy-load-s", "5")
    assert (fake_startup.target_load_s(real), fake_startup.draft_load_s(real)) == (60.0, 6.0)
    dummy = args("--fake-load-s", "60", "--fake-dummy-load-s", "5", "--load-format", "dummy")
    assert (fake_startup.target_load_s(dummy), fake_startup.draft_load_s(dummy)) == (5.0, 5.0)
    draft_only = args("--fake-load-s", "60", "--fake-draft-load-s", "6", "--fake-dummy-load-s",
                      "5", "--speculative-draft-load-format", "dummy")
    assert fake_startup.target_load_s(draft_only) == 60.0
    assert fake_startup.draft_load_s(draft_only) == 5.0


@pytest.mark.parametrize(("argv", "accepted"), [
    ([], True),
    (["--load-format", "dummy"], False),  # the draft follows --load-format
    (["--speculative-draft-load-format", "dummy"], False),
    (["--load-format", "dummy", "--speculative-draft-load-format", "auto"], False),
])
def test_random_weights_accept_no_drafted_token(argv: list[str], accepted: bool) -> None:
    server = sglang_server.FakeServer(args("--speculative-algorithm", "EAGLE3", *argv))
    timing = server.timing(1)
    assert (timing.accept_length > 1.5) is accepted
    assert accepted or timing.accept_length == 1.0
    assert timing.verify_ms == sglang_server.FakeServer(
        args("--speculative-algorithm", "EAGLE3")).timing(1).verify_ms  # the same work


def test_step_time_dict_follows_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry per --decode-log-interval decode batches, keyed by the running batch size,
    worth the window's time / the interval in seconds (idle time included), on the
    model's deadline clock."""
    monkeypatch.setenv("SGLANG_RECORD_STEP_TIME", "1")
    scale = 0.5  # real seconds per model second: wall-clock overheads stay small
    server = sglang_server.FakeServer(args(
        "--speculative-algorithm", "EAGLE3", "--decode-log-interval", "5", "--fake-noise", "0",
        "--fake-verify-ms", "20", "--fake-draft-ms", "5", "--fake-time-scale", str(scale)))
    engine = server.engine
    engine.last_tic = engine.due = time.monotonic()  # the window opens on the model's clock
    engine.running = [Request("a", 8, 10_000), Request("b", 8, 10_000)]
    for _ in range(4):
        engine._cycle()
    assert engine.step_times == {}  # no window closed yet
    engine._cycle()
    (first,) = engine.step_times["2"]
    # 20 + 5 + 0.5 model ms per step on the model's clock: a late wake-up is not in it
    assert first == pytest.approx(0.0255, rel=1e-6)
    idle_began = engine.due
    time.sleep(0.200 * scale)  # idle: 200 model ms
    engine.due = None  # as the loop goes idle: the model clock restarts with the next step
    for _ in range(5):
        engine._cycle()
    second = engine.step_times["2"][1]
    assert engine.due is not None and idle_began is not None
    idle = engine.due - 5 * 0.0255 * scale - idle_began  # the clock restarted after the idle
    assert idle >= 0.200 * scale
    # the idle time, spread over the 5 steps of the window that holds it
    assert second - first == pytest.approx(idle / scale / 5, rel=1e-6)
    engine.running = engine.running[:1]
    for _ in range(5):
        engine._cycle()
    assert len(engine.step_times["1"]) == 1 and len(engine.step_times["2"]) == 2
    info = server.server_info()["internal_states"][0]
    assert info["step_time_dict"] == engine.step_times
    assert info["avg_spec_accept_length"] > 1.0


def test_no_step_times_without_sglangs_switch() -> None:
    server = sglang_server.FakeServer(args("--decode-log-interval", "1", "--fake-time-scale",
                                           "0.001"))
    server.engine.running = [Request("a", 8, 100)]
    server.engine._cycle()
    assert "step_time_dict" not in server.server_info()["internal_states"][0]


def test_the_model_clock_makes_up_a_stall_of_a_busy_box() -> None:
    """A step that wakes up late (a stalled stand-in on a loaded box) is made up by the steps
    after it, up to CATCH_UP_S behind; past that the clock restarts (a halted box's time is in)."""
    engine = sglang_server.FakeServer(args("--fake-time-scale", "1")).engine
    stalled = time.monotonic() - 1.5  # the previous step was due 1.5 s ago
    engine.due = stalled
    began = time.monotonic()
    engine._sleep(100.0)  # 0.1 s of model time, already overdue: no sleep
    assert time.monotonic() - began < 0.05 and engine.due == pytest.approx(stalled + 0.1)
    halted = engine.due = time.monotonic() - fake_engine.CATCH_UP_S - 0.5
    now = time.monotonic()
    engine._sleep(10.0)
    assert engine.due >= now + 0.01 > halted + 0.01  # restarted from now: not made up
