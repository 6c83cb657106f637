"""SGLang's rules on the speculative shape (steps, topk, draft tokens), read in SGLang 0.5.16
and 0.5.23 (``speculative_hook.py``): which shapes never start, and which run alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]

STEPS, TOPK, DRAFTS = SHAPE = ("--speculative-num-steps", "--speculative-eagle-topk",
                               "--speculative-num-draft-tokens")


def too_many_draft_tokens(config: Config) -> str | None:
    """More draft tokens than the draft tree holds (steps * topk + 1)."""
    steps = config.get(STEPS)
    topk = config.get(TOPK)
    drafts = config.get(DRAFTS)
    if isinstance(steps, int) and isinstance(topk, int) and isinstance(drafts, int) \
            and steps * topk + 1 < drafts:
        return f"speculative steps*topk+1 = {steps}*{topk}+1 < num-draft-tokens={drafts}"
    return None


def partial_shape(config: Config) -> str | None:
    """SGLang (0.5.16 and 0.5.23, speculative_hook.py ``_handle_eagle_family``) chooses the
    whole shape itself when the steps are not given, and asserts that topk and the draft
    tokens are not given either: a partial shape never starts."""
    if config.get(STEPS) is None:
        given = [name for name in (TOPK, DRAFTS) if config.get(name) is not None]
        if given:
            return (f"{' and '.join(given)} without {STEPS}: SGLang asserts on a partial "
                    "speculative shape (it chooses all three or none)")
    return None


def resolved_alike(config: Config) -> dict[str, Any]:
    """The configuration as SGLang resolves it, where a rule makes two configurations run
    alike: with topk 1, the draft tokens become steps + 1 whatever was asked (SGLang 0.5.16
    and 0.5.23, speculative_hook.py: "speculative_num_draft_tokens is adjusted to
    speculative_num_steps + 1 when speculative_eagle_topk == 1")."""
    out = dict(config)
    steps = out.get(STEPS)
    if out.get(TOPK) == 1 and isinstance(steps, int) and out.get(DRAFTS) is not None:
        out[DRAFTS] = steps + 1
    return out
