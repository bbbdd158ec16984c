"""scripts/replay_ngram_choices.py: a recording with every step idle holds each source's chain
at every position, and replaying the drafter's own rule over it gives the real run's steps,
drafted and accepted tokens; the oracle and a rule that drops every source are checked by
hand."""

import types

import numpy as np
import pytest
from script_helpers import load_script
from spec_helpers import make_target

from specjax import methods
from specjax.engine import generate
from specjax.policies.adaptive import bucketed_cost


@pytest.fixture(scope="module")
def rp():
    return load_script("replay_ngram_choices")


def test_replay_of_the_default_rule_is_the_real_run(rp):
    target = make_target()
    rng = np.random.default_rng(3)
    phrase = rng.integers(3, 60, 9).tolist()
    prompt = phrase * 3 + rng.integers(3, 60, 5).tolist() + phrase[:4]  # lookups find text
    curve = "1,1.05,1.1,1.15,1.2,1.25,1.3,1.35"
    m = methods.build("ngram", target, {"k": "6", "cost": curve, "learn": "false"})
    d = m.drafter
    drafts, lens, out = rp.record(d, types.SimpleNamespace(model=target), prompt, 24, ())
    assert drafts.shape == (len(out) - 1, len(d.names), d.max_k)
    assert np.all(lens <= d.max_k) and lens.max() > 0
    real = generate(target, [prompt], max_new_tokens=24, drafter=d, policy=m.policy)
    assert real.tokens[0] == out  # drafting changes no token
    vc = bucketed_cost(d.cost, d.max_k)
    step_cost = np.linspace(1.0, 2.0, d.max_k + 1)
    steps, drafted, accepted, cost, chosen = rp.replay(d, drafts, lens, out, "default", vc,
                                                      step_cost)
    assert (steps, drafted, accepted) == (real.target_forwards[0] - 1,
                                          real.extra["drafted"][0], real.extra["accepted"][0])
    assert drafted > 0 and steps + accepted == len(out) - 1
    assert chosen[:, 1].sum() == drafted and chosen[:, 2].sum() == accepted
    # no source left: every step idle, one token each
    none = "without=" + "+".join(d.names)
    steps, drafted, accepted, cost, _ = rp.replay(d, drafts, lens, out, none, vc, step_cost)
    assert (steps, drafted, accepted) == (len(out) - 1, 0, 0)
    assert cost == pytest.approx(steps * step_cost[0])
    # the oracle drafts only what the text accepts
    steps, drafted, accepted, cost, _ = rp.replay(d, drafts, lens, out, "oracle", vc,
                                                  step_cost)
    assert drafted == accepted and steps + accepted == len(out) - 1


@pytest.mark.parametrize("batch_value", ["finish", "rows"])
def test_batch_replay_of_the_default_rule_is_the_real_batch(rp, batch_value):
    """Four prompts recorded alone and replayed as one batch under the drafter's own batch
    rule give the real batch-4 run's drafted and accepted tokens and its steps."""
    target = make_target()
    rng = np.random.default_rng(4)
    prompts = []
    for _ in range(4):
        phrase = rng.integers(3, 60, 7).tolist()
        prompts.append(phrase * 3 + rng.integers(3, 60, 4).tolist() + phrase[:3])
    curve = "1,1.05,1.1,1.15,1.2,1.25,1.3,1.35"
    m = methods.build("ngram", target, {"k": "6", "cost": curve, "learn": "false",
                                        "batch_value": batch_value}, batch=4)
    d = m.drafter
    recs = [rp.record(d, types.SimpleNamespace(model=target), p, 20, (), cache_len=96)
            for p in prompts]
    real = generate(target, prompts, max_new_tokens=20, drafter=d, policy=m.policy,
                    batch_size=4, cache_len=96)
    assert [r[2] for r in recs] == real.tokens
    vc = bucketed_cost(d.cost, d.max_k)
    step_cost = np.linspace(1.0, 2.0, d.max_k + 1)
    steps, drafted, accepted, cost, _ = rp.replay_batch(d, recs, "default", vc, step_cost)
    assert drafted > 0
    assert (steps, drafted, accepted) == (max(real.target_forwards) - 1,
                                          sum(real.extra["drafted"]),
                                          sum(real.extra["accepted"]))


def test_oracle_and_branch_by_hand(rp):
    """Two sources over a 4-token text: at position 0 source 0 offers the right chain, source
    1 a wrong one; the oracle takes source 0's 2 tokens (3 tokens for one step of cost 1.5,
    against 1 for 1.0); a second branch adds source 1's chain where it parts."""
    d = types.SimpleNamespace(names=("a", "b"), prior=0.5, prior_weight=2.0,
                              source_decay=0.9, min_gain=0.0, max_k=2)
    out = [9, 1, 2, 3]  # the pending token, then the text to predict
    drafts = np.array([[[1, 2], [1, 7]], [[2, 3], [5, 5]], [[3, 0], [0, 0]]])
    lens = np.array([[2, 2], [2, 2], [1, 0]])
    step_cost = np.array([1.0, 1.2, 1.5])
    steps, drafted, accepted, cost, chosen = rp.replay(d, drafts, lens, out, "oracle",
                                                      step_cost, step_cost)
    assert (steps, drafted, accepted, cost) == (1, 2, 2, 1.5)
    assert chosen.tolist() == [[1, 2, 2], [0, 0, 0]]
    # branch: source 0's chain [1, 2] and source 1's [1, 7], parting after the shared 1: a
    # 3-node tree; it pays where the verify cost is flat (1.0 for any block)
    chains = np.array([[1, 2, 0], [1, 7, 0]])
    reach = np.array([[0.9, 0.8, 0.7], [0.9, 0.5, 0.3]])
    flat, dear = np.ones(4), np.array([1.0, 1.0, 1.0, 2.0])
    assert rp.branch(chains, np.array([2, 2]), reach, 0, 2, flat, out[1:], 3) == (0, 3, 2)
    assert rp.branch(chains, np.array([2, 2]), reach, 0, 2, dear, out[1:], 3) == (0, 2, 2)
    # a chain the chosen one is a prefix of adds no branch (it is a chain of its own)
    assert rp.branch(chains, np.array([2, 2]), reach, 0, 1, flat, out[1:], 3) == (0, 1, 1)


def test_step_costs_interpolated_and_extrapolated(rp):
    points = {1: 1.0, 2: 1.2, 4: 1.4}
    assert [rp.cost_at(points, T) for T in (1, 3, 4, 6)] == pytest.approx([1.0, 1.3, 1.4, 1.6])
    # k = 0..3 drafted tokens -> blocks 1, 2, 4, 4 (the engine's buckets for max k 3)
    assert rp.step_cost_table(points, 3).tolist() == pytest.approx([1.0, 1.2, 1.4, 1.4])


def test_minlen_and_meta_rules(rp):
    """``minlen`` drops the chains shorter than its bound (nothing left: every step idle);
    ``meta`` starts with ngram's choice (no scores yet)."""
    d = types.SimpleNamespace(names=("a", "b"), prior=0.5, prior_weight=2.0,
                              source_decay=0.9, min_gain=0.0, max_k=2)
    out = [9, 1, 2, 3]
    drafts = np.array([[[1, 2], [1, 7]], [[2, 3], [5, 5]], [[3, 0], [0, 0]]])
    lens = np.array([[2, 2], [2, 2], [1, 0]])
    step_cost = np.array([1.0, 1.2, 1.5])
    idle = rp.replay(d, drafts, lens, out, "minlen=a:3+b:3", step_cost, step_cost)
    assert idle[:3] == (3, 0, 0) and idle[3] == pytest.approx(3.0)
    # source b's chains only (a's two-token chains dropped, the last one-token chain kept)
    only_a_short = rp.replay(d, drafts, lens, out, "minlen=a:3", step_cost, step_cost)
    assert only_a_short[4][0].tolist() == [0, 0, 0] and only_a_short[4][1, 1] >= 1
    assert lens.tolist() == [[2, 2], [2, 2], [1, 0]]  # the recording is not changed
    default = rp.replay(d, drafts, lens, out, "default", step_cost, step_cost)
    meta = rp.replay(d, drafts, lens, out, "meta=b", step_cost, step_cost)
    # ngram drafts a's first token at each of its two steps (accepted); meta's scores tie
    # after the first step (b's first token is right too), so it follows ngram's rule
    assert default[:3] == (2, 2, 2) and meta[:4] == default[:4]
