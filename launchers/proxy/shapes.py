"""Model shapes for the proxy: Hugging Face config.json fields, from a shipped preset or a file.

Presets live in ``launchers/proxy/shapes/<name>.json`` and hold facts only, under the field
names config.json uses. A multimodal config (Kimi-K2.5) keeps its language model under
``text_config``; that part is what the proxy reads. Nothing here imports torch.

A checkpoint's ``quantization_config`` is read into a ``Quantization``: the bytes per weight,
scales included, of each part of a layer (``PARTS``) as the server holds them, so that the
proxy can read as many bytes per pass as the real model (``launchers.proxy.model``). Two
formats are understood: compressed-tensors (``targets`` Linear minus the ``ignore`` patterns;
Kimi-K2.5's INT4 routed experts) and ``fp8`` (DeepSeek-V3's 128x128 block FP8). Any other
method is reported as not modelled and read in the model dtype.
"""

from __future__ import annotations

import hashlib
import json
import re
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


def _read_config(name_or_path: str) -> dict[str, Any]:
    """The config.json dict of a preset name or a path to a config.json (or its folder), as
    written."""
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
    return data


def load_shape(name_or_path: str) -> dict[str, Any]:
    """The config.json dict of a preset name or a path to a config.json (or its folder).

    ``text_config`` of a multimodal config is returned merged over the top level."""
    data = _read_config(name_or_path)
    inner = data.get("text_config")
    if isinstance(inner, dict):
        data = {**{k: v for k, v in data.items() if k != "text_config"}, **inner}
    return data


def architecture(name_or_path: str) -> str | None:
    """The model's architecture as SGLang reads it: ``architectures[0]`` of the top level
    (a multimodal config's own, not its text model's); None when unreadable or absent."""
    try:
        names = _read_config(name_or_path).get("architectures")
    except ValueError:
        return None
    return str(names[0]) if isinstance(names, list) and names else None


def shape_name(name_or_path: str) -> str:
    """A short label: the preset name, or the config's parent folder name."""
    if name_or_path in preset_names():
        return name_or_path
    path = Path(name_or_path)
    return (path if path.is_dir() else path.parent).name or path.stem


# The parts of a decoder layer the proxy holds, with a module name of each as Hugging Face
# DeepSeek-style checkpoints spell it: what quantization_config's ignore patterns match.
PARTS: dict[str, str] = {
    "attention": "model.layers.1.self_attn.o_proj",
    "dense_mlp": "model.layers.0.mlp.down_proj",
    "shared_experts": "model.layers.1.mlp.shared_experts.down_proj",
    "routed_experts": "model.layers.1.mlp.experts.0.down_proj",
    "lm_head": "lm_head",
}
_SCALE_BYTES = {"torch.uint8": 1, "torch.float8_e4m3fn": 1, "torch.float8_e8m0fnu": 1,
                "torch.float16": 2, "torch.bfloat16": 2, "torch.float32": 4}


@dataclass(frozen=True)
class Quantization:
    """What a checkpoint's quantization_config means for the bytes a pass reads.

    ``part_bytes``: (part, bytes per weight with scales) for each quantized part of ``PARTS``;
    parts not listed are held in the model dtype. The router and the KV cache never are."""

    method: str
    scheme: str = ""
    part_bytes: tuple[tuple[str, float], ...] = ()
    modelled: bool = True

    def bytes_per_weight(self, part: str) -> float | None:
        return dict(self.part_bytes).get(part)

    def describe(self) -> dict[str, object]:
        return {"method": self.method, "scheme": self.scheme, "modelled": self.modelled,
                "bytes_per_weight": dict(self.part_bytes)}


def _ignored(name: str, patterns: list[Any]) -> bool:
    """compressed-tensors matching: ``re:`` patterns match from the start of the module
    name; plain ones are a module name or its last components."""
    for pattern in patterns:
        if not isinstance(pattern, str):
            continue
        if pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif name == pattern or name.endswith("." + pattern):
            return True
    return False


def _compressed_tensors(q: Mapping[str, Any]) -> Quantization:
    ignore = list(q.get("ignore") or [])
    part_bytes: dict[str, float] = {}
    schemes = []
    groups = q.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, dict) else []:
        weights = group.get("weights") if isinstance(group, dict) else None
        targets = group.get("targets") or []
        if not isinstance(weights, dict) or "Linear" not in targets:
            continue
        bits = int(weights.get("num_bits") or 16)
        size = weights.get("group_size")
        strategy = weights.get("strategy") or "tensor"
        scale = _SCALE_BYTES.get(str(weights.get("scale_dtype")), 2)  # model dtype: bf16
        per_weight = bits / 8
        if strategy == "group" and isinstance(size, int) and size > 0:
            per_weight += scale / size
            if weights.get("symmetric") is False:
                per_weight += bits / 8 / size  # a packed zero point per group
        schemes.append(f"{weights.get('type', 'int')}{bits} {strategy}"
                       + (f" {size}" if strategy == "group" else ""))
        for part, module in PARTS.items():
            if not _ignored(module, ignore):
                part_bytes[part] = per_weight
    scheme = f"{', '.join(schemes)} on {', '.join(sorted(part_bytes)) or 'nothing'}"
    return Quantization("compressed-tensors", scheme, tuple(sorted(part_bytes.items())))


def _fp8(q: Mapping[str, Any]) -> Quantization:
    block = q.get("weight_block_size")
    per_weight = 1.0
    if isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) for b in block):
        per_weight += 4 / (block[0] * block[1])  # a float32 scale per block
    skip = [*(q.get("modules_to_not_convert") or q.get("ignored_layers") or []), "lm_head"]
    part_bytes = {part: per_weight for part, module in PARTS.items()
                  if not _ignored(module, skip)}
    scheme = f"fp8 {q.get('fmt', 'e4m3')}" + (
        f" {block[0]}x{block[1]} blocks" if isinstance(block, list) and len(block) == 2 else "")
    scheme += f" on {', '.join(sorted(part_bytes))}"
    return Quantization("fp8", scheme, tuple(sorted(part_bytes.items())))


def read_quantization(config: Mapping[str, Any]) -> Quantization | None:
    """The checkpoint's quantization_config, or None for an unquantized checkpoint."""
    q = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(q, dict):
        return None
    method = str(q.get("quant_method") or "unknown")
    if method == "compressed-tensors":
        return _compressed_tensors(q)
    if method == "fp8":
        return _fp8(q)
    return Quantization(method, "not modelled: held in the model dtype", (), modelled=False)


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
    quantization: Quantization | None = None  # the checkpoint's quantization_config

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def quantized(self) -> bool:
        """The checkpoint has a quantization_config."""
        return self.quantization is not None

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
            quantization=read_quantization(config),
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
