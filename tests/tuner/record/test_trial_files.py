"""The files the searchers and the trials write, as typed records: rejected.jsonl and
completed.jsonl (an entry written reads back equal, a line that is no entry is skipped),
stages.json, a trial's failure.json and effective.json, and the profile's entry.json and
profile.json (its short form for reports)."""

from __future__ import annotations

import json
from pathlib import Path

from tuner.record.experiment import Experiment
from tuner.record.files import (
    BEST_DIR,
    COMPLETED,
    FAILURE_JSON,
    INPUTS_JSON,
    LAUNCH_SH,
    NODES_JSON,
    PROFILE_DIR,
    REJECTED,
    SCREEN_JSON,
    STAGES_JSON,
)
from tuner.record.info import (
    Completed,
    InputsRecord,
    Rejected,
    ScreenRecord,
    StageRecord,
    append_entry,
    read_entries,
    read_launch_script,
    read_record,
    read_stages,
    write_record,
    write_stages,
)
from tuner.record.profile import (
    ProfileEntry,
    ProfileRecord,
    SummaryEntry,
    read_profile,
    write_entry,
    write_profile,
)
from tuner.record.trial_file import (
    NodeRecord,
    read_effective,
    read_nodes,
    write_effective,
    write_failure,
    write_nodes,
)


def test_rejected_and_completed_round_trip(tmp_path: Path) -> None:
    repeat = Rejected(config={"NCCL_PROTO": "LL"}, repeat_of="1e5")
    invalid = Rejected(config={"NCCL_PROTO": "LL"}, invalid=["SGLang refuses it"])
    for entry in (repeat, invalid):
        append_entry(tmp_path / REJECTED, entry)
    with open(tmp_path / REJECTED, "a") as f:
        f.write('{"invalid": "not a list"}\n[1]\n')
    append_entry(tmp_path / COMPLETED, Completed(config={"a": 1}, partners={"b": 2}))
    exp = Experiment.load(tmp_path)
    assert exp.rejected == (repeat, invalid)
    assert exp.rejected[0].repeat and exp.rejected[0].repeat_of == "1e5"
    assert not exp.rejected[1].repeat
    assert read_entries(tmp_path / COMPLETED, Completed)[0].partners == {"b": 2}


def test_stages_round_trip(tmp_path: Path) -> None:
    stages = [StageRecord(stage="baseline", pass_=1, winner="t0", config={}),
              StageRecord(stage="nccl", pass_=1, winner="t3", config={"a": 1}, pins={"w": 0})]
    write_stages(tmp_path / STAGES_JSON, stages)
    data = json.loads((tmp_path / STAGES_JSON).read_text())
    assert data[0]["pass"] == 1 and "pins" not in data[0] and data[1]["pins"] == {"w": 0}
    assert read_stages(tmp_path / STAGES_JSON) == tuple(stages)


def test_failure_and_effective(tmp_path: Path) -> None:
    write_failure(tmp_path, {"kind": "oom", "message": "out of memory", "returncode": 1,
                             "log_tail": "", "hint": "", "details": {}})
    assert json.loads((tmp_path / FAILURE_JSON).read_text())["kind"] == "oom"
    write_effective(tmp_path, {"NCCL_PROTO": "LL", "warnings": []})
    # effective.json is a versioned record now: the file carries schema_version
    assert read_effective(tmp_path) == {"schema_version": 1, "NCCL_PROTO": "LL", "warnings": []}
    write_effective(tmp_path, {"nranks": 2, "choices": [{"collective": "AllReduce"}],
                               "columns": {"nccl_nranks": 2}, "warnings": ["w"]})
    effective = read_effective(tmp_path)
    assert effective is not None and (effective.nranks, effective.warnings) == (2, ["w"])
    assert effective.choices == [{"collective": "AllReduce"}]
    assert read_effective(tmp_path / "none") is None


def test_profile_round_trips(tmp_path: Path) -> None:
    verify = {"kind": "verify", "batch_size": None, "steps": 2, "ranks": 2, "step_ms": 3.0,
              "split_ms": {"collective": 1.0, "custom_allreduce": 0.0, "compute": 1.5,
                           "memcpy": 0.25, "gap": 0.25},
              "kernel_ms": {}, "communication_ms": 1.0, "compute_ms": 1.5, "other_ms": 0.5,
              "sentence": "verify 3.00 ms", "top_kernels": []}
    ok = ProfileEntry(label="baseline", trial_id="52e91234", status="ok", verify=verify,
                      sentence="verify 3.00 ms", measured={"verify_ms": 2.9}, device="cpu")
    failed = ProfileEntry(label="best", failure={"kind": "oom", "message": "no memory"})
    write_entry(tmp_path, ok)
    assert json.loads((tmp_path / "entry.json").read_text())["verify"]["kernel_ms"] == {}
    write_profile(tmp_path, ProfileRecord(workload="proxy", steps=2, entries=[ok, failed]))
    assert (tmp_path / PROFILE_DIR / "profile.json").is_file()
    doc = read_profile(tmp_path)
    assert doc is not None and doc.entries == [ok, failed] and doc.on_cpu
    assert ok.name == "baseline (52e91234)" and failed.name == "best"
    short = SummaryEntry.of(ok)
    assert (short.trial_id, short.step_ms, short.collective_ms, short.measured_verify_ms) == \
        ("52e91234", 3.0, 1.0, 2.9)
    short = SummaryEntry.of(failed)
    assert (short.failure_kind, short.failure, short.step_ms) == ("oom", "no memory", None)
    assert read_profile(tmp_path / "none") is None


def test_nodes_json_is_read_in_node_order(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text(json.dumps([
        {"rank": 0, "node_id": "52e91234", "address": "10.0.0.1", "gpu_ids": [0, 1]},
        {"rank": 1, "node_id": "ab", "address": "10.0.0.2", "hostname": "h2"}]))
    nodes = read_nodes(tmp_path / "nodes.json")
    assert [n.node_id for n in nodes] == ["52e91234", "ab"] and nodes[1].hostname == "h2"
    assert nodes[0].dump()["gpu_ids"] == [0, 1]  # a key kept as written
    assert read_nodes(tmp_path / "none.json") == []


def test_nodes_json_round_trips(tmp_path: Path) -> None:
    nodes = [NodeRecord.model_validate({"rank": 0, "node_id": "52e91234", "pid": 7}),
             NodeRecord.model_validate({"rank": 1, "node_id": "ab", "marker": "e/t/node1"})]
    write_nodes(tmp_path, nodes)
    assert json.loads((tmp_path / NODES_JSON).read_text())[1] == {
        "rank": 1, "node_id": "ab", "marker": "e/t/node1"}
    assert read_nodes(tmp_path / NODES_JSON) == nodes


def test_inputs_screen_and_launch_script(tmp_path: Path) -> None:
    write_record(tmp_path / INPUTS_JSON, InputsRecord(dataset={"name": "sharegpt"}))
    assert json.loads((tmp_path / INPUTS_JSON).read_text()) == {
        "schema_version": 1, "dataset": {"name": "sharegpt"}}
    screen = ScreenRecord(settings=[{"NCCL_PROTO": "LL"}], proxy=[1.0], server=[2.0],
                          roles=["baseline"], n=1, spearman=None, interval=None)
    write_record(tmp_path / SCREEN_JSON, screen)
    assert read_record(tmp_path / SCREEN_JSON, ScreenRecord) == screen
    assert read_launch_script(tmp_path) is None
    (tmp_path / BEST_DIR).mkdir()
    (tmp_path / BEST_DIR / LAUNCH_SH).write_text("sglang serve\n")
    assert read_launch_script(tmp_path) == "sglang serve\n"
