"""verl plugin: registers vpo's advantage estimators in verl's estimator registry.

Usage: nothing to call. ``pip install -e .`` (or ``pip install vpo[verl]``) declares the entry
point ``[project.entry-points."verl.plugins"] vpo = "vpo.integrations.verl_plugin"``; every
``import verl`` (the driver, the ``TaskRunnerV1`` Ray actor, every worker) loads it, after
which ``algorithm.adv_estimator=vpo`` (or any other registered ``vpo.estimators`` name verl
can run: ``multi_rlvr``, ``max_at_k``, ``maxrl``, ``random_weight``, ``goal_conditioned``, and
estimators of ``vpo.estimators`` plugins) resolves. See ``vpo.integrations.verl`` for what each
name computes. An estimator registered after this module was imported is added by calling
``register()`` again.

Check it worked (verl swallows plugin errors at DEBUG level)::

    python -c "import verl; from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R; assert 'vpo' in R"

Without the entry point (e.g. ``VERL_USE_EXTERNAL_PLUGINS=none``) the same module can be
loaded through ``VERL_USE_EXTERNAL_MODULES=vpo.integrations.verl_plugin``.

The module is cheap (no task, estimator or weight code is imported until an estimator runs),
has no side effect beyond the registry, and is safe to import twice or under two names: a
name already present in the registry is left alone.
"""

from __future__ import annotations

import logging

from vpo.integrations.verl import VERL_ESTIMATORS, verl_estimators

logger = logging.getLogger(__name__)


def register() -> list[str]:
    """Add each of ``VERL_ESTIMATORS`` (brought up to date with the estimator registry) to verl's
    registry unless the name is taken.

    Returns the names this call added. A name bound to a different (non-vpo) function is
    left as it is and reported with a warning.
    """
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    verl_estimators()  # estimators registered since import (a plugin's, a test's) get a verl entry
    added = []
    for name, fn in VERL_ESTIMATORS.items():
        existing = ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is None:
            register_adv_est(name)(fn)
            added.append(name)
        elif getattr(existing, "__module__", "").split(".")[0] != "vpo":
            logger.warning("verl already registers an advantage estimator named %r (%s); vpo's is not installed "
                           "under that name", name, getattr(existing, "__qualname__", existing))
    return added


register()
