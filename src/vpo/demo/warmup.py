"""Warm-up: supervised fine-tuning (TRL ``SFTTrainer``) of the tiny model on maze routes.

Every warm-up example is a fresh maze in one of two formats: a single route (share
``warmup_single_fraction``) or an m-route chain. What the routes are depends on
``--warmup-data``:

* ``random_walk`` (default): random walks from S that reach E within the budget
  (``vpo.tasks.maze.random_exit_walk``): each move is uniform among the moves into an open cell
  from which E is still reachable. The model learns the format and the walls, never where the
  gold, diamonds and lava are, like a pretrained LLM that knows the format but not the task; an
  m-route chain holds m independent walks;
* ``oracle``: the maze's three oracle routes (shortest lava-free, via gold, via diamond); a
  single route is one of them chosen uniformly, an m-route chain all three in a random order
  (for m > 3, repeated to fill m tags). This warm start is already close to the ceiling, so RL
  can only sharpen it (docs/demo/investigation.md).

The loss covers the completion only (TRL's prompt-completion format). One epoch, cosine
schedule. The checkpoint is shared by every RL method and seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vpo.demo.config import DemoConfig
from vpo.tasks.maze.format import CompactMazeFormat


WARMUP_DATA = ("random_walk", "oracle")
"""What the warm-up imitates (see module doc); the first is the default."""


def warmup_records(task: Any, fmt: CompactMazeFormat, n: int, *, m: int, single_fraction: float,
                   seed: int, data: str = "random_walk") -> list[dict[str, str]]:
    """``n`` prompt-completion records from fresh mazes of ``task`` (see module doc)."""
    from vpo.tasks.maze import oracle_routes, random_exit_walk

    if data not in WARMUP_DATA:
        raise ValueError(f"--warmup-data: unknown {data!r}; choose from {', '.join(WARMUP_DATA)}")
    rng = random.Random(seed)
    stream = task.iter_examples(seed, split="warmup")
    records = []
    for _ in range(n):
        example = next(stream)
        k = 1 if rng.random() < single_fraction else m
        if data == "random_walk":
            chosen = [random_exit_walk(example, rng) for _ in range(k)]
        else:
            routes = list(oracle_routes(example).values())
            if k == 1:
                chosen = [rng.choice(routes)]
            else:
                rng.shuffle(routes)
                chosen = [routes[i % len(routes)] for i in range(m)]
        records.append({"prompt": fmt.prompt(example, k), "completion": fmt.completion(chosen)})
    return records


STEP_LOG_SPACING_S = 60.0
"""Seconds between two step lines of one run in the demo log (a run of slow steps logs every step)."""


def quiet_trainer(trainer: Any, progress: bool, desc: str, log: Callable[[str], None] | None = None) -> None:
    """A trainer's progress bar labelled with its stage ``desc`` (when ``progress``), without its
    per-step log printing (the logs stay in ``state.log_history``). With ``log`` (the demo's stage
    log), a step line (``vpo.integrations.trl.step_line``) goes there about once a minute, with or
    without bars, so that a run of slow steps shows it is alive in the log and with ``--no-progress``."""
    from vpo.integrations.trl import StepLines, label_progress

    label_progress(trainer, desc, show=progress, logs=False)
    if log is not None:
        trainer.add_callback(StepLines(write=lambda line: log(f"{desc}: {line}"), spacing=STEP_LOG_SPACING_S))


def quiet_libraries(progress: bool) -> None:
    """Silence the libraries' own bars (datasets' maps, transformers' weight loading and saving:
    hundreds of lines over a demo) and transformers' warnings during the demo; the demo's stage
    bars stay unless ``progress`` is off."""
    import transformers

    from vpo.sampling import hide_library_progress

    transformers.logging.set_verbosity_error()
    hide_library_progress()


def run_warmup(cfg: DemoConfig, task: Any, fmt: CompactMazeFormat, out_dir: Path, *,
               log: Any = print) -> dict[str, Any]:
    """Build the tokenizer and model, run SFT, save the checkpoint to ``out_dir``.

    Resumes from the newest ``checkpoint-*`` under ``out_dir/trainer`` when one exists.
    Returns {"seconds", "examples", "params", "final_loss"}.
    """
    import time

    from datasets import Dataset
    from transformers.trainer_utils import get_last_checkpoint
    from trl import SFTConfig, SFTTrainer

    from vpo.models import build_char_tokenizer, build_tiny_llama, count_parameters

    start, cpu_start = time.time(), time.process_time()
    tokenizer = build_char_tokenizer(fmt.alphabet(), extra_tokens=fmt.extra_tokens())
    model = build_tiny_llama(tokenizer, hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads, mlp=cfg.mlp,
                             max_positions=256, seed=cfg.seed)
    records = warmup_records(task, fmt, cfg.warmup_examples, m=cfg.answers,
                             single_fraction=cfg.warmup_single_fraction, seed=cfg.stream_seed(1000),
                             data=cfg.warmup_data)
    dataset = Dataset.from_list(records)
    trainer_dir = out_dir / "trainer"
    args = SFTConfig(
        output_dir=str(trainer_dir),
        per_device_train_batch_size=cfg.warmup_batch,
        num_train_epochs=1,
        learning_rate=cfg.warmup_lr,
        lr_scheduler_type="cosine",
        warmup_steps=max(1, int(0.03 * cfg.warmup_examples / cfg.warmup_batch)),
        weight_decay=0.0,
        logging_steps=10,
        save_strategy="steps",
        save_steps=max(20, cfg.save_steps * 5),
        save_total_limit=1,
        seed=cfg.seed,
        use_cpu=cfg.torch_device() == "cpu",
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        # every record whole (a 9x9 prompt and three routes run past 128 characters; tags are 1 token)
        max_length=max(128, max(len(r["prompt"]) + len(r["completion"]) + 1 for r in records)),
        completion_only_loss=True,
        dataset_num_proc=None,
        disable_tqdm=False,
        dataloader_num_workers=0,
    )
    quiet_libraries(cfg.progress)
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    quiet_trainer(trainer, cfg.progress, "warm-up")
    from vpo.checkpoints import format_record_callback

    task_record = {"task": "maze", "task_params": {"size": cfg.size, "reward_mode": cfg.reward_mode}}
    trainer.add_callback(format_record_callback({**fmt.to_dict(), **task_record}))  # in every checkpoint-N
    last = get_last_checkpoint(str(trainer_dir)) if trainer_dir.is_dir() else None
    if last:
        log(f"warm-up: resuming from {last}")
    result = trainer.train(resume_from_checkpoint=last)
    model = trainer.model
    model.generation_config.max_new_tokens = None
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    fmt.save(out_dir, **task_record)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return {"seconds": time.time() - start, "cpu_seconds": time.process_time() - cpu_start, "examples": len(records), "params": count_parameters(model),
            "final_loss": losses[-1] if losses else float(result.training_loss),
            "loss_curve": losses}
