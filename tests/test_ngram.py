"""``ngram`` (issue 24): the per-source bookkeeping against a by-hand count, greedy identity
(batch 1, 3 and 8, mixed lengths, every source alone and all together), the global cache
learning through it, lossless sampling, bad options."""

import jax.numpy as jnp
import numpy as np
import pytest

from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law
from specjax import drafters, methods
from specjax.drafters.ngram import agreement, confident_length, expected_accepted
from specjax.drafters.suffix import SuffixCache
from specjax.engine import generate
from specjax.errors import DrafterError
from specjax.sampling import SamplingParams


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(8, seed=11)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return generate(target, prompts, max_new_tokens=14, batch_size=8).tokens


def test_agreement_counts_by_hand():
    rng = np.random.default_rng(0)
    B, S, K = 64, 3, 5
    drafts = rng.integers(0, 3, (B, S, K))
    lens = rng.integers(0, K + 1, (B, S))
    committed = rng.integers(0, 3, (B, K + 1))
    n_com = rng.integers(1, K + 2, B)
    acc, trials = agreement(jnp.asarray(drafts), jnp.asarray(lens), jnp.asarray(committed),
                            jnp.asarray(n_com))
    for b in range(B):
        for s in range(S):
            known = min(lens[b, s], n_com[b])
            m = 0
            while m < known and drafts[b, s, m] == committed[b, m]:
                m += 1
            assert acc[b, s] == m
            assert trials[b, s] == m + (m < known)


def test_expected_accepted():
    a = jnp.asarray([[0.5, 1.0, 0.0]])
    n = jnp.asarray([[3, 2, 4]])
    np.testing.assert_allclose(np.asarray(expected_accepted(a, n, 4)),
                               [[0.5 + 0.25 + 0.125, 2.0, 0.0]], rtol=1e-6)


def test_confident_length():
    a = jnp.asarray([0.5, 0.9, 0.3, 1.0])
    # 0.5: 0.5 >= 0.4 > 0.25; 0.9: 0.9^8 = 0.43 >= 0.4 > 0.9^9; 0.3: none; 1.0: all (K = 12)
    assert np.asarray(confident_length(a, 0.4, 12)).tolist() == [1, 8, 0, 12]


def test_first_token_estimate_by_hand():
    """``first_token``: the first drafted position counted apart. From decayed counts the two
    estimates follow by hand; the chance of i tokens is first * rest^(i-1), which moves the
    cut and the priced choice; the counts a step adds agree with :func:`agreement`'s."""
    from types import SimpleNamespace

    from specjax.drafters.dynamic_exit import tpl_choice
    from specjax.drafters.ngram import first_and_rest, learn_from_committed

    # a source right on its first token 1 time in 4 but, once right, right 9 times in 10
    state = {"acc": jnp.asarray([[1.0 + 9.0]]), "trials": jnp.asarray([[4.0 + 10.0]]),
             "acc1": jnp.asarray([[1.0]]), "trials1": jnp.asarray([[4.0]])}
    first, rest = first_and_rest(state, 0.5, 2.0)
    np.testing.assert_allclose(np.asarray(first), [[(1 + 1) / (4 + 2)]], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(rest), [[(9 + 1) / (10 + 2)]], rtol=1e-6)
    f, r = 1 / 3, 10 / 12
    np.testing.assert_allclose(np.asarray(expected_accepted(rest, jnp.asarray([[3]]), 4, first)),
                               [[f + f * r + f * r * r]], rtol=1e-6)
    # min_gain 0.2: f r^(i-1) >= 0.2 for i = 1..3 (0.333, 0.278, 0.231; 0.193 below);
    # a^i with the pooled a = 11/16 stops at i = 4 (0.223; 0.153 below)
    assert np.asarray(confident_length(rest, 0.2, 8, first)).tolist() == [[3]]
    pooled = (10 + 1) / (14 + 2)
    assert np.asarray(confident_length(jnp.asarray([[pooled]]), 0.2, 8)).tolist() == [[4]]
    # priced: with the first token right 1 time in 3 no block pays on this curve (1 token:
    # 1.333 / 1.4; 3 tokens: 1.842 / 1.9); the pooled estimate (0.69) buys 3 tokens
    # ((1 + .6875 + .4727 + .3250) / 1.9 = 1.31, the best of its lengths)
    cost = jnp.asarray([1.0, 1.4, 1.9, 1.9, 2.5])
    _, n, _ = tpl_choice(rest, jnp.zeros((1,)), cost, jnp.asarray([4]), first=first)
    np.testing.assert_array_equal(np.asarray(n), [0])
    _, n, _ = tpl_choice(jnp.asarray([[pooled]]), jnp.zeros((1,)), cost, jnp.asarray([4]))
    np.testing.assert_array_equal(np.asarray(n), [3])
    # one step's counts: chains of 3 against the committed tokens [5, 6, 7, 8] (n_acc = 3):
    # source 0 right twice then wrong, source 1 wrong at once, source 2 drafted nothing
    z = jnp.zeros((1, 3), jnp.float32)
    st = {"acc": z, "trials": z, "acc1": z, "trials1": z,
          "drafts": jnp.asarray([[[5, 6, 0], [9, 6, 7], [0, 0, 0]]]),
          "lens": jnp.asarray([[3, 3, 0]])}
    seq = jnp.asarray([[1, 2, 4, 5, 6, 7, 8, 0]])
    ctx = SimpleNamespace(seq=seq, seq_len=jnp.asarray([7]), live=jnp.asarray([True]))
    out = learn_from_committed(st, ctx, jnp.asarray([3]), 3, 0.9)
    np.testing.assert_array_equal(np.asarray(out["acc"]), [[2, 0, 0]])
    np.testing.assert_array_equal(np.asarray(out["trials"]), [[3, 1, 0]])
    np.testing.assert_array_equal(np.asarray(out["acc1"]), [[1, 0, 0]])
    np.testing.assert_array_equal(np.asarray(out["trials1"]), [[1, 1, 0]])


def test_per_position_estimate_by_hand():
    """``per_position``: each drafted position's acceptance given the ones before, shrunk
    toward the source's pooled rate; a source whose chains break at the same depth is cut
    there (pooled, its good runs carry it on), and the priced choice follows; the counts a
    step adds per position agree with :func:`agreement`'s."""
    from types import SimpleNamespace

    from specjax.drafters.dynamic_exit import tpl_choice
    from specjax.drafters.ngram import learn_from_committed, position_reach, running_alpha

    # 10 chains, each right at positions 1 and 2, wrong at 3: pooled 20 accepted of 30 trials
    K = 5
    acc_pos = jnp.asarray([[[10.0, 10.0, 0.0, 0.0, 0.0]]])
    trials_pos = jnp.asarray([[[10.0, 10.0, 10.0, 0.0, 0.0]]])
    state = {"acc": jnp.asarray([[20.0]]), "trials": jnp.asarray([[30.0]]),
             "acc_pos": acc_pos, "trials_pos": trials_pos}
    alpha = running_alpha(state, 0.5, 2.0)
    a = (20 + 1) / (30 + 2)
    np.testing.assert_allclose(np.asarray(alpha), [[a]], rtol=1e-6)
    h1 = (10 + 2 * a) / 12  # positions 1, 2; position 3: 2a / 12; 4, 5: a (no trials)
    want = np.cumprod([h1, h1, 2 * a / 12, a, a])
    reach = position_reach(state, alpha, 2.0)
    np.testing.assert_allclose(np.asarray(reach)[0, 0], want, rtol=1e-6)
    # cut at min_gain 0.3: two tokens per position (the third is 0.105); a^i would keep 2 too
    # but a^3 = 0.28 is close: at min_gain 0.25 pooled keeps 3, per position still 2
    assert int(np.sum(want >= 0.25)) == 2 and a ** 3 >= 0.25
    # priced: T = 1..3 cost 1, T = 4 1.08: per position two tokens (2.83 / 1 against
    # 2.93 / 1.08 = 2.71 for three); pooled three (2.37 / 1.08 = 2.19 against 2.09 / 1)
    cost = jnp.asarray([1.0, 1.0, 1.0, 1.08, 3.0, 3.0])
    _, n, _ = tpl_choice(alpha, jnp.zeros((1,)), cost, jnp.asarray([K]), reach=reach)
    np.testing.assert_array_equal(np.asarray(n), [2])
    _, n, _ = tpl_choice(alpha, jnp.zeros((1,)), cost, jnp.asarray([K]))
    np.testing.assert_array_equal(np.asarray(n), [3])
    # one step's counts: chains of 3 against the committed tokens [5, 6, 7, 8] (n_acc = 3):
    # source 0 right twice then wrong, source 1 wrong at once, source 2 drafted nothing,
    # source 3 right as far as it goes (two tokens: censored, no trial at position 3)
    z, zk = jnp.zeros((1, 4), jnp.float32), jnp.zeros((1, 4, 3), jnp.float32)
    st = {"acc": z, "trials": z, "acc_pos": zk, "trials_pos": zk,
          "drafts": jnp.asarray([[[5, 6, 0], [9, 6, 7], [0, 0, 0], [5, 6, 0]]]),
          "lens": jnp.asarray([[3, 3, 0, 2]])}
    seq = jnp.asarray([[1, 2, 4, 5, 6, 7, 8, 0]])
    ctx = SimpleNamespace(seq=seq, seq_len=jnp.asarray([7]), live=jnp.asarray([True]))
    out = learn_from_committed(st, ctx, jnp.asarray([3]), 3, 0.9)
    np.testing.assert_array_equal(np.asarray(out["acc_pos"])[0],
                                  [[1, 1, 0], [0, 0, 0], [0, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(np.asarray(out["trials_pos"])[0],
                                  [[1, 1, 1], [1, 0, 0], [0, 0, 0], [1, 1, 0]])
    # a row no longer live keeps its counts
    ctx = SimpleNamespace(seq=seq, seq_len=jnp.asarray([7]), live=jnp.asarray([False]))
    out = learn_from_committed({**st, "trials_pos": zk + 1}, ctx, jnp.asarray([3]), 3, 0.9)
    np.testing.assert_array_equal(np.asarray(out["trials_pos"]), np.ones((1, 4, 3)))


def test_choice_prices_the_verify_block():
    """(source, length) by expected tokens per verify cost: a cheaper shorter block wins over
    a longer dearer one, a source's own chain length bounds it, nothing when nothing pays."""
    from specjax.drafters.dynamic_exit import tpl_choice
    from specjax.policies.adaptive import bucketed_cost

    alpha = jnp.asarray([[0.9, 0.6], [0.9, 0.6], [0.2, 0.1]])
    lens = jnp.asarray([[4, 4], [1, 4], [4, 4]])
    flat = jnp.ones((5,), jnp.float32)
    src, n, _ = tpl_choice(alpha, jnp.zeros((2,)), flat, lens)
    # flat cost: the longest chain of the best source; row 1: source 0 has only one token
    # (1.9 expected) against source 1's four (1 + .6 + .36 + .216 + .1296 = 2.31)
    assert np.asarray(src).tolist() == [0, 1, 0] and np.asarray(n).tolist() == [4, 4, 4]
    # T = 1 costs 1, T = 2 1.05, T = 3..4 1.5 (bucket 4), T = 5 3.0
    cost = bucketed_cost((1.0, 1.05, 1.5, 1.5, 3.0), 4)
    src, n, _ = tpl_choice(alpha, jnp.zeros((2,)), cost, lens)
    # row 0: 1 + .9 + .81 + .729 = 3.439 / 1.5 = 2.29 beats 1.9 / 1.05 = 1.81 and 4.1 / 3
    # row 1: source 0's one token, 1.9 / 1.05 = 1.81, beats source 1's 2.18 / 1.5 = 1.45
    # (three tokens) and 1.6 / 1.05 = 1.52 (one); row 2: 1.2 / 1.05 = 1.14 > 1 still pays
    assert np.asarray(n).tolist() == [3, 1, 1] and np.asarray(src).tolist() == [0, 0, 0]
    dear = jnp.asarray([1.0, 1.3, 2.0, 2.0, 3.0])
    src, n, _ = tpl_choice(alpha[2:], jnp.zeros((2,)), dear, lens[2:])
    assert np.asarray(n).tolist() == [0]  # 1.2 / 1.3 < 1: plain step


def test_batch_choice_against_every_combination():
    """In a batch the block is the longest draft's: ``batch_choice``'s (source, length) per
    row gives the most expected tokens per verify cost over every combination of the rows'
    choices (brute force), ignores rows no longer live, and at batch 1 is ``tpl_choice``'s."""
    import itertools

    from specjax.drafters.dynamic_exit import tpl_choice
    from specjax.drafters.ngram import batch_choice, reach_chance
    from specjax.policies.adaptive import bucketed_cost

    rng = np.random.default_rng(3)
    B, S, K = 3, 2, 4
    vc = bucketed_cost((1.0, 1.1, 1.6, 1.6, 2.5), K)
    for trial in range(40):
        alpha = jnp.asarray(rng.uniform(0.05, 0.95, (B, S)), jnp.float32)
        reach = reach_chance(alpha, K)
        cut = jnp.asarray(rng.integers(0, K + 1, (B, S)), jnp.int32)
        live = jnp.asarray(rng.uniform(size=B) < 0.8)
        src, n = batch_choice(reach, cut, vc, live)
        r, c, lv = np.asarray(reach), np.asarray(cut), np.asarray(live)

        def value(choice):  # choice: per row (source, length)
            tokens = sum(1 + r[b, s, :m].sum() for b, (s, m) in enumerate(choice) if lv[b])
            return tokens / float(vc[max(m for _, m in choice)])

        options = [[(s, m) for s in range(S) for m in range(c[b, s] + 1)] if lv[b]
                   else [(0, 0)] for b in range(B)]
        best = max(value(ch) for ch in itertools.product(*options))
        got = list(zip(np.asarray(src).tolist(), np.asarray(n).tolist()))
        assert value(got) == pytest.approx(best, rel=1e-5), (trial, got)
        assert all(m == 0 for (_, m), ok in zip(got, lv) if not ok)
        assert all(m <= c[b, s] for b, (s, m) in enumerate(got))
        one = batch_choice(reach[:1], cut[:1], vc, jnp.ones((1,), bool))
        own = tpl_choice(alpha[:1], jnp.zeros((S,)), vc, cut[:1], reach=reach[:1])
        assert value_one(one, r, vc) == pytest.approx(value_one(own[:2], r, vc), rel=1e-5)


def test_batch_choice_finishes_the_batch_soonest():
    """With each row's tokens left, the block is the one whose expected tokens per step
    would finish the batch soonest per verify cost (``min_rows tokens / left``), checked
    against a direct loop over block lengths; a row with the most left and nothing to draft
    keeps the batch from drafting."""
    from specjax.drafters.ngram import batch_choice, reach_chance
    from specjax.policies.adaptive import bucketed_cost

    rng = np.random.default_rng(5)
    B, S, K = 4, 2, 4
    vc = bucketed_cost((1.0, 1.1, 1.6, 1.6, 2.5), K)
    seen = set()
    for trial in range(60):
        reach = reach_chance(jnp.asarray(rng.uniform(0.3, 0.99, (B, S)), jnp.float32), K)
        cut = jnp.asarray(rng.integers(0, K + 1, (B, S)), jnp.int32)
        live = jnp.asarray(rng.uniform(size=B) < 0.85)
        left = jnp.asarray(rng.integers(2, 9, B), jnp.int32)
        src, n = batch_choice(reach, cut, vc, live, left)
        r, c, lv, lf = np.asarray(reach), np.asarray(cut), np.asarray(live), np.asarray(left)
        vals = []
        for L in range(K + 1):
            rates = [max(1 + r[b, s, :min(c[b, s], L)].sum() for s in range(S)) / lf[b]
                     for b in range(B) if lv[b]]
            vals.append((min(rates) if rates else 1.0) / float(vc[L]))
        n = np.asarray(n)
        assert vals[n.max(initial=0)] == pytest.approx(max(vals), rel=1e-5), (trial, vals, n)
        assert all(m == 0 for m, ok in zip(n, lv) if not ok)
        assert all(m <= c[b, s] for b, (s, m) in enumerate(zip(np.asarray(src), n)))
        seen.add(int(n.max(initial=0)))
        if lv.any():  # the row with the most left has no chain: nothing pays
            b = int(np.argmax(np.where(lv, lf, -1)))
            _, n2 = batch_choice(reach, cut.at[b].set(0), vc, live, left.at[b].set(20))
            assert int(np.asarray(n2).max()) == 0
    assert len(seen) > 2  # the trials reach several block lengths


def value_one(choice, r, vc):
    """Expected tokens per verify cost of one row's ``(source [1], length [1])``."""
    s, m = int(choice[0][0]), int(choice[1][0])
    return (1 + r[0, s, :m].sum()) / float(vc[m])


def test_drafts_nothing_where_no_block_pays(target, prompts, plain):
    """A verify curve under which no draft pays: ngram decodes plainly (same tokens, nothing
    drafted); a flat one: it drafts."""
    dear = ",".join(["1"] + ["5"] * 16)
    m = methods.build("ngram", target, {"k": "6", "cost": dear})
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain and sum(r.extra["drafted"]) == 0
    m = methods.build("ngram", target, {"k": "6", "cost": ",".join(["1"] * 8)})
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain and sum(r.extra["drafted"]) > 0


@pytest.mark.parametrize("sources", [
    "suffix,prompt_lookup,token_recycling,sssd",
    # the suite's time: each source alone under -m long (all four together run by default)
    pytest.param("token_recycling", marks=pytest.mark.long),
    pytest.param("prompt_lookup", marks=pytest.mark.long),
    pytest.param("token_recycling,sssd", marks=pytest.mark.long)])
@pytest.mark.parametrize("recycle_from", ["target", "text", "text,first_token",
                                         "text,per_position"])
def test_greedy_identity(target, prompts, plain, sources, recycle_from):
    recycle_from, *estimate = recycle_from.split(",")  # first-token or per-position estimate
    m = methods.build("ngram", target, {"sources": sources, "k": "6",
                                        "recycle_from": recycle_from,
                                        **{e: "true" for e in estimate}})
    assert m.drafter.first_token == (estimate == ["first_token"])
    assert m.drafter.per_position == (estimate == ["per_position"])
    assert m.drafter.names == tuple(sources.split(","))
    for B in (1, 3, 8):
        r = generate(target, prompts[:B] if B < 8 else prompts, max_new_tokens=14,
                     drafter=m.drafter, policy=m.policy, batch_size=B)
        assert r.tokens == plain[:B], (sources, B)
    for name in m.drafter.names:  # steps that drafted from each source, per row
        assert len(r.extra[f"ngram_{name}"]) == 8
    total = sum(sum(r.extra[f"ngram_{n}"]) for n in m.drafter.names)
    # in hindsight the best source's chain agreed at least as far as the chosen one was
    # accepted, and at least as far as any one source's did, row by row
    best = np.asarray(r.extra["ngram_agreed_best"])
    assert np.all(best >= np.asarray(r.extra["accepted"])), (best, r.extra["accepted"])
    for n in m.drafter.names:
        assert np.all(np.asarray(r.extra[f"ngram_agreed_{n}"]) <= best)
    assert 0 < total <= sum(r.target_forwards)
    if sources == "token_recycling":  # the only source: it drafts wherever anything drafts
        assert sum(r.extra["drafted"]) > 0


def test_learns_across_requests_and_rows_end_mid_step(target, prompts, plain):
    cache = SuffixCache(2048)
    # without the datastore source, which learns the answers too (its own test below)
    d = drafters.make("ngram", target, k=8, cache=cache, sources="suffix,prompt_lookup")
    first = generate(target, prompts, max_new_tokens=14, drafter=d, batch_size=8)
    assert first.tokens == plain and len(cache) == 8
    # asked again, the suffix source finds every answer in its cache: its chains agree with
    # more of the output, more tokens are accepted in fewer forwards
    again = generate(target, prompts, max_new_tokens=14, drafter=d, batch_size=8)
    assert again.tokens == plain
    assert sum(again.extra["ngram_agreed_suffix"]) > sum(first.extra["ngram_agreed_suffix"])
    assert sum(again.target_forwards) < sum(first.target_forwards)
    assert sum(again.extra["accepted"]) > sum(first.extra["accepted"])
    for n in (5, 11):  # budgets that end rows in the middle of a step
        r = generate(target, prompts, max_new_tokens=n, drafter=d, batch_size=8)
        assert r.tokens == [t[:n] for t in plain]


def test_datastore_source_learns_and_restores(target, prompts, plain):
    """The ``sssd`` source drafts from its datastore: after learning the answers it wins rows;
    a snapshot taken before restores the datastore (and the suffix cache) as they were."""
    from specjax.drafters.sssd import Datastore

    ds, cache = Datastore(max_order=3, slots=1 << 12), SuffixCache(2048)
    d = drafters.make("ngram", target, k=6, sources="suffix,sssd", cache=cache, datastore=ds,
                      cost=[1.0] * 8)
    snap = d.snapshot()
    first = generate(target, prompts, max_new_tokens=14, drafter=d, batch_size=8)
    assert first.tokens == plain and len(cache) == 8 and len(ds) > 0
    d2 = drafters.make("ngram", target, k=6, sources="sssd", datastore=ds, cost=[1.0] * 8)
    again = generate(target, prompts, max_new_tokens=14, drafter=d2, batch_size=8)
    assert again.tokens == plain
    assert sum(again.extra["ngram_sssd"]) > 0 and sum(again.extra["accepted"]) > 0
    d.restore(snap)
    assert len(cache) == 0 and len(ds) == 0


def test_sampling_matches_the_target_distribution():
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3])
    n = 5000
    cache = SuffixCache(256)
    for seq in ([1, 2, 3, 4, 5, 6], [3, 4, 4, 4], [2, 3, 0, 1, 2]):
        cache.add(seq)
    # batch_value=rows: the batch's default rule waits for its slowest row, and some of
    # 5,000 rows always have nothing to draft
    d = drafters.make("ngram", target, k=3, cache=cache, learn=False, batch_value="rows")
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=4))
    assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


@pytest.mark.parametrize("args,msg", [
    ({"sources": "suffix,bigram"}, "sources must be distinct names from suffix, "
                                   "prompt_lookup, token_recycling, sssd"),
    ({"recycle_from": "model"}, "recycle_from must be 'target' or 'text'"),
    ({"cost": "1,0,2"}, "cost must be a non-empty list of positive relative costs"),
    ({"sources": "suffix,suffix"}, "sources must be distinct"),
    ({"sources": ""}, "sources must be distinct"),
    ({"prior": "1.5"}, r"prior must be in \(0, 1\)"),
    ({"source_decay": "0"}, r"source_decay must be in \(0, 1\]"),
    ({"prior_weight": "-1"}, "prior_weight must be > 0"),
    ({"min_gain": "1"}, r"min_gain must be in \[0, 1\)"),
    ({"batch_value": "sum"}, "batch_value must be 'finish' or 'rows'"),
    ({"batch_trust": "0"}, r"batch_trust must be in \(0, 1\]"),
    ({"first_token": "true", "per_position": "true"},
     "first_token and per_position exclude each other"),
])
def test_bad_options(target, args, msg):
    with pytest.raises(DrafterError, match=msg):
        methods.build("ngram", target, args)
