"""Bad input (issue 5): one line on stderr naming what is wrong, exit code 2, nothing
launched, no Ray started. And the commands that launch nothing: plan, plan --json, spaces.

Each case runs ``python -m tuner`` in a subprocess with a private, empty RAY_TMPDIR: a Ray
start would leave ``ray/session_*`` there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from launchers import gpu
from launchers.process import free_port
from simulator.runs import ROOT, STAND_IN, env_for, owned_tuner

SERVER = " ".join(STAND_IN)


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str
    seconds: float
    ray_dir: Path
    out: Path

    @property
    def ray_started(self) -> bool:
        return (self.ray_dir / "ray").exists()


def servetune(tmp_path: Path, *args: str) -> Done:
    ray_dir = tmp_path / "raytmp"
    ray_dir.mkdir(exist_ok=True)
    out = tmp_path / "out"
    began = time.monotonic()
    done = subprocess.run(owned_tuner(args), cwd=ROOT, env=env_for(ray_dir),
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    return Done(done.returncode, done.stdout, done.stderr, time.monotonic() - began, ray_dir, out)


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    """A valid sglang run, to which each case adds one bad thing."""
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return ["run", "--model", str(model), "--server-cmd", SERVER, "--num-gpus", "8",
            "--no-dashboard", "--out", str(tmp_path / "out"), *extra]


def space_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return str(path)


def assert_bad_input(done: Done, *names: str) -> None:
    lines = done.stderr.splitlines()
    assert done.code == 2, f"exit {done.code}\n{done.stdout}\n{done.stderr}"
    assert len(lines) == 1 and lines[0].startswith("servetune: error: "), done.stderr
    for name in names:
        assert name in lines[0], f"{name!r} not named in: {lines[0]}"
    assert not done.ray_started, "Ray was started"
    assert not done.out.exists(), "the experiment folder was created"
    assert done.seconds < 30, f"took {done.seconds:.1f} s"


# ---------------------------------------------------------------- bad input, one each


def test_unknown_preset(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--space", "no-such-preset"))
    assert_bad_input(done, "no-such-preset", "presets:", "nccl-pcie")


def test_malformed_yaml(tmp_path: Path) -> None:
    path = space_file(tmp_path, "name: x\nknobs:\n  NCCL_ALGO: [allreduce:tree\n")
    assert_bad_input(servetune(tmp_path, *run_args(tmp_path, "--space", path)), path, "YAML")


def test_unknown_knob(tmp_path: Path) -> None:
    path = space_file(tmp_path, "name: x\nknobs:\n  NCCL_NO_SUCH: [1]\n")
    done = servetune(tmp_path, *run_args(tmp_path, "--space", path))
    assert_bad_input(done, path, "NCCL_NO_SUCH", "NCCL_ALGO")  # and lists the valid names


def test_value_out_of_domain(tmp_path: Path) -> None:
    path = space_file(tmp_path, "name: x\nknobs:\n  NCCL_NTHREADS: [128, 100]\n")
    done = servetune(tmp_path, *run_args(tmp_path, "--space", path))
    assert_bad_input(done, path, "NCCL_NTHREADS", "100")


def test_pinned_value_out_of_domain(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--pin", "NCCL_BUFFSIZE=3"))
    assert_bad_input(done, "NCCL_BUFFSIZE", "3")


def test_min_channels_above_max(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--space", "nccl-pcie", "--pin",
                                         "NCCL_MIN_NCHANNELS=4", "--pin", "NCCL_MAX_NCHANNELS=2"))
    assert_bad_input(done, "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")


def test_empty_space(tmp_path: Path) -> None:
    path = space_file(tmp_path, "name: x\nknobs: {}\n")
    assert_bad_input(servetune(tmp_path, *run_args(tmp_path, "--space", path)), path, "empty")


def test_zero_samples(tmp_path: Path) -> None:
    assert_bad_input(servetune(tmp_path, *run_args(tmp_path, "--samples", "0")), "--samples")


def test_model_path_missing(tmp_path: Path) -> None:
    args = run_args(tmp_path)
    args[args.index("--model") + 1] = str(tmp_path / "no-such-model")
    assert_bad_input(servetune(tmp_path, *args), "no-such-model", "does not exist")


def test_tp_larger_than_a_node(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--tp", "16"))
    assert_bad_input(done, "--tp 16", "8 GPUs")


def test_server_arg_repeats_a_pinned_knob(tmp_path: Path) -> None:
    # "--server-arg --flag": the value starts with '--' and must still be taken as the value.
    # A searched knob given there is the user's baseline; one pinned too is said twice.
    done = servetune(tmp_path, *run_args(tmp_path, "--space", "fusion", "--pin",
                                         "enable-mscclpp=false", "--server-arg",
                                         "--enable-mscclpp"))
    assert_bad_input(done, "--enable-mscclpp", "--pin sets too")


def test_server_arg_repeats_a_flag_servetune_sets(tmp_path: Path) -> None:
    done = servetune(tmp_path, *run_args(tmp_path, "--server-arg=--port 1234"))
    assert_bad_input(done, "--port")


def test_unreachable_address(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    args = [a for a in run_args(tmp_path) if a not in ("--num-gpus", "8")]
    done = servetune(tmp_path, *args, "--address", address)
    assert_bad_input(done, address, "unreachable")


def test_resume_folder_not_an_experiment(tmp_path: Path) -> None:
    folder = tmp_path / "not-an-experiment"
    folder.mkdir()
    done = servetune(tmp_path, "run", "--resume", str(folder))
    assert_bad_input(done, str(folder), "not a servetune experiment")


def test_unknown_flag_is_one_line(tmp_path: Path) -> None:
    assert_bad_input(servetune(tmp_path, "run", "--no-such-flag"), "--no-such-flag")


def test_out_folder_name_is_not_an_experiment_name(tmp_path: Path) -> None:
    args = run_args(tmp_path)
    args[args.index("--out") + 1] = str(tmp_path / "out dir $(x)")
    assert_bad_input(servetune(tmp_path, *args), "--out", "--name")


def test_out_with_a_line_break(tmp_path: Path) -> None:
    args = run_args(tmp_path)
    args[args.index("--out") + 1] = str(tmp_path / "a\nb")
    assert_bad_input(servetune(tmp_path, *args), "--out", "line break")


# ---------------------------------------------------------------- commands that launch nothing


GRID_SPACE = """\
name: channels
knobs:
  NCCL_MIN_NCHANNELS: [8]
  NCCL_MAX_NCHANNELS: [2]
"""


def test_plan_json_lists_argv_env_and_invalid_configs(tmp_path: Path) -> None:
    path = space_file(tmp_path, GRID_SPACE)
    done = servetune(tmp_path, *["plan" if a == "run" else a for a in run_args(tmp_path)],
                     "--space", path, "--search", "grid", "--samples", "10", "--json")
    assert done.code == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(entries) == 4  # the whole grid, baseline first
    for entry in entries:
        assert {"argv", "env", "valid", "reason"} <= set(entry)
        assert entry["argv"][:3] == [*STAND_IN[:1], "-m", STAND_IN[2]]
        assert all(isinstance(v, str) for v in entry["env"].values())
    base = entries[0]
    assert base["valid"] and base["reason"] is None
    assert "NCCL_MIN_NCHANNELS" not in base["env"] and "NCCL_MAX_NCHANNELS" not in base["env"]
    invalid = [e for e in entries if not e["valid"]]
    assert len(invalid) == 1
    assert invalid[0]["env"]["NCCL_MIN_NCHANNELS"] == "8"
    assert "NCCL_MIN_NCHANNELS" in invalid[0]["reason"] and "NCCL_MAX_NCHANNELS" in \
        invalid[0]["reason"]
    assert not done.ray_started and not done.out.exists()


def test_plan_prints_each_command(tmp_path: Path) -> None:
    path = space_file(tmp_path, GRID_SPACE)
    done = servetune(tmp_path, *["plan" if a == "run" else a for a in run_args(tmp_path)],
                     "--space", path, "--search", "grid", "--samples", "10")
    assert done.code == 0, done.stderr
    text = done.stdout
    assert text.startswith("# baseline")
    assert text.count("--model-path") == 4
    assert "INVALID" in text and "NCCL_MIN_NCHANNELS=8" in text
    assert not done.ray_started and not done.out.exists()


def test_plan_sizes_the_default_search_and_says_how_long(tmp_path: Path) -> None:
    """No --search, no --samples: the default search over a budget sized from the space,
    said with its time estimate before anything is launched."""
    path = space_file(tmp_path, "name: two\nknobs:\n  NCCL_PROTO: [LL, Simple]\n"
                      "  NCCL_MAX_NCHANNELS: [4, 16]\n")
    done = servetune(tmp_path, *["plan" if a == "run" else a for a in run_args(tmp_path)],
                     "--space", path)
    assert done.code == 0, done.stderr
    budget = next(line for line in done.stdout.splitlines() if line.startswith("# budget: "))
    assert budget.startswith("# budget: 9 trials, sized from the space (every one of the "
                             "space's 9 valid points); about "), budget
    assert "a typical sglang trial's" in budget
    assert "# auto: later proposals depend on measured results" in done.stdout
    assert done.stdout.count("--model-path") == 9
    assert not done.ray_started and not done.out.exists()


def _plan_args(tmp_path: Path, *extra: str) -> list[str]:
    return [a for a in ["plan" if a == "run" else a for a in run_args(tmp_path)]
            if a not in ("--num-gpus", "8")] + [*extra, "--samples", "2"]


@pytest.mark.skipif(gpu.device_count() >= 8, reason="this machine has 8 GPUs")
def test_plan_takes_tp_as_given_on_a_machine_without_enough_gpus(tmp_path: Path) -> None:
    """Issue 16, item 4: planning for a GPU node from a laptop is what plan is for."""
    done = servetune(tmp_path, *_plan_args(tmp_path, "--tp", "8"))
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == ("# planned as given, but this machine has fewer GPUs: --tp 8 is larger "
                        f"than the {gpu.device_count()} GPUs a node has"), lines[:3]
    assert done.stdout.count("--tp-size 8") == 2  # the baseline and the one config
    assert not done.ray_started and not done.out.exists()
    # run still refuses it: a run would launch what cannot start here
    run = servetune(tmp_path, *["run" if a == "plan" else a for a in _plan_args(tmp_path,
                                                                                  "--tp", "8")])
    assert_bad_input(run, "--tp 8", f"{gpu.device_count()} GPUs")


def test_plan_takes_tp_as_given_with_fewer_declared_gpus(tmp_path: Path) -> None:
    done = servetune(tmp_path, *_plan_args(tmp_path, "--tp", "8", "--num-gpus", "2", "--json"))
    assert done.code == 0, done.stderr
    entries = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["argv"][e["argv"].index("--tp-size") + 1] for e in entries] == ["8", "8"]
    assert not done.ray_started and not done.out.exists()


def test_spaces_lists_presets_with_sizes(tmp_path: Path) -> None:
    done = servetune(tmp_path, "spaces")
    assert done.code == 0, done.stderr
    for preset in ("verify-campaign", "nccl-pcie", "nccl-nvlink", "fusion", "speculative"):
        line = next((ln for ln in done.stdout.splitlines() if ln.startswith(preset + " ")), "")
        assert " points (" in line, f"{preset}: {line!r}"
    assert not done.ray_started


def test_python_m_tuner_is_the_servetune_command(tmp_path: Path) -> None:
    done = servetune(tmp_path, "--help")
    assert done.code == 0
    for command in ("run", "plan", "report", "best", "spaces"):
        assert command in done.stdout
    script = Path(sys.executable).parent / "servetune"
    if script.exists():  # the console script of an installed checkout
        same = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                              env={**os.environ, "RAY_TMPDIR": str(done.ray_dir)}, timeout=60)
        assert same.stdout == done.stdout
    assert not done.ray_started


# ---------------------------------------------------------------- SGLang's env levers (issue 15)


def test_a_space_with_sglangs_pcie_ipc_lever_plans(tmp_path: Path) -> None:
    space = space_file(tmp_path, "name: ipc\nknobs:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCE: [0, 1]\n")
    model = tmp_path / "model"
    model.mkdir()
    done = servetune(tmp_path, "plan", "--model", str(model), "--server-cmd", SERVER,
                     "--space", space, "--search", "grid", "--json", "--out",
                     str(tmp_path / "out"))
    assert done.code == 0, done.stderr
    envs = [json.loads(line)["env"] for line in done.stdout.splitlines()]
    assert [e.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE") for e in envs] == [None, "0", "1"]
    assert not done.ray_started and not done.out.exists()


def test_a_misspelt_sglang_lever_is_one_line_naming_the_real_one(tmp_path: Path) -> None:
    space = space_file(tmp_path, "name: ipc\nknobs:\n  SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE: [0, 1]\n")
    done = servetune(tmp_path, *run_args(tmp_path, "--space", space))
    assert done.code == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "SGLANG_ENABLE_PCIE_IPC_ALLREDUCEE" in done.stderr
    assert "did you mean SGLANG_ENABLE_PCIE_IPC_ALLREDUCE?" in done.stderr
    assert not done.ray_started and not done.out.exists()


# ---------------------------------------------------------------- SGLang's own checks (issue 23)
MODELS = ROOT / "tests" / "launchers" / "models"


def test_a_partial_speculative_shape_is_bad_input_with_sglangs_own_message(
        tmp_path: Path) -> None:
    """EAGLE3 with topk and no steps (the field's crash at launch): SGLang's ServerArgs
    asserts; servetune says so before anything starts."""
    done = servetune(tmp_path, "run", "--model", str(MODELS / "tiny-llama"),
                     "--draft-model", str(MODELS / "tiny-llama-eagle3"),
                     "--speculative-algorithm", "EAGLE3",
                     "--server-arg", "--speculative-eagle-topk 1", "--server-cmd", SERVER,
                     "--space", "nccl-nvlink", "--num-gpus", "8", "--no-dashboard",
                     "--out", str(tmp_path / "out"))
    assert_bad_input(done, "own checks reject the command", "AssertionError",
                     "_handle_eagle_family")
    assert not done.ray_started
