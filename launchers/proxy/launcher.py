"""Proxy launcher: args, one process tree of one rank per GPU (or 2 gloo ranks on CPU)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ProxyArgs(BaseModel):
    """Base arguments of the proxy workload."""

    model_config = ConfigDict(extra="forbid")
    kind: Literal["proxy"] = "proxy"
    model: str | None = Field(None, description="shape preset name or a config.json path; "
                              "default: 'tiny' on CPU, 'llama-3.1-70b' on GPU")
    layers: int | None = Field(None, ge=1, description="run a subset of layers, scale results")
    batch: int = Field(1, ge=1, description="requests in the verify batch")
    draft_tokens: int = Field(4, ge=1, description="used when the config does not set it")
    kv_len: int = Field(4096, ge=1)
    ranks: int | None = Field(None, ge=1, description="default: GPUs of the trial, or 2 on CPU")
    device: Literal["auto", "cuda", "cpu"] = "auto"
    iters_per_round: int = Field(50, ge=1)
    graph: bool = True
    check_correctness: bool = True
    accept_length: float = Field(3.0, gt=0, description="assumed, for est_tok_s")
    draft_ms: float | None = Field(None, ge=0, description="assumed draft time per cycle")
    port: int = Field(0, ge=0, le=65535, description="rendezvous port; 0: a free one per trial")
    ready_timeout: float = Field(600.0, gt=0)
