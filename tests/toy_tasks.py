"""Toy tasks shared by several test modules (imported as ``toy_tasks``: pytest puts tests/ on the path)."""

from __future__ import annotations

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks.base import Task


class LetterTask(Task):
    """Objective j is 1 when letter 'abc'[j] occurs in the answer; examples are {"id": i}."""

    name = "letters"
    objectives = ("a", "b", "c")
    rewrite_rule = RewriteRule("letters", template="give {m} answers in <{tag}_i>", pattern=r"ANSWER", tag="ans")

    def prompt_single(self, example):
        return f"{example['id']} ANSWER"

    def score(self, text, example):
        return np.array([float(ch in text) for ch in "abc"])


class RatesTask(Task):
    """Two conflicting objectives: the fraction of 'a' and of 'b' in an answer. Answers of a
    chain are separated by '|'. Prompts are 'q<id>:' (m answers: 'q<id>:<m>:')."""

    objectives = ("a_rate", "b_rate")

    def prompt_single(self, example):
        return f"q{example['id']}:"

    def parse_chain(self, text, m):
        parts = [p.strip() for p in text.split("|")][:m]
        return parts + [""] * (m - len(parts))

    def format_chain(self, answers):
        """``parse_chain``'s inverse: the answers joined by '|'."""
        if any(not a.strip() or "|" in a for a in answers):
            raise ValueError("an answer of a '|'-separated chain is non-blank and holds no '|'")
        return "|".join(answers)

    def score(self, text, example):
        s = text.strip()
        if not s:
            return np.zeros(2)
        return np.array([s.count("a") / len(s), s.count("b") / len(s)])
