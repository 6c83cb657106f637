"""Contract: what a follower (a node of rank >= 1) of a trial across nodes does, read from the
installed SGLang's own source, and the stand-in (simulator/fake_nodes.py) doing the same.

``Engine._launch_subprocesses`` (srt/entrypoints/engine.py), for node_rank >= 1: once its
schedulers are ready, a SIGTERM handler that only logs (rank 0's ShutdownReq broadcast stops
the schedulers), then ``launch_dummy_health_check_server`` on the same --host/--port
(srt/utils/common.py: 200 on /health, /health_generate and /ping), then a wait until the
schedulers exit; the HTTP server's launch returns there (srt/entrypoints/http_server.py).
servetune checks that port on each node and stops node 0 first (tuner/run/node_server.py).
A release that changes any of it fails here. Reads the source only (no import of SGLang).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from simulator import fake_nodes
from tests.sglang_parser import CONTRACT

pytestmark = CONTRACT


def source(relative: str) -> ast.Module:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations)))
    return ast.parse((folder / relative).read_text())


def function(tree: ast.AST, name: str) -> ast.FunctionDef:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"{name}: {len(found)} definitions"
    return found[0]


def calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Calls of ``name`` (a plain name or an attribute's last part)."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and (
        (isinstance(n.func, ast.Name) and n.func.id == name)
        or (isinstance(n.func, ast.Attribute) and n.func.attr == name))]


def template(text: ast.JoinedStr, names: dict[str, str]) -> str:
    """An f-string as a format template, each value named by its source text."""
    out = []
    for part in text.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
        else:
            assert isinstance(part, ast.FormattedValue)
            out.append("{" + names[ast.unparse(part.value)] + "}")
    return "".join(out)


def message(call: ast.Call) -> str:
    """A logger call's message: its string parts joined, f-string or not."""
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return str(arg.value)
    assert isinstance(arg, ast.JoinedStr), ast.unparse(arg)
    return template(arg, {"get_parallel().node_rank": "rank",
                          "NetworkAddress(host, port).to_host_port_str()": "host}:{port"})


@pytest.fixture(scope="module")
def follower_branch() -> ast.If:
    """The branch of ``_launch_subprocesses`` a node of rank >= 1 takes."""
    launch = function(source("srt/entrypoints/engine.py"), "_launch_subprocesses")
    branches = [n for n in ast.walk(launch) if isinstance(n, ast.If)
                and ast.unparse(n.test) == "get_parallel().node_rank >= 1"]
    assert len(branches) == 1, "SGLang's follower branch moved: read engine.py again"
    return branches[0]


def test_a_follower_serves_the_dummy_health_server_on_its_own_host_and_port(
        follower_branch: ast.If) -> None:
    (health,) = calls(follower_branch, "launch_dummy_health_check_server")
    assert [ast.unparse(a) for a in health.args[:2]] == ["get_serving().host",
                                                         "get_serving().port"]
    (ready,) = calls(follower_branch, "wait_for_ready")
    (block,) = calls(follower_branch, "block_until_scheduler_exits")
    assert ready.lineno < health.lineno < block.lineno  # ready, then serving, until the end
    # The server it starts: 200 on three paths, uvicorn on that host and port.
    dummy = function(source("srt/utils/common.py"), "launch_dummy_health_check_server")
    routes = {ast.literal_eval(d.args[0]) for n in ast.walk(dummy)
              if isinstance(n, ast.AsyncFunctionDef) for d in n.decorator_list
              if isinstance(d, ast.Call) and ast.unparse(d.func) == "app.get"}
    assert routes == set(fake_nodes.HEALTH_PATHS)
    answers = {ast.unparse(n.value) for n in ast.walk(dummy)
               if isinstance(n, ast.Return) and n.value is not None}
    assert answers == {"Response(status_code=200)"}
    (config,) = calls(dummy, "Config")
    assert {k.arg: ast.unparse(k.value) for k in config.keywords if k.arg in ("host", "port")} \
        == {"host": "host", "port": "port"}
    logged = {message(c) for c in calls(dummy, "info")}
    assert fake_nodes.HEALTH_STARTED in logged and fake_nodes.HEALTH_STOPPED in logged
    # No other HTTP server on a follower: the launch returns once the schedulers exited.
    launch = function(source("srt/entrypoints/http_server.py"), "launch_server")
    returns = [n for n in ast.walk(launch) if isinstance(n, ast.If)
               and ast.unparse(n.test) == "get_parallel().node_rank >= 1"]
    assert returns and isinstance(returns[0].body[-1], ast.Return)


def test_a_follower_only_logs_sigterm_once_ready(follower_branch: ast.If) -> None:
    """SIGTERM does not stop a follower: servetune stops node 0 first (its ShutdownReq stops
    every node's schedulers), waits, then kills the follower's tree."""
    (installed,) = [c for c in calls(follower_branch, "signal")
                    if ast.unparse(c.args[0]) == "signal.SIGTERM"]
    handler = function(follower_branch, ast.unparse(installed.args[1]))
    (only,) = handler.body  # one statement: a warning (no exit, no kill, no raise)
    assert isinstance(only, ast.Expr) and isinstance(only.value, ast.Call)
    assert ast.unparse(only.value.func) == "logger.warning"
    assert message(only.value) == fake_nodes.FOLLOWER_SIGTERM
    (ready,) = calls(follower_branch, "wait_for_ready")
    assert ready.lineno < installed.lineno  # before it, SIGTERM ends the process
