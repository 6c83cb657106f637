"""The recorder (a Ray Tune callback) without a Tuner: every event journaled as it happens,
results.csv rewritten at each end, outcomes fed to the searcher, launch order continued
across a resume, and the recorder survives the pickling a resume puts it through."""

from __future__ import annotations

import json
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from search_spaces.knobs import Value
from tuner.record.files import JOURNAL, RESULTS_CSV, read_journal
from tuner.run.recorder import Recorder
from tuner.spec import Objective

BASELINE: dict[str, Value] = {"NCCL_PROTO": None}


@dataclass
class FakeTrial:
    """The attributes of ray.tune.experiment.Trial the recorder reads."""

    trial_id: str
    config: dict[str, Value]
    storage: Any = None
    error_file: str | None = None
    pickled_error_file: str | None = None

    def get_pickled_error(self) -> None:
        return None

    def get_error(self) -> str:
        return ("ray.exceptions.RayTaskError: launchers.failures.TrialFailed: [nccl_error] "
                "NCCL error: unhandled system error")


@dataclass
class Feed:
    seen: list[tuple[str, str | None]] = field(default_factory=list)

    def record_outcome(self, trial_id: str, config: Mapping[str, Value], kind: str | None,
                       placement: str | None = None) -> None:
        self.seen.append((trial_id, kind))


def test_events_are_journaled_and_the_table_follows(tmp_path: Path) -> None:
    feed = Feed()
    rec = Recorder(tmp_path, Objective("tok_s", "max", 2), BASELINE, feed=feed,
                   stage_of=lambda tid: "allreduce", tags={"phase": "search"})
    ok, bad = FakeTrial("a", dict(BASELINE)), FakeTrial("b", {"NCCL_PROTO": "LL"})
    rec.on_trial_start(0, [], ok)
    rec.on_trial_start(0, [], bad)
    for r in (1, 2):
        rec.on_trial_result(0, [], ok, {"tok_s": 10.0 * r, "round": r, "done": False,
                                        "training_iteration": r})
    rec.on_trial_complete(0, [], ok)
    rec.on_trial_error(0, [], bad)
    events = read_journal(tmp_path / JOURNAL)
    assert [e["event"] for e in events] == ["start", "start", "result", "result", "end", "end"]
    assert events[0]["order"] == 0 and events[1]["order"] == 1
    assert events[0]["stage"] == "allreduce" and events[0]["phase"] == "search"
    assert "training_iteration" not in events[2] and events[3]["tok_s"] == 20.0
    assert events[5]["failure"]["kind"] == "nccl_error"
    assert feed.seen == [("a", None), ("b", "nccl_error")]
    table = (tmp_path / RESULTS_CSV).read_text().splitlines()
    assert table[0].startswith("trial_id,") and len(table) == 3


def test_launch_order_continues_after_a_resume(tmp_path: Path) -> None:
    rec = Recorder(tmp_path, Objective("tok_s", "max", 1), BASELINE)
    rec.on_trial_start(0, [], FakeTrial("a", dict(BASELINE)))
    again = pickle.loads(pickle.dumps(rec))  # as tuner.pkl brings it back on --resume
    again.setup()
    again.on_trial_start(0, [], FakeTrial("b", {"NCCL_PROTO": "LL"}))
    orders = [e["order"] for e in read_journal(tmp_path / JOURNAL) if e["event"] == "start"]
    assert orders == [0, 1]


class LostTrial(FakeTrial):
    """A trial across nodes whose own node (node 0) died under it: Ray's text, no pickle."""

    def get_error(self) -> str:
        return ("ray.exceptions.ActorUnavailableError: The actor 85ce1e5d8966cf0b1884504702 is "
                "unavailable: The actor is temporarily unavailable: RpcError: RPC error: Socket "
                "closed rpc_code: 14. The task may or may not have been executed on the actor.")


def test_a_trial_that_died_with_its_node_0_is_node_lost_with_that_node_named(
        tmp_path: Path) -> None:
    feed = Feed()
    rec = Recorder(tmp_path, Objective("tok_s", "max", 2), BASELINE, feed=feed)
    lost = LostTrial("c", {"NCCL_PROTO": "LL"})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "nodes.json").write_text(json.dumps([
        {"rank": 0, "node_id": "a1b2c3d4e5f6a7b8c9d0", "address": "10.0.0.7"},
        {"rank": 1, "node_id": "ffff", "address": "10.0.0.8"}]))
    rec.on_trial_start(0, [], lost)
    rec.on_trial_error(0, [], lost)
    [end] = [e for e in read_journal(tmp_path / JOURNAL) if e["event"] == "end"]
    failure = end["failure"]
    assert failure["kind"] == "node_lost" and failure["details"]["node_rank"] == 0
    assert failure["message"].startswith("node 0 (Ray node a1b2c3d4e5f6a7b8, 10.0.0.7) lost: "
                                         "ray.exceptions.ActorUnavailableError"), failure
    assert feed.seen == [("c", "node_lost")]  # the memory passes over it (environmental)
