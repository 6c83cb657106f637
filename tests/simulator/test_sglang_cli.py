"""The stand-in's CLI is SGLang's own, captured in a fixture; the fixture matches the installed
SGLang (contract)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from simulator import sglang_cli, sglang_server
from tests.requirements import unavailable
from tests.sglang_parser import INSTALL


@pytest.fixture(scope="module")
def parser() -> object:
    return sglang_cli.build_parser(sglang_cli.load_fixture())


def _parse(*argv: str) -> object:
    return sglang_server.build_parser().parse_args(["--model-path", "m", *argv])


def test_fixture_is_sglangs_whole_parser() -> None:
    fixture = sglang_cli.load_fixture()
    assert fixture["prog"] == "sglang serve" and fixture["sglang"] == "0.5.23"
    flags = {f for o in fixture["options"] for f in o["flags"]}
    assert len(fixture["options"]) > 500
    for flag in ("--model-path", "--tp-size", "--load-format", "--speculative-draft-load-format",
                 "--cuda-graph-bs-decode", "--cuda-graph-max-bs-decode", "--skip-server-warmup",
                 "--decode-log-interval", "--enable-metrics"):
        assert flag in flags, flag


def test_the_flags_of_issue_18_parse_as_sglang_types_them() -> None:
    args = _parse("--load-format", "dummy", "--speculative-draft-load-format", "dummy",
                  "--cuda-graph-bs-decode", "1", "4", "16", "--cuda-graph-max-bs-decode", "16",
                  "--skip-server-warmup", "--tp-size", "2")
    assert args.load_format == "dummy" and args.speculative_draft_load_format == "dummy"
    assert args.cuda_graph_bs_decode == [1, 4, 16] and args.cuda_graph_max_bs_decode == 16
    assert args.skip_server_warmup is True and args.tp_size == 2
    defaults = _parse()
    assert (defaults.load_format, defaults.decode_log_interval, defaults.port) == ("auto", 40,
                                                                                  30000)
    flags = sglang_server.flag_values(args)
    assert flags["--cuda-graph-bs-decode"] == [1, 4, 16] and flags["--tp-size"] == 2
    assert flags["--tensor-parallel-size"] == 2  # every spelling
    assert "--decode-log-interval" not in flags  # left at its default


def test_rejects_like_sglang(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse("--load-format", "bogus")
    assert "invalid choice: 'bogus'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse("--cuda-graph-bs-decode", "one")
    assert "invalid int value: 'one'" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # required, as in SGLang
        sglang_server.build_parser().parse_args([])
    assert "--model-path" in capsys.readouterr().err


def test_a_catalogue_that_drifted_from_sglang_is_caught(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The stand-in no longer accepts what servetune's catalogue says; a knob SGLang does not
    know fails here as it would on a real server."""
    with pytest.raises(SystemExit):
        _parse("--enable-flashinfer-allreduce-fusion-turbo")
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.contract
def test_fixture_matches_the_installed_sglang() -> None:
    if importlib.util.find_spec("sglang") is None:
        unavailable(f"SGLang is not installed with {sys.executable} ({INSTALL})")
    try:
        live = sglang_cli.capture_live()
    except Exception as err:  # the import chain needs more than sglang itself
        unavailable(f"SGLang's parser is not importable with {sys.executable}: "
                    f"{type(err).__name__}: {err} ({INSTALL})")
    fixture = sglang_cli.load_fixture()
    regenerate = "regenerate it: python -m simulator.sglang_cli"
    assert live["sglang"] == fixture["sglang"], f"SGLang {live['sglang']} is installed; {regenerate}"
    old = {tuple(o["flags"]): o for o in fixture["options"]}
    new = {tuple(o["flags"]): o for o in live["options"]}
    changed = sorted(" ".join(k) for k in old.keys() ^ new.keys())
    changed += sorted(" ".join(k) for k in old.keys() & new.keys() if old[k] != new[k])
    assert not changed, f"the fixture differs from SGLang's parser in {changed[:10]}; {regenerate}"
    assert sglang_cli.dumps(live) == sglang_cli.FIXTURE.read_text()
