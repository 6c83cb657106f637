"""``best/nccl-tuner.csv``: what NCCL ran under the chosen settings, as rules for NCCL's example
tuner plugin (NVIDIA/nccl ``plugins/tuner/example``), the production-safe way to ship what
NCCL calls debug-only env knobs (NCCL_ALGO, NCCL_PROTO, NCCL_MIN/MAX_NCHANNELS).

How the plugin reads the file, and what follows from it (shared/reference/nccl.md):
- lines of at most 255 bytes; ``#`` lines and empty lines are skipped; 8 to 10 fields;
- the first rule that matches a collective's type, size, node and rank counts wins, and
  its algorithm/protocol are made the cheapest; its channel count is used as given;
- before it looks for a rule the plugin sets the collective's channels to 1: a rule with
  channels -1 and a collective that no rule matches both run on ONE channel.

So every rule here carries the channel count NCCL itself used (its TUNING log lines in the
decided trial's effective.json), and there is a rule for every collective type the run issued,
binned by the message sizes it issued: consecutive sizes with the same choice share one bin,
bins meet halfway (geometrically) between measured sizes, the first starts at 0 and the last
covers every larger size. Sizes are as the plugin sees them: NCCL logs one rank's part of an
all-gather or reduce-scatter; the plugin gets the whole buffer (that part x ranks).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from search_spaces.knobs import selector_for
from tuner.record.trial_file import Effective

# The plugin's CSV columns, in its order (numPipeOps and regBuff optional; -1 = any).
TUNER_COLUMNS = ("collective_type", "min_bytes", "max_bytes", "algorithm", "protocol",
                 "channels", "nNodes", "nRanks", "numPipeOps", "regBuff")
MAX_BYTES = 2**64 - 1  # the plugin reads sizes with strtoull into a size_t
# NCCL's names (NCCL_ALGO tokens and its log's spellings, lowercased, '_' dropped) -> plugin's.
PLUGIN_ALGORITHMS = {"ring": "ring", "tree": "tree", "collnetdirect": "collnet_direct",
                     "collnetchain": "collnet_chain", "nvls": "nvls", "nvlstree": "nvls_tree",
                     "pat": "pat"}
PLUGIN_PROTOCOLS = {"ll": "ll", "ll128": "ll128", "simple": "simple"}
PLUGIN_COLLECTIVES = {"broadcast": "broadcast", "reduce": "reduce", "allgather": "allgather",
                      "reducescatter": "reducescatter", "allreduce": "allreduce"}
WHOLE_BUFFER = frozenset({"allgather", "reducescatter"})  # plugin size = logged size x ranks
RULE_KNOBS = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
PLUGIN_LINE_MAX = 255  # the plugin reads lines with fgets into 256 bytes


@dataclass(frozen=True)
class TunerRule:
    collective: str
    min_bytes: int
    max_bytes: int
    algorithm: str
    protocol: str
    channels: int
    nodes: int = 1
    ranks: int = -1

    def csv_line(self) -> str:
        cells = [self.collective, self.min_bytes, self.max_bytes, self.algorithm, self.protocol,
                 self.channels, self.nodes, self.ranks, -1, -1]
        return ",".join(str(c) for c in cells)


@dataclass(frozen=True)
class _Ran:
    """One choice NCCL logged, in the plugin's names and sizes."""

    collective: str
    nbytes: int
    algorithm: str
    protocol: str
    channels: int

    @property
    def choice(self) -> tuple[str, str, int]:
        return self.algorithm, self.protocol, self.channels


def _norm(name: Any) -> str:
    return str(name).strip().lower().replace("_", "")


def _logged(effective: Effective | None, ranks: int, notes: list[str]) -> list[_Ran]:
    out, skipped = [], set()
    for c in effective.choices if effective is not None else []:
        coll = PLUGIN_COLLECTIVES.get(_norm(c.get("collective")))
        algo = PLUGIN_ALGORITHMS.get(_norm(c.get("algo")))
        proto = PLUGIN_PROTOCOLS.get(_norm(c.get("proto")))
        channels, nbytes = c.get("channels"), c.get("bytes")
        if coll is None or algo is None or proto is None or not isinstance(channels, int) \
                or channels < 1 or not isinstance(nbytes, int):
            skipped.add(f"{c.get('collective')} {c.get('algo')}/{c.get('proto')}")
            continue
        out.append(_Ran(coll, nbytes * (ranks if coll in WHOLE_BUFFER else 1), algo, proto,
                        channels))
    if skipped:
        notes.append("not expressible as a rule of the plugin (left to NCCL, on 1 channel): "
                     + ", ".join(sorted(skipped)))
    return out


def _bins(ran: Sequence[_Ran], notes: list[str]) -> list[tuple[int, int, tuple[str, str, int]]]:
    """(min, max, choice) bins over all sizes for one collective."""
    by_size: dict[int, set[tuple[str, str, int]]] = defaultdict(set)
    for r in ran:
        by_size[r.nbytes].add(r.choice)
    sizes = sorted(by_size)
    picked = []
    for size in sizes:
        choices = sorted(by_size[size], key=lambda c: (-c[2], c))
        if len(choices) > 1:
            notes.append(f"{ran[0].collective} of {size} bytes ran {len(choices)} ways; the rule "
                         f"keeps {'/'.join(map(str, choices[0]))} (the most channels)")
        picked.append((size, choices[0]))
    groups: list[list[tuple[int, tuple[str, str, int]]]] = []
    for size, choice in picked:
        if groups and groups[-1][-1][1] == choice:
            groups[-1].append((size, choice))
        else:
            groups.append([(size, choice)])
    bins, low = [], 0
    for i, group in enumerate(groups):
        if i + 1 < len(groups):
            last, nxt = group[-1][0], groups[i + 1][0][0]
            high = max(last, min(nxt - 1, math.isqrt(last * nxt)))
        else:
            high = MAX_BYTES
        bins.append((low, high, group[0][1]))
        low = high + 1
    return bins


def tuner_rules(config: Mapping[str, Any], effective: Effective | Mapping[str, Any] | None,
                ranks: int | None) -> tuple[list[TunerRule], list[str]]:
    """The plugin's rules for a configuration, from what NCCL ran with it (``effective``:
    the trial's effective.json), and notes for the file. No rules when the configuration
    leaves the algorithm, protocol and channels to NCCL, or when NCCL's log names no choice."""
    notes: list[str] = []
    if not any(config.get(k) is not None for k in RULE_KNOBS):
        notes.append("the configuration leaves the algorithm, protocol and channels to NCCL: "
                     "no rules")
        return [], notes
    if effective is not None and not isinstance(effective, Effective):
        effective = Effective.model_validate(effective)
    nranks = (effective.nranks if effective is not None else None) or ranks or 0
    ran = _logged(effective, int(nranks) if nranks and nranks > 0 else 1, notes)
    if not ran:
        notes.append("NCCL's log of the decided trial names no per-collective choice (its "
                     "TUNING lines: NCCL_DEBUG_SUBSYS=TUNING, 2 or more ranks): no rules; "
                     "ship the settings as env variables (best/env)")
        return [], notes
    rules = []
    for coll in sorted({r.collective for r in ran}):
        for low, high, (algo, proto, channels) in _bins([r for r in ran if r.collective == coll],
                                                         notes):
            rules.append(TunerRule(coll, low, high, algo, proto, channels, 1,
                                   int(nranks) if nranks else -1))
    wanted = selector_for(config.get("NCCL_ALGO"), "allreduce")
    ran_algos = {r.algorithm for r in ran if r.collective == "allreduce"}
    if wanted and len(wanted) == 1 and not wanted[0].startswith("^") and ran_algos and \
            ran_algos != {PLUGIN_ALGORITHMS.get(_norm(wanted[0]))}:
        notes.append(f"NCCL_ALGO={config.get('NCCL_ALGO')} asked for {wanted[0]}, NCCL ran "
                     f"{', '.join(sorted(ran_algos))}: the rules follow what NCCL ran")
    return rules, notes


def _comment(text: str) -> list[str]:
    """``# text`` wrapped so that no line reaches the plugin's line limit."""
    words = [w[i:i + 90] for w in text.split() for i in range(0, len(w), 90)]
    lines, line = [], "#"
    for word in words:
        if len(line) + 1 + len(word) > 100:
            lines.append(line)
            line = "#  "
        line += " " + word
    lines.append(line)
    return lines


def tuner_csv(rules: Sequence[TunerRule], notes: Sequence[str], experiment: str,
              source: str | None = None) -> str:
    """The file: what it is, how to use it, what the plugin does outside its rules, the rules."""
    lines = _comment(f"NCCL tuner plugin rules written by servetune (experiment {experiment}).")
    lines += _comment("Format of NCCL's example tuner plugin (NVIDIA/nccl plugins/tuner/example); "
                      "lines starting with # are comments. Columns:")
    lines.append("# " + ",".join(TUNER_COLUMNS))
    if rules:
        colls = sorted({r.collective for r in rules})
        lines += _comment(
            "Use: NCCL_TUNER_PLUGIN=<path to the built plugin .so> NCCL_TUNER_CONFIG_FILE=<this "
            "file>, and drop NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS "
            "from the env; other NCCL settings stay in it (best/env).")
        lines += _comment(
            "Build the plugin from NCCL 2.29.7's source or later: older examples read NCCL's "
            "cost table as an array of pointers and die of SIGSEGV at the first collective "
            "(NVIDIA/nccl#1974); for an older NCCL, index the table as 2.29.7's example does "
            "(float (*)[NCCL_NUM_PROTOCOLS])collCostTable. Seen and fixed that way on NCCL "
            "2.28.9 (BENCHMARKS.md).")
        lines += _comment(
            f"The rules are what NCCL ran under the chosen env settings{f' ({source})' if source else ''}: "
            "algorithm, protocol and the channel count it used, for every collective type the "
            f"run issued ({', '.join(colls)}), binned by the message sizes it issued; the first "
            "bin starts at 0 bytes and the last covers every larger size. Sizes are as the "
            "plugin sees them: an all-gather's or reduce-scatter's whole buffer. nRanks: only "
            "communicators of that size match.")
        others = sorted(set(PLUGIN_COLLECTIVES.values()) - set(colls))
        lines += _comment(
            "Outside these rules this plugin runs a collective on ONE channel: it sets the "
            "channel count to 1 before it looks for a rule, so a collective no rule matches "
            f"({', '.join(others) or 'none here'}, or a communicator of another size) keeps "
            "NCCL's own algorithm and protocol but gets 1 channel, and so would a rule with "
            "channels -1 (none is written).")
        lines += [r.csv_line() for r in rules]
    else:
        lines += _comment("No rules: do not load the plugin for these settings (it would run "
                          "every collective on one channel).")
    for note in notes:
        lines += _comment(note)
    text = "\n".join(lines) + "\n"
    too_long = [line for line in lines if len(line) >= PLUGIN_LINE_MAX]
    if too_long:
        raise ValueError(f"a line the plugin would cut: {too_long[0][:80]}...")
    return text
