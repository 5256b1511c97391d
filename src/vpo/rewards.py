"""A user's own reward functions as VPO's objectives: split each m-answer chain, score every answer
with each function, and build the chain's (M, D) reward matrix.

Usage::

    from vpo.rewards import score_chains, rewrite_chain_prompt
    prompt_m = rewrite_chain_prompt("Name a fruit.", 3)    # asks for <response_1>..<response_3>
    scored = score_chains([is_red, is_short], prompts, completions, answers=3, label=labels)
    scored.matrices[0]        # (3, 2): distinct answers' vectors, zero rows appended
    scored.names              # ("is_red", "is_short")
    scored.stats              # {"answers_parsed": ..., "none/is_red": ..., "effective_dim": ...}

A reward function is what TRL's ``GRPOTrainer(reward_funcs=...)`` takes: a callable (sync or async)
``f(prompts=, completions=, completion_ids=, **columns) -> list[float | None]``, a Hugging Face
model id, or a sequence-classification ``PreTrainedModel`` (its logits score prompt + answer). Each
function is one objective; a model with several labels, or a callable with an ``objective_names``
attribute returning one vector per completion, gives one objective per head. The functions see one
answer at a time (``completions`` holds single answers, strings or one assistant message as the
chain was), with every dataset column repeated per answer, and are called once for all answers.

A function that judges the whole completion (length, format, thinking tags: ``is_chain_level``,
declared with ``chain_level(f)`` or ``f.chain_level = True``; TRL's ``think_format_reward``, soft
overlong punishment and repetition penalty are by nature) is called once per completion instead,
and its value is a shared objective: the same on every row of the chain's matrix, padding included.
A length budget is one answer's: a chain of m answers is judged against m times it (``at_answers``).
Completions take the form of the data's prompt everywhere (``completion_form``): text for a string
prompt, assistant turns for chat turns. Loading, arguments and outputs are checked by
``vpo.reward_guard`` (one line naming the fault).

``None`` means "this function does not apply to this sample" (TRL's meaning): a function that
returns ``None`` for every answer of a group (the rollouts of one prompt) is dropped from that
group's matrices; any other ``None`` counts as 0 and is counted in ``stats``. Matrices follow the
authors' generic chain (``<response_i>`` tags, duplicates = identical score vectors, first kept,
zero rows up to m: ``vpo.chains.finish_chain``); docs/own_rewards.md is the contract.

Shapes: B completions, P answers (all chains' parsed answers together), M answers per chain, D
objectives. Only numpy is imported here; torch and transformers are imported when a reward
function is a model id or a model.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import re
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.chains import RewriteRule, finish_chain, parse_answers, rewrite_prompt
from vpo.reward_failures import FAILED_CALL, RewardFailures
from vpo.reward_guard import (TRL_CHAIN_LEVEL, TRL_HOOKS, LengthBudget, at_answers, chain_level, check_arguments,
                              check_columns, checked_rewards, function_name, is_chain_level, is_reward_model,
                              length_budget, load_reward_funcs)
from vpo.weights import given_key

__all__ = [
    "CHAIN_RULE",
    "CHAIN_TAG",
    "COLLINEAR_EFFECTIVE_DIM",
    "SCALINGS",
    "TRL_CHAIN_LEVEL",
    "TRL_HOOKS",
    "ChainRewards",
    "CollinearObjectivesWarning",
    "LengthBudget",
    "RewardScaleWarning",
    "ScoredAnswers",
    "at_answers",
    "cached_reward_model",
    "call_reward_funcs",
    "chain_level",
    "check_arguments",
    "check_columns",
    "check_scaling",
    "completion_form",
    "is_reward_model",
    "load_reward_model",
    "completion_text",
    "effective_dimension",
    "finish_chains",
    "function_name",
    "group_keys",
    "is_chain_level",
    "length_budget",
    "load_reward_funcs",
    "objective_diagnostics",
    "objective_names",
    "prompt_key",
    "rewrite_chain_prompt",
    "score_chains",
    "score_every_answer",
    "score_with_model",
    "single_answer",
]

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

SCALINGS = ("none", "sigmoid", "minmax")
"""Per-objective scalings by name (a ``(low, high)`` pair is the fourth form):

* ``none``: the values as returned (the default; warns once if they leave [0, 1]);
* ``sigmoid``: 1 / (1 + e^-x), for reward-model logits (a Bradley-Terry win probability);
* ``minmax``: (x - min) / (max - min) over the batch's answers (0 when they are all equal);
* ``(low, high)``: (x - low) / (high - low), clipped to [0, 1]: a fixed, known range.
"""

COLLINEAR_EFFECTIVE_DIM = 1.2
"""An effective dimension below this (with D >= 2 objectives) counts as "near 1": the objectives
move together and the vector adds little over their sum (docs/own_rewards.md)."""


class RewardScaleWarning(UserWarning):
    """An objective without scaling left [0, 1] (shown once per objective)."""


class CollinearObjectivesWarning(UserWarning):
    """The objectives' effective dimension stayed near 1."""


# ------------------------------------------------------------------------------------------------
# chains: prompts in, single answers out
# ------------------------------------------------------------------------------------------------
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


def group_keys(prompts: Sequence[Any], columns: Mapping[str, Sequence[Any]] | None = None) -> list[Hashable]:
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


# ------------------------------------------------------------------------------------------------
# reward functions: names, loading, the default call
# ------------------------------------------------------------------------------------------------
def _declared_heads(func: Any) -> tuple[str, ...] | None:
    """Head names a function declares: ``objective_names`` on a callable, or a model's
    ``id2label`` when it has more than one label (transformers' default ``LABEL_j`` become "j")."""
    declared = getattr(func, "objective_names", None)
    if declared is not None and not is_reward_model(func):
        names = tuple(str(n) for n in declared)
        if not names:
            raise ValueError(f"reward function {function_name(func)!r}: objective_names is empty")
        return names
    if is_reward_model(func):
        labels = int(getattr(func.config, "num_labels", 1) or 1)
        if labels <= 1:
            return None
        id2label = getattr(func.config, "id2label", None) or {}
        names = tuple(str(id2label.get(j, f"LABEL_{j}")) for j in range(labels))
        if all(re.fullmatch(r"LABEL_\d+", n) for n in names):
            return tuple(str(j) for j in range(labels))
        return names
    return None


def objective_names(reward_funcs: Sequence[Any], reward_names: Sequence[Any] | None = None,
                    widths: Sequence[int] | None = None) -> tuple[str, ...]:
    """The D objective names of ``reward_funcs``: a function's name (TRL's: ``__name__``, or a
    model's checkpoint name), and ``name/head`` for each head of a multi-head one. ``reward_names``
    (one per function) renames: a string replaces the function's name, a sequence names its heads.
    ``widths`` gives each function's number of heads when known from its output."""
    funcs = list(reward_funcs)
    if reward_names is not None and len(reward_names) != len(funcs):
        raise ValueError(f"reward_names has {len(reward_names)} entries for {len(funcs)} reward functions")
    names: list[str] = []
    for i, func in enumerate(funcs):
        heads = _declared_heads(func)
        width = widths[i] if widths is not None else (len(heads) if heads else 1)
        given = None if reward_names is None else reward_names[i]
        if given is not None and not isinstance(given, str):
            given = tuple(str(n) for n in given)
            if len(given) != width:
                raise ValueError(f"reward_names[{i}] names {len(given)} objectives, but the function gives {width}")
            names.extend(given)
            continue
        own = getattr(func, "objective_names", None) is not None and not is_reward_model(func)
        if own and given is None and heads is not None and len(heads) == width:
            names.extend(heads)  # a callable's own names for its objectives
            continue
        base = given if given is not None else function_name(func)
        if width == 1:
            names.append(base)
        else:
            labels = heads if heads is not None and len(heads) == width else tuple(str(j) for j in range(width))
            names.extend(f"{base}/{label}" for label in labels)
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"objective names must be distinct, got {dupes} twice; pass reward_names=[...]")
    return tuple(names)


def load_reward_model(name: str) -> tuple[Any, Any]:
    """(model, tokenizer) of a sequence-classification checkpoint id or folder, in eval mode, with
    all of its labels (a multi-head checkpoint gives several objectives)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(name)
    tokenizer = AutoTokenizer.from_pretrained(name, padding_side="right")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def _model_texts(prompts: Sequence[Any], completions: Sequence[Any], tokenizer: Any) -> list[str]:
    """prompt + answer as TRL's GRPOTrainer feeds a reward model: plain concatenation, or the chat
    template of the prompt's messages followed by the answer's."""
    if prompts and not isinstance(prompts[0], str):
        return [tokenizer.apply_chat_template(list(p) + list(c), tokenize=False)
                for p, c in zip(prompts, completions, strict=True)]
    return [p + c for p, c in zip(prompts, completions, strict=True)]


def score_with_model(model: Any, tokenizer: Any, prompts: Sequence[Any], completions: Sequence[Any],
                      batch_size: int = 64) -> np.ndarray:
    """All logits (P, num_labels) of a sequence classifier on prompt + answer, in batches."""
    import torch

    if tokenizer is None:
        raise ValueError(f"reward model {function_name(model)!r} needs a tokenizer: pass reward_processing_classes")
    texts = _model_texts(prompts, completions, tokenizer)
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                              padding_side="right", add_special_tokens=False)
            batch = {k: v.to(device) for k, v in batch.items()}
            out.append(model(**batch).logits.float().cpu().numpy())
    labels = int(getattr(model.config, "num_labels", 1) or 1)
    return np.concatenate(out, axis=0) if out else np.zeros((0, labels))


def call_reward_funcs(reward_funcs: Sequence[Any], prompts: Sequence[Any], completions: Sequence[Any],
                      columns: Mapping[str, Sequence[Any]] | None = None, *,
                      reward_processing_classes: Sequence[Any] | Any = None,
                      completion_ids: Sequence[Any] | None = None,
                      failures: RewardFailures | None = None, tokenizer: Any = None) -> list[np.ndarray]:
    """Each function once on all P answers: one (P,) or (P, H) array per function, ``None`` as NaN.

    Callables get ``prompts=, completions=, completion_ids=, **columns`` (async ones run together;
    ``columns`` may hold ``TRL_HOOKS`` and ``completion_ids``, passed as they are). Without
    ``completion_ids``, a ``tokenizer`` gives each completion's tokens (its text, no special
    tokens: what ``VPOTrainer`` passes an answer). A callable with a required argument that is none
    of these raises ``RewardContractError`` naming the missing dataset column
    (``check_arguments``), before any call, and an output that is not one number (or ``None``) per
    answer raises it naming what came back (``vpo.reward_guard.checked_rewards``); a model id is
    loaded once (``load_reward_model``) and a model scores prompt + answer with its processing
    class, all heads. The default ``call`` of ``score_chains``. With ``failures``
    (``vpo.reward_failures``), callables run under its policy: a call that raises, returns NaN or
    an infinity, or runs past the time limit is ``FAILED_CALL`` (``finish_chains`` gives it the
    objective's worst value after scaling) and is counted there; a model's NaN or infinite scores
    count the same way (``RewardFailures.clean_model_scores``).
    """
    columns = dict(columns or {})
    if "completion_ids" in columns:  # TRL passes the ids apart from the columns
        given_ids = columns.pop("completion_ids")
        completion_ids = given_ids if completion_ids is None else completion_ids
    if completion_ids is None and tokenizer is not None:
        tokens = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
        completion_ids = tokens(text=[completion_text(c) for c in completions], add_special_tokens=False)["input_ids"]
    funcs = list(reward_funcs)
    classes = reward_processing_classes
    if classes is None or not isinstance(classes, list | tuple):
        classes = [classes] * len(funcs)
    if len(classes) != len(funcs):
        raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(funcs)} reward functions")
    n = len(completions)
    outputs: list[np.ndarray | None] = [None] * len(funcs)
    pending = []
    for i, func in enumerate(funcs):
        name = function_name(func)
        model = isinstance(func, str) or is_reward_model(func)
        heads = None if model else _declared_heads(func)
        if not model:
            check_arguments(func, name, columns)
        if failures is not None and callable(func) and not model:
            func = failures.guard(func, name, len(heads or (None,)), failed_value=FAILED_CALL)
        if model:
            tokenizer_i = classes[i]
            if isinstance(func, str):
                func, loaded = cached_reward_model(func)
                tokenizer_i = tokenizer_i or loaded
            scores = _model_output(score_with_model(func, tokenizer_i, prompts, completions))
            outputs[i] = scores if failures is None else failures.clean_model_scores(name, scores, FAILED_CALL)
        elif inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
            pending.append((i, name, heads, func(prompts=list(prompts), completions=list(completions),
                                                 completion_ids=completion_ids, **columns)))
        else:
            outputs[i] = checked_rewards(func(prompts=list(prompts), completions=list(completions),
                                              completion_ids=completion_ids, **columns),
                                         n, name, None if heads is None else len(heads))
    if pending:
        async def together() -> list[Any]:
            return await asyncio.gather(*(coro for *_, coro in pending))

        for (i, name, heads, _), output in zip(pending, _run_async(together), strict=True):
            outputs[i] = checked_rewards(output, n, name, None if heads is None else len(heads))
    return outputs  # type: ignore[return-value]


def _model_output(logits: np.ndarray) -> np.ndarray:
    return logits[:, 0] if logits.ndim == 2 and logits.shape[1] == 1 else logits


_LOADED_MODELS: dict[str, tuple[Any, Any]] = {}


def cached_reward_model(name: str) -> tuple[Any, Any]:
    """``load_reward_model(name)``, loaded once per process (the default call loop scores with it)."""
    if name not in _LOADED_MODELS:
        _LOADED_MODELS[name] = load_reward_model(name)
    return _LOADED_MODELS[name]


def _run_async(make: Callable[[], Any]) -> Any:
    """Run the coroutine ``make()`` to completion, also from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


# ------------------------------------------------------------------------------------------------
# scoring: answers -> raw values -> chain matrices
# ------------------------------------------------------------------------------------------------
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


@dataclass
class ChainRewards:
    """The reward matrices of B chains scored by a user's reward functions."""

    matrices: list[np.ndarray]
    """One (M, D_i) float64 per completion: its distinct answers' vectors, rows of an absent answer
    appended up to M (zeros, with the chain's value in chain-level objectives); D_i < D where the
    ``None`` rule dropped objectives for the completion's group."""
    names: tuple[str, ...]
    """The D objective names."""
    kept: list[np.ndarray]
    """Per completion, int indices into ``names`` of the columns of its matrix."""
    stats: dict[str, float]
    """Metric-ready numbers: ``answers_parsed`` (tagged answers per chain), ``parse_rate`` (share of
    chains with a tagged answer), ``duplicate_rate``, ``unparseable`` (share of chains without an
    answer, fallback included), ``none/<name>`` (``None`` counted as 0), ``dropped/<name>``
    (groups that lost the objective), ``objective/<name>`` (mean over the chains that kept the
    objective of their best answer's value),
    ``effective_dim`` and ``mean_abs_correlation`` (``objective_diagnostics`` of the answers whose
    group kept every objective)."""
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(P, D) every parsed answer's scaled vector (before dedup), NaN where dropped."""
    owners: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(P,) the completion of each row of ``vectors``."""
    correlation: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(D, D) the objectives' correlation over the answers (``objective_diagnostics``)."""
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """(P,) each row of ``vectors``' slot in its chain (``ScoredAnswers.positions``)."""
    chain_values: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    """(B, D) each completion's scaled chain-level values (0 in answer-level and dropped columns)."""
    duplicates: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """(B,) answers of each chain that the dedup dropped."""

    def dense(self, i: int) -> np.ndarray:
        """Completion ``i``'s matrix with all D columns, zeros where an objective was dropped."""
        out = np.zeros((self.matrices[i].shape[0], len(self.names)))
        out[:, self.kept[i]] = self.matrices[i]
        return out

    def slots(self, answers: int) -> np.ndarray:
        """(B, M, D) every answer slot of every chain, before dedup: an answer's scaled vector in its
        slot, a slot without an answer zeros with the chain's chain-level values (as the rows that
        pad a matrix), a dropped objective 0. An evaluation pool's rows (``vpo eval``, best-of-n)."""
        out = np.repeat(self.chain_values[:, None, :], answers, axis=1) if self.chain_values.size else \
            np.zeros((len(self.matrices), answers, len(self.names)))
        out[self.owners, self.positions] = np.nan_to_num(self.vectors, nan=0.0)
        return out


def check_scaling(scaling: Any, names: Sequence[str] | None = None) -> dict[str, Any] | Any:
    """``scaling`` checked: None, one spec for every objective, or a mapping objective name ->
    spec, where a spec is one of ``SCALINGS`` or a ``(low, high)`` pair with low < high. With
    ``names``, a mapping's keys must be among them. Returns it unchanged; ValueError otherwise."""
    if scaling is None:
        return None
    specs = scaling.items() if isinstance(scaling, Mapping) else [("(all)", scaling)]
    for name, spec in specs:
        _check_spec(name, spec)
    if isinstance(scaling, Mapping) and names is not None:
        unknown = sorted(set(scaling) - set(names))
        if unknown:
            raise ValueError(f"scaling names unknown objective(s) {unknown}; the objectives are {list(names)}")
    return scaling


def _check_spec(name: str, spec: Any) -> None:
    if isinstance(spec, str):
        if spec not in SCALINGS:
            raise ValueError(f"scaling of {name!r} must be one of {SCALINGS} or (low, high), got {spec!r}")
        return
    try:
        low, high = (float(x) for x in spec)
    except (TypeError, ValueError):
        raise ValueError(f"scaling of {name!r} must be one of {SCALINGS} or (low, high), got {spec!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"scaling of {name!r}: (low, high) must be finite with low < high, got {spec!r}")


def _spec_of(scaling: Any, name: str) -> Any:
    if scaling is None:
        return "none"
    if isinstance(scaling, Mapping):
        return scaling.get(name, "none")
    return scaling


def _scale(values: np.ndarray, spec: Any) -> np.ndarray:
    """One objective's finite values (n,) under ``spec``."""
    if isinstance(spec, str):
        if spec == "none":
            return values
        if spec == "sigmoid":
            return 1.0 / (1.0 + np.exp(-np.clip(values, -500, 500)))
        low, high = (values.min(), values.max()) if values.size else (0.0, 0.0)
        return (values - low) / (high - low) if high > low else np.zeros_like(values)
    low, high = (float(x) for x in spec)
    return np.clip((values - low) / (high - low), 0.0, 1.0)


class _ExtraLog:
    """``log_extra`` for the answer-level call: values logged per answer reach the trainer's
    ``log_extra`` grouped per completion (one list each), so its table keeps one row per completion."""

    def __init__(self, log_extra: Callable[[str, list], None], owners: np.ndarray, num: int) -> None:
        self.log_extra, self.owners, self.num = log_extra, owners, num
        self.pending: dict[str, list[Any]] = {}

    def __call__(self, column: str, values: list) -> None:
        self.pending.setdefault(column, []).extend(values)

    def flush(self) -> None:
        for column, values in self.pending.items():
            if len(values) != self.owners.size:  # not one per answer: passed on as it is
                self.log_extra(column, values)
                continue
            grouped: list[list[Any]] = [[] for _ in range(self.num)]
            for owner, value in zip(self.owners, values, strict=True):
                grouped[int(owner)].append(value)
            self.log_extra(column, grouped)


def score_every_answer(reward_funcs: Sequence[Any], prompts: Sequence[Any], completions: Sequence[Any],
                  answers: int = 3, *, reward_names: Sequence[Any] | None = None,
                  reward_processing_classes: Any = None, call: Callable[..., Any] | None = None,
                  tag: str | None = CHAIN_TAG, failures: RewardFailures | None = None,
                  untagged_fallback: bool = False, completion_ids: Sequence[Any] | None = None,
                  hooks: Mapping[str, Any] | None = None, tokenizer: Any = None,
                  **columns: Sequence[Any]) -> ScoredAnswers:
    """Split the B chains into their non-blank answers and score them all: the first half of
    ``score_chains`` (``finish_chains`` is the second). ``prompts`` are the single-answer prompts
    the functions see. ``call(prompts, completions, columns)`` evaluates the answer-level functions
    on the flat answers (default ``call_reward_funcs``) and returns one (P,) or (P, H) array per
    function; chain-level functions (``is_chain_level``) are evaluated once on the B completions
    (with ``completion_ids``), and with any of them ``call`` also gets ``funcs=`` (the functions of
    that call). ``columns`` (B,) are repeated per answer; ``hooks`` (``TRL_HOOKS``) passed as they
    are (``environments``, one per completion: each answer gets its completion's). ``tag=None``
    (with ``answers=1``) skips the chain format: each completion, as it is, is its one answer (what
    ``GRPOTrainer`` scores). ``untagged_fallback``: a completion with no answer in its tags counts
    as one answer, its whole (stripped) text. ``failures`` and ``tokenizer`` (the tokens of what has
    no ``completion_ids``): the default call's (``call_reward_funcs``)."""
    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if not funcs:
        raise ValueError("reward_funcs is empty: give at least one reward function")
    num = len(completions)
    if len(prompts) != num:
        raise ValueError(f"{len(prompts)} prompts for {num} completions")
    for key, values in columns.items():
        if values is None or len(values) != num:
            raise ValueError(f"column {key!r} has {0 if values is None else len(values)} values for {num} completions")
    if completion_ids is not None and len(completion_ids) != num:
        raise ValueError(f"{len(completion_ids)} completion_ids for {num} completions")
    if tag is None and answers != 1:
        raise ValueError(f"tag=None scores each whole completion as its one answer; it needs answers=1, got {answers}")
    owners: list[int] = []
    positions: list[int] = []
    flat_completions: list[Any] = []
    tagged = np.zeros(num, dtype=np.int64)
    for b, completion in enumerate(completions):
        text = completion_text(completion)
        if tag is None:  # the completion is the answer, as GRPOTrainer scores it
            owners.append(b)
            positions.append(0)
            flat_completions.append(completion)
            tagged[b] = int(bool(text.strip()))
            continue
        found = [(slot, answer) for slot, answer in enumerate(parse_answers(text, answers, tag=tag)) if answer]
        tagged[b] = len(found)
        if not found and untagged_fallback and text.strip():
            found = [(0, text.strip())]  # no answer in tags: the whole completion is one answer
        owners.extend([b] * len(found))
        positions.extend(slot for slot, _ in found)
        flat_completions.extend(single_answer(completion, answer) for _, answer in found)
    owner_array = np.asarray(owners, dtype=np.int64)
    chain_funcs = [i for i, f in enumerate(funcs) if is_chain_level(f)]
    answer_funcs = [i for i in range(len(funcs)) if i not in chain_funcs]
    passed = dict(hooks or {})
    environments = passed.get("environments")
    per_answer = dict(passed)
    if isinstance(environments, list | tuple) and len(environments) == num:  # each answer: its completion's
        per_answer["environments"] = [environments[b] for b in owners]
    extra = _ExtraLog(passed["log_extra"], owner_array, num) if tag is not None and passed.get("log_extra") else None
    if call is None:
        every = funcs
        classes = reward_processing_classes
        if isinstance(classes, list | tuple) and len(classes) != len(every):
            raise ValueError(f"reward_processing_classes has {len(classes)} entries for {len(every)} reward functions")

        def call(p: Sequence[Any], c: Sequence[Any], cols: Mapping[str, Sequence[Any]],
                 funcs: Sequence[Any] = every) -> list[np.ndarray]:
            mine = [classes[every.index(f)] for f in funcs] if isinstance(classes, list | tuple) else classes
            return call_reward_funcs(funcs, p, c, cols, reward_processing_classes=mine, failures=failures,
                                     tokenizer=tokenizer)

    def evaluate(indices: list[int], p: Sequence[Any], c: Sequence[Any], cols: dict[str, Any]) -> list[np.ndarray]:
        subset = {"funcs": [funcs[i] for i in indices]} if chain_funcs else {}
        outputs = [np.asarray(out, dtype=np.float64) for out in call(p, c, cols, **subset)]
        if len(outputs) != len(indices):
            raise ValueError(f"call returned {len(outputs)} outputs for {len(indices)} reward functions")
        return outputs

    outputs: list[np.ndarray | None] = [None] * len(funcs)
    if answer_funcs and flat_completions:
        cols = {key: [values[b] for b in owners] for key, values in columns.items()}
        if tag is None and completion_ids is not None:
            cols["completion_ids"] = list(completion_ids)
        cols.update(per_answer, **({"log_extra": extra} if extra is not None else {}))
        for i, out in zip(answer_funcs, evaluate(answer_funcs, [prompts[b] for b in owners], flat_completions,
                                                 cols), strict=True):
            outputs[i] = out.reshape(len(flat_completions), -1) if out.ndim > 1 else out
        if extra is not None:
            extra.flush()
    if chain_funcs and num:
        cols = {key: list(values) for key, values in columns.items()}
        if completion_ids is not None:
            cols["completion_ids"] = list(completion_ids)
        cols.update(passed)
        for i, out in zip(chain_funcs, evaluate(chain_funcs, list(prompts), list(completions), cols), strict=True):
            outputs[i] = out
    widths = [len(_declared_heads(f) or (None,)) if out is None else 1 if out.ndim == 1 else out.shape[1]
              for f, out in zip(funcs, outputs, strict=True)]
    names = objective_names(funcs, reward_names, widths)
    values = np.full((len(owners), len(names)), np.nan)
    chain_values = np.full((num, len(names)), np.nan)
    level = np.zeros(len(names), dtype=bool)
    start = 0
    for i, (out, width) in enumerate(zip(outputs, widths, strict=True)):
        target = chain_values if i in chain_funcs else values
        level[start:start + width] = i in chain_funcs
        if out is not None:
            target[:, start:start + width] = out.reshape(target.shape[0], width)
        start += width
    return ScoredAnswers(owner_array, values, names, num, tagged, level, chain_values,
                         np.asarray(positions, dtype=np.int64))


def finish_chains(scored: ScoredAnswers, answers: int, group_ids: Sequence[Hashable], *,
                  scaling: Any = None) -> ChainRewards:
    """The ``None`` rule, scaling, dedup and padding of ``scored``: the chains' matrices.

    ``group_ids`` (B,) says which chains share a prompt: an objective that is NaN for every value
    a group has (its answers; a chain-level objective: its completions) is dropped from the
    group's matrices; other NaN become 0 after scaling. Each objective is scaled by its ``scaling``
    spec over the batch's values (answers, or completions for a chain-level one); one still
    outside [0, 1] without a scaling warns once (``RewardScaleWarning``). A failed call
    (``FAILED_CALL``) takes the objective's worst value after scaling, never a better one than a
    real call's: 0 (the low end of a range, of the sigmoid, of minmax; without scaling, 0 or the
    batch's lowest real value when that is below 0), and it never widens minmax's range. Each chain is then
    finished by ``vpo.chains.finish_chain`` (rows with equal vectors kept once, the first; rows of
    an absent answer up to ``answers``: zeros, with the chain's value in its chain-level
    objectives) and its metrics are ``vpo.step_metrics.chain_metrics``' (in ``stats``, without
    the ``vpo/`` prefix).
    """
    from vpo.step_metrics import chain_metrics

    names, values, owners = scored.names, scored.values, scored.owners
    num, dim = scored.num_chains, len(names)
    level, chain_values = scored.chain_level, scored.chain_values
    check_scaling(scaling, names)
    if len(group_ids) != num:
        raise ValueError(f"{len(group_ids)} group ids for {num} completions")
    labels: dict[Hashable, int] = {}
    chain_group = np.array([labels.setdefault(g, len(labels)) for g in group_ids], dtype=np.int64)
    answer_group = chain_group[owners] if owners.size else np.zeros(0, dtype=np.int64)
    groups = len(labels)
    # None rule: group g drops objective j when every value it has there is NaN (a group with no value keeps it)
    missing, chain_missing = np.isnan(values), np.isnan(chain_values)
    dropped = np.zeros((groups, dim), dtype=bool)
    for j in range(dim):
        group_of, absent = (chain_group, chain_missing[:, j]) if level[j] else (answer_group, missing[:, j])
        counts = np.bincount(group_of, minlength=groups)
        dropped[:, j] = (counts > 0) & (np.bincount(group_of, weights=absent, minlength=groups) == counts)

    vectors = np.full(values.shape, np.nan)
    chain_scaled = np.zeros((num, dim))
    stats: dict[str, float] = {}
    for j, name in enumerate(names):
        group_of, raw_values, absent = ((chain_group, chain_values[:, j], chain_missing[:, j]) if level[j]
                                        else (answer_group, values[:, j], missing[:, j]))
        usable = ~dropped[group_of, j] if group_of.size else np.zeros(0, dtype=bool)
        failed = raw_values == FAILED_CALL
        finite = usable & ~absent & ~failed
        spec = _spec_of(scaling, name)
        raw = raw_values[finite]
        if spec == "none" and raw.size and (raw.min() < 0.0 or raw.max() > 1.0):
            warnings.warn(
                f"objective {name!r} has values outside [0, 1] and no scaling: E_w[max_i w . r_i] assumes rewards in "
                f"[0, 1] (zero padding, the weights' balance); set scaling={{{name!r}: 'sigmoid' | 'minmax' | "
                "(low, high)} (docs/own_rewards.md)", RewardScaleWarning, stacklevel=3)
        column = np.zeros(raw_values.shape[0])
        column[finite] = _scale(raw, spec)
        column[usable & failed] = min(0.0, float(column[finite].min())) if spec == "none" and raw.size else 0.0
        column[~usable] = np.nan
        if level[j]:
            chain_scaled[:, j] = np.nan_to_num(column)
            vectors[:, j] = column[owners] if owners.size else column[:0]
        else:
            vectors[:, j] = column
        stats[f"none/{name}"] = float((usable & absent).sum())
        stats[f"dropped/{name}"] = float(dropped[:, j].sum())

    matrices, kept = [], []
    order = np.argsort(owners, kind="stable")
    starts = np.searchsorted(owners[order], np.arange(num + 1))
    duplicates = np.zeros(num)
    best = np.full((num, dim), np.nan)
    for b in range(num):
        keep = np.flatnonzero(~dropped[chain_group[b]]) if dim else np.zeros(0, dtype=np.int64)
        rows = vectors[order[starts[b]:starts[b + 1]]][:, keep]
        matrix, duplicates[b] = finish_chain(rows, answers, fill=chain_scaled[b, keep])
        best[b, keep] = matrix.max(axis=0) if matrix.shape[0] else 0.0
        matrices.append(matrix)
        kept.append(keep)
    counts = np.bincount(owners, minlength=num)
    metrics = chain_metrics(answers=scored.tagged, parsed=counts, duplicates=duplicates, best=best, names=names,
                            parse_rate=True)
    stats.update({key[len("vpo/"):]: value for key, value in metrics.items()})
    stats["unparseable"] = float(np.mean(counts == 0)) if num else 0.0
    complete = vectors[~np.isnan(vectors).any(axis=1)] if dim else vectors
    diagnostics = objective_diagnostics(complete)
    stats["effective_dim"] = diagnostics["effective_dim"]
    stats["mean_abs_correlation"] = diagnostics["mean_abs_correlation"]
    return ChainRewards(matrices, names, kept, stats, vectors, owners, diagnostics["correlation"], scored.positions,
                        chain_scaled, duplicates)


_DEFAULT_TAG = object()
"""``score_chains``' default tag: the chain tag for m > 1, the whole completion at m = 1."""


def score_chains(reward_funcs: Any, prompts: Sequence[Any], completions: Sequence[Any], answers: int = 3, *,
                 reward_names: Sequence[Any] | None = None, scaling: Any = None,
                 group_ids: Sequence[Hashable] | None = None, reward_processing_classes: Any = None,
                 call: Callable[..., Any] | None = None, tag: Any = _DEFAULT_TAG,
                 failures: RewardFailures | None = None, untagged_fallback: bool = False,
                 completion_ids: Sequence[Any] | None = None, tokenizer: Any = None,
                 **columns: Sequence[Any]) -> ChainRewards:
    """The (M, D) reward matrix of each of B m-answer ``completions``, scored by ``reward_funcs``.

    ``prompts`` (B,) are the single-answer prompts the functions see; ``columns`` are dataset
    columns (B,) each, repeated per answer. ``group_ids`` (B,) defaults to ``group_keys`` (the
    ``example_id`` column, else the prompt). ``scaling``: see ``SCALINGS`` (None: no scaling).
    ``call``, ``failures``, ``untagged_fallback``, ``completion_ids`` (the completions' tokens,
    for chain-level functions that read them) and ``tokenizer`` (tokens where none are given): see
    ``score_every_answer``. ``tag``: the chains' numbered tag; by default ``CHAIN_TAG`` for m > 1, and at
    m = 1 the whole completion is the one answer, as ``GRPOTrainer`` and ``VPOTrainer`` score it
    (pass ``tag=CHAIN_TAG`` to read a tagged single answer). Length budgets are scaled for chains of
    ``answers`` (``at_answers``), as the trainer scales them. Raises ValueError for misaligned
    inputs or bad options.
    """
    check_scaling(scaling)
    if isinstance(answers, bool) or not isinstance(answers, int) or answers < 1:
        raise ValueError(f"answers must be a positive integer, got {answers!r}")
    if tag is _DEFAULT_TAG:
        tag = CHAIN_TAG if answers > 1 else None
    funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
    if call is None:  # a caller's own call loop holds the functions it was given
        funcs, _ = at_answers(funcs, answers)
    scored = score_every_answer(funcs, prompts, completions, answers, reward_names=reward_names,
                           reward_processing_classes=reward_processing_classes, call=call, tag=tag,
                           failures=failures, untagged_fallback=untagged_fallback, completion_ids=completion_ids,
                           tokenizer=tokenizer, **columns)
    groups = group_keys(prompts, columns) if group_ids is None else list(group_ids)
    return finish_chains(scored, answers, groups, scaling=scaling)


# ------------------------------------------------------------------------------------------------
# diagnostics: are the objectives worth a vector?
# ------------------------------------------------------------------------------------------------
def _finite_rows(vectors: Any) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"vectors must be (P, D), got shape {arr.shape}")
    return arr[np.isfinite(arr).all(axis=1)]


def effective_dimension(vectors: Any) -> float:
    """Participation ratio (sum lambda)^2 / sum lambda^2 of the eigenvalues of the (D, D)
    covariance of ``vectors`` (P, D): 1 when the objectives are collinear, D when they are
    independent with equal variance. Rows with NaN are left out; NaN when fewer than 2 rows remain
    or nothing varies."""
    rows = _finite_rows(vectors)
    if rows.shape[0] < 2 or rows.shape[1] == 0:
        return float("nan")
    cov = np.atleast_2d(np.cov(rows, rowvar=False, ddof=0))
    eig = np.clip(np.linalg.eigvalsh(cov), 0.0, None)
    total = float(eig.sum())
    if total <= 1e-12:
        return float("nan")
    return total ** 2 / float((eig ** 2).sum())


def objective_diagnostics(vectors: Any) -> dict[str, Any]:
    """Correlation (D, D) of the objectives over ``vectors`` (P, D) (a constant objective
    correlates 0 with the others), their ``effective_dim`` and ``mean_abs_correlation`` (mean
    |correlation| off the diagonal; NaN for D < 2). Rows with NaN are left out."""
    rows = _finite_rows(vectors)
    dim = rows.shape[1]
    corr = np.eye(dim)
    if rows.shape[0] >= 2 and dim:
        centred = rows - rows.mean(axis=0)
        std = np.sqrt((centred ** 2).mean(axis=0))
        varying = std > 1e-12
        scaled = np.zeros_like(centred)
        scaled[:, varying] = centred[:, varying] / std[varying]
        corr = (scaled.T @ scaled) / rows.shape[0]
        np.fill_diagonal(corr, 1.0)
        corr = np.clip(corr, -1.0, 1.0)
    off = corr[~np.eye(dim, dtype=bool)]
    return {"correlation": corr, "effective_dim": effective_dimension(rows),
            "mean_abs_correlation": float(np.abs(off).mean()) if off.size else float("nan")}


def __getattr__(name: str) -> Any:
    """``score_answers``: the earlier name of ``score_every_answer`` (dated deprecation)."""
    if name == "score_answers":
        from vpo.deprecation import deprecated

        return deprecated(score_every_answer, f"{__name__}.score_answers", f"{__name__}.score_every_answer")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
