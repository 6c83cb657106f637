"""The prompts a benchmark round sends: real text by default, the user's traffic on request.

Four sources (``SGLangArgs.dataset``):
- ``builtin`` (default): passages of Python's own documentation, ``pydoc_data.topics`` (about
  465 KB of English prose and code, shipped with CPython), each starting at a seeded random
  word of the text, so that no two requests share a cached prefix. No download.
- ``random``: seeded random token ids, exactly ``input_len`` of them (what speculative decoding
  cannot predict: an accept length measured on them says nothing about real traffic).
- a ShareGPT JSON file (a list of ``{"conversations": [{"from", "value"}, ...]}``) or
- a custom JSONL file (one ``{"conversations": [{"role", "content"}, ...]}`` per line, ``value``
  accepted for ``content``): the two formats of SGLang's own bench
  (sglang/benchmark/datasets/sharegpt.py ``sample_sharegpt_requests`` and custom.py
  ``sample_custom_requests``): the first turn is the prompt, the second turn's length the
  output length; conversations with fewer than two turns, and prompts or answers shorter than
  2 tokens, are dropped as SGLang drops them; JSONL lines that are not JSON are skipped.

Lengths, honestly: servetune loads no tokenizer. A text's length in tokens is ESTIMATED as
its characters / 4 (English BPE tokenizers average about 4 characters per token; code runs
shorter). ``input_len`` caps a prompt at about ``4 x input_len`` characters (cut at a word
boundary); ``output_len`` caps the output. The output length is exact on the server
(``max_new_tokens`` with ``ignore_eos``); the prompt's true token count is the server's
``meta_info.prompt_tokens``, reported per round as ``total_input_tokens``.
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHARS_PER_TOKEN = 4  # the estimate used without a tokenizer
TOKEN_ID_RANGE = (1000, 20000)  # valid in any common vocabulary, clear of special tokens
MIN_TOKENS = 2  # SGLang's bench prunes prompts and answers shorter than this
STATS_SAMPLE = 256  # prompts drawn to describe a generated (builtin, random) dataset
BUILTIN = "builtin"
RANDOM = "random"
LENGTHS_NOTE = (f"text lengths are estimated as characters / {CHARS_PER_TOKEN} (no tokenizer is "
                "loaded); output lengths are exact (max_new_tokens with ignore_eos); the "
                "server's own prompt token count is reported per round as total_input_tokens")


class DatasetError(ValueError):
    """A dataset that cannot be used: missing, unreadable, or without a usable prompt."""


def estimate_tokens(text: str) -> int:
    """Tokens in ``text`` without a tokenizer: characters / CHARS_PER_TOKEN, at least 1."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def cap_text(text: str, tokens: int) -> str:
    """``text`` cut to about ``tokens`` estimated tokens, at the last whitespace before."""
    limit = tokens * CHARS_PER_TOKEN
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return cut[:space] if space > 0 else cut


@dataclass(frozen=True)
class Prompt:
    """One request's input and output length. ``text`` or ``input_ids``, never both."""

    text: str | None
    input_ids: tuple[int, ...] | None
    input_len: int  # tokens: exact for ids, estimated for text
    output_len: int  # max_new_tokens, sent with ignore_eos

    def body(self) -> dict[str, Any]:
        """The input field of SGLang's native ``/generate`` body."""
        if self.input_ids is not None:
            return {"input_ids": list(self.input_ids)}
        return {"text": self.text}


class Dataset(ABC):
    """A deterministic source of prompts: the same (seed, stream, index) gives the same
    prompt in every trial, so trials are compared on the same traffic."""

    name: str

    def __init__(self, input_len: int, output_len: int, seed: int) -> None:
        self.input_len = input_len
        self.output_len = output_len
        self.seed = seed

    @abstractmethod
    def prompt(self, stream: str, index: int) -> Prompt:
        """Request ``index`` of ``stream`` (e.g. one round at one concurrency)."""

    def _info(self) -> dict[str, Any]:
        return {}

    def _sample(self) -> list[Prompt]:
        return [self.prompt("describe", i) for i in range(STATS_SAMPLE)]

    def describe(self) -> dict[str, Any]:
        """What the experiment sends, for its folder: name, path, sha256, prompts, lengths."""
        sample = self._sample()
        data: dict[str, Any] = {"name": self.name, "path": None, "sha256": None, "prompts": None,
                                "input_len_cap": self.input_len, "output_len_cap": self.output_len,
                                "seed": self.seed}
        data.update(self._info())
        data["input_len"] = _stats([p.input_len for p in sample])
        data["output_len"] = _stats([p.output_len for p in sample])
        data["lengths"] = ("input ids are exact" if self.name == RANDOM else LENGTHS_NOTE)
        return data


def _stats(values: list[int]) -> dict[str, float]:
    return {"min": float(min(values)), "mean": statistics.fmean(values),
            "median": float(statistics.median(values)), "max": float(max(values))}


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))


class RandomIds(Dataset):
    """Seeded random token ids, distinct per request so that no prefix is cached."""

    name = RANDOM

    def prompt(self, stream: str, index: int) -> Prompt:
        rng = _rng(self.seed, stream, index)
        low, high = TOKEN_ID_RANGE
        ids = tuple(rng.randrange(low, high) for _ in range(self.input_len))
        return Prompt(None, ids, self.input_len, self.output_len)


class BuiltinText(Dataset):
    """Passages of ``pydoc_data.topics`` starting at a seeded random word boundary."""

    name = BUILTIN

    def __init__(self, input_len: int, output_len: int, seed: int) -> None:
        super().__init__(input_len, output_len, seed)
        try:
            from pydoc_data import topics
        except ImportError as err:  # some distributions strip it from their Python
            raise DatasetError("the built-in text (Python's pydoc_data.topics) is missing from "
                               "this Python; use dataset 'random' or a ShareGPT/JSONL file"
                               ) from err
        self.path = str(topics.__file__)
        self.text = "\n\n".join(topics.topics[key] for key in sorted(topics.topics))
        self.sha256 = hashlib.sha256(self.text.encode()).hexdigest()

    def prompt(self, stream: str, index: int) -> Prompt:
        rng = _rng(self.seed, stream, index)
        span = self.input_len * CHARS_PER_TOKEN
        start = rng.randrange(max(1, len(self.text) - span))
        while start > 0 and start < len(self.text) and not self.text[start - 1].isspace():
            start += 1  # begin at a word
        text = cap_text(self.text[start:start + span], self.input_len).strip()
        return Prompt(text, None, estimate_tokens(text), self.output_len)

    def _info(self) -> dict[str, Any]:
        span = self.input_len * CHARS_PER_TOKEN
        return {"path": self.path, "sha256": self.sha256, "source": "pydoc_data.topics",
                "prompts": max(1, len(self.text) // span),  # non-overlapping passages
                "chars": len(self.text)}


@dataclass(frozen=True)
class _Rows:
    """A parsed conversation file: (prompt text, answer's estimated tokens) per usable row."""

    format: str
    rows: tuple[tuple[str, int], ...]
    sha256: str
    skipped: int


_LOADED: dict[tuple[str, int, int], _Rows] = {}  # (path, size, mtime): parsed once per process


def _turn_text(turn: Any) -> str:
    if not isinstance(turn, dict):
        return ""
    value = turn.get("content", turn.get("value", ""))
    return value if isinstance(value, str) else ""


def _conversation(record: Any) -> tuple[str, str] | None:
    if not isinstance(record, dict):
        return None
    turns = record.get("conversations", record.get("conversation", []))
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    return _turn_text(turns[0]), _turn_text(turns[1])


def _parse(path: Path) -> _Rows:
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DatasetError(f"dataset {path}: {err.strerror or err}") from err
    text = raw.decode("utf-8", "replace")
    records: list[Any] = []
    bad_lines = 0
    if text.lstrip().startswith("["):  # ShareGPT: one JSON list
        fmt = "sharegpt"
        try:
            records = json.loads(text)
        except ValueError as err:
            raise DatasetError(f"dataset {path}: not valid JSON ({err})") from err
    else:  # SGLang's custom format: one JSON object per line
        fmt = "custom"
        for line in text.splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    bad_lines += 1  # skipped, as SGLang's sample_custom_requests does
    rows = []
    for record in records:
        pair = _conversation(record)
        if pair is None:
            continue
        prompt, answer = pair
        if estimate_tokens(prompt) < MIN_TOKENS or estimate_tokens(answer) < MIN_TOKENS:
            continue
        rows.append((prompt, estimate_tokens(answer)))
    if not rows:
        raise DatasetError(f"dataset {path}: no conversation with a prompt and an answer of at "
                           f"least {MIN_TOKENS} tokens ({fmt} format: "
                           '"conversations": [{"from"/"role": ..., "value"/"content": ...}, ...])')
    return _Rows(fmt, tuple(rows), hashlib.sha256(raw).hexdigest(),
                 len(records) + bad_lines - len(rows))


def _load_rows(path: Path) -> _Rows:
    try:
        stat = path.stat()
    except OSError as err:
        raise DatasetError(f"dataset {path}: {err.strerror or err}") from err
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _LOADED:
        _LOADED[key] = _parse(path)
    return _LOADED[key]


class Conversations(Dataset):
    """A ShareGPT JSON or custom JSONL file: first turn as prompt, second turn's length as
    the output length, both capped."""

    def __init__(self, path: Path, input_len: int, output_len: int, seed: int) -> None:
        super().__init__(input_len, output_len, seed)
        self.path = path
        self.data = _load_rows(path)
        self.name = self.data.format
        self.order = list(range(len(self.data.rows)))
        random.Random(f"{seed}:order").shuffle(self.order)

    def prompt(self, stream: str, index: int) -> Prompt:
        """Consecutive rows of a seeded shuffle from a per-stream offset: distinct within a
        stream while it has fewer requests than the file has rows."""
        n = len(self.order)
        offset = int(hashlib.sha256(f"{self.seed}:{stream}".encode()).hexdigest(), 16) % n
        text, answer = self.data.rows[self.order[(offset + index) % n]]
        text = cap_text(text, self.input_len)
        return Prompt(text, None, estimate_tokens(text), min(answer, self.output_len))

    def _sample(self) -> list[Prompt]:
        return [self.prompt("describe", i) for i in range(len(self.order))]

    def _info(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.data.sha256,
                "prompts": len(self.data.rows), "skipped": self.data.skipped}


def load(dataset: str, input_len: int, output_len: int, seed: int = 0) -> Dataset:
    """``builtin``, ``random``, or the path of a ShareGPT JSON / custom JSONL file (resolved
    against the current directory: the CLI makes user paths absolute first)."""
    if dataset == BUILTIN:
        return BuiltinText(input_len, output_len, seed)
    if dataset == RANDOM:
        return RandomIds(input_len, output_len, seed)
    return Conversations(Path(dataset), input_len, output_len, seed)
