"""VPOTrainer(reward_funcs=...) on real (tiny) TRL runs: the one-line switch from GRPOTrainer, single
answers with their columns, parity with TRL at m = 1, reward models, the None rule, TRL's options
mapped or refused, the per-step diagnostics."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from test_rewards import build_reward_model  # noqa: E402
from test_trl_integration import capture_advantages  # noqa: E402
from vpo.estimators import TRL_NORM  # noqa: E402
from vpo.integrations.trl import VPOTrainer  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.rewards import (  # noqa: E402
    CollinearObjectivesWarning,
    RewardScaleWarning,
    completion_text,
    rewrite_chain_prompt,
    score_with_model,
)

PROMPTS = [f"q{i}:" for i in range(4)]
TAGS = [f"<{s}response_{i}>" for i in (1, 2, 3) for s in ("", "/")]


@pytest.fixture(scope="module")
def tok():
    chars = sorted({c for p in PROMPTS for c in rewrite_chain_prompt(p, 3)} | set("abxyz"))
    return build_char_tokenizer(chars, extra_tokens=TAGS)


def dataset(**columns):
    rows = [{"prompt": p, "target": f"t{i}", "index": i} for i, p in enumerate(PROMPTS)]
    for key, values in columns.items():
        for row, value in zip(rows, values, strict=True):
            row[key] = value
    return Dataset.from_list(rows)


def config(tmp_path, **kw):
    values = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4, max_completion_length=24,
                  max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no",
                  use_cpu=True, bf16=False, gradient_checkpointing=False, seed=3, beta=0.0, shuffle_dataset=False,
                  disable_tqdm=True)
    values.update(kw)
    return GRPOConfig(**values)


def a_rate(completions, **kwargs):
    texts = [completion_text(c) for c in completions]
    return [t.count("a") / len(t) if t else 0.0 for t in texts]


def b_rate(completions, **kwargs):
    texts = [completion_text(c) for c in completions]
    return [t.count("b") / len(t) if t else 0.0 for t in texts]


def shortness(completions, **kwargs):
    return [1.0 / (1 + len(completion_text(c))) for c in completions]


def logged(trainer, prefix):
    return [{k: v for k, v in h.items() if k.startswith(prefix)} for h in trainer.state.log_history
            if any(k.startswith(prefix) for k in h)]


# ------------------------------------------------------------------------------------------------
def test_a_grpo_script_switched_in_one_line_trains(tmp_path, tok):
    def script(trainer_class, **switch):
        """A GRPOTrainer script; VPO is the class name and answers=3."""
        trainer = trainer_class(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate, b_rate, shortness],
                                args=config(tmp_path / trainer_class.__name__), train_dataset=dataset(),
                                processing_class=tok, **switch)
        seen = capture_advantages(trainer)
        trainer.train()
        return trainer, torch.cat(seen)

    grpo, _ = script(GRPOTrainer)
    vpo, advantages = script(VPOTrainer, answers=3)
    assert grpo.state.global_step == vpo.state.global_step == 2
    assert torch.isfinite(advantages).all() and advantages.abs().sum() > 0
    # the model was asked for 3 answers in the generic chain format
    assert all("<response_3>" in p for p in vpo._logs["prompt"])
    steps = logged(vpo, "vpo/")
    assert len(steps) == 2
    for step in steps:
        assert {"vpo/objective/a_rate", "vpo/objective/b_rate", "vpo/objective/shortness", "vpo/answers_parsed",
                "vpo/duplicate_rate", "vpo/none/a_rate", "vpo/mean_pool_size"} <= set(step)
    assert any("vpo/effective_dim" in step for step in steps)   # NaN (not logged) only when nothing varies
    assert sum(step["vpo/answers_parsed"] for step in steps) > 0


def test_reward_functions_get_single_answers_with_their_columns(tmp_path, tok):
    calls = []

    def record(prompts, completions, completion_ids, target, index, trainer_state, log_metric, **kwargs):
        calls.append(dict(prompts=list(prompts), completions=list(completions), ids=list(completion_ids),
                          target=list(target), index=list(index), step=trainer_state.global_step))
        log_metric("record/answers", float(len(completions)))
        return [1.0 if "a" in c else 0.0 for c in completions]

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=1), reward_funcs=[record, shortness], answers=3,
                         args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    trainer.train()
    assert [c["step"] for c in calls] == [0, 1]                 # one call per function per step
    completions = list(trainer._logs["completion"])   # TRL keeps the last step's chains
    prompts = list(trainer._logs["prompt"])
    total = 0
    for last, call in enumerate(calls, 1 - len(calls)):
        total += len(call["completions"])
        for prompt, answer, ids, target, index in zip(call["prompts"], call["completions"], call["ids"],
                                                      call["target"], call["index"], strict=True):
            assert prompt in PROMPTS                               # the user's own single-answer prompt
            assert target == f"t{index}" and prompt == PROMPTS[index]  # columns repeated per answer, aligned
            assert answer and "<response" not in answer
            assert tok.decode(ids) == answer                       # completion_ids are the answer's tokens
            # the answer comes from a chain generated for that prompt
            assert last < 0 or any(answer in c and p == rewrite_chain_prompt(prompt, 3) for p, c in zip(prompts, completions,
                                                                                             strict=True))
    assert total > 0
    assert [h["record/answers"] for h in trainer.state.log_history if "record/answers" in h] == \
        [len(c["completions"]) for c in calls]


def test_at_one_answer_it_is_trls_grpo_on_the_weighted_sum(tmp_path, tok):
    results = []
    for which in ("stock", "vpo"):
        args = config(tmp_path / which, reward_weights=[1.0, 0.5], max_completion_length=8)
        model = build_tiny_qwen2(tok, seed=0)
        if which == "stock":
            trainer = GRPOTrainer(model, reward_funcs=[a_rate, shortness], args=args, train_dataset=dataset(),
                                  processing_class=tok)
        else:
            trainer = VPOTrainer(model, reward_funcs=[a_rate, shortness], answers=1, estimator="grpo",
                                 estimator_options=TRL_NORM.as_dict(), args=args, train_dataset=dataset(),
                                 processing_class=tok)
        seen = capture_advantages(trainer)
        trainer.train()
        results.append((list(trainer._logs["completion"]), list(trainer._logs["prompt"]), torch.cat(seen)))
    (comp_s, _, adv_s), (comp_o, prompts_o, adv_o) = results
    assert comp_s == comp_o and set(prompts_o) <= set(PROMPTS)   # same rollouts, prompts untouched
    assert adv_s.abs().sum() > 0
    torch.testing.assert_close(adv_o, adv_s, atol=1e-5, rtol=0)


def test_reward_models_as_objectives(tmp_path, tok):
    reward_tok = build_char_tokenizer(sorted({c for p in PROMPTS for c in p} | set("abxyz")), extra_tokens=TAGS,
                                      padding_side="right")
    single, multi = build_reward_model(reward_tok, 1, 0), build_reward_model(reward_tok, 2, 1)
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=2), reward_funcs=[single, multi, a_rate], answers=3,
                         reward_processing_classes=[reward_tok, reward_tok, None],
                         reward_names=["quality", ("helpful", "harmless"), None], scaling={
                             "quality": "sigmoid", "helpful": "sigmoid", "harmless": "sigmoid"},
                         args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    assert trainer.vpo_objective_names == ("quality", "helpful", "harmless", "a_rate")
    # the one-head model goes through TRL's own reward-model code, the two-head one through ours: same logits
    prompts, answers = ["q0:", "q1:"], ["ab", "xyz"]
    outputs = trainer.call_reward_funcs(prompts, answers, {"target": ["t0", "t1"]})
    np.testing.assert_allclose(outputs[0], score_with_model(single, reward_tok, prompts, answers)[:, 0], atol=1e-5)
    np.testing.assert_allclose(outputs[1], score_with_model(multi, reward_tok, prompts, answers), atol=1e-5)
    assert outputs[1].shape == (2, 2)
    seen = capture_advantages(trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RewardScaleWarning)  # every objective is scaled into [0, 1]
        trainer.train()
    assert torch.isfinite(torch.cat(seen)).all()
    steps = logged(trainer, "vpo/objective/")
    assert steps and all(set(step) == {f"vpo/objective/{n}" for n in trainer.vpo_objective_names} for step in steps)
    assert all(0.0 <= v <= 1.0 for step in steps for v in step.values())


def test_none_rule_in_training_never_gives_nan_advantages(tmp_path, tok):
    def only_even(completions, index, **kwargs):
        """Applies to even rows only: None for every answer of the odd prompts."""
        return [float(len(completion_text(c)) % 2) if i % 2 == 0 else None for c, i in zip(completions, index)]

    def never(completions, **kwargs):
        return [None] * len(completions)

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=4), reward_funcs=[only_even, never, a_rate], answers=3,
                         args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    seen = capture_advantages(trainer)
    trainer.train()
    advantages = torch.cat(seen)
    assert torch.isfinite(advantages).all()
    steps = logged(trainer, "vpo/dropped/")
    assert steps and all(step["vpo/dropped/never"] >= 1 for step in steps)
    assert any(step["vpo/dropped/only_even"] >= 1 for step in steps)

    # every function None: the group keeps no objective and gets a zero advantage, as TRL gives
    nothing = VPOTrainer(build_tiny_qwen2(tok, seed=4), reward_funcs=[never], answers=3,
                         args=config(tmp_path / "none", max_steps=1), train_dataset=dataset(), processing_class=tok)
    seen = capture_advantages(nothing)
    nothing.train()
    assert torch.equal(torch.cat(seen), torch.zeros_like(torch.cat(seen)))


def test_trl_options_are_mapped_or_refused(tmp_path, tok):
    def make(estimator="vpo", answers=3, **kw):
        return VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate, b_rate], answers=answers,
                          estimator=estimator, args=config(tmp_path, **kw), train_dataset=dataset(),
                          processing_class=tok)

    assert make(scale_rewards="none").vpo_options["scale"] == "none"
    assert make(scale_rewards="batch", estimator="grpo", answers=1).vpo_options["scale"] == "batch"
    assert "scale" not in make().vpo_options                   # TRL's default "group" is the estimators' too
    with pytest.raises(ValueError, match="scale_rewards='none': estimator 'maxrl' has no 'scale'"):
        make(estimator="maxrl", answers=1, scale_rewards="none")
    with pytest.raises(ValueError, match="normalize_then_sum.*estimator='gdpo'"):
        make(multi_objective_aggregation="normalize_then_sum")
    gdpo = make(estimator="gdpo", multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 2.0])
    assert gdpo.vpo_options["whiten"] == "trl" and gdpo.vpo_options["objective_weights"].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="draws its own weights"):
        make(reward_weights=[1.0, 2.0])
    grpo = make(estimator="multi_rlvr", reward_weights=[1.0, 2.0])
    np.testing.assert_allclose(grpo._vpo_scalar(np.array([[1.0, 1.0], [0.5, 0.0]])), [3.0, 0.5])
    with pytest.raises(ValueError, match="exactly one of task= .* and reward_funcs="):
        VPOTrainer(build_tiny_qwen2(tok, seed=0), args=config(tmp_path), train_dataset=dataset(), processing_class=tok)
    with pytest.raises(ValueError, match="scaling 'nope'|must be one of"):
        VPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=[a_rate], answers=3, scaling="nope",
                   args=config(tmp_path), train_dataset=dataset(), processing_class=tok)


def test_collinear_objectives_warn_once(tmp_path, tok):
    def twice_a(completions, **kwargs):
        return [min(1.0, 2 * r) for r in a_rate(completions)]

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=5), reward_funcs=[a_rate, twice_a], answers=3,
                         args=config(tmp_path, max_steps=1), train_dataset=dataset(), processing_class=tok)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for value in (1.05, 1.0, 1.1, 1.0, 1.0):
            trainer._check_collinear(value, 2)
    collinear = [w for w in caught if issubclass(w.category, CollinearObjectivesWarning)]
    assert len(collinear) == 1 and "effective dimension stayed below" in str(collinear[0].message)
    fresh = VPOTrainer(build_tiny_qwen2(tok, seed=5), reward_funcs=[a_rate, b_rate], answers=3,
                       args=config(tmp_path, max_steps=1), train_dataset=dataset(), processing_class=tok)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for value in (1.0, 1.0, 1.9, 1.0, 1.0):  # never three low batches in a row
            fresh._check_collinear(value, 2)
        fresh._check_collinear(1.0, 1)            # one objective: nothing to compare
    assert not [w for w in caught if issubclass(w.category, CollinearObjectivesWarning)]


def test_the_collinear_warning_is_for_methods_that_read_the_vector(tmp_path, tok):
    """GRPO trains on the sum of the objectives: "a reward vector adds little over their sum" is
    no advice for it. VPO (above) reads the vector and is warned."""
    def twice_a(completions, **kwargs):
        return [min(1.0, 2 * r) for r in a_rate(completions)]

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=5), reward_funcs=[a_rate, twice_a], answers=1, estimator="grpo",
                         args=config(tmp_path, max_steps=1), train_dataset=dataset(), processing_class=tok)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for value in (1.05, 1.0, 1.1, 1.0, 1.0):
            trainer._check_collinear(value, 2)
    assert not [w for w in caught if issubclass(w.category, CollinearObjectivesWarning)]


def test_an_objective_that_never_moves_warns_once_in_training(tmp_path, tok):
    """TRL's accuracy_reward stays 0 when the model never writes what it reads: a warning names it
    (under any method: a constant objective gives no gradient), and not the one that moves."""
    from vpo.step_metrics import STILL_BATCHES, StillObjectiveWarning

    def accuracy(completions, **kwargs):
        return [0.0 for _ in completions]

    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=5), reward_funcs=[a_rate, accuracy], answers=1, estimator="grpo",
                         args=config(tmp_path, max_steps=STILL_BATCHES + 1, max_completion_length=8),
                         train_dataset=dataset(), processing_class=tok)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    still = [str(w.message) for w in caught if issubclass(w.category, StillObjectiveWarning)]
    assert len(still) == 1 and "objective 'accuracy' (0)" in still[0] and "a_rate" not in still[0], still
    assert f"first {STILL_BATCHES} batches" in still[0]


def test_chains_that_write_more_or_fewer_than_m_answers_are_counted(tmp_path, tok):
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=5), reward_funcs=[a_rate], answers=3,
                         args=config(tmp_path, max_steps=1), train_dataset=dataset(), processing_class=tok)
    completions = ["<response_1>a</response_1><response_2>b</response_2><response_3>x</response_3>"
                   "<response_1>y</response_1>",                                     # four answers for m = 3
                   "<response_1>a</response_1><response_2>b</response_2>", "a", "<response_3>ab</response_3>"]
    prompts = [trainer.vpo_scorer.chain_prompt(p) for p in PROMPTS]
    trainer.vpo_scorer.score(prompts, completions, None, {})
    assert trainer._pending_metrics["vpo/over_m_rate"] == [0.25]
    assert trainer._pending_metrics["vpo/under_m_rate"] == [0.5]  # two answers, and one; "a" has no tags
