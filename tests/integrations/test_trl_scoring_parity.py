"""One set of reward functions, TRL's own among them, scored through ``vpo train``'s scorer
(``VPOTrainer``'s ``FunctionScorer`` with its call loop), ``vpo eval``'s (the ``own_rewards`` task's
``score_generations``) and ``vpo rewards check``'s (``score_chains``) on the same completions and
tokens: every value equal, at m = 3 and at m = 1. Then a chain-level overlong reward through the
trainer: three answers of one answer's length score what one answer scores at m = 1."""

from __future__ import annotations

import string

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("math_verify")
pytest.importorskip("datasets")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig  # noqa: E402
from trl.rewards import (accuracy_reward, get_cosine_scaled_reward, get_repetition_penalty_reward,  # noqa: E402
                         get_soft_overlong_punishment, think_format_reward)

from vpo.integrations.trl import VPOTrainer  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.reward_failures import RewardFailurePolicy, RewardFailures  # noqa: E402
from vpo.rewards import CHAIN_TAG, completion_text, score_chains  # noqa: E402
from vpo.tasks.own_rewards import OwnRewardsTask  # noqa: E402

TAGS = [f"<{s}{CHAIN_TAG}_{i}>" for i in (1, 2, 3) for s in ("", "/")] + ["<think>", "</think>"]


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(string.printable, extra_tokens=TAGS)


def shows_work(prompts, completions, expression, **kwargs):
    """An own function: 1 when the answer writes the expression out; fails on answers that say 'boom'."""
    texts = [completion_text(c) for c in completions]
    if any("boom" in t for t in texts):
        raise ConnectionError("grader down")
    return [float(e in t) for t, e in zip(texts, expression, strict=True)]


FUNCS = [accuracy_reward, think_format_reward, get_soft_overlong_punishment(40, 20),
         get_repetition_penalty_reward(ngram_size=2), get_cosine_scaled_reward(max_len=30), shows_work]
SCALING = {"soft_overlong_punishment_reward": (-1.0, 0.0), "repetition_penalty_reward": (-1.0, 0.0),
           "cosine_scaled_reward": (-1.0, 1.0)}
ROWS = [{"prompt": [{"role": "user", "content": "What is 2+2?"}], "solution": "$4$", "expression": "2+2=4"},
        {"prompt": [{"role": "user", "content": "What is 3*3?"}], "solution": "$9$", "expression": "3*3=9"}]


def chains(m):
    """Per row, the generated chains: answers first, no two alike (the dedup keeps every row)."""
    if m == 1:
        return [["<think>easy</think>2+2=4 so \\boxed{4}", "\\boxed{5}", "boom \\boxed{4}"],
                ["3*3=9 \\boxed{9} \\boxed{9} \\boxed{9}", "no idea", ""]]
    return [["<response_1>2+2=4 so \\boxed{4}</response_1><response_2>\\boxed{5}</response_2>"
             "<response_3>boom</response_3>", "<think>hm</think><response_1>\\boxed{4}</response_1>"],
            ["<response_1>3*3=9, \\boxed{9}</response_1><response_2>nine nine nine nine</response_2>",
             "no tags at all, " * 5]]


def trainer_for(tok, tmp_path, m):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=200, use_cpu=True, bf16=False, report_to="none", save_strategy="no")
    return VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=list(FUNCS), answers=m, args=args,
                      train_dataset=Dataset.from_list(ROWS), processing_class=tok, scaling=SCALING,
                      reward_failures=RewardFailurePolicy(max_failure_rate=0.9))


@pytest.mark.parametrize("m", [3, 1])
def test_train_eval_and_the_check_score_the_same_completions_identically(tok, tmp_path, m):
    texts = chains(m)
    ids = [[tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in row] for row in texts]
    # vpo train: TRL passes the m-answer prompts it sent, assistant turns, their tokens and its hooks
    trainer = trainer_for(tok, tmp_path, m)
    sent = [trainer.chain_prompt(row["prompt"]) for row in ROWS for _ in texts[0]]
    flat = [t for row in texts for t in row]
    columns = {"solution": [row["solution"] for row in ROWS for _ in texts[0]],
               "expression": [row["expression"] for row in ROWS for _ in texts[0]],
               "trainer_state": trainer.state, "log_metric": trainer.log_metric}
    trained = trainer.vpo_scorer.score(sent, [[{"role": "assistant", "content": t}] for t in flat],
                                       [i for row in ids for i in row], columns)
    assert trainer.vpo_objective_names == ("accuracy_reward", "think_format_reward", "soft_overlong_punishment_reward",
                                           "repetition_penalty_reward", "cosine_scaled_reward", "shows_work")
    # vpo eval: the own_rewards task on each row's chains, with the sampler's tokens
    task = OwnRewardsTask(list(FUNCS), scaling=SCALING, max_failure_rate=0.9)
    # vpo rewards check: score_chains on the file's rows
    checked = score_chains(list(FUNCS), [row["prompt"] for row in ROWS for _ in texts[0]],
                           [[{"role": "assistant", "content": t}] for t in flat], answers=m, scaling=SCALING,
                           completion_ids=[i for row in ids for i in row], tokenizer=tok,
                           failures=RewardFailures(RewardFailurePolicy(max_failure_rate=0.9)),
                           solution=columns["solution"], expression=columns["expression"])
    c = 0
    for row, row_texts, row_ids in zip(ROWS, texts, ids, strict=True):
        slots = task.score_generations(row_texts, row, m, completion_ids=row_ids, tokenizer=tok)
        for chain_slots in slots:
            # answers fill the first slots and differ: the trainer's matrix is the eval's slots, value for value
            np.testing.assert_array_equal(trained.matrices[c], chain_slots)
            np.testing.assert_array_equal(checked.matrices[c], chain_slots)
            c += 1
    assert task.failures.totals()["failed"] == 1 == trainer.vpo_failures.totals()["failed"]  # 'boom', once each
    every = np.stack(trained.matrices)
    assert np.ptp(every, axis=(0, 1)).min() > 0   # each objective varies: the comparison means something
    assert every.min() >= 0.0 and every.max() <= 1.0


def test_a_chain_level_overlong_reward_at_three_answers_scores_three_single_length_answers_as_one(tok, tmp_path):
    """The trainer's own scorer: a chain of three answers of one answer's length at m = 3 gets the value
    one such answer gets at m = 1 (the budget is one answer's, x m: said in ``vpo_length_budgets``)."""
    values = {}
    for m in (1, 3):
        args = GRPOConfig(output_dir=str(tmp_path / str(m)), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=30 * m, use_cpu=True, bf16=False, report_to="none",
                          save_strategy="no")
        trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[get_soft_overlong_punishment(30, 10)],
                             answers=m, args=args, train_dataset=Dataset.from_list([{"prompt": "q"}]),
                             processing_class=tok, scaling=(-1.0, 0.0))
        text = "x" if m == 1 else "<response_1>x</response_1><response_2>y</response_2><response_3>z</response_3>"
        chains_ = trainer.vpo_scorer.score([trainer.chain_prompt("q")] * 2, [text] * 2, [[5] * 25 * m] * 2, {})
        values[m] = chains_.matrices[0][:, 0]
        assert (m == 1) == (trainer.vpo_length_budgets == [])
    assert values[1][0] == pytest.approx(0.5)                  # (30 - 10 - 25) / 10 = -0.5, scaled to [0, 1]
    np.testing.assert_allclose(values[3], values[1][0])        # every row of the 3-answer chain
    # the budget past the generated length is said: chains are cut before the punishment is whole
    args = GRPOConfig(output_dir=str(tmp_path / "cut"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=60, use_cpu=True, bf16=False, report_to="none", save_strategy="no")
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[get_soft_overlong_punishment(30, 10)], answers=3,
                         args=args, train_dataset=Dataset.from_list([{"prompt": "q"}]), processing_class=tok)
    assert trainer.vpo_length_budgets[0].startswith("soft_overlong_punishment_reward: a chain of 3 answers is judged "
                                                    "against 3 x one answer's length budget")
    assert "punishes past 90 tokens, but completions stop at max_completion_length 60" in trainer.vpo_length_budgets[1]
