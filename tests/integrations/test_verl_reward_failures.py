"""The reward failure policy through verl's own loader and ``naive`` reward manager: a user's
``compute_score`` that raises, returns NaN (or None, not a failure) and hangs on chosen answers."""

from __future__ import annotations

import logging
import string

import numpy as np
import pytest

verl = pytest.importorskip("verl", reason="verl is not installed (pip install -e .[verl])")
pytest.importorskip("torch")

from test_verl_integration import compose_verl, run_naive  # noqa: E402
from test_verl_own_rewards import K, SEED, split  # noqa: E402

from vpo.integrations.verl import group_weights  # noqa: E402
from vpo.objective import set_scores  # noqa: E402
from vpo.reward_failures import RewardFailureError  # noqa: E402

FAILING_REWARD = '''
import math, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Raises on "boom", NaN on "nan", None on "none", hangs on "slow"; else accuracy and brevity."""
    if "boom" in solution_str:
        raise KeyError("no rubric for " + solution_str)
    if "slow" in solution_str:
        time.sleep(1.0)
    accuracy = float(ground_truth in solution_str)
    if "nan" in solution_str:
        accuracy = math.nan
    if "none" in solution_str:
        accuracy = None
    return {"score": 0.0, "accuracy": accuracy, "brevity": 1.0 / max(1, len(solution_str.split()))}
'''


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("failing") / "failing_reward.py"
    path.write_text(FAILING_REWARD)
    return path


def manager(user_file, **policy):
    from omegaconf import OmegaConf
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.trainer.ppo.reward import get_custom_reward_fn

    from vpo.models import build_char_tokenizer

    config = compose_verl(
        ["algorithm.adv_estimator=vpo",
         "reward.custom_reward_function.path=pkg://vpo.integrations.verl_rewards",
         "reward.custom_reward_function.name=compute_score",
         f"+reward.custom_reward_function.reward_kwargs.score_path={user_file}",
         "+reward.custom_reward_function.reward_kwargs.score_name=compute_score",
         "+reward.custom_reward_function.reward_kwargs.reward_keys=[accuracy,brevity]"]
        + [f"+reward.custom_reward_function.reward_kwargs.{k}={v}" for k, v in policy.items()])
    fn = get_custom_reward_fn(config)  # verl's loader: path, name and reward_kwargs from the config
    tokenizer = build_char_tokenizer(string.printable)
    return get_reward_manager_cls("naive")(OmegaConf.create({}), tokenizer, fn), tokenizer


def expected_score(answers, truth, index, failed):
    rows = []
    for answer in answers:
        vector = [0.0, 0.0] if answer in failed else [float(truth in answer) if "none" not in answer else 0.0,
                                                       1.0 / max(1, len(answer.split()))]
        if answer.strip() and vector not in rows:
            rows.append(vector)
    matrix = np.array(rows + [[0.0, 0.0]] * (3 - len(rows)))
    return float(set_scores([matrix], group_weights(index, 2, num_weights=K, seed=SEED))[0])


def test_failed_answers_score_zero_counted_logged_once_and_time_limited(user_file, caplog):
    caplog.set_level(logging.WARNING, logger="vpo.rewards")
    pair = manager(user_file, time_limit=0.3)
    cases = [  # (chain, the answers that fail)
        ("<response_1>an apple</response_1><response_2>boom apple</response_2><response_3>apple nan</response_3>",
         {"boom apple", "apple nan"}),
        ("<response_1>apple</response_1><response_2>a slow apple</response_2><response_3>none of it</response_3>",
         {"a slow apple"}),
        ("<response_1>boom</response_1><response_2>apple pie</response_2>", {"boom"}),
        ("<response_1>apple</response_1><response_2>pear</response_2>", set()),
    ]
    for index, (chain, failed) in enumerate(cases):
        out = run_naive(pair, "my_data", chain, "apple", {"index": index, "answers": 3})
        assert out["reward_score"] == pytest.approx(expected_score(split(chain), "apple", index, failed), abs=1e-12)
        info = out["reward_extra_info"]
        assert info["vpo/reward_failures"] == len(failed)  # this rollout's failed calls
        assert info["vpo/reward_failures/compute_score"] == len(failed)
    messages = [r.getMessage() for r in caplog.records if r.name == "vpo.rewards"]
    for kind in ("KeyError", "NonFiniteReward", "TimeoutError"):
        hits = [m for m in messages if f"'compute_score' failed ({kind})" in m]
        assert len(hits) == 1, (kind, messages)  # boom failed in two rollouts, logged once
    assert "no rubric for boom" in next(m for m in messages if "(KeyError)" in m)


def test_failures_past_the_rate_stop_the_run_naming_function_count_and_option(user_file):
    pair = manager(user_file, max_failure_rate=0.4, failure_window=4)
    bad = "<response_1>boom 1</response_1><response_2>boom 2</response_2><response_3>apple</response_3>"
    run_naive(pair, "my_data", bad, "apple", {"index": 0, "answers": 3})  # 2 of 3 calls: the window is not full
    with pytest.raises(RewardFailureError, match=r"4 of 6 reward calls failed .*'compute_score' \(4\).*"
                                                 r"max_failure_rate=0.4"):
        run_naive(pair, "my_data", bad, "apple", {"index": 1, "answers": 3})  # 4 of 6: the window is full
