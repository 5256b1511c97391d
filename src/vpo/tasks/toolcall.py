"""Tool calling (ToolRL data, BFCL-style data): a 4-objective reward (docs/algorithm.md §4).

Usage::

    from vpo.tasks import get_task
    task = get_task("toolcall")                       # think_prefilled=False, block="all"
    first = get_task("toolcall", block="first")       # the release: only the first <tool_call> block
    example = task.examples("test", 1)[0]             # shipped ToolRL-style fixture (tiny sample)
    bfcl = task.examples("test", source="BFCL_v4_simple_python.json")  # + possible_answer/<same name>
    task.score('<think>..</think>\\n<tool_call>\\n{"name": "f", "parameters": {"x": 1}}\\n</tool_call>',
               example)                               # (4,) vector
    task.messages(example, m=3)                       # [system: tools, user: dialogue + m-answer block]

Objectives (D = 4, each in [0, 1]):

* ``format``: 1 when a closed ``<think>...</think>`` is present and the tool-call section has
  the gold structure: the gold has calls -> at least one ``<tool_call>`` block, every block
  read well-formed (JSON objects with a string ``name``) and at least one call; the gold has
  no calls -> no non-empty ``<tool_call>`` block among those read.
* ``tool_name``: multiset F1 of the called names against the gold's. Names compare after
  normalisation (lowercase, ASCII punctuation deleted, whitespace collapsed: ``get-weather``
  = ``get_weather`` = ``GetWeather``), as in the authors' release.
* ``arg_key``: mean over aligned call pairs of the F1 of their argument-key sets.
* ``arg_value``: mean over aligned call pairs of (sum over the gold call's keys of the value
  match) / (number of gold keys); a gold call without arguments scores 1 when aligned. Value
  match: strings -> SQuAD token F1; numbers -> exact (``"5"`` matches 5); booleans -> exact
  (``"true"`` matches True); lists -> multiset F1 of the items; dicts -> key-set F1; null -> exact.
  A predicted boolean never matches a non-boolean gold value (the release's
  ``bool(gold) == bool(pred)`` lets ``true`` match any non-empty value; not reproduced).

Alignment is greedy: each gold call, in order, takes the unused predicted call with the best
score (100 if the names match and are not empty, plus the number of shared argument keys);
ties go to the prediction with the better arg_value, then to the earlier one, so parallel
calls align whatever their order.
Gold calls left without a prediction, and predictions left without a gold call, are pairs
scoring 0, so the means run over max(#gold, #predicted) pairs. With no gold calls and no
predicted calls, the three call scores are 1 (docs/algorithm.md §4), whatever else the text holds:
on a prompt whose gold calls no tool, an empty or garbage answer scores ``[0, 1, 1, 1]``
(format still needs ``<think>``), as in the release's reward. Inside an m-answer chain a
missing or blank ``<response_i>`` block is not an answer: ``Task.score_chain`` drops it and
the chain is zero-padded, so it scores a zero row there (the release's ``score_multi`` does
the same); a non-blank block without calls scores as above. The fixed scalar is the mean.

Which ``<tool_call>`` blocks are read (option ``block``):

* ``"all"`` (default): every block. Qwen2.5/Qwen3 chat templates write one ``<tool_call>``
  block per call, so parallel calls come as several blocks; reading only the first would
  score every call after it as missing. ToolRL's own format (one block, one JSON object per
  line) reads the same either way.
* ``"first"``: only the first block, as the authors' release reads it (a regex search), for
  reproducing its rewards exactly. ``<think>`` and ``<response>`` are found anywhere.

Calls are read from a ``<tool_call>`` block: one JSON object per line (ToolRL), objects
separated by commas, or a JSON array; ``parameters`` or ``arguments`` (also a JSON string)
hold the arguments. ``think_prefilled=True`` counts ``<think>`` as present for chat templates
that put it in the prompt (Qwen3 without thinking strips ``<think></think>`` from the
generation; the release prepends it before scoring), so there an empty answer to a no-call
prompt scores ``[1, 1, 1, 1]``.

m-answer chains APPEND an instruction block to the user turn (the ToolRL system prompt with
the tools stays intact); each answer sits in ``<response_i>`` and holds the usual
``<think>``, optional ``<tool_call>`` and ``<response>``. Duplicates: identical vectors.

Example schema (what ``validate`` checks)::

    {"id": "toolrl-3",                        # str or int
     "instruction": "...tools and output format...",   # str: the system prompt
     "input": "**Dialogue Records History**\\n<user> ... </user>",   # str: the user turn
     "gold_calls": [{"name": "get_weather", "parameters": {"city": "Oslo"}}],  # may be []
     "gold_response": "..." or null}          # optional, not scored

Loaders convert three row layouts to it (``from_toolrl_row`` / ``from_bfcl_row``):

* ToolRL raw: ``{instruction, input, output}``; ``output`` holds ``<think>``, then
  ``<tool_call>`` (one JSON object per line) and/or ``<response>``.
* ToolRL processed parquet: ``{prompt: [system, user], reward_model: {ground_truth: output}}``.
* BFCL: ``{id, question: [[{role, content}]], function: [{name, description, parameters}]}``
  with the answer ``{id, ground_truth: [{func_name: {param: [acceptable values]}}]}`` inline
  or in ``possible_answer/<same file name>`` next to the question file (bfcl-eval's layout).
  The gold call takes each parameter's FIRST acceptable value; a first value of ``""`` (BFCL:
  "may be omitted") leaves the parameter out. ``irrelevance`` rows have no gold calls.

The default source is the shipped fixture ``fixtures/toolrl.json`` (6 invented ToolRL-style
rows, used for every split); ``fixtures/bfcl.json`` is a BFCL-layout sample.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule, rewrite_prompt
from vpo.tasks import Example, register_task
from vpo.tasks.base import FileTask
from vpo.tasks.io import load_json_rows, need, resolve_path
from vpo.tasks.text import all_tags, check_option, first_tag, multiset_f1, normalize_answer, set_f1, token_f1

__all__ = ["BLOCK_CHOICES", "FIXTURE", "BFCL_FIXTURE", "ToolCallTask", "from_bfcl_row", "from_toolrl_row",
           "normalize_name", "parse_output", "parse_tool_calls", "score_calls", "value_match"]

FIXTURE = Path(__file__).with_name("fixtures") / "toolrl.json"
BFCL_FIXTURE = Path(__file__).with_name("fixtures") / "bfcl.json"

_MULTI_APPEND = (
    "Additional instruction, changing the output format above: make {m} genuinely different "
    "attempts (different tools, different arguments, or a different decision about calling a "
    "tool at all), not rewordings of one attempt. Wrap them in numbered tags "
    "<{tag}_1>...</{tag}_1> through <{tag}_{m}>...</{tag}_{m}>. Inside each attempt use the "
    "output format described above: "
    "<think>...</think>, then an optional <tool_call>...</tool_call> and/or "
    "<response>...</response>. Close every tag."
)

_BFCL_SYSTEM = (
    "You are an assistant that can call tools to help the user. The tools available are:\n"
    "{tools}\n\n"
    "Output format: first your reasoning inside <think>...</think>. Then, if tools should be "
    "called, put the calls inside <tool_call>...</tool_call>, one JSON object per line, each "
    'shaped {{"name": "tool name", "parameters": {{"argument": value}}}}; and/or write a reply '
    "to the user inside <response>...</response>. If no tool fits the request, call none."
)

_JSON = json.JSONDecoder()
_SKIP = " \t\r\n,"
_PUNCT = str.maketrans("", "", string.punctuation)
BLOCK_CHOICES = ("all", "first")
"""Which ``<tool_call>`` blocks an answer's calls are read from (see the module docstring)."""


# ----- parsing model text --------------------------------------------------------------
def _as_call(obj: Any) -> dict[str, Any] | None:
    """A call dict from a decoded JSON object, or None when it is not a call."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    params = obj.get("parameters", obj.get("arguments", {}))
    if isinstance(params, str):
        try:
            params = json.loads(params)
        except (ValueError, RecursionError):
            params = None
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return None
    return {"name": obj["name"], "parameters": params}


def parse_tool_calls(block: str) -> tuple[list[dict[str, Any]], bool]:
    """Calls in the content of one ``<tool_call>`` block, and whether all of it was well formed.

    Accepts JSON objects one a line, separated by commas or whitespace, or JSON arrays of
    them. Undecodable stretches are skipped to the next line. Never raises; linear in the
    block length (each failed decode resumes after the error position's line).
    """
    calls: list[dict[str, Any]] = []
    ok = True
    i, n = 0, len(block)
    while i < n:
        while i < n and block[i] in _SKIP:
            i += 1
        if i >= n:
            break
        try:
            obj, end = _JSON.raw_decode(block, i)
        except json.JSONDecodeError as err:
            ok = False
            nxt = block.find("\n", max(err.pos, i))
            if nxt < 0:
                break
            i = nxt + 1
            continue
        except (ValueError, RecursionError):  # huge int literals, absurd nesting
            ok = False
            break
        i = end
        for item in obj if isinstance(obj, list) else [obj]:
            call = _as_call(item)
            if call is None:
                ok = False
            else:
                calls.append(call)
    return calls, ok


def normalize_name(name: Any) -> str:
    """Tool name for comparison: lowercase, ASCII punctuation deleted, whitespace collapsed.

    The release's normalisation: ``get-weather``, ``get_weather`` and ``Get.Weather`` are one
    name (models swap separators; no tool set tells two tools apart by them alone).
    """
    return " ".join(str(name).lower().translate(_PUNCT).split())


_norm_name = normalize_name


def _canonical_item(value: Any) -> str:
    """Hashable canonical form of a list item for multiset F1."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _number_key(value)
    if isinstance(value, str):
        return normalize_answer(value)
    if value is None:
        return "null"
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (ValueError, RecursionError, TypeError):
        return repr(type(value))


def _number_key(value: int | float) -> str:
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # more digits than int->str allows
            return f"int:{hash(value)}"
    if math.isfinite(value) and value.is_integer():
        return str(int(value))
    return repr(value)


def _to_number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip().replace(",", "")) if len(value) < 64 else None
        except ValueError:
            return None
    return None


def value_match(pred: Any, gold: Any) -> float:
    """How well a predicted argument value matches the gold one, in [0, 1] (see module doc)."""
    if isinstance(gold, bool):
        if isinstance(pred, bool):
            return float(pred == gold)
        if isinstance(pred, str):
            return float(pred.strip().lower() == ("true" if gold else "false"))
        return 0.0
    if isinstance(gold, int | float):
        number = _to_number(pred)
        return float(number is not None and number == gold)
    if isinstance(gold, str):
        if isinstance(pred, str):
            return token_f1(pred, gold)
        if isinstance(pred, int | float | bool):
            return token_f1(_canonical_item(pred), gold)
        return 0.0
    if isinstance(gold, list):
        items = pred if isinstance(pred, list) else [pred]
        return multiset_f1([_canonical_item(x) for x in items], [_canonical_item(x) for x in gold])
    if isinstance(gold, dict):
        return set_f1(pred.keys(), gold.keys()) if isinstance(pred, dict) else 0.0
    if gold is None:
        return float(pred is None)
    return float(_canonical_item(pred) == _canonical_item(gold))


def _value_score(pred_params: Mapping[str, Any], gold_params: Mapping[str, Any]) -> float:
    """Mean value match over the gold keys (missing keys 0); 1.0 for a gold call without keys."""
    if not gold_params:
        return 1.0
    return sum(value_match(pred_params[k], v) for k, v in gold_params.items() if k in pred_params) / len(gold_params)


def _align(pred: Sequence[Mapping[str, Any]], gold: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """For each gold call, the index of its greedily aligned predicted call (or None).

    Score = 100 * (names match) + number of shared keys; ties go to the better argument
    values, then to the earlier prediction (so parallel calls align regardless of order).
    """
    used = [False] * len(pred)
    pred_names = [_norm_name(p["name"]) for p in pred]
    pred_keys = [set(p["parameters"]) for p in pred]
    out: list[int | None] = []
    for g in gold:
        g_name, g_keys = _norm_name(g["name"]), set(g["parameters"])
        # an empty name (e.g. "" or "__") matches nothing, as in the release
        scores = {j: (100 if g_name and pred_names[j] == g_name else 0) + len(pred_keys[j] & g_keys)
                  for j in range(len(pred)) if not used[j]}
        if not scores:
            out.append(None)
            continue
        top = max(scores.values())
        tied = [j for j, s in scores.items() if s == top]
        best = tied[0] if len(tied) == 1 else max(
            tied, key=lambda j: (_value_score(pred[j]["parameters"], g["parameters"]), -j))
        used[best] = True
        out.append(best)
    return out


def score_calls(pred: Sequence[Mapping[str, Any]], gold: Sequence[Mapping[str, Any]]) -> tuple[float, float, float]:
    """(tool_name, arg_key, arg_value) of predicted calls against gold calls (see module doc)."""
    if not pred and not gold:
        return 1.0, 1.0, 1.0
    name_f1 = multiset_f1([_norm_name(c["name"]) for c in pred], [_norm_name(c["name"]) for c in gold])
    pairs = max(len(pred), len(gold))
    key_sum = value_sum = 0.0
    for g, j in zip(gold, _align(pred, gold), strict=True):
        if j is None:
            continue
        gp, pp = g["parameters"], pred[j]["parameters"]
        key_sum += set_f1(pp.keys(), gp.keys())
        value_sum += _value_score(pp, gp)
    return name_f1, key_sum / pairs, value_sum / pairs


def parse_output(text: str, block: str = "all") -> dict[str, Any]:
    """Structure of one answer: think present, tool-call blocks read, calls, well-formedness.

    ``block="all"`` reads every ``<tool_call>`` block, ``"first"`` only the first (the
    release's regex search: from the first opening tag to the next closing tag).
    """
    if not isinstance(text, str):
        text = ""
    if block == "first":
        found = first_tag(text, "tool_call")
        blocks = [] if found is None else [found]
    else:
        blocks = all_tags(text, "tool_call")
    calls: list[dict[str, Any]] = []
    well_formed = bool(blocks)
    for block in blocks:
        found, ok = parse_tool_calls(block)
        calls.extend(found)
        well_formed = well_formed and ok
    return {"think": bool(all_tags(text, "think")) if "</think>" in text else False,
            "blocks": blocks, "calls": calls, "well_formed": well_formed,
            "response": (all_tags(text, "response") or [None])[-1]}


# ----- loading data --------------------------------------------------------------------
def _gold_from_output(output: str, task: str, row: int | None) -> tuple[list[dict[str, Any]], str | None]:
    parsed = parse_output(output)
    if parsed["blocks"] and not (parsed["well_formed"] and parsed["calls"]):
        raise ValueError(f"{task}: row {row}: field 'output' has a <tool_call> block that is not "
                         "one JSON call object ({\"name\": ..., \"parameters\": {...}}) per line")
    return parsed["calls"], parsed["response"]


def from_toolrl_row(row: Any, index: int | None = None) -> Any:
    """Convert a ToolRL raw row ``{instruction, input, output}`` or processed row ``{prompt,
    reward_model}`` to the example schema; other rows are returned unchanged."""
    task = "toolcall"
    if not isinstance(row, Mapping):
        return row
    if "output" in row and "gold_calls" not in row:
        instruction = need(row, "instruction", str, task, index)
        user = need(row, "input", str, task, index)
        output = need(row, "output", str, task, index)
    elif "reward_model" in row and "prompt" in row:
        messages = need(row, "prompt", (list, tuple), task, index)
        reward = need(row, "reward_model", Mapping, task, index)
        output = need(reward, "ground_truth", str, task, index, "reward_model")
        system = [m.get("content", "") for m in messages if isinstance(m, Mapping) and m.get("role") == "system"]
        users = [m.get("content", "") for m in messages if isinstance(m, Mapping) and m.get("role") != "system"]
        if not users:
            raise ValueError(f"{task}: row {index}: field 'prompt' has no user message")
        instruction, user = "\n\n".join(system), "\n\n".join(users)
    else:
        return row
    calls, response = _gold_from_output(output, task, index)
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    ident = row.get("id", extra.get("index", index))
    return {"id": ident if isinstance(ident, str | int) else str(ident), "instruction": instruction,
            "input": user, "gold_calls": calls, "gold_response": response}


def _bfcl_tools(functions: Sequence[Any], index: int | None) -> str:
    lines = []
    for k, fn in enumerate(functions, start=1):
        name = need(fn, "name", str, "toolcall", index, f"function[{k - 1}]")
        lines.append(f"{k}. Name: {name}\nDescription: {fn.get('description', '')}\n"
                     f"Parameters: {json.dumps(fn.get('parameters', {}))}")
    return "\n".join(lines)


def from_bfcl_row(row: Any, index: int | None = None, answer: Mapping[str, Any] | None = None) -> Any:
    """Convert a BFCL question row (plus its possible-answer row, or ``ground_truth`` inline)
    to the example schema; rows without ``function`` are returned unchanged."""
    task = "toolcall"
    if not isinstance(row, Mapping) or "function" not in row:
        return row
    ident = need(row, "id", str, task, index)
    functions = need(row, "function", list, task, index)
    turns = need(row, "question", list, task, index)
    messages: list[Any] = []
    for turn in turns:
        messages.extend(turn if isinstance(turn, list) else [turn])
    dialogue = []
    for k, message in enumerate(messages):
        role = need(message, "role", str, task, index, f"question[{k}]")
        content = need(message, "content", str, task, index, f"question[{k}]")
        dialogue.append(f"<{role}> {content} </{role}>")
    source = answer if answer is not None else row
    if "ground_truth" not in source:
        if "irrelevance" not in ident:
            raise ValueError(f"{task}: row {index}: missing field 'ground_truth' (no possible answer "
                             f"for id {ident!r})")
        truth: list[Any] = []
    else:
        truth = need(source, "ground_truth", list, task, index)
    calls = []
    for k, entry in enumerate(truth):
        if not isinstance(entry, Mapping) or len(entry) != 1:
            raise ValueError(f"{task}: row {index}: field 'ground_truth[{k}]' must map one function "
                             "name to its parameters")
        (name, params), = entry.items()
        if not isinstance(params, Mapping):
            raise ValueError(f"{task}: row {index}: field 'ground_truth[{k}].{name}' must be a mapping")
        gold_params = {}
        for param, values in params.items():
            if not isinstance(values, list) or not values:
                raise ValueError(f"{task}: row {index}: field 'ground_truth[{k}].{name}.{param}' must "
                                 "be a non-empty list of acceptable values")
            if values[0] != "":
                gold_params[param] = values[0]
        calls.append({"name": name, "parameters": gold_params})
    return {"id": ident, "instruction": _BFCL_SYSTEM.format(tools=_bfcl_tools(functions, index)),
            "input": "**Dialogue Records History**\n" + "\n".join(dialogue),
            "gold_calls": calls, "gold_response": None}


def _bfcl_answers(path: Path | None) -> dict[str, Mapping[str, Any]] | None:
    """Possible answers by id from ``possible_answer/<name>`` next to a BFCL question file."""
    if path is None:
        return None
    answer_file = path.parent / "possible_answer" / path.name
    if not answer_file.is_file():
        return None
    return {str(a.get("id")): a for a in load_json_rows(answer_file) if isinstance(a, Mapping)}


# ----- the task -------------------------------------------------------------------------
@register_task("toolcall")
class ToolCallTask(FileTask):
    """Tool calling scored as [format, tool_name, arg_key, arg_value]."""

    objectives = ("format", "tool_name", "arg_key", "arg_value")
    rewrite_rule = RewriteRule("toolcall", template=_MULTI_APPEND, pattern=None, tag="response")
    ability = "tool_use"
    fixture = FIXTURE

    def __init__(self, think_prefilled: bool = False, block: str = "all") -> None:
        self.think_prefilled = bool(think_prefilled)
        self.block = check_option("toolcall", "block", block, BLOCK_CHOICES)

    def __repr__(self) -> str:
        return f"ToolCallTask(think_prefilled={self.think_prefilled}, block={self.block!r})"

    def prompt_single(self, example: Example) -> str:
        """System instruction and user turn as one string (``messages`` keeps them apart)."""
        return f"{example['instruction'].rstrip()}\n\n{example['input']}"

    def messages(self, example: Example, m: int = 1) -> list[dict[str, str]]:
        """Chat messages: the instruction as system turn, the dialogue (plus the m-answer block
        when m > 1) as user turn."""
        user = example["input"] if m == 1 else rewrite_prompt(example["input"], m, self.rewrite_rule)
        return [{"role": "system", "content": example["instruction"]},
                {"role": "user", "content": self.with_goal(user, example)}]

    def oracle_answers(self, example: Example) -> list[str]:
        """The gold calls in a ``<tool_call>`` block (one JSON object per line), or the gold
        response when the gold calls no tool."""
        import json

        calls = example.get("gold_calls") or []
        if calls:
            body = "\n".join(json.dumps({"name": c["name"], "parameters": c.get("parameters", {})}) for c in calls)
            return [f"<think>The request needs these calls.</think>\n<tool_call>\n{body}\n</tool_call>"]
        return [f"<think>No tool fits.</think>\n<response>{example.get('gold_response') or 'No tool fits.'}"
                "</response>"]

    def score(self, text: str, example: Example) -> np.ndarray:
        """[format, tool_name, arg_key, arg_value] of one answer text; never raises on text."""
        out = np.zeros(4, dtype=np.float64)
        # no early exit for text without tags: with no gold calls, "no call" is the right call
        # (docs/algorithm.md §4), so garbage and empty answers earn the three call scores there
        parsed = parse_output(text if isinstance(text, str) else "", self.block)
        gold = example["gold_calls"]
        if gold:
            structure = bool(parsed["blocks"]) and parsed["well_formed"] and bool(parsed["calls"])
        else:
            structure = not any(block.strip() for block in parsed["blocks"])
        out[0] = float((parsed["think"] or self.think_prefilled) and structure)
        out[1:] = score_calls(parsed["calls"], gold)
        return out

    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example in the schema of the module docstring (raw ToolRL / BFCL rows:
        convert first; ``examples`` does)."""
        example = super().validate(example, row)
        name = self.name
        need(example, "id", (str, int), name, row)
        need(example, "instruction", str, name, row)
        need(example, "input", str, name, row)
        calls = need(example, "gold_calls", list, name, row)
        for k, call in enumerate(calls):
            need(call, "name", str, name, row, f"gold_calls[{k}]")
            need(call, "parameters", dict, name, row, f"gold_calls[{k}]")
        response = example.setdefault("gold_response", None)
        if response is not None and not isinstance(response, str):
            raise ValueError(f"{name}: row {row}: field 'gold_response' must be str or null")
        return example

    def convert_all(self, records: list[Any], source: Any, split: str) -> list[Any]:
        """ToolRL raw/processed rows, BFCL rows (with their possible answers from the sibling
        ``possible_answer`` file) or rows already in the example schema, as examples."""
        answers = _bfcl_answers(resolve_path(source, split)) if any(
            isinstance(r, Mapping) and "function" in r for r in records) else None
        out = []
        for i, r in enumerate(records):
            if isinstance(r, Mapping) and "function" in r:
                answer = answers.get(str(r.get("id"))) if answers is not None else None
                if answers is not None and answer is None and "ground_truth" not in r \
                        and "irrelevance" not in str(r.get("id")):
                    raise ValueError(f"{self.name}: row {i}: no possible answer with id {r.get('id')!r}")
                out.append(from_bfcl_row(r, i, answer))
            else:
                out.append(from_toolrl_row(r, i))
        return out
