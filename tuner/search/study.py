"""The Optuna study an experiment keeps in a storage (``--optuna-storage URL``): named after
the experiment (a staged search: one study per stage, ``<experiment>:<stage>``), opened by
Ray's OptunaSearch through its own ``storage`` and ``study_name`` arguments, so that
optuna-dashboard and ``optuna.load_study`` see the trials, and a resumed run (whose searcher
Ray restores, still bound to the storage) goes on adding to the same study. No Ray here."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from optuna.storages import BaseStorage


class StorageError(ValueError):
    """A storage URL that cannot be opened (one line)."""


def study_name(experiment: str, stage: str | None = None) -> str:
    return experiment if stage is None else f"{experiment}:{stage}"


def open_storage(url: str) -> BaseStorage:
    """Optuna's storage for ``url`` (an RDB URL such as ``sqlite:////abs/path.db``); its
    tables are created on first use."""
    import optuna

    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:  # sqlalchemy's errors for a bad URL, a missing driver or folder
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise StorageError(f"--optuna-storage {url}: cannot open it: {text}") from None


def studies_of(url: str, experiment: str) -> list[str]:
    """The studies of ``experiment`` the storage already holds (its own, or its stages')."""
    import optuna

    names = optuna.get_all_study_names(open_storage(url))
    return [n for n in names if n == experiment or n.startswith(experiment + ":")]
