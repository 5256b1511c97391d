"""``python -m vpo.integrations.verl_main``: verl 0.9.1's ``main_ppo`` that also logs vpo's
reward metrics every training step.

Why. verl's v1 trainer keeps what ``compute_score`` returns besides ``score`` (the per-rollout
``reward_extra_info``) with each trajectory, and reports it only at validation
(``process_validation_metrics``: mean / best@N per data source). Its training-step metrics
(``_compute_metrics``) read the scores but not that dict, so the set score, the per-objective
bests, the answers parsed and the spread within prompts would never be seen during training.

How. Same Hydra config and command line as ``python -m verl.trainer.main_ppo`` (verl's
``ppo_trainer`` config, its ``validate_config``, its ``run_ppo``), with the ``task_runner_class``
``run_ppo`` takes "for recipes": verl's ``TaskRunnerV1`` whose ``run`` first swaps the trainer
class registered for ``trainer.v1.trainer_mode`` for a subclass adding
:func:`vpo.integrations.verl_recipe.reward_step_metrics` (``vpo/...`` keys) to each step's
metrics. The swap happens in the task-runner actor only; the mode name stays, since verl's
trainer branches on it (``"sync"``). ``trainer.use_v1=false`` (the deprecated legacy trainer)
is refused: use ``python -m verl.trainer.main_ppo`` for it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import hydra
import ray
from verl.trainer.main_ppo import TaskRunnerV1

from vpo.integrations.verl_recipe import reward_step_metrics

__all__ = ["RewardMetricsMixin", "VPOTaskRunner", "install_reward_metrics", "main", "reward_rows"]

VERL_CONFIG_DIR = str(Path(importlib.util.find_spec("verl").origin).parent / "trainer" / "config")


def reward_rows(keys: list[str], tags: list[dict], extra_fields: list[Any]) -> tuple[list[dict], list[str]]:
    """The reward extra info and prompt id of each real (not padding) trajectory of a step.

    ``keys`` are verl's TransferQueue keys ``{uid}_{session}_{index}`` (uid: the prompt),
    ``tags`` their tags (``is_padding`` marks rows added to balance the batch),
    ``extra_fields`` their ``extra_fields`` (``reward_extra_info`` inside).
    """
    infos, groups = [], []
    for key, tag, extra in zip(keys, tags, extra_fields, strict=True):
        if tag.get("is_padding", False):
            continue
        info = extra.get("reward_extra_info") if isinstance(extra, dict) else None
        infos.append(dict(info or {}))
        groups.append(key.rsplit("_", 2)[0])
    return infos, groups


class RewardMetricsMixin:
    """Adds ``reward_step_metrics`` of the step's rollouts to verl's training-step metrics."""

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        import transfer_queue as tq

        # the same TransferQueue read verl's own _compute_metrics makes for speculative-decoding stats
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        infos, groups = reward_rows(list(batch.keys), list(batch.tags), data.pop("extra_fields").tolist())
        metrics.update(reward_step_metrics(infos, groups))


def install_reward_metrics(mode: str) -> type:
    """Make verl's trainer for ``trainer.v1.trainer_mode=mode`` log vpo's reward metrics (this process only)."""
    from verl.trainer.ppo.v1 import trainer_base

    base = trainer_base.get_trainer_cls(mode)
    if issubclass(base, RewardMetricsMixin):
        return base
    cls = type(f"VPO{base.__name__}", (RewardMetricsMixin, base), {"__doc__": f"{base.__name__} + vpo reward metrics"})
    # register_trainer refuses a second class under a taken name; TaskRunnerV1.run looks the mode up here
    trainer_base.TRAINER_REGISTRY[mode] = cls
    return cls


class _TaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's TaskRunnerV1 whose trainer also logs vpo's reward metrics every step."""

    def run(self, config):
        install_reward_metrics(config.trainer.v1.trainer_mode)
        return super().run(config)


VPOTaskRunner = ray.remote(_TaskRunner)


@hydra.main(config_path=VERL_CONFIG_DIR, config_name="ppo_trainer", version_base=None)
def main(config) -> None:
    """verl's ``main_ppo.main`` with :data:`VPOTaskRunner`."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    if not config.trainer.use_v1:
        raise ValueError("trainer.use_v1=false (verl's legacy trainer) is not served by vpo.integrations.verl_main; "
                         "run python -m verl.trainer.main_ppo for it")
    auto_set_device(config)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    run_ppo(config, task_runner_class=VPOTaskRunner)


if __name__ == "__main__":
    main()
