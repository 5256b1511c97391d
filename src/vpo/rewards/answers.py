"""Chains in, single answers out: the m-answer prompt, a completion's text and form, one answer
in the completion's form, each row's group key, and ``ScoredAnswers`` (every parsed answer of a
batch with its raw values).

Usage::

    from vpo.rewards.answers import completion_text, rewrite_chain_prompt, rollout_group_keys
    rewrite_chain_prompt("Name a fruit.", 3)                  # asks for <response_1>..<response_3>
    completion_text([{"role": "assistant", "content": "x"}])  # "x"
    rollout_group_keys(["p", "p"], {"example_id": [7, 8]})    # ["7", "8"]: the example_id, else the prompt

Shapes: B completions, P answers, D objectives.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vpo.chains import RewriteRule, rewrite_prompt
from vpo.weights import given_key

__all__ = ["CHAIN_RULE", "CHAIN_TAG", "ScoredAnswers", "completion_form", "completion_text", "prompt_key",
           "rewrite_chain_prompt", "rollout_group_keys", "single_answer"]

CHAIN_TAG = "response"
"""The generic chain's numbered tag: ``<response_1>...</response_1>`` (the authors' release)."""

CHAIN_RULE = RewriteRule(
    "own_rewards",
    template=("Give {m} genuinely different answers to the above. Put each one, complete, in its own "
              "numbered tags: <{tag}_1>...</{tag}_1> through <{tag}_{m}>...</{tag}_{m}>."),
    tag=CHAIN_TAG,
)
"""The instruction appended to a user's single-answer prompt (its own format instruction is
unknown, so it is extended rather than replaced, as the release does for tool calling)."""


def rewrite_chain_prompt(prompt: Any, m: int, rule: RewriteRule = CHAIN_RULE) -> Any:
    """``prompt`` asking for ``m`` answers: a string is rewritten by ``rule``; chat messages get
    their last user message rewritten (a copy; string content, or its last text block)."""
    if isinstance(prompt, str):
        return rewrite_prompt(prompt, m, rule)
    if not isinstance(prompt, Sequence) or not prompt:
        raise ValueError(f"a prompt must be a string or a non-empty list of chat messages, got {prompt!r:.80}")
    messages = [dict(message) for message in prompt]
    users = [i for i, message in enumerate(messages) if message.get("role") == "user"]
    if not users:
        raise ValueError("a chat prompt needs a user message to ask for several answers in")
    last = messages[users[-1]]
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = rewrite_prompt(content, m, rule)
    elif isinstance(content, list):
        blocks = [dict(block) for block in content]
        texts = [i for i, block in enumerate(blocks) if block.get("type") == "text"]
        if not texts:
            raise ValueError("the last user message has no text block to ask for several answers in")
        blocks[texts[-1]]["text"] = rewrite_prompt(str(blocks[texts[-1]].get("text", "")), m, rule)
        last["content"] = blocks
    else:
        raise ValueError(f"the last user message's content must be a string or content blocks, got {content!r:.80}")
    return messages


def completion_text(completion: str | Sequence[Mapping[str, Any]]) -> str:
    """The generated text of a completion: a string, or the concatenated ``content`` of the
    assistant messages of a chat completion."""
    if isinstance(completion, str):
        return completion
    parts = []
    for message in completion:
        if isinstance(message, Mapping) and message.get("role", "assistant") == "assistant":
            content = message.get("content", "")
            if isinstance(content, list):  # content blocks
                content = "".join(block.get("text", "") for block in content if isinstance(block, Mapping))
            parts.append(str(content or ""))
    return "".join(parts)


def completion_form(prompt: Any, completion: Any) -> Any:
    """``completion`` in the form every path gives a reward function for ``prompt``, the data's own
    prompt: text for a string prompt (TRL generates text for it; a chat template the model was
    prompted in does not change what the data holds), one assistant turn for chat turns (TRL
    generates assistant turns for them)."""
    if isinstance(prompt, str):
        return completion if isinstance(completion, str) else completion_text(completion)
    return [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion


def single_answer(completion: Any, answer: str) -> Any:
    """``answer`` in the form of ``completion``: a string, or one assistant message."""
    if isinstance(completion, str):
        return answer
    return [{"role": "assistant", "content": answer}]


def rollout_group_keys(prompts: Sequence[Any], columns: Mapping[str, Sequence[Any]] | None = None) -> list[Hashable]:
    """The group label of each row, the one keying of every engine: its ``example_id`` column
    (as a string) when the data has one, else the prompt (chat messages as canonical JSON). Rows
    of one label are one prompt's rollouts, and share its keyed weights."""
    ids = (columns or {}).get("example_id")
    if ids is not None and len(ids) != len(prompts):
        raise ValueError(f"column 'example_id' has {len(ids)} values for {len(prompts)} completions")
    keys: list[Hashable] = []
    for row, prompt in enumerate(prompts):
        if ids is not None and given_key(ids[row]) is not None:
            keys.append(str(ids[row]))
        else:
            keys.append(prompt_key(prompt))
    return keys


def prompt_key(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """Stable text key of a prompt: the string itself, or the canonical JSON of chat messages."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps(list(prompt), sort_keys=True, ensure_ascii=False, default=str)


@dataclass


class ScoredAnswers:
    """Every parsed answer of a batch of chains with its raw objective values (before the ``None``
    rule and scaling), and the chain-level functions' values per completion: what one process
    scores; a trainer joins the processes' parts with ``concat``."""

    owners: np.ndarray
    """(P,) index of the completion each answer came from."""
    values: np.ndarray
    """(P, D) raw values, NaN where a function returned ``None`` (and in chain-level columns)."""
    names: tuple[str, ...]
    """The D objective names."""
    num_chains: int
    """B, the number of completions (chains with no parseable answer own no row)."""
    tagged: np.ndarray | None = None
    """(B,) answers found in each completion's numbered tags (the untagged fallback's answer is not
    one; m = 1: 1 for non-blank text). None: every answer was tagged."""
    chain_level: np.ndarray | None = None
    """(D,) bool, the objectives of chain-level functions (``is_chain_level``). None: none."""
    chain_values: np.ndarray | None = None
    """(B, D) raw values of the chain-level objectives per completion (NaN elsewhere and for ``None``)."""
    positions: np.ndarray | None = None
    """(P,) each answer's slot in its chain (0-based; the i-th answer tag is slot i - 1). None: the
    answers of a chain fill its first slots."""

    def __post_init__(self) -> None:
        dim = len(self.names)
        if self.positions is None:
            order = np.argsort(self.owners, kind="stable")
            starts = np.searchsorted(self.owners[order], self.owners[order])
            self.positions = np.empty(self.owners.size, dtype=np.int64)
            self.positions[order] = np.arange(self.owners.size) - starts
        if self.tagged is None:
            self.tagged = np.bincount(self.owners, minlength=self.num_chains).astype(np.int64)
        if self.chain_level is None:
            self.chain_level = np.zeros(dim, dtype=bool)
        if self.chain_values is None:
            self.chain_values = np.full((self.num_chains, dim), np.nan)

    @classmethod
    def concat(cls, parts: Sequence[ScoredAnswers]) -> ScoredAnswers:
        """The parts of several processes as one batch, in order (chain indices offset)."""
        first = parts[0]
        if any(part.names != first.names for part in parts):
            raise ValueError(f"the processes scored different objectives: {sorted({p.names for p in parts})}")
        offsets = np.cumsum([0] + [part.num_chains for part in parts[:-1]])
        dim = len(first.names)
        return cls(np.concatenate([part.owners + offset for part, offset in zip(parts, offsets, strict=True)]),
                   np.concatenate([part.values for part in parts]).reshape(-1, dim), first.names,
                   int(sum(part.num_chains for part in parts)), np.concatenate([part.tagged for part in parts]),
                   first.chain_level, np.concatenate([part.chain_values for part in parts]).reshape(-1, dim),
                   np.concatenate([part.positions for part in parts]))
