"""The Medusa drafter with untrained heads on a tiny random target: greedy identity (chain and
static tree, batch 1 and 3), lossless sampling (chain, and the batch-1 default tree), the
method's defaults, and bad options."""

import pytest
from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law

from specjax import drafters
from specjax.engine import generate
from specjax.errors import CheckpointError, DrafterError
from specjax.sampling import SamplingParams


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.mark.parametrize("tree", [None, "fixed:0,1,0.0,1.0,0.0.0"], ids=["chain", "tree"])
def test_medusa_is_greedy_identical(target, tree):
    ps = mixed_prompts(3, seed=17)
    ref = [generate(target, [p], max_new_tokens=9).tokens[0] for p in ps]
    d = drafters.make("medusa", target, k=3, tree=tree)
    assert generate(target, ps[:1], max_new_tokens=9, drafter=d).tokens == ref[:1]
    r = generate(target, ps, max_new_tokens=9, drafter=d, batch_size=3)
    assert r.tokens == ref and sum(r.extra["drafted"]) > 0


# a draft vocabulary under -m long (suite time; EAGLE's sampling test runs one by default)
@pytest.mark.parametrize("kw", [{}, pytest.param({"draft_vocab": 6}, marks=pytest.mark.long)],
                         ids=["full-vocab", "draft-vocab-6-of-8"])
def test_medusa_sampling_matches_the_target_distribution(kw):
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3])
    n = 8000
    d = drafters.make("medusa", target, k=2, **kw)
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=7))
    at = res.extra["accepted_at"]
    assert sum(a[0] for a in at) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_medusa_bad_options(target):
    with pytest.raises(DrafterError, match="medusa drafts static trees"):
        drafters.make("medusa", target, tree="dynamic")
    with pytest.raises(CheckpointError, match="config.json: not found"):
        drafters.make("medusa", target, head="no/such/dir")


def test_medusa_default_at_batch_1_is_a_three_node_tree_under_adaptive(target, monkeypatch):
    from specjax.methods import build, build_drafter
    from specjax.policies.adaptive import tree_step_cost

    monkeypatch.setenv("SPECJAX_COST_CURVE", "builtin")  # nothing timed: priced by the curve
    d, p, _ = build("medusa", target, {})
    # the two best first tokens, and the best second token after the first
    assert (d.tree.kind, d.tree.parents, d.tree.depth, d.max_k) == ("fixed", (-1, -1, 0), 2, 2)
    # each depth priced by the nodes its block verifies: both depths verify the 4-token block
    assert (p.name, p.idle_decay) == ("adaptive", 0.995)
    assert p.step_cost == tree_step_cost(p.cost, d.tree, p.draft_cost, p.draft_overhead,
                                         per_node=False)
    assert p.step_cost[1] == p.step_cost[2] > 1.0
    # a cost per drafted token given by the caller counts once per depth (one head pass)
    _, p2, _ = build("medusa", target, {"draft_cost": "0.05"})
    assert p2.step_cost == pytest.approx((1.0, p.step_cost[1] + 0.05, p.step_cost[2] + 0.1))
    ps = mixed_prompts(3, seed=23)
    ref = [generate(target, [q], max_new_tokens=9).tokens[0] for q in ps]
    r = generate(target, ps, max_new_tokens=9, drafter=d, policy=p, batch_size=3)
    assert r.tokens == ref and sum(r.extra["drafted"]) > 0
    # what was not measured keeps the adaptive chain of up to 3: a batch, and a run that asks
    # for a length, a policy or a verifier (also when sampling)
    for args, kw in (({}, {"batch": 4}), ({}, {"batch": 4, "greedy": False}), ({"k": "3"}, {}),
                     ({"k": "3"}, {"greedy": False}), ({"policy": "fixed"}, {}),
                     ({"verifier": "exact"}, {})):
        d = build_drafter("medusa", target, args, **kw)
        assert (d.tree, d.max_k) == (None, 3), (args, kw)
    _, p, _ = build("medusa", target, {}, batch=4)  # the chain default: adaptive
    assert (p.name, p.idle_decay) == ("adaptive", 0.995)


def test_medusa_default_when_sampling_at_batch_1_is_the_tree_and_lossless(monkeypatch):
    """Sampling at batch 1 `medusa` drafts the same 3-node tree under `adaptive` as greedy;
    6000 rows of one prompt through that method follow the target's exact law over the first
    three tokens (chi-square, 99.9%, seed 5) at temperature 1.0 and 0.7."""
    from specjax.methods import build

    monkeypatch.setenv("SPECJAX_COST_CURVE", "builtin")  # nothing timed
    target, _ = sharp_tiny_pair()
    d, p, v = build("medusa", target, {}, greedy=False)
    assert (d.tree.kind, d.tree.parents, p.name, p.idle_decay, v) == (
        "fixed", (-1, -1, 0), "adaptive", 0.995, None)
    n = 6000
    for temperature in (1.0, 0.7):
        want = three_token_law(target, [1, 2, 3], temperature)
        res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                       policy=p, sampling=SamplingParams(temperature=temperature, seed=5))
        assert sum(res.extra["drafted"]) > n  # the tree drafts (adaptive's prior pays here)
        assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n  # and gets accepted
        chi_square_check([t[:3] for t in res.tokens], want)
