"""``vpo data export``: veRL / TRL tables, seeds, round trip back to task.score."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from vpo.cli import main
from vpo.export import example_from_row, export, export_rows, make_task, test_seed, trl_row, verl_row
from vpo.tasks import get_task


def read(path):
    return pq.read_table(path).to_pylist()


def test_test_seed_rule():
    assert test_seed(42) == 4242 and test_seed(0) == 42 and test_seed(7) == 742


@pytest.mark.parametrize("task_name", ["musique", "eureqa", "toolcall"])
def test_verl_round_trip(tmp_path, task_name):
    # the fixtures serve both splits the same rows: overlap=True keeps the round trip about the format
    result = export(task_name, tmp_path, fmt="verl", train=3, test=2, answers=3, overlap=True)
    assert result["counts"] == {"train": 3, "test": 2} and result["seeds"] == {"train": 42, "test": 4242}
    task = get_task(task_name)
    for split in ("train", "test"):
        rows = read(tmp_path / f"{split}.parquet")
        assert len(rows) == result["counts"][split]
        for i, row in enumerate(rows):
            assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
            assert row["data_source"] == task_name and row["ability"] == task.ability
            assert row["reward_model"]["style"] == "rule"
            info = row["extra_info"]
            assert (info["index"], info["split"], info["task"], info["answers"]) == (i, split, task_name, 3)
            assert json.loads(info["task_params"]) == {}
            example = example_from_row(row)
            assert task.validate(example, i) == example
            assert info["example_id"] == str(example["id"])
            assert row["prompt"][-1] == {"role": "user", "content": row["prompt"][-1]["content"]}
            assert "<response_3>" in row["prompt"][-1]["content"]
            matrix = task.score_chain("<response_1>garbage</response_1>", example, 3)
            assert matrix.shape == (3, task.num_objectives(example))
    expected = task.examples("train", 3, seed=42)
    assert [example_from_row(r) for r in read(tmp_path / "train.parquet")] == expected


def test_verl_toolcall_keeps_system_turn(tmp_path):
    export("toolcall", tmp_path, fmt="verl", train=1, test=0)
    row = read(tmp_path / "train.parquet")[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert not (tmp_path / "test.parquet").exists()


def test_trl_round_trip_scores_gold(tmp_path):
    result = export("musique", tmp_path, fmt="trl", train=2, test=1, seed=3)
    assert result["seeds"] == {"train": 3, "test": 342}
    task = get_task("musique")
    rows = read(tmp_path / "train.parquet")
    assert set(rows[0]) == {"prompt", "example", "task", "answers", "index", "split", "task_params", "example_id"}
    for row in rows:
        example = example_from_row(row)
        # TRL's conversational format: the task's chat turns, as the verl export writes them
        assert row["prompt"] == task.messages(example) and row["task"] == "musique" and row["answers"] == 1
        support = ",".join(str(s["paragraph_support_idx"]) for s in example["question_decomposition"])
        text = f"<support>{support}</support><answer>{example['answer']}</answer>"
        np.testing.assert_array_equal(task.score(text, json.loads(row["example"])), np.ones(5))


def test_source_is_passed_through(tmp_path):
    source = tmp_path / "data"
    source.mkdir()
    task = get_task("eureqa")
    rows = task.examples("test")
    (source / "train.json").write_text(json.dumps(rows[:1]))
    (source / "test.json").write_text(json.dumps(rows[1:]))
    result = export("eureqa", tmp_path / "out", train=10, test=10, source=str(source))
    assert result["counts"] == {"train": 1, "test": 3}


def test_row_builders_and_errors():
    task = get_task("eureqa")
    example = task.examples("test", 1)[0]
    row = verl_row(task, example, index=4, split="train", answers=2, task_params={"a": 1})
    assert json.loads(row["extra_info"]["task_params"]) == {"a": 1} and example_from_row(row) == example
    assert trl_row(task, example, index=4, split="train")["prompt"] == task.messages(example)
    assert trl_row(task, example, index=4, split="train", chat=False)["prompt"] == task.prompt(example)
    with pytest.raises(ValueError, match="unknown export format"):
        export_rows(task, [example], split="train", fmt="csv")
    with pytest.raises(ValueError, match="answers must be a positive integer"):
        export_rows(task, [example], split="train", answers=0)
    with pytest.raises(ValueError, match="neither"):
        example_from_row({"prompt": "x"})
    with pytest.raises(ValueError, match="does not accept parameters"):
        make_task("eureqa", {"bogus": 1})
    assert make_task("eureqa", size=9)[1] == {}  # size only reaches tasks that take it


def test_cli_export_and_preview(tmp_path, capsys):
    out = tmp_path / "tc"
    assert main(["data", "export", "toolcall", "--out", str(out), "--format", "trl", "--train", "2",
                 "--test", "1", "--answers", "3", "--param", "think_prefilled=true"]) == 0
    rows = read(out / "train.parquet")
    assert len(rows) == 2 and rows[0]["answers"] == 3
    assert [turn["role"] for turn in rows[0]["prompt"]] == ["system", "user"]  # toolcall keeps its system turn
    assert main(["data", "export", "toolcall", "--out", str(tmp_path / "text"), "--format", "trl", "--train", "1",
                 "--test", "0", "--trl-prompt", "text"]) == 0
    assert isinstance(read(tmp_path / "text" / "train.parquet")[0]["prompt"], str)
    assert main(["data", "export", "toolcall", "--out", str(tmp_path / "v"), "--trl-prompt", "text"]) == 2
    assert json.loads(rows[0]["task_params"]) == {"think_prefilled": True}
    assert "train: 2 rows (seed 42)" in capsys.readouterr().out
    assert main(["data", "preview", "musique", "--answers", "2"]) == 0
    assert "<response_2>" in capsys.readouterr().out
    assert main(["data", "export", "musique", "--train", "1"]) == 2  # --out missing
    assert main(["data", "export", "musique", "--out", str(tmp_path / "x"), "--param", "oops"]) == 2
    assert "key=value" in capsys.readouterr().err


def _maze():
    try:
        return get_task("maze", size=5)
    except (ImportError, ValueError):
        pytest.skip("maze task not available")


def test_maze_export_small_with_paper_seeds(tmp_path):
    task = _maze()
    result = export("maze", tmp_path, fmt="verl", train=3, test=2, size=5)
    assert result["task_params"] == {"size": 5} and result["seeds"] == {"train": 42, "test": 4242}
    train = [example_from_row(r) for r in read(tmp_path / "train.parquet")]
    test = [example_from_row(r) for r in read(tmp_path / "test.parquet")]
    assert train == task.examples("train", 3, seed=42) and test == task.examples("test", 2, seed=4242)
    row = read(tmp_path / "train.parquet")[0]
    assert json.loads(row["extra_info"]["task_params"]) == {"size": 5} and row["ability"] == "planning"
    assert task.score_chain("", train[0], 1).shape == (1, task.num_objectives(train[0]))


def test_maze_cli_defaults_give_paper_splits(tmp_path):
    _maze()
    assert main(["data", "export", "maze", "--out", str(tmp_path)]) == 0
    train, test = read(tmp_path / "train.parquet"), read(tmp_path / "test.parquet")
    assert (len(train), len(test)) == (1000, 100)
    assert json.loads(train[0]["extra_info"]["task_params"]) == {"size": 9}
    paper = get_task("maze", size=9)
    assert example_from_row(test[0]) == paper.examples("test", 1)[0]  # the task's own test seed (4242)
    assert example_from_row(train[0]) == paper.examples("train", 1)[0]


@pytest.mark.parametrize("task_name", ["musique", "eureqa", "toolcall", "code"])
def test_splits_do_not_overlap_and_short_splits_are_said(tmp_path, task_name, capsys):
    # a source that serves both splits the same rows is split, test first
    from vpo.cli import main

    assert main(["data", "export", task_name, "--out", str(tmp_path), "--train", "1000", "--test", "2"]) == 0
    out = capsys.readouterr().out
    train = [example_from_row(r)["id"] for r in read(tmp_path / "train.parquet")]
    test = [example_from_row(r)["id"] for r in read(tmp_path / "test.parquet")]
    assert len(test) == 2 and train and not set(train) & set(test)
    meta = json.loads((tmp_path / "export.json").read_text())
    assert meta["requested"] == {"train": 1000, "test": 2} and meta["counts"]["train"] == len(train)
    assert meta["short"] and "1000 asked" in meta["short"][0] and "warning: train:" in out
    assert main(["data", "export", task_name, "--out", str(tmp_path / "o"), "--train", "3", "--test", "2",
                 "--overlap"]) == 0
    again = [example_from_row(r)["id"] for r in read(tmp_path / "o" / "train.parquet")]
    assert again == [e["id"] for e in get_task(task_name).examples("train", 3, seed=42)]  # as drawn, nothing left out


def test_generated_mazes_keep_their_split_seeds(tmp_path):
    result = export("maze", tmp_path, fmt="trl", train=3, test=2, size=5)
    assert result["counts"] == {"train": 3, "test": 2} and result["short"] == [] and result["overlap_removed"] == 0


def test_own_reward_rows_do_not_go_to_both_splits(tmp_path, capsys):
    """--reward-funcs rows have no ``id``: a single prompt file still serves train and test the same
    rows, and the export refuses that without --overlap, as it does for toolcall and math."""
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"Name a {thing}.", "keyword": thing}) + "\n"
                              for thing in ("fruit", "colour", "planet", "bird")))
    base = ["data", "export", "--reward-funcs", "own_reward_funcs:keyword", "--source", str(source)]
    assert main([*base, "--out", str(tmp_path / "all")]) == 2  # train 1000, test 100: test takes every row
    err = capsys.readouterr().err
    assert "the test split took every one of them (4)" in err and "--overlap" in err
    assert main([*base, "--out", str(tmp_path / "split"), "--train", "3", "--test", "1"]) == 0
    train, test = ([json.loads(r["reward_model"]["ground_truth"])["prompt"] for r in read(tmp_path / "split" / name)]
                   for name in ("train.parquet", "test.parquet"))
    assert len(train) == 3 and len(test) == 1 and not set(train) & set(test)
    assert main([*base, "--out", str(tmp_path / "shared"), "--overlap", "--train", "4", "--test", "4"]) == 0
    assert len(read(tmp_path / "shared" / "train.parquet")) == len(read(tmp_path / "shared" / "test.parquet")) == 4


def test_a_small_prompt_file_is_refused_with_the_flags_that_split_it(tmp_path, capsys):
    # before: "ask for fewer with --test": which number, and what becomes of --train, was left to the user
    source = tmp_path / "prompts.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"Name a {thing}.", "keyword": thing}) + "\n" for thing in
                              ("fruit", "colour", "planet", "bird", "tree", "river", "metal", "dance")))
    base = ["data", "export", "--reward-funcs", "own_reward_funcs:keyword", "--source", str(source)]
    assert main([*base, "--out", str(tmp_path / "default")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "took every one of them (8); pass --train 7 --test 1" in err, err
    assert main([*base, "--out", str(tmp_path / "split"), "--train", "7", "--test", "1"]) == 0
    out = capsys.readouterr().out
    assert "warning" not in out  # nothing asked for that the file does not hold
    train, test = (read(tmp_path / "split" / name) for name in ("train.parquet", "test.parquet"))
    assert (len(train), len(test)) == (7, 1)
    assert main([*base, "--out", str(tmp_path / "one"), "--test", "8"]) == 2  # --test given: the same advice
    assert "pass --train 7 --test 1" in capsys.readouterr().err
    source.write_text(json.dumps({"prompt": "Name a fruit.", "keyword": "fruit"}) + "\n")
    assert main([*base, "--out", str(tmp_path / "single")]) == 2
    err = capsys.readouterr().err
    assert "pass --test 0 (no test split) or --overlap" in err
    assert main([*base, "--out", str(tmp_path / "train-only"), "--test", "0"]) == 0
