"""Warm worker processes kept between calls: one pool per process, the most recently used first.

Usage::

    import subprocess
    from vpo.warm_pool import WarmPool
    pool = WarmPool(start=lambda key: subprocess.Popen(["sleep", key]),       # key -> a new worker
                    stop=lambda proc: (proc.kill(), proc.wait()), alive=lambda proc: proc.poll() is None,
                    max_live=2)
    worker = pool.acquire("30")    # an idle worker with that key, else a new one (waits at max_live)
    pool.release(worker)           # idle again, for the next caller (stopped if dead or over max_idle)
    assert pool.acquire("30") is worker
    pool.close()                   # stop every worker of this process (later calls start new ones)

What the two pools of warm processes share lives here: the sandbox's (``vpo.sandbox.pool``:
interpreters in bubblewrap that run model-written programs) and the math task's
(``vpo.tasks.math.verify``: math-verify processes). A worker is used by one thread at a time;
idle workers are reused warmest first; a forked copy of the process starts its own workers and
never uses (or kills) its parent's; the process's workers are stopped at exit.

What differs stays with each pool, for reasons:

* the sandbox pool grows with its callers (``max_live=None``): ``run_batch`` already bounds its
  threads, and each program must get a worker at once (its limits are wall-clock limits). The
  math pool is capped (``max_live=workers``, callers wait): verl calls ``compute_score`` from
  as many threads as it likes, and every math-verify process holds sympy (~100 MB) and caches.
* the wire: a sandbox worker runs untrusted code, so the parent reads only JSON lines from it
  (unpickling what such a process sends would run its code); a math worker runs our code on
  model text, so its results come back pickled through ``multiprocessing.connection``.
* a dead sandbox worker is replaced by the pool (``alive``); a math worker restarts its own
  process inside its next call, keeping its restart count.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

__all__ = ["WarmPool"]

W = TypeVar("W")

_POOLS: weakref.WeakSet[WarmPool[Any]] = weakref.WeakSet()


class WarmPool(Generic[W]):
    """Workers by key; ``start(key)`` makes one, ``stop(worker)`` ends it for good.

    ``max_live``: workers at most (idle or busy; None: no cap), ``acquire`` waits for one to be
    released when all are busy. ``max_idle``: idle workers kept (an int, a callable read at each
    release, or None: all). ``alive(worker)``: whether an idle worker may be reused.
    """

    def __init__(self, start: Callable[[Hashable], W], stop: Callable[[W], Any], *,
                 alive: Callable[[W], bool] | None = None, max_live: int | None = None,
                 max_idle: int | Callable[[], int] | None = None) -> None:
        if max_live is not None and max_live < 1:
            raise ValueError(f"max_live must be >= 1 or None, got {max_live!r}")
        self._start, self._stop = start, stop
        self._alive = alive if alive is not None else (lambda _worker: True)
        self.max_live = max_live
        self._max_idle = max_idle
        self._fresh()
        _POOLS.add(self)

    def _fresh(self) -> None:
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._live: dict[int, tuple[Hashable, W]] = {}   # id(worker) -> (key, worker)
        self._idle: list[W] = []                          # the most recently released last
        self._starting = 0
        self.peak = 0
        """The most workers busy at once so far (in this process)."""

    def _here(self) -> None:
        """Forget a parent's workers after a fork (they, and the threads using them, are not
        this process's); called under no lock of the parent (the condition is replaced)."""
        if self._pid != os.getpid():
            self._fresh()

    def _idle_cap(self) -> int | None:
        return self._max_idle() if callable(self._max_idle) else self._max_idle

    def _is_idle(self, worker: W) -> bool:
        return any(w is worker for w in self._idle)

    def _note_busy(self) -> None:
        self.peak = max(self.peak, len(self._live) + self._starting - len(self._idle))

    def acquire(self, key: Hashable = None) -> W:
        """An idle worker started with ``key`` (the warmest), else a new one; with ``max_live``
        workers busy, waits for a release."""
        self._here()
        with self._cond:
            while True:
                for i in range(len(self._idle) - 1, -1, -1):
                    worker = self._idle[i]
                    if self._live[id(worker)][0] == key:
                        del self._idle[i]
                        self._note_busy()
                        return worker
                if self.max_live is None or len(self._live) + self._starting < self.max_live:
                    self._starting += 1
                    break
                if self._idle:  # at the cap with idle workers of other keys: make room
                    oldest = self._idle.pop(0)
                    del self._live[id(oldest)]
                    self._cond.release()
                    try:
                        self._stop(oldest)
                    finally:
                        self._cond.acquire()
                    continue
                self._cond.wait()
        try:
            worker = self._start(key)
        except BaseException:
            with self._cond:
                self._starting -= 1
                self._cond.notify()
            raise
        with self._cond:
            self._starting -= 1
            self._live[id(worker)] = (key, worker)
            self._note_busy()
        return worker

    def release(self, worker: W) -> None:
        """Give ``worker`` back: kept idle while it is alive and the idle cap allows, else stopped."""
        self._here()
        with self._cond:
            entry = self._live.get(id(worker))
            if entry is not None and entry[1] is worker:
                if self._is_idle(worker):  # released twice: already kept
                    return
                cap = self._idle_cap()
                if self._alive(worker) and (cap is None or len(self._idle) < cap):
                    self._idle.append(worker)
                    self._cond.notify()
                    return
                del self._live[id(worker)]
                self._cond.notify()
            else:  # stopped by close() while busy, or a parent's (forked): not this pool's to stop
                return
        self._stop(worker)

    def discard(self, worker: W) -> None:
        """Stop ``worker`` and forget it (idle or busy; a worker this pool does not hold is left alone)."""
        self._here()
        with self._cond:
            entry = self._live.get(id(worker))
            if entry is None or entry[1] is not worker:
                return
            del self._live[id(worker)]
            self._idle = [w for w in self._idle if w is not worker]
            self._cond.notify()
        self._stop(worker)

    def warm_up(self, key: Hashable = None, count: int | None = None) -> list[W]:
        """Start workers side by side until ``count`` (default ``max_live``) are live, instead of
        one by one on first use; returns the workers live now."""
        self._here()
        with self._cond:
            want = count if count is not None else self.max_live
            if want is None:
                raise ValueError("warm_up needs a count when the pool has no max_live")
            if self.max_live is not None:
                want = min(want, self.max_live)
            missing = max(0, want - len(self._live) - self._starting)
        # each thread holds its worker only for a moment: start them all before any releases
        holders = threading.Barrier(missing) if missing else None

        def hold() -> None:
            worker = self.acquire(key)
            try:
                holders.wait(timeout=120)
            except threading.BrokenBarrierError:
                pass
            finally:
                self.release(worker)

        threads = [threading.Thread(target=hold, daemon=True) for _ in range(missing)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.workers()

    def workers(self) -> list[W]:
        """This process's live workers (idle or busy)."""
        self._here()
        with self._cond:
            return [worker for _, worker in self._live.values()]

    def close(self) -> None:
        """Stop every worker of this process (idle or busy); later calls start new ones."""
        self._here()
        with self._cond:
            workers = [worker for _, worker in self._live.values()]
            self._live.clear()
            self._idle.clear()
            self._cond.notify_all()
        for worker in workers:
            self._stop(worker)


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()
