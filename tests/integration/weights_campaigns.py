"""The weights test's two campaigns (test_weights_integration.py), started in the background
by the first test of the shared group (tests/conftest.py SHARED_GROUP): they mostly sleep on
the stand-in's modelled loads, so the group's other files run beside them, and the weights
tests, last in the group, wait for what is left."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from benchmarks.weights import Campaign, CampaignRun, Settings, start_campaign
from simulator.runs import ray_tmpdir

WEIGHTS_FILE = "tests/integration/test_weights_integration.py"
# 0.15 real s per modelled s: a trial on the checkpoint's weights loads for ~10 s, one on
# random weights ~1.5 s, against ~1 s of servetune's own per trial on a busy 2-core box.
SETTINGS = Settings(samples=30, scale=0.15)


class Campaigns:
    """``--weights auto`` and ``--weights real``, each with its own Ray, side by side."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.started: dict[str, Campaign] = {}
        self.runs: dict[str, CampaignRun] | None = None
        self.stack = contextlib.ExitStack()

    def start(self) -> None:
        if self.root is not None:
            return
        self.root = Path(tempfile.mkdtemp(prefix="st-weights-"))
        for weights in ("auto", "real"):
            ray_tmp = self.stack.enter_context(ray_tmpdir())
            self.started[weights] = start_campaign(self.root, ray_tmp, weights, SETTINGS)

    def finish(self) -> dict[str, CampaignRun]:
        """Both campaigns read back (started now if no test started them)."""
        self.start()
        if self.runs is None:
            self.runs = {w: c.finish() for w, c in self.started.items()}
        return self.runs

    def close(self) -> None:
        """At the session's end: a campaign nobody waited for is stopped, its folder goes."""
        for campaign in self.started.values():
            if campaign.background.popen.poll() is None:
                campaign.stop()
        self.stack.close()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


CAMPAIGNS = Campaigns()
