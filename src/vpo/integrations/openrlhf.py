"""OpenRLHF 0.11.2 reward file: ``reward_func(queries, prompts, labels)`` for every vpo task.

Usage (full command in ``recipes/openrlhf/``)::

    vpo data export maze --format verl ...                       # the verl parquet export
    python -m vpo.integrations.openrlhf convert data/maze/train.parquet data/maze/train.jsonl --method vpo
    python -m openrlhf.cli.train_ppo_ray ... \\
        --data.prompt_dataset data/maze/train.jsonl --data.input_key prompt --data.apply_chat_template \\
        --data.label_key label \\
        --reward.remote_url "$(python -m vpo.integrations.openrlhf path)" \\
        --algo.advantage.estimator group_norm --rollout.n_samples_per_prompt 8

OpenRLHF has no estimator registry, so VPO runs as "reward = the rollout's set score R_g,
advantage = OpenRLHF's ``group_norm``" (Bessel std, eps 1e-9; docs/algorithm.md §1: the VPO work
is all in the per-rollout score as long as a prompt's rollouts share the K weights). The score
comes from the one rollout scorer (``vpo.integrations.rollout_scorer``) that verl's
``compute_score`` and TRL's stock rewards call too; this file imports neither of them.

The file is loaded by ``importlib.util.spec_from_file_location("reward_func", path)``, so it
uses absolute imports of the installed ``vpo`` only. OpenRLHF calls it in a thread with lists
of length 1 and swallows its exceptions at INFO level (the sample then has no reward and the
step fails later, far from the cause); errors are therefore also logged at ERROR level here
before they propagate.

Label (``--data.label_key label``): a JSON object (string or already decoded), written by
``convert`` or :func:`make_label`:

* ``task`` (str), ``example`` (the task example), ``m`` (answers the prompt asks for),
  ``index`` (the row's position): required; ``example_id`` (the group key of the prompt's shared
  weights, the one TRL and verl use; labels without it fall back to ``index``);
* ``task_params`` (dict, default {}), ``method`` (a registered estimator whose advantage is a
  group z-norm of the rollout score: ``vpo``, ``multi_rlvr``, ``grpo``, ``random_weight``,
  ``goal_conditioned``; default ``vpo``), ``num_weights``, ``alpha``, ``sampler``, ``seed``
  (``WeightOptions``' defaults: 100, 1.0, ``iid``, 0), ``options`` (the method's own reduction
  options, e.g. a temperature; default {}), ``set_score`` (true: also log VPO's set score for a
  method other than ``vpo``, a draw of K weights per sample): optional. They live in the label,
  not in environment variables, because OpenRLHF's reward workers are Ray actors that need
  not see the launcher's environment: a run's reward is defined by its data file alone.

With ``group_norm`` only estimators whose spec says ``group_norm`` train as the paper
describes; ``max_at_k`` and ``maxrl`` need their own advantage rules, which OpenRLHF cannot take
(use verl or TRL for them).

Return: ``{"rewards": float, "scores": float, "extra_logs": {name: float}}``, the logs under
the names TRL and verl use (``vpo.step_metrics``: ``vpo/answers_parsed``, ``vpo/objective/<name>``,
``vpo/score_mean``, ...).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from vpo.estimators.options import WeightOptions
from vpo.integrations.rollout_scorer import reward_methods, reward_step_metrics, score_rollout
from vpo.weights import given_key

logger = logging.getLogger("vpo.integrations.openrlhf")

LABEL_REQUIRED = ("task", "example", "m", "index")
LABEL_OPTIONS = {"task_params": None, "method": "vpo", "example_id": None, "options": None, "set_score": None,
                 **WeightOptions().as_dict()}
"""Optional label fields and their defaults."""

# Chat-template control tokens such as <|im_end|>, <|endoftext|>, <|eot_id|>, plus </s>.
# OpenRLHF decodes with skip_special_tokens=False; verl's solution_str has them removed.
_SPECIAL_TOKEN = re.compile(r"<\|[A-Za-z0-9_.:-]{1,64}\|>|</s>")



def group_norm_methods() -> list[str]:
    """Registered estimators OpenRLHF's ``--algo.advantage.estimator group_norm`` trains as written."""
    return [name for name, spec in reward_methods().items() if spec.group_norm]


def make_label(task: str, example: Mapping[str, Any], *, m: int, index: int | str,
               task_params: Mapping[str, Any] | None = None, method: str = "vpo",
               num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
               sampler: str = WeightOptions.sampler, seed: int = WeightOptions.seed,
               example_id: str | None = None, options: Mapping[str, Any] | None = None,
               set_score: bool | None = None) -> str:
    """The JSON label of one prompt (what ``reward_func`` reads back)."""
    if method not in reward_methods():
        raise ValueError(f"method={method!r} is not one of {', '.join(reward_methods())}")
    WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)  # zero K / alpha raise
    label = {"task": task, "example": dict(example), "m": int(m), "index": index,
             "task_params": dict(task_params or {}), "method": method, "num_weights": int(num_weights),
             "alpha": float(alpha), "sampler": sampler, "seed": int(seed)}
    if given_key(example_id) is not None:
        label["example_id"] = str(example_id)
    if options:
        label["options"] = dict(options)
    if set_score is not None:
        label["set_score"] = bool(set_score)
    return json.dumps(label, sort_keys=True)


def parse_label(label: Any) -> dict[str, Any]:
    """Decode and check a label; ValueError naming the missing or malformed field."""
    if isinstance(label, str):
        try:
            label = json.loads(label)
        except json.JSONDecodeError as err:
            raise ValueError(f"label is not valid JSON ({err.msg}); it starts {label[:80]!r}. Convert the data with "
                             "`python -m vpo.integrations.openrlhf convert`") from None
    if not isinstance(label, Mapping):
        raise ValueError(f"label must be a JSON object, got {type(label).__name__} (--data.label_key points at the "
                         "wrong column?)")
    missing = [k for k in LABEL_REQUIRED if k not in label]
    if missing:
        raise ValueError(f"label lacks field(s) {', '.join(missing)}; required: {', '.join(LABEL_REQUIRED)}")
    unknown = set(label) - set(LABEL_REQUIRED) - set(LABEL_OPTIONS)
    if unknown:
        raise ValueError(f"label has unknown field(s) {', '.join(sorted(unknown))}")
    out = {**LABEL_OPTIONS, **label}
    if isinstance(out["task_params"], str):
        out["task_params"] = json.loads(out["task_params"])
    if not isinstance(out["example"], Mapping):
        raise ValueError(f"label.example must be an object, got {type(out['example']).__name__}")
    return out


MIN_PROMPT_OVERLAP = 16
"""Non-space characters of the prompt the query must still hold (a left-truncated prompt keeps at
least its generation marker, e.g. ``<|im_start|>assistant`` = 21)."""


def _prompt_overlap(prompt: str, query: str) -> int:
    """Length of the longest suffix of ``prompt`` that is a prefix of ``query`` (KMP, O(n))."""
    pattern = query[:len(prompt)]
    if not pattern:
        return 0
    border = [0] * len(pattern)  # prefix function of the pattern
    k = 0
    for i in range(1, len(pattern)):
        while k and pattern[i] != pattern[k]:
            k = border[k - 1]
        if pattern[i] == pattern[k]:
            k += 1
        border[i] = k
    matched = 0
    for char in prompt:  # run the pattern's automaton over the prompt; what matches at its end is the overlap
        while matched and (matched == len(pattern) or char != pattern[matched]):
            matched = border[matched - 1]
        if char == pattern[matched]:
            matched += 1
    return matched


def response_of(query: str, prompt: str) -> str:
    """The response part of ``query``, chat-template control tokens removed.

    OpenRLHF 0.11.2 builds ``query = decode(encode(prompt) + response ids)`` with
    ``skip_special_tokens=False`` and passes the original ``prompt`` text beside it. Decoding
    need not give the prompt back: Llama-3's tokenizer cleans up spaces (``"# . B"`` decodes to
    ``"#. B"``), Qwen's normalises to NFC, and an over-long prompt is left-truncated. So when
    ``query`` does not start with ``prompt``, both are NFC-normalised and aligned on their
    non-space characters: the response starts after the longest suffix of the prompt that the
    query begins with (all of it, or what truncation left, at least ``MIN_PROMPT_OVERLAP``
    characters). ValueError when the query holds no such part of the prompt.
    """
    if query.startswith(prompt):
        return _SPECIAL_TOKEN.sub("", query[len(prompt):]).strip()
    query, prompt = unicodedata.normalize("NFC", query), unicodedata.normalize("NFC", prompt)
    prompt_chars = "".join(c for c in prompt if not c.isspace())
    positions = [i for i, c in enumerate(query) if not c.isspace()]
    query_chars = "".join(query[i] for i in positions[:len(prompt_chars)])
    overlap = _prompt_overlap(prompt_chars, query_chars)
    if overlap < min(len(prompt_chars), MIN_PROMPT_OVERLAP):
        raise ValueError("the query does not start with the prompt (or a suffix of it, ignoring spaces and Unicode "
                         "normalisation): cannot find the response")
    response = query[positions[overlap - 1] + 1:] if overlap else query
    return _SPECIAL_TOKEN.sub("", response).strip()


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any]) -> dict[str, Any]:
    """OpenRLHF's reward hook: one sample (lists of length 1) -> rewards, scores, extra_logs."""
    try:
        if not (len(queries) == len(prompts) == len(labels) == 1):
            raise ValueError(f"reward_func expects lists of length 1 (OpenRLHF 0.11 calls it per sample), got "
                             f"{len(queries)}, {len(prompts)}, {len(labels)}")
        label = parse_label(labels[0])
        text = response_of(queries[0], prompts[0])
        key = label["index"] if given_key(label["example_id"]) is None else label["example_id"]
        result = score_rollout(label["task"], text, label["example"], m=label["m"], key=key,
                               method=label["method"], num_weights=label["num_weights"], alpha=label["alpha"],
                               sampler=label["sampler"], seed=label["seed"], task_params=label["task_params"],
                               options=label["options"], set_score=label["set_score"])
    except Exception as err:  # OpenRLHF swallows this at INFO level: say it loudly first
        logger.error("vpo reward_func failed: %s", err)
        print(f"vpo reward_func failed: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        raise
    score = float(result["score"])
    # the names TRL and verl log (vpo.step_metrics); OpenRLHF averages each over the step's samples
    # (so vpo/duplicate_rate is a mean of per-sample rates here), and a group's spread needs the
    # whole group, which one sample does not have
    extra = {k: v for k, v in reward_step_metrics([result], [0]).items()
             if k not in ("vpo/group_std", "vpo/frac_zero_std")}
    return {"rewards": score, "scores": score, "extra_logs": extra}


def convert(src: str, dst: str, *, method: str = "vpo", num_weights: int = WeightOptions.num_weights,
            alpha: float = WeightOptions.alpha, sampler: str = WeightOptions.sampler,
            seed: int = WeightOptions.seed) -> int:
    """Rewrite a verl parquet export (``vpo data export --format verl``) as OpenRLHF JSONL.

    Each line holds ``prompt`` (the chat message list, for ``--data.apply_chat_template``),
    ``label`` (see the module docstring) and ``datasource`` (the task name: OpenRLHF names its
    evaluation metrics after it, ``eval_maze_pass8``). Returns the number of rows written.
    """
    import pyarrow.parquet as pq

    methods = reward_methods()
    if method not in methods:
        raise ValueError(f"--method {method!r} is not one of {', '.join(methods)}")
    if method not in group_norm_methods():
        raise ValueError(f"--method {method!r} needs its own advantage rule; OpenRLHF's group_norm trains only "
                         f"{', '.join(group_norm_methods())}")
    WeightOptions(num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed)  # before any row is read
    rows = pq.read_table(src).to_pylist()
    with open(dst, "w", encoding="utf-8") as out:
        for row_number, row in enumerate(rows):
            info = row.get("extra_info") or {}
            for field in ("index", "answers"):
                if info.get(field) is None:
                    raise ValueError(f"{src}: row {row_number}: extra_info.{field} is missing (not a vpo export?)")
            if not methods[method].multi_answer and info["answers"] != 1:
                raise ValueError(f"{src}: row {row_number}: --method {method} trains single-answer prompts but the "
                                 f"export has answers={info['answers']}; export with --answers 1")
            params = info.get("task_params") or "{}"
            label = make_label(row["data_source"], json.loads(row["reward_model"]["ground_truth"]),
                               m=info["answers"], index=info["index"],
                               task_params=json.loads(params) if isinstance(params, str) else params,
                               method=method, num_weights=num_weights, alpha=alpha, sampler=sampler, seed=seed,
                               example_id=info.get("example_id"))
            out.write(json.dumps({"prompt": row["prompt"], "label": label, "datasource": row["data_source"]}) + "\n")
    return len(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vpo.integrations.openrlhf path | convert SRC DST [--method ...]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vpo.integrations.openrlhf", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("path", help="print the path to pass as --reward.remote_url")
    conv = sub.add_parser("convert", help="verl parquet export -> OpenRLHF JSONL with vpo labels")
    conv.add_argument("src")
    conv.add_argument("dst")
    conv.add_argument("--method", default="vpo", choices=group_norm_methods())
    defaults = WeightOptions()
    conv.add_argument("--num-weights", type=int, default=defaults.num_weights,
                      help=f"K Dirichlet weights per prompt (default {defaults.num_weights})")
    conv.add_argument("--alpha", type=float, default=defaults.alpha,
                      help=f"Dirichlet concentration (default {defaults.alpha})")
    conv.add_argument("--sampler", default=defaults.sampler, choices=("iid", "sobol"))
    conv.add_argument("--seed", type=int, default=defaults.seed)
    args = parser.parse_args(argv)
    if args.cmd == "path":
        print(__file__)
        return 0
    n = convert(args.src, args.dst, method=args.method, num_weights=args.num_weights, alpha=args.alpha,
                sampler=args.sampler, seed=args.seed)
    print(f"wrote {n} rows to {args.dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
