"""The tiny model's compact maze format: a fixed-length prompt and letter routes.

A 5x5 maze prompt is 35 characters (one token each)::

    "3 12 e##dd/...l./#.b#./gl.../gg..s>"
     |  |  grid rows, top first, tiles lower-cased, '/' between rows
     |  step budget (two digits)
     number of routes asked for (m)

Tiles are lower-cased (``s e g d l b # .``) so that they never share a token with the moves
``U D L R``. Answers (the completion, then ``<eos>``)::

    m = 1:  "LLLLRRUUULLU"
    m = 3:  "<route_1>LLLLRRUUULLU<route_2>UUUULDLLLU<route_3>ULLUULLU"

``<route_i>`` is one token; closing tags are left out (the maze parser ends a block at the
next numbered opening tag), so a 3-route chain costs 3 tokens of markup. The task scores these
texts unchanged: ``task.score_chain(completion, example, m)`` reads the numbered blocks and
a run of the letters U/D/L/R as one move per letter. A checkpoint records this format in
``vpo_format.json`` so ``vpo eval`` prompts it the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from vpo.runs import FORMAT_FILE, atomic_write_text

MOVE_LETTERS = {"UP": "U", "DOWN": "D", "LEFT": "L", "RIGHT": "R"}
TILE_CHARS = "#.segdlb"
PROMPT_CHARS = "0123456789 />" + TILE_CHARS
ANSWER_CHARS = "UDLR"


def route_letters(moves: Sequence[str]) -> str:
    """["UP", "LEFT"] -> "UL"."""
    return "".join(MOVE_LETTERS[move] for move in moves)


@dataclass(frozen=True)
class CompactMazeFormat:
    """Prompt and answer format of the demo's character-level maze model (see module doc)."""

    max_answers: int = 3
    """Largest m the tokenizer has ``<route_i>`` tokens for."""
    name: str = "maze-compact"

    # ----- tokenizer -----------------------------------------------------------------
    def alphabet(self) -> str:
        return PROMPT_CHARS + ANSWER_CHARS

    def extra_tokens(self) -> list[str]:
        return [self.tag(i) for i in range(1, self.max_answers + 1)]

    @staticmethod
    def tag(i: int) -> str:
        return f"<route_{i}>"

    # ----- prompts and answers -------------------------------------------------------
    def prompt(self, example: Mapping[str, Any], m: int) -> str:
        """The compact prompt of ``example`` asking for ``m`` routes."""
        if not 1 <= m <= min(9, self.max_answers):
            raise ValueError(f"compact maze format: m must be in 1..{min(9, self.max_answers)}, got {m}")
        budget = int(example["budget"])
        if not 0 <= budget <= 99:
            raise ValueError(f"compact maze format: budget {budget} does not fit two digits")
        grid = "/".join(row.lower() for row in example["grid"])
        goal = example.get("goal_weights")
        if goal is None:
            return f"{m} {budget:02d} {grid}>"
        # goal-conditioned GRPO: the weights as two-digit percentages, "31124017" for .31 .12 .40 .17
        percents = "".join(f"{min(99, int(round(100 * float(w)))):02d}" for w in goal)
        return f"{m} {budget:02d} {percents} {grid}>"

    def completion(self, routes: Sequence[Sequence[str]]) -> str:
        """Target text for a list of routes (each a list of UP/DOWN/LEFT/RIGHT moves); one route
        gives the single-answer format, several the tagged m-answer format."""
        if len(routes) == 1:
            return route_letters(routes[0])
        if len(routes) > self.max_answers:
            raise ValueError(f"{len(routes)} routes exceed max_answers={self.max_answers}")
        return "".join(self.tag(i) + route_letters(r) for i, r in enumerate(routes, start=1))

    def answers(self, text: str, example: Mapping[str, Any], m: int) -> list[str]:
        """Exactly ``m`` route strings of a completion (missing ones empty)."""
        if m == 1:
            return [text]
        from vpo.chains import parse_answers

        return parse_answers(text, m, tag="route", fallbacks=True)

    def max_completion_tokens(self, budget: int, m: int) -> int:
        """Token budget of an m-route completion for a maze with step ``budget`` (+ EOS)."""
        return m * budget + (m if m > 1 else 0) + 1

    def completion_budget(self, examples: Sequence[Mapping[str, Any]], m: int) -> int:
        """Token budget of an m-route completion for the largest step budget of ``examples``."""
        return self.max_completion_tokens(max(int(e["budget"]) for e in examples), m)

    # ----- persistence ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"format": self.name, **{k: v for k, v in asdict(self).items() if k != "name"}}

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> CompactMazeFormat:
        if spec.get("format", "maze-compact") != "maze-compact":
            raise ValueError(f"not a compact maze format: {spec.get('format')!r}")
        most = spec.get("max_answers", 3)
        if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 9:
            # the prompt states m in one digit
            raise ValueError(f"field 'max_answers' is {most!r}, expected an integer in 1..9")
        return cls(max_answers=most)

    def save(self, model_dir: str | Path, **extra: Any) -> Path:
        """Write ``vpo_format.json`` (this format plus ``extra``, e.g. the task parameters)."""
        path = Path(model_dir) / FORMAT_FILE
        return atomic_write_text(path, json.dumps({**self.to_dict(), **extra}, indent=1, sort_keys=True))


@dataclass(frozen=True)
class GoalPerChainFormat:
    """The compact format for a goal-conditioned policy at evaluation: chain c of an example is
    prompted with its own goal w ~ Dir(1) (``vpo.weights.group_weights`` keyed on the example id,
    "eval" and c), so a pool covers the preferences a downstream selector might have."""

    base: CompactMazeFormat
    seed: int = 0
    num_objectives: int = 4
    name: str = "maze-compact-goals"

    def goal(self, example: Mapping[str, Any], chain: int) -> list[float]:
        from vpo.weights import group_weights

        key = (str(example.get("id", "")), "eval", int(chain))
        return [float(w) for w in group_weights([key], 1, self.num_objectives, seed=self.seed)[0, 0]]

    def prompt(self, example: Mapping[str, Any], m: int) -> str:
        return self.chain_prompt(example, m, 0)

    def chain_prompt(self, example: Mapping[str, Any], m: int, chain: int) -> str:
        return self.base.prompt({**example, "goal_weights": self.goal(example, chain)}, m)

    def answers(self, text: str, example: Mapping[str, Any], m: int) -> list[str]:
        return self.base.answers(text, example, m)

    def completion_budget(self, examples: Sequence[Mapping[str, Any]], m: int) -> int:
        return self.base.completion_budget(examples, m)

    def max_completion_tokens(self, budget: int, m: int) -> int:
        return self.base.max_completion_tokens(budget, m)


PROMPT_FORMATS = {"maze-compact": CompactMazeFormat}
"""The formats ``vpo.formats.load_format`` finds here by the name a checkpoint records."""
