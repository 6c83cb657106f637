"""The README knob table, generated from the catalogue."""

from __future__ import annotations

from search_spaces.composite import COMPOSITES
from search_spaces.knobs import CATALOGUE
from search_spaces.table import knob_table


def _rows(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")]
            for line in table.splitlines() if line.startswith("| `")]


def test_one_row_per_knob_with_source_default_and_values() -> None:
    table = knob_table()
    rows = {r[0]: r for r in _rows(table) if len(r) == 5}
    assert list(rows) == [f"`{name}`" for name in CATALOGUE]
    assert rows["`SGLANG_ENABLE_PCIE_IPC_ALLREDUCE`"][1:4] == ["SGLang env", "0 (off)", "`1`"]
    assert rows["`NCCL_BUFFSIZE`"][1:3] == ["NCCL env", "4194304 (4 MiB)"]
    assert rows["`--cuda-graph-bs-decode`"][3].startswith("`1,2,4,8`, `1,2,4,8,16`")
    assert rows["`--disable-custom-all-reduce`"][1:4] == [
        "SGLang flag", "off (custom allreduce where the GPUs allow it)", "`false`, `true`"]
    assert all(r[2] for r in rows.values()), "every knob states its default"


def test_composite_choices_say_what_they_set() -> None:
    rows = {r[0]: r for r in _rows(knob_table()) if len(r) == 3 and r[1] != "sets"}
    assert list(rows) == [f"`{c}`" for comp in COMPOSITES.values() for c in comp.expansions]
    assert rows["`dummy`"][1] == "`--load-format=dummy`, `--speculative-draft-load-format=dummy`"
    assert rows["`pcie-ipc`"][1] == ("`--disable-custom-all-reduce=true`, "
                                    "`SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1`, "
                                    "`--enforce-disable-flashinfer-allreduce-fusion=true`")


def test_pipes_in_text_do_not_break_the_table() -> None:
    for line in knob_table().splitlines():
        if line.startswith("|"):
            assert line.replace("\\|", "").count("|") in (4, 6)
