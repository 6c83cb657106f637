"""The proxy's model: a tensor-parallel decoder stack with a real model's shapes.

One verify pass over T = batch x draft tokens, on each of t ranks (``launchers.proxy.geometry``
has the sizes and the bytes each part reads):
  per layer: attention on the normed input, all-reduce + residual add + RMSNorm, MLP or MoE,
             all-reduce + residual add + RMSNorm (the next layer's, or the final norm)
  at the end: the LM head (vocab split over ranks), all-gather of the logits
so 2 all-reduces of [T x hidden] per layer and one all-gather of [T x vocab/t], as the
server's verify pass does under tensor parallelism. The collectives are the model's
``comm`` (``launchers.proxy.comm.collectives``: the path SGLang would take), or the ones a call
passes in (the compute-only pass passes no-ops).

The approximation: ``APPROXIMATION`` below, returned by ``approximation()``.
"""

from __future__ import annotations

import math

import torch

from launchers.proxy.comm.collectives import Collectives, rms_norm
from launchers.proxy.geometry import Geometry

APPROXIMATION: tuple[str, ...] = (
    "Weights are random (fixed seed) and held in bf16 on GPU, float32 on CPU: two allocations "
    "per rank (tensors replicated over ranks, and this rank's shards), each filled by one "
    "generator call and scaled per tensor.",
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
    "Collectives (emulated mode) take the path SGLang's dispatch rules give them on this "
    "machine (the plan's notes and the results name it): NCCL runs as NCCL; SGLang's custom "
    "allreduce (v2 push/pull or legacy kernels) is stood in for by torch symmetric memory's "
    "one-shot or two-shot kernels, which read peer memory the same way but are not SGLang's "
    "kernels; FlashInfer's fused all-reduce + residual add + RMSNorm is emulated by the "
    "one-shot all-reduce followed by separate add and norm kernels. Paths the proxy cannot "
    "run fail as not_modelled.",
    "The pass starts from hidden states: no embedding lookup and no embedding all-reduce. "
    "Norms carry no weights. Activations and softmax are counted as compute, not bytes.",
    "With --layers N fewer than the model's, N layers run (dense and MoE in the model's "
    "proportion) and their time is scaled by num_hidden_layers/N; the LM head and its "
    "all-gather are timed on their own and not scaled; collectives are timed at the full "
    "model's count. On GPUs where the whole model does not fit and no --layers is given, N is "
    "the most layers that fit in 85% of a GPU's memory (scaled: true).",
)


NATIVE_COLLECTIVES = (
    "Collectives (native mode) go through the installed SGLang's tensor-parallel "
    "GroupCoordinator: its all_reduce and all_gather_into_tensor choose the communicator "
    "(custom allreduce, PCIe-IPC, MSCCL++, torch symm-mem, pynccl) by that release's rules, and "
    "the results name the one that served (allreduce_served_by). FlashInfer's fused all-reduce "
    "+ residual add + RMSNorm is part of SGLang's layers, not of its distributed layer: where "
    "SGLang would fuse, the proxy runs SGLang's all_reduce, then the add and the norm.")


def approximation(native: bool = False) -> list[str]:
    """The approximation, stated; ``native``: the collectives' line for native mode."""
    return [NATIVE_COLLECTIVES if native and line.startswith("Collectives") else line
            for line in APPROXIMATION]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


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


SHARED, OWN = 0, 1  # the arena a tensor is drawn from: replicated over ranks, or this rank's
_Slot = tuple[int, int]  # (arena, index in it)


class _Arena:
    """Tensors drawn from one generator: one allocation, one fill kernel, then one scaling
    kernel per distinct bound (tensors with the same bound sit next to each other). The layout
    follows the order of declaration, so the same geometry and seed give the same values."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.bounds: list[float] = []

    def add(self, shape: tuple[int, ...], bound: float) -> int:
        self.shapes.append(shape)
        self.bounds.append(bound)
        return len(self.shapes) - 1

    def build(self, device: torch.device, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
        sizes = [math.prod(s) for s in self.shapes]
        order = sorted(range(len(sizes)), key=lambda i: self.bounds.index(self.bounds[i]))
        flat = torch.empty(sum(sizes), device=device, dtype=dtype)
        if not sizes:
            return []
        flat.uniform_(-1.0, 1.0, generator=torch.Generator(device=device).manual_seed(seed))
        out: list[torch.Tensor | None] = [None] * len(sizes)
        offset, run_start, run_bound = 0, 0, self.bounds[order[0]]
        for i in order:
            if self.bounds[i] != run_bound:
                flat[run_start:offset].mul_(run_bound)
                run_start, run_bound = offset, self.bounds[i]
            out[i] = flat[offset:offset + sizes[i]].view(self.shapes[i])
            offset += sizes[i]
        flat[run_start:offset].mul_(run_bound)
        return [t for t in out if t is not None]


class ProxyModel:
    """The per-rank stack. Replicated tensors (input, MLA cache and down-projections of the
    latent, router) come from an arena seeded alike on all ranks, shards from a per-rank one,
    so every rank ends with the same logits, as under real tensor parallelism."""

    def __init__(self, geo: Geometry, *, rank: int = 0, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, seed: int = 0,
                 comm: Collectives | None = None) -> None:
        self.geo, self.rank, self.dtype = geo, rank, dtype
        self.device = torch.device(device)
        self.comm: Collectives = comm or Collectives()
        self._arenas = (_Arena(), _Arena())
        s, h, T = geo.shape, geo.shape.hidden_size, geo.tokens
        self.out_scale = 1.0 / math.sqrt(2 * s.num_hidden_layers)  # residual branches stay small
        x = self._draw((T, h), 1.0, SHARED)
        specs = [self._declare_layer(kind) for kind in geo.layer_kinds()]
        head_w = self._draw((h, geo.width("lm_head", geo.vocab_shard)), h, OWN)
        drawn = (self._arenas[SHARED].build(self.device, dtype, seed),
                 self._arenas[OWN].build(self.device, dtype, seed * 100_003 + rank + 1))
        self.x = drawn[x[0]][x[1]]
        self.layers = [{k: drawn[a][i] for k, (a, i) in spec.items()} for spec in specs]
        self.head_w = drawn[head_w[0]][head_w[1]]
        self.gather_buf = torch.zeros((geo.ranks * T, geo.vocab_shard), device=self.device,
                                      dtype=dtype)
        self.gather_src = torch.zeros((T, geo.vocab_shard), device=self.device, dtype=dtype)
        self.comm_buf = torch.zeros((T, h), device=self.device, dtype=dtype)
        if s.is_moe:  # built on the device: no host-to-device copy
            k, pool = s.num_experts_per_tok, geo.expert_pool
            slots = torch.arange(geo.expert_rounds * pool, device=self.device)
            self.slot_token = torch.where(slots < T * k, slots // k, torch.zeros_like(slots))
            tokens = torch.arange(T, device=self.device).unsqueeze(1)
            self.assign = (tokens * k + torch.arange(k, device=self.device)) % pool

    # ------------------------------------------------------------ weights
    def _draw(self, shape: tuple[int, ...], fan_in: float, arena: int, scale: float = 1.0
              ) -> _Slot:
        """Uniform with variance scale^2/fan_in: unit-scale activations, finite in bf16."""
        return arena, self._arenas[arena].add(shape, scale * math.sqrt(3.0 / fan_in))

    def _declare_layer(self, kind: str) -> dict[str, _Slot]:
        geo, s, h = self.geo, self.geo.shape, self.geo.shape.hidden_size
        w: dict[str, _Slot] = {}

        def aw(n: int) -> int:  # an attention output width as held (quantized: narrower)
            return geo.width("attention", n)

        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, rope, nope, hl = s.kv_lora_rank, s.qk_rope_head_dim, s.qk_nope_head_dim, geo.heads
            q_lora = s.q_lora_rank or 0
            w["a"] = self._draw((h, aw(q_lora + lat + rope)), h, SHARED)
            q_in = q_lora or h
            w["q_b"] = self._draw((q_in, aw(hl * (nope + rope))), q_in, OWN)
            w["k_c"] = self._draw((hl, nope, aw(lat)), nope, OWN)
            w["v_c"] = self._draw((hl, lat, aw(s.v_head_dim)), lat, OWN)
            w["o"] = self._draw((hl * s.v_head_dim, aw(h)), hl * s.v_head_dim, OWN,
                                self.out_scale)
            w["cache"] = self._draw((geo.batch, geo.kv_len, lat + rope), 1.0, SHARED)
        else:
            d, hl, kvl = s.head_dim, geo.heads, geo.kv_heads
            w["qkv"] = self._draw((h, aw((hl + 2 * kvl) * d)), h, OWN)
            w["o"] = self._draw((hl * d, aw(h)), hl * d, OWN, self.out_scale)
            w["k"] = self._draw((geo.batch, kvl, geo.kv_len, d), 1.0, OWN)
            w["v"] = self._draw((geo.batch, kvl, geo.kv_len, d), 1.0, OWN)
        if kind == "dense":
            dw = geo.dense_width
            w["gate_up"] = self._draw((h, 2 * dw), h, OWN)
            w["down"] = self._draw((dw, h), dw, OWN, self.out_scale)
        else:
            pool, im = geo.expert_pool, geo.moe_width
            w["router"] = self._draw((h, s.n_routed_experts), h, SHARED)
            w["w1"] = self._draw((pool, h, 2 * im), h, OWN)
            w["w2"] = self._draw((pool, im, h), im, OWN, self.out_scale)
            if geo.shared_intermediate:
                si = geo.shared_width
                w["shared_gate_up"] = self._draw((h, 2 * si), h, OWN)
                w["shared_down"] = self._draw((si, h), si, OWN, self.out_scale)
        return w

    def held_bytes(self) -> int:
        """Bytes of weights and caches held: equals ``geo.bytes_per_pass(full=False)``."""
        tensors = [t for layer in self.layers for t in layer.values()] + [self.head_w]
        return sum(t.numel() * t.element_size() for t in tensors)

    # ------------------------------------------------------------ the pass
    def forward(self, comm: Collectives | None = None) -> torch.Tensor:
        """The verify pass; ``comm`` replaces the model's collectives for this call (the
        compute-only pass passes no-ops)."""
        comm = comm or self.comm
        x = self.x
        h = rms_norm(x)
        for w in self.layers:
            x, h = comm.reduce_add_norm(self._attention(h, w), x)
            x, h = comm.reduce_add_norm(self._mlp(h, w), x)
        return self.head(h, comm)

    def head(self, h: torch.Tensor, comm: Collectives | None = None) -> torch.Tensor:
        """The vocab-parallel LM head on the normed hidden states and the logits all-gather:
        [T x vocab]."""
        geo = self.geo
        local = _widen(h @ self.head_w, geo.vocab_shard)
        (comm or self.comm).all_gather(self.gather_buf, local)
        full = self.gather_buf.view(geo.ranks, geo.tokens, geo.vocab_shard).transpose(0, 1)
        # clone: with one rank the reshape is a view of gather_buf, which other graphs reuse
        return full.reshape(geo.tokens, -1)[:, : geo.shape.vocab_size].clone()

    def head_pass(self, comm: Collectives | None = None) -> torch.Tensor:
        """The final norm and the head alone (timed apart: the head is not scaled)."""
        return self.head(rms_norm(self.x), comm)

    def collectives(self, n_allreduce: int) -> None:
        """The pass's all-reduces without compute: ``n_allreduce`` of [T x hidden]."""
        for _ in range(n_allreduce):
            self.comm.all_reduce(self.comm_buf)

    def gather_only(self) -> None:
        self.comm.all_gather(self.gather_buf, self.gather_src)

        self.comm.all_gather(self.gather_buf, self.gather_src)

    def _attention(self, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
        geo, s = self.geo, self.geo.shape
        b, d, T, hl = geo.batch, geo.draft_tokens, geo.tokens, geo.heads
        if s.is_mla:
            assert s.kv_lora_rank is not None
            lat, nope, rope = s.kv_lora_rank, s.qk_nope_head_dim, s.qk_rope_head_dim
            q_lora = s.q_lora_rank or 0
            a = _widen(h @ w["a"], q_lora + lat + rope)  # q_a, the new latent (not appended)
            q_in = rms_norm(a[:, :q_lora]) if q_lora else h
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
