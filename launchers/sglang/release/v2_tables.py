"""SGLang 0.5.23's custom allreduce v2 size thresholds, as data.

Copied as numbers from ``sglang/srt/distributed/device_communicators/configs/
custom_all_reduce_v2.py`` (``_sm90_configs``, ``_sm100_configs``, the default for other
architectures) and the sizing in ``custom_all_reduce_v2.py`` (``CustomAllReduceV2.__init__``:
workspaces clipped to ``SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB``, forced sizes, 1 KiB
alignment). Each heuristic lists, in SGLang's order of preference, the largest message (bytes)
each algorithm takes: 1shot_push, 2shot_push, 1shot_pull, 2shot_pull over multicast (a range),
2shot_pull; above all of them SGLang falls back to NCCL.
"""

from __future__ import annotations

from typing import NamedTuple

KB, MB = 1024, 1024 * 1024


class Heuristic(NamedTuple):
    one_shot_push: int
    one_shot_pull: int
    two_shot_pull: int
    mc: tuple[int, int] = (0, 0)  # 2shot_pull over multicast: (min, max) bytes
    two_shot_push: int = 0

    def max_push_bytes(self, world: int) -> int:
        return max(self.one_shot_push, two_shot_push_slot_bytes(self.two_shot_push, world))

    @property
    def max_pull_bytes(self) -> int:
        return max(self.one_shot_pull, self.two_shot_pull, self.mc[1])

    def clip(self, push: int, pull: int, world: int) -> Heuristic:
        return Heuristic(min(self.one_shot_push, push), min(self.one_shot_pull, pull),
                         min(self.two_shot_pull, pull), (min(self.mc[0], pull), min(self.mc[1], pull)),
                         min(self.two_shot_push, two_shot_push_max_bytes(push, world)))


def two_shot_push_slot_bytes(nbytes: int, world: int) -> int:
    return 32 * -(-nbytes // (16 * world))


def two_shot_push_max_bytes(slot_bytes: int, world: int) -> int:
    return world * 16 * (slot_bytes // 32)


class Table(NamedTuple):
    graph: Heuristic
    eager: Heuristic
    multicast: bool  # the table has multicast blocks (num_mc_blocks is not None)


def _h(*a: float, mc: tuple[float, float] = (0, 0), two_shot_push: float = 0) -> Heuristic:
    return Heuristic(int(a[0]), int(a[1]), int(a[2]), (int(mc[0]), int(mc[1])), int(two_shot_push))


# SM90 (Hopper; tuned on H200): num_mc_blocks None below 4 ranks.
SM90: dict[int, Table] = {
    2: Table(_h(16 * MB, 128 * MB, 128 * MB), _h(32 * MB, 128 * MB, 128 * MB), False),
    3: Table(_h(1.25 * MB, 1.25 * MB, 128 * MB), _h(3 * MB, 3 * MB, 16 * MB), False),
    4: Table(_h(384 * KB, 384 * KB, 128 * MB), _h(896 * KB, 896 * KB, 32 * MB, mc=(0, 32 * MB)),
             True),
    5: Table(_h(192 * KB, 192 * KB, 32 * MB), _h(384 * KB, 384 * KB, 32 * MB, mc=(0, 32 * MB)),
             True),
    6: Table(_h(128 * KB, 128 * KB, 32 * MB, mc=(8 * MB, 32 * MB)),
             _h(192 * KB, 192 * KB, 32 * MB, mc=(0, 32 * MB)), True),
    7: Table(_h(128 * KB, 128 * KB, 32 * MB, mc=(1 * MB, 32 * MB)),
             _h(128 * KB, 128 * KB, 32 * MB, mc=(0, 32 * MB)), True),
    8: Table(_h(128 * KB, 128 * KB, 32 * MB, mc=(512 * KB, 128 * MB)),
             _h(128 * KB, 128 * KB, 128 * MB, mc=(0, 128 * MB)), True),
}

# SM100 (Blackwell B200/B300/GB200).
SM100: dict[int, Table] = {
    2: Table(_h(8 * MB, 32 * MB, 128 * MB), _h(16 * MB, 128 * MB, 128 * MB), False),
    3: Table(_h(4 * MB, 4 * MB, 128 * MB), _h(8 * MB, 8 * MB, 32 * MB), False),
    4: Table(_h(0.625 * MB, 0.625 * MB, 128 * MB, two_shot_push=8 * MB),
             _h(0.625 * MB, 0.625 * MB, 32 * MB, two_shot_push=8 * MB), False),
    5: Table(_h(1.5 * MB, 1.5 * MB, 128 * MB), _h(2 * MB, 2 * MB, 32 * MB, mc=(0, 32 * MB)), True),
    6: Table(_h(1 * MB, 1 * MB, 128 * MB), _h(1.25 * MB, 1.25 * MB, 64 * MB, mc=(0, 64 * MB)),
             True),
    7: Table(_h(0.625 * MB, 0.625 * MB, 128 * MB), _h(1 * MB, 1 * MB, 64 * MB, mc=(0, 64 * MB)),
             True),
    8: Table(_h(256 * KB, 256 * KB, 128 * MB, mc=(8 * MB, 128 * MB), two_shot_push=8 * MB),
             _h(256 * KB, 256 * KB, 128 * MB, mc=(0, 128 * MB), two_shot_push=8 * MB), True),
    16: Table(_h(0.25 * MB, 0.25 * MB, 128 * MB, mc=(256 * KB, 128 * MB)),
              _h(0.25 * MB, 0.25 * MB, 128 * MB, mc=(256 * KB, 128 * MB)), True),
}

# Any other architecture: 1 MB one-shot crossovers, no multicast, world sizes 2..16.
DEFAULT = Table(_h(1 * MB, 1 * MB, 16 * MB), _h(1 * MB, 1 * MB, 16 * MB), False)


def table(sm_major: int | None, world: int) -> Table | None:
    """The tuned table of an architecture (by compute capability major) and world size;
    None where SGLang has none (v2 is then not used)."""
    if sm_major == 9:
        return SM90.get(world)
    if sm_major == 10:
        return SM100.get(world)
    return DEFAULT if 2 <= world <= 16 else None


def _align(nbytes: int) -> int:
    nbytes = max(nbytes, KB)
    return (nbytes + KB - 1) // KB * KB


def v2_algorithm(t: Table, world: int, nbytes: int, *, graph: bool, max_size_kb: int,
                 force_pull_kb: int | None, force_push_kb: int | None, multicast: bool
                 ) -> str | None:
    """The v2 algorithm SGLang picks for one message (``CustomAllReduceV2._pick_config``
    after the workspace sizing of its constructor), or None: too large, NCCL takes it."""
    max_size = max_size_kb * KB
    base_push = max(t.graph.max_push_bytes(world), t.eager.max_push_bytes(world))
    base_pull = max(t.graph.max_pull_bytes, t.eager.max_pull_bytes)
    push = base_push if force_push_kb is None else force_push_kb * KB
    pull = base_pull if force_pull_kb is None else force_pull_kb * KB
    if force_push_kb is None:
        push = min(push, max_size)
    if force_pull_kb is None:
        pull = min(pull, max_size)
    h = t.graph if graph else t.eager
    if force_pull_kb is not None:
        h = h._replace(two_shot_pull=pull)
    if force_push_kb is not None:
        h = h._replace(one_shot_push=push)
    pull_enabled = pull > 0
    pull_size = _align(pull) if pull_enabled else 0
    h = h.clip(_align(push), pull_size, world)
    use_mc = t.multicast and multicast and pull_enabled
    if nbytes <= h.one_shot_push:
        return "1shot_push"
    if nbytes <= h.two_shot_push:
        return "2shot_push"
    if nbytes <= h.one_shot_pull:
        return "1shot_pull"
    if use_mc and h.mc[0] <= nbytes <= h.mc[1]:
        return "2shot_pull_multicast"
    if nbytes <= h.two_shot_pull:
        return "2shot_pull"
    return None
