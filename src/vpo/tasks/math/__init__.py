"""Math word problems (GSM8K-style and MATH-style) with one reward component per answer part.

Usage::

    from vpo.tasks import get_task
    task = get_task("math")                                   # timeout=1.0 s per answer
    example = task.examples("test", 1)[0]                     # shipped GSM8K-style fixture
    rows = task.examples("test", source="fixture:math")       # shipped MATH-style fixture
    rows = task.examples("test", source="data/math_{split}.jsonl")   # your data (or an HF name)
    task.score("... so the answer is \\\\boxed{\\\\frac{1}{2}}", example)  # (D,) vector

Checking is final-answer equivalence with ``math-verify`` (``pip install 'vpo[math]'``):
fractions, radicals, intervals, sets, units and ``\\text{}``, LaTeX or plain. The final answer
of a text is its last ``\\boxed{...}`` (or ``\\fbox{...}``), else the text after its last
``####`` (the GSM8K convention); a text with neither scores the zero vector.

Reward vector (D varies per example, ``objective_names(example)``):

* one gold part (D = 1, ``correct``): 1 when the final answer is equivalent to the gold one.
  With D = 1, VPO's set score of a chain is its best answer: a pass@m objective.
* n >= 2 gold parts (a "find all x" set, a tuple / ordered pair, a multi-part answer
  ``a = 2, b = 3``): D = n + 1, ``part_1 .. part_n`` then ``no_extra``. ``part_i`` is 1 when
  some predicted part is equivalent to gold part i (tuples: the predicted part at position i);
  ``no_extra`` is the fraction of predicted parts that match a gold part (precision), so listing
  every candidate does not pay. The fixed ``scalar`` is the F1 of the parts (recall = mean of
  ``part_i``, precision = ``no_extra``); "solved" (every component 1) is the exact answer.

Every comparison runs in a persistent worker process (a small pool, ``workers``, one per thread
scoring at the same time) with a time limit (``timeout``, default 1 s): the worker interrupts
itself with ``setitimer`` and the caller kills and restarts it when it does not answer within
``timeout + grace`` (a computation stuck in C, such as ``9^{9^{9}}``). This works from any
thread, which math-verify's own signal-based limit does not (verl and TRL call reward functions
in threads). Plain integers on both sides are compared in-process (exact, no sympy).
Unparseable, empty, huge (over ``max_answer_chars``) or adversarial answers score the zero
vector and never raise.

Data: GSM8K records ``{question, answer: "... #### 42"}``, MATH records ``{problem, solution
with \\boxed{}, level: "Level 3", type}``, or the task's own schema ``{id, question, answer:
final answer, parts?, kind?, level?, type?, difficulty?}``; converted and validated on load.
The shipped fixtures are invented problems: ``fixture:gsm8k`` (the default, 24 questions, all
D = 1) and ``fixture:math`` (13 problems, levels 1-5, D varies). See docs/math.md.

Modules: ``extract`` (final answers and their parts), ``verify`` (math-verify in worker
processes), ``task`` (data, prompts, the reward vector).
"""

from __future__ import annotations

from vpo.tasks.math.extract import MAX_ANSWER_CHARS, final_answer, last_boxed, split_parts
from vpo.tasks.math.task import FIXTURES, MathTask, from_record
from vpo.tasks.math.verify import CheckerPool, _Checker

__all__ = [
    "FIXTURES",
    "MAX_ANSWER_CHARS",
    "CheckerPool",
    "MathTask",
    "final_answer",
    "from_record",
    "last_boxed",
    "split_parts",
]

_ = _Checker  # its name in the one-module task, kept importable (tests use it)
