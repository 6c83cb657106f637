"""The experiment trackers a user already runs (``--callback wandb|mlflow``), through Ray
Tune's own logger callbacks: each trial's config and every reported round go to a W&B project
or an MLflow experiment named after the servetune experiment. The integration (and its
package) is imported only when asked for; the CLI has checked that it imports."""

from __future__ import annotations

from collections.abc import Sequence

from ray.tune import Callback


def tracker_callbacks(names: Sequence[str], experiment: str) -> list[Callback]:
    out: list[Callback] = []
    for name in names:
        if name == "wandb":
            from ray.air.integrations.wandb import WandbLoggerCallback

            out.append(WandbLoggerCallback(project=experiment))
        elif name == "mlflow":
            from ray.air.integrations.mlflow import MLflowLoggerCallback

            out.append(MLflowLoggerCallback(experiment_name=experiment))
        else:
            raise ValueError(f"unknown tracker {name!r}")
    return out
