"""Speculation-length policies' update rules against hand-computed traces (issue 23)."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.errors import PolicyError
from specjax.policies import POLICIES


def trace(policy, steps):
    """Runs ``(n_draft, n_acc)`` pairs per step (lists over rows) through the policy; returns
    the k it decided before each step."""
    st = policy.init(len(steps[0][0]))
    out = []
    for n_draft, n_acc in steps:
        k = np.asarray(policy.decide(st, None)).tolist()
        out.append(k)
        st = policy.update(st, jnp.asarray(k), jnp.asarray(n_draft), jnp.asarray(n_acc))
    return out


def test_heuristic_schedule_by_hand():
    p = POLICIES.build("heuristic", {"start": "3"}, max_k=6)
    # row 0: full (3 -> 5), full (-> 7, capped at 6), partial (-> 5), nothing drafted (kept)
    # row 1: partial (3 -> 2), partial (-> 1), full (-> 3), partial (-> 2)
    steps = [([3, 3], [3, 1]), ([5, 2], [5, 0]), ([6, 1], [2, 1]), ([0, 3], [0, 0]),
             ([5, 2], [4, 0])]
    assert trace(p, steps) == [[3, 3], [5, 2], [6, 1], [5, 3], [5, 2]]
    # a row that drafted fewer than k (the drafter offered fewer) and had all accepted: +2
    p = POLICIES.build("heuristic", {}, max_k=4)
    assert trace(p, [([2], [2]), ([4], [0])]) == [[4], [4]]
    with pytest.raises(PolicyError, match="start must be in"):
        POLICIES.build("heuristic", {"start": "9"}, max_k=4)
    with pytest.raises(PolicyError, match="min_k 5 exceeds"):
        POLICIES.build("heuristic", {"min_k": "5"}, max_k=4)
