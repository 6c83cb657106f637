"""Security (issue 5): no shell anywhere, hostile values stay inert in argv and in launch
scripts, env values with a newline or NUL are refused, servers bind 127.0.0.1, Ray's token
auth is never turned off. (The whole path, through a real `servetune run`, is checked in
test_run_integration.py::test_hostile_values_stay_inert.)
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from launchers.base import LaunchPlan, TrialContext
from launchers.process import ServerProcess
from launchers.sglang.launcher import SGLangArgs, SGLangWorkload
from simulator.runs import ROOT

SOURCES = [p for top in ("tuner", "launchers", "search_spaces", "benchmarks", "tests")
           for p in (ROOT / top).rglob("*.py")]
SHELL_TRUE = "shell" + "=True"  # spelled apart so that no file (this one aside) matches it


def hostile(canary: Path) -> list[str]:
    return [f"$(touch {canary})", f"`touch {canary}`", f"; touch {canary}", "a b 'c' \"d\" $HOME",
            f"x && touch {canary} || true", "back\\slash * ? ~ !", "tab\tand-line\nbreak"]


def test_no_shell_anywhere() -> None:
    assert len(SOURCES) > 50
    offenders = []
    for path in SOURCES:
        if path == Path(__file__):
            continue
        text = path.read_text()
        for pattern in (SHELL_TRUE, "os.system(", "os.popen(", "create_subprocess_shell("):
            if pattern in text:
                offenders.append(f"{path.relative_to(ROOT)}: {pattern}")
    assert offenders == []


def test_token_auth_is_never_turned_off() -> None:
    setting = re.compile(r"RAY_AUTH_MODE[\"']?\]?\s*[,=:]\s*[\"']disabled")
    assert [p for p in SOURCES if setting.search(p.read_text()) and p != Path(__file__)] == []


def _echo_script(plan: LaunchPlan, tmp_path: Path) -> dict[str, object]:
    """Run plan.shell_script() with bash, the server replaced by a printer of argv and env."""
    script = plan.shell_script()
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    printer = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': dict(os.environ)},"
               " sys.stdout)")
    probe = script.replace("exec ", f"exec {shlex.quote(sys.executable)} -c {shlex.quote(printer)} ",
                           1)
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True,
                          cwd=tmp_path)
    seen: dict[str, object] = json.loads(done.stdout)
    return seen


def test_launch_script_keeps_hostile_values_inert(tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    values = hostile(canary)
    plan = LaunchPlan("sglang", ("server", *values), {f"V{i}": v.replace("\n", " ")
                                                      for i, v in enumerate(values)})
    seen = _echo_script(plan, tmp_path)
    assert seen["argv"] == list(plan.argv)
    env = seen["env"]
    assert isinstance(env, dict)
    assert {k: env[k] for k in plan.env} == dict(plan.env)
    assert not canary.exists()


def test_rendered_plan_keeps_hostile_values_as_single_arguments(tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    model = str(tmp_path / hostile(canary)[0])
    extra = ["--served-model-name", hostile(canary)[3]]
    workload = SGLangWorkload(SGLangArgs(model=model, server_args=extra, preflight=False))
    ctx = TrialContext("exp", "t0", tmp_path / "t0", ("0", "1"), 30000)
    plan = workload.plan({"NCCL_ALGO": "allreduce:tree"}, ctx)
    argv = list(plan.argv)
    assert argv[argv.index("--model-path") + 1] == model
    assert argv[argv.index("--served-model-name") + 1] == extra[1]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    seen = _echo_script(plan, tmp_path)
    assert seen["argv"] == argv
    assert not canary.exists()


@pytest.mark.parametrize("bad", ["line\nbreak", "carriage\rreturn", "nul\x00byte"])
def test_env_values_with_newline_or_nul_are_refused(tmp_path: Path, bad: str) -> None:
    plan = LaunchPlan("sglang", ("true",), {"NCCL_SOMETHING": bad})
    with pytest.raises(ValueError, match="newline or NUL"):
        plan.full_env({})
    with pytest.raises(ValueError, match="newline or NUL"):
        ServerProcess.spawn(["true"], {"NCCL_SOMETHING": bad}, tmp_path / "log", "exp/t0")
    assert not (tmp_path / "log").exists()


def test_inherited_multiline_env_passes_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shell's exported function (bash ``export -f``, Lmod's ``module``) holds newlines: it
    is the user's environment, not a value servetune sets, and must not fail every trial."""
    monkeypatch.setenv("BASH_FUNC_which%%", "() {  echo hi\n}")
    plan = LaunchPlan("sglang", ("true",), {"NCCL_ALGO": "allreduce:tree"})
    env = plan.full_env()
    assert env["BASH_FUNC_which%%"] == "() {  echo hi\n}"


def test_servers_bind_localhost_by_default(tmp_path: Path) -> None:
    """What each workload would start listens on 127.0.0.1 (the Ray dashboard's address is
    checked by the run test test_dashboard_on_localhost_with_token_auth)."""
    from launchers.proxy import rank
    from launchers.proxy.launcher import ProxyArgs, ProxyWorkload

    ctx = TrialContext("e", "t", tmp_path, (), 30001, 0)
    sglang = SGLangWorkload(SGLangArgs(model="m")).plan({}, ctx)
    assert sglang.host == "127.0.0.1"
    assert sglang.argv[sglang.argv.index("--host") + 1] == "127.0.0.1"
    assert ProxyWorkload(ProxyArgs(device="cpu")).plan({}, ctx).host == "127.0.0.1"
    assert rank.LOCALHOST == "127.0.0.1"  # the ranks' rendezvous store binds there
