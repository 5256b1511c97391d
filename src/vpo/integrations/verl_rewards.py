"""verl 0.9.1: your own ``compute_score`` becomes VPO's objectives, through config overrides alone.

Usage (your data and your reward file as they are; only overrides change)::

    python -m verl.trainer.main_ppo ... \\
        data.custom_cls.path=pkg://vpo.integrations.verl_rewards data.custom_cls.name=MultiAnswerDataset \\
        +data.answers=3 \\
        reward.custom_reward_function.path=pkg://vpo.integrations.verl_rewards \\
        reward.custom_reward_function.name=compute_score \\
        +reward.custom_reward_function.reward_kwargs.score_path=/path/to/my_reward.py \\
        +reward.custom_reward_function.reward_kwargs.score_name=compute_score \\
        '+reward.custom_reward_function.reward_kwargs.reward_keys=[accuracy,format]' \\
        algorithm.adv_estimator=vpo

Your function keeps verl's ``custom_reward_function`` contract, ``compute_score(data_source,
solution_str, ground_truth, extra_info)`` returning a float or a dict with ``score`` and named
extras. ``score_path`` / ``score_name`` are what ``custom_reward_function.path`` / ``.name`` were
(a file or ``pkg://module``, loaded by verl's own ``load_extern_object``); ``reward_keys`` are the
keys of its dict that are objectives, read as verl's ``algorithm.gdpo_reward_keys`` reads them
(each must be in every returned dict; default ``[score]``, which a float return also gives).

Per rollout, the m answers of the chain (``<response_1>`` .. ``<response_m>``, the generic chain of
``vpo.rewards``) are split and your function is called once per answer; the (m, D) matrix is
deduplicated and zero-padded as ``vpo.rewards`` does (the ``own_rewards`` task,
``vpo.tasks.own_rewards``) and reduced to the method's per-rollout score by
``vpo.integrations.rollout_scorer.score_rollout``, the scorer the task-based ``compute_score`` uses;
the registered ``vpo`` estimator turns the scores into advantages. A ``None`` from your function
counts as 0 (verl scores one rollout at a time: there is no group to drop an objective for).
Returned: ``score_rollout``'s dict plus ``best_<key>`` per objective (the chain's best value).

``MultiAnswerDataset`` is verl's ``RLHFDataset`` whose prompts ask for m = ``data.answers``
answers (the last user message gets the generic chain instruction) and whose rows carry
``extra_info.answers`` (m) and ``extra_info.index`` (the row number when your data has none: the
prompt's shared weights are keyed on ``extra_info.example_id`` when the row has one, else on it). Options in ``reward_kwargs``: ``method``, ``num_weights``,
``alpha``, ``sampler``, ``seed`` (as ``vpo.integrations.verl.compute_score``), ``answers`` (m when
the rows do not say), ``scaling`` (``vpo.rewards`` scaling: ``sigmoid``, ``[low, high]`` or
``{key: spec}``; ``minmax`` is refused: one rollout is not a batch), and the reward failure
policy (``vpo.reward_failures``): ``max_failure_rate``, ``failure_window`` (verl passes no step, so
the rate is checked over each window of reward calls) and ``time_limit`` (seconds per call). A
failed call scores 0 and is counted in the returned ``vpo/reward_failures`` (this rollout's failed
calls) and ``vpo/reward_failures/<score_name>``; past the rate, ``compute_score`` raises.
``set_score`` as in ``vpo.integrations.verl.compute_score``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vpo.estimators.options import WeightOptions
from vpo.reward_failures import RewardContractError, RewardFailurePolicy, RewardFailures
from vpo.weights import FIXED, given_key

__all__ = ["MultiAnswerDataset", "VerlScore", "compute_score", "load_user_score"]

_LOCK = threading.Lock()
_TASKS: dict[str, Any] = {}
_ENGINE_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})


class VerlScore:
    """A verl ``compute_score`` as a reward function of TRL's contract with one head per key:
    called once per answer, it returns ``[result[key] for key in keys]``."""

    def __init__(self, fn: Any, keys: Sequence[str] = ("score",), name: str = "compute_score") -> None:
        self.fn = fn
        self.keys = tuple(str(k) for k in keys)
        if not self.keys:
            raise ValueError("reward_keys is empty: name the keys of compute_score's dict that are objectives")
        self.objective_names = self.keys
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], *, data_source: Sequence[Any],
                 ground_truth: Sequence[Any], extra_info: Sequence[Any], **_: Any) -> list[list[float | None]]:
        from vpo.rewards import completion_text

        out = []
        for text, source, truth, info in zip(completions, data_source, ground_truth, extra_info, strict=True):
            result = self.fn(data_source=source, solution_str=completion_text(text), ground_truth=truth,
                             extra_info=dict(info or {}))
            if isinstance(result, Mapping):
                missing = [k for k in self.keys if k not in result]
                if missing:
                    raise RewardContractError(
                        f"reward key(s) {missing} not in what {self.__name__} returned (keys: {sorted(result)}); "
                        "set reward_kwargs.reward_keys to keys it returns")
                out.append([self._number(k, result[k]) for k in self.keys])
            elif self.keys == ("score",):
                out.append([self._number("score", result)])
            else:
                raise RewardContractError(
                    f"{self.__name__} returned a {type(result).__name__}, not a dict, so it has no keys "
                    f"{list(self.keys)}; leave reward_keys unset to use its score")
        return out

    def _number(self, key: str, value: Any) -> float | None:
        """A reward key's value as a float (``None`` stays: "does not apply"). A string is refused,
        not read as a number: math_dapo's ``pred`` ("8") is the extracted answer, not a reward."""
        if value is None:
            return None
        if isinstance(value, str | bytes):
            raise RewardContractError(
                f"reward key {key!r} of {self.__name__} holds the string {value!r:.40}, not a number; a reward key "
                "must hold a number (math_dapo's 'pred' is the extracted answer): leave it out of reward_keys")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise RewardContractError(f"reward key {key!r} of {self.__name__} holds a {type(value).__name__}, "
                                      "not a number") from None


def load_user_score(path: str, name: str) -> Any:
    """The user's function, loaded as verl loads ``custom_reward_function`` (a file or ``pkg://``)."""
    from verl.utils.import_utils import load_extern_object

    return load_extern_object(module_path=path, object_name=name)


def _plain(value: Any) -> Any:
    """OmegaConf containers (what Hydra hands reward_kwargs as) as plain lists and dicts."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value


def _task(score_path: str, score_name: str, keys: tuple[str, ...], scaling: Any,
          policy: RewardFailurePolicy) -> Any:
    """The ``own_rewards`` task over the user's function, built once per process."""
    from vpo.tasks.own_rewards import OwnRewardsTask

    key = json.dumps([score_path, score_name, keys, scaling, repr(policy)], sort_keys=True, default=str)
    task = _TASKS.get(key)
    if task is None:
        with _LOCK:
            task = _TASKS.get(key)
            if task is None:
                fn = load_user_score(score_path, score_name)
                task = OwnRewardsTask([VerlScore(fn, keys, name=score_name)], scaling=scaling)
                task.failures = RewardFailures(policy, names=(score_name,))
                _TASKS[key] = task
    return task


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None,
                  *, score_path: str | None = None, score_name: str = "compute_score",
                  reward_keys: Sequence[str] | str | None = None, answers: int | None = None, method: str = "vpo",
                  num_weights: int = WeightOptions.num_weights, alpha: float = WeightOptions.alpha,
                  sampler: str = WeightOptions.sampler, seed: int = WeightOptions.seed, scaling: Any = None,
                  max_failure_rate: float = RewardFailurePolicy.max_failure_rate,
                  failure_window: int = RewardFailurePolicy.window,
                  time_limit: float | None = RewardFailurePolicy.time_limit, set_score: bool | None = None,
                  **engine_kwargs: Any) -> dict[str, Any]:
    """verl's reward function over the user's own ``compute_score`` (see the module docstring)."""
    from vpo.integrations.rollout_scorer import reward_methods, score_rollout
    from vpo.integrations.verl import row_key

    spec = reward_methods().get(method)
    # the method's own reduction options (beyond the weight options) reach its reduction, as in compute_score
    own = sorted(set(spec.reduction_options) - {"num_weights", "alpha", "sampler", "seed"}) if spec else []
    unknown = set(engine_kwargs) - _ENGINE_KWARGS - set(own)
    if unknown:
        raise ValueError(f"unknown reward_kwargs option(s) {', '.join(sorted(unknown))}; known: score_path, "
                         "score_name, reward_keys, answers, method, num_weights, alpha, sampler, seed, scaling, "
                         "max_failure_rate, failure_window, time_limit, set_score"
                         + "".join(", " + o for o in own))
    if not score_path:
        raise ValueError("reward_kwargs.score_path is missing: the file (or pkg://module) of your compute_score, "
                         "what custom_reward_function.path was")
    keys = _plain(reward_keys) if reward_keys is not None else ["score"]
    keys = tuple([keys] if isinstance(keys, str) else keys)
    info = dict(extra_info or {})
    m = info.get("answers", answers)
    if m is None:
        raise ValueError("m is unknown: use data.custom_cls MultiAnswerDataset with +data.answers=M (it writes "
                         "extra_info.answers), or set reward_kwargs.answers")
    m = int(m.item() if isinstance(m, np.generic) else m)
    if answers is not None and int(answers) != m:
        raise ValueError(f"reward_kwargs.answers={answers} but the prompt asks for extra_info.answers={m}")
    if given_key(info.get("example_id")) is None and info.get("index") is None:
        raise ValueError("extra_info.example_id and extra_info.index are missing: the prompt's weights are keyed on "
                         "one of them (MultiAnswerDataset adds the row number as index)")
    key = row_key(info)  # the group key every engine reads: example_id, else index
    policy = RewardFailurePolicy(max_failure_rate=max_failure_rate, window=failure_window, time_limit=time_limit)
    task = _task(score_path, score_name, keys, _plain(scaling), policy)
    example = {"prompt": str(data_source) or "verl", "data_source": data_source, "ground_truth": ground_truth,
               "extra_info": info}
    step = info.get("global_steps")
    step = FIXED if step is None else int(step.item() if isinstance(step, np.generic) else step)
    out = score_rollout(task, solution_str, example, m=m, key=key, method=method, num_weights=num_weights,
                        alpha=alpha, sampler=sampler, seed=seed, step=step,
                        options={k: engine_kwargs[k] for k in own if k in engine_kwargs}, set_score=set_score)
    for key, value in zip(task.objective_names(example), json.loads(out["objective_best"]), strict=True):
        out[f"best_{key}"] = float(value)
    return out


def _dataset_base() -> type:
    from verl.utils.dataset.rl_dataset import RLHFDataset

    return RLHFDataset


class _MultiAnswer:
    """The m-answer rewrite of verl rows (mixed into verl's ``RLHFDataset`` below)."""

    def answers(self) -> int:
        m = self.config.get("answers", None)  # type: ignore[attr-defined]
        if m is None or isinstance(m, bool) or int(m) < 1:
            raise ValueError(f"MultiAnswerDataset needs +data.answers=M (M >= 1 answers per rollout), got {m!r}")
        return int(m)

    def _build_messages(self, example: dict, key: str) -> list:
        from vpo.rewards import rewrite_chain_prompt

        messages = super()._build_messages(example, key)  # type: ignore[misc]
        m = self.answers()
        return list(rewrite_chain_prompt(list(messages), m)) if m > 1 else messages

    def __getitem__(self, item: int) -> dict:
        row = super().__getitem__(item)  # type: ignore[misc]
        info = dict(row.get("extra_info") or {})
        info["answers"] = self.answers()
        info.setdefault("index", int(item))
        row["extra_info"] = info
        row["index"] = info["index"]
        return row


def __getattr__(name: str) -> Any:
    """``MultiAnswerDataset`` is built on first use, so importing this module needs no verl."""
    if name == "MultiAnswerDataset":
        cls = type("MultiAnswerDataset", (_MultiAnswer, _dataset_base()), {
            "__doc__": "verl's RLHFDataset asking for m = data.answers answers per prompt (see the module).",
            "__module__": __name__})
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
