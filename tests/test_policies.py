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


def test_gammatune_rule_by_hand():
    p = POLICIES.build("gammatune", {"eta": "0.5"}, max_k=6)
    # g: 6 -> rejected with 2 accepted: 0.5*2 + 0.5*6 = 4 -> full (4 of 4): 5 -> rejected
    # with 0 accepted: 2.5 (rounds to 2, half to even) -> nothing drafted: kept
    steps = [([6], [2]), ([4], [4]), ([5], [0]), ([0], [0]), ([2], [1])]
    assert trace(p, steps) == [[6], [4], [5], [2], [2]]
    st = p.init(1)
    for n_draft, n_acc in steps:
        st = p.update(st, None, jnp.asarray(n_draft), jnp.asarray(n_acc))
    assert float(st[0]) == pytest.approx(0.5 * 1 + 0.5 * 2.5)
    plus = POLICIES.build("gammatune+", {"threshold": "0.3"}, max_k=4)
    from specjax.policies import DraftStep

    probs = jnp.asarray([[0.2, 0.5, 0.3], [0.25, 0.25, 0.5]])
    stop = plus.stop(plus.init(2), DraftStep(index=jnp.int32(0), token=jnp.zeros(2, jnp.int32),
                                             probs=probs))
    assert stop.tolist() == [False, False]
    assert plus.stop(None, DraftStep(index=jnp.int32(0), token=jnp.zeros(1, jnp.int32),
                                     probs=jnp.full((1, 4), 0.25))).tolist() == [True]
    with pytest.raises(PolicyError, match="eta must be in"):
        POLICIES.build("gammatune", {"eta": "0"}, max_k=4)
    with pytest.raises(PolicyError, match="threshold must be in"):
        POLICIES.build("gammatune+", {"threshold": "2"}, max_k=4)


def test_smartspec_goodput_by_hand():
    # max_k 4: verify buckets 1, 2, 4, 5, so k = 0..4 pays cost[T - 1] at T = 1, 2, 4, 4, 5
    cost = "1,1.5,2,2.5,3"
    p = POLICIES.build("smartspec", {"cost": cost, "prior": "0.5", "ema": "0.5"}, max_k=4)
    t = [1.0, 1.5, 2.5, 2.5, 3.0]
    np.testing.assert_allclose(np.asarray(p.step_cost()), t)
    # a = 0.5: E(k) = 2 (1 - 0.5^(k+1)) = 1, 1.5, 1.75, 1.875, 1.9375; E/T: 1, 1, 0.7, 0.75,
    # 0.646 -> argmax picks the first maximum, k = 0; rows 0.9 and 0.5 together:
    # a = 0.9: E = 1, 1.9, 2.71, 3.439, 4.0951; sums/T: 2, 2.267, 1.784, 2.126, 2.011 -> k = 1
    st = jnp.asarray([0.9, 0.5])
    assert np.asarray(p.decide(st, None)).tolist() == [1, 1]
    per_row = POLICIES.build("smartspec", {"cost": cost, "per_row": "true"}, max_k=4)
    # row 0.9: E/T = 1, 1.267, 1.084, 1.376, 1.365 -> 3; row 0.5 -> 0
    assert np.asarray(per_row.decide(st, None)).tolist() == [3, 0]
    # update: drafted 4 accepted 1 -> rate 1/2; drafted 2 accepted 2 -> 1; nothing drafted ->
    # relax 5% towards the prior 0.5
    new = p.update(jnp.asarray([0.9, 0.5, 0.9]), None, jnp.asarray([4, 2, 0]),
                   jnp.asarray([1, 2, 0]))
    np.testing.assert_allclose(np.asarray(new), [0.7, 0.75, 0.9 + 0.05 * (0.5 - 0.9)],
                               rtol=1e-6)
    # a drafting cost makes long drafts worse: at 0.2 per draft step, T = 1, 1.7, 2.9, 3.1,
    # 3.8 and row 0.9's E/T = 1, 1.118, 0.934, 1.109, 1.078 -> k = 1
    dc = POLICIES.build("smartspec", {"cost": cost, "per_row": "true", "draft_cost": "0.2"},
                        max_k=4)
    assert np.asarray(dc.decide(jnp.asarray([0.9]), None)).tolist() == [1]
    with pytest.raises(PolicyError, match="prior must be in"):
        POLICIES.build("smartspec", {"prior": "1.0", "cost": cost}, max_k=4)
    with pytest.raises(PolicyError, match="draft_cost must be >= 0"):
        POLICIES.build("smartspec", {"draft_cost": "-1", "cost": cost}, max_k=4)
