"""Own rewards on a model that does not write m answers, and rewards that judge the whole completion,
through VPOTrainer on tiny CPU runs: the parse-rate warning and the "no gradient" step line, the
untagged fallback, chain-level functions called once per completion, a function that fails on
every call stopping the run at its first step, and a missing dataset column named as such."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402

from test_trl_integration import TEST_DIRS, capture_advantages  # noqa: E402
from test_trl_own_rewards import PROMPTS, a_rate, config, dataset, tok  # noqa: E402,F401
from vpo.estimators import advantages_from_scores, get_spec  # noqa: E402
from vpo.integrations.trl import VPOTrainer, step_line  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.reward_failures import RewardContractError, RewardFailureError  # noqa: E402
from vpo.rewards import chain_level, completion_text, rewrite_chain_prompt  # noqa: E402
from vpo.step_metrics import ChainFormatWarning  # noqa: E402


@pytest.fixture(scope="module")
def plain_tok():
    """Characters only, no tag tokens: a tiny random model does not write `<response_i>` tags with it."""
    return build_char_tokenizer(sorted({c for p in PROMPTS for c in rewrite_chain_prompt(p, 3)} | set("abxyz")))


def untagged_trainer(tmp_path, tok, *, steps=1, **kwargs):
    return VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate], answers=3,
                      args=config(tmp_path, max_steps=steps, max_completion_length=12), train_dataset=dataset(),
                      processing_class=tok, **kwargs)


def test_completions_that_never_parse_warn_once_and_the_step_line_says_no_gradient(tmp_path, plain_tok):
    trainer = untagged_trainer(tmp_path, plain_tok, steps=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    found = [w for w in caught if issubclass(w.category, ChainFormatWarning)]
    assert len(found) == 1, [str(w.message) for w in found]
    message = str(found[0].message)
    assert "only 0 of 8 completions (0%)" in message  # the share, then the remedies
    assert "--untagged-fallback" in message and "`vpo warmup`" in message
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert len(steps) == 3
    for logs in steps:
        assert logs["vpo/parse_rate"] == 0.0 and logs["vpo/frac_zero_std"] == 1.0
        assert not any(key.startswith("vpo/correlation/") for key in logs)  # nothing varied: no correlation
    line = step_line(steps[0], 1, 3)
    assert "no gradient: nothing parsed" in line, line


def test_the_untagged_fallback_gives_untagged_completions_that_differ_an_advantage(tmp_path, plain_tok):
    runs = {}
    for fallback in (False, True):
        trainer = untagged_trainer(tmp_path / str(fallback), plain_tok, untagged_fallback=fallback)
        seen = capture_advantages(trainer)
        trainer.train()
        runs[fallback] = (trainer, torch.cat(seen).double())
    (off, off_adv), (on, on_adv) = runs[False], runs[True]
    assert list(off._logs["completion"]) == list(on._logs["completion"])   # the same rollouts
    assert torch.equal(off_adv, torch.zeros_like(off_adv))                 # nothing parsed: no gradient
    assert on_adv.abs().max() > 0.5
    # by hand: each completion is its one answer (D = 1, so the set score is its a_rate), VPO's rule per prompt
    completions = [completion_text(c).strip() for c in on._logs["completion"]]
    scores = [c.count("a") / len(c) if c else 0.0 for c in completions]
    assert np.ptp(scores) > 0
    expected = advantages_from_scores(get_spec("vpo"), scores, np.arange(len(scores)) // 4)
    np.testing.assert_allclose(list(on._logs["advantages"]), expected, atol=1e-5)   # TRL's order
    np.testing.assert_allclose(np.sort(on_adv.numpy()), np.sort(expected), atol=1e-5)  # the loss's (shuffled)
    logs = on.state.log_history[0]
    assert logs["vpo/parse_rate"] == 0.0 and logs["vpo/unparseable"] == 0.0  # untagged, and yet scored


def test_a_chain_level_function_is_called_once_per_completion(tmp_path, tok):
    calls = []

    @chain_level
    def budget(prompts, completions, completion_ids, index, **kwargs):
        calls.append((list(prompts), list(completions), [list(ids) for ids in completion_ids], list(index)))
        return [1.0 - len(ids) / 24 for ids in completion_ids]

    async def a_share(completions, **kwargs):  # an async answer-level function beside it, as TRL takes them
        return a_rate(completions)

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=1), reward_funcs=[a_share, budget], answers=3,
                         args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    seen = capture_advantages(trainer)
    trainer.train()
    assert trainer.vpo_objective_names == ("a_share", "budget")
    assert len(calls) == 2                                       # once per step
    for prompts, completions, ids, index in calls:
        assert len(completions) == len(ids) == 8                  # once per completion, never per answer
        assert prompts == [PROMPTS[i] for i in index]             # the user's own prompt
        assert all(0 < len(i) <= 24 for i in ids)                 # the whole completion's tokens
    assert calls[-1][1] == list(trainer._logs["completion"])      # the whole completions TRL generated
    assert torch.isfinite(torch.cat(seen)).all()
    assert all("vpo/objective/budget" in h for h in trainer.state.log_history if "reward" in h)


def broken(completions, **kwargs):
    """A reward function whose every call fails (an API that is down)."""
    raise ConnectionError("reward server unreachable")


def test_two_functions_one_always_failing_stop_at_the_first_step(tmp_path, tok):
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[broken, a_rate], answers=1,
                         args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    with pytest.raises(RewardFailureError, match=r"'broken' failed on every one of its 8 calls in its first step: a "
                                                 r"setup fault.*ConnectionError: reward server unreachable"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_a_missing_dataset_column_is_named(tmp_path, tok):
    def accuracy(completions, solution, **kwargs):
        return [float(completion_text(c).strip() == s) for c, s in zip(completions, solution, strict=True)]

    # named at construction, before any step: the dataset's columns are known then
    with pytest.raises(RewardContractError, match=r"'accuracy' needs the dataset column 'solution', which the data "
                                                  r"does not have \(its columns: index, target\)"):
        VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[accuracy, a_rate], answers=1,
                   args=config(tmp_path), train_dataset=dataset(), processing_class=tok)


_TORCHRUN_SCRIPT = """
import json, sys
import torch
sys.path[:0] = {test_dirs!r}
from test_trl_own_rewards import a_rate, b_rate, config, dataset, PROMPTS, TAGS
from test_trl_integration import capture_advantages
from vpo.integrations.trl import VPOTrainer
from vpo.models import build_char_tokenizer, build_tiny_qwen2
from vpo.rewards import rewrite_chain_prompt
tok = build_char_tokenizer(sorted({{c for p in PROMPTS for c in rewrite_chain_prompt(p, 3)}} | set("abxyz")),
                           extra_tokens=TAGS)
args = config({out!r}, per_device_train_batch_size=4, num_generations=8, max_steps=2, max_completion_length=16)
trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate, b_rate], answers=3, args=args,
                     train_dataset=dataset(), processing_class=tok, untagged_fallback=True)
seen = capture_advantages(trainer)
trainer.train()
rank = trainer.accelerator.process_index
json.dump({{"rank": rank, "adv": torch.cat(seen).tolist(), "logged": list(trainer._logs["advantages"]),
           "completions": list(trainer._logs["completion"])}}, open({out!r} + f"/rank{{rank}}.json", "w"))
"""


@pytest.mark.slow
def test_two_rank_torchrun_with_reward_functions_and_a_group_across_ranks(tmp_path):
    """Two gloo ranks, one group of 8 split 4 + 4: the answers are gathered and finished together,
    and both ranks log the same global advantages."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(_TORCHRUN_SCRIPT.format(test_dirs=TEST_DIRS, out=str(tmp_path)))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["logged"] == ranks[1]["logged"] and len(ranks[0]["logged"]) == 8
    assert ranks[0]["completions"] == ranks[1]["completions"]
    assert abs(sum(ranks[0]["logged"])) < 1e-4 and max(map(abs, ranks[0]["logged"])) > 0.1  # one centred group
    for r in ranks:
        assert len(r["adv"]) == 2 * 4  # 2 steps x 4 local completions


def test_the_step_line_shows_chains_over_m_under_m_and_cut_at_the_budget():
    from vpo.integrations.trl import BUDGET_KEY, chain_shares

    logs = {"reward": 0.5, "vpo/over_m_rate": 0.828, "vpo/under_m_rate": 0.125, BUDGET_KEY: 0.92,
            "vpo/objective/accuracy": 0.0}
    line = step_line(logs, 3, 12)
    assert "83% over m" in line and "12% under m" in line and "92% cut" in line, line
    quiet = step_line({"reward": 0.5, "vpo/over_m_rate": 0.0, "vpo/under_m_rate": 0.0, BUDGET_KEY: 0.0}, 3, 12)
    assert "over m" not in quiet and "under m" not in quiet and "cut" not in quiet  # shown when not 0
    history = [logs, {"reward": 0.7, "vpo/over_m_rate": 0.5, "vpo/under_m_rate": 0.375, BUDGET_KEY: 0.5},
               {"train_runtime": 3.0}]
    assert chain_shares(history) == {"chains_over_m": 0.664, "chains_under_m": 0.25, "chains_at_budget": 0.71}
    assert chain_shares([{"reward": 0.1, BUDGET_KEY: 0.25}]) == {"chains_over_m": None, "chains_under_m": None,
                                                                 "chains_at_budget": 0.25}
