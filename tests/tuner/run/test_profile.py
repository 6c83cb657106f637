"""`servetune profile` on the proxy over 2 gloo ranks (no Ray): a finished experiment's
baseline and chosen config are launched, measured, profiled and stopped; the breakdown comes
back as profile.json, breakdown.txt, breakdown.png and ``profile_summary``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from launchers.process import marked_processes, reap_all
from launchers.proxy.launcher import ProxyArgs
from launchers.sglang.launcher import SGLangArgs
from tuner import cli
from tuner.cli.args import spec_from_args
from tuner.output.profile_report import profile_summary
from tuner.record.spec_file import save_spec
from tuner.run import profile
from tuner.setup import prepare
from tuner.spec import ExperimentSpec

CHOSEN = {"NCCL_ALGO": "allreduce:ring", "--speculative-num-steps": 3,
          "--speculative-num-draft-tokens": 4}


def experiment(tmp_path: Path, best: dict[str, Any] | None = None) -> ExperimentSpec:
    """A finished experiment's folder as `servetune run` leaves it, trimmed to what
    `servetune profile` reads: servetune.json, results.csv, best.json."""
    spec = ExperimentSpec(name=f"proftest-{os.getpid()}", out_dir=tmp_path / "exp",
                          workload=ProxyArgs(model="tiny", kv_len=64, iters_per_round=3))
    save_spec(spec)
    (spec.out_dir / "results.csv").write_text(
        "trial_id,order,phase,baseline,status\nt0001,1,search,False,ok\n"
        "t0000,0,search,True,ok\n")
    if best is not None:
        (spec.out_dir / "best.json").write_text(json.dumps(best))
    return spec


@pytest.fixture
def no_leftovers() -> Any:
    prefix = f"proftest-{os.getpid()}@"
    yield
    left = marked_processes(prefix)
    reap_all(prefix)
    assert not left, f"processes survived the test: {left}"


def test_profile_baseline_and_best(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   no_leftovers: None) -> None:
    spec = experiment(tmp_path, {"trial_id": "t0007", "config": CHOSEN})
    assert cli.main(["profile", str(spec.out_dir), "--steps", "2"]) == 0
    out = capsys.readouterr().out
    root = spec.out_dir / "profile"
    for name in ("profile.json", "breakdown.txt", "breakdown.png"):
        assert (root / name).is_file(), name
    for label in ("baseline", "best"):
        assert f"{label}: verify " in out and " ms communication + " in out
        assert (root / label / "traces" / "rank1.trace.json.gz").is_file()
        assert (root / label / "proxy.log").is_file()
    assert "baseline (t0000)" in (root / "breakdown.txt").read_text()  # from results.csv

    summary = profile_summary(spec.out_dir)
    assert summary is not None and summary.workload == "proxy" and summary.steps == 2
    assert summary.plot == str((root / "breakdown.png").absolute())
    base, best = summary.entries
    assert (base.label, base.trial_id, best.label, best.trial_id) == \
        ("baseline", "t0000", "best", "t0007")
    for e in (base, best):
        assert e.status == "ok" and e.failure_kind is None
        assert e.sentence is not None and e.sentence.startswith("verify ")
        assert e.ranks == 2 and e.steps == 2
        assert e.step_ms == pytest.approx(e.communication_ms + e.compute_ms + e.other_ms)
        assert e.collective_ms > 0 and e.compute_ms > 0  # gloo and CPU matmuls
        assert e.measured_verify_ms > 0 and e.device == "cpu"
    doc = json.loads((root / "profile.json").read_text())
    assert doc["entries"][1]["config"]["NCCL_ALGO"] == "allreduce:ring"
    assert doc["entries"][1]["config"]["NCCL_NVLS_ENABLE"] == 0  # completed with the pins


def test_profile_a_given_config_only(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     no_leftovers: None) -> None:
    spec = experiment(tmp_path)
    code = cli.main(["profile", str(spec.out_dir), "--no-baseline", "--pin",
                     "NCCL_PROTO=Simple", "--label", "simple", "--steps", "1"])
    assert code == 0
    summary = profile_summary(spec.out_dir)
    assert summary is not None
    assert [e.label for e in summary.entries] == ["simple"]
    assert "simple: verify " in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--config", "{nope"], "--config: not JSON"),
    (["--config", "[1]"], "expected a JSON object"),
    (["--config", '{"NCCL_NO_SUCH": 1}'], "NCCL_NO_SUCH"),
    (["--config", "@/no/such/file.json"], "--config @/no/such/file.json"),
    (["--pin", "NCCL_ALGO"], "expected NAME=VALUE"),
    (["--no-baseline"], "nothing to profile"),
    (["--steps", "0"], "--steps"),
])
def test_bad_input_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             argv: list[str], message: str) -> None:
    spec = experiment(tmp_path)
    assert cli.main(["profile", str(spec.out_dir), *argv]) == cli.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
    assert not (spec.out_dir / "profile").exists()


def test_not_an_experiment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profile", str(tmp_path)]) == cli.EXIT_BAD_INPUT
    assert "not a servetune experiment" in capsys.readouterr().err
    assert profile_summary(tmp_path) is None


def test_targets(tmp_path: Path) -> None:
    spec = experiment(tmp_path, {"trial_id": "t0000", "config": {}})  # the baseline won
    setup = prepare(spec)
    (only,) = profile.experiment_targets(setup)
    assert only.label == "baseline" and only.config == setup.space.baseline()
    given = profile.experiment_targets(setup, {"NCCL_PROTO": "LL"}, label="ll")
    assert [t.label for t in given] == ["baseline", "ll"]
    assert given[1].config == {**setup.space.baseline(), "NCCL_PROTO": "LL"}
    assert profile.gpu_ids_for(setup) == ()  # no GPUs here


@pytest.mark.parametrize("weights, load", [("dummy", "dummy"), ("auto", None)])
def test_targets_load_the_weights_the_experiment_decided_on(tmp_path: Path, weights: str,
                                                            load: str | None) -> None:
    """On the H200 `servetune profile` of a `--weights dummy` campaign launched the
    checkpoint's weights, which the tiny model has none of (missing_weights)."""
    spec = ExperimentSpec(name="w", out_dir=tmp_path / "exp", weights=weights,
                          workload=SGLangArgs(model=str(tmp_path), speculative_algorithm="EAGLE3"))
    setup = prepare(spec)
    best = {"trial_id": "t7", "config": {"--speculative-num-steps": 3, "weights": "dummy"}}
    (spec.out_dir / "best.json").parent.mkdir(parents=True)
    (spec.out_dir / "best.json").write_text(json.dumps(best))
    for target in profile.experiment_targets(setup):
        argv = setup.workload.plan(target.config, setup.context("p", port=30000)).argv
        shown = argv[argv.index("--load-format") + 1] if "--load-format" in argv else None
        assert shown == load, (target.label, argv)


def test_run_profile_flag_and_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.build_parser().parse_args(["run", "--profile", "--out", str(tmp_path / "r")])
    args.space_name = "verify-campaign"
    assert spec_from_args(args).profile is True
    plain = cli.build_parser().parse_args(["run", "--out", str(tmp_path / "r")])
    plain.space_name = "verify-campaign"
    assert spec_from_args(plain).profile is False

    calls: list[Any] = []
    monkeypatch.setattr(profile, "profile_experiment",
                        lambda setup, **kw: calls.append(setup) or {"entries": []})
    on = SimpleNamespace(spec=SimpleNamespace(profile=True))
    off = SimpleNamespace(spec=SimpleNamespace(profile=False))
    lines: list[str] = []
    profile.after_run(off, interrupted=False, echo=lines.append)  # type: ignore[arg-type]
    profile.after_run(on, interrupted=True, echo=lines.append)  # type: ignore[arg-type]
    assert calls == []
    profile.after_run(on, interrupted=False, echo=lines.append)  # type: ignore[arg-type]
    assert calls == [on]

    def broken(setup: Any, **kw: Any) -> dict[str, Any]:
        raise RuntimeError("no GPU today")

    monkeypatch.setattr(profile, "profile_experiment", broken)
    profile.after_run(on, interrupted=False, echo=lines.append)  # type: ignore[arg-type]
    assert lines == ["profile failed: RuntimeError('no GPU today')"]  # the run still ends


def test_profile_waits_for_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It launches servers on the experiment's GPUs: not while a run drives the folder."""
    from tests.tuner.run.test_lock import _holding_process

    spec = experiment(tmp_path, {"trial_id": "t0007", "config": CHOSEN})
    proc = _holding_process(spec.out_dir)
    try:
        assert cli.main(["profile", str(spec.out_dir), "--steps", "2"]) == 2
    finally:
        proc.kill()
        proc.wait()
    err = capsys.readouterr().err
    assert f"pid {proc.pid}" in err and err.count("\n") == 1
    assert not (spec.out_dir / "profile").exists()
