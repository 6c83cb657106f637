"""What a trial's server runs: the configuration SGLang resolved, before the launch (its own
resolution in the preflight reader, resolution.py) and after it (``/server_info``).

SGLang resolves some settings itself: with ``--speculative-eagle-topk 1`` the draft tokens
become steps + 1 whatever was asked; without steps it picks the whole speculative shape;
the attention backend and the CUDA graph sizes depend on the model and the GPU. So a trial
records what ran, and two configurations whose commands resolve alike are one point.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from launchers.sglang.preflight import Resolution
from search_spaces.knobs import Value

RESOLVED_FILE = "resolved.json"
SERVER_FILE = "server_resolved.json"
# What a report shows of what ran (the rest stays in the files).
SHOWN = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
         "speculative_num_draft_tokens", "attention_backend", "sampling_backend",
         "cuda_graph_bs_decode", "cuda_graph_backend_prefill", "disable_cuda_graph",
         "load_format", "speculative_draft_load_format", "tp_size")
# Fields that differ between two launches of one configuration (or between the reader's
# machine and the server's): never part of what "resolves alike" compares.
PER_LAUNCH = frozenset({"host", "port", "nccl_port", "dist_init_addr", "launch_command",
                        "metrics_http_port", "grpc_port", "file_storage_path", "random_seed",
                        "base_gpu_id", "device"})


def comparable(resolved: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in resolved.items() if k not in PER_LAUNCH}


def key(resolution: Resolution, env: Mapping[str, str]) -> str | None:
    """The point a resolved command is, with the env SGLang does not see in its arguments
    (NCCL_*, SGLANG_*); None when SGLang could not resolve it here."""
    if not resolution.ok or resolution.resolved is None:
        return None
    text = json.dumps([comparable(resolution.resolved), sorted(env.items())], sort_keys=True,
                      default=str)
    return "sglang:" + hashlib.sha256(text.encode()).hexdigest()[:20]


def knob_values(resolution: Resolution | None) -> dict[str, Value] | None:
    """SGLang's resolved arguments as flag knobs' values: ``speculative_num_steps`` is
    ``--speculative-num-steps``; a float as text (a knob's non-integer values are), a field
    left unset or not a plain value left out. None when SGLang could not resolve it here."""
    if resolution is None or not resolution.ok or resolution.resolved is None:
        return None
    out: dict[str, Value] = {}
    for field, value in comparable(resolution.resolved).items():
        name = "--" + field.replace("_", "-")
        if isinstance(value, float):
            out[name] = str(value)
        elif isinstance(value, (bool, int, str)):
            out[name] = value
    return out


def shown(resolved: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: resolved.get(k) for k in SHOWN if k in resolved} if resolved else {}


def record(trial_dir: Path, resolution: Resolution, env: Mapping[str, str]) -> None:
    """resolved.json in the trial's folder: SGLang's verdict, what it resolved, the key."""
    trial_dir.mkdir(parents=True, exist_ok=True)
    knob_env = {k: v for k, v in env.items() if k.startswith(("NCCL_", "SGLANG_"))}
    data = {**resolution.to_json(), "key": key(resolution, knob_env),
            "shown": shown(resolution.resolved)}
    (trial_dir / RESOLVED_FILE).write_text(json.dumps(data, indent=1, default=str))


def from_server(info: Mapping[str, Any]) -> dict[str, Any]:
    """``/server_info``: the launching process's resolved arguments, updated with what the
    scheduler changed at run time (``internal_states[0]``, SGLang 0.5.16's runtime
    mutations such as the draft's load format and context length)."""
    top = {k: v for k, v in info.items() if k != "internal_states"}
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        top.update({k: v for k, v in states[0].items() if k in top})
    return top


def record_server(trial_dir: Path, info: Mapping[str, Any]) -> list[str]:
    """server_resolved.json; returns warnings where the server ran other than the preflight
    resolved (the shown fields), e.g. a release that resolves differently from the reader's."""
    ran = from_server(info)
    (trial_dir / SERVER_FILE).write_text(json.dumps(
        {"version": info.get("version"), "shown": shown(ran), "resolved": ran}, indent=1,
        default=str))
    try:
        before = json.loads((trial_dir / RESOLVED_FILE).read_text()).get("resolved") or {}
    except (OSError, ValueError):
        return []
    return [f"SGLang resolved {name}={before[name]!r} before the launch, the server runs "
            f"{ran[name]!r}" for name in SHOWN
            if name in before and name in ran and before[name] != ran[name]]


def records(trial_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """The trial's records of what SGLang resolved, the server's own first: (file, content)
    for each that exists and reads."""
    for name in (SERVER_FILE, RESOLVED_FILE):
        try:
            data = json.loads((trial_dir / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield name, data


def load(trial_dir: Path) -> dict[str, Any]:
    """What ran, for a report: the server's own reading where the trial got that far."""
    return next(({"source": name, **data["shown"]} for name, data in records(trial_dir)
                 if data.get("shown")), {})
