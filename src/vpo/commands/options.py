"""Options that several ``vpo`` commands take, declared once: the task, your own reward functions,
the estimator with its options, and the sampling of answer pools.

Usage::

    from dataclasses import dataclass
    from vpo.commands.options import EstimatorOptions, estimator_options
    from vpo.config import add_dataclass_args

    @dataclass
    class MyConfig(EstimatorOptions):     # --method, --num-weights, --alpha, --sampler, --estimator-options
        seed: int = 0

    cfg = MyConfig(method="grpo", estimator_options=["eps=1e-4", "degenerate=none"])
    estimator_options(cfg, seed=cfg.seed)            # {'eps': 0.0001, 'degenerate': 'none'}

Help texts that name estimators or tasks are computed from the registries when the parser is
built (``vpo.estimators``, ``vpo.tasks``), so a plugin's estimator shows up and no list goes
stale. ``estimator_options`` checks every option against the estimator's spec before any work:
an unknown name, an option the adapters set themselves, or a value the estimator refuses fails
in one line naming the option and the ones the estimator takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpo.config import field_like, parse_params
from vpo.estimators.options import WeightOptions

__all__ = ["EstimatorOptions", "GenerationOptions", "PoolOptions", "RewardFuncsOptions", "answers_for", "check_estimator_options",
           "estimator_help", "estimator_names", "estimator_options", "resolve_answers", "settable_options", "task_help",
           "weight_flags"]


def resolve_answers(method: str, answers: int | None) -> int:
    """m for ``method``: explicit, else its spec's default (3 for multi-answer estimators, 1
    otherwise); ``answers_for`` also checks that the estimator takes m answers."""
    from vpo.estimators import get_spec

    if answers is None:
        return get_spec(method).default_answers
    if answers < 1:
        raise ValueError(f"--answers must be >= 1, got {answers}")
    return answers


def answers_for(method: str, answers: int | None) -> int:
    """``resolve_answers``, and a one-line ValueError, before any work, when ``--method`` scores
    one answer per rollout and m > 1 (``vpo train``, ``vpo advantages``, ``vpo data export``)."""
    from vpo.estimators import get_spec, list_estimators

    m = resolve_answers(method, answers)
    if m > 1 and not get_spec(method).multi_answer:
        multi = [name for name in list_estimators() if get_spec(name).multi_answer]
        raise ValueError(f"--answers {m}: --method {method} scores one answer per rollout (m = 1); try --answers 1, "
                         f"or a multi-answer method ({', '.join(multi)})")
    return m


def task_help() -> str:
    """``task name: code, eureqa, math, ...``: the help of a --task flag, listing the tasks
    registered now (built-in and plugins), so no list goes stale."""
    from vpo.tasks import list_tasks

    return f"task name: {', '.join(list_tasks())}"


def estimator_names() -> list[str]:
    """The registered estimators (built-in and plugins): the choices of --method."""
    from vpo.estimators import list_estimators

    return list_estimators()


def estimator_help() -> str:
    """The help of --method: the registered estimators by how many answers they take (m's default)."""
    from vpo.estimators import get_spec

    names = estimator_names()
    multi = [n for n in names if get_spec(n).multi_answer]
    single = [n for n in names if not get_spec(n).multi_answer]
    parts = []
    if multi:
        parts.append(f"{', '.join(multi)} score m answers per rollout (m = {get_spec(multi[0]).default_answers} "
                     "unless --answers)")
    if single:
        parts.append(f"{', '.join(single)} score one (m = 1)")
    return "advantage estimator: " + "; ".join(parts)


def settable_options(method: str) -> tuple[str, ...]:
    """The options of estimator ``method`` a user sets: all but those the adapters fill in
    (``INJECTED_OPTIONS``) and ``seed`` (the command's --seed)."""
    from vpo.estimators import get_spec

    spec = get_spec(method)
    return tuple(o for o in spec.options if o not in spec.injected_options and o != "seed")


def _taking(option: str) -> str:
    from vpo.estimators import get_spec

    names = [n for n in estimator_names() if option in get_spec(n).options]
    return ", ".join(names) if names else "none of the registered estimators"


def _options_help() -> str:
    per = "; ".join(f"{n}: {', '.join(settable_options(n)) or '-'}" for n in estimator_names())
    return ("the estimator's own options, key=value, comma-separated (values JSON or text), e.g. "
            f"eps=1e-4,degenerate=none; checked against the estimator before any work. Options per estimator: {per}")


@dataclass
class RewardFuncsOptions:
    """The user's own reward functions in place of ``--task`` (shared by every command that takes a task)."""

    reward_funcs: str = field(default="", metadata={
        "help": "your own reward functions instead of --task, TRL's reward_funcs contract: 'pkg.mod:f1,pkg.mod:f2' "
                "(or dotted paths, or model ids); one objective per function (a function returning vectors gives "
                "several); the prompts are the rows of --source (a prompt column)"})
    reward_names: list[str] = field(default_factory=list, metadata={
        "help": "names of the objectives --reward-funcs give, one per function (default: the functions' names)"})
    scaling: list[str] = field(default_factory=list, metadata={
        "help": "per-objective scaling into [0, 1]: one spec for all, or name=spec entries; a spec is none, sigmoid "
                "(reward-model logits), minmax (over the batch's answers; not in tasks) or low:high (a known range, "
                "clipped); default none, with a warning when an objective leaves [0, 1]"})
    max_failure_rate: float = field(default=0.5, metadata={
        "help": "stop when more than this fraction of one step's reward calls (functions x answers; a task's "
                "scorer x answers) fail: raise, return NaN/inf, time out, or get no verdict from math-verify or the "
                "sandbox; a failed call scores 0 and is counted (vpo/reward_failures); 1 never stops",
        "min": 0.0, "max": 1.0})
    reward_time_limit: float | None = field(default=None, metadata={
        "help": "seconds one reward call (a --reward-funcs function on a batch of answers, or a task's scorer on "
                "one chain) may run before its answers count as failed (the call is abandoned, its thread keeps "
                "running); default: no limit (math-verify and the sandbox have their own)", "above": 0.0})


@dataclass
class GenerationOptions:
    """How each chain is sampled: --temperature, --top-p and --max-new-tokens, declared here once for
    every command that samples (``vpo eval``, ``vpo search``, ``vpo warmup``). A command whose token
    budget means something else keeps the flag and changes its default and help with
    ``vpo.config.field_like``. Where and in what batches the sampler runs is ``vpo.sampling.SamplingOptions``."""

    temperature: float = field(default=0.7, metadata={"help": "sampling temperature", "above": 0.0})
    """Softmax temperature of every sampled token (> 0; 1 samples the model's own distribution)."""
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling top-p", "above": 0.0, "max": 1.0})
    """Nucleus sampling: each token is drawn from the smallest set holding this much probability (1: all)."""
    max_new_tokens: int = field(default=0, metadata={
        "help": "generation budget per chain (0: the prompt format's own: 256 x m for the task's prompts, the "
                "step budget for the demo's compact maze format)", "min": 0})
    """New tokens of one sampled chain; 0: the prompt format's own budget."""


@dataclass
class PoolOptions(GenerationOptions):
    """Which examples, how many answers per example, and how they are sampled (``vpo eval`` and
    ``vpo search best-of-n``; --temperature, --top-p and --max-new-tokens from ``GenerationOptions``)."""

    split: str = field(default="test", metadata={"help": "split of the task's examples"})
    examples: int = field(default=100, metadata={"help": "number of examples", "min": 1})
    pool: int = field(default=30, metadata={"help": "answers per example: pool // m chains of m = --answers answers "
                                                    "(a multiple of every m)", "aliases": ("--n",), "min": 1})


@dataclass
class EstimatorOptions:
    """The advantage estimator and every option of it (``vpo train``, ``vpo advantages``)."""

    method: str = field(default="vpo", metadata={"help": estimator_help, "choices": estimator_names,
                                                 "aliases": ("--estimator",)})
    num_weights: int = field_like(WeightOptions, "num_weights",
                                  help=lambda: f"Dirichlet weights K per group ({_taking('num_weights')})")
    alpha: float = field_like(WeightOptions, "alpha",
                              help=lambda: f"Dirichlet concentration alpha ({_taking('alpha')})")
    sampler: str = field_like(WeightOptions, "sampler", help=lambda: f"simplex sampler ({_taking('sampler')})")
    estimator_options: list[str] = field(default_factory=list, metadata={"help": _options_help})


def weight_flags(cfg: EstimatorOptions) -> dict[str, Any]:
    """The weight options (--num-weights, --alpha, --sampler) set to something else than their default."""
    defaults = {f.name: f.default for f in dataclasses.fields(EstimatorOptions)}
    return {name: getattr(cfg, name) for name in ("num_weights", "alpha", "sampler")
            if getattr(cfg, name) != defaults[name]}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def estimator_options(cfg: EstimatorOptions, *, seed: int | None = None) -> dict[str, Any]:
    """The options ``cfg`` gives its estimator: the weight options it takes (their flags), then
    ``--estimator-options``, then ``seed`` when it takes one. ValueError, naming the option and
    the estimator's options, for one it does not take, one the adapters set (the keyed-weight
    step and keys, goal weights, the fixed scalar), ``seed`` (that is --seed), or a weight option
    given twice with two values. Values are checked by ``check_estimator_options``."""
    from vpo.estimators import get_spec

    spec = get_spec(cfg.method)
    allowed = settable_options(cfg.method)
    shown = ", ".join(allowed) or "none"
    given = parse_params(list(cfg.estimator_options), flag="--estimator-options")
    for key in given:
        if key == "seed" and "seed" in spec.options:
            raise ValueError(f"--estimator-options seed: the weights' seed is --seed; its options: {shown}")
        if key in spec.injected_options:
            raise ValueError(f"--estimator-options {key}: set by vpo itself for estimator {cfg.method!r} (keyed "
                             f"weights, goal weights, the task's scalar); its options: {shown}")
        if key not in spec.options:
            raise ValueError(f"--estimator-options {key}: estimator {cfg.method!r} has no option {key!r}; "
                             f"its options: {shown}")
    flags = weight_flags(cfg)
    for name, value in flags.items():
        if name not in spec.options:
            raise ValueError(f"{_flag(name)} does not apply to estimator {cfg.method!r} (its options: {shown})")
        if name in given and given[name] != value:
            raise ValueError(f"{_flag(name)} {value} and --estimator-options {name}={given[name]} disagree; give one")
    options = {name: getattr(cfg, name) for name in ("num_weights", "alpha", "sampler") if name in spec.options}
    options.update(given)
    if seed is not None and "seed" in spec.options:
        options["seed"] = seed
    return options


def check_estimator_options(method: str, options: Mapping[str, Any], *, answers: int, objectives: int | None,
                            group_size: int) -> None:
    """Run estimator ``method`` with ``options`` on one small group shaped like the real batch
    (``group_size`` rollouts of ``answers`` x ``objectives``), so a value it refuses (a mode
    it lacks, a K of 0, k >= the group size, objective weights of another length) fails now, in
    one line naming the option, instead of at the first training step. ``objectives`` None (D
    is known only once your reward functions have scored an answer): the options but
    ``objective_weights``, whose length the estimator checks at the first step."""
    from vpo.estimators import get_spec

    spec = get_spec(method)
    if objectives is None:
        options = {k: v for k, v in options.items() if k != "objective_weights"}
        objectives = 2
    rng = np.random.default_rng(0)
    rewards = [rng.integers(0, 5, size=(answers if spec.multi_answer else 1, objectives)) / 4.0
               for _ in range(group_size)]
    try:
        spec.fn(rewards, ["g"] * group_size, **options)
    except ValueError as err:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items())
        raise ValueError(f"estimator {method!r} refuses its options ({given}): {err}") from None
