"""Thin adapters from the engine-free core to training and search engines.

Each module imports its engine lazily and is installed with the matching extra:
``trl`` (vpo[trl]), ``verl``/``verl_plugin`` (vpo[verl]), ``openrlhf`` (no extra: a reward
file), ``openevolve`` (vpo[openevolve]).
"""
