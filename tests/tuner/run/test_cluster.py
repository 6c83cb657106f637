"""tuner/run/cluster.py: what the private Ray a run starts is told, checked on the installed
Ray (one Ray start for every claim)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from simulator.runs import ray_tmpdir
from tuner.run.cluster import PRIVATE_RAY_SETTINGS
from tuner.run.dashboard import task_list_shown

pytestmark = pytest.mark.integration

# Started, then left alone long enough for Ray's default to prestart its pool (it does within
# a second or two, num_cpus=2 here); then one task reports its worker's niceness, and the
# workers are counted again once Ray had the time to start more than that task needs.
CODE = """\
import os, time, psutil, ray
ray.init(address='local', num_cpus=2, include_dashboard=False, logging_level='ERROR')
def workers():
    return [p.cmdline()[0].strip() for p in psutil.Process().children(recursive=True)
            if (p.cmdline() or [''])[0].startswith('ray::IDLE')]
time.sleep(6)
idle = workers()
f = ray.remote(lambda: os.getpriority(os.PRIO_PROCESS, 0))
niceness = ray.get(f.remote())
time.sleep(4)
after_task = len(workers())
from ray.util.state import list_tasks
try:
    list_tasks(timeout=10)
    tasks = 'listed'
except Exception:
    tasks = 'refused'
print(len(idle), after_task, os.getpriority(os.PRIO_PROCESS, 0), niceness, tasks)
ray.shutdown()
"""


def test_the_private_ray_starts_only_the_workers_asked_for_at_the_drivers_niceness() -> None:
    """Without the settings Ray prestarts idle workers (2 here), starts 2 for one task, and
    runs its workers at the driver's niceness + 15."""
    with ray_tmpdir() as ray_tmp:  # short: Ray's socket paths are length-limited
        env = {**os.environ, **PRIVATE_RAY_SETTINGS, "RAY_TMPDIR": str(ray_tmp)}
        env.pop("RAY_ADDRESS", None)
        out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                             env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    idle, after_task, driver, worker, tasks = out.stdout.split()[-5:]
    assert (idle, after_task) == ("0", "1"), out.stdout
    assert worker == driver, out.stdout
    # Why a run without a dashboard starts no marker task per trial (task_list_shown): no
    # state API to list it.
    assert tasks == "refused", out.stdout


@pytest.mark.parametrize(("dashboard", "address", "shown"), [
    (True, None, True), (False, None, False), (False, "10.0.0.1:6379", True)])
def test_trials_are_named_where_a_dashboard_can_list_them(dashboard: bool, address: str | None,
                                                          shown: bool) -> None:
    assert task_list_shown(dashboard, address) is shown
