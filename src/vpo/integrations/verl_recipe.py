"""Checks and numbers for ``recipes/verl/run.sh``, and vpo's per-step reward metrics on verl.

Engine-free (no verl import): ``run.sh`` calls ``python -m vpo.integrations.verl_recipe`` before
any model loads, and ``vpo.integrations.verl_main`` feeds :func:`reward_step_metrics` (the
rollout scorer's step metrics, ``vpo.integrations.rollout_scorer``) from verl's trainer.

* ``plan DATA_DIR --task T --train-batch-size B --epochs E [--save-freq S --test-freq F
  --ckpt-dir C]``: stops (exit 1, one line) when the training data came from a task's shipped
  sample (naming ``--source``) or holds fewer rows than one step's prompts (naming
  ``TRAIN_BATCH_SIZE``); otherwise prints verl's step count and the checkpoint folders.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vpo.integrations.rollout_scorer import reward_step_metrics

__all__ = ["RecipePlan", "plan_run", "reward_step_metrics", "verl_steps"]



def verl_steps(train_rows: int, train_batch_size: int, epochs: int) -> tuple[int, int]:
    """verl 0.9.1's ``(steps_per_epoch, total_training_steps)``: ``rows // batch`` (its train
    dataloader drops the last partial batch) times the epochs."""
    per_epoch = int(train_rows) // int(train_batch_size)
    return per_epoch, per_epoch * int(epochs)


@dataclass(frozen=True)
class RecipePlan:
    """What a verl run on an exported folder will do, from the data and the recipe's settings."""

    train_rows: int
    """Rows of ``train.parquet`` (verl's ``data.filter_overlong_prompts`` may drop some)."""
    steps_per_epoch: int
    """``train_rows // train_batch_size``."""
    total_steps: int
    """``steps_per_epoch * epochs``: the last checkpoint is ``global_step_<total_steps>``."""
    checkpoints: tuple[int, ...]
    """Steps verl saves at: every ``save_freq`` steps and the last."""
    validations: tuple[int, ...]
    """Steps verl validates after (every ``test_freq`` and the last), besides before training."""


def _rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def plan_run(data_dir: str | Path, *, task: str, train_batch_size: int, epochs: int, save_freq: int = 0,
             test_freq: int = 0) -> RecipePlan:
    """Check ``data_dir`` (a ``vpo data export --format verl`` folder) for a real run and count its steps.

    ValueError naming ``--source`` when ``export.json`` says the rows came from the task's
    shipped sample, naming ``TRAIN_BATCH_SIZE`` when the rows do not fill one step (verl would
    load the models and then divide by zero steps per epoch).
    """
    from vpo.export import read_export_record, reads_shipped_sample

    data_dir = Path(data_dir)
    train = data_dir / "train.parquet"
    if not train.is_file():
        raise ValueError(f"{train} does not exist: export the data first (vpo data export {task} --format verl)")
    meta_path = data_dir / "export.json"
    if meta_path.is_file():
        meta = read_export_record(meta_path)
        if meta.get("task") not in (None, task):
            raise ValueError(f"{data_dir} holds {meta.get('task')!r} data, not {task!r}: set DATA_DIR to {task}'s export")
        if reads_shipped_sample(task, meta.get("source")):
            raise ValueError(f"{data_dir} was exported from {task}'s shipped sample ({(meta.get('counts') or {}).get('train')} "
                             f"invented rows for tests), not real data: delete it and pass --source FILE (EXPORT_ARGS="
                             f"'--source FILE' with run.sh)")
    if train_batch_size < 1 or epochs < 1:
        raise ValueError(f"TRAIN_BATCH_SIZE ({train_batch_size}) and EPOCHS ({epochs}) must be >= 1")
    rows = _rows(train)
    per_epoch, total = verl_steps(rows, train_batch_size, epochs)
    if per_epoch == 0:
        raise ValueError(f"{train} has {rows} rows, fewer than TRAIN_BATCH_SIZE={train_batch_size} prompts per step: "
                         "verl would run 0 steps; export more rows (--train N, a larger --source) or lower "
                         "TRAIN_BATCH_SIZE")
    saves = tuple(s for s in range(1, total + 1) if save_freq > 0 and (s % save_freq == 0 or s == total))
    tests = tuple(s for s in range(1, total + 1) if test_freq > 0 and (s % test_freq == 0 or s == total))
    return RecipePlan(rows, per_epoch, total, saves, tests)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vpo.integrations.verl_recipe", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    plan = sub.add_parser("plan", help="check an exported folder for a run; print steps and checkpoints")
    plan.add_argument("data_dir")
    plan.add_argument("--task", required=True)
    plan.add_argument("--train-batch-size", type=int, required=True)
    plan.add_argument("--epochs", type=int, required=True)
    plan.add_argument("--save-freq", type=int, default=0)
    plan.add_argument("--test-freq", type=int, default=0)
    plan.add_argument("--ckpt-dir", default="CKPT_DIR")
    args = parser.parse_args(argv)
    try:
        result = plan_run(args.data_dir, task=args.task, train_batch_size=args.train_batch_size, epochs=args.epochs,
                          save_freq=args.save_freq, test_freq=args.test_freq)
    except ValueError as err:
        print(f"run.sh: {err}", file=sys.stderr)
        return 1
    print(f"plan: {result.train_rows} train rows // {args.train_batch_size} prompts per step = "
          f"{result.steps_per_epoch} steps per epoch x {args.epochs} epochs = {result.total_steps} steps "
          "(fewer if data.filter_overlong_prompts drops prompts)")
    if result.checkpoints:
        print(f"plan: checkpoints {args.ckpt_dir}/global_step_{{{','.join(map(str, result.checkpoints))}}}/actor; "
              f"the last is {args.ckpt_dir}/global_step_{result.total_steps}/actor")
    else:
        print("plan: no checkpoints (save_freq <= 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
