"""Shared test setup: offline hub, quiet engines, deterministic hashing; the ``numbers_in`` and
``survivors`` fixtures; tests marked ``gpu`` skip without CUDA."""

import gc
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


@pytest.fixture(autouse=True, scope="module")
def _settled_heap():
    """After each test module, what is still alive moves to the garbage collector's permanent
    generation (``gc.freeze``): a full collection then walks only what later tests make, not the
    hundreds of thousands of objects of torch, transformers and the modules before. Measured on
    tests/tasks, tests/sampling and tests/core: full collections took 143 of their 315 s without it."""
    yield
    gc.collect()
    gc.freeze()


NO_CUDA_REASON = "needs a CUDA GPU: torch.cuda.is_available() is False here (scripts/gpu_check.sh runs these on one)"


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, with the reason, where torch sees no CUDA device (a machine
    without torch skips them too)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=NO_CUDA_REASON))
