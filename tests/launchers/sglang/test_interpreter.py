"""Which interpreter runs SGLang: ``-m sglang`` forms, console scripts and their shebangs."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from launchers.sglang.interpreter import interpreter_id, python_for


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path



def test_python_for_module_form(tmp_path: Path) -> None:
    assert python_for([sys.executable, "-m", "sglang.launch_server", "--model-path", "m"]) \
        == sys.executable
    assert python_for([sys.executable, "-u", "-X", "dev", "-m", "sglang.launch_server"]) \
        == sys.executable
    assert python_for(["python-not-on-path", "-m", "sglang.launch_server"]) \
        == "python-not-on-path"
    assert python_for([sys.executable, "-m", "vllm.entrypoints"]) is None
    assert python_for([]) is None


def test_python_for_console_script_on_path(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    _executable(bin_dir / "sglang", "#!/opt/venv/bin/python3.11\nimport sys\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert python_for(["sglang", "serve", "--model-path", "m"]) == "/opt/venv/bin/python3.11"
    assert python_for([str(bin_dir / "sglang"), "serve"]) == "/opt/venv/bin/python3.11"


@pytest.mark.parametrize(("shebang", "expected"), [
    ("#!/srv/venv/bin/python -E\n", "/srv/venv/bin/python"),
    ("#!/bin/sh\n'''exec' \"/a path/with spaces/python\" \"$0\" \"$@\"\n' '''\n",
     "/a path/with spaces/python"),
    ("#!/bin/sh\n'''exec' /long/venv/bin/python3 \"$0\" \"$@\"\n' '''\n",
     "/long/venv/bin/python3"),
    ("#!/bin/bash\nexec something-else \"$@\"\n", None),
    ("#!/usr/bin/perl\n", None),
    ("no shebang at all\n", None),
])
def test_python_for_shebangs(tmp_path: Path, shebang: str, expected: str | None) -> None:
    script = _executable(tmp_path / "sglang", shebang)
    assert python_for([str(script), "serve"]) == expected


def test_python_for_env_shebang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    interpreter = _executable(bin_dir / "python3", "#!/bin/sh\n")
    script = _executable(tmp_path / "sglang", "#!/usr/bin/env python3\n")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert python_for([str(script), "serve"]) == str(interpreter)


def test_python_for_uv_relocatable_trampoline(tmp_path: Path) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = _executable(bin_dir / "sglang", (
        "#!/bin/sh\n"
        "'''exec' \"$(dirname -- \"$(realpath -- \"$0\")\")\"/'python' \"$0\" \"$@\"\n' '''\n"))
    assert python_for([str(script), "serve"]) == str(bin_dir.resolve() / "python")


def test_python_for_unknown_command() -> None:
    assert python_for(["no-such-command-anywhere", "serve"]) is None


def test_interpreter_id_is_absolute_and_keeps_symlinks(tmp_path: Path) -> None:
    link = tmp_path / "python"
    link.symlink_to(sys.executable)
    assert interpreter_id(str(link)) == str(link)
    assert interpreter_id(None) == os.path.abspath(sys.executable)
