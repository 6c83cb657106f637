"""tuner/run/fit.py: Ray Tune's TensorBoard writer is loaded without torch, and torch still
imports afterwards for whoever needs it."""

from __future__ import annotations

import os
import subprocess
import sys

from simulator.runs import ROOT

CODE = """\
import sys
from tuner.run.fit import load_tensorboard_writer
load_tensorboard_writer()
print('tensorboardX' in sys.modules, 'torch' in sys.modules)
from ray.tune.logger import TBXLoggerCallback
TBXLoggerCallback()
print('torch' in sys.modules)
import torch
print(torch.tensor([1.0]).sum().item())
"""


def test_the_tensorboard_writer_loads_without_torch_and_torch_still_imports() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "False", "False", "1.0"], out.stdout
