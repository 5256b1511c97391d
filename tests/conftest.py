"""Shared test setup: offline hub, quiet engines, deterministic hashing."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VERL_LOGGING_LEVEL", "WARN")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
