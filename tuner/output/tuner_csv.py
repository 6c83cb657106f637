"""``best/nccl-tuner.csv``: the chosen allreduce algorithm, protocol and channels as rules for
NCCL's example tuner plugin (NVIDIA/nccl ``plugins/tuner/example``), the production-safe way
to ship what NCCL calls debug-only env knobs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from search_spaces.knobs import selector_for

# The plugin's CSV columns, in its order (numPipeOps and regBuff optional; -1 = any).
TUNER_COLUMNS = ("collective_type", "min_bytes", "max_bytes", "algorithm", "protocol",
                 "channels", "nNodes", "nRanks", "numPipeOps", "regBuff")
ALL_BYTES = (0, 4294967295)  # the plugin's "covers all sizes"
# NCCL_ALGO / NCCL_PROTO tokens (and NCCL's log spellings, lowercased) -> the plugin's names.
PLUGIN_ALGORITHMS = {"ring": "ring", "tree": "tree", "collnetdirect": "collnet_direct",
                     "collnetchain": "collnet_chain", "nvls": "nvls", "nvlstree": "nvls_tree",
                     "pat": "pat"}
PLUGIN_PROTOCOLS = {"ll": "ll", "ll128": "ll128", "simple": "simple"}
CHANNEL_KNOBS = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
PLUGIN_LINE_MAX = 255  # the plugin reads lines with fgets into 256 bytes


@dataclass
class TunerRule:
    algorithm: str
    protocol: str
    channels: int = -1
    nodes: int = 1
    ranks: int = -1
    collective: str = "allreduce"
    sources: list[str] = field(default_factory=list)

    def csv_line(self) -> str:
        cells = [self.collective, *ALL_BYTES, self.algorithm, self.protocol, self.channels,
                 self.nodes, self.ranks, -1, -1]
        return ",".join(str(c) for c in cells)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "")


def _single(value: Any, table: Mapping[str, str], knob: str) -> tuple[str | None, str | None]:
    """The plugin's name for the one token ``value`` selects for allreduce, or a reason."""
    tokens = selector_for(value, "allreduce")
    if tokens is None:
        return None, None
    if len(tokens) != 1 or tokens[0].startswith("^") or _norm(tokens[0]) not in table:
        return None, f"{knob}={value} selects no single allreduce choice the plugin can express"
    return table[_norm(tokens[0])], None


def _from_log(effective: Mapping[str, Any] | None, key: str, table: Mapping[str, str]
              ) -> str | None:
    """What NCCL's own log says it chose for allreduce, when it chose one thing."""
    choices = [c for c in (effective or {}).get("choices") or []
               if str(c.get("collective", "")).lower() == "allreduce"]
    names = {table.get(_norm(str(c.get(key, "")))) for c in choices}
    return names.pop() if len(names) == 1 and None not in names else None


def tuner_rule(config: Mapping[str, Any], effective: Mapping[str, Any] | None,
               ranks: int | None) -> tuple[TunerRule | None, list[str]]:
    """The allreduce rule for the plugin: algorithm and protocol from NCCL_ALGO/NCCL_PROTO,
    filled in from NCCL's log where the config left one to NCCL; channels from the channel
    knobs (-1: NCCL's choice). None (with the reasons) when nothing is set or expressible."""
    notes: list[str] = []
    algo, why_algo = _single(config.get("NCCL_ALGO"), PLUGIN_ALGORITHMS, "NCCL_ALGO")
    proto, why_proto = _single(config.get("NCCL_PROTO"), PLUGIN_PROTOCOLS, "NCCL_PROTO")
    notes += [w for w in (why_algo, why_proto) if w]
    channel_set = {k: config.get(k) for k in CHANNEL_KNOBS if config.get(k) is not None}
    if algo is None and proto is None and not channel_set:
        notes.append("the configuration leaves the allreduce algorithm, protocol and channels "
                     "to NCCL: no rule")
        return None, notes
    sources = []
    if algo is not None:
        sources.append(f"algorithm from NCCL_ALGO={config.get('NCCL_ALGO')}")
    else:
        algo = _from_log(effective, "algo", PLUGIN_ALGORITHMS)
        sources.append("algorithm as NCCL chose it (its log)")
    if proto is not None:
        sources.append(f"protocol from NCCL_PROTO={config.get('NCCL_PROTO')}")
    else:
        proto = _from_log(effective, "proto", PLUGIN_PROTOCOLS)
        sources.append("protocol as NCCL chose it (its log)")
    if algo is None or proto is None:
        notes.append("NCCL's log does not name one allreduce "
                     f"{'algorithm' if algo is None else 'protocol'}: no rule")
        return None, notes
    channels = -1
    if channel_set:
        logged = {int(c["channels"]) for c in (effective or {}).get("choices") or []
                  if str(c.get("collective", "")).lower() == "allreduce"
                  and isinstance(c.get("channels"), int)}
        low, high = config.get("NCCL_MIN_NCHANNELS"), config.get("NCCL_MAX_NCHANNELS")
        if len(logged) == 1:
            channels = logged.pop()
            sources.append(f"channels as NCCL used them under "
                           f"{', '.join(f'{k}={v}' for k, v in channel_set.items())}")
        elif low is not None and low == high:
            channels = int(low)
            sources.append(f"channels from NCCL_MIN/MAX_NCHANNELS={low}")
        elif high is not None:
            channels = int(high)
            sources.append(f"channels from NCCL_MAX_NCHANNELS={high} (an upper bound in env)")
        else:
            notes.append(f"NCCL_MIN_NCHANNELS={low} is a lower bound: channels left to NCCL")
    return TunerRule(algo, proto, channels, 1, ranks or -1, sources=sources), notes


def _comment(text: str) -> list[str]:
    """``# text`` wrapped so that no line reaches the plugin's line limit."""
    words, lines, line = text.split(), [], "#"
    for word in words:
        if len(line) + 1 + len(word) > 100:
            lines.append(line)
            line = "#  "
        line += " " + word
    lines.append(line)
    return lines


def tuner_csv(rule: TunerRule | None, notes: Sequence[str], experiment: str) -> str:
    lines = _comment(f"NCCL tuner plugin rules written by servetune (experiment {experiment}).")
    lines += _comment("Format of NCCL's example tuner plugin (NVIDIA/nccl plugins/tuner/example); "
                      "lines starting with # are comments. Columns:")
    lines.append("# " + ",".join(TUNER_COLUMNS))
    lines += _comment("Use: NCCL_TUNER_PLUGIN=<path to libnccl-tuner-example.so> "
                      "NCCL_TUNER_CONFIG_FILE=<this file>, and drop NCCL_ALGO, NCCL_PROTO, "
                      "NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS from the env. Other NCCL "
                      "settings stay in the env (best/env).")
    if rule is not None:
        lines += _comment("; ".join(rule.sources) + ".")
        lines.append(rule.csv_line())
    else:
        lines += _comment("No rule: do not load the plugin for these settings.")
    for note in notes:
        lines += _comment(note)
    text = "\n".join(lines) + "\n"
    assert all(len(line) < PLUGIN_LINE_MAX for line in lines)
    return text
