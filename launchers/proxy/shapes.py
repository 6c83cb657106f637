"""Model shapes for the proxy: Hugging Face config.json fields, from a shipped preset or a file.

Presets live in ``launchers/proxy/shapes/<name>.json`` and hold facts only, under the field
names config.json uses. A multimodal config (Kimi-K2.5) keeps its language model under
``text_config``; that part is what the proxy reads. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.abc import Traversable

PRESET_DIR = "shapes"


def _preset_dir() -> Traversable:
    return resources.files("launchers.proxy").joinpath(PRESET_DIR)


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir().iterdir() if p.name.endswith(".json"))


def load_shape(name_or_path: str) -> dict[str, Any]:
    """The config.json dict of a preset name or a path to a config.json (or its folder).

    ``text_config`` of a multimodal config is returned merged over the top level."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if name_or_path in preset_names():
        text = _preset_dir().joinpath(f"{name_or_path}.json").read_text()
        source = f"preset {name_or_path}"
    elif path.is_file():
        text = path.read_text()
        source = str(path)
    else:
        raise ValueError(f"unknown model shape {name_or_path!r}: not a preset "
                         f"({', '.join(preset_names())}) and no config.json at that path")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}: not valid JSON ({err})") from err
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object")
    inner = data.get("text_config")
    if isinstance(inner, dict):
        data = {**{k: v for k, v in data.items() if k != "text_config"}, **inner}
    return data


def shape_name(name_or_path: str) -> str:
    """A short label: the preset name, or the config's parent folder name."""
    if name_or_path in preset_names():
        return name_or_path
    path = Path(name_or_path)
    return (path if path.is_dir() else path.parent).name or path.stem


@dataclass(frozen=True)
class Shape:
    """The fields of a config.json the proxy uses, normalized across model families.

    Dense layers use ``intermediate_size``; MoE layers hold ``n_routed_experts`` experts of
    ``moe_intermediate_size`` with ``num_experts_per_tok`` per token and a shared MLP of
    ``shared_intermediate``. ``kv_lora_rank`` set means MLA attention, else GQA."""

    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_intermediate: int = 0
    first_k_dense_replace: int = 0
    quantized: bool = False  # the checkpoint has a quantization_config (the proxy holds bf16)

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], name: str = "") -> Shape:
        def req(key: str) -> int:
            value = config.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"shape {name!r}: config field {key} must be a positive "
                                 f"integer, got {value!r}")
            return value

        def opt(key: str, default: int = 0) -> int:
            value = config.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else default

        hidden, heads = req("hidden_size"), req("num_attention_heads")
        experts = opt("n_routed_experts") or opt("num_experts") or opt("num_local_experts")
        moe_inter = opt("moe_intermediate_size") or (req("intermediate_size") if experts else 0)
        shared = opt("n_shared_experts") * moe_inter or opt("shared_expert_intermediate_size")
        kv_lora = config.get("kv_lora_rank")
        mla = isinstance(kv_lora, int) and kv_lora > 0
        v_head = opt("v_head_dim")
        shape = cls(
            name=name,
            hidden_size=hidden,
            num_hidden_layers=req("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=opt("num_key_value_heads", heads),
            head_dim=opt("head_dim") or hidden // heads,
            intermediate_size=req("intermediate_size"),
            vocab_size=req("vocab_size"),
            q_lora_rank=(opt("q_lora_rank") or None) if mla else None,
            kv_lora_rank=kv_lora if mla else None,
            qk_nope_head_dim=opt("qk_nope_head_dim", v_head) if mla else 0,
            qk_rope_head_dim=opt("qk_rope_head_dim") if mla else 0,
            v_head_dim=v_head if mla else 0,
            n_routed_experts=experts,
            num_experts_per_tok=opt("num_experts_per_tok") if experts else 0,
            moe_intermediate_size=moe_inter,
            shared_intermediate=shared if experts else 0,
            first_k_dense_replace=min(opt("first_k_dense_replace"), req("num_hidden_layers")),
            quantized="quantization_config" in config,
        )
        if mla and (shape.v_head_dim < 1 or shape.qk_nope_head_dim + shape.qk_rope_head_dim < 1):
            raise ValueError(f"shape {name!r}: MLA needs v_head_dim and qk_*_head_dim")
        if experts and not 1 <= shape.num_experts_per_tok <= experts:
            raise ValueError(f"shape {name!r}: num_experts_per_tok must be in [1, {experts}]")
        return shape


def reference_key(name: str, config: Mapping[str, Any], **settings: object) -> str:
    """A file-name-safe key of everything that changes the proxy's output."""
    blob = json.dumps({"config": config, **settings}, sort_keys=True, default=str)
    digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
    label = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]
    return f"{label}-{digest}"
