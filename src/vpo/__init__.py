"""Vector Policy Optimization (VPO).

RL post-training that keeps the reward a vector, asks the model for m different answers in one
generation, and scores the set by its expected best answer under random weightings of the
objectives. Usage::

    from vpo.estimators import get_estimator
    result = get_estimator("vpo")(rewards, group_ids, num_weights=100, seed=0)

Shape glossary used in every docstring: B rollouts, G groups, M answers per chain (m),
D objectives, K weights, T tokens.
"""

__version__ = "0.1.0"
