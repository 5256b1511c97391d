"""TRL presets: the paper's RL hyperparameters (docs/algorithm.md §7) as a dataclass mapped onto TRL's
``GRPOConfig``, the TRL run settings ``vpo train`` passes through (``TRLOptions``), and the reading
of a ``trl grpo --config`` YAML. Light to import (torch and TRL load inside the functions), so the
CLI can build its flags from it.

Usage::

    from vpo.integrations.trl.config import RLConfig, TRLOptions
    args = RLConfig(learning_rate=1e-6).to_grpo_config("runs/out", task="maze", answers=3)
    args = RLConfig().to_grpo_config("runs/out", **TRLOptions(report_to="tensorboard").grpo_values())

GRPOConfig options whose input ``VPOTrainer`` replaces for a task (``VPO_OWNED``:
``multi_objective_aggregation``, ``reward_weights``) are refused, as flags and in a YAML, with
what VPO does instead; ``scale_rewards`` is a TRL setting mapped onto the estimator's scale
(``estimator_scale``, the one place that decides it, for ``VPOTrainer`` and ``vpo train``), and
``map_trl_options`` maps or refuses the others for ``VPOTrainer``; TRL's loss settings
(``loss_type``, ``epsilon``, ``beta``, ...) act on the estimator's advantages as on GRPO's, so the
presets are only defaults.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import typing
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["GRPO_NAMES", "LOSS_TYPES", "LR_SCHEDULERS", "RLConfig", "TASK_EPOCHS", "TRLOptions", "VPO_OWNED",
           "check_engine", "estimator_scale", "map_trl_options", "read_grpo_yaml"]

TASK_EPOCHS: dict[str, float] = {"maze": 2, "musique": 1, "eureqa": 6, "toolcall": 20}
"""Epochs per task in the paper's runs (docs/algorithm.md §7); other tasks default to 1."""

VPO_OWNED: dict[str, str] = {
    "multi_objective_aggregation": "VPO does not add up reward functions: the task scores every answer as a "
                                   "D-objective vector and the --method estimator combines the vectors (vpo: "
                                   "E_w[max_i w.r_i] over --num-weights Dirichlet weights)",
    "reward_weights": "the task is the only reward function; its objectives are weighted by the estimator (vpo: "
                      "Dirichlet weights, --num-weights/--alpha/--sampler; grpo: the task's fixed scalarisation)",
}
"""GRPOConfig options whose input VPOTrainer replaces, with what VPO does instead (refused, never ignored)."""

GRPO_NAMES: dict[str, str] = {"clip_epsilon": "epsilon", "kl_beta": "beta", "force_cpu": "use_cpu"}
"""RLConfig fields that GRPOConfig names differently (the others have TRL's names)."""

_SCRIPT_KEYS: dict[str, str] = {
    "model_name_or_path": "model", "dataset_name": "source", "use_peft": "lora", "lora_r": "lora_rank",
    "lora_alpha": "lora_alpha", "output_dir": "out",
}
"""``trl grpo`` YAML keys that name a ``vpo train`` setting (the command's own field)."""

_NOT_TAKEN: dict[str, str] = {
    "reward_funcs": "vpo train's reward is the task (--task); to use VPO's rewards in `trl grpo`, pass "
                    "--reward_funcs vpo.integrations.trl.vpo_reward",
    "reward_model_name_or_path": "vpo train's reward is the task (--task), not a reward model",
    "remove_unused_columns": "vpo train keeps every dataset column (the scorer reads 'example'): it is always false",
    "eval_strategy": "vpo train has no evaluation split; evaluate its checkpoints with `vpo eval`",
    "model_init_kwargs": "vpo train loads the model itself (--model: a folder, a cached hub id or a .gguf file), so "
                         "TRL would ignore them",
}
"""YAML keys ``vpo train`` refuses for another reason than VPO_OWNED (unless they hold ``_FIXED``'s value)."""

_FIXED: dict[str, Any] = {"remove_unused_columns": False, "eval_strategy": "no"}
"""YAML values that say what ``vpo train`` does anyway (accepted, nothing to pass)."""

LR_SCHEDULERS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
                 "inverse_sqrt", "reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
                 "warmup_stable_decay", "greedy")
"""``transformers.SchedulerType`` values (transformers 5.x), so a typo fails before the model loads."""
LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")
"""TRL 1.16's ``GRPOConfig.loss_type`` values (tests/commands/test_cli_train.py compares both lists with the
installed libraries)."""


@dataclass
class RLConfig:
    """RL hyperparameters with the paper's presets (docs/algorithm.md §7), mapped to TRL's
    ``GRPOConfig`` by ``to_grpo_config``. Fields left at None are resolved per task and number
    of answers. Importing this module stays cheap: torch and TRL load inside the method.
    """

    learning_rate: float = field(default=1e-6, metadata={"help": "AdamW learning rate", "above": 0.0})
    lr_scheduler_type: str = field(default="constant", metadata={"help": "learning-rate schedule",
                                                                 "choices": LR_SCHEDULERS})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1", "min": 0.0, "below": 1.0})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2", "min": 0.0, "below": 1.0})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay", "min": 0.0})
    clip_epsilon: float = field(default=0.2, metadata={"help": "PPO clip range epsilon", "above": 0.0})
    kl_beta: float = field(default=1e-3, metadata={"help": "KL penalty coefficient (0: no reference model)",
                                                   "min": 0.0})
    num_generations: int = field(default=8, metadata={
        "help": "rollouts per prompt N (G groups of N make a batch)", "min": 2})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature of the rollouts",
                                                      "above": 0.0})
    per_device_train_batch_size: int = field(
        default=8, metadata={"help": "completions per device per micro-batch", "min": 1})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimiser step",
                                                                  "min": 1})
    steps_per_generation: int | None = field(
        default=None, metadata={"help": "optimiser steps per generation batch (None: TRL's, "
                                        "--gradient-accumulation-steps)", "min": 1})
    num_iterations: int | None = field(
        default=None, metadata={"help": "policy updates per generation batch, TRL's mu (None: TRL's, 1)", "min": 1})
    num_train_epochs: float | None = field(
        default=None, metadata={"help": "epochs (default per task: maze 2, musique 1, eureqa 6, toolcall 20, else 1)",
                                "above": 0.0})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many steps (-1: run the epochs)",
                                                 "min": 1, "also": (-1,)})
    max_completion_length: int | None = field(
        default=None, metadata={"help": "max new tokens per rollout (default 256; x the factor below when m > 1)",
                                "min": 1})
    multi_answer_length_factor: float = field(
        default=2.0, metadata={"help": "completion-budget multiplier for m > 1 when max_completion_length is unset",
                               "above": 0.0})
    loss_type: str = field(default="dapo", metadata={"help": "TRL loss aggregation (dapo: token-mean)",
                                                     "choices": LOSS_TYPES})
    seed: int = field(default=0, metadata={"help": "seed of training and of the shared VPO weights", "min": 0})
    logging_steps: int = field(default=1, metadata={"help": "log every N steps", "min": 1})
    save_strategy: str = field(default="no", metadata={"help": "checkpoints", "choices": ("no", "steps", "epoch")})
    force_cpu: bool = field(default=False, metadata={"help": "train on CPU even when CUDA is available"})

    def resolved_epochs(self, task: str | None) -> float:
        """Epochs for ``task``: the explicit value, else the paper's count, else 1."""
        if self.num_train_epochs is not None:
            return float(self.num_train_epochs)
        return float(TASK_EPOCHS.get(task or "", 1))

    def resolved_completion_length(self, answers: int) -> int:
        """Completion budget: the explicit value, else 256 (x the factor when m > 1)."""
        if self.max_completion_length is not None:
            return int(self.max_completion_length)
        return int(round(256 * self.multi_answer_length_factor)) if answers > 1 else 256

    def to_grpo_config(self, output_dir: str, *, task: str | None = None, answers: int = 1,
                       **overrides: Any) -> Any:
        """A ``trl.GRPOConfig`` with these settings. Without CUDA (or with ``force_cpu``) it
        sets ``use_cpu=True, bf16=False, gradient_checkpointing=False``. ``overrides`` are
        GRPOConfig fields and win."""
        import torch
        from trl import GRPOConfig

        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (group normalisation), got {self.num_generations}")
        cpu = self.force_cpu or not torch.cuda.is_available()
        values: dict[str, Any] = dict(
            output_dir=output_dir,
            learning_rate=self.learning_rate,
            lr_scheduler_type=self.lr_scheduler_type,
            optim="adamw_torch",
            adam_beta1=self.adam_beta1,
            adam_beta2=self.adam_beta2,
            weight_decay=self.weight_decay,
            epsilon=self.clip_epsilon,
            beta=self.kl_beta,
            num_generations=self.num_generations,
            temperature=self.temperature,
            per_device_train_batch_size=self.per_device_train_batch_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            steps_per_generation=self.steps_per_generation,
            num_train_epochs=self.resolved_epochs(task),
            max_steps=self.max_steps,
            max_completion_length=self.resolved_completion_length(answers),
            loss_type=self.loss_type,
            seed=self.seed,
            logging_steps=self.logging_steps,
            save_strategy=self.save_strategy,
            report_to="none",
            remove_unused_columns=False,
            use_cpu=cpu,
            bf16=(not cpu) and torch.cuda.is_bf16_supported(),
            gradient_checkpointing=not cpu,
        )
        if self.num_iterations is not None:
            values["num_iterations"] = self.num_iterations
        values.update(overrides)
        return GRPOConfig(**values)

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for run records)."""
        return asdict(self)


@dataclass
class TRLOptions:
    """TRL run settings ``vpo train`` passes to ``GRPOConfig`` under TRL's names (logging, vLLM,
    precision, checkpoints). Fields left at None take TRL's default (or, for ``bf16`` and
    ``gradient_checkpointing``, RLConfig's choice: on with CUDA, off on CPU)."""

    report_to: str = field(default="none", metadata={
        "help": "where TRL logs metrics: none, tensorboard (offline: <out>/runs), wandb, trackio, ... "
                "(comma-separated for several)"})
    bf16: bool | None = field(default=None, metadata={
        "help": "bfloat16 mixed precision (default: on when the GPU supports it, off on CPU)"})
    gradient_checkpointing: bool | None = field(default=None, metadata={
        "help": "recompute activations in the backward pass to save memory (default: on with CUDA, off on CPU)"})
    use_vllm: bool = field(default=False, metadata={
        "help": "generate the rollouts with vLLM (CUDA; pip install 'trl[vllm]')"})
    vllm_mode: str | None = field(default=None, metadata={
        "help": "colocate: vLLM runs inside the training processes; server: a separate `trl vllm-serve` "
                "(None: TRL's, colocate)", "choices": ("colocate", "server")})
    vllm_server_host: str | None = field(default=None, metadata={
        "help": "server mode: host of `trl vllm-serve` (None: TRL's)"})
    vllm_server_port: int | None = field(default=None, metadata={
        "help": "server mode: port of `trl vllm-serve` (None: TRL's)", "min": 1, "max": 65535})
    vllm_gpu_memory_utilization: float | None = field(default=None, metadata={
        "help": "colocate mode: share of GPU memory vLLM may take (None: TRL's)", "above": 0.0, "max": 1.0})
    vllm_tensor_parallel_size: int | None = field(default=None, metadata={
        "help": "colocate mode: GPUs per vLLM engine (None: TRL's)", "min": 1})
    scale_rewards: str | None = field(default=None, metadata={
        "help": "divide the centred rollout scores by the group's std, the batch's, or not at all (TRL's "
                "option, mapped onto the --method estimator's scale; None: the estimator's default, group)",
        "choices": ("group", "batch", "none")})
    save_steps: int | None = field(default=None, metadata={
        "help": "save a checkpoint every N steps (implies --save-strategy steps)", "min": 1})
    save_total_limit: int | None = field(default=None, metadata={
        "help": "keep at most N checkpoints in --out (None: all)", "min": 1})
    resume_from_checkpoint: str | None = field(default=None, metadata={
        "help": "resume from a checkpoint folder, or 'latest' (the last checkpoint-N in --out)"})
    extra: dict[str, Any] = field(default_factory=dict, init=False, metadata={
        "help": "further GRPOConfig values (from --config) that no flag names"})
    """GRPOConfig options without a flag, from ``--config`` (passed as they are)."""

    def report_targets(self) -> list[str]:
        """``report_to`` as TRL's list (``["none"]`` for none)."""
        names = [name.strip() for name in str(self.report_to).split(",") if name.strip()]
        return names or ["none"]

    def grpo_values(self) -> dict[str, Any]:
        """The GRPOConfig values these settings stand for (None fields left out, ``extra`` last)."""
        values: dict[str, Any] = {"report_to": self.report_targets()}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.init and f.name != "report_to" and value is not None:
                values[f.name] = value
        values.update(self.extra)
        return values


def estimator_scale(scale_rewards: Any, spec: Any, given: str | None = None, *, flag: bool = False) -> str | None:
    """The estimator ``scale`` option that TRL's ``scale_rewards`` (``group``, ``batch``, ``none``, or
    TRL's booleans) stands for: None for ``group`` (TRL's default and the estimators' own), else
    the value. ValueError when estimator ``spec`` has no ``scale`` option, or when ``given`` (a
    ``scale`` estimator option) disagrees. ``flag`` words the error for ``vpo train``'s flags."""
    scale = {True: "group", False: "none", None: "group"}.get(scale_rewards, scale_rewards)
    if scale == "group":
        return None
    if "scale" not in spec.options:
        raise ValueError(f"--scale-rewards {scale}: --method {spec.name} has no group scale to set (its options: "
                         f"{', '.join(spec.options)})" if flag else
                         f"scale_rewards={scale!r}: estimator {spec.name!r} has no 'scale' option to map it onto; "
                         "leave scale_rewards at 'group'")
    if given is not None and given != scale:
        raise ValueError(f"scale_rewards={scale!r} and estimator_options scale={given!r} disagree; give one of them")
    return scale


def map_trl_options(args: Any, spec: Any, options: dict[str, Any], widths: Sequence[int] | None) -> Any:
    """Map ``args.scale_rewards``, ``multi_objective_aggregation`` and ``reward_weights`` (a
    ``GRPOConfig``) onto estimator ``spec``'s ``options`` (updated in place), or raise ValueError
    saying why one cannot be honoured. ``widths``: each reward function's number of objectives
    (None: a task, the only reward function). Returns the per-objective weights of
    ``reward_weights`` (a function's weight on each of its objectives; numpy), or None."""
    import numpy as np

    scale = estimator_scale(getattr(args, "scale_rewards", "group"), spec, options.get("scale"))
    if scale is not None:
        options["scale"] = scale
    aggregation = getattr(args, "multi_objective_aggregation", "sum_then_normalize")
    if aggregation != "sum_then_normalize":
        if spec.name != "gdpo":
            raise ValueError(f"multi_objective_aggregation={aggregation!r} is TRL's GDPO; VPOTrainer combines the "
                             f"objectives with its estimator ({spec.name!r}): pass estimator='gdpo' for GDPO, or leave "
                             "multi_objective_aggregation at 'sum_then_normalize'")
        options.setdefault("whiten", "trl")  # TRL's normalize_then_sum whitens as "trl"
    weights = getattr(args, "reward_weights", None)
    if weights is None:
        return None
    if widths is None:
        raise ValueError("reward_weights: with task= the task is the only reward function and the estimator weights "
                         "its objectives; remove reward_weights")
    if len(weights) != len(widths):
        raise ValueError(f"reward_weights has {len(weights)} entries for {len(widths)} reward functions")
    per_objective = np.repeat(np.asarray(weights, dtype=np.float64), widths)
    if spec.weights is not None or spec.conditions_prompt:
        raise ValueError(f"reward_weights: estimator {spec.name!r} draws its own weights over the objectives, so fixed "
                         "reward_weights would be ignored; remove them (or use a scalar baseline such as 'grpo' or "
                         "'multi_rlvr', which sums the objectives with them, or 'gdpo')")
    if "objective_weights" in spec.options:
        if options.get("objective_weights") is not None:
            raise ValueError("give reward_weights or estimator_options objective_weights, not both")
        options["objective_weights"] = per_objective
    elif "scalar" not in spec.options:
        raise ValueError(f"reward_weights: estimator {spec.name!r} takes neither a scalar nor objective weights; "
                         "remove reward_weights")
    return per_objective


def check_engine(options: TRLOptions) -> None:
    """Fail in one line, before any model loads, when a setting needs a package that is missing:
    vLLM for ``use_vllm`` (both modes import it) and each ``report_to`` integration."""
    if options.use_vllm and importlib.util.find_spec("vllm") is None:
        raise ValueError("--use-vllm: vLLM is not installed; on a CUDA machine run pip install 'trl[vllm]==1.16.*' "
                         "(vLLM brings its own torch)")
    targets = options.report_targets()
    if targets in (["none"], ["all"]):
        return
    from transformers.integrations import integration_utils

    for name in targets:
        if name not in integration_utils.INTEGRATION_TO_CALLBACK:
            raise ValueError(f"--report-to {name}: unknown; choose none, all or any of "
                             f"{', '.join(integration_utils.INTEGRATION_TO_CALLBACK)}")
        available = getattr(integration_utils, f"is_{name}_available", None)
        if available is not None and not available():
            raise ValueError(f"--report-to {name}: the {name} package is not installed (pip install {name})")
        check_tracker(name)


def check_tracker(name: str) -> None:
    """Fail in one line, before any model loads, when tracker ``name`` could not start: wandb
    without a login (``WANDB_API_KEY``, or ``wandb login``'s netrc entry; ``WANDB_MODE=offline``
    or ``disabled`` needs none), mlflow with a ``MLFLOW_TRACKING_URI`` of an unknown scheme or an
    http(s) server that does not answer. Otherwise the tracker fails after the model has loaded."""
    if name == "wandb":
        if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_MODE", "").lower() in (
                "offline", "disabled", "dryrun"):
            return
        from urllib.parse import urlparse

        host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
        if not _netrc_has(host):
            raise ValueError(f"--report-to wandb: not logged in to {host} (no WANDB_API_KEY and no entry in "
                             f"{_netrc_path()}); run `wandb login`, or set WANDB_MODE=offline")
    elif name == "mlflow":
        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        if not uri:
            return  # mlflow's default: a local ./mlruns folder
        from urllib.parse import urlparse

        parsed = urlparse(uri)
        scheme = parsed.scheme.split("+")[0]
        known = ("", "file", "http", "https", "databricks", "sqlite", "postgresql", "mysql", "mssql")
        if scheme not in known:
            raise ValueError(f"--report-to mlflow: MLFLOW_TRACKING_URI {uri} has an unknown scheme {scheme!r} "
                             f"(expected a path or one of {', '.join(k for k in known if k)})")
        if scheme in ("http", "https"):
            import socket

            port = parsed.port or (443 if scheme == "https" else 80)
            try:
                socket.create_connection((parsed.hostname or "", port), timeout=3).close()
            except OSError as err:
                raise ValueError(f"--report-to mlflow: the tracking server MLFLOW_TRACKING_URI {uri} does not "
                                 f"answer ({err.strerror or err})") from None


def _netrc_path() -> str:
    return os.environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")


def _netrc_has(host: str) -> bool:
    import netrc

    try:
        return netrc.netrc(_netrc_path()).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


@functools.cache
def _grpo_types() -> dict[str, Any]:
    from trl import GRPOConfig

    return _field_types(GRPOConfig)


def _grpo_option_names() -> set[str] | None:
    """GRPOConfig's option names, read from the sources of TRL's ``GRPOConfig`` and the classes
    it derives from (transformers' ``TrainingArguments``) without importing them, so a YAML key
    is judged in milliseconds rather than after TRL's import; None when a source does not read
    as expected (then TRL is imported)."""
    import ast

    classes = {"GRPOConfig": ("trl", "trainer/grpo_config.py"), "_BaseConfig": ("trl", "trainer/base_config.py"),
               "TrainingArguments": ("transformers", "training_args.py")}
    names: set[str] = set()
    for cls, (package, file) in classes.items():
        try:  # a top-level package is found without being imported; its submodules would import it
            spec = importlib.util.find_spec(package)
            tree = ast.parse(Path(spec.submodule_search_locations[0], file).read_text()) if spec else None
        except (ImportError, OSError, SyntaxError, ValueError, TypeError, IndexError):
            return None
        body = next((node.body for node in getattr(tree, "body", []) if isinstance(node, ast.ClassDef)
                     and node.name == cls), None)
        if body is None:
            return None
        names |= {node.target.id for node in body if isinstance(node, ast.AnnAssign)
                  and isinstance(node.target, ast.Name) and not node.target.id.startswith("_")}
    return names


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """A YAML scalar as field type ``tp`` wants it: YAML reads ``1e-5`` as a string, and TRL's own
    parser converts such strings, so numbers and booleans written as text are converted here."""
    kinds = typing.get_args(tp) or (tp,)
    if isinstance(value, bool) and str in kinds and bool not in kinds:
        raise ValueError(f"{where}: expected text, got {str(value).lower()} (YAML reads a bare no/yes/off/on as a "
                         "boolean; quote it)")
    if value is None or not isinstance(value, str):
        return value
    if str in kinds:
        return value
    wanted = [kind for kind in (bool, int, float) if kind in kinds]
    for kind in wanted:
        try:
            return {"true": True, "false": False}[value.lower()] if kind is bool else kind(value)
        except (KeyError, ValueError):
            continue
    if wanted:
        raise ValueError(f"{where}: expected {' or '.join(k.__name__ for k in wanted)}, got {value!r}")
    return value


def read_grpo_yaml(path: str, train_cls: type) -> dict[str, dict[str, Any]]:
    """The values of a TRL ``GRPOConfig`` YAML (what ``trl grpo --config`` reads), by owner:
    ``{"train": ..., "rl": ..., "trl": ..., "extra": ...}``, each ``{field: value}``.

    A key goes to RLConfig when it has the field (``epsilon``, ``beta`` and ``use_cpu`` answer to
    ``clip_epsilon``, ``kl_beta`` and ``force_cpu``: ``GRPO_NAMES``), else to TRLOptions, else to
    ``extra`` (any other GRPOConfig option, passed as it is). ``trl grpo``'s ``model_name_or_path``,
    ``dataset_name``, ``use_peft``, ``lora_r``, ``lora_alpha`` and ``output_dir`` go to the fields of
    ``train_cls`` (``vpo train``'s own). ValueError, naming the key, for a key that is no GRPOConfig
    option, a VPO_OWNED one (with what VPO does instead) or one vpo train does not take.
    """
    import yaml

    where = f"--config {path}"
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"{where}: no such file")
    try:
        loaded = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: not valid YAML ({str(err).splitlines()[0]})") from None
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{where}: expected a mapping of GRPOConfig options, got {type(loaded).__name__}")
    types = {"train": _field_types(train_cls), "rl": _field_types(RLConfig), "trl": _field_types(TRLOptions)}
    grpo_names = _grpo_option_names()  # every key is judged before TRL's import (seconds) when the sources read
    rl_field = {GRPO_NAMES.get(name, name): name for name in types["rl"]}
    out: dict[str, dict[str, Any]] = {owner: {} for owner in ("train", "rl", "trl", "extra")}
    placed = []
    for key, value in loaded.items():
        if key in VPO_OWNED:
            raise ValueError(f"{where}: {key} is not a vpo train option: {VPO_OWNED[key]}")
        if key in _FIXED and (value == _FIXED[key] or (_FIXED[key] == "no" and value is False)):
            continue  # what vpo train does anyway (YAML reads a bare no as false)
        if key in _NOT_TAKEN:
            raise ValueError(f"{where}: {key}: {_NOT_TAKEN[key]}")
        if key in _SCRIPT_KEYS:
            owner, name = "train", _SCRIPT_KEYS[key]
        elif key in rl_field:
            owner, name = "rl", rl_field[key]
        elif key in types["trl"]:
            owner, name = "trl", key
        elif key in (grpo_names if grpo_names is not None else _grpo_types()):
            owner, name = "extra", key
        else:
            raise ValueError(f"{where}: unknown key {key!r}: not a GRPOConfig option")
        placed.append((key, value, owner, name))
    for key, value, owner, name in placed:
        if key == "report_to" and isinstance(value, list):  # TRL's list form
            value = ",".join(map(str, value))
        kind = _grpo_types()[name] if owner == "extra" else types[owner][name]
        out[owner][name] = _coerce(value, kind, f"{where}: {key}")
    return out
