"""SGLang launcher: args, command + env rendering, preflight, start, readiness, rounds."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SGLangArgs(BaseModel):
    """Base arguments of the sglang workload (validated at the CLI edge)."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["sglang"] = "sglang"
    model: str
    draft_model: str | None = None
    tp: int | None = Field(None, ge=1, description="default: all GPUs of the trial")
    speculative_algorithm: str | None = None
    server_args: list[str] = []
    server_cmd: list[str] = ["sglang", "serve"]
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=0, le=65535, description="0: a free port per trial")
    ready_timeout: float = Field(1800.0, gt=0)
    input_len: int = Field(256, ge=1)
    output_len: int = Field(256, ge=1)
    concurrency: list[int] = Field([1], min_length=1)
    objective_concurrency: int | None = None
    requests_per_round: int | None = Field(None, ge=1, description="default: 4 x concurrency")
    warmup_requests: int = Field(2, ge=0)
    request_timeout: float = Field(300.0, gt=0)
    nccl_debug: bool = True
    metrics: bool = True
    preflight: bool = True
    preflight_python: str | None = None
