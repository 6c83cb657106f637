"""The proxy's accept length: read per speculative shape from a server experiment's journal
(``--accept-length-from``), used for those shapes (labelled measured, else assumed), and no
speculative shape ranked without a measurement (the knobs leave the space, the plan says
why)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launchers.base import TrialContext
from launchers.proxy.acceptance import MeasuredAccept
from launchers.proxy.launcher import ProxyArgs, ProxyWorkload
from search_spaces.space import load
from tuner import cli
from tuner.output.acceptance import measured_acceptance
from tuner.setup import prepare
from tuner.spec import ExperimentSpec

SPEC = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


def _server_experiment(out: Path) -> Path:
    """A server experiment's journal: the baseline twice (search + confirm), two shapes, a
    reference launch without speculative decoding, and a trial with no accept length."""
    out.mkdir(parents=True)
    events: list[dict[str, Any]] = []

    def trial(tid: str, shape: tuple[Any, ...], accepts: list[float | None], **tags: Any
              ) -> None:
        config = {"NCCL_ALGO": None, **dict(zip(SPEC, shape, strict=True))}
        events.append({"event": "start", "trial_id": tid, "order": len(events),
                       "config": config, **tags})
        for r, a in enumerate(accepts, 1):
            events.append({"event": "result", "trial_id": tid, "round": r, "accept_length": a,
                           "output_throughput": 100.0})
        events.append({"event": "end", "trial_id": tid, "status": "ok"})

    trial("base", (None, None, None), [2.5, 2.7])
    trial("c-base", (None, None, None), [2.9, 2.9], phase="confirm")
    trial("small", (2, 1, 3), [2.1, 2.1])
    trial("deep", (4, 1, 6), [3.2, None, 3.4])
    trial("ref", (None, None, None), [None, None], phase="confirm", variant="no_speculative")
    (out / "results.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return out


def test_the_measured_accept_length_per_shape(tmp_path: Path) -> None:
    table = measured_acceptance(_server_experiment(tmp_path / "server"))
    got = {(m["steps"], m["topk"], m["draft_tokens"]): (m["accept_length"], m["launches"])
           for m in table}
    assert got == {(None, None, None): (pytest.approx(2.75), 2),  # (2.6 + 2.9) / 2 launches
                   (2, 1, 3): (pytest.approx(2.1), 1), (4, 1, 6): (pytest.approx(3.3), 1)}
    assert {m["source"] for m in table} == {str(tmp_path / "server")}
    MeasuredAccept.model_validate(table[0])  # the proxy's args take them as they are


def test_no_measurement_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a servetune experiment"):
        measured_acceptance(tmp_path)
    (tmp_path / "results.jsonl").write_text(json.dumps(
        {"event": "start", "trial_id": "t", "order": 0, "config": {}}) + "\n")
    with pytest.raises(ValueError, match="no trial measured accept_length"):
        measured_acceptance(tmp_path)


def _spec(tmp_path: Path, table: list[dict[str, Any]]) -> ExperimentSpec:
    return ExperimentSpec(name="p", out_dir=tmp_path / "p", space="verify-campaign",
                          workload=ProxyArgs(device="cpu", accept_lengths=table))


def test_without_a_measurement_the_speculative_stage_leaves_the_space(tmp_path: Path) -> None:
    setup = prepare(_spec(tmp_path, []))
    assert not set(SPEC) & set(setup.space.domains)
    assert "NCCL_ALGO" in setup.space.domains
    stage = next(s for s in setup.space.stages if s.name == "speculative")
    assert stage.knobs == ()
    note = next(n for n in setup.unmodelled if n.startswith(SPEC[0]))
    assert "no measured accept length for any speculative shape" in note
    assert "--accept-length-from" in note


def test_with_measurements_only_measured_shapes_are_ranked(tmp_path: Path) -> None:
    table = measured_acceptance(_server_experiment(tmp_path / "server"))
    setup = prepare(_spec(tmp_path, table))
    domains = setup.space.domains
    # verify-campaign's steps [2, 3, 4], topk [1, 2], drafts [3, 4, 6]: the measured values stay
    assert domains["--speculative-num-steps"] == (None, 2, 4)
    assert domains["--speculative-num-draft-tokens"] == (None, 3, 6)
    assert "--speculative-eagle-topk" in domains and domains["--speculative-eagle-topk"] == (
        None, 1)
    base = setup.space.baseline()
    assert setup.space.validate({**base, SPEC[0]: 2, SPEC[1]: 1, SPEC[2]: 3}) == []
    reasons = setup.space.validate({**base, SPEC[0]: 4, SPEC[1]: 1, SPEC[2]: 3})
    assert reasons == ["--speculative-num-steps=4, --speculative-eagle-topk=1, "
                       "--speculative-num-draft-tokens=3: no measured accept length for this "
                       "speculative shape"]
    assert any("--speculative-num-steps=3: no measured accept length" in n
               for n in setup.unmodelled)


def test_a_measurement_without_the_baselines_shape_ranks_nothing(tmp_path: Path) -> None:
    table = [{"steps": 2, "topk": 1, "draft_tokens": 3, "accept_length": 2.0}]
    setup = prepare(_spec(tmp_path, table))
    assert not set(SPEC) & set(setup.space.domains)
    assert any("no measured accept length for the baseline's shape" in n
               for n in setup.unmodelled)


def test_the_plan_uses_the_measured_length_and_labels_the_assumed(tmp_path: Path) -> None:
    table = [MeasuredAccept(steps=4, topk=1, draft_tokens=6, accept_length=3.3, source="srv")]
    workload = ProxyWorkload(ProxyArgs(device="cpu", accept_lengths=table, accept_length=3.0))
    ctx = TrialContext("e", "t", tmp_path / "t", port=12345)
    measured = workload.plan({SPEC[0]: 4, SPEC[1]: 1, SPEC[2]: 6}, ctx)
    argv = list(measured.argv)
    assert argv[argv.index("--accept-length") + 1] == "3.3"
    assert argv[argv.index("--accept-length-source") + 1] == "measured"
    assert "accept length 3.3, measured in srv" in measured.notes
    assumed = list(workload.plan({SPEC[2]: 3}, ctx).argv)
    assert assumed[assumed.index("--accept-length") + 1] == "3.0"
    assert assumed[assumed.index("--accept-length-source") + 1] == "assumed"


def test_the_cli_reads_the_folder_and_plans_with_it(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    server = _server_experiment(tmp_path / "server")
    assert cli.main(["plan", "--accept-length-from", str(server), "--space", "speculative",
                     "--out", str(tmp_path / "p"), "--samples", "2"]) == 0
    printed = capsys.readouterr().out
    assert "speculative shapes: only the 3 with a measured accept length are ranked" in printed
    assert "--accept-length-source measured" in printed
    assert cli.main(["plan", "--accept-length-from", str(tmp_path / "nowhere"), "--out",
                     str(tmp_path / "q")]) == 2
    assert "--accept-length-from" in capsys.readouterr().err
    assert cli.main(["plan", "--accept-length-from", str(server), "--model", "m", "--out",
                     str(tmp_path / "r")]) == 2
    assert "not an option of the sglang workload" in capsys.readouterr().err
    assert load("speculative").domains  # the preset itself is untouched
