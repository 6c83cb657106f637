"""A private Ray whose own start times out (its raylet missed Ray's fixed 30 s wait to register,
as on a loaded box) is started once more, after what the failed start left is reaped; any
other failure, or a second timeout, is raised as Ray raised it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import ray

from launchers import process
from launchers.proxy.launcher import ProxyArgs
from tuner.run import cluster
from tuner.spec import ExperimentSpec

TIMEOUT = Exception("The current node timed out during startup. This could happen because "
                    "some of the raylet failed to startup or the GCS has become overloaded.")


class FakeRay:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.inits: list[dict[str, Any]] = []
        self.shutdowns = 0

    def init(self, **kwargs: Any) -> str:
        self.inits.append(kwargs)
        if self.failures:
            raise self.failures.pop(0)
        return "context"

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def with_failures(*failures: Exception) -> tuple[FakeRay, list[tuple[str, bool]]]:
        fake_ray = FakeRay(list(failures))
        reaped: list[tuple[str, bool]] = []
        monkeypatch.setattr(ray, "init", fake_ray.init)
        monkeypatch.setattr(ray, "shutdown", fake_ray.shutdown)
        monkeypatch.setattr(process, "reap_all",
                            lambda prefix, exact=False: reaped.append((prefix, exact)) or [7])
        return fake_ray, reaped
    return with_failures


def spec(tmp_path: Path) -> ExperimentSpec:
    return ExperimentSpec(name="e", out_dir=tmp_path / "e", workload=ProxyArgs())


def test_a_start_that_timed_out_is_tried_once_more(fake: Any, tmp_path: Path) -> None:
    fake_ray, reaped = fake(TIMEOUT)
    said: list[str] = []
    got = cluster._start_private_ray(spec(tmp_path), "st:e/", said.append)
    assert got == "context" and len(fake_ray.inits) == 2 and fake_ray.shutdowns == 1
    assert fake_ray.inits[0]["address"] == "local" and fake_ray.inits[0]["dashboard_host"] == (
        "127.0.0.1")
    # only the failed Ray's own processes, by its exact marker
    assert reaped == [(process.ray_marker("st:e/"), True)]
    assert len(said) == 1 and "timed out during startup" in said[0] and "1 of its" in said[0]


def test_a_second_timeout_is_raised(fake: Any, tmp_path: Path) -> None:
    fake_ray, _ = fake(TIMEOUT, TIMEOUT)
    with pytest.raises(Exception, match="timed out during startup"):
        cluster._start_private_ray(spec(tmp_path), "st:e/", lambda _: None)
    assert len(fake_ray.inits) == cluster.RAY_START_TRIES


def test_another_failure_is_not_retried(fake: Any, tmp_path: Path) -> None:
    fake_ray, reaped = fake(RuntimeError("no space left on device"))
    with pytest.raises(RuntimeError, match="no space left"):
        cluster._start_private_ray(spec(tmp_path), "st:e/", lambda _: None)
    assert len(fake_ray.inits) == 1 and reaped == []
