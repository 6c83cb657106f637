"""The correctness gate: the verify pass's logits against a reference written once per key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

TOLERANCE = {"bfloat16": 2e-2, "float32": 1e-4}  # relative L2 error of the logits


class WrongResult(Exception):
    """The logits differ from the reference beyond the tolerance."""


def compare(logits: torch.Tensor, reference: torch.Tensor, tolerance: float) -> dict[str, float]:
    """Relative L2 and max abs error; raises WrongResult beyond ``tolerance``."""
    import torch

    got = logits.detach().float().cpu()
    if not bool(torch.isfinite(got).all()):
        raise WrongResult("the logits hold NaN or inf")
    if got.shape != reference.shape:
        raise WrongResult(f"logits shape {tuple(got.shape)} != reference {tuple(reference.shape)}")
    rel = float((got - reference).norm() / reference.norm().clamp_min(1e-12))
    max_abs = float((got - reference).abs().max())
    if not rel <= tolerance:
        raise WrongResult(f"logits differ from the reference: relative L2 error {rel:.3g} > "
                          f"{tolerance:.3g} (max abs error {max_abs:.3g})")
    return {"rel_err": rel, "max_abs_err": max_abs}


class Gate:
    """Rank 0's gate: the first check writes the reference when allowed and absent, or loads
    it; every check compares the logits with it. ``path`` None: the gate is off."""

    def __init__(self, path: Path | None, write: bool, tolerance: float) -> None:
        self.path = path
        self.write = write
        self.tolerance = tolerance
        self.reference: torch.Tensor | None = None

    def check(self, logits: torch.Tensor) -> dict[str, Any]:
        import torch

        if self.path is None:
            return {"correctness": "off"}
        if self.reference is None and self.path.exists():
            self.reference = torch.load(self.path, weights_only=True)["logits"]
        if self.reference is None and self.write:
            if not bool(torch.isfinite(logits).all()):
                raise WrongResult("the logits hold NaN or inf (not written as the reference)")
            self.reference = self._write(logits.detach().float().cpu())
            return {"correctness": "reference_written", "reference": str(self.path)}
        if self.reference is None:
            return {"correctness": "no_reference"}
        return {"correctness": "pass", **compare(logits, self.reference, self.tolerance)}

    def _write(self, logits: torch.Tensor) -> torch.Tensor:
        import torch

        assert self.path is not None
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        torch.save({"logits": logits}, tmp)
        try:
            os.link(tmp, self.path)  # never replaces one another trial wrote meanwhile
        except FileExistsError:
            logits = torch.load(self.path, weights_only=True)["logits"]
        finally:
            tmp.unlink(missing_ok=True)
        return logits
