"""``plan_training``: a run's rows, format record, D and memory line before the model loads, and
its prompt style once the tokenizer is known."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from vpo.checkpoints import check_checkpoints  # noqa: E402
from vpo.integrations.trl import RLConfig, TRLOptions, TrainPlan, plan_training  # noqa: E402
from vpo.models import build_char_tokenizer, build_tiny_qwen2  # noqa: E402
from vpo.tasks import get_task  # noqa: E402


@pytest.fixture()
def start(tmp_path):
    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]
    tok = build_char_tokenizer(sorted(set(task.prompt(example, 3)) | set("UDLR")))
    folder = tmp_path / "model"
    build_tiny_qwen2(tok, seed=0).save_pretrained(folder)
    tok.save_pretrained(folder)
    _, (info,) = check_checkpoints([str(folder)], task="maze", given={"size": 5})
    return task, tok, folder, info


def test_the_plan_holds_the_rows_record_objectives_and_memory(start, tmp_path):
    task, tok, folder, info = start
    rl = RLConfig(max_completion_length=8, num_generations=2, per_device_train_batch_size=2, force_cpu=True)
    plan = plan_training(task, method="vpo", answers=3, rl=rl, engine=TRLOptions(), out=str(tmp_path / "o"),
                         model=str(folder), checkpoint=info, params={"size": 5}, examples=3, options={"num_weights": 4})
    assert isinstance(plan, TrainPlan)
    assert len(plan.rows) == 3 and all(row["answers"] == 3 and row["task"] == "maze" for row in plan.rows)
    assert all(isinstance(row["prompt"], list) for row in plan.rows)  # chat turns until the tokenizer says
    assert plan.record == {"format": "task", "task": "maze", "task_params": {"size": 5}, "method": "vpo", "answers": 3}
    assert plan.objectives == task.num_objectives(json.loads(plan.rows[0]["example"]))
    assert plan.memory.startswith("weights ") and "generation batch" in plan.memory, plan.memory
    assert plan.args.max_completion_length == 8 and plan.args.beta == rl.kl_beta
    assert plan.options == {"num_weights": 4} and plan.lora_rank is None


def test_a_tokenizer_without_a_chat_template_gets_one_string_per_prompt(start, tmp_path):
    task, tok, folder, info = start
    plan = plan_training(task, method="grpo", answers=1, rl=RLConfig(max_completion_length=8, force_cpu=True),
                         engine=TRLOptions(), out=str(tmp_path / "o"), model=str(folder), checkpoint=info,
                         examples=2)
    assert not getattr(tok, "chat_template", None)
    ready = plan.for_tokenizer(tok)
    for row in ready.rows:
        assert row["prompt"] == task.prompt(json.loads(row["example"]), 1)
    assert ready.overrides == {} and ready.args is plan.args and not ready.chat_prompts
    assert all(isinstance(row["prompt"], list) for row in plan.rows)  # the plan before is unchanged
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    templated = plan.for_tokenizer(tok)
    assert templated.overrides == {"chat_template_kwargs": {"enable_thinking": False}}
    assert templated.args.chat_template_kwargs == {"enable_thinking": False}
    assert templated.rows == plan.rows
    assert plan.for_tokenizer(tok, chat_template=False).overrides == {}


def test_task_records_in_a_source_file_are_read_as_the_task_reads_them(tmp_path):
    """A file of LiveCodeBench records trains as `vpo eval` and the export read it: the code task
    converts each record (its tests, its mode); a row already in the example schema passes."""
    from vpo.integrations.trl.plan import build_train_rows
    from vpo.tasks.code import FIXTURES

    task = get_task("code")
    records = [json.loads(line) for line in FIXTURES.read_text().splitlines()[:2]]
    assert "tests" not in records[0]  # a raw LiveCodeBench record
    schema_row = task.examples("train", 1)[0]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*records, schema_row]))
    rows = build_train_rows(task, 1, data=str(path))
    examples = [json.loads(row["example"]) for row in rows]
    assert examples == task.examples("train", source=str(path))
    assert [ex["id"] for ex in examples] == [r["question_id"] for r in records] + [schema_row["id"]]
