"""How well a draft model could predict a prompt's continuation, from its content alone.
Part of the simulator: a stand-in, never a measurement of SGLang.

A draft model's tokens are accepted where the text is predictable. The stand-in stands for
that with one observable: the share of a prompt's words that are among the most frequent
English words. Natural prose scores about 0.4-0.5 (Python's documentation passages: 0.39 on
average), code about 0.25, token ids with no text 0. The accept length the cost model gives
for a speculative shape is its length on prose; on other content the drafted part shrinks:

    accept length = 1 + (model's accept length - 1) * scale,
    scale = FLOOR + (1 - FLOOR) * min(1, predictability / PROSE)

so random ids accept 1 + 0.3 x the drafted part and prose nearly all of it. Only the
direction is claimed (predictable text accepts more), not the sizes.
"""

from __future__ import annotations

import re

FLOOR = 0.3  # the share of the drafted part accepted on unpredictable input
PROSE = 0.4  # the predictability at and above which the full accept length is reached
COMMON_WORDS = frozenset({
    "the", "of", "and", "to", "a", "in", "is", "it", "that", "for", "on", "as", "with", "be",
    "by", "this", "are", "or", "not", "an", "at", "from", "if", "you", "can", "but", "which",
    "have", "was", "will", "its", "all", "one", "has", "their", "been", "they", "were",
    "there", "when", "so", "do", "no", "may", "any", "these", "than", "other", "use", "used",
    "only", "also", "into", "more", "such", "each", "then", "must", "same", "we", "some",
    "would", "how", "should", "what", "new"
})
_WORD = re.compile(r"[a-z']+")
_TOKEN = re.compile(r"\w+|[^\w\s]")


def predictability(text: str | None) -> float:
    """The share of ``text``'s words among COMMON_WORDS; 0 for no text (token ids)."""
    words = _WORD.findall(text.lower()) if text else []
    return sum(w in COMMON_WORDS for w in words) / len(words) if words else 0.0


def accept_scale(text: str | None) -> float:
    """The share of the drafted part of the accept length that this prompt keeps."""
    return FLOOR + (1.0 - FLOOR) * min(1.0, predictability(text) / PROSE)


def count_tokens(text: str) -> int:
    """The stand-in's tokenizer: words and punctuation marks (about what a BPE tokenizer
    gives for English)."""
    return len(_TOKEN.findall(text))
