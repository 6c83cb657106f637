"""The user's own settings are the baseline: --server-arg flags and the shell's environment
variables that set a searched knob leave the server's arguments and become its baseline value;
each trial's value overrides them, SGLang's or NCCL's own default stays a point to try."""

from __future__ import annotations

from pathlib import Path

import pytest

from search_spaces.space import load
from tuner.cli import main
from tuner.cli.args import CliError, parse_value, spec_from_args
from tuner.cli.baseline import user_baseline
from tuner.setup import prepare

SHAPE = """name: spec-shape
knobs:
  --speculative-num-steps: [1, 2, 3]
  --speculative-eagle-topk: [1, 4]
  --speculative-num-draft-tokens: [2, 4, 8]
  NCCL_ALGO: [Ring, Tree]
"""
USER = ["--speculative-num-steps", "5", "--mem-fraction-static", "0.8",
        "--speculative-eagle-topk=4", "--speculative-num-draft-tokens", "16"]


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "shape.yaml"
    path.write_text(SHAPE)
    return path


def test_server_args_and_env_that_set_searched_knobs_become_the_baseline(space_file: Path) -> None:
    space = load(str(space_file))
    baseline, workload = user_baseline({"kind": "sglang", "server_args": USER}, space,
                                       parse_value, environ={"NCCL_ALGO": "Tree", "X": "1"})
    assert baseline == {"--speculative-num-steps": 5, "--speculative-eagle-topk": 4,
                        "--speculative-num-draft-tokens": 16, "NCCL_ALGO": "Tree"}
    assert workload["server_args"] == ["--mem-fraction-static", "0.8"]
    mine = space.with_baseline(baseline)
    assert mine.baseline()["--speculative-num-steps"] == 5
    assert mine.domains["--speculative-num-steps"][0] == 5  # the user's value first ...
    assert None in mine.domains["--speculative-num-steps"]  # ... SGLang's default still tried
    assert mine.domains["NCCL_ALGO"][0] == "Tree" and None in mine.domains["NCCL_ALGO"]


def test_a_flag_both_pinned_and_given_is_bad_input(space_file: Path) -> None:
    space = load(str(space_file)).with_pins({"--speculative-eagle-topk": 1})
    with pytest.raises(ValueError, match="which --pin sets too"):
        user_baseline({"server_args": ["--speculative-eagle-topk", "4"]}, space, parse_value,
                      environ={})
    with pytest.raises(CliError):  # a value the knob cannot take: one line, exit 2
        user_baseline({"server_args": ["--speculative-num-steps", "many"]},
                      load(str(space_file)), parse_value, environ={})


def test_the_spec_carries_the_baseline_and_every_trial_overrides_it(
        space_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model").mkdir()
    argv = ["plan", "--model", str(tmp_path / "model"), "--speculative-algorithm", "EAGLE3",
            "--space", str(space_file), "--server-arg", " ".join(USER), "--num-gpus", "1",
            "--no-preflight", "--out", str(tmp_path / "exp"), "--samples", "3"]
    from tuner.cli import build_parser

    spec = spec_from_args(build_parser().parse_args(argv), tmp_path)
    assert spec.baseline["--speculative-num-steps"] == 5
    assert "--speculative-num-steps" not in spec.workload.server_args  # type: ignore[union-attr]
    setup = prepare(spec)
    assert setup.space.baseline()["--speculative-eagle-topk"] == 4
    assert any(line.startswith("baseline: your own settings") for line in setup.space_notes())
    assert main(argv) == 0
    out = capsys.readouterr().out
    first = out.split("# baseline\n", 1)[1].split("\n\n", 1)[0]
    assert "--speculative-num-steps 5" in first and "--speculative-eagle-topk 4" in first
