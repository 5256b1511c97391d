"""Terminal progress for TRL runs: a labelled progress bar, one short line per logged step (and every
log dict in full in a JSON-lines file), and a heartbeat for runs without a bar.

Usage::

    from vpo.integrations.trl import StepLines, label_progress
    label_progress(trainer, "train vpo", logs=False)       # the bar reads "train vpo: 40%|..."
    trainer.add_callback(StepLines("runs/out/train_log.jsonl", heartbeat=30.0))
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerCallback

__all__ = ["BUDGET_KEY", "StageProgress", "StepLines", "chain_shares", "label_progress", "step_line"]


class StageProgress(ProgressCallback):
    """transformers' training progress bar, labelled with its stage (tqdm ``desc``: ``warm-up: 40%|...``);
    ``logs=False`` keeps the per-step log dicts off the terminal (they stay in ``state.log_history``)."""

    def __init__(self, desc: str, *, logs: bool = True) -> None:
        super().__init__()
        self.desc, self.logs = desc, logs

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from tqdm.auto import tqdm

        if state.is_world_process_zero:  # as ProgressCallback's, with the label from the first frame
            self.training_bar = tqdm(total=state.max_steps, dynamic_ncols=True, desc=self.desc)
        self.current_step = 0

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.logs:
            super().on_log(args, state, control, logs=logs, **kwargs)


def _no_gradient(number: Callable[[str], float | None]) -> str | None:
    """Why a logged step had no gradient, when every group's rollouts scored alike
    (``vpo/frac_zero_std`` 1): no chain parsed, or the rollouts of each prompt tied."""
    if number("vpo/frac_zero_std") != 1.0:
        return None
    return "no gradient: nothing parsed" if number("vpo/parse_rate") == 0.0 else "no gradient: rollouts tied"


BUDGET_KEY = "completions/clipped_ratio"
"""TRL's share of a step's completions that reached ``max_completion_length`` without EOS."""


def step_line(logs: Mapping[str, Any], step: int, max_steps: int) -> str | None:
    """One short line for a training log (None for a log without a reward, e.g. the run's
    summary): step, objective (TRL's ``reward``: the set score the estimator optimises), the
    mean reward per objective, KL and seconds per step, each only when logged as a number. A
    step where every group scored alike says so, and why: "no gradient: nothing parsed" (no
    chain parsed) or "no gradient: rollouts tied" (each prompt's rollouts scored the same). The
    shares of chains that wrote more than m answers (``vpo/over_m_rate``: "83% over m"), fewer
    (``vpo/under_m_rate``: "21% under m") and that were cut at the token budget (``BUDGET_KEY``:
    "92% cut") are shown when not 0."""
    def number(key: str) -> float | None:
        value = logs.get(key)
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

    if "reward" not in logs:
        return None
    parts = [f"step {step}/{max_steps}"]
    objective = number("reward")
    parts.append(f"objective {objective:.3f}" if objective is not None else "objective n/a")
    why = _no_gradient(number)
    prefix = "vpo/objective/"
    per_objective = [f"{key[len(prefix):]} {number(key):.2f}" for key in logs
                     if key.startswith(prefix) and number(key) is not None]
    if per_objective:
        parts.append("(" + ", ".join(per_objective) + ")")
    if why is not None:
        parts.append(why)
    over_m, under_m, cut = number("vpo/over_m_rate"), number("vpo/under_m_rate"), number(BUDGET_KEY)
    if over_m:
        parts.append(f"{over_m:.0%} over m")  # chains that wrote more than m answers
    if under_m:
        parts.append(f"{under_m:.0%} under m")  # chains that wrote fewer: each missing answer scores 0
    if cut:
        parts.append(f"{cut:.0%} cut")  # chains cut at the token budget
    if number("kl") is not None:
        parts.append(f"KL {number('kl'):.4f}")
    if number("step_time") is not None:
        parts.append(f"{number('step_time'):.1f} s/step")
    return "  ".join(parts)


def chain_shares(history: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """A run's mean over its logged steps of the shares ``step_line`` shows: ``chains_over_m``
    (``vpo/over_m_rate``) and ``chains_under_m`` (``vpo/under_m_rate``), None where not logged
    (m = 1), and ``chains_at_budget`` (``BUDGET_KEY``)."""
    out: dict[str, float | None] = {}
    for name, key in (("chains_over_m", "vpo/over_m_rate"), ("chains_under_m", "vpo/under_m_rate"),
                      ("chains_at_budget", BUDGET_KEY)):
        values = [float(h[key]) for h in history if isinstance(h.get(key), int | float) and math.isfinite(h[key])]
        out[name] = round(sum(values) / len(values), 4) if values else None
    return out


class StepLines(TrainerCallback):
    """A compact line per logged training step on the terminal (``step_line``), and every log
    dict in full, one JSON object per line, in ``log_file`` (the trackers of ``report_to`` get
    them in full as well). With ``heartbeat`` (seconds; for a terminal without a progress bar),
    a step that is not logged and ends that long after the last line prints ``step N/M`` too, so a
    run whose logged steps are far apart still shows it is alive (a logged step gets its step line
    only: one line per step). ``own_line``: start each line on a line of
    its own, for a progress bar that goes to a log file or a pipe (there a bar frame ends in a
    carriage return, not a newline, so a line written after it would share the frame's line; on a
    terminal the bar is cleared and redrawn around the line, and nothing is needed). ``write``:
    where the lines go instead of the terminal (e.g. a stage log); ``spacing``: seconds a step
    line waits for after the last line (the first and the last step are always written), so that
    a run of fast steps writes about one line per ``spacing`` seconds and a slow run every step."""

    def __init__(self, log_file: str | None = None, *, print_lines: bool = True,
                 heartbeat: float | None = None, own_line: bool = False,
                 write: Callable[[str], None] | None = None, spacing: float = 0.0) -> None:
        self.log_file, self.print_lines, self.heartbeat = log_file, print_lines, heartbeat
        self.own_line, self.write, self.spacing = own_line, write, spacing
        self.clock: Callable[[], float] = time.monotonic
        self._last_line = self.clock()
        self._written = False

    def _write(self, line: str) -> None:
        if self.write is not None:
            self.write(line)
        else:
            from tqdm.auto import tqdm

            tqdm.write("\n" + line if self.own_line else line)   # above the progress bar, which then redraws
            if self.own_line:
                sys.stdout.flush()  # in a pipe, stdout is block-buffered: the line goes out beside the bar's frames
        self._written = True
        self._last_line = self.clock()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last_line = self.clock()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if (self.heartbeat is not None and self.print_lines and state.is_world_process_zero
                and not _logs_now(args, state, control) and self.clock() - self._last_line >= self.heartbeat):
            total = f"/{state.max_steps}" if state.max_steps and state.max_steps > 0 else ""
            self._write(f"step {state.global_step}{total} (next logged step line: "
                        f"every {args.logging_steps} steps)")

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or not logs:
            return
        if self.log_file:
            with open(self.log_file, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": state.global_step, **logs}, default=str) + "\n")
        line = step_line(logs, state.global_step, state.max_steps)
        if not line or not self.print_lines:
            return
        last = bool(state.max_steps) and state.global_step >= state.max_steps
        if self._written and not last and self.clock() - self._last_line < self.spacing:
            return
        self._write(line)


def _logs_now(args: Any, state: Any, control: Any) -> bool:
    """Whether the step that just ended is logged (its step line follows at once, so a heartbeat
    would only repeat it): transformers' flow callback has set ``control.should_log`` by the time
    the other callbacks see the step's end; without a control, every ``logging_steps``-th step."""
    if control is not None:
        return bool(getattr(control, "should_log", False))
    every = getattr(args, "logging_steps", 0) or 0
    return every >= 1 and state.global_step % int(every) == 0


def label_progress(trainer: Any, desc: str, *, show: bool = True, logs: bool = True) -> None:
    """Give a transformers ``Trainer`` (TRL's included) a progress bar labelled ``desc``, or none
    (``show=False``; the terminal then gets no per-step lines either, only what the caller logs)."""
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    if show:
        trainer.add_callback(StageProgress(desc, logs=logs))
