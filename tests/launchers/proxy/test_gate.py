"""The correctness gate: comparison, writing the reference once, reading it back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from launchers.proxy.gate import Gate, WrongResult, compare


def test_compare() -> None:
    ref = torch.randn(4, 16)
    assert compare(ref + 1e-6, ref, 1e-4)["rel_err"] < 1e-4
    with pytest.raises(WrongResult, match="relative L2"):
        compare(ref * 1.5, ref, 2e-2)
    with pytest.raises(WrongResult, match="NaN"):
        compare(torch.full((4, 16), float("nan")), ref, 2e-2)
    with pytest.raises(WrongResult, match="shape"):
        compare(ref[:2], ref, 2e-2)


def test_gate_writes_once_then_compares(tmp_path: Path) -> None:
    path = tmp_path / "ref.pt"
    logits = torch.randn(4, 16)
    assert Gate(None, True, 1e-4).check(logits) == {"correctness": "off"}
    assert Gate(path, False, 1e-4).check(logits) == {"correctness": "no_reference"}
    assert Gate(path, True, 1e-4).check(logits)["correctness"] == "reference_written"
    assert Gate(path, True, 1e-4).check(logits)["correctness"] == "pass"  # not rewritten
    with pytest.raises(WrongResult):
        Gate(path, True, 1e-4).check(logits * 2)
    with pytest.raises(WrongResult, match="not written"):
        Gate(tmp_path / "other.pt", True, 1e-4).check(torch.full((2, 2), float("inf")))
