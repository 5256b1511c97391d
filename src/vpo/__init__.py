"""Vector Policy Optimization (VPO).

RL post-training that keeps the reward a vector, asks the model for m different answers in one
generation, and scores the set by its expected best answer under random weightings of the
objectives. Usage::

    import vpo
    task = vpo.get_task("maze", size=5)
    result = vpo.get_estimator("vpo")(rewards, group_ids, seed=0, step=3)
    vpo.set_scores(rewards, weights)            # E_w[max_i w . r_i] per rollout
    vpo.metrics.best_at_k(values, k=10)

Shape glossary used in every docstring: B rollouts, G groups, N rollouts per group, M answers
per chain (m), D objectives, K weights, P answers per pool, T tokens.
"""

from vpo import metrics
from vpo.estimators import get_estimator, get_spec, list_estimators, register_estimator
from vpo.objective import set_scores
from vpo.tasks import get_task, list_tasks, register_task

__version__ = "0.1.0"

__all__ = ["get_estimator", "get_spec", "get_task", "list_estimators", "list_tasks", "metrics", "register_estimator",
           "register_task", "set_scores"]
