"""VPOReward and VPOTrainer on real (tiny) TRL runs: parity with TRL's GRPO advantages, shared
weights, learning, the private-hook canary, the presets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from vpo.chains import RewriteRule  # noqa: E402
from vpo.integrations.trl import (  # noqa: E402
    EXPECTED_TRL_HOOKS,
    RLConfig,
    TaskReward,
    VPOReward,
    VPOTrainer,
    check_trl_hooks,
    completion_text,
    group_weights,
    parse_example,
    prompt_key,
    task_reward,
    vpo_reward,
)
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from toy_tasks import RatesTask  # noqa: E402
from vpo.tasks import register_task  # noqa: E402


@register_task("toy_ab")
class ToyAB(RatesTask):
    """``RatesTask`` (the fractions of 'a' and 'b') with four examples."""

    rewrite_rule = RewriteRule("toy_ab", template=":{m}:", pattern=":")

    def examples(self, split="train", n=None, *, seed=None, source=None):
        return [{"id": i} for i in range(n or 4)]


ALPHABET = "ab|q:0123456789xyz"


def make_dataset(task, m, n):
    rows = [{"prompt": task.prompt(ex, m), "example": json.dumps(ex), "task": task.name,
             "answers": m, "index": i} for i, ex in enumerate(task.examples("train", n))]
    return Dataset.from_list(rows)


def make_config(tmp_path, **kw):
    values = dict(output_dir=str(tmp_path), per_device_train_batch_size=8, num_generations=4,
                  max_completion_length=8, max_steps=1, learning_rate=1e-3, logging_steps=1,
                  report_to="none", save_strategy="no", use_cpu=True, bf16=False,
                  gradient_checkpointing=False, seed=7, beta=0.0, shuffle_dataset=False)
    values.update(kw)
    return GRPOConfig(**values)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer(ALPHABET)


@pytest.fixture(scope="module")
def task():
    return ToyAB()


def capture_advantages(trainer):
    """Record the advantages that reach the loss."""
    seen = []
    original = trainer._compute_loss

    def wrapped(model, inputs):
        seen.append(inputs["advantages"].detach().clone())
        return original(model, inputs)

    trainer._compute_loss = wrapped
    return seen


def scalar_reward(task, m):
    def task_scalar(prompts, completions, example, **kwargs):
        return [float(np.max(task.scalar(task.score_chain(completion_text(c), parse_example(e), m))))
                for c, e in zip(completions, example, strict=True)]
    return task_scalar


# ------------------------------------------------------------------------------------------
def test_canary_trl_private_hooks_have_expected_signatures():
    check_trl_hooks()  # raises on a TRL that changed them
    import inspect

    for name, params in EXPECTED_TRL_HOOKS.items():
        assert tuple(inspect.signature(getattr(GRPOTrainer, name)).parameters) == params

    class Changed(GRPOTrainer):
        def _calculate_rewards(self, inputs, prompts, completions):  # a changed hook
            return None

    with pytest.raises(RuntimeError, match="_calculate_rewards"):
        check_trl_hooks(Changed)


def test_a_missing_private_trl_member_fails_at_construction_in_one_line(tmp_path, tok, task, monkeypatch):
    from vpo.integrations.trl import PRIVATE_MEMBERS, TRL_VERSIONS

    assert set(EXPECTED_TRL_HOOKS) < set(PRIVATE_MEMBERS) and TRL_VERSIONS == "1.16.*"
    for member in EXPECTED_TRL_HOOKS:
        with monkeypatch.context() as patch:
            patch.delattr(GRPOTrainer, member)
            with pytest.raises(RuntimeError) as caught:
                VPOTrainer(build_tiny_qwen2(tok, seed=0), task=task, args=make_config(tmp_path),
                           train_dataset=make_dataset(task, 1, 2), processing_class=tok)
        message = str(caught.value)
        assert f"GRPOTrainer.{member}" in message and "trl 1.16.*" in message and "\n" not in message, message


def test_helpers():
    assert prompt_key("x") == "x"
    chat = [{"role": "user", "content": "hi"}]
    assert prompt_key(chat) == prompt_key([dict(content="hi", role="user")])
    assert completion_text([{"role": "assistant", "content": "ab"}]) == "ab"
    assert parse_example('{"id": 3}') == {"id": 3} == parse_example({"id": 3})
    with pytest.raises(ValueError, match="example"):
        parse_example("[1, 2]", 5)
    w = group_weights(0, "q1:", 3, 100, 2)
    assert w.shape == (100, 2) and np.allclose(w.sum(1), 1)
    assert np.array_equal(w, group_weights(0, "q1:", 3, 100, 2))
    assert not np.array_equal(w, group_weights(0, "q1:", 4, 100, 2))


def test_vpo_reward_shares_weights_within_a_prompt(task):
    reward = VPOReward(task, answers=2, seed=1, num_weights=50)
    logged = {}
    prompts = ["q1::2:"] * 3 + ["q2::2:"] * 3
    completions = ["a|b", "ab|b", "aab|bb", "a|b", "ab|b", "aab|bb"]
    examples = [json.dumps({"id": 1})] * 3 + [{"id": 2}] * 3
    state = SimpleNamespace(global_step=5)
    scores = reward(prompts, completions, example=examples, trainer_state=state,
                    log_metric=lambda k, v: logged.__setitem__(k, v))
    # hand computation with the keyed weights of each prompt
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        w = group_weights(1, p, 5, 50, 2)
        mat = task.score_chain(c, {"id": 1}, 2)
        assert scores[i] == pytest.approx(float((w @ mat.T).max(axis=1).mean()), abs=1e-12)
    # "a|b" covers both objectives: E_w[max] = E[max(w1, w2)] ~ 0.75, more than one answer "ab"
    assert scores[0] > 0.6
    assert set(logged) >= {"vpo/objective/a_rate", "vpo/objective/b_rate", "vpo/answers_parsed",
                           "vpo/duplicate_rate"}
    assert logged["vpo/answers_parsed"] == 2.0
    dup = reward(["q1::2:"], ["ab|ab"], example=[{"id": 1}], trainer_state=state,
                 log_metric=lambda k, v: logged.__setitem__(k, v))
    assert logged["vpo/duplicate_rate"] == 0.5 and dup[0] == pytest.approx(0.5)
    # same weights for the same (prompt, step) and different ones at another step
    assert np.array_equal(reward.weights("q1::2:", 5, 2), reward.weights("q1::2:", 5, 2))
    assert not np.array_equal(reward.weights("q1::2:", 5, 2), reward.weights("q1::2:", 6, 2))
    assert not np.array_equal(reward.weights("q1::2:", 5, 2), reward.weights("q2::2:", 5, 2))
    with pytest.raises(ValueError, match="example"):
        reward(["q1:"], ["a"])


def _run_pair(tmp_path, tok, task, stock_reward, estimator, options, m):
    ds = make_dataset(task, m, 4)
    results = []
    for which in ("stock", "vpo"):
        model = build_tiny_qwen2(tok, seed=0)
        args = make_config(tmp_path / which)
        if which == "stock":
            trainer = GRPOTrainer(model, reward_funcs=stock_reward, args=args, train_dataset=ds,
                                  processing_class=tok)
        else:
            trainer = VPOTrainer(model, task=task, answers=m, estimator=estimator,
                                 estimator_options=options, args=args, train_dataset=ds,
                                 processing_class=tok)
        seen = capture_advantages(trainer)
        trainer.train()
        results.append((trainer, torch.cat(seen), list(trainer._logs["completion"]),
                        list(trainer._logs["advantages"])))
    return results


def test_vpo_trainer_grpo_reproduces_trl_advantages(tmp_path, tok, task):
    (stock, adv_s, comp_s, log_s), (ours, adv_o, comp_o, log_o) = _run_pair(
        tmp_path, tok, task, scalar_reward(task, 1), "grpo",
        {"std": "sample", "eps": 1e-4, "degenerate": "none"}, 1)
    assert comp_s == comp_o  # same seed, same model: same rollouts
    assert adv_s.abs().max() > 0.1  # non-trivial batch
    torch.testing.assert_close(adv_o, adv_s, atol=1e-6, rtol=0)
    np.testing.assert_allclose(log_o, log_s, atol=1e-6)
    logs = ours.state.log_history[0]
    assert logs["rewards/task/mean"] == pytest.approx(stock.state.log_history[0]["rewards/task_scalar/mean"])


def test_vpo_trainer_vpo_matches_stock_trainer_with_vpo_reward(tmp_path, tok, task):
    """Both routes share the keyed weights, so with TRL's normalisation they agree."""
    m = 2
    (stock, adv_s, comp_s, _), (ours, adv_o, comp_o, _) = _run_pair(
        tmp_path, tok, task, VPOReward(task, answers=m, seed=3, num_weights=64), "vpo",
        {"std": "sample", "eps": 1e-4, "degenerate": "none", "seed": 3, "num_weights": 64}, m)
    assert comp_s == comp_o
    torch.testing.assert_close(adv_o, adv_s, atol=1e-6, rtol=0)
    logs = ours.state.log_history[0]
    assert any(k.startswith("vpo/") and k not in ("vpo/answers_parsed", "vpo/duplicate_rate")
               and not k.startswith("vpo/objective") for k in logs), logs  # estimator diagnostics
    assert "vpo/objective/a_rate" in logs and "vpo/objective/a_rate" in stock.state.log_history[0]


@pytest.mark.parametrize("estimator,m", [("multi_rlvr", 2), ("max_at_k", 1)])
def test_other_estimators_run(tmp_path, tok, task, estimator, m):
    ds = make_dataset(task, m, 2)
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), task=task, answers=m, estimator=estimator,
                         args=make_config(tmp_path), train_dataset=ds, processing_class=tok)
    seen = capture_advantages(trainer)
    trainer.train()
    assert torch.isfinite(torch.cat(seen)).all()


def test_vpo_trainer_rejects_bad_setups(tmp_path, tok, task):
    ds = make_dataset(task, 1, 2)
    model = build_tiny_qwen2(tok, seed=0)
    with pytest.raises(ValueError, match="reward_funcs"):
        VPOTrainer(model, task=task, reward_funcs=[scalar_reward(task, 1)], args=make_config(tmp_path),
                   train_dataset=ds, processing_class=tok)
    with pytest.raises(ValueError, match="example"):
        VPOTrainer(model, task=task, args=make_config(tmp_path),
                   train_dataset=ds.remove_columns("example"), processing_class=tok)
    with pytest.raises(ValueError):
        VPOTrainer(model, task=task, estimator="no_such_estimator", args=make_config(tmp_path),
                   train_dataset=ds, processing_class=tok)
    with pytest.raises(ValueError, match="answers=1"):
        VPOTrainer(model, task=task, answers=2, estimator="grpo", args=make_config(tmp_path),
                   train_dataset=ds, processing_class=tok)
    with pytest.raises(ValueError, match="does not accept"):
        VPOTrainer(model, task=task, estimator="grpo", estimator_options={"num_weights": 3},
                   args=make_config(tmp_path), train_dataset=ds, processing_class=tok)
    with pytest.raises(ValueError, match="step"):
        VPOTrainer(model, task=task, estimator_options={"step": 3}, args=make_config(tmp_path),
                   train_dataset=ds, processing_class=tok)


def test_short_run_changes_parameters_and_raises_reward(tmp_path, tok, task):
    ds = make_dataset(task, 1, 4)
    model = build_tiny_qwen2(tok, seed=1)
    before = [p.detach().clone() for p in model.parameters()]
    args = make_config(tmp_path, max_steps=10, learning_rate=3e-2, per_device_train_batch_size=8,
                       num_generations=8, max_completion_length=6, seed=1)
    trainer = VPOTrainer(model, task=task, answers=1, estimator="vpo", args=args, train_dataset=ds,
                         processing_class=tok)
    trainer.train()
    after = list(trainer.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    assert len(rewards) == 10
    # measured (seeds 1-3): ~0.05 over the first 3 steps, 0.35-0.45 over the last 3
    first, last = np.mean(rewards[:3]), np.mean(rewards[-3:])
    assert last > first + 0.15, rewards


def test_rl_config_presets():
    cfg = RLConfig().to_grpo_config("out", task="maze", answers=3)
    assert cfg.learning_rate == 1e-6 and cfg.lr_scheduler_type == "constant"
    assert (cfg.adam_beta1, cfg.adam_beta2, cfg.weight_decay) == (0.9, 0.999, 0.01)
    assert cfg.epsilon == 0.2 and cfg.beta == 1e-3 and cfg.num_generations == 8
    assert cfg.temperature == 1.0 and cfg.num_train_epochs == 2
    assert cfg.max_completion_length == 2 * RLConfig().to_grpo_config("o", task="maze").max_completion_length
    assert RLConfig().to_grpo_config("o", task="toolcall").num_train_epochs == 20
    if not torch.cuda.is_available():
        assert cfg.use_cpu and not cfg.bf16 and not cfg.gradient_checkpointing
    assert RLConfig(max_completion_length=40).to_grpo_config("o", answers=3).max_completion_length == 40
    with pytest.raises(ValueError, match="num_generations"):
        RLConfig(num_generations=1).to_grpo_config("o")


# ---- TaskReward and the dotted-path rewards ------------------------------------
def test_task_reward_is_the_best_answers_fixed_scalar(task):
    logged = {}
    reward = TaskReward(task, answers=2)
    scores = reward(["q1::2:"] * 3, ["a|b", "ab|xy", ""], example=[{"id": 1}] * 3, answers=[2, 2, 2],
                    log_metric=lambda k, v: logged.__setitem__(k, v))
    # ToyAB's fixed scalar is the mean of (a_rate, b_rate): "a" -> 0.5, "b" -> 0.5; "ab" -> 0.5, "xy" -> 0
    assert scores == [0.5, 0.5, 0.0]
    assert logged["vpo/answers_parsed"] == pytest.approx(4 / 3) and "vpo/objective/a_rate" in logged
    assert TaskReward(task)(["q1:"], ["aab"], example=['{"id": 1}']) == [pytest.approx(0.5)]
    with pytest.raises(ValueError, match="built for answers=3"):
        TaskReward(task)(["q1:"], ["a"], example=[{"id": 1}], answers=[3])
    with pytest.raises(ValueError, match="built for answers=1"):
        VPOReward(task, answers=3)(["q1:"], ["a"], example=[{"id": 1}], answers=[1])


def test_stock_rewards_log_the_parse_rate_and_take_the_untagged_fallback():
    from toy_tasks import LetterTask

    letters = LetterTask()  # answers in <ans_i> tags; scores which of a, b, c an answer holds
    logged = {}
    untagged = ["abc, with no tags", "<ans_1>a</ans_1><ans_2>b</ans_2>"]
    plain = TaskReward(letters, answers=2)(["0 ANSWER"] * 2, untagged, example=[{"id": 0}] * 2,
                                           log_metric=lambda k, v: logged.__setitem__(k, v))
    assert plain == [0.0, pytest.approx(1 / 3)] and logged["vpo/parse_rate"] == 0.5
    fallback = TaskReward(letters, answers=2, untagged_fallback=True)(["0 ANSWER"] * 2, untagged,
                                                                       example=[{"id": 0}] * 2)
    assert fallback == [1.0, pytest.approx(1 / 3)]  # the whole untagged completion is its one answer
    scores = VPOReward(letters, answers=2, untagged_fallback=True)(["0 ANSWER"], untagged[:1], example=[{"id": 0}])
    assert scores == [pytest.approx(1.0)]  # one answer holding every letter: the best under any weights


def test_task_reward_trains_two_steps_in_the_stock_grpo_trainer(tmp_path, tok, task):
    trainer = GRPOTrainer(build_tiny_qwen2(tok, seed=0), reward_funcs=TaskReward(task),
                          args=make_config(tmp_path, max_steps=2, per_device_train_batch_size=4),
                          train_dataset=make_dataset(task, 1, 4), processing_class=tok)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rewards/task/mean" in h]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert all("vpo/objective/a_rate" in h for h in logs)
    # the rewards TRL recorded are the fixed scalars of the completions it generated (ToyAB scores
    # the text alone, so any example does)
    expected = [float(task.scalar(task.score_chain(c, {"id": 0}, 1))[0]) for c in trainer._logs["completion"]]
    np.testing.assert_allclose(list(trainer._logs["rewards"]["task"]), expected, atol=1e-6)


def _maze_rows(answers, n=3):
    from vpo.export import export_rows
    from vpo.tasks import get_task

    maze = get_task("maze", size=5)
    return maze, export_rows(maze, maze.examples("train", n, seed=0), split="train", fmt="trl", answers=answers,
                             task_params={"size": 5}, chat=False)  # the char tokenizer has no chat template


def _columns(rows):
    return {key: [row[key] for row in rows] for key in rows[0] if key != "prompt"}


def test_dotted_path_rewards_read_the_trl_export_columns():
    maze, rows1 = _maze_rows(1)
    _, rows3 = _maze_rows(3)
    rows = rows1 + rows3  # one batch mixing m = 1 and m = 3 rows
    completions = ["UP UP LEFT"] * 3 + ["<route_1>UP</route_1><route_2>LEFT LEFT</route_2><route_3>UP</route_3>"] * 3
    prompts = [row["prompt"] for row in rows]
    logged = {}
    kwargs = dict(_columns(rows), trainer_state=SimpleNamespace(global_step=4),
                  log_metric=lambda k, v: logged.__setitem__(k, v))
    examples = [json.loads(row["example"]) for row in rows]
    got = task_reward(prompts, completions, **kwargs)
    want = (TaskReward(maze)(prompts[:3], completions[:3], example=examples[:3])
            + TaskReward(maze, answers=3)(prompts[3:], completions[3:], example=examples[3:]))
    assert got == want and len(got) == 6
    got = vpo_reward(prompts, completions, **kwargs)
    state = SimpleNamespace(global_step=4)
    want = (VPOReward(maze, answers=1)(prompts[:3], completions[:3], example=examples[:3], trainer_state=state)
            + VPOReward(maze, answers=3)(prompts[3:], completions[3:], example=examples[3:], trainer_state=state))
    assert got == pytest.approx(want, abs=1e-12) and "vpo/objective/gold" in logged
    with pytest.raises(ValueError, match="'task' column"):
        task_reward(prompts, completions, example=kwargs["example"])
    with pytest.raises(ValueError, match="'example' column"):
        vpo_reward(prompts, completions, task=kwargs["task"])


def _trl_grpo_argv(tmp_path, reward_funcs):
    """A tiny model folder and a `vpo data export maze --format trl --answers 3` folder, and the
    `trl grpo` arguments that train on them for two steps on CPU."""
    from vpo.cli import main as vpo_main

    maze, rows = _maze_rows(3, n=4)
    chars = sorted({c for row in rows for c in row["prompt"]})
    tokenizer = build_char_tokenizer(chars, extra_tokens=["UP", "DOWN", "LEFT", "RIGHT"])
    build_tiny_qwen2(tokenizer, seed=0).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert vpo_main(["data", "export", "maze", "--format", "trl", "--answers", "3", "--size", "5", "--train", "4",
                     "--test", "2", "--trl-prompt", "text", "--out", str(tmp_path / "data")]) == 0
    return ["--model_name_or_path", str(tmp_path / "model"), "--dataset_name", str(tmp_path / "data"),
            "--reward_funcs", *reward_funcs, "--output_dir", str(tmp_path / "out"), "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "12",
            "--use_cpu", "--bf16", "false", "--report_to", "none", "--logging_steps", "1",
            "--save_strategy", "steps", "--save_steps", "2", "--disable_tqdm", "true"]


def _check_trl_grpo_run(out):
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    logs = [h for h in state["log_history"] if "rewards/vpo_reward/mean" in h]
    assert state["global_step"] == 2 and len(logs) == 2
    assert all("rewards/task_reward/mean" in h and "vpo/objective/gold" in h for h in logs)
    assert (out / "model.safetensors").exists()


def test_trl_grpo_script_with_dotted_path_rewards(tmp_path, monkeypatch):
    """TRL's own `trl grpo` script (its parser and main, in this process) with our rewards by
    dotted path, on the folder `vpo data export --format trl` writes."""
    from trl.scripts import grpo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts the working folder on sys.path
    argv = _trl_grpo_argv(tmp_path, ["vpo.integrations.trl.vpo_reward", "vpo.integrations.trl.task_reward"])
    grpo.main(*grpo.make_parser().parse_args_and_config(argv))
    _check_trl_grpo_run(tmp_path / "out")


@pytest.mark.slow
def test_trl_grpo_command_with_dotted_path_rewards(tmp_path):
    """The `trl grpo` command itself (accelerate launch, a new process), offline."""
    trl_command = Path(sys.executable).with_name("trl")
    if not trl_command.exists():
        pytest.skip("no trl command next to this Python")
    argv = _trl_grpo_argv(tmp_path, ["vpo.integrations.trl.vpo_reward", "vpo.integrations.trl.task_reward"])
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([str(trl_command), "grpo", *argv], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _check_trl_grpo_run(tmp_path / "out")


def test_stage_progress_labels_the_bar_and_can_keep_logs_off_the_terminal(capsys):
    # every progress bar names its stage
    from transformers import TrainerControl, TrainerState

    from vpo.integrations.trl import StageProgress

    for logs in (False, True):
        bar, state, control = StageProgress("warm-up", logs=logs), TrainerState(max_steps=3), TrainerControl()
        bar.on_train_begin(None, state, control)
        state.global_step = 2
        bar.on_step_end(None, state, control)
        bar.on_log(None, state, control, logs={"loss": 0.125})
        assert bar.training_bar.desc.startswith("warm-up") and bar.training_bar.n == 2
        bar.on_train_end(None, state, control)
        captured = capsys.readouterr()
        err = captured.err
        assert "warm-up: " in err and "2/3" in err and ("0.125" in captured.out + err) == logs
        assert all(frame.startswith("warm-up: ") for frame in err.replace("\n", "\r").split("\r") if "%|" in frame)


# the script imports test modules and helpers by name from every test folder, as pyproject's pythonpath lets pytest
TESTS = Path(__file__).resolve().parents[1]
TEST_DIRS = [str(TESTS), *sorted(str(d) for d in TESTS.iterdir() if d.is_dir() and d.name != "__pycache__")]

_TORCHRUN_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, torch
    from datasets import Dataset
    from trl import GRPOConfig
    sys.path[:0] = {test_dirs!r}
    from test_trl_integration import ToyAB, ALPHABET, make_dataset, make_config, capture_advantages
    from vpo.integrations.trl import VPOTrainer
    from vpo.models import build_char_tokenizer, build_tiny_qwen2
    tok = build_char_tokenizer(ALPHABET)
    task = ToyAB()
    args = make_config({out!r}, per_device_train_batch_size=4, num_generations=4, max_steps=2)
    trainer = VPOTrainer(build_tiny_qwen2(tok, seed=0), task=task, answers=2, estimator="vpo",
                         args=args, train_dataset=make_dataset(task, 2, 4), processing_class=tok)
    seen = capture_advantages(trainer)
    trainer.train()
    rank = trainer.accelerator.process_index
    json.dump({{"rank": rank, "adv": torch.cat(seen).tolist(), "logged": list(trainer._logs["advantages"])}},
              open({out!r} + f"/rank{{rank}}.json", "w"))
""")


@pytest.mark.slow
def test_two_rank_torchrun(tmp_path):
    """Two gloo ranks: each gets its slice of the globally computed advantages."""
    script = tmp_path / "run.py"
    script.write_text(_TORCHRUN_SCRIPT.format(test_dirs=TEST_DIRS, out=str(tmp_path)))
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["logged"] == ranks[1]["logged"]  # both ranks log the same global advantages
    assert len(ranks[0]["logged"]) == 8
    for r in ranks:
        assert len(r["adv"]) == 2 * 4  # 2 steps x 4 local completions
