"""What happens when a user's reward function fails: one policy for every engine.

Usage::

    from vpo.reward_failures import RewardFailurePolicy, RewardFailures
    failures = RewardFailures(RewardFailurePolicy(max_failure_rate=0.5, time_limit=10.0))
    safe = failures.guard(my_reward, "my_reward")     # same contract as my_reward, never raises
    rewards = safe(prompts=prompts, completions=completions)
    metrics = failures.end_step()   # {"vpo/reward_failures": ..., "vpo/reward_failures/my_reward": ...}
                                    # RewardFailureError when a function's failure rate passes the threshold

A *reward call* is one function on one answer. It fails when the function raises, returns NaN or
an infinity (a ``None`` is not a failure: it means "does not apply", docs/own_rewards.md), or runs
past ``time_limit``. A failed call scores 0 on that function's objectives and is counted; the first
traceback of each kind (function and exception type) is logged once on the ``vpo.rewards`` logger.
The rate is measured per function: one broken function among three is a third of the calls, but
all of its own. A function that fails on every call of its first step is a setup fault (an import,
an API key, a missing dataset column) and stops the run naming it and its first error.

A guarded function is first called once on all answers, as without the guard. When that call
raises or times out, it is called again answer by answer to find the answers that fail (the
others keep their values), so a function with side effects sees those answers twice.

Time limits: a Python thread cannot be stopped, so a call with a time limit runs in a daemon
thread and the guard stops waiting for it; the thread keeps running until the function returns.
After a timed-out call the per-answer calls run one thread each at once (the function must be
thread-safe, as under verl, which calls ``compute_score`` from many threads), so a function that
hangs costs about twice ``time_limit`` per step. Async functions are cancelled at the limit
(``asyncio.wait_for``). The sandbox and math-verify have their own limits (on by default).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FAILED_CALL", "FAILURE_METRIC", "NonFiniteReward", "RewardContractError", "RewardFailureError",
           "RewardFailurePolicy", "RewardFailures", "reward_list", "run_limited"]

FAILURE_METRIC = "vpo/reward_failures"
"""The metric of failed reward calls; ``vpo/reward_failures/<name>`` per function."""

FAILED_CALL = float("-inf")
"""The raw value ``vpo.rewards`` gives a failed call (``RewardFailures.guard(..., failed_value=)``):
below every real value, so that scaling (``vpo.rewards.finish_chains``) gives it the objective's
worst value, never a better one than a real call's."""

LOGGER = logging.getLogger("vpo.rewards")


class RewardFailureError(RuntimeError):
    """Too many reward calls of one step failed (``RewardFailurePolicy.max_failure_rate``)."""


@dataclass(frozen=True)
class RewardFailurePolicy:
    """How failing reward calls are scored, counted and stopped (docs/own_rewards.md)."""

    max_failure_rate: float = 0.5
    """Stop the run when more than this fraction of one function's reward calls (its answers) in
    one step fail. 0.5: an objective that loses most of its values trains on zeros, and a broken
    function (an import, an API down) fails every call and stops at the first step, naming its
    first error, while one that fails on a few odd answers keeps running; 1.0 never stops."""
    window: int = 256
    """Where an engine passes no step (verl's reward loop scores one rollout at a time and gives
    none), the rate is checked over each ``window`` reward calls instead of a step."""
    time_limit: float | None = None
    """Seconds one call may run before its answers count as failed; None: no limit (the default
    for plain functions: a thread cannot be stopped, see the module docstring). The sandbox and
    math-verify have their own limits, on by default."""

    def __post_init__(self) -> None:
        rate = self.max_failure_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"max_failure_rate must be a fraction in [0, 1], got {rate!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be a positive number of reward calls, got {self.window!r}")
        limit = self.time_limit
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)
                                  or not math.isfinite(limit) or limit <= 0):
            raise ValueError(f"time_limit must be None or a positive number of seconds, got {limit!r}")


class RewardContractError(ValueError):
    """A reward function (or VPO's adapter of it) broke its contract: a wrong number of rewards,
    a missing reward key. A setup error, raised as it is rather than scored 0."""


class NonFiniteReward(ValueError):
    """A call that returned NaN or an infinity (logged as this kind)."""


class RewardFailures:
    """The failure tally of one run under ``policy``: guards functions, counts failed calls per
    step, logs the first traceback of each kind and stops the run past the threshold. Thread-safe."""

    def __init__(self, policy: RewardFailurePolicy | None = None, names: Sequence[str] = ()) -> None:
        self.policy = policy or RewardFailurePolicy()
        self._lock = threading.Lock()
        self._calls = 0
        self._failed: dict[str, int] = {name: 0 for name in names}  # logged as 0 from the first step
        self._calls_of: dict[str, int] = {name: 0 for name in names}
        self._first_error: dict[str, str] = {}
        self._checked: set[str] = set()  # functions that have had a step closed with calls
        self._seen: set[tuple[str, str]] = set()
        self._total_calls = 0
        self._total_calls_of: dict[str, int] = {}
        self._total_failed: dict[str, int] = {name: 0 for name in names}
        self._step: Any = None
        self._local = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        """A task holding this tally is pickled to Ray and DataLoader workers: the lock and the
        per-thread counts stay behind (each worker counts its own calls)."""
        return {key: value for key, value in self.__dict__.items() if key not in ("_lock", "_local")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._local = threading.local()

    def with_policy(self, policy: RewardFailurePolicy) -> RewardFailures:
        """A fresh tally of the same functions under ``policy``."""
        return RewardFailures(policy, names=tuple(self._failed))

    # -- counting ------------------------------------------------------------------------------
    def record(self, name: str, calls: int, failed: int) -> None:
        """Count ``calls`` reward calls of function ``name``, ``failed`` of them failed."""
        with self._lock:
            self._calls += calls
            self._calls_of[name] = self._calls_of.get(name, 0) + calls
            self._failed[name] = self._failed.get(name, 0) + failed
            self._total_calls += calls
            self._total_calls_of[name] = self._total_calls_of.get(name, 0) + calls
            self._total_failed[name] = self._total_failed.get(name, 0) + failed
        mine = getattr(self._local, "failed", None)
        if mine is not None:
            mine[name] = mine.get(name, 0) + failed

    def totals(self) -> dict[str, Any]:
        """Every call counted so far (steps that ended included): ``{"calls": int, "failed": int,
        "by_function": {name: failed}}``, what evaluation and search write to their results."""
        with self._lock:
            failed = dict(self._total_failed)
            return {"calls": self._total_calls, "failed": sum(failed.values()), "by_function": failed}

    def calls_by_function(self) -> dict[str, int]:
        """Every call counted so far, per function (a chain-level function is called once per
        completion, an answer-level one once per answer)."""
        with self._lock:
            return dict(self._total_calls_of)

    def totals_since(self, before: Mapping[str, Any]) -> dict[str, Any]:
        """``totals()`` minus an earlier ``totals()``: the calls of one pool, one checkpoint."""
        now = self.totals()
        old = before.get("by_function", {})
        failed = {name: count - old.get(name, 0) for name, count in now["by_function"].items()}
        return {"calls": now["calls"] - before.get("calls", 0), "failed": sum(failed.values()), "by_function": failed}

    def track(self) -> dict[str, int]:
        """Start counting this thread's failures (per function) into the returned dict: the
        failures of one rollout when an engine scores rollouts from many threads."""
        self._local.failed = {name: 0 for name in self._failed}
        return self._local.failed

    def tick(self, step: Any = None) -> None:
        """For engines that score one rollout at a time: a new ``step`` (or, with ``step=None``,
        ``window`` calls since the last check) closes the counted step (``end_step``)."""
        with self._lock:
            if step is None:
                close = self._calls >= self.policy.window
            else:
                close, self._step = self._step is not None and step != self._step, step
        if close:
            self.end_step()

    def report(self, name: str, error: BaseException) -> None:
        """Log ``error`` of function ``name`` with its traceback, once per (name, exception type)."""
        kind = (name, type(error).__name__)
        with self._lock:
            self._first_error.setdefault(name, f"{type(error).__name__}: {error}")
            if kind in self._seen:
                return
            self._seen.add(kind)
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        LOGGER.warning("reward function %r failed (%s); its failing answers score 0 and are counted in %s "
                       "(this kind is logged once):\n%s", name, type(error).__name__, FAILURE_METRIC, text)

    def end_step(self) -> dict[str, float]:
        """The step's metrics (``FAILURE_METRIC`` and one per function), and a fresh count. Raises
        ``RewardFailureError`` when one function's failed share of its calls passes the threshold,
        or when a function failed on every call of its first step (a setup fault)."""
        with self._lock:
            calls, failed, calls_of = self._calls, dict(self._failed), dict(self._calls_of)
            self._calls, self._failed = 0, {name: 0 for name in failed}
            self._calls_of = {name: 0 for name in calls_of}
            first = [name for name, count in calls_of.items() if count and name not in self._checked]
            self._checked.update(first)
        self.check(calls, failed, calls_of, first=first)
        metrics = {FAILURE_METRIC: float(sum(failed.values()))}
        metrics.update({f"{FAILURE_METRIC}/{name}": float(count) for name, count in failed.items()})
        return metrics

    def check(self, calls: int, failed: Mapping[str, int], calls_of: Mapping[str, int] | None = None, *,
              first: Sequence[str] = ()) -> None:
        """Raise ``RewardFailureError`` when a function's ``failed`` share of its ``calls_of`` passes
        the rate (without ``calls_of``: the share of all ``calls``), or when a function in ``first``
        (its first step) failed on every call (unless ``max_failure_rate`` is 1, never stop)."""
        total = sum(failed.values())
        rate = self.policy.max_failure_rate
        if not calls or not total or rate >= 1.0:
            return
        own = dict(calls_of) if calls_of else {name: calls for name in failed}

        def share(name: str) -> float:
            return failed.get(name, 0) / own[name] if own.get(name) else 0.0

        worst = max(failed, key=lambda name: (share(name), failed[name]))
        summary = (f"{total} of {calls} reward calls failed in one step ({total / calls:.0%}), most in {worst!r} "
                   f"({failed[worst]})")
        broken = [name for name in first if own.get(name) and failed.get(name, 0) == own[name]]
        if broken:
            name = broken[0]
            error = self._first_error.get(name, "no error recorded")
            hint = (" (a KeyError on every call is usually a dataset column the function reads and the data "
                    "lacks)" if error.startswith("KeyError") else "")
            raise RewardFailureError(
                f"reward function {name!r} failed on every one of its {own[name]} calls in its first step: a setup "
                f"fault, not a bad answer; its first error: {error}{hint}. {summary}; max_failure_rate={rate}")
        if share(worst) > rate:
            raise RewardFailureError(
                f"{summary}, {share(worst):.0%} of its {own[worst]} calls: more than max_failure_rate={rate} (see the "
                "logged traceback; raise max_failure_rate, or fix the function)")

    def clean_model_scores(self, name: str, values: Any, failed_value: float = 0.0) -> Any:
        """A reward model's (P,) or (P, H) scores of P answers with NaN and infinities (a model in
        low precision can overflow) as ``failed_value``, each such answer a failed call of ``name``;
        a model has no ``None``. Records the P calls. Exceptions from a model (out of memory, a device
        mismatch) are setup faults and are not caught."""
        import numpy as np

        out = np.array(values, dtype=np.float64)
        bad = ~np.isfinite(out)
        rows = bad.reshape(out.shape[0], -1).any(axis=1) if out.ndim else bad.reshape(1)
        failed = int(rows.sum())
        if failed:
            self.report(name, NonFiniteReward(f"the model scored NaN or an infinity for {failed} of {rows.size} "
                                              "answers"))
            out[bad] = failed_value
        self.record(name, int(rows.size), failed)
        return out

    # -- guarding ------------------------------------------------------------------------------
    def guard(self, func: Callable[..., Any], name: str, width: int = 1,
              failed_value: float = 0.0) -> Callable[..., Any]:
        """``func`` (a reward function of TRL's contract, sync or async, with ``width`` heads) under
        the policy: same arguments and result, a failed answer scores ``failed_value`` (``width`` of
        them for a vector; ``vpo.rewards`` passes ``FAILED_CALL``, which scaling turns into the
        objective's worst value), ``None`` passes through."""
        zero: Any = failed_value if width == 1 else [failed_value] * width
        if inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(getattr(func, "__call__", None)):
            async def guarded_async(**kwargs: Any) -> list[Any]:
                return await self._call_async(func, name, zero, kwargs)

            guarded_async.__name__ = name
            return guarded_async

        def guarded(**kwargs: Any) -> list[Any]:
            return self._call_sync(func, name, zero, kwargs)

        guarded.__name__ = name
        return guarded

    def _call_sync(self, func: Callable[..., Any], name: str, zero: Any, kwargs: dict[str, Any]) -> list[Any]:
        n = len(kwargs["completions"])
        limit = self.policy.time_limit
        try:
            return self._clean(name, reward_list(run_limited(func, kwargs, limit), n, name), n, zero)
        except RewardContractError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure of a user's function is scored, not raised
            self.report(name, err)
            if n == 1:
                self.record(name, 1, 1)
                return [zero]
            timed_out = isinstance(err, TimeoutError)
        rows = [_row_kwargs(kwargs, p, n) for p in range(n)]
        if limit is not None and timed_out:
            results = _run_parallel(func, rows, limit, name)
        else:
            results = []
            for row in rows:
                try:
                    results.append(reward_list(run_limited(func, row, limit), 1, name)[0])
                except RewardContractError:
                    raise
                except Exception as one:  # noqa: BLE001
                    results.append(one)
        return self._merge(name, zero, results)

    async def _call_async(self, func: Callable[..., Any], name: str, zero: Any, kwargs: dict[str, Any]) -> list[Any]:
        n = len(kwargs["completions"])
        limit = self.policy.time_limit

        async def run(args: dict[str, Any], size: int) -> list[Any]:
            return reward_list(await asyncio.wait_for(func(**args), limit), size, name)

        try:
            return self._clean(name, await run(kwargs, n), n, zero)
        except RewardContractError:
            raise
        except Exception as err:  # noqa: BLE001
            self.report(name, err)
            if n == 1:
                self.record(name, 1, 1)
                return [zero]
        outs = await asyncio.gather(*(run(_row_kwargs(kwargs, p, n), 1) for p in range(n)), return_exceptions=True)
        return self._merge(name, zero, [out if isinstance(out, BaseException) else out[0] for out in outs])

    def _merge(self, name: str, zero: Any, results: Sequence[Any]) -> list[Any]:
        """Per-answer results (a value, or the exception it raised) as one output, failures as
        ``zero`` (the failed value)."""
        failed = 0
        out: list[Any] = []
        for result in results:
            if isinstance(result, RewardContractError):
                raise result
            if isinstance(result, BaseException):
                self.report(name, result)
                failed += 1
                out.append(_RAISED)
            else:
                out.append(result)
        self.record(name, 0, failed)
        return [zero if value is _RAISED else value for value in self._clean(name, out, len(out), zero)]

    def _clean(self, name: str, values: list[Any], n: int, zero: Any = 0.0) -> list[Any]:
        """NaN and infinities (not ``None``) as the failed value (``zero``'s), counted; records the
        ``n`` calls."""
        failed = 0
        out = []
        fill = zero[0] if isinstance(zero, list) else zero
        for value in values:
            bad, fixed = _non_finite(value, fill)
            failed += bad
            out.append(fixed)
        if failed:
            self.report(name, NonFiniteReward(f"returned NaN or an infinity for {failed} of {n} answers"))
        self.record(name, n, failed)
        return out


_RAISED = object()
"""A call that raised, in ``_merge`` (its failed value is set after the NaN check)."""


def reward_list(output: Any, n: int, name: str, expected: str | None = None) -> list[Any]:
    """A reward function's ``output`` as the list of its ``n`` values: a list, a tuple, a numpy array
    or a CPU tensor of length ``n``. ``RewardContractError`` naming what came back otherwise (a
    generator, a dict, a string, a number, a tensor on another device, the wrong length);
    ``expected`` words what was expected."""
    expected = expected or f"{n} number{'s' * (n != 1)} (float, int, bool or None), one per completion"
    kind = type(output).__name__
    if type(output).__module__.startswith("torch") and hasattr(output, "device"):
        if output.device.type != "cpu":
            raise RewardContractError(f"reward function {name!r} returned a tensor on {output.device}; expected a list "
                                      f"of {expected} (return .tolist(), or move it to the CPU)")
        output = output.detach().tolist() if output.ndim else output
    if (isinstance(output, str | bytes | Mapping) or not isinstance(output, Sequence | _ndarray())
            or getattr(output, "ndim", 1) == 0):
        what = ("a generator (return a list)" if kind == "generator" else
                f"a dict with keys {list(output)[:5]!r}" if isinstance(output, Mapping) else
                f"{output!r:.60}, a {kind}")
        raise RewardContractError(f"reward function {name!r} returned {what}; expected a list of {expected}")
    values = list(output)
    if len(values) != n:
        raise RewardContractError(f"reward function {name!r} returned {len(values)} rewards for {n} answers; expected "
                                  f"a list of {expected}")
    return values


def _ndarray() -> type:
    """numpy's array type, imported when a reward output needs it (this module imports no numpy)."""
    import numpy as np

    return np.ndarray


def _non_finite(value: Any, fill: float = 0.0) -> tuple[bool, Any]:
    """(whether ``value`` holds NaN or an infinity, ``value`` with those as ``fill``); ``None`` is fine."""
    if value is None or isinstance(value, str | bytes):
        return False, value
    if isinstance(value, Sequence) or hasattr(value, "__len__") and hasattr(value, "__iter__"):
        parts = [_non_finite(v, fill) for v in value]
        return any(bad for bad, _ in parts), [fixed for _, fixed in parts]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False, value
    return (False, value) if math.isfinite(number) else (True, fill)


def _row_kwargs(kwargs: Mapping[str, Any], p: int, n: int) -> dict[str, Any]:
    """The arguments of answer ``p`` alone: per-answer lists sliced, hooks passed as they are."""
    return {key: value[p:p + 1] if isinstance(value, list | tuple) and len(value) == n else value
            for key, value in kwargs.items()}


def run_limited(func: Callable[..., Any], kwargs: Mapping[str, Any], limit: float | None) -> Any:
    """``func(**kwargs)``; with ``limit``, in a daemon thread that is abandoned (not stopped) after
    ``limit`` seconds with TimeoutError."""
    if limit is None:
        return func(**kwargs)
    return _run_parallel(func, [kwargs], limit, "", raw=True)[0]


def _run_parallel(func: Callable[..., Any], rows: Sequence[Mapping[str, Any]], limit: float, name: str,
                  raw: bool = False) -> list[Any]:
    """``func(**row)`` for each row, one daemon thread each, all within ``limit`` seconds: each
    result is the output (its one value unless ``raw``), or the exception (TimeoutError when late)."""
    results: list[Any] = [TimeoutError(f"no result within time_limit={limit} s (the call keeps running in "
                                       "a background thread)")] * len(rows)

    def work(i: int, row: Mapping[str, Any]) -> None:
        try:
            out = func(**row)
            results[i] = out if raw else reward_list(out, 1, name)[0]
        except Exception as err:  # noqa: BLE001
            results[i] = err

    threads = [threading.Thread(target=work, args=(i, row), daemon=True, name="vpo-reward-call")
               for i, row in enumerate(rows)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + limit
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    done = list(results)  # a late thread may still write into ``results``
    if raw and isinstance(done[0], BaseException):
        raise done[0]
    return done
