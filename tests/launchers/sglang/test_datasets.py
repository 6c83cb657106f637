"""Prompt sources: the built-in text, random ids, and SGLang's ShareGPT and custom formats."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from launchers.sglang import datasets
from launchers.sglang.datasets import (
    CHARS_PER_TOKEN,
    TOKEN_ID_RANGE,
    DatasetError,
    cap_text,
    estimate_tokens,
)

LONG = "word " * 400  # 2,000 characters: ~500 estimated tokens


def sharegpt(path: Path, conversations: list[object]) -> Path:
    path.write_text(json.dumps(conversations))
    return path


def turn(who: str, text: str, key: str = "value") -> dict[str, str]:
    return {"from": who, key: text}


def test_estimate_and_cap() -> None:
    assert estimate_tokens("") == 1 and estimate_tokens("abcdefgh") == 2
    capped = cap_text(LONG, 10)
    assert len(capped) <= 10 * CHARS_PER_TOKEN and capped.endswith("word")
    assert cap_text("short", 10) == "short"


def test_builtin_is_real_text_and_seeded() -> None:
    a = datasets.load("builtin", input_len=128, output_len=64, seed=1)
    b = datasets.load("builtin", input_len=128, output_len=64, seed=1)
    p = a.prompt("r0c1", 0)
    assert p.text is not None and p.input_ids is None
    assert p.body() == {"text": p.text}
    assert p == b.prompt("r0c1", 0)
    assert p != a.prompt("r0c1", 1) and p != a.prompt("r0c4", 0)
    assert p != datasets.load("builtin", 128, 64, seed=2).prompt("r0c1", 0)
    assert p.output_len == 64
    assert 100 <= p.input_len <= 128  # capped at input_len, cut at a word
    words = p.text.split()
    assert sum(w.lower() in {"the", "a", "of", "to", "is", "and"} for w in words) > 3


def test_builtin_describe() -> None:
    info = datasets.load("builtin", input_len=256, output_len=100).describe()
    assert info["name"] == "builtin" and info["source"] == "pydoc_data.topics"
    assert info["path"].endswith("topics.py") and len(info["sha256"]) == 64
    assert info["chars"] > 300_000 and info["prompts"] > 300
    assert info["output_len"] == {"min": 100.0, "mean": 100.0, "median": 100.0, "max": 100.0}
    assert 200 <= info["input_len"]["mean"] <= 256 and info["input_len"]["max"] <= 256
    assert "estimated" in info["lengths"]


def test_random_ids_are_exact() -> None:
    ds = datasets.load("random", input_len=64, output_len=8, seed=7)
    p = ds.prompt("round0", 3)
    assert p.text is None and p.input_ids is not None and len(p.input_ids) == 64
    assert p.body() == {"input_ids": list(p.input_ids)}
    low, high = TOKEN_ID_RANGE
    assert all(low <= t < high for t in p.input_ids)
    assert p == datasets.load("random", 64, 8, seed=7).prompt("round0", 3)
    assert p != ds.prompt("round0", 4)
    info = ds.describe()
    assert info["name"] == "random" and info["sha256"] is None
    assert info["input_len"]["min"] == info["input_len"]["max"] == 64.0


def test_sharegpt_lengths_from_the_data_capped(tmp_path: Path) -> None:
    path = sharegpt(tmp_path / "sg.json", [
        {"conversations": [turn("human", "Tell me about Paris, please."),
                           turn("gpt", "Paris is the capital of France. " * 3)]},
        {"conversations": [turn("human", LONG), turn("gpt", LONG)]},
        {"conversations": [turn("human", "only one turn")]},  # dropped: < 2 turns
        {"conversation": [turn("human", "hi"), turn("gpt", "Sure, here it is.")]},  # "hi": 1 token
        {"id": "no conversations"},
    ])
    ds = datasets.load(str(path), input_len=64, output_len=100, seed=0)
    assert ds.name == "sharegpt"
    prompts = {ds.prompt("s", i).text: ds.prompt("s", i) for i in range(2)}
    assert len(prompts) == 2  # distinct within a stream
    short = prompts["Tell me about Paris, please."]
    assert short.output_len == estimate_tokens("Paris is the capital of France. " * 3)
    assert short.input_len == estimate_tokens("Tell me about Paris, please.")
    long = next(p for t, p in prompts.items() if t and t.startswith("word"))
    assert long.input_len <= 64 and long.output_len == 100  # both capped
    info = ds.describe()
    assert info["prompts"] == 2 and info["skipped"] == 3
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["path"] == str(path)
    assert info["output_len"]["max"] == 100.0


def test_custom_jsonl_roles_and_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "mine.jsonl"
    good = {"conversations": [{"role": "user", "content": "Summarise the plot of Hamlet."},
                              {"role": "assistant", "content": "A prince avenges his father."}]}
    value = {"conversations": [{"role": "user", "value": "What is 2 + 2, and why?"},
                               {"role": "assistant", "value": "Four, by the axioms."}]}
    path.write_text(json.dumps(good) + "\n\nnot json\n" + json.dumps(value) + "\n")
    ds = datasets.load(str(path), input_len=256, output_len=256, seed=3)
    assert ds.name == "custom"
    texts = {ds.prompt("x", i).text for i in range(2)}
    assert texts == {"Summarise the plot of Hamlet.", "What is 2 + 2, and why?"}
    assert ds.describe()["skipped"] == 1


def test_bad_datasets_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="No such file"):
        datasets.load(str(tmp_path / "missing.json"), 8, 8)
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(DatasetError, match="not valid JSON"):
        datasets.load(str(broken), 8, 8)
    empty = sharegpt(tmp_path / "empty.json", [{"conversations": []}])
    with pytest.raises(DatasetError, match="no conversation"):
        datasets.load(str(empty), 8, 8)


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = sharegpt(tmp_path / "sg.json", [
        {"conversations": [turn("human", "first prompt here"), turn("gpt", "an answer")]}])
    assert datasets.load(str(path), 64, 64).prompt("s", 0).text == "first prompt here"
    sharegpt(path, [{"conversations": [turn("human", "the second prompt, longer"),
                                       turn("gpt", "an answer")]}])
    assert datasets.load(str(path), 64, 64).prompt("s", 0).text == "the second prompt, longer"
