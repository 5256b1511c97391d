r"""Equivalence of math answers with math-verify, in worker processes with a time limit that works from any thread.

Usage::

    from vpo.tasks.math.verify import CheckerPool
    pool = CheckerPool(2, timeout=1.0, grace=0.5)      # up to 2 worker processes, started on first use
    item = ("single", "\\frac{1}{2}", ("\\frac{1}{2}",), "0.5", ("0.5",))   # kind, gold whole/parts, pred
    pool.run([item])       # [((1.0,), 1.0, key)]: part hits, precision, dedup key; None: no verdict
    pool.close()

Each worker runs ``_Equivalence`` (math-verify's parse and verify, cached) under ``setitimer``:
the worker interrupts itself after ``timeout`` seconds, and the caller kills and restarts it
when it does not answer within ``timeout + grace`` (a computation stuck in C, such as
``9^{9^{9}}``). math-verify's own signal-based limit works only in the main thread; verl and TRL
call reward functions from others. The workers are a ``vpo.warm_pool.WarmPool``, as the
sandbox's are (its docstring says what the two pools share and why they differ).
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from vpo.tasks.math.extract import _as_int
from vpo.warm_pool import WarmPool

__all__ = ["CheckerPool"]

_log = logging.getLogger(__name__)


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
        boot = ("import sys; from vpo.tasks.math.verify import _worker_main; "
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

    def ensure_started(self) -> None:
        """Start the worker process now unless it runs (a failed start is left to ``run``)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                try:
                    self._start()
                except (OSError, RuntimeError) as err:
                    _log.warning("math worker did not start (%s); the next batch tries again", err)

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


class CheckerPool:
    """Up to ``size`` worker processes (``_Checker``), one per caller checking at the same time:
    verl calls ``compute_score`` from many threads, and one worker would serialise them. A worker
    starts on first use, so a single-threaded caller runs one; a caller waits for a free worker
    when all ``size`` are busy. Each batch runs on one worker, whose results go back to the
    caller that sent it (no verdict crosses between threads)."""

    def __init__(self, size: int, timeout: float, grace: float, *, self_timer: bool = True) -> None:
        if size < 1:
            raise ValueError(f"workers must be >= 1, got {size!r}")
        self.size, self.timeout, self.grace, self.self_timer = int(size), float(timeout), float(grace), self_timer
        # a checker restarts its own process when it dies (keeping its restart count), so the
        # pool keeps every checker it made
        self._pool: WarmPool[_Checker] = WarmPool(
            start=lambda _key: _Checker(self.timeout, self.grace, self_timer=self.self_timer),
            stop=_Checker.close, max_live=self.size)

    def __getstate__(self) -> dict[str, Any]:
        # a task is pickled to Ray / DataLoader workers: they start their own worker processes
        return {"size": self.size, "timeout": self.timeout, "grace": self.grace, "self_timer": self.self_timer}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["size"], state["timeout"], state["grace"], self_timer=state["self_timer"])

    @property
    def peak(self) -> int:
        """The most workers busy at once so far."""
        return self._pool.peak

    @property
    def restarts(self) -> int:
        """Workers killed for not answering in time, over the pool."""
        return sum(checker.restarts for checker in self._pool.workers())

    @property
    def processes(self) -> list[int]:
        """Process ids of the workers running now."""
        return [c._proc.pid for c in self._pool.workers() if c._proc is not None and c._proc.poll() is None]

    def start(self) -> None:
        """Start every worker now, side by side (each imports sympy: about a second), instead of
        on first use."""
        checkers = self._pool.warm_up()
        threads = [threading.Thread(target=checker.ensure_started, daemon=True) for checker in checkers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def run(self, items: Sequence[tuple]) -> list[Any]:
        """``_Checker.run`` on a free worker."""
        checker = self._pool.acquire()
        try:
            return checker.run(items)
        finally:
            self._pool.release(checker)

    def close(self) -> None:
        self._pool.close()
