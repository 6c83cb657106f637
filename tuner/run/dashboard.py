"""Finding servetune in the Ray dashboard: the trainable's name, the login token, the API.

Ray 2.60 turns a function trainable into a class called ``ImplicitFunc``, and that class
name is what the dashboard lists for every trial actor. ``named_trainable`` gives the class
the name ``servetune_trial`` and a ``repr`` naming the experiment and the actor's first trial
(Ray reads an actor's repr once, when the actor starts: the state API's ``repr_name``).

Trial actors are reused (a fresh actor costs ~1-2 s a trial), so the repr cannot name every
trial: each trial instead starts a task named ``servetune_trial <experiment>/<trial id>``
(no resources, returns at once), which the dashboard's task list keeps (``list_tasks``).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from ray.tune import PlacementGroupFactory

# One node's resources, or a placement group over several nodes (tuner.run.nodes.placement).
Resources: TypeAlias = "Mapping[str, float] | PlacementGroupFactory"
TRAINABLE_NAME = "servetune_trial"  # Tuner.restore needs the same name on resume
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
AUTH_MODE_ENV = "RAY_AUTH_MODE"


def named_trainable(fn: Callable[..., None], resources: Resources, experiment: str,
                    on_stop: Callable[[], None] | None = None, **parameters: Any) -> type:
    """``tune.with_resources(tune.with_parameters(fn, **parameters), resources)`` as a class
    whose actors the dashboard lists as ``servetune_trial`` with repr
    ``servetune_trial <experiment>/<trial id>``; ``on_stop`` runs in the actor's cleanup
    (Ray Tune's stop of the trial), before the worker ends."""
    from ray import tune
    from ray.tune.trainable.function_trainable import wrap_function

    base = wrap_function(tune.with_parameters(fn, **parameters), name=TRAINABLE_NAME)

    class ServetuneTrial(base):  # type: ignore[valid-type,misc]
        _experiment = experiment

        def __repr__(self) -> str:
            return f"{TRAINABLE_NAME} {self._experiment}/{self.trial_id}"

        def cleanup(self) -> None:
            try:  # Ray's own first: it releases a training thread waiting in report()
                super().cleanup()
            finally:
                if on_stop is not None:
                    on_stop()

    ServetuneTrial.__name__ = ServetuneTrial.__qualname__ = TRAINABLE_NAME
    held = resources if isinstance(resources, tune.PlacementGroupFactory) else dict(resources)
    sized: type = tune.with_resources(ServetuneTrial, held)
    # with_resources subclasses again: the dashboard shows the last class's own name.
    sized.__name__ = sized.__qualname__ = TRAINABLE_NAME
    return sized


# ---------------------------------------------------------------- the dashboard's token


def token_auth_on() -> bool:
    """Ray 2.60 starts local clusters with token auth unless RAY_AUTH_MODE says otherwise."""
    return os.environ.get(AUTH_MODE_ENV, "token").lower() != "disabled"


def token_source() -> str:
    """Where Ray keeps the token, as a user would look for it."""
    if os.environ.get(TOKEN_ENV):
        return f"${TOKEN_ENV}"
    return os.environ.get(TOKEN_PATH_ENV) or "~/.ray/auth_token"


def auth_token() -> str | None:
    """The dashboard token: $RAY_AUTH_TOKEN, the file $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token.strip()
    path = Path(os.environ.get(TOKEN_PATH_ENV) or Path.home() / ".ray" / "auth_token")
    try:
        return path.expanduser().read_text().strip() or None
    except OSError:
        return None


def login_lines(url: str) -> list[str]:
    """What to print at start: the URL and how to get in."""
    if not token_auth_on():
        return [f"Ray dashboard: {url}  (token auth is off: {AUTH_MODE_ENV}=disabled)"]
    return [f"Ray dashboard: {url}  (log in with the token: `ray get-auth-token`, "
            f"kept in {token_source()}; API calls send 'Authorization: Bearer <token>')",
            f"  trial actors are listed as '{TRAINABLE_NAME}', "
            f"repr '{TRAINABLE_NAME} <experiment>/<trial id>'"]


def get_json(url: str, token: str | None, timeout: float = 5.0) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read().decode())


def list_actors(base_url: str, token: str | None, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Live and dead actors through the dashboard's state API (``detail`` adds repr_name)."""
    data = get_json(f"{base_url.rstrip('/')}/api/v0/actors?detail=1&limit=1000", token, timeout)
    result = data.get("data", {}).get("result", {})
    rows = result.get("result", []) if isinstance(result, dict) else result
    return [r for r in rows if isinstance(r, dict)]


def list_tasks(base_url: str, token: str | None, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Tasks through the dashboard's state API (their ``name``: a trial's marker task)."""
    data = get_json(f"{base_url.rstrip('/')}/api/v0/tasks?detail=1&limit=10000", token, timeout)
    result = data.get("data", {}).get("result", {})
    rows = result.get("result", []) if isinstance(result, dict) else result
    return [r for r in rows if isinstance(r, dict)]


def trial_task_name(experiment: str, trial_id: str) -> str:
    return f"{TRAINABLE_NAME} {experiment}/{trial_id}"


def _trial_started() -> None:
    """The body of a trial's marker task: nothing; its name is the point."""


def task_list_shown(dashboard: bool, address: str | None) -> bool:
    """Whether a dashboard can list a trial's marker task: a joined cluster's own, or the
    private Ray's when started with one. Without a dashboard Ray's head serves no state API
    (``ray list tasks`` is refused), so such a run's trials start no marker task: one Ray
    worker fewer, ~1 s of CPU beside the trial's server starting."""
    return dashboard or address is not None


def name_trial(experiment: str, trial_id: str) -> None:
    """Start the trial's marker task (no CPU: it never waits for the trial's own bundle)."""
    import ray

    marker = ray.remote(num_cpus=0, max_retries=0)(_trial_started)
    marker.options(name=trial_task_name(experiment, trial_id)).remote()


def reuse_actors(reuse: bool | None) -> bool:
    """Whether Tune reuses trial actors: as asked, else yes (trials stay findable by name
    through their marker tasks)."""
    return True if reuse is None else reuse
