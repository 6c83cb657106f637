"""The proxy's model: a tensor-parallel decoder stack with a real model's shapes.

One verify pass over T = batch x draft tokens, on each of t ranks:
  per layer: RMSNorm, attention, all_reduce, residual, RMSNorm, MLP or MoE, all_reduce, residual
  at the end: RMSNorm, LM head (vocab split over ranks), all_gather of the logits
so 2 all-reduces of [T x hidden] per layer and one all-gather of [T x vocab/t], as the
server's verify pass does under tensor parallelism.

(a) Bytes read per pass, per GPU (``Geometry.bytes_per_pass``), e = bytes per element
(2 for bf16), H/KV heads, d head dim, P = min(experts, T x top_k):
  attention GQA  hidden x (H/t + 2 KV/t) d + (H/t) d x hidden     (KV/t is at least 1: replicated)
  attention MLA  hidden x (q_lora + kv_lora + rope) [replicated] + q_lora x (H/t)(nope + rope)
                 + kv_lora x (H/t)(nope + v) [kv_b_proj, absorbed] + (H/t) v x hidden
  KV cache       GQA batch x kv_len x 2 (KV/t) d; MLA batch x kv_len x (kv_lora + rope) [replicated]
  dense MLP      3 x hidden x intermediate/t
  MoE            P x 3 x hidden x moe_intermediate/t + router hidden x experts
                 + shared experts 3 x hidden x shared_intermediate/t
  LM head        hidden x ceil(vocab/t)
all times e. A part the checkpoint quantizes (``shapes.Quantization``: Kimi-K2.5's INT4 routed
experts, DeepSeek-V3's FP8 linears) is held narrower, so that the proxy reads the bytes the
server reads: the width that part's weights are counted with above (an MLP or expert
intermediate size, an attention or LM head output width) becomes w x b / e, rounded, where b is
the checkpoint's bytes per weight with scales (0.5 + 2/32 for INT4 in groups of 32 with bf16
scales; 1 + 4/128^2 for FP8 in 128x128 blocks). ``bytes_per_pass`` counts what the proxy
reads, the effective bytes (``Geometry(..., quantize=False)`` counts the model dtype). The proxy
holds exactly these tensors, so the bytes it reads are the bytes counted (a test checks this).

(b) The approximation: ``APPROXIMATION`` below, returned by ``approximation()``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.distributed as dist

from launchers.proxy.shapes import Shape

APPROXIMATION: tuple[str, ...] = (
    "Weights are random (fixed seed) and held in bf16 on GPU, float32 on CPU.",
    "A quantized checkpoint (quantization_config: compressed-tensors such as Kimi-K2.5's INT4 "
    "routed experts, or FP8 blocks such as DeepSeek-V3's) is modelled by its bytes, not by its "
    "kernels: each quantized weight is held narrower by (checkpoint bytes per weight, scales "
    "included) / (proxy bytes per element), so the pass reads the checkpoint's bytes with plain "
    "matmuls. MLP and expert intermediate widths shrink; attention and LM head outputs are "
    "computed narrower and tiled back to full width. The dequantizing kernels' own cost, and "
    "FP8 tensor-core speed, are not modelled; a quantization method other than these two is "
    "read in the model dtype (the ready line says so).",
    "MoE routing is fixed: verify token i goes to experts (i*top_k + j) mod P, so every "
    "token reaches its own distinct experts, P = min(experts, tokens*top_k) of them - the "
    "most expert weight a pass can read (real routing shares experts between tokens). Only "
    "those P experts are held; the experts a pass does not reach cost memory, not time. The "
    "router matmul runs and its logits weight the chosen experts.",
    "Attention is decode-style: each verify token attends to its request's KV cache of "
    "kv_len entries (read in full), not to the other draft tokens (no tree mask); new K/V are "
    "computed but not appended; no RoPE. MLA runs in the absorbed form SGLang decodes with.",
    "The pass starts from hidden states: no embedding lookup and no embedding all-reduce. "
    "Norms carry no weights. Activations and softmax are counted as compute, not bytes.",
    "With --layers N fewer than the model's, N layers run (dense and MoE in the model's "
    "proportion) and their time is scaled by num_hidden_layers/N; the LM head and its "
    "all-gather are timed on their own and not scaled; collectives are timed at the full "
    "model's count. On GPUs where the whole model does not fit and no --layers is given, N is "
    "the most layers that fit in 85% of a GPU's memory (scaled: true).",
)


FIT_FRACTION = 0.85  # of a GPU's total memory that the weights and caches may take when fitted


def approximation() -> list[str]:
    return list(APPROXIMATION)


def fit_layers(geo: Geometry, memory: int) -> int | None:
    """The most layers of ``geo``'s model whose weights and caches take at most FIT_FRACTION
    of ``memory`` bytes per GPU (at least 1); None when the whole model fits. Deterministic for
    a GPU model (total memory, not free memory), so every trial of an experiment runs the same
    layers and shares one correctness reference."""
    budget = FIT_FRACTION * memory
    n = geo.shape.num_hidden_layers
    if replace(geo, layers=None).bytes_per_pass(full=False)["total"] <= budget:
        return None
    fit = 1
    for k in range(2, n):
        if replace(geo, layers=k).bytes_per_pass(full=False)["total"] > budget:
            break
        fit = k
    return fit


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Geometry:
    """Per-rank sizes of one proxy run, and the bytes a verify pass reads."""

    shape: Shape
    ranks: int = 1
    batch: int = 1
    draft_tokens: int = 1
    kv_len: int = 1
    layers: int | None = None  # layers run; None: all
    elem_bytes: int = 2
    quantize: bool = True  # hold quantized parts at the checkpoint's bytes (False: as dtype)

    def __post_init__(self) -> None:
        s, t = self.shape, self.ranks
        if s.num_attention_heads % t:
            raise ValueError(f"{s.name}: {s.num_attention_heads} attention heads do not split "
                             f"over {t} ranks")
        kv = s.num_key_value_heads
        if not s.is_mla and (kv % t if kv >= t else t % kv):
            raise ValueError(f"{s.name}: {kv} KV heads do not split over {t} ranks")
        if not s.is_mla and (s.num_attention_heads // t) % self.kv_heads:
            raise ValueError(f"{s.name}: heads per rank not a multiple of KV heads per rank")
        if self.layers is not None and not 1 <= self.layers <= s.num_hidden_layers:
            raise ValueError(f"{s.name}: --layers must be in [1, {s.num_hidden_layers}]")

    # ------------------------------------------------------------ sizes
    @property
    def tokens(self) -> int:
        return self.batch * self.draft_tokens

    @property
    def layers_run(self) -> int:
        return self.layers or self.shape.num_hidden_layers

    @property
    def scaled(self) -> bool:
        return self.layers_run < self.shape.num_hidden_layers

    @property
    def scale(self) -> float:
        return self.shape.num_hidden_layers / self.layers_run

    @property
    def heads(self) -> int:
        return self.shape.num_attention_heads // self.ranks

    @property
    def kv_heads(self) -> int:
        return max(1, self.shape.num_key_value_heads // self.ranks)

    @property
    def intermediate(self) -> int:
        return _ceil_div(self.shape.intermediate_size, self.ranks)

    @property
    def moe_intermediate(self) -> int:
        return _ceil_div(self.shape.moe_intermediate_size, self.ranks)

    @property
    def shared_intermediate(self) -> int:
        return _ceil_div(self.shape.shared_intermediate, self.ranks)

    @property
    def vocab_shard(self) -> int:
        return _ceil_div(self.shape.vocab_size, self.ranks)

    def width(self, part: str, n: int) -> int:
        """The width ``n`` of a weight of ``part`` as held: scaled by the checkpoint's bytes
        per weight over the proxy's bytes per element when the checkpoint quantizes it."""
        q = self.shape.quantization
        b = q.bytes_per_weight(part) if q is not None and self.quantize else None
        if b is None or b >= self.elem_bytes:
            return n
        return max(1, round(n * b / self.elem_bytes))

    @property
    def dense_width(self) -> int:
        return self.width("dense_mlp", self.intermediate)

    @property
    def moe_width(self) -> int:
        return self.width("routed_experts", self.moe_intermediate)

    @property
    def shared_width(self) -> int:
        return self.width("shared_experts", self.shared_intermediate)

    @property
    def expert_pool(self) -> int:
        """Distinct experts a pass reaches per layer (each token its own top_k)."""
        return min(self.shape.n_routed_experts, self.tokens * self.shape.num_experts_per_tok)

    @property
    def expert_rounds(self) -> int:
        """Tokens per expert: more than 1 once tokens x top_k exceeds the experts."""
        return _ceil_div(self.tokens * self.shape.num_experts_per_tok, self.expert_pool)

    def layer_kinds(self, full: bool = False) -> tuple[str, ...]:
        """``dense`` or ``moe`` per layer (run, or the whole model with ``full``)."""
        s = self.shape
        n = s.num_hidden_layers if full else self.layers_run
        if not s.is_moe:
            return ("dense",) * n
        k = s.first_k_dense_replace
        dense = k if n >= s.num_hidden_layers else min(k, int(n * k / s.num_hidden_layers + 0.5))
        return ("dense",) * dense + ("moe",) * (n - dense)

    # ------------------------------------------------------------ parameters per rank
    def attention_params(self) -> int:
        s, h, hl = self.shape, self.shape.hidden_size, self.heads

        def w(n: int) -> int:
            return self.width("attention", n)

        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, nope, rope = s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim
            q_lora = s.q_lora_rank or 0
            a = h * w(q_lora + lat + rope)  # q_a and kv_a (replicated)
            q_b = (q_lora or h) * w(hl * (nope + rope))
            kv_b = hl * nope * w(lat) + hl * lat * w(s.v_head_dim)  # absorbed: k_c, v_c
            return a + q_b + kv_b + hl * s.v_head_dim * w(h)
        d = s.head_dim
        return h * w((hl + 2 * self.kv_heads) * d) + hl * d * w(h)

    def kv_cache_elems(self) -> int:
        s = self.shape
        if s.is_mla:
            assert s.kv_lora_rank is not None
            return self.batch * self.kv_len * (s.kv_lora_rank + s.qk_rope_head_dim)
        return self.batch * self.kv_len * 2 * self.kv_heads * s.head_dim

    def dense_params(self) -> int:
        return 3 * self.shape.hidden_size * self.dense_width

    def moe_params(self) -> int:
        h = self.shape.hidden_size
        routed = self.expert_pool * 3 * h * self.moe_width
        return routed + h * self.shape.n_routed_experts + 3 * h * self.shared_width

    def head_params(self) -> int:
        return self.shape.hidden_size * self.width("lm_head", self.vocab_shard)

    def bytes_per_pass(self, full: bool = True) -> dict[str, int]:
        """Bytes one verify pass reads on one GPU, by part (``full``: the whole model)."""
        kinds = self.layer_kinds(full)
        n, e = len(kinds), self.elem_bytes
        parts = {
            "attention": n * self.attention_params() * e,
            "kv_cache": n * self.kv_cache_elems() * e,
            "dense_mlp": kinds.count("dense") * self.dense_params() * e,
            "moe": kinds.count("moe") * self.moe_params() * e,
            "lm_head": self.head_params() * e,
        }
        parts["total"] = sum(parts.values())
        return parts

    def describe(self) -> dict[str, object]:
        q = self.shape.quantization
        return {"tokens": self.tokens, "layers_run": self.layers_run, "scaled": self.scaled,
                "num_hidden_layers": self.shape.num_hidden_layers,
                "heads_per_rank": self.heads, "kv_heads_per_rank": self.kv_heads,
                "expert_pool": self.expert_pool if self.shape.is_moe else 0,
                "layer_kinds": "".join(k[0] for k in self.layer_kinds()),
                "quantization": q.describe() if q is not None else None}


# ---------------------------------------------------------------- collectives


class Comm(Protocol):
    def all_reduce(self, t: torch.Tensor) -> None: ...

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None: ...


class LocalComm:
    """One rank, no process group."""

    def all_reduce(self, t: torch.Tensor) -> None:
        return None

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        out.copy_(t)


COMM_SPAN = "servetune.comm."  # + all_reduce / all_gather: a collective in a profile


def _comm_span(name: str) -> contextlib.AbstractContextManager[object]:
    """A profiler span around one collective, only while a profiler records (nothing on the
    timed path otherwise). On CPU it marks gloo's time as communication in the trace; CUDA
    graph replays run no Python, so there the kernels' names say it instead."""
    if torch.autograd._profiler_enabled():
        return torch.profiler.record_function(COMM_SPAN + name)
    return contextlib.nullcontext()


class DistComm:
    """The default torch.distributed process group."""

    def __init__(self) -> None:
        # all_gather_single (newer torch) is what all_gather_into_tensor became
        self._gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def all_reduce(self, t: torch.Tensor) -> None:
        with _comm_span("all_reduce"):
            dist.all_reduce(t)

    def all_gather(self, out: torch.Tensor, t: torch.Tensor) -> None:
        with _comm_span("all_gather"):
            self._gather(out, t)


# ---------------------------------------------------------------- the model


def _norm(x: torch.Tensor) -> torch.Tensor:
    var = x.float().pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-6).to(x.dtype)


def _widen(y: torch.Tensor, n: int) -> torch.Tensor:
    """``y`` tiled along its last dimension to width ``n``: the output of a weight held narrower
    for a quantized checkpoint (``Geometry.width``) back at its real width."""
    have = y.shape[-1]
    if have == n:
        return y
    # contiguous: NCCL collectives refuse strided tensors (gloo does not mind)
    return y.repeat(*([1] * (y.dim() - 1)), _ceil_div(n, have))[..., :n].contiguous()


def _swiglu(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


class ProxyModel:
    """The per-rank stack. Replicated tensors (input, MLA cache and down-projections of the
    latent, router) are drawn from a generator shared by all ranks, shards from a per-rank
    one, so every rank ends with the same logits, as under real tensor parallelism."""

    def __init__(self, geo: Geometry, *, rank: int = 0, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, seed: int = 0,
                 comm: Comm | None = None) -> None:
        self.geo, self.rank, self.dtype = geo, rank, dtype
        self.device = torch.device(device)
        self.comm: Comm = comm or LocalComm()
        self._shared = torch.Generator(device=self.device).manual_seed(seed)
        self._own = torch.Generator(device=self.device).manual_seed(seed * 100_003 + rank + 1)
        s, h, T = geo.shape, geo.shape.hidden_size, geo.tokens
        self.out_scale = 1.0 / math.sqrt(2 * s.num_hidden_layers)  # residual branches stay small
        self.x = self._rand((T, h), 1.0, self._shared)
        self.layers = [self._build_layer(kind) for kind in geo.layer_kinds()]
        self.head_w = self._rand((h, geo.width("lm_head", geo.vocab_shard)), h, self._own)
        self.gather_buf = torch.zeros((geo.ranks * T, geo.vocab_shard), device=self.device,
                                      dtype=dtype)
        self.gather_src = torch.zeros((T, geo.vocab_shard), device=self.device, dtype=dtype)
        self.comm_buf = torch.zeros((T, h), device=self.device, dtype=dtype)
        if s.is_moe:
            k, pool = s.num_experts_per_tok, geo.expert_pool
            slots = geo.expert_rounds * pool
            self.slot_token = torch.tensor([i // k if i < T * k else 0 for i in range(slots)],
                                           device=self.device)
            self.assign = torch.tensor([[(i * k + j) % pool for j in range(k)] for i in range(T)],
                                       device=self.device)

    # ------------------------------------------------------------ weights
    def _rand(self, shape: tuple[int, ...], fan_in: float, gen: torch.Generator,
              scale: float = 1.0) -> torch.Tensor:
        """Uniform with variance scale^2/fan_in: unit-scale activations, finite in bf16."""
        bound = scale * math.sqrt(3.0 / fan_in)
        t = torch.empty(shape, device=self.device, dtype=self.dtype)
        return t.uniform_(-bound, bound, generator=gen)

    def _build_layer(self, kind: str) -> dict[str, torch.Tensor]:
        geo, s, h = self.geo, self.geo.shape, self.geo.shape.hidden_size
        w: dict[str, torch.Tensor] = {}

        def aw(n: int) -> int:  # an attention output width as held (quantized: narrower)
            return geo.width("attention", n)

        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, rope, nope, hl = s.kv_lora_rank, s.qk_rope_head_dim, s.qk_nope_head_dim, geo.heads
            q_lora = s.q_lora_rank or 0
            w["a"] = self._rand((h, aw(q_lora + lat + rope)), h, self._shared)
            q_in = q_lora or h
            w["q_b"] = self._rand((q_in, aw(hl * (nope + rope))), q_in, self._own)
            w["k_c"] = self._rand((hl, nope, aw(lat)), nope, self._own)
            w["v_c"] = self._rand((hl, lat, aw(s.v_head_dim)), lat, self._own)
            w["o"] = self._rand((hl * s.v_head_dim, aw(h)), hl * s.v_head_dim, self._own,
                                self.out_scale)
            w["cache"] = self._rand((geo.batch, geo.kv_len, lat + rope), 1.0, self._shared)
        else:
            d, hl, kvl = s.head_dim, geo.heads, geo.kv_heads
            w["qkv"] = self._rand((h, aw((hl + 2 * kvl) * d)), h, self._own)
            w["o"] = self._rand((hl * d, aw(h)), hl * d, self._own, self.out_scale)
            w["k"] = self._rand((geo.batch, kvl, geo.kv_len, d), 1.0, self._own)
            w["v"] = self._rand((geo.batch, kvl, geo.kv_len, d), 1.0, self._own)
        if kind == "dense":
            dw = geo.dense_width
            w["gate_up"] = self._rand((h, 2 * dw), h, self._own)
            w["down"] = self._rand((dw, h), dw, self._own, self.out_scale)
        else:
            pool, im = geo.expert_pool, geo.moe_width
            w["router"] = self._rand((h, s.n_routed_experts), h, self._shared)
            w["w1"] = self._rand((pool, h, 2 * im), h, self._own)
            w["w2"] = self._rand((pool, im, h), im, self._own, self.out_scale)
            if geo.shared_intermediate:
                si = geo.shared_width
                w["shared_gate_up"] = self._rand((h, 2 * si), h, self._own)
                w["shared_down"] = self._rand((si, h), si, self._own, self.out_scale)
        return w

    def held_bytes(self) -> int:
        """Bytes of weights and caches held: equals ``geo.bytes_per_pass(full=False)``."""
        tensors = [t for layer in self.layers for t in layer.values()] + [self.head_w]
        return sum(t.numel() * t.element_size() for t in tensors)

    # ------------------------------------------------------------ the pass
    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        x = self.x if x is None else x
        for w in self.layers:
            a = self._attention(_norm(x), w)
            self.comm.all_reduce(a)
            x = x + a
            m = self._mlp(_norm(x), w)
            self.comm.all_reduce(m)
            x = x + m
        return self.head(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm, the vocab-parallel LM head and the logits all-gather: [T x vocab]."""
        geo = self.geo
        local = _widen(_norm(x) @ self.head_w, geo.vocab_shard)
        self.comm.all_gather(self.gather_buf, local)
        full = self.gather_buf.view(geo.ranks, geo.tokens, geo.vocab_shard).transpose(0, 1)
        # clone: with one rank the reshape is a view of gather_buf, which other graphs reuse
        return full.reshape(geo.tokens, -1)[:, : geo.shape.vocab_size].clone()

    def collectives(self, n_allreduce: int) -> None:
        """The pass's collectives without compute: ``n_allreduce`` all-reduces."""
        for _ in range(n_allreduce):
            self.comm.all_reduce(self.comm_buf)

    def gather_only(self) -> None:
        self.comm.all_gather(self.gather_buf, self.gather_src)

    def _attention(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        geo, s = self.geo, self.geo.shape
        b, d, T, hl = geo.batch, geo.draft_tokens, geo.tokens, geo.heads
        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, nope, rope = s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim
            q_lora = s.q_lora_rank or 0
            a = _widen(h @ w["a"], q_lora + lat + rope)  # q_a, the new latent (not appended)
            q_in = _norm(a[:, :q_lora]) if q_lora else h
            q = _widen(q_in @ w["q_b"], hl * (nope + rope))
            q = q.view(T, hl, nope + rope).transpose(0, 1)  # [hl, T, nope+rope]
            q_lat = _widen(torch.bmm(q[..., :nope], w["k_c"]), lat)  # absorbed: [hl, T, lat]
            q_all = torch.cat([q_lat, q[..., nope:]], dim=-1)
            q_all = q_all.view(hl, b, d, lat + rope).permute(1, 2, 0, 3).reshape(b, d * hl, -1)
            cache = w["cache"]
            scores = torch.bmm(q_all, cache.transpose(1, 2)) / math.sqrt(nope + rope)
            p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
            o = torch.bmm(p, cache[..., :lat])  # [b, d*hl, lat]
            o = o.view(b, d, hl, lat).permute(2, 0, 1, 3).reshape(hl, T, lat)
            out = _widen(torch.bmm(o, w["v_c"]), s.v_head_dim)
            out = out.transpose(0, 1).reshape(T, hl * s.v_head_dim)
            return _widen(out @ w["o"], s.hidden_size)
        hd, kvl = s.head_dim, geo.kv_heads
        g = hl // kvl
        q = _widen(h @ w["qkv"], (hl + 2 * kvl) * hd)[:, : hl * hd]  # new K/V not appended
        q = q.reshape(b, d, kvl, g, hd).permute(0, 2, 1, 3, 4).reshape(b, kvl, d * g, hd)
        scores = torch.matmul(q, w["k"].transpose(-1, -2)) / math.sqrt(hd)
        p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
        o = torch.matmul(p, w["v"])  # [b, kvl, d*g, hd]
        o = o.view(b, kvl, d, g, hd).permute(0, 2, 1, 3, 4).reshape(T, hl * hd)
        return _widen(o @ w["o"], s.hidden_size)

    def _mlp(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        if "gate_up" in w:
            return _swiglu(h @ w["gate_up"]) @ w["down"]
        geo = self.geo
        T, k, pool = geo.tokens, geo.shape.num_experts_per_tok, geo.expert_pool
        logits = h @ w["router"]
        weights = torch.softmax(logits.gather(1, self.assign), dim=-1, dtype=torch.float32)
        x_in = h.index_select(0, self.slot_token).view(geo.expert_rounds, pool, -1)
        y = torch.bmm(_swiglu(torch.bmm(x_in.transpose(0, 1), w["w1"])), w["w2"])
        slots = y.transpose(0, 1).reshape(geo.expert_rounds * pool, -1)[: T * k]
        out = (slots.view(T, k, -1) * weights.to(self.dtype).unsqueeze(-1)).sum(dim=1)
        if "shared_gate_up" in w:
            out = out + _swiglu(h @ w["shared_gate_up"]) @ w["shared_down"]
        return out
