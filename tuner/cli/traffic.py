"""Checks before launch for the options of a user's traffic and tracking: limits name metrics
the workload reports, ``--decide-at`` a measured level, an Optuna storage only for an Optuna
search (and a new experiment does not write into an old study), a ``--callback`` whose
package is installed. Each problem is bad input: one line, exit 2, nothing launched."""

from __future__ import annotations

import difflib
import importlib

from search_spaces.searches import strategy
from tuner.cli.args import CliError
from tuner.setup import Setup
from tuner.spec import ExperimentSpec

# --callback NAME: the package Ray Tune's logger callback needs, and the extra that has it.
CALLBACK_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow"}


def check_limits(setup: Setup) -> None:
    names = setup.workload.metric_names()
    if names is None:
        return
    for limit in setup.spec.limits:
        if limit.metric not in names:
            close = difflib.get_close_matches(limit.metric, sorted(names), n=3)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise CliError(f"--limit {limit.text()}: the {setup.workload.kind} workload does "
                           f"not report {limit.metric}{hint}")


def uses_optuna(spec: ExperimentSpec, setup: Setup) -> bool:
    if strategy(spec.search).optuna:
        return True
    return strategy(spec.search).staged and (strategy(spec.stage_search).optuna or any(
        stage.search is not None and strategy(stage.search).optuna
        for stage in setup.space.stages))


def check_study(spec: ExperimentSpec, setup: Setup, *, resume: bool, planning: bool) -> None:
    """An Optuna storage needs an Optuna search; a new run must not continue an old study of
    the same name (``--resume`` continues it)."""
    if spec.optuna_storage is None:
        return
    if not uses_optuna(spec, setup):
        raise CliError("--optuna-storage keeps an Optuna study: use it with --search optuna "
                       "(or --search staged --stage-search optuna)")
    if planning or resume:
        return
    from tuner.search.study import StorageError, studies_of

    try:
        found = studies_of(spec.optuna_storage, spec.name)
    except StorageError as err:
        raise CliError(str(err)) from None
    if found:
        raise CliError(f"--optuna-storage {spec.optuna_storage} already holds the study "
                       f"{found[0]!r}: finish that experiment with --resume, or give this one "
                       "another --name")


def check_callbacks(spec: ExperimentSpec) -> None:
    """Each tracker's package imports (it is imported only when asked for)."""
    for name in spec.callbacks:
        package = CALLBACK_PACKAGES[name]
        try:
            importlib.import_module(package)
        except ImportError:
            raise CliError(f"--callback {name}: the {package} package is not installed "
                           f"(pip install 'servetune[{name}]')") from None
