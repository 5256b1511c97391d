"""Your reward code behind one guard in every command: a file that does not import, a column the data
lacks and an output that is not one number per completion are one line (exit 2) before any model
loads; ``vpo eval`` and best-of-n score a chain-level function once per chain, as training does;
``vpo rewards check`` runs TRL's soft overlong punishment with the tokens training gives it; every
path gives your functions the completions in the form of your data (reward functions:
tests/own_reward_funcs.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import own_reward_funcs
from test_own_rewards_cli import tiny_model, write_jsonl  # noqa: F401  (the tiny checkpoint fixture)
from vpo.cli import main


@pytest.fixture
def prompts(tmp_path):
    return write_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "Name a red fruit.", "keyword": "apple"},
                                                    {"prompt": "Name a colour.", "keyword": "blue"}])


@pytest.fixture
def samples(tmp_path):
    return write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "Name a red fruit.", "keyword": "apple",
         "completion": "<response_1>An apple</response_1><response_2>cherry</response_2>"}])


def commands(funcs, prompts, samples, model, out):
    """Every command that takes --reward-funcs, each with a fresh --out."""
    return {
        "rewards check": ["rewards", "check", "--reward-funcs", funcs, "--source", str(samples), "--answers", "2"],
        "eval": ["eval", "--reward-funcs", funcs, "--source", str(prompts), "--model", str(model), "--out",
                 str(out / "eval"), "--max-new-tokens", "4", "--pool", "2"],
        "search": ["search", "best-of-n", "--reward-funcs", funcs, "--source", str(prompts), "--model", str(model),
                   "--out", str(out / "search"), "--max-new-tokens", "4", "--pool", "2"],
        "warmup": ["warmup", "--model", str(model), "--source", str(prompts), "--reward-funcs", funcs, "--out",
                   str(out / "warmup"), "--samples", "2", "--answers", "2", "--max-new-tokens", "4"],
        "data export": ["data", "export", "--reward-funcs", funcs, "--source", str(prompts), "--out",
                        str(out / "data"), "--train", "1", "--test", "1"],
        "train": ["train", "--reward-funcs", funcs, "--source", str(prompts), "--model", str(model), "--output-dir",
                  str(out / "train"), "--max-steps", "1"],
    }


def run_refused(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip()
    return code, err, captured.out


BROKEN = {
    "a syntax error": ("def brevity(completions, **kwargs):\n    return [1.0 for c in completions\n", "line 2",
                       "SyntaxError"),
    "a missing dependency": ("import not_a_real_package_xyz\n", "line 1", "No module named 'not_a_real_package_xyz'"),
    "an exception at import": ("import os\nKEY = os.environ['NO_SUCH_REWARD_API_KEY_XYZ']\n", "line 2",
                               "KeyError: 'NO_SUCH_REWARD_API_KEY_XYZ'"),
}


@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_a_reward_file_that_does_not_import_is_one_line_in_every_command(fault, tiny_model, prompts, samples,
                                                                         tmp_path, capsys):
    source, line, error = BROKEN[fault]
    path = tmp_path / "my_rewards.py"
    path.write_text(source)
    for name, argv in commands(f"{path}:brevity", prompts, samples, tiny_model, tmp_path).items():
        code, err, out = run_refused(argv, capsys)
        assert code == 2, (name, err)
        assert f"{path}, {line}" in err and error in err and "\n" not in err, (name, err)
        assert "Traceback" not in err + out and "loading" not in out, (name, out)  # before any model loads


def test_a_missing_name_and_a_missing_column_are_one_line_before_any_model_loads(tiny_model, prompts, samples,
                                                                                  tmp_path, capsys):
    path = tmp_path / "my_rewards.py"
    path.write_text("def brevity(completions, **kwargs):\n    return [1.0] * len(completions)\n\n"
                    "def accuracy(completions, solution, **kwargs):\n    return [1.0] * len(completions)\n")
    for name, argv in commands(f"{path}:brevty", prompts, samples, tiny_model, tmp_path).items():
        code, err, out = run_refused(argv, capsys)
        assert code == 2 and "has no callable 'brevty'; it defines brevity, accuracy" in err, (name, err)
        assert "\n" not in err
    for name, argv in commands(f"{path}:brevity,{path}:accuracy", prompts, samples, tiny_model, tmp_path).items():
        code, err, out = run_refused(argv, capsys)
        assert code == 2 and "'accuracy' needs the dataset column 'solution'" in err, (name, err)
        assert "\n" not in err and "loading" not in out and "Traceback" not in out, (name, out)
    assert not (tmp_path / "data" / "train.parquet").exists()  # the export wrote nothing


def test_an_output_that_is_not_one_number_per_completion_is_named_on_its_first_call(samples, tmp_path, capsys):
    path = tmp_path / "grades.py"
    path.write_text("def grade(completions, **kwargs):\n    return ['high' for c in completions]\n\n"
                    "def pairs(completions, **kwargs):\n    return [[1.0, 0.0] for c in completions]\n")
    code, err, _ = run_refused(["rewards", "check", "--reward-funcs", f"{path}:grade", "--source", str(samples),
                                "--answers", "2"], capsys)
    assert code == 2 and "\n" not in err
    assert ("reward function 'grade' returned ['high', 'high']: completion 0 got 'high', a str; expected 2 numbers"
            in err)
    code, err, _ = run_refused(["rewards", "check", "--reward-funcs", f"{path}:pairs", "--source", str(samples),
                                "--answers", "2"], capsys)
    assert code == 2 and "f.objective_names = (...)" in err


def test_eval_scores_a_chain_level_function_once_per_chain_at_three_answers(tiny_model, prompts, tmp_path, capsys):
    funcs = "own_reward_funcs:brevity,own_reward_funcs:tokens_used"
    pools = {}
    for m in (3, 1):
        own_reward_funcs.CALLS.clear()
        out = tmp_path / f"eval-m{m}"
        assert main(["eval", "--reward-funcs", funcs, "--source", str(prompts), "--model", str(tiny_model),
                     "--answers", str(m), "--pool", "6", "--examples", "2", "--max-new-tokens", "12",
                     "--temperature", "2.0", "--no-progress", "--out", str(out)]) == 0
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err
        calls = [c for c in own_reward_funcs.CALLS if c[0] == "tokens_used"]
        # once per chain: 2 examples x 6 / m chains, each example's chains in one call
        assert [n for _, n, _ in calls] == [6 // m, 6 // m]
        pool = np.load(out / "pool.npz")["vectors"]          # (examples, pool, D)
        pools[m] = pool
        per_chain = pool[:, :, 1].reshape(2, 6 // m, m)
        assert (per_chain == per_chain[:, :, :1]).all()       # shared by the chain's slots
        expected = [1 / (1 + n) for _, _, counts in calls for n in counts]
        np.testing.assert_allclose(per_chain[:, :, 0].reshape(-1), expected)
        assert all(n >= 1 for _, _, counts in calls for n in counts)   # the sampler's tokens, EOS included
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["task"]["objectives"] == ["brevity", "tokens_used"]
    assert pools[3].shape == pools[1].shape == (2, 6, 2)    # equal pools of answers: comparable across m
    search = tmp_path / "search"
    own_reward_funcs.CALLS.clear()
    assert main(["search", "best-of-n", "--reward-funcs", funcs, "--source", str(prompts), "--model", str(tiny_model),
                 "--answers", "3", "--pool", "3", "--examples", "2", "--max-new-tokens", "8",
                 "--out", str(search)]) == 0
    assert [n for name, n, _ in own_reward_funcs.CALLS if name == "tokens_used"] == [1, 1]


OVERLONG = "from trl.rewards import get_soft_overlong_punishment\n\novershoot = get_soft_overlong_punishment(12, 4)\n"


def test_rewards_check_runs_trls_soft_overlong_punishment_with_the_tokens_training_gives(tiny_model, tmp_path, capsys):
    pytest.importorskip("trl")
    from vpo.models import load_tokenizer

    path = tmp_path / "lengths.py"
    path.write_text(OVERLONG)
    chains = ["<response_1>An apple</response_1><response_2>cherry</response_2>",
              "<response_1>a</response_1><response_2>b</response_2>"]
    samples = write_jsonl(tmp_path / "samples.jsonl", [{"prompt": "Name a red fruit.", "completion": c}
                                                       for c in chains])
    base = ["rewards", "check", "--reward-funcs", f"{path}:overshoot", "--source", str(samples), "--answers", "2",
            "--scaling", "soft_overlong_punishment_reward=-1:0"]
    code, err, _ = run_refused(base, capsys)
    assert code == 2 and "\n" not in err
    assert "soft_overlong_punishment_reward count(s) the completion's tokens (completion_ids)" in err
    assert "--tokenizer MODEL" in err
    out = tmp_path / "check"
    assert main([*base, "--tokenizer", str(tiny_model), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert ("soft_overlong_punishment_reward: a chain of 2 answers is judged against 2 x one answer's length budget "
            "(max_completion_len 12 -> 24, soft_punish_cache 4 -> 8)") in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["reward_failures"]["failed"] == 0 and metrics["completion_ids"] == "tokenizer"
    tok = load_tokenizer(tiny_model)
    for chain, matrix in zip(chains, metrics["matrices"], strict=True):
        length = len(tok(chain, add_special_tokens=False)["input_ids"])
        raw = 0.0 if length <= 16 else -1.0 if length > 24 else (16 - length) / 8
        np.testing.assert_allclose(np.asarray(matrix)[:, 0], raw + 1.0)   # scaled from [-1, 0]
    # a completion_ids column is what TRL passes a chain-level function: no tokenizer needed
    with_ids = write_jsonl(tmp_path / "ids.jsonl", [{"prompt": "p", "completion": chains[1],
                                                     "completion_ids": [1] * 20}])
    assert main(["rewards", "check", "--reward-funcs", f"{path}:overshoot", "--source", str(with_ids), "--answers",
                 "2", "--scaling", "soft_overlong_punishment_reward=-1:0", "--out", str(tmp_path / "ids")]) == 0
    metrics = json.loads((tmp_path / "ids" / "metrics.json").read_text())
    np.testing.assert_allclose(metrics["matrices"][0], [[0.5], [0.5]])  # (16 - 20) / 8 = -0.5, scaled


def test_eval_runs_trls_soft_overlong_punishment_at_three_answers_without_a_traceback(tiny_model, prompts,
                                                                                       tmp_path, capsys):
    pytest.importorskip("trl")
    path = tmp_path / "lengths.py"
    path.write_text(OVERLONG)
    out = tmp_path / "eval"
    assert main(["eval", "--reward-funcs", f"{path}:overshoot,own_reward_funcs:brevity", "--source", str(prompts),
                 "--model", str(tiny_model), "--answers", "3", "--pool", "3", "--examples", "2",
                 "--max-new-tokens", "30", "--temperature", "2.0", "--no-progress", "--scaling",
                 "soft_overlong_punishment_reward=-1:0", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "max_completion_len 12 -> 36, soft_punish_cache 4 -> 12" in captured.out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["reward_failures"]["failed"] == 0
    assert any("judged against 3 x one answer's length budget" in note for note in metrics["notes"])


def test_every_path_gives_text_completions_for_string_prompts_even_in_a_chat_template(tiny_model, tmp_path, capsys):
    """docs/own_rewards.md's functions read text (``c.strip()``): on a model with a chat template, vpo
    train gave them assistant turns while the check gave strings. Now the data decides: a string
    prompt gives text in train, eval and the check alike; chat turns give assistant turns."""
    from transformers import AutoModelForCausalLM

    from vpo.models import load_tokenizer

    chat_model = tmp_path / "chat-model"
    tok = load_tokenizer(tiny_model)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    AutoModelForCausalLM.from_pretrained(tiny_model).save_pretrained(chat_model)
    tok.save_pretrained(chat_model)
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "Name a red fruit."}, {"prompt": "Name a colour."}])
    own_reward_funcs.FORMS.clear()
    assert main(["train", "--reward-funcs", "own_reward_funcs:plain_text", "--source", str(plain), "--model",
                 str(chat_model), "--method", "grpo", "--output-dir", str(tmp_path / "run"), "--max-steps", "1",
                 "--num-generations", "2", "--per-device-train-batch-size", "4", "--max-completion-length", "8",
                 "--force-cpu", "--no-save"]) == 0
    assert own_reward_funcs.FORMS and set(own_reward_funcs.FORMS) == {"str"}
    own_reward_funcs.FORMS.clear()
    assert main(["eval", "--reward-funcs", "own_reward_funcs:plain_text", "--source", str(plain), "--model",
                 str(chat_model), "--pool", "2", "--max-new-tokens", "6", "--no-progress", "--out",
                 str(tmp_path / "eval")]) == 0
    assert own_reward_funcs.FORMS and set(own_reward_funcs.FORMS) == {"str"}
    capsys.readouterr()
