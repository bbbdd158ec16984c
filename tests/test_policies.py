"""Speculation-length policies' update rules against hand-computed traces (issue 23)."""

import dataclasses

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
    np.testing.assert_allclose(np.asarray(p.step_costs()), t)
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
    # a fixed overhead of 0.6 for drafting at all: T = 1, 2.3, 3.5, 3.7, 4.4 and E/T = 1,
    # 0.826, 0.774, 0.929, 0.931 -> the idle step (k = 0)
    oh = POLICIES.build("smartspec", {"cost": cost, "per_row": "true", "draft_cost": "0.2",
                                      "draft_overhead": "0.6"}, max_k=4)
    np.testing.assert_allclose(np.asarray(oh.step_costs()), [1, 2.3, 3.5, 3.7, 4.4], rtol=1e-6)
    assert np.asarray(oh.decide(jnp.asarray([0.9]), None)).tolist() == [0]
    with pytest.raises(PolicyError, match="draft_overhead must be >= 0"):
        POLICIES.build("smartspec", {"draft_overhead": "-1", "cost": cost}, max_k=4)
    with pytest.raises(PolicyError, match="prior must be in"):
        POLICIES.build("smartspec", {"prior": "1.0", "cost": cost}, max_k=4)
    with pytest.raises(PolicyError, match="draft_cost must be >= 0"):
        POLICIES.build("smartspec", {"draft_cost": "-1", "cost": cost}, max_k=4)


def _dsde_reference(values, decay, temperature, last_mean, lo, hi):
    """WVIR, SF and SL by the formulas of the authors' code, in plain Python."""
    n = len(values)  # oldest first
    ages = list(range(n - 1, -1, -1))

    def wvar(pairs):
        sw = sum(decay ** a for _, a in pairs)
        m = sum(decay ** a * v for v, a in pairs) / sw
        return sum(decay ** a * (v - m) ** 2 for v, a in pairs) / sw

    pairs = list(zip(values, ages))
    long = wvar(pairs)
    short = wvar([(v, a) for v, a in pairs if a < n // 3])
    wvir = 20.0 if long < 1e-6 else short / long
    sf = np.exp(2 * last_mean / temperature) - 1
    x = wvir * sf
    sl = max(lo, int(np.ceil(lo + (hi - lo) * (1 - x)))) if x <= 1 else lo
    return wvir, sf, sl


def test_dsde_by_hand():
    p = POLICIES.build("dsde", {"window": "6"}, max_k=8)
    assert p.signals == ("kld",)
    st = p.init(2)
    assert np.asarray(p.decide(st, None)).tolist() == [1, 1]

    def step(st, n_draft, n_acc, kld):
        K = 8
        m = np.zeros((2, K), np.float32)
        for b, row in enumerate(kld):
            m[b, :len(row)] = row
        return p.update(st, None, jnp.asarray(n_draft), jnp.asarray(n_acc), kld=jnp.asarray(m))

    # warm-up: full acceptances double k (1 -> 2 -> 4); row 1 rejects and stays at 1
    st = step(st, [1, 1], [1, 0], [[0.1], [0.05]])
    st = step(st, [2, 1], [2, 0], [[0.2, 0.3], [0.07]])
    assert np.asarray(st.k_warm).tolist() == [4, 1]
    assert np.asarray(p.decide(st, None)).tolist() == [3, 1]  # cap: ceil((4 + 1) / 2) = 3
    # row 0's window (6) fills: max accepted 2, window [.2 .3 .5 .1 .2 .4] (the first value
    # overwritten): k_max' = round(2 (1 + 0.5 * 0.28333 / 0.5)) = round(2.567) = 3,
    # k_min' = ceil(0.3) = 1
    st = step(st, [4, 1], [1, 0], [[0.5, 0.1, 0.2, 0.4], [0.09]])
    assert np.asarray(st.warm).tolist() == [False, True]
    assert (int(st.k_hi[0]), int(st.k_lo[0])) == (3, 1)
    wvir, sf, sl = _dsde_reference([0.2, 0.3, 0.5, 0.1, 0.2, 0.4], 0.9, 1.0, 0.3, 1, 3)
    assert float(p.wvir(st)[0]) == pytest.approx(wvir, rel=1e-5)
    assert float(p.scale(st, jnp.float32(1.0))[0]) == pytest.approx(sf, rel=1e-5)
    assert int(p.lengths(st, jnp.float32(1.0))[0]) == sl
    # row 1 (3 values): WVIR over its own window, fewer than 2 values -> 0
    one = p.init(1)
    assert float(p.wvir(one)[0]) == 0.0
    # a flat window: variance < 1e-6 -> WVIR 20 -> SF > 1/20 gives k_min'
    flat = dataclasses.replace(st, buf=jnp.full_like(st.buf, 0.3))
    assert float(p.wvir(flat)[0]) == 20.0 and int(p.lengths(flat, jnp.float32(1.0))[0]) == 1
    # temperature divides the KLD in SF
    assert float(p.scale(st, jnp.float32(2.0))[0]) == pytest.approx(np.exp(0.3) - 1, rel=1e-5)
    # decide after warm-up: row 0 by SL, row 1 still warming (k 1); cap ceil(mean)
    want0 = sl
    assert np.asarray(p.decide(st, None)).tolist() == [min(want0, int(np.ceil((want0 + 1) / 2))),
                                                        1]
    nocap = POLICIES.build("dsde", {"window": "6", "cap": "false"}, max_k=8)
    assert np.asarray(nocap.decide(st, None)).tolist() == [want0, 1]
    with pytest.raises(PolicyError, match="window must hold at least 3"):
        POLICIES.build("dsde", {"window": "2"}, max_k=8)
    with pytest.raises(PolicyError, match="needs the KL divergences"):
        p.update(st, None, jnp.asarray([1, 1]), jnp.asarray([1, 1]))


def test_pearl_modes_by_hand():
    p = POLICIES.build("pearl", {"gamma": "3"}, max_k=4)
    # row 0: pre (k 1) accepted -> post (k 3): full -> post: 1 of 3 -> pre: rejected -> pre
    # row 1: pre rejected -> pre; nothing drafted (mode kept) -> pre accepted -> post: the
    #        drafter offered 2 of 3 and both were accepted (full) -> post
    steps = [([1, 1], [1, 0]), ([3, 0], [3, 0]), ([3, 1], [1, 1]), ([1, 2], [0, 2]),
             ([1, 3], [1, 0])]
    assert trace(p, steps) == [[1, 1], [3, 1], [3, 1], [1, 3], [1, 3]]
    st = p.init(2)
    for n_draft, n_acc in steps:
        k = p.decide(st, None)
        st = p.update(st, k, jnp.asarray(n_draft), jnp.asarray(n_acc))
    stats = {k: np.asarray(v).tolist() for k, v in p.stats(st).items()}
    assert stats == {"pearl_pre": [3, 2], "pearl_post": [2, 2]}
    assert np.asarray(POLICIES.build("pearl", {}, max_k=5).decide(
        {"mode": jnp.asarray([0, 1])}, None)).tolist() == [5, 1]  # gamma defaults to k
    with pytest.raises(PolicyError, match="gamma must be an integer in"):
        POLICIES.build("pearl", {"gamma": "6"}, max_k=5)


def test_adaptive_idle_decay_by_hand():
    """``idle_decay`` ages a row's counts on its steps without a draft; ``decay`` on the rest.
    Step costs 1, 1.4, 2.2 (k = 0, 1, 2): a one-token draft pays when ``1 + a > 1.4``, i.e. the
    estimate ``a = (A + 1) / (A + R + 2)`` exceeds 0.4, i.e. ``R < 0.5`` with ``A = 0``."""
    sc = (1.0, 1.4, 2.2)
    fast = POLICIES.build("adaptive", {"step_cost": "1,1.4,2.2"}, max_k=2)
    slow = POLICIES.build("adaptive", {"step_cost": "1,1.4,2.2", "idle_decay": "0.98"},
                          max_k=2)
    assert fast.step_cost == slow.step_cost == sc and fast.idle_decay is None

    def first_probe(p):
        """The step of the first draft after a one-token draft rejected at step 0."""
        st = p.update(p.init(1), None, jnp.asarray([1]), jnp.asarray([0]))  # R = 1
        for t in range(1, 200):
            k = int(np.asarray(p.decide(st, None))[0])
            if k:
                return t, k
            st = p.update(st, None, jnp.asarray([0]), jnp.asarray([0]))

    # the prior (a = 0.5) drafts one token; after the rejection R = 1 (a = 1/3): idle until
    # R d^(t-1) < 0.5: 0.9^7 = 0.478 (t = 8), 0.98^34 = 0.503, 0.98^35 = 0.493 (t = 36)
    assert int(np.asarray(fast.decide(fast.init(1), None))[0]) == 1
    assert first_probe(fast) == (8, 1) and first_probe(slow) == (36, 1)
    # a drafting step ages the counts by decay, not idle_decay: accepted 1 of 2 drafted
    st = slow.update(slow.init(2), None, jnp.asarray([2, 0]), jnp.asarray([1, 0]))
    st = slow.update(st, None, jnp.asarray([2, 0]), jnp.asarray([1, 0]))
    np.testing.assert_allclose(np.asarray(st.accepted), [0.9 + 1, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(st.rejected), [0.9 + 1, 0.0], rtol=1e-6)
    st = slow.update(st, None, jnp.asarray([0, 0]), jnp.asarray([0, 0]))
    np.testing.assert_allclose(np.asarray(st.rejected), [0.98 * 1.9, 0.0], rtol=1e-6)
    for bad in ("0", "1.5"):
        with pytest.raises(PolicyError, match="idle_decay must be in"):
            POLICIES.build("adaptive", {"idle_decay": bad}, max_k=2)
