"""README.md says what the code does: its knob table is `servetune knobs`' output (generated
from the catalogue, so a knob added, renamed or re-described shows here until README follows)."""

from __future__ import annotations

from pathlib import Path

from search_spaces.table import knob_table

ROOT = Path(__file__).resolve().parents[1]


def test_readme_holds_the_generated_knob_table() -> None:
    readme = (ROOT / "README.md").read_text()
    missing = [line for line in knob_table().splitlines() if line.strip() and line not in readme]
    assert missing == [], "README's knob table is stale: paste `servetune knobs` into it"
