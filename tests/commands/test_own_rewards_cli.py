"""Your own reward functions everywhere a task works: the ``own_rewards`` task, ``vpo rewards check``
and ``--reward-funcs ... --source ...`` in place of ``--task`` in ``vpo train``, ``vpo eval``,
``vpo search best-of-n`` and ``vpo data export`` (reward functions: tests/own_reward_funcs.py)."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest

import own_reward_funcs
from vpo.cli import main
from vpo.rewards import objective_diagnostics
from vpo.tasks import get_task
from vpo.tasks.check import check_task

FUNCS = "own_reward_funcs:keyword,own_reward_funcs:brevity,own_reward_funcs:excitement"


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def prompts(tmp_path):
    return write_jsonl(tmp_path / "prompts.jsonl", [
        {"prompt": "Name a red fruit.", "keyword": "apple", "example_id": "fruit"},
        {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a flier."}],
         "keyword": "bird", "example_id": "flier"},
    ])


# ---------------------------------------------------------------------------------------------
# the task
# ---------------------------------------------------------------------------------------------
def test_own_rewards_task_scores_chains_by_hand_and_meets_the_contract(prompts):
    task = get_task("own_rewards", reward_funcs=FUNCS)
    examples = task.examples("train", source=str(prompts))
    check_task(task, examples)
    assert task.objective_names(examples[0]) == ("keyword", "brevity", "excitement")
    turns = task.messages(examples[1], 3)
    assert turns[0] == {"role": "system", "content": "Be brief."} and "<response_3>" in turns[1]["content"]
    assert task.messages(examples[1], 1)[1]["content"] == "Name a flier."
    own_reward_funcs.CALLS.clear()
    chain = ("<response_1>An apple!</response_1><response_2>apple</response_2>"
             "<response_3>An apple!</response_3>")  # the third repeats the first: a duplicate
    matrix = task.score_chain(chain, examples[0], 3)
    # keyword, 1 / words, share of "!" (None, scored 0, for "apple": no sentence end)
    np.testing.assert_array_equal(matrix, [[1.0, 0.5, 1.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    # each function once per chain, on its answers, with the row's column repeated per answer
    assert own_reward_funcs.CALLS == [("keyword", 3, ["apple"] * 3), ("brevity", 3, None)]
    np.testing.assert_array_equal(task.score_chain("no tags at all", examples[0], 3), np.zeros((3, 3)))
    np.testing.assert_array_equal(task.score_chain("apple", examples[0], 1), [[1.0, 1.0, 0.0]])  # m = 1: the text


def test_own_rewards_task_refuses_what_it_cannot_honour(prompts):
    with pytest.raises(ValueError, match="reward_funcs"):
        get_task("own_rewards")
    with pytest.raises(ValueError, match="minmax.*batch"):
        get_task("own_rewards", reward_funcs=FUNCS, scaling="minmax")
    task = get_task("own_rewards", reward_funcs="own_reward_funcs:keyword")
    with pytest.raises(ValueError, match=r"row 0: missing field 'prompt'"):
        task.validate({"question": "x"}, 0)
    scaled = get_task("own_rewards", reward_funcs="own_reward_funcs:logits", scaling={"logits": [-2, 2]})
    example = scaled.examples("train", source=str(prompts))[0]
    np.testing.assert_allclose(scaled.score("one two three four five six", example), [1.0])  # (6-2+2)/4 clipped
    np.testing.assert_allclose(scaled.score("one", example), [0.25])                           # (1-2+2)/4


# ---------------------------------------------------------------------------------------------
# vpo rewards check
# ---------------------------------------------------------------------------------------------
def test_rewards_check_prints_matrices_summary_and_diagnostics(tmp_path, capsys):
    samples = write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "Name a red fruit.", "keyword": "apple",
         "completion": "<response_1>An apple!</response_1><response_2>apple</response_2><response_3>An apple!</response_3>"},
        {"prompt": "Name a red fruit.", "keyword": "apple",
         "completion": "<response_1>Cherry.</response_1><response_2>A red apple.</response_2>"},
        {"prompt": "Name a colour.", "keyword": "blue", "completion": "blue, no tags"},
    ])
    out = tmp_path / "report"
    assert main(["rewards", "check", "--reward-funcs", FUNCS, "--source", str(samples), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "objectives: keyword, brevity, excitement" in text and "effective dimension" in text
    metrics = json.loads((out / "metrics.json").read_text())
    # by hand: chain 0 keeps 2 distinct answers, chain 1 two, chain 2 none (no tags)
    np.testing.assert_allclose(metrics["matrices"][0], [[1, 0.5, 1], [1, 1, 0], [0, 0, 0]])
    np.testing.assert_allclose(metrics["matrices"][1], [[0, 1, 0], [1, 1 / 3, 0], [0, 0, 0]])
    np.testing.assert_allclose(metrics["matrices"][2], np.zeros((3, 3)))
    answers = np.array([[1, 0.5, 1], [1, 1, 0], [1, 0.5, 1], [0, 1, 0], [1, 1 / 3, 0]])  # parsed, before dedup
    assert metrics["summary"]["brevity"]["mean"] == pytest.approx(answers[:, 1].mean())
    assert metrics["stats"]["none/excitement"] == 1.0  # "apple" has no sentence end
    by_hand = objective_diagnostics(answers)
    assert metrics["objective_diagnostics"]["effective_dim"] == pytest.approx(by_hand["effective_dim"])
    np.testing.assert_allclose(metrics["objective_diagnostics"]["correlation"], by_hand["correlation"])
    assert (out / "plots" / "objective_correlation.png").stat().st_size > 1000
    assert "Are the objectives worth a vector?" in (out / "report.md").read_text()


def test_rewards_check_collinear_objectives_and_the_scaling_warning(tmp_path, capsys):
    samples = write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "p", "keyword": "apple", "completion": "<response_1>apple</response_1><response_2>pear</response_2>"},
        {"prompt": "q", "keyword": "fig", "completion": "<response_1>fig</response_1><response_2>no</response_2>"}])
    base = ["rewards", "check", "--reward-funcs", "own_reward_funcs:keyword,own_reward_funcs:copies",
            "--source", str(samples)]
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "effective dimension 1.00 of D = 2" in text  # copies = 2 x keyword: collinear
    assert "warning: objective 'copies' leaves [0, 1]" in text and "--scaling copies=" in text
    assert main([*base, "--scaling", "copies=0:2"]) == 0
    assert "warning" not in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# the commands' flags
# ---------------------------------------------------------------------------------------------
BAD = [
    (["eval", "--task", "maze", "--reward-funcs", FUNCS, "--source", "{prompts}", "--model", "{model}"],
     "--task and --reward-funcs are alternatives"),
    (["eval", "--reward-funcs", FUNCS, "--model", "{model}"], "--reward-funcs needs --source"),
    (["eval", "--reward-funcs", FUNCS, "--source", "{prompts}", "--task-params", "size=5", "--model", "{model}"],
     "--task-params is for --task"),
    (["eval", "--scaling", "sigmoid", "--model", "{model}"], "--scaling is for the objectives of --reward-funcs"),
    (["eval", "--reward-funcs", FUNCS, "--source", "{prompts}", "--scaling", "cubic", "--model", "{model}"],
     "--scaling: scaling"),
    (["eval", "--reward-funcs", "own_reward_funcs:nope", "--source", "{prompts}", "--model", "{model}"],
     "has no callable 'nope'"),
    (["search", "best-of-n", "--task", "maze", "--reward-funcs", FUNCS, "--source", "{prompts}", "--model",
      "{model}"], "--task and --reward-funcs are alternatives"),
    (["data", "export", "maze", "--reward-funcs", FUNCS, "--source", "{prompts}", "--out", "{out}"],
     "TASK and --reward-funcs are alternatives"),
    (["data", "export", "--out", "{out}"], "give a TASK"),
    (["train", "--task", "maze", "--reward-funcs", FUNCS, "--source", "{prompts}", "--model", "{model}"],
     "--task and --reward-funcs are alternatives"),
    (["train", "--model", "{model}"], "--task is required (or --reward-funcs with --source)"),
    (["rewards", "check", "--reward-funcs", FUNCS], "--source is required"),
    (["rewards", "check", "--reward-funcs", FUNCS, "--source", "{prompts}", "--answers", "0"], "--answers must be"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_flag_combinations_are_one_line_errors(argv, message, tmp_path, prompts, capsys):
    model = tmp_path / "model"
    model.mkdir()
    subs = {"{prompts}": str(prompts), "{model}": str(model), "{out}": str(tmp_path / "out")}
    assert main([subs.get(a, a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer(string.printable)
    folder = tmp_path_factory.mktemp("model")
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_eval_on_your_objectives_with_their_correlation(tiny_model, prompts, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--reward-funcs", "own_reward_funcs:brevity,own_reward_funcs:excitement",
                 "--source", str(prompts), "--model", str(tiny_model), "--pool", "6", "--examples", "2",
                 "--max-new-tokens", "12", "--temperature", "2.0", "--no-progress", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"]["name"] == "own_rewards" and metrics["task"]["objectives"] == ["brevity", "excitement"]
    assert metrics["config"]["task"] == "own_rewards"  # the task these numbers are on, not --task's default (maze)
    assert "maze" not in (out / "report.md").read_text()
    (entry,) = metrics["methods"].values()
    assert {"pref_best_at_k", "pareto_fraction", "diversity"} <= set(entry)
    pool = np.load(out / "pool.npz")["vectors"].reshape(-1, 2)
    assert np.ptp(pool[:, 0]) > 0  # the random model's texts differ in length: brevity varies
    by_hand = objective_diagnostics(pool)
    assert metrics["objective_diagnostics"]["effective_dim"] == pytest.approx(by_hand["effective_dim"])
    assert (out / "plots" / "objective_correlation.png").is_file()
    assert "objective_correlation.png" in (out / "report.md").read_text()


def test_search_best_of_n_on_your_objectives(tiny_model, prompts, tmp_path, capsys):
    out = tmp_path / "search"
    assert main(["search", "best-of-n", "--reward-funcs", FUNCS, "--source", str(prompts), "--model",
                 str(tiny_model), "--pool", "2", "--examples", "2", "--max-new-tokens", "8", "--out", str(out),
                 "--select", "0.2,0.5,0.3"]) == 0
    assert json.loads((out / "search.json").read_text())["task"] == "own_rewards"
    via_eval = tmp_path / "via-eval"  # vpo eval --search best-of-n passes the functions on
    assert main(["eval", "--search", "best-of-n", "--reward-funcs", "own_reward_funcs:brevity", "--source",
                 str(prompts), "--model", str(tiny_model), "--pool", "2", "--examples", "1", "--max-new-tokens", "8",
                 "--out", str(via_eval)]) == 0
    report = json.loads((via_eval / "search.json").read_text())
    assert report["task"] == "own_rewards"


def test_export_and_train_two_steps_on_your_rewards(tiny_model, prompts, tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["data", "export", "--reward-funcs", FUNCS, "--source", str(prompts), "--out", str(data),
                 "--format", "trl", "--answers", "3", "--train", "1", "--test", "1"]) == 0
    import pyarrow.parquet as pq

    (row,) = pq.read_table(data / "train.parquet").to_pylist()
    assert row["task"] == "own_rewards" and json.loads(row["task_params"]) == {"reward_funcs": FUNCS}
    assert row["prompt"][-1]["role"] == "user" and "<response_3>" in row["prompt"][-1]["content"]  # chat turns
    from vpo.integrations.trl import task_reward  # `trl grpo --reward_funcs vpo.integrations.trl.task_reward`

    chain = f"<response_1>A {json.loads(row['example'])['keyword']}</response_1><response_2>no</response_2>"
    columns = {k: [row[k]] for k in ("task", "task_params", "answers", "example")}
    assert task_reward([row["prompt"]], [chain], **columns) == [pytest.approx((1 + 0.5 + 0) / 3)]  # mean, best answer
    run = tmp_path / "run"
    assert main(["train", "--reward-funcs", FUNCS, "--source", str(prompts), "--model", str(tiny_model),
                 "--output-dir", str(run)]) == 2  # chat turns, and the tokenizer has no chat template
    assert "has chat-turn prompts" in capsys.readouterr().err
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"prompt": "Name a red fruit.", "keyword": "apple"},
                                                   {"prompt": "Name a colour.", "keyword": "blue"}])
    own_reward_funcs.CALLS.clear()
    assert main(["train", "--reward-funcs", FUNCS, "--source", str(plain), "--model", str(tiny_model),
                 "--method", "vpo", "--output-dir", str(run), "--max-steps", "2", "--num-generations", "2",
                 "--per-device-train-batch-size", "2", "--max-completion-length", "8", "--force-cpu"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    summary = json.loads(lines[-1])
    assert summary["steps"] == 2 and summary["task"] == "own_rewards" and summary["answers"] == 3
    # the random model writes no tags, so no answer parses at m = 3; at m = 1 (GRPO on the functions'
    # sum) the whole completion is the answer: VPOTrainer(reward_funcs=) calls each function once per
    # step on all of the batch's answers, with the row's column repeated per answer
    own_reward_funcs.CALLS.clear()
    assert main(["train", "--reward-funcs", FUNCS, "--source", str(plain), "--model", str(tiny_model),
                 "--method", "grpo", "--output-dir", str(tmp_path / "grpo"), "--max-steps", "1",
                 "--num-generations", "2", "--per-device-train-batch-size", "4", "--max-completion-length", "8",
                 "--force-cpu", "--no-save"]) == 0
    assert [(name, n) for name, n, _ in own_reward_funcs.CALLS] == [("keyword", 4), ("brevity", 4)]
    assert sorted(own_reward_funcs.CALLS[0][2]) == ["apple", "apple", "blue", "blue"]


def test_a_saved_hugging_face_dataset_folder_is_a_source(tmp_path):
    from datasets import Dataset, DatasetDict

    rows = [{"prompt": "Name a red fruit.", "keyword": "apple"}, {"prompt": "Name a colour.", "keyword": "blue"}]
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "flat"))
    DatasetDict({"train": Dataset.from_list(rows[:1]), "validation": Dataset.from_list(rows[1:])}).save_to_disk(
        str(tmp_path / "splits"))
    task = get_task("own_rewards", reward_funcs=FUNCS)
    assert task.examples("train", source=str(tmp_path / "flat")) == rows
    assert task.examples("test", source=str(tmp_path / "splits")) == rows[1:]  # test falls back to validation
    with pytest.raises(FileNotFoundError, match="no split 'dev'"):
        DatasetDict({"train": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "train-only"))
        task.examples("dev", source=str(tmp_path / "train-only"))


def test_rewards_check_and_the_task_take_a_multi_head_reward_model_by_path(tmp_path, capsys):
    """A sequence-classification checkpoint folder in --reward-funcs: one objective per head,
    scored on prompt + answer, the same in `vpo rewards check` and in the own_rewards task."""
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, Qwen2Config,
                              Qwen2ForSequenceClassification)

    from vpo.models import build_char_tokenizer

    tok = build_char_tokenizer("abcdefghijklmnopqrstuvwxyz <>/_0123456789.!", padding_side="right")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=2, pad_token_id=tok.pad_token_id)
    folder = tmp_path / "rm"
    Qwen2ForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    samples = write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "name a fruit. ", "keyword": "apple",
         "completion": "<response_1>an apple</response_1><response_2>a pear</response_2>"}])
    out = tmp_path / "report"
    assert main(["rewards", "check", "--reward-funcs", f"{folder},own_reward_funcs:keyword", "--source", str(samples),
                 "--answers", "2", "--scaling", "rm/0=sigmoid,rm/1=sigmoid", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["objectives"] == ["rm/0", "rm/1", "keyword"]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)  # the checkpoint's own tokenizer scores, as TRL's does
    rows = []
    for answer in ("an apple", "a pear"):  # by hand: prompt + answer, both heads, sigmoid
        ids = torch.tensor([tok("name a fruit. " + answer, add_special_tokens=False)["input_ids"]])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0].double().numpy()
        rows.append([*(1 / (1 + np.exp(-logits))), float("apple" in answer)])
    np.testing.assert_allclose(metrics["matrices"][0], rows, atol=1e-5)
    task = get_task("own_rewards", reward_funcs=f"{folder},own_reward_funcs:keyword",
                    scaling={"rm/0": [-10, 10], "rm/1": "sigmoid"})
    example = {"prompt": "name a fruit. ", "keyword": "apple"}
    assert task.objective_names(example) == ("rm/0", "rm/1", "keyword")
    vector = task.score("a pear", example)
    np.testing.assert_allclose(vector[1:], rows[1][1:], atol=1e-5)
    assert vector[0] == pytest.approx(np.clip((np.log(rows[1][0] / (1 - rows[1][0])) + 10) / 20, 0, 1), abs=1e-5)
