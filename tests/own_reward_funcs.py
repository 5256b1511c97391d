"""Reward functions of TRL's contract for the own-rewards tests (imported as ``own_reward_funcs``:
pytest puts tests/ on the path). They trade off: naming the row's keyword, brevity, enthusiasm."""

from vpo.rewards import chain_level, completion_text

CALLS = []
"""(function name, number of answers, the keyword column) of every call, for the tests to read."""


def keyword(prompts, completions, keyword, **kwargs):
    """1 when the answer names the row's keyword (the dataset column ``keyword``)."""
    CALLS.append(("keyword", len(completions), list(keyword)))
    return [float(k.lower() in completion_text(c).lower()) for c, k in zip(completions, keyword, strict=True)]


def brevity(prompts, completions, **kwargs):
    """1 / number of words: short answers score high."""
    CALLS.append(("brevity", len(completions), None))
    return [1.0 / max(1, len(completion_text(c).split())) for c in completions]


def excitement(prompts, completions, **kwargs):
    """Share of sentences ending in '!'; None (does not apply) for an answer without any sentence end."""
    out = []
    for c in completions:
        text = completion_text(c)
        ends = [ch for ch in text if ch in ".!?"]
        out.append(None if not ends else ends.count("!") / len(ends))
    return out


def logits(prompts, completions, **kwargs):
    """An unbounded score (a reward model's logit would be one): the number of words minus 2."""
    return [float(len(completion_text(c).split()) - 2) for c in completions]


def copies(prompts, completions, **kwargs):
    """keyword and brevity again, scaled: collinear with them by construction (2 x keyword)."""
    return [2.0 * v for v in keyword(prompts, completions, **kwargs)]


@chain_level
def tokens_used(prompts, completions, completion_ids, **kwargs):
    """Judges the whole completion: 1 / (1 + its tokens). Records (name, completions, their token counts)."""
    CALLS.append(("tokens_used", len(completions), [len(ids) for ids in completion_ids]))
    return [1.0 / (1 + len(ids)) for ids in completion_ids]


FORMS = []
"""The type of every completion ``plain_text`` saw."""


def plain_text(completions, **kwargs):
    """A reward written for text completions, as docs/own_rewards.md's examples are (``c.strip()``)."""
    FORMS.extend(type(c).__name__ for c in completions)
    return [1.0 / (1 + len(c.strip())) for c in completions]
