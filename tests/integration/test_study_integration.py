"""``--optuna-storage``: the Optuna study is in the storage under the experiment's name,
``optuna.load_study`` opens it after an interrupted run, and ``--resume`` goes on adding to
that same study (real Ray, the stand-in server, a SQLite storage)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest

from simulator.runs import Experiment, ray_tmpdir

pytestmark = pytest.mark.integration
SAMPLES = 5


def _ended(exp: Experiment) -> int:
    return sum(1 for e in exp.journal() if e.get("event") == "end")


def _complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield tmp_path_factory.mktemp("study")


def test_the_study_opens_and_a_resumed_run_continues_it(root: Path) -> None:
    url = f"sqlite:///{root}/optuna.db"
    with ray_tmpdir() as ray_tmp:
        exp = Experiment.create(root, ray_tmp, name="studied")
        argv = exp.args("--space", "nccl-pcie", "--search", "optuna", "--samples", str(SAMPLES),
                        "--rounds", "2", "--scheduler", "fifo", "--no-dashboard",
                        "--optuna-storage", url)
        try:
            background = exp.start(["run", *argv])
            background.wait_for(lambda: _ended(exp) >= 2, 180, "two trials ended")
            background.signal_group(signal.SIGINT)
            first = background.finish(timeout=120)
            assert first.returncode == 130, first
            assert f"Optuna study 'studied' in {url}" in first.stdout

            study = optuna.load_study(study_name="studied", storage=url)
            before = _complete(study)
            assert len(before) >= 2 and study.direction == optuna.study.StudyDirection.MAXIMIZE
            baseline = exp.record(exp.trial_ids()[0])["config"]
            assert study.trials[0].params == {k: baseline[k] for k in study.trials[0].params}

            resumed = exp.run(["run", "--resume", str(exp.out)], timeout=240)
            assert resumed.returncode == 0, resumed
            again = optuna.load_study(study_name="studied", storage=url)
            after = _complete(again)
            assert optuna.get_all_study_names(url) == ["studied"]  # the same study, no other
            assert len(after) > len(before)
            for old in before:  # what the first run told the study is still there, unchanged
                same = next(t for t in after if t.number == old.number)
                assert (same.params, same.value) == (old.params, old.value)
            table = exp.table()
            search = table[(table["phase"] == "search") & (table["status"] == "ok")]
            assert len(search) >= SAMPLES - 1 and len(after) >= len(search)
            values = {round(t.value, 6) for t in after if t.value is not None}
            last = {e["trial_id"]: e["output_throughput"] for e in exp.journal()
                    if e.get("event") == "result"}
            assert {round(last[t], 6) for t in search["trial_id"]} <= values
        finally:
            left = exp.cleanup()
            assert not left, f"processes survived the run: {left}"
