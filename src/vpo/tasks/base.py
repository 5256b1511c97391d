"""The Task contract: prompts, answer parsing and a reward vector in [0, 1]^D per answer.

A task is a small environment in the Gymnasium / MO-Gymnasium spirit, except that one
"step" is a whole generation::

    task = get_task("maze", size=5)
    example = task.examples("train", 1, seed=0)[0]      # a JSON-serialisable dict
    prompt = task.prompt(example, m=3)                  # m-answer prompt (m=1: single answer)
    matrix = task.score_chain(model_text, example, m=3) # (3, D), deduplicated, zero-padded
    task.scalar(matrix)                                 # (3,) fixed scalars (GRPO / evaluation)

Scoring never raises on model text: garbage scores the zero vector. Malformed *examples*
(data, not model output) raise ValueError naming the field and the row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from vpo.chains import RewriteRule, parse_answers, rewrite_prompt, score_answers

Example = dict[str, Any]


class Task(ABC):
    """Base class of every task. Subclasses set the class attributes and implement
    ``prompt_single`` and ``score``; the rest has working defaults."""

    name: ClassVar[str] = ""
    """Registry name."""
    objectives: tuple[str, ...] = ()
    """Names of the D objectives, in reward-vector order (per-example tasks override
    ``objective_names``)."""
    rewrite_rule: ClassVar[RewriteRule]
    """How the single-answer prompt becomes the m-answer prompt."""
    parse_fallbacks: ClassVar[bool] = False
    """Use the maze fallbacks of ``parse_answers`` when no numbered tag is found."""
    pad_chains: ClassVar[bool] = True
    """Zero-pad chain matrices to exactly m rows (code tasks keep them unpadded)."""

    # ----- prompts -------------------------------------------------------------------
    @abstractmethod
    def prompt_single(self, example: Example) -> str:
        """The single-answer prompt (the format GRPO trains on)."""

    def prompt(self, example: Example, m: int = 1) -> str:
        """Prompt asking for ``m`` answers; m = 1 is the single-answer prompt unchanged."""
        single = self.prompt_single(example)
        return single if m == 1 else rewrite_prompt(single, m, self.rewrite_rule)

    # ----- scoring -------------------------------------------------------------------
    @abstractmethod
    def score(self, text: str, example: Example) -> np.ndarray:
        """Reward vector (D,) in [0, 1] of one answer text. Never raises on model text."""

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        """The D objective names (for ``example`` where D varies per example)."""
        return self.objectives

    def num_objectives(self, example: Example | None = None) -> int:
        """D for ``example``."""
        return len(self.objective_names(example))

    def parse_chain(self, text: str, m: int) -> list[str]:
        """Exactly ``m`` answer strings of an m-answer generation (missing ones empty)."""
        return parse_answers(text, m, tag=self.rewrite_rule.tag, fallbacks=self.parse_fallbacks)

    def dedup_key(self, answer: str, vector: np.ndarray) -> Hashable:
        """Answers with equal keys count once in a chain (default: identical reward vectors)."""
        return vector.tobytes()

    def score_chain(self, text: str, example: Example, m: int) -> np.ndarray:
        """(m, D) reward matrix of one generation: parse, score, dedup, zero-pad.

        m = 1 scores the whole text as the single answer, so it is (1, D).
        """
        dim = self.num_objectives(example)
        if m == 1:
            return np.asarray(self.score(text, example), dtype=np.float64).reshape(1, dim)
        answers = self.parse_chain(text, m)
        return score_answers(answers, lambda a: self.score(a, example), m, dim,
                             key=self.dedup_key, pad=self.pad_chains)

    def scalar(self, vectors: np.ndarray | Sequence[float]) -> np.ndarray | float:
        """The task's fixed scalarisation (GRPO and evaluation): (..., D) -> (...). Default mean."""
        arr = np.asarray(vectors, dtype=np.float64)
        out = arr.mean(axis=-1) if arr.shape[-1] else np.zeros(arr.shape[:-1])
        return float(out) if out.ndim == 0 else out

    def solved(self, vector: np.ndarray | Sequence[float]) -> bool:
        """True when every component is at its maximum (1)."""
        arr = np.asarray(vector, dtype=np.float64)
        return bool(arr.size and np.all(arr >= 1.0 - 1e-9))

    # ----- data ----------------------------------------------------------------------
    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example's fields; raise ValueError naming the field and row. Returns it."""
        if not isinstance(example, Mapping):
            raise ValueError(f"{self.name}: row {row}: example must be a mapping, got {type(example).__name__}")
        return dict(example)

    def examples(self, split: str = "train", n: int | None = None, *, seed: int | None = None,
                 source: str | None = None) -> list[Example]:
        """Examples of a split: generated (maze) or loaded from ``source`` (a file, a local
        parquet, or a Hugging Face dataset name), validated."""
        raise ValueError(f"task {self.name!r} needs a data source (source=...)")


def require(example: Mapping[str, Any], field: str, types: type | tuple[type, ...], task: str,
            row: int | None) -> Any:
    """Fetch ``example[field]`` checking its type; ValueError naming field and row otherwise."""
    if field not in example:
        raise ValueError(f"{task}: row {row}: missing field {field!r}")
    value = example[field]
    if not isinstance(value, types) or isinstance(value, bool) and bool not in (
            types if isinstance(types, tuple) else (types,)):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise ValueError(f"{task}: row {row}: field {field!r} must be {names}, got {type(value).__name__}")
    return value
