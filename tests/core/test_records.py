"""Records vpo writes and reads back (``vpo.records``): exact cases of the field checks, and every
reader fuzzed (seeded): each record cut short, overwritten and mutated a few hundred times gives
back a usable value or the one-line ``RecordError`` naming the file, never another exception."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from damage import damage_bytes, damaged_texts, mutate_json
from test_first_messages import compact_checkpoint as checkpoint  # noqa: F401  (a fixture: a tiny demo checkpoint)

from vpo.records import Field, RecordError, check_fields, read_json, read_jsonl, read_record

FUZZ = 300
"""Damaged versions of each record (seeded: the same ones every run)."""


def _one_line(err: BaseException, *names: object) -> str:
    text = str(err)
    assert len(text.splitlines()) == 1 and all(str(name) in text for name in names), text
    return text


# ----- the field checks -----------------------------------------------------------------------
@pytest.mark.parametrize("value,field,message", [
    (0, Field(int, low=1), "field 'n' is 0, expected an integer >= 1"),
    (True, Field(int), "field 'n' is true, expected an integer"),
    (1.5, Field(int), "field 'n' is 1.5, expected an integer"),
    (math.nan, Field(float), "field 'n' is nan, expected a number"),
    ("3", Field(float, low=0, high=1), "field 'n' is \"3\", expected a number >= 0 and <= 1"),
    ([1], Field(str), "field 'n' is [1], expected a string"),
    ("c", Field(str, choices=("a", "b")), "field 'n' is \"c\", expected one of 'a', 'b'"),
    (None, Field(str, required=True), "field 'n' is missing (expected a string)"),
    ([1, -2], Field(list, items=Field(int, low=0)), "field 'n[1]' is -2, expected an integer >= 0"),
    ({"a": "x"}, Field(dict, fields={"a": Field(int)}), "field 'n.a' is \"x\", expected an integer"),
    ({"a": [0, "y"]}, Field(dict, items=Field(list, items=Field(int))), "field 'n.a[1]' is \"y\""),
])
def test_a_field_that_does_not_hold_what_it_must_is_named(value, field, message, tmp_path):
    with pytest.raises(RecordError) as caught:
        check_fields({"n": value}, tmp_path / "r.json", {"n": field})
    assert str(caught.value).startswith(f"{tmp_path / 'r.json'}: {message}"), str(caught.value)


def test_fields_that_hold_what_they_must_pass_and_absent_ones_are_allowed(tmp_path):
    fields = {"n": Field(int, low=1), "x": Field(float), "s": Field((str, list)), "o": Field(dict)}
    assert check_fields({"n": 2, "x": 3, "s": [], "extra": object()}, "p", fields)["n"] == 2
    assert check_fields({"n": None}, "p", fields) == {"n": None}


def test_unreadable_json_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "r.json"
    for text in ("{", "\xff", "1" * 5000, "[" * 100_000):
        path.write_bytes(text.encode("latin-1"))
        with pytest.raises(RecordError, match="is not readable JSON"):
            read_json(path, hint="delete it")
    path.write_text('{"a": 1}\n\n[2]\n{')
    with pytest.raises(RecordError, match="line 4 is not JSON"):
        read_jsonl(path)
    path.write_text("[1]")
    with pytest.raises(RecordError, match=r"r.json: it holds \[1\], not a JSON object; delete it"):
        read_record(path, {}, hint="delete it")


def test_damaged_texts_are_seeded_and_cover_every_kind_of_damage():
    text = json.dumps({"a": 1, "b": {"c": [1, 2]}})
    first, again = list(damaged_texts(text, 50, seed=3)), list(damaged_texts(text, 50, seed=3))
    assert first == again and len(set(first)) > 30
    assert any(not _parses(t) for t in first) and any(_parses(t) for t in first)
    import random

    rng = random.Random(0)
    assert {type(mutate_json({"a": 1}, rng)) for _ in range(20)} <= {dict, type(None), int, float, str, bool, list}
    assert len(damage_bytes(b"abc", rng)) <= 3


def _parses(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def _fuzz(path, record_text, use, *, seed=0, names=None):
    """Write each damaged version of ``record_text`` to ``path`` and call ``use()``: it returns, or
    raises RecordError in one line naming ``names`` (default: the file). Returns the errors' count."""
    errors = 0
    for data in damaged_texts(record_text, FUZZ, seed=seed):
        path.write_bytes(data)
        try:
            use()
        except RecordError as err:
            _one_line(err, *(names or [path]))
            errors += 1
    assert 0 < errors < FUZZ  # both outcomes occur: the fuzz reaches past the first check
    return errors


# ----- checkpoints: vpo_format.json, vpo_train.json, trainer_state.json -----------------------
def _read_as_eval_does(folder):
    """What ``vpo eval`` does with a checkpoint's records before it loads the model."""
    from vpo.checkpoints import chain_answers, check_checkpoints
    from vpo.formats import load_format, recorded_method
    from vpo.tasks import get_task

    params, (info,) = check_checkpoints([folder], task="maze", given={}, tokenizer=False)
    m, _ = chain_answers(info, None)
    task = get_task("maze", **params)
    example = task.examples("test", 1)[0]
    fmt = load_format(folder if info.format_applies else None, task, chat=False)
    fmt.prompt(example, m)
    fmt.completion_budget([example], m)
    recorded_method(folder)


def test_a_damaged_format_record_is_one_line_naming_it(checkpoint, tmp_path):
    # before: ZeroDivisionError (max_answers 0), "invalid literal for int()", and m = 0 silently ignored
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    path = folder / "vpo_format.json"
    text = path.read_text()
    _fuzz(path, text, lambda: _read_as_eval_does(folder), names=[folder])


@pytest.mark.parametrize("record,needle", [
    ({"max_answers": 0}, "field 'max_answers' is 0, expected an integer >= 1"),
    ({"answers": 0}, "field 'answers' is 0, expected an integer >= 1"),
    ({"answers": 5}, "field 'answers' is 5, more than its 'max_answers' 3"),
    ({"max_answers": "x"}, "field 'max_answers' is \"x\", expected an integer >= 1"),
    ({"max_answers": 12, "answers": 10}, "field 'max_answers' is 12, expected an integer in 1..9"),
    ({"task_params": {"size": 4}}, "field 'task_params' does not build task 'maze'"),
    ({"task_params": {"sise": 5}}, "field 'task_params' does not build task 'maze'"),
    ({"method": 5}, "field 'method' is 5, expected a string"),
    ({"format": None}, "field 'format' is missing"),
])
def test_an_impossible_format_record_is_refused_by_eval_in_one_line(checkpoint, tmp_path, capsys, record, needle):
    from vpo.cli import main

    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    path = folder / "vpo_format.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **record}))
    code = main(["eval", "--task", "maze", "--model", str(folder), "--pool", "3", "--examples", "1",
                 "--max-new-tokens", "4", "--no-progress", "--threads", "1", "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in _one_line(err, path), err
    assert not (tmp_path / "e").exists()  # refused before any work


def test_a_damaged_train_record_is_one_line_naming_it(checkpoint, tmp_path):
    from vpo.runs import run_record

    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    path = folder / "vpo_train.json"
    text = json.dumps({"train": {"model": "base"}, "rl": {}, "trl": {},
                       "summary": {"task": "maze", "method": "vpo", "answers": 3, "steps": 4}})

    def use():
        _read_as_eval_does(folder)
        run_record(folder)

    _fuzz(path, text, use, seed=1)


def test_a_damaged_trainer_state_is_skipped_by_latest_and_named_when_given(checkpoint, tmp_path):
    from vpo.checkpoints import check_resume_checkpoint, latest_complete_checkpoint

    folder = tmp_path / "run" / "checkpoint-4"
    shutil.copytree(checkpoint, folder)
    path = folder / "trainer_state.json"
    text = json.dumps({"global_step": 4, "max_steps": 8, "num_train_epochs": 1, "log_history": [{"loss": 0.5}]})

    def use():
        latest = latest_complete_checkpoint(folder.parent)  # never raises: a damaged one is skipped
        state = check_resume_checkpoint(folder)
        assert latest == folder and state["global_step"] >= 0

    _fuzz(path, text, use, seed=2)


# ----- run records --------------------------------------------------------------------------------
def test_a_damaged_run_record_is_named_and_overwrite_replaces_it(tmp_path):
    from vpo.runs import RUN_FILE, check_claim, claim_out_dir

    out = tmp_path / "eval"
    out.mkdir()
    (out / "report.md").write_text("results")
    path = out / RUN_FILE
    text = json.dumps({"command": "eval", "method": "vpo", "task": "maze", "answers": 3})

    def use():
        try:
            check_claim(out, command="eval", record={"method": "vpo", "task": "maze", "answers": 3}, resume=True)
        except RecordError:
            raise
        except ValueError as refusal:  # the folder's run is not this one: a refusal, in one line
            _one_line(refusal, out)

    _fuzz(path, text, use, seed=3)
    path.write_text("{")
    with pytest.raises(RecordError, match=r"pass --force to replace the run in"):
        check_claim(out, command="demo", resume=True, overwrite_flag="--force")
    claim_out_dir(out, command="eval", overwrite=True, resume_flag="")  # --overwrite replaces even a damaged one
    assert json.loads(path.read_text())["command"] == "eval"


# ----- the demo's stage records and pools -------------------------------------------------------
def test_damaged_demo_stage_records_are_one_line_naming_them(tmp_path):
    from vpo.demo import run as demo

    folder = tmp_path / "checkpoints" / "vpo-s0"
    folder.mkdir(parents=True)
    warm = {"seconds": 3.5, "cpu_seconds": 3.0, "examples": 10, "params": 1000, "final_loss": 0.25,
            "loss_curve": [1.0, 0.5, 0.25]}
    rl = {"method": "vpo", "seed": 0, "m": 3, "estimator": "vpo", "seconds": 9.0, "cpu_seconds": 8.0,
          "resumed_from": None, "steps": [1, 2], "series": {"diversity": [0.1, 0.2], "reward": [0.5, None]},
          "completion_tokens": 12.0, "reward": [0.5, 0.6], "reward_failures": {"calls": 10, "failed": 0}}
    for seed, (record, fields) in enumerate([(warm, demo.WARMUP_FIELDS), (rl, demo.RL_FIELDS)]):
        _fuzz(folder / "done.json", json.dumps(record), lambda fields=fields: demo._done(folder, fields),
              seed=10 + seed)
    logs = tmp_path / "logs"
    logs.mkdir()
    _fuzz(logs / "invocations.json", json.dumps([{"wall": 3.0, "cpus": 2}, {"wall": 4.0}]),
          lambda: demo._invocations(logs / "invocations.json"), seed=12)
    for seed, (record, fields) in enumerate([({"wall": 1.0, "runs": 2, "workers": 1}, demo.RL_WALL_FIELDS),
                                             ({"wall": 1.0, "cpu": 2.0, "reward_failures": {"calls": 3, "failed": 1}},
                                              demo.POOL_SECONDS_FIELDS)]):
        path = logs / "record.json"
        _fuzz(path, json.dumps(record), lambda fields=fields, path=path: demo.read_record(path, fields), seed=13 + seed)


def test_a_damaged_demo_config_is_named_and_force_starts_over(tmp_path):
    from vpo.demo import run as demo
    from vpo.demo.config import DemoConfig

    cfg = DemoConfig(out=str(tmp_path))
    demo._prepare_out(cfg, tmp_path)
    path = tmp_path / "config.json"

    def use():
        try:
            demo._prepare_out(cfg, tmp_path)
        except RecordError:
            raise
        except ValueError as refusal:  # a configuration that differs: a refusal, in one line
            _one_line(refusal, tmp_path)

    _fuzz(path, path.read_text(), use, seed=20)
    path.write_text("{")
    demo._prepare_out(DemoConfig(out=str(tmp_path), force=True), tmp_path)
    assert json.loads(path.read_text()) == cfg.fingerprint()


def test_a_damaged_pool_is_one_line_naming_it(tmp_path):
    import random

    from vpo.evaluation import Pools

    rng = np.random.default_rng(0)
    pools = Pools(vectors=rng.random((3, 6, 4)), m=3, texts=[[f"chain {g}.{c}" for c in range(2)] for g in range(3)],
                  completion_tokens=12.5, truncated=0.25)
    path = tmp_path / "pool.npz"
    pools.save(path)
    loaded = Pools.load(path)
    assert np.array_equal(loaded.vectors, pools.vectors) and loaded.texts == pools.texts and loaded.m == 3
    whole, arrays = path.read_bytes(), dict(np.load(path))
    odd = {"vectors": [rng.random((3, 5, 4)), rng.random((3, 6)), np.full((3, 6, 4), np.nan), np.array(["x"]),
                       np.zeros((0, 6, 4))],
           "m": [np.array(0), np.array([3, 3]), np.array(2.5), np.array(-1), np.array("3")],
           "completion_tokens": [np.array([1.0, 2.0]), np.array("a")], "truncated": [np.array([])]}
    pick = random.Random(30)
    errors = 0
    for i in range(FUZZ):
        roll = pick.random()
        if roll < 0.4:
            path.write_bytes(damage_bytes(whole, pick))
        else:
            changed = dict(arrays)
            name = pick.choice(list(odd))
            if roll < 0.5:
                del changed[name]
            else:
                changed[name] = pick.choice(odd[name])
            np.savez_compressed(path, **changed)
        try:
            Pools.load(path)
        except RecordError as err:
            _one_line(err, path)
            errors += 1
    assert 0 < errors < FUZZ
    np.savez_compressed(path, **arrays)
    texts = tmp_path / "pool.npz.jsonl"
    _fuzz(texts, texts.read_text(), lambda: Pools.load(path), seed=31)


def test_a_damaged_export_record_is_one_line_naming_it(tmp_path):
    from vpo.export import export
    from vpo.integrations.verl_recipe import plan_run

    export("maze", tmp_path, fmt="verl", train=3, test=2, size=5)
    path = tmp_path / "export.json"

    def use():  # the verl recipe's check of the data
        try:
            plan_run(tmp_path, task="maze", train_batch_size=1, epochs=1)
        except RecordError:
            raise
        except ValueError as refusal:  # data of another task: a refusal, in one line
            _one_line(refusal, tmp_path)

    _fuzz(path, path.read_text(), use, seed=50)


# ----- the warm-up's data -----------------------------------------------------------------------
def test_damaged_warmup_data_is_one_line_naming_it(tmp_path):
    pytest.importorskip("trl")
    from vpo.commands.warmup import _sft_rows, read_warmup_data
    from vpo.tasks import get_task

    task = get_task("own_rewards", reward_funcs="own_reward_funcs:keyword")
    examples = task.examples("test", 2)
    rows = _sft_rows(task, examples, [["one", "two"], ["three", "four"]], 2, chat=True)
    path = tmp_path / "train.jsonl"
    _fuzz(path, "".join(json.dumps(row) + "\n" for row in rows), lambda: read_warmup_data(path, task, 2), seed=40)


def test_commands_name_a_damaged_run_record_or_demo_config_in_one_line(checkpoint, tmp_path, capsys):
    from vpo.cli import main

    out = tmp_path / "eval"
    out.mkdir()
    (out / ".vpo_run.json").write_text('{"command": 5}')
    argv = ["eval", "--task", "maze", "--model", str(checkpoint), "--pool", "3", "--examples", "1",
            "--max-new-tokens", "4", "--no-progress", "--threads", "1", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "field 'command' is 5, expected a string; pass --overwrite" in _one_line(err, out / ".vpo_run.json")
    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "config.json").write_text("{")
    assert main(["demo", "--quick", "--out", str(demo), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "is not readable JSON" in _one_line(err, demo / "config.json") and "--force" in err
    assert (demo / "config.json").read_text() == "{"  # the user's file is left as it was
