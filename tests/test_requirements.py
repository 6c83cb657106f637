"""The CI switch: a test whose need the machine lacks (SGLang, Chromium) is skipped off CI
and fails on CI, so that .ci/run cannot pass with the contract or browser tests skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NEEDY = '''
from tests.requirements import needs, unavailable

@needs(False, reason="no such thing here")
def test_marked():
    pass

def test_at_runtime():
    unavailable("not importable here")
'''


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_needy.py").write_text(NEEDY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("SERVETUNE_CI", None)
    if ci is not None:
        env["SERVETUNE_CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest",
                           "-p", "no:cacheprovider", "-rsf", str(tmp_path / "test_needy.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_off_ci_a_missing_need_skips(tmp_path: Path) -> None:
    out = _run(tmp_path, None)
    assert out.returncode == 0 and "2 skipped" in out.stdout, out.stdout
    assert "no such thing here" in out.stdout and "not importable here" in out.stdout


def test_on_ci_a_missing_need_fails(tmp_path: Path) -> None:
    out = _run(tmp_path, "1")
    summary = out.stdout.strip().splitlines()[-1]
    assert out.returncode == 1 and "skipped" not in summary, out.stdout
    assert "1 failed" in summary and "1 error" in summary  # the mark fails at setup
    assert out.stdout.count("required on CI: SERVETUNE_CI=1") >= 2


def test_ci_runs_with_the_switch_on() -> None:
    assert "export SERVETUNE_CI=1" in (ROOT / ".ci" / "run").read_text()


def test_the_suites_named_files_exist() -> None:
    """The files tests/conftest.py hands out first or together: a path that went stale would
    silently order nothing."""
    from tests.conftest import LONG_FILES, SHARED_GROUP

    assert [p for p in (*LONG_FILES, *SHARED_GROUP) if not (ROOT / p).is_file()] == []
