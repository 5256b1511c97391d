"""Math word problems (GSM8K-style and MATH-style) with one reward component per answer part.

Usage::

    from vpo.tasks import get_task
    task = get_task("math")                                   # timeout=1.0 s per answer
    example = task.examples("test", 1)[0]                     # shipped GSM8K-style fixture
    rows = task.examples("test", source="fixture:math")       # shipped MATH-style fixture
    rows = task.examples("test", source="data/math_{split}.jsonl")   # your data (or an HF name)
    task.score("... so the answer is \\boxed{\\frac{1}{2}}", example)  # (D,) vector

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
itself with ``setitimer`` and the caller kills and restarts it when it does not answer within ``timeout + grace`` (a computation stuck in C, such as
``9^{9^{9}}``). This works from any thread, which math-verify's own signal-based limit does
not (verl and TRL call reward functions in threads). Plain integers on both sides are compared
in-process (exact, no sympy). Unparseable, empty, huge (over ``max_answer_chars``) or
adversarial answers score the zero vector and never raise.

Data: GSM8K records ``{question, answer: "... #### 42"}``, MATH records ``{problem, solution
with \\boxed{}, level: "Level 3", type}``, or the task's own schema ``{id, question, answer:
final answer, parts?, kind?, level?, type?, difficulty?}``; converted and validated on load.
The shipped fixtures are invented problems: ``fixture:gsm8k`` (the default, 24 questions, all
D = 1) and ``fixture:math`` (13 problems, levels 1-5, D varies). See docs/math.md.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vpo.chains import RewriteRule
from vpo.tasks import Example, register_task
from vpo.tasks.base import FileTask
from vpo.tasks.io import need

__all__ = [
    "FIXTURES",
    "MathTask",
    "final_answer",
    "last_boxed",
    "split_parts",
]

_FIXTURE_DIR = Path(__file__).with_name("fixtures")
FIXTURES = {"gsm8k": _FIXTURE_DIR / "math_gsm8k.jsonl", "math": _FIXTURE_DIR / "math_competition.jsonl"}
"""Shipped samples, loadable as ``source="fixture:gsm8k"`` / ``"fixture:math"``."""

MAX_ANSWER_CHARS = 1000
"""Final answers longer than this score zero without being parsed (no real answer is that long)."""
_MAX_GOLD_CHARS = 10_000
_MAX_BOX_TRIES = 16
_log = logging.getLogger(__name__)

_SINGLE_INSTRUCTION = "Reason step by step, then give the final answer in \\boxed{} at the end."
_MULTI_TEMPLATE = (
    "Write {m} genuinely different solutions: different methods, or different final answers "
    "where you are unsure, not rewordings of one solution. Put solution i inside "
    "<{tag}_i>...</{tag}_i> (i = 1..{m}), and end each with its own final answer in \\boxed{{}}:\n"
    "<{tag}_1>reasoning ... \\boxed{{answer}}</{tag}_1>\n"
    "...\n"
    "<{tag}_{m}>reasoning ... \\boxed{{answer}}</{tag}_{m}>"
)
_PROMPT = "Solve the following math problem.\n\nProblem: {question}\n\n"  # + _SINGLE_INSTRUCTION (has braces)


# ----- final-answer extraction and parts (string structure only; math-verify decides equality) -----

def _match_brace(text: str, start: int, limit: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``start``; -1 when the text ends first
    (unbalanced), -2 when the group is longer than ``limit`` characters (not read further,
    which bounds the scan)."""
    depth = 0
    end = min(len(text), start + limit + 2)
    i = start
    while i < end:
        ch = text[i]
        if ch == "\\":
            i += 2  # an escaped brace \{ \} does not open or close a group
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -2 if end < len(text) else -1


def last_boxed(text: Any, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\fbox{...}`` of ``text`` (stripped), or None.

    An unbalanced box (a generation cut short) is skipped for the one before it, at most 16
    times; an over-long one (> ``limit`` characters) gives None. Each try reads at most
    ``limit`` characters, so the scan is linear in ``len(text)`` whatever the text holds.
    ``\\boxed 5`` (no braces) gives ``5``.
    """
    if not isinstance(text, str) or "\\" not in text:
        return None
    pos = len(text)
    for _ in range(_MAX_BOX_TRIES):
        start = max(text.rfind("\\boxed", 0, pos), text.rfind("\\fbox", 0, pos))
        if start < 0:
            return None
        body = start + (6 if text.startswith("\\boxed", start) else 5)
        j = body
        while j < len(text) and j < body + 8 and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            end = _match_brace(text, j, limit)
            if end >= 0:
                return text[j + 1:end].strip()
            if end == -2:
                return None
        elif j > body and j < len(text):  # "\boxed 5": up to the next space or $
            m = re.match(r"[^\s$]{1,100}", text[j:j + 101])
            if m:
                return m.group(0)
        pos = start
    return None


def final_answer(text: Any, limit: int = MAX_ANSWER_CHARS) -> str | None:
    """The final answer of a model text: its last box, else what follows its last ``####`` on
    that line. None when there is neither or it is longer than ``limit`` characters."""
    boxed = last_boxed(text, limit)
    if boxed is not None:
        return boxed if boxed and len(boxed) <= limit else None
    if not isinstance(text, str):
        return None
    at = text.rfind("####")
    if at < 0:
        return None
    line_end = text.find("\n", at)
    value = text[at + 4: line_end if line_end >= 0 else min(len(text), at + 4 + limit + 1)].strip()
    return value if value and len(value) <= limit else None


_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_THOUSANDS_TAIL = re.compile(r"\d{3}")
_THOUSANDS_HEAD = re.compile(r"[+-]?\d{1,3}")
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d{1,60})")
_TUPLE_WORDS = re.compile(r"ordered (?:pair|triple|quadruple|tuple)|\bcoordinates\b|\bpoint\b|\bvector\b",
                          re.IGNORECASE)


def _clean(answer: str) -> str:
    s = answer.strip()
    if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
        s = s.strip("$").strip()
    s = _LEFT_RIGHT.sub("", s)
    return s.rstrip(".").strip()


def _top_level_commas(s: str) -> list[str]:
    """``s`` split at commas outside every (), [] and {} group (escaped ``\\{`` counts too)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    parts.append(s[start:].strip())
    return parts


def _wrapped(s: str, open_: str, close: str) -> str | None:
    """Inside of ``s`` when one bracket group ``open_ ... close`` spans all of it, else None."""
    if not (s.startswith(open_) and s.endswith(close)) or len(s) < len(open_) + len(close):
        return None
    depth = 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and i < len(s) - 1:
                return None  # the first group closes before the end: "(1,2) \cup (3,4)"
    return s[len(open_):len(s) - len(close)]


def split_parts(answer: str, question: str = "") -> tuple[str, list[str]]:
    """(kind, parts) of a final answer: how it is cut into the parts the vector scores.

    Only bracket structure is read here; whether two parts are equal is math-verify's call.

    * ``\\{a, b\\}`` or a bare comma list ``a, b`` (also ``x = 1, y = 2``): kind ``"set"``,
      matched in any order. ``1,000`` (thousands separators) is one number.
    * ``(a, b, c)`` / ``[a, b, c]`` with 3+ entries, or 2 when ``question`` asks for an
      ordered pair / point / coordinates / vector: kind ``"tuple"``, matched by position.
    * anything else, including intervals ``(1, 2]``, ``(-\\infty, 3)``, ``(1,2) \\cup (3,4)``
      and 2-entry ``(a, b)`` otherwise (interval or pair: math-verify weighs both readings):
      kind ``"single"``, one part.
    """
    s = _clean(answer)
    inner = _wrapped(s, "\\{", "\\}")
    if inner is not None:
        items = [p for p in _top_level_commas(inner) if p]
        return ("set", items) if len(items) >= 2 else ("single", [s])
    items = _top_level_commas(s)
    if len(items) >= 2:
        if (_THOUSANDS_HEAD.fullmatch(items[0]) and all(_THOUSANDS_TAIL.fullmatch(p) for p in items[1:])):
            return "single", [s]
        items = [p for p in items if p]
        return ("set", items) if len(items) >= 2 else ("single", [s])
    for open_, close in (("(", ")"), ("[", "]")):
        inner = _wrapped(s, open_, close)
        if inner is not None and "\\infty" not in inner:
            items = [p for p in _top_level_commas(inner) if p]
            if len(items) >= 3 or (len(items) == 2 and _TUPLE_WORDS.search(question or "")):
                return "tuple", items
    return "single", [s]


def _as_int(s: str) -> int | None:
    return int(s.replace(",", "")) if _INTEGER.fullmatch(s) else None


# ----- the worker process: math-verify with a time limit that works from any thread --------

class _Timeout(BaseException):
    """Raised by the worker's timer. BaseException so math-verify's ``except Exception`` does
    not swallow it and keep computing."""


def _worker_main(read_fd: int, write_fd: int, timeout: float) -> None:  # pragma: no cover - child
    """Loop of the checking process: receive ("batch", items), send one result per item.

    Each item runs under ``setitimer(timeout)`` (0: no self-imposed limit, tests only)."""
    import resource
    import signal
    from multiprocessing.connection import Connection

    os.dup2(2, 1)  # library prints must not reach the protocol pipe (it is write_fd, not 1)
    try:  # a runaway expression hits MemoryError (-> zero) instead of swapping the machine
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ValueError, OSError):
        pass
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    checker = _Equivalence()

    def on_alarm(signum: int, frame: Any) -> None:
        raise _Timeout()

    signal.signal(signal.SIGALRM, on_alarm)
    try:  # the first parse builds ANTLR's tables (~0.1-1 s): pay it here, not in an answer's limit
        checker.item("set", "\\{1, x\\}", ("1", "x"), "\\frac{1}{2}, \\sqrt{2} i", ("\\frac{1}{2}", "\\sqrt{2} i"))
    except Exception:  # noqa: BLE001
        pass
    outbox.send(("ready", os.getpid()))
    while True:
        try:
            message = inbox.recv()
        except (EOFError, OSError):
            return
        for item in message[1]:
            try:
                if timeout > 0:
                    signal.setitimer(signal.ITIMER_REAL, timeout)
                result = checker.item(*item)
                signal.setitimer(signal.ITIMER_REAL, 0)
            except BaseException:  # noqa: BLE001 - _Timeout, MemoryError, RecursionError, sympy bugs
                signal.setitimer(signal.ITIMER_REAL, 0)
                result = None
            try:
                outbox.send(result)
            except (BrokenPipeError, OSError):
                return


class _Equivalence:
    """math-verify parsing (LRU-cached per string) and comparison, run inside the worker."""

    def __init__(self, cache_size: int = 65536) -> None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        self._parse, self._verify = parse, verify
        self._latex, self._expr = [LatexExtractionConfig()], [ExprExtractionConfig()]
        self._cache: OrderedDict[str, list] = OrderedDict()
        self._numbers: dict[str, complex | None] = {}
        self._size = cache_size

    def parsed(self, s: str) -> list:
        hit = self._cache.get(s)
        if hit is not None:
            self._cache.move_to_end(s)
            return hit
        out = self._parse("\\boxed{" + s + "}", self._latex, parsing_timeout=None)
        if not out:
            out = self._parse(s, self._expr, parsing_timeout=None)
        self._cache[s] = out
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return out

    def equal(self, gold: str, pred: str) -> bool:
        if "".join(gold.split()) == "".join(pred.split()):
            return True
        g, p = _as_int(gold), _as_int(pred)
        if g is not None and p is not None:
            return g == p
        gp, pp = self.parsed(gold), self.parsed(pred)
        if not (gp and pp):
            return False
        gn, pn = self.number(gold), self.number(pred)
        if gn is not None and pn is not None and abs(gn - pn) > 1e-4 * max(1.0, abs(gn), abs(pn)):
            # Two numbers this far apart fail every test math-verify runs (numeric at 6 digits,
            # then symbolic simplify(a - b) == 0, the slow part); skipping it is 10-50x faster.
            return False
        if (gn is not None and self.is_set_like(pred)) or (pn is not None and self.is_set_like(gold)):
            return False  # a number is never an interval or a 2+ element set (set algebra, ~15 ms)
        return bool(self._verify(gp, pp, timeout_seconds=None))

    def number(self, s: str) -> complex | None:
        """The numeric value of a parsed constant expression (``2\\sqrt{2}``), else None."""
        if s in self._numbers:
            return self._numbers[s]
        import sympy

        parsed = self.parsed(s)
        obj = parsed[0] if parsed else None
        if isinstance(obj, sympy.Eq) and isinstance(obj.lhs, sympy.Symbol):
            obj = obj.rhs  # "x = 3" is compared as its right-hand side by math-verify too
        value = None
        if isinstance(obj, sympy.Expr) and obj.is_number:
            try:
                z = complex(obj.evalf(20))
                value = z if np.isfinite(z.real) and np.isfinite(z.imag) else None
            except (TypeError, ValueError, ArithmeticError):
                value = None
        self._numbers[s] = value
        if len(self._numbers) > self._size:
            self._numbers.pop(next(iter(self._numbers)))
        return value

    def is_set_like(self, s: str) -> bool:
        """True when ``s`` parses to an interval, a union, or a set of 2+ elements."""
        import sympy

        parsed = self.parsed(s)
        obj = parsed[0] if parsed else None
        return isinstance(obj, sympy.Interval | sympy.Union) or (isinstance(obj, sympy.FiniteSet) and len(obj) >= 2)

    def canonical(self, part: str) -> str:
        """A canonical string of one part's value, for dedup keys (see ``MathTask.dedup_key``)."""
        import sympy

        value = _as_int(part)
        if value is not None:
            return str(value)
        parsed = self.parsed(part)
        obj = parsed[0] if parsed else None
        if not isinstance(obj, sympy.Basic):
            return "raw:" + "".join(part.split())
        if isinstance(obj, sympy.Eq) and isinstance(obj.lhs, sympy.Symbol):
            obj = obj.rhs  # "x = 3" is the value 3, as math-verify compares it
        if isinstance(obj, sympy.Expr) and obj.is_number:
            z = complex(sympy.N(obj, 15))
            re_, im = float(f"{z.real:.10g}"), float(f"{z.imag:.10g}")
            return f"num:{re_!r}" if im == 0 else f"num:{re_!r}{im:+}j"
        try:
            return "sym:" + str(sympy.expand(obj)) if isinstance(obj, sympy.Expr) else "sym:" + str(obj)
        except Exception:  # noqa: BLE001
            return "sym:" + str(obj)

    def item(self, kind: str, gold_whole: str, gold_parts: tuple[str, ...], pred_whole: str,
             pred_parts: tuple[str, ...]) -> tuple[tuple[float, ...], float, tuple]:
        """(part hits, precision, canonical key) of one predicted answer against one gold."""
        if kind == "single":
            hit = float(self.equal(gold_whole, pred_whole))
            hits, precision = (hit,), hit
        else:
            hits, precision = _match_parts(kind, gold_parts, pred_parts, self.equal)
            # one predicted part written as a whole ("\\pm 2", an interval for a set): compare
            # it whole; parts already cut like the gold's cannot gain from a whole comparison
            if min(hits) < 1.0 and len(pred_parts) == 1 and self.equal(gold_whole, pred_whole):
                hits, precision = (1.0,) * len(gold_parts), 1.0  # same value, other notation
        canon = [self.canonical(p) for p in pred_parts]
        key = tuple(sorted(set(canon))) if kind == "set" else tuple(canon)
        return hits, precision, (kind, key)


def _match_parts(kind: str, gold: Sequence[str], pred: Sequence[str], equal: Any) -> tuple[tuple[float, ...], float]:
    """Hits per gold part and the fraction of predicted parts that hit something."""
    if kind == "tuple":
        same = [i < len(pred) and equal(g, pred[i]) for i, g in enumerate(gold)]
        return tuple(float(x) for x in same), (sum(same) / len(pred) if pred else 0.0)
    # Each gold part needs one match and each predicted part needs one: a pair is compared
    # only while one of its two sides is unmatched, identical strings first (free), so an
    # exact answer costs no math-verify call and a wrong one at most len(gold) * len(pred).
    hit = [False] * len(gold)
    used = [False] * len(pred)
    squeeze = [str(g).replace(" ", "") for g in gold], [str(p).replace(" ", "") for p in pred]
    for i, g in enumerate(squeeze[0]):
        for j, p in enumerate(squeeze[1]):
            if g == p:
                hit[i] = used[j] = True
    for i, g in enumerate(gold):
        for j, p in enumerate(pred):
            if (not hit[i] or not used[j]) and equal(g, p):
                hit[i] = used[j] = True
    return tuple(float(h) for h in hit), (sum(used) / len(pred) if pred else 0.0)


class _Checker:
    """Owner of one worker process per parent process; thread-safe (one batch at a time)."""

    def __init__(self, timeout: float, grace: float, *, self_timer: bool = True) -> None:
        self.timeout, self.grace = float(timeout), float(grace)
        self.self_timer = self_timer  # False only in tests, to exercise the kill path
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pid = -1
        self._send = self._recv = None
        self.restarts = 0
        atexit.register(self.close)

    def __getstate__(self) -> dict[str, Any]:
        # a task is pickled to Ray / DataLoader workers: they start their own worker process
        return {"timeout": self.timeout, "grace": self.grace, "self_timer": self.self_timer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["timeout"], state["grace"], self_timer=state["self_timer"])

    def _start(self) -> None:
        from multiprocessing.connection import Connection

        child_read, parent_write = os.pipe()
        parent_read, child_write = os.pipe()
        env = dict(os.environ)
        # the child must import this very vpo (a worktree or an editable install alike)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        boot = ("import sys; from vpo.tasks.math import _worker_main; "
                "_worker_main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", boot, str(child_read), str(child_write),
                 repr(self.timeout if self.self_timer else 0.0)],
                pass_fds=(child_read, child_write), env=env, stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            os.close(child_read)
            os.close(child_write)
        self._send = Connection(parent_write, readable=False)
        self._recv = Connection(parent_read, writable=False)
        self._pid = os.getpid()
        # the first start imports sympy and math-verify: allow far more than one comparison
        if not self._recv.poll(60.0):
            self._kill()
            raise RuntimeError("math worker did not start within 60 s")
        self._recv.recv()

    def _kill(self) -> None:
        if self._proc is not None and self._pid == os.getpid():
            try:
                self._proc.kill()
                self._proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for conn in (self._send, self._recv):
            try:
                if conn is not None and self._pid == os.getpid():
                    conn.close()
            except OSError:
                pass
        self._proc = self._send = self._recv = None

    def close(self) -> None:
        with self._lock:
            self._kill()

    def run(self, items: Sequence[tuple]) -> list[Any]:
        """One result per item (None when it failed or ran out of time)."""
        results: list[Any] = [None] * len(items)
        if self._proc is not None and self._pid != os.getpid():
            # forked: the pipe belongs to the parent's worker, and the lock may have been
            # held by a thread that does not exist here
            self._lock = threading.Lock()
            self._proc = self._send = self._recv = None
        with self._lock:
            i, failures = 0, 0
            while i < len(items) and failures < 3:
                try:
                    if self._proc is None or self._proc.poll() is not None:
                        self._kill()
                        self._start()
                    self._send.send(("batch", list(items[i:])))
                except (OSError, EOFError, RuntimeError) as err:
                    _log.warning("math worker unavailable (%s); scoring zero", err)
                    self._kill()
                    failures += 1
                    continue
                while i < len(items):
                    try:
                        ready = self._recv.poll(self.timeout + self.grace)
                        result = self._recv.recv() if ready else None
                    except (OSError, EOFError):
                        ready, result = False, None
                    if not ready:  # stuck (in C code) or dead: kill it, this item scores zero
                        self._kill()
                        self.restarts += 1
                        i += 1
                        break
                    results[i] = result
                    i += 1
        return results


class _CheckerPool:
    """Up to ``size`` worker processes (``_Checker``), one per caller checking at the same time:
    verl calls ``compute_score`` from many threads, and one worker would serialise them. A worker
    starts on first use, so a single-threaded caller runs one; a caller waits for a free worker
    when all ``size`` are busy. Each batch runs on one worker, whose results go back to the
    caller that sent it (no verdict crosses between threads)."""

    def __init__(self, size: int, timeout: float, grace: float, *, self_timer: bool = True) -> None:
        if size < 1:
            raise ValueError(f"workers must be >= 1, got {size!r}")
        self.size, self.timeout, self.grace, self.self_timer = int(size), float(timeout), float(grace), self_timer
        self._checkers = [_Checker(self.timeout, self.grace, self_timer=self_timer) for _ in range(self.size)]
        self.peak = 0
        """The most workers busy at once so far."""
        self._reset()

    def _reset(self) -> None:
        import queue

        self._pid = os.getpid()
        self._busy_lock = threading.Lock()
        self._busy = 0
        self._free: Any = queue.LifoQueue()  # the most recently used (warm) worker first
        for checker in reversed(self._checkers):
            self._free.put(checker)

    def __getstate__(self) -> dict[str, Any]:
        return {"size": self.size, "timeout": self.timeout, "grace": self.grace, "self_timer": self.self_timer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["size"], state["timeout"], state["grace"], self_timer=state["self_timer"])

    @property
    def restarts(self) -> int:
        """Workers killed for not answering in time, over the pool."""
        return sum(checker.restarts for checker in self._checkers)

    @property
    def processes(self) -> list[int]:
        """Process ids of the workers running now."""
        return [c._proc.pid for c in self._checkers if c._proc is not None and c._proc.poll() is None]

    def start(self) -> None:
        """Start every worker now, side by side (each imports sympy: about a second), instead of
        on first use."""
        def start_one(checker: _Checker) -> None:
            with checker._lock:
                if checker._proc is None or checker._proc.poll() is not None:
                    checker._kill()
                    checker._start()

        threads = [threading.Thread(target=start_one, args=(c,), daemon=True) for c in self._checkers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run(self, items: Sequence[tuple]) -> list[Any]:
        """``_Checker.run`` on a free worker."""
        if self._pid != os.getpid():  # forked: the parent's threads, and their workers, are not here
            self._reset()
        checker = self._free.get()
        with self._busy_lock:
            self._busy += 1
            self.peak = max(self.peak, self._busy)
        try:
            return checker.run(items)
        finally:
            with self._busy_lock:
                self._busy -= 1
            self._free.put(checker)

    def close(self) -> None:
        for checker in self._checkers:
            checker.close()


# ----- the task ----------------------------------------------------------------------------

def _level(value: Any, row: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"math: row {row}: field 'level' must be 1-5 or 'Level N', got {value!r}")
    if isinstance(value, int):
        level = value
    elif isinstance(value, str) and re.fullmatch(r"(?:Level\s*)?(\d|\?)", value.strip(), re.IGNORECASE):
        digit = value.strip()[-1]
        if digit == "?":  # a few MATH records say "Level ?"
            return None
        level = int(digit)
    else:
        raise ValueError(f"math: row {row}: field 'level' must be 1-5 or 'Level N', got {value!r}")
    if not 1 <= level <= 5:
        raise ValueError(f"math: row {row}: field 'level' must be between 1 and 5, got {level}")
    return level


def from_record(record: Any, row: int | None = None) -> Any:
    """A GSM8K or MATH record in the task schema; other records are returned unchanged for
    ``validate`` to check."""
    if not isinstance(record, Mapping):
        return record
    task = "math"
    if "problem" in record or "solution" in record:  # MATH
        problem = need(record, "problem", str, task, row)
        solution = need(record, "solution", str, task, row)
        answer = last_boxed(solution, _MAX_GOLD_CHARS)
        if not answer:
            raise ValueError(f"{task}: row {row}: field 'solution' has no \\boxed{{}} final answer")
        out = {"id": record.get("id", record.get("unique_id", row)), "question": problem,
               "answer": answer, "solution": solution, "level": _level(record.get("level"), row),
               "type": record.get("type")}
        if record.get("difficulty") is not None:
            out["difficulty"] = record["difficulty"]
        return out
    answer = record.get("answer")
    if isinstance(answer, str) and "####" in answer:  # GSM8K
        need(record, "question", str, task, row)
        final = answer.rsplit("####", 1)[1].strip()
        if not final:
            raise ValueError(f"{task}: row {row}: field 'answer' has nothing after '####'")
        out = dict(record)
        out.update(answer=final, solution=answer)
        out.setdefault("id", row)
        return out
    return record if "id" in record or row is None else {"id": row, **record}


@register_task("math")
class MathTask(FileTask):
    """Math word problems with math-verify answer checking; one component per answer part."""

    objectives = ("correct",)
    rewrite_rule = RewriteRule("math", template=_MULTI_TEMPLATE, pattern=re.escape(_SINGLE_INSTRUCTION),
                               tag="solution")
    ability = "math"
    fixture = FIXTURES["gsm8k"]

    def __init__(self, timeout: float = 1.0, grace: float | None = None,
                 max_answer_chars: int = MAX_ANSWER_CHARS, workers: int = 4) -> None:
        """``timeout``: seconds per answer (parse and every comparison) in the worker; ``grace``:
        extra seconds before a stuck worker is killed (default max(0.5, timeout / 2));
        ``max_answer_chars``: longer final answers score zero unparsed; ``workers``: checking
        processes at most, one per thread scoring at the same time (started on first use)."""
        import importlib.util

        if importlib.util.find_spec("math_verify") is None:
            raise ModuleNotFoundError("the math task needs math-verify: pip install 'vpo[math]'")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.max_answer_chars = int(max_answer_chars)
        self._checker = _CheckerPool(int(workers), self.timeout,
                                     max(0.5, self.timeout / 2) if grace is None else float(grace))
        self._keys: OrderedDict[tuple, tuple] = OrderedDict()

    # ----- data ---------------------------------------------------------------------------
    def read_records(self, source: Any, split: str) -> list[Any]:
        if isinstance(source, str) and source.startswith("fixture:"):
            name = source.split(":", 1)[1]
            if name not in FIXTURES:
                raise ValueError(f"math: unknown fixture {name!r}; known: {', '.join(FIXTURES)}")
            source = FIXTURES[name]
        return super().read_records(source, split)

    def convert(self, record: Any, row: int) -> Any:
        return from_record(record, row)

    def validate(self, example: Any, row: int | None = None) -> Example:
        """Check an example of the task schema; fills ``kind`` and ``parts`` (the gold answer cut
        by ``split_parts``) unless the record gives them."""
        example = super().validate(example, row)
        name = self.name
        need(example, "id", (str, int), name, row)
        question = need(example, "question", str, name, row)
        if not question.strip():
            raise ValueError(f"{name}: row {row}: field 'question' is empty")
        answer = need(example, "answer", (str, int, float), name, row)
        answer = str(answer).strip()
        if not answer:
            raise ValueError(f"{name}: row {row}: field 'answer' is empty")
        if len(answer) > _MAX_GOLD_CHARS:
            raise ValueError(f"{name}: row {row}: field 'answer' is longer than {_MAX_GOLD_CHARS} characters")
        example["answer"] = answer
        if "parts" in example and example["parts"] is not None:
            parts = example["parts"]
            if not isinstance(parts, list) or not parts or not all(isinstance(p, str) and p.strip() for p in parts):
                raise ValueError(f"{name}: row {row}: field 'parts' must be a non-empty list of non-empty str")
            kind = example.get("kind", "set" if len(parts) > 1 else "single")
            if kind not in ("single", "set", "tuple") or (kind == "single") != (len(parts) == 1):
                raise ValueError(f"{name}: row {row}: field 'kind' must be 'single' (one part), 'set' or "
                                 f"'tuple' (2+ parts), got {kind!r} with {len(parts)} parts")
        else:
            kind, parts = split_parts(answer, question)
        example["kind"], example["parts"] = kind, [p.strip() for p in parts]
        example["level"] = _level(example.get("level"), row)
        for field in ("type", "solution"):
            if example.get(field) is not None and not isinstance(example[field], str):
                raise ValueError(f"{name}: row {row}: field {field!r} must be str")
        return example

    # ----- prompts ------------------------------------------------------------------------
    def prompt_single(self, example: Example) -> str:
        return _PROMPT.format(question=example["question"].strip()) + _SINGLE_INSTRUCTION

    def objective_names(self, example: Example | None = None) -> tuple[str, ...]:
        if example is None or len(example["parts"]) == 1:
            return self.objectives
        return (*(f"part_{i + 1}" for i in range(len(example["parts"]))), "no_extra")

    def difficulty(self, example: Example) -> str | None:
        """MATH ``level`` ("1".."5"), else the ``difficulty`` field, else None."""
        if isinstance(example, Mapping) and example.get("level") is not None:
            return str(example["level"])
        return super().difficulty(example)

    # ----- scoring ------------------------------------------------------------------------
    def _pred(self, text: Any, example: Example) -> tuple[str, tuple[str, ...]] | None:
        final = final_answer(text, self.max_answer_chars)
        if final is None:
            return None
        kind, parts = split_parts(final, example["question"])
        if example["kind"] == "single":
            parts = [_clean(final)]  # one gold part: the whole answer is compared as one value
        return _clean(final), tuple(parts)

    def _remember(self, pred: tuple[str, tuple[str, ...]], kind: str, key: tuple) -> None:
        self._keys[(kind, pred)] = key
        if len(self._keys) > 65536:
            self._keys.popitem(last=False)

    def score(self, text: str, example: Example) -> np.ndarray:
        """Reward vector (D,) of one answer text; never raises on text."""
        return self.score_batch([text], example)[0]

    def score_batch(self, answers: Sequence[str], example: Example) -> np.ndarray:
        """(n, D) vectors; the answers that need sympy go to the worker in one batch."""
        gold_parts = tuple(example["parts"])
        kind, gold_whole = example["kind"], _clean(example["answer"])
        dim = 1 if kind == "single" else len(gold_parts) + 1
        out = np.zeros((len(answers), dim), dtype=np.float64)
        pending: list[tuple[int, tuple]] = []
        gold_ints = [_as_int(g) for g in gold_parts]
        for row, text in enumerate(answers):
            try:
                pred = self._pred(text, example)
            except Exception:  # noqa: BLE001 - model text never raises
                pred = None
            if pred is None:
                continue
            pred_whole, pred_parts = pred
            pred_ints = [_as_int(p) for p in pred_parts]
            if None not in gold_ints and None not in pred_ints:
                # plain integers on both sides: exact in-process comparison (GSM8K's common case)
                hits, precision = _match_parts(kind, gold_ints, pred_ints, lambda a, b: a == b)
                canon = [str(v) for v in pred_ints]
                key = tuple(sorted(set(canon))) if kind == "set" else tuple(canon)
                self._remember(pred, kind, (kind, key))
                out[row] = hits if kind == "single" else (*hits, precision)
            else:
                pending.append((row, (kind, gold_whole, gold_parts, pred_whole, pred_parts), pred))
        if pending:
            results = self._checker.run([item for _, item, _ in pending])
            for (row, _, pred), result in zip(pending, results, strict=True):
                if result is None:
                    continue  # timed out or failed: the zero vector
                hits, precision, key = result
                self._remember(pred, kind, key)
                out[row] = hits if kind == "single" else (*hits, precision)
            lost = sum(result is None for result in results)
            if lost:  # math-verify gave no verdict: failed reward calls (vpo.reward_failures)
                self.report_failures(TimeoutError(f"math-verify gave no verdict within timeout={self.timeout} s "
                                                  f"(or its worker failed) for {lost} of {len(results)} answers"),
                                     lost)
        return out

    def scalar(self, vectors: np.ndarray | Sequence[float]) -> np.ndarray | float:
        """D = 1: the value. D > 1: F1 of the parts, recall = mean of ``part_i`` (all columns but
        the last), precision = ``no_extra`` (the last column); 0 when both are 0."""
        arr = np.asarray(vectors, dtype=np.float64)
        if arr.shape[-1] <= 1:
            out = arr[..., 0] if arr.shape[-1] else np.zeros(arr.shape[:-1])
        else:
            recall, precision = arr[..., :-1].mean(axis=-1), arr[..., -1]
            total = recall + precision
            out = np.where(total > 0, 2 * recall * precision / np.where(total > 0, total, 1.0), 0.0)
        return float(out) if np.ndim(out) == 0 else out

    def dedup_key(self, answer: str, vector: np.ndarray, example: Example) -> Hashable:
        """Answers whose final values are equivalent count once (Multi-RLVR).

        The key is (reward vector, canonical value): integers as integers, numeric
        expressions as their value to 10 significant digits (``\\frac{1}{2}`` = ``0.5``,
        ``\\sqrt{8}`` = ``2\\sqrt{2}``), other expressions as sympy's expanded form, sets as
        sorted element keys. A key is a function of one answer, so equivalence that sympy's
        canonical forms miss (e.g. ``0.333333`` vs ``\\frac{1}{3}``, which math-verify accepts
        at 6 digits) keeps both answers. Answers without a final value share one key. Keys are
        computed while scoring (``score_chain`` scores before it dedups) and kept per task
        object; an answer not scored yet is scored first."""
        try:
            pred = self._pred(answer, example)
        except Exception:  # noqa: BLE001
            pred = None
        if pred is None:
            return (vector.tobytes(), None)
        key = self._keys.get((example["kind"], pred))
        if key is None:  # not scored by this task object yet (or evicted): score it now
            self.score_batch([answer], example)
            key = self._keys.get((example["kind"], pred))
        if key is None:  # the worker failed or ran out of time: the whitespace-free text
            key = ("raw", "".join(pred[0].split()))
        return (vector.tobytes(), key)
