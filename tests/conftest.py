"""Shared test setup: offline hub, quiet engines, deterministic hashing; the ``numbers_in`` and
``survivors`` fixtures."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VERL_LOGGING_LEVEL", "WARN")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _numbers(obj):
    if isinstance(obj, dict):
        for value in obj.values():
            yield from _numbers(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _numbers(value)
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield float(obj)


@pytest.fixture
def numbers_in():
    """``numbers_in(obj)``: every int/float inside nested dicts and lists (bools excluded), as floats."""
    return lambda obj: list(_numbers(obj))


def _survivors(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if token.encode() in fh.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


@pytest.fixture
def survivors():
    """``survivors(token)``: pids of the processes whose command line contains ``token``."""
    return _survivors
