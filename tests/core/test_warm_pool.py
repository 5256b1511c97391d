"""vpo.warm_pool.WarmPool, the one pool behind the sandbox's workers and the math task's checkers:
warmest-first reuse by key, the live cap that makes callers wait, the idle cap, dead workers
replaced, and a forked child that never touches its parent's workers."""

from __future__ import annotations

import os
import threading
import time

import pytest

from timed_checks import HANG_S
from vpo.warm_pool import WarmPool


class Worker:
    made = 0

    def __init__(self, key):
        Worker.made += 1
        self.key, self.stopped, self.dead = key, 0, False

    def stop(self):
        self.stopped += 1


def pool(**kwargs):
    return WarmPool(start=Worker, stop=Worker.stop, alive=lambda w: not w.dead, **kwargs)


def test_reuse_warmest_first_by_key():
    p = pool()
    a, b = p.acquire("x"), p.acquire("x")
    c = p.acquire("y")
    p.release(a)
    p.release(b)
    p.release(c)
    assert p.acquire("x") is b  # the most recently released of that key
    assert p.acquire("x") is a
    assert p.acquire("y") is c
    assert p.peak == 3 and len(p.workers()) == 3
    p.close()
    assert (a.stopped, b.stopped, c.stopped) == (1, 1, 1) and p.workers() == []


def test_max_live_makes_callers_wait_and_max_idle_stops_the_rest():
    p = pool(max_live=1)
    first = p.acquire()
    got = []
    waiter = threading.Thread(target=lambda: got.append(p.acquire()))
    waiter.start()
    time.sleep(0.2)
    assert not got  # the only worker is busy
    p.release(first)
    waiter.join(5)
    assert got == [first] and p.peak == 1
    capped = pool(max_idle=1)
    a, b = capped.acquire(), capped.acquire()
    capped.release(a)
    capped.release(b)
    assert b.stopped == 1 and a.stopped == 0 and capped.workers() == [a]


def test_at_the_cap_an_idle_worker_of_another_key_makes_room():
    p = pool(max_live=1)
    x = p.acquire("x")
    p.release(x)
    y = p.acquire("y")
    assert y is not x and x.stopped == 1 and p.workers() == [y]


def test_dead_workers_are_replaced_and_unknown_ones_left_alone():
    p = pool()
    a = p.acquire()
    a.dead = True
    p.release(a)
    assert a.stopped == 1 and p.acquire() is not a
    b = p.acquire()
    p.close()  # stops the busy worker too
    p.release(b)  # released after close: already stopped, not stopped again
    assert b.stopped == 1
    stranger = Worker("z")
    p.release(stranger)
    p.discard(stranger)
    assert stranger.stopped == 0


def test_a_failed_start_frees_its_place():
    calls = []

    def start(key):
        calls.append(key)
        if len(calls) == 1:
            raise OSError("no room")
        return Worker(key)

    p = WarmPool(start=start, stop=Worker.stop, max_live=1)
    with pytest.raises(OSError):
        p.acquire()
    assert isinstance(p.acquire(), Worker)  # the cap was not used up by the failed start


def test_warm_up_starts_the_workers_side_by_side():
    started = []
    together = threading.Barrier(3, timeout=HANG_S)  # one start at a time would wait here for HANG_S and fail

    def start(key):
        started.append(threading.get_ident())
        together.wait()  # side by side: the three starts are all under way before any returns
        return Worker(key)

    p = WarmPool(start=start, stop=Worker.stop, max_live=3)
    begin = time.monotonic()
    assert len(p.warm_up()) == 3
    assert time.monotonic() - begin < HANG_S and len(set(started)) == 3 and not together.broken
    assert len(p.warm_up()) == 3 and len(started) == 3  # already warm


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_workers():
    p = pool()
    parent = p.acquire()
    p.release(parent)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = p.workers() == [] and p.acquire() is not parent
        p.close()
        ok = ok and parent.stopped == 0
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    assert p.workers() == [parent] and parent.stopped == 0
    p.close()
