"""The traffic and tracking flags given wrong: one line on stderr, exit 2, nothing launched,
no Ray started (the helpers of test_cli_bad_input.py)."""

from __future__ import annotations

from pathlib import Path

import optuna

from simulator.runs import ROOT
from tests.tuner.cli.test_cli_bad_input import Done, assert_bad_input, run_args, servetune


def _blocked(tmp_path: Path, package: str) -> str:
    """A folder whose ``package`` fails to import, as a missing package does."""
    folder = tmp_path / "blocked"
    folder.mkdir(exist_ok=True)
    (folder / f"{package}.py").write_text(f"raise ImportError('no module named {package}')\n")
    return str(folder)


def _without(tmp_path: Path, package: str, *args: str) -> Done:
    import os

    path = os.pathsep.join([_blocked(tmp_path, package), str(ROOT)])
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path  # env_for() puts ROOT first and keeps the rest after it
    try:
        return servetune(tmp_path, *args)
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = old


def test_a_callback_whose_package_is_missing(tmp_path: Path) -> None:
    for name in ("wandb", "mlflow"):
        done = _without(tmp_path, name, *run_args(tmp_path, "--callback", name))
        assert_bad_input(done, f"--callback {name}", f"pip install 'servetune[{name}]'")


def test_an_unknown_callback(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--callback", "tensorboardx"))
    assert done.code == 2 and "invalid choice: 'tensorboardx'" in done.stderr


def test_a_limit_on_a_metric_the_workload_does_not_report(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--limit", "p99_itl<=30"))
    assert_bad_input(done, "--limit p99_itl<=30", "does not report p99_itl", "p99_itl_ms")


def test_a_limit_on_a_level_that_is_not_measured(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--concurrency", "1,4", "--limit",
                                         "p99_itl_ms_c16<=30"))
    assert_bad_input(done, "p99_itl_ms_c16")


def test_a_malformed_limit(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--limit", "p99_itl_ms=30"))
    assert_bad_input(done, "--limit 'p99_itl_ms=30'", "METRIC<=NUMBER")


def test_decide_at_below_one(tmp_path: Path) -> None:
    assert_bad_input(servetune(tmp_path, *run_args(tmp_path, "--decide-at", "0")),
                     "--decide-at")


def test_a_storage_without_an_optuna_search(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--optuna-storage",
                                         f"sqlite:///{tmp_path}/o.db"))
    assert_bad_input(done, "--optuna-storage", "--search optuna")


def test_a_storage_that_is_not_a_url(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--search", "optuna", "--optuna-storage",
                                         "optuna.db"))
    assert_bad_input(done, "--optuna-storage 'optuna.db'", "sqlite:///")


def test_a_new_run_does_not_write_into_an_old_study(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/o.db"
    optuna.create_study(storage=url, study_name="out")  # the name --out gives the experiment
    done = servetune(tmp_path, *run_args(tmp_path, "--search", "optuna", "--optuna-storage",
                                         url))
    assert_bad_input(done, "already holds the study 'out'", "--resume")
