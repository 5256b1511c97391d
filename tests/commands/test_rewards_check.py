"""``vpo rewards check`` finds what would hide in training: a function that fails (its failures in
the table, the report and the exit status), a dataset column the samples lack (named as such),
completions passed as training passes them (TRL's own reward functions on chat prompts), an
``--out`` that holds an earlier check, the answer count, and the correlation heatmap's constant
objectives and title."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from vpo.cli import main

GOOD_AND_BROKEN = '''
def brevity(completions, **kwargs):
    return [1.0 / max(1, len(c.split())) for c in completions]

def broken(completions, **kwargs):
    raise RuntimeError("the judge API is down")

def accuracy(completions, solution, **kwargs):          # a column the samples lack, as an argument
    return [float(s in c) for c, s in zip(completions, solution)]

def grade(completions, **kwargs):                       # ... and read from **kwargs
    return [float(kwargs["grade_level"][0] > 3) for _ in completions]

def constant(completions, **kwargs):
    return [0.5 for _ in completions]
'''


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def funcs(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(GOOD_AND_BROKEN)
    return lambda *names: ",".join(f"{path}:{name}" for name in names)


@pytest.fixture
def samples(tmp_path):
    return write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "Name a red fruit.",
         "completion": "<response_1>An apple</response_1><response_2>cherry</response_2>"},
        {"prompt": "Name a colour.",
         "completion": "<response_1>blue</response_1><response_2>a deep sea green</response_2>"},
    ])


def test_a_function_failing_every_call_fails_the_check_and_is_named(funcs, samples, tmp_path, capsys):
    out = tmp_path / "check"
    # two functions, one failing on every call: exactly half of the calls, under the default
    # --max-failure-rate 0.5, which the check reported as a pass before
    assert main(["rewards", "check", "--reward-funcs", funcs("brevity", "broken"), "--source", str(samples),
                 "--answers", "2", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "error: broken: 4 of 4 reward calls failed (scored 0); first error: RuntimeError: the judge API is down" \
        in text
    assert "4 of 8 reward calls failed (50%); training would " in text
    table = text[text.index("per reward function"):text.index("per objective")]
    assert [line.split() for line in table.splitlines()[2:4]] == [["brevity", "4", "0"], ["broken", "4", "4"]]
    report = (out / "report.md").read_text()
    assert "**Failed: broken.**" in report and "RuntimeError: the judge API is down" in report
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["failed_functions"] == ["broken"]
    assert metrics["reward_failures"]["by_function"]["broken"]["failed"] == 4
    assert metrics["reward_failures"]["by_function"]["brevity"] == {"calls": 4, "failed": 0, "first_error": None,
                                                                   "missing_columns": []}
    assert main(["rewards", "check", "--reward-funcs", funcs("brevity"), "--source", str(samples),
                 "--answers", "2"]) == 0


def test_a_chain_level_function_is_counted_once_per_completion(samples, tmp_path):
    """A chain-level function is called once per completion (2), an answer-level one once per answer (4):
    the per-function table counts each function's own calls."""
    path = tmp_path / "chain_rewards.py"
    path.write_text("from vpo.rewards import chain_level\n\n\n"
                    "def brevity(completions, **kwargs):\n    return [1.0 / (1 + len(str(c))) for c in completions]\n\n\n"
                    "@chain_level\ndef judge(completions, **kwargs):\n    raise RuntimeError('down')\n")
    out = tmp_path / "check"
    assert main(["rewards", "check", "--reward-funcs", f"{path}:brevity,{path}:judge", "--source", str(samples),
                 "--answers", "2", "--out", str(out)]) == 1
    rows = json.loads((out / "metrics.json").read_text())["reward_failures"]["by_function"]
    assert (rows["brevity"]["calls"], rows["judge"]["calls"], rows["judge"]["failed"]) == (4, 2, 2)


def test_a_missing_dataset_column_is_named_as_such(funcs, samples, tmp_path, capsys):
    out = tmp_path / "check"
    assert main(["rewards", "check", "--reward-funcs", funcs("grade", "brevity"), "--source", str(samples),
                 "--answers", "2", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "error: grade: 4 of 4 reward calls failed (scored 0); the samples have no column 'grade_level'" in text
    assert "no column 'grade_level' in the samples" in (out / "report.md").read_text()
    # a required argument the samples lack (TRL's accuracy_reward needs `solution`): named too, whether the
    # function is called and fails, or the call is refused before it runs
    code = main(["rewards", "check", "--reward-funcs", funcs("accuracy", "brevity"), "--source", str(samples),
                 "--answers", "2"])
    captured = capsys.readouterr()
    assert code != 0 and "'solution'" in captured.out + captured.err and "column" in captured.out + captured.err


def test_trl_reward_functions_get_assistant_turns_for_chat_prompts(tmp_path, capsys):
    """TRL's own accuracy_reward reads completion[0]["content"]: a file's string completion to a chat
    prompt reaches it as training passes it, one assistant turn per answer."""
    pytest.importorskip("math_verify")
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    rows = write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": chat, "solution": "$4$",
         "completion": "<response_1>It is \\boxed{4}</response_1><response_2>\\boxed{5}</response_2>"},
        {"prompt": [{"role": "user", "content": "What is 3 + 3?"}], "solution": "$6$",   # already turns
         "completion": [{"role": "assistant", "content": "<response_1>\\boxed{6}</response_1>"}]},
    ])
    out = tmp_path / "check"
    assert main(["rewards", "check", "--reward-funcs", "trl.rewards:accuracy_reward", "--source", str(rows),
                 "--answers", "2", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["matrices"] == [[[1.0], [0.0]], [[1.0], [0.0]]]
    assert metrics["reward_failures"]["failed"] == 0


def test_completions_take_the_form_training_gives_them():
    from vpo.commands.rewards import as_trained

    turn = [{"role": "assistant", "content": "<response_1>4</response_1>"}]
    assert as_trained([{"role": "user", "content": "2 + 2?"}], "<response_1>4</response_1>") == turn
    assert as_trained([{"role": "user", "content": "2 + 2?"}], turn) == turn
    assert as_trained("2 + 2?", turn) == "<response_1>4</response_1>"   # a string prompt: TRL passes text
    assert as_trained("2 + 2?", "four") == "four"


def test_out_is_refused_when_it_holds_a_check_and_overwrite_leaves_nothing_stale(funcs, samples, tmp_path, capsys):
    out = tmp_path / "check"
    base = ["rewards", "check", "--source", str(samples), "--answers", "2", "--out", str(out)]
    assert main([*base, "--reward-funcs", funcs("brevity", "constant")]) == 0
    assert (out / "plots" / "objective_correlation.png").is_file()
    capsys.readouterr()
    assert main([*base, "--reward-funcs", funcs("brevity")]) == 2
    err = capsys.readouterr().err
    assert "holds an earlier vpo rewards check run; pass --overwrite" in err and "\n" not in err.strip()
    assert json.loads((out / "metrics.json").read_text())["objectives"] == ["brevity", "constant"]  # untouched
    assert main([*base, "--reward-funcs", funcs("brevity"), "--overwrite"]) == 0
    assert json.loads((out / "metrics.json").read_text())["objectives"] == ["brevity"]
    assert not (out / "plots").exists()  # D = 1 draws no heatmap, and the old one is gone


def test_the_answer_count_is_the_answers_used(tmp_path, capsys):
    """A group whose answers all return None drops that objective: those answers are not in the
    correlation, and the line says how many are."""
    rows = write_jsonl(tmp_path / "samples.jsonl", [
        {"prompt": "calm", "keyword": "a",
         "completion": "<response_1>a b</response_1><response_2>c</response_2><response_3>a</response_3>"},
        {"prompt": "loud", "keyword": "x", "completion": "<response_1>x!</response_1><response_2>y. z!</response_2>"},
    ])
    assert main(["rewards", "check", "--reward-funcs", "own_reward_funcs:brevity,own_reward_funcs:excitement",
                 "--source", str(rows)]) == 0
    text = capsys.readouterr().out
    # 5 answers parsed; the 3 of "calm" have no sentence end (excitement None for the group: dropped)
    assert "effective dimension" in text and "of D = 2 over 2 answers" in text


def test_the_scaling_warning_has_no_stray_brace():
    from vpo.rewards import RewardScaleWarning, score_chains

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score_chains([lambda completions, **kw: [3.0] * len(completions)], ["p"], ["<response_1>a</response_1>"],
                     answers=2)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, RewardScaleWarning)]
    assert message.endswith("(low, high)} (docs/own_rewards.md)") and "}}" not in message


@pytest.fixture
def drawn(monkeypatch):
    """The figures ``savefig`` writes, with their text drawn (to read positions)."""
    from matplotlib.figure import Figure

    figures = []
    original = Figure.savefig

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        renderer = self.canvas.get_renderer()  # before pyplot closes the figure
        self.title_box = self.axes[0].title.get_window_extent(renderer)
        figures.append(self)

    monkeypatch.setattr(Figure, "savefig", keep)
    return figures


def test_a_constant_objective_is_grey_and_did_not_vary(funcs, samples, tmp_path, capsys, drawn):
    out = tmp_path / "check"
    assert main(["rewards", "check", "--reward-funcs", funcs("brevity", "constant"), "--source", str(samples),
                 "--answers", "2", "--out", str(out)]) == 0
    diagnostics = json.loads((out / "metrics.json").read_text())["objective_diagnostics"]
    assert diagnostics["constant"] == ["constant"]
    assert diagnostics["correlation"] == [[1.0, None], [None, None]]
    assert "objective 'constant' did not vary over these answers" in capsys.readouterr().out
    assert "Did not vary over these answers (no correlation, n/a): constant." in (out / "report.md").read_text()
    (fig,) = drawn
    ax = fig.axes[0]
    cells = np.ma.getmaskarray(ax.images[0].get_array())
    assert cells.tolist() == [[False, True], [True, True]]  # masked cells take the colormap's "bad" colour
    assert ax.images[0].get_cmap().get_bad().tolist() == pytest.approx([0.8, 0.8, 0.8, 1.0])  # grey
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == ["1.00", "did not\nvary", "did not\nvary", "did not\nvary"]


def test_a_two_objective_heatmap_fits_its_title(funcs, samples, tmp_path, drawn):
    assert main(["rewards", "check", "--reward-funcs", funcs("brevity", "constant"), "--source", str(samples),
                 "--answers", "2", "--out", str(tmp_path / "check")]) == 0
    (fig,) = drawn
    box, frame = fig.title_box, fig.bbox
    assert "effective dimension" in fig.axes[0].title.get_text().replace("\n", " ")
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1


def test_stock_grpo_trainer_refuses_a_multi_label_reward_model_id(tmp_path):
    """docs/own_rewards.md: GRPOTrainer loads a reward-model id with num_labels=1, which a checkpoint
    with several labels does not load into (VPOTrainer takes every label as an objective)."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForSequenceClassification
    from trl import GRPOConfig, GRPOTrainer

    from vpo.models import build_char_tokenizer, build_tiny_qwen2

    tok = build_char_tokenizer("abc ")
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, num_labels=3, pad_token_id=tok.pad_token_id)
    folder = tmp_path / "rm"
    Qwen2ForSequenceClassification(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    args = GRPOConfig(output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=4, use_cpu=True, bf16=False, report_to="none")
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        GRPOTrainer(build_tiny_qwen2(tok), reward_funcs=str(folder), args=args,
                    train_dataset=Dataset.from_list([{"prompt": "ab"}] * 2), processing_class=tok)
