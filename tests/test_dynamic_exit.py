"""DEL (``del``): dynamic exit layer and length for early-exit drafting."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import drafters, methods
from specjax.drafters.base import DrafterError, StepContext
from specjax.drafters.dynamic_exit import (
    block_and_head_params,
    default_candidates,
    draft_token_cost,
    tpl_choice,
)
from specjax.engine import generate
from specjax.features import Features
from specjax.sampling import SamplingParams
from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law


@pytest.fixture(scope="module")
def target():
    return make_target()


def test_tpl_choice_by_hand():
    """TPL(l, d) = (1 + a + ... + a^d) / (d c(l) + v(d + 1)), argmax over (l, d <= k)."""
    alpha = jnp.array([[0.9, 0.5], [0.05, 0.06], [0.9, 0.99], [0.9, 0.5]])
    lc = jnp.array([0.3, 0.6])
    v = jnp.array([1.0, 1.1, 1.2, 1.3])  # verify 1..4 tokens
    k = jnp.array([3, 3, 3, 1])
    layer, length, tpl = tpl_choice(alpha, lc, v, k)

    def by_hand(a, kmax):
        best = (1.0, 0, 0)  # d = 0: one token for one forward
        for li, (al, c) in enumerate(zip(a, lc.tolist())):
            for d in range(1, kmax + 1):
                t = sum(al ** i for i in range(d + 1)) / (d * c + v[d].item())
                if t > best[0] + 1e-9:
                    best = (t, li, d)
        return best

    for b in range(4):
        t, li, d = by_hand(alpha[b].tolist(), int(k[b]))
        assert (int(layer[b]), int(length[b])) == (li, d), b
        assert float(tpl[b]) == pytest.approx(t, rel=1e-5)
    # row 0: the cheap layer with a = 0.9 drafts 3; row 1: nothing pays; row 2: the deeper
    # layer accepts almost everything; row 3: capped at k = 1
    assert length.tolist()[1] == 0 and layer.tolist()[1] == 0
    assert int(length[3]) == 1


def test_costs_and_candidates(target):
    cfg = target.cfg
    blk, head = block_and_head_params(cfg)
    full = cfg.num_layers * blk + head
    assert draft_token_cost(cfg, (1, 3)) == pytest.approx(((blk + head) / full,
                                                           (3 * blk + head) / full))
    assert default_candidates(30) == (8, 15, 22) and default_candidates(4) == (1, 2, 3)
    assert default_candidates(2) == (1,)
    d = drafters.make("del", target)
    assert d.exit_layers == (1, 2, 3)
    assert d.shadow_every == math.ceil(head / full / 0.03)
    assert drafters.make("del", target, shadow_budget=0).shadow_every == 0


def _ctx(target, B=2, P=12, seed=0):
    rng = np.random.default_rng(seed)
    toks = jnp.asarray(rng.integers(0, target.cfg.vocab_size, (B, P)))
    cache = target.init_cache(B, 32)
    pos = jnp.broadcast_to(jnp.arange(P)[None], (B, P))
    cache = target(toks, pos, cache).cache.with_lengths(jnp.full((B,), P - 1))
    seq = jnp.zeros((B, 32), jnp.int32).at[:, :P].set(toks)
    return StepContext(seq=seq, seq_len=jnp.full((B,), P), target_cache=cache,
                       keys=jnp.zeros((B, 2), jnp.uint32), live=jnp.ones((B,), bool),
                       temperature=jnp.float32(1), top_k=jnp.int32(0), top_p=jnp.float32(1))


def test_rows_draft_at_their_own_layer(target):
    """Two rows choosing different exit layers in one batch draft exactly what the fixed
    early exit at each row's layer drafts."""
    d = drafters.make("del", target, k=3, exit_layers="1,3")
    ctx = _ctx(target)
    B = 2
    hidden = tuple(jnp.zeros((B, 12, target.cfg.hidden_size)) for _ in d.exit_layers)
    state = d.init(None, target, ctx.seq[:, :12], jnp.full((B,), 12), 32,
                   Features(hidden=hidden))
    # row 0: layer 1 accepts everything, layer 3 nothing; row 1 the other way round
    state = {**state, "match": jnp.array([[1e4, 0.0], [0.0, 1e4]]),
             "seen": jnp.array([[1e4, 1e4], [1e4, 1e4]])}
    k = jnp.array([3, 2], jnp.int32)
    tree, new, _ = d.propose(None, target, state, ctx, k, True)
    assert new["layer"].tolist() == [0, 1] and new["length"].tolist() == [3, 2]
    assert new["drafts"].tolist() == [[1, 0], [0, 1]]
    for row, layer in ((0, 1), (1, 3)):
        ee = drafters.make("early_exit", target, k=3, exit_layer=layer)
        ref, _, _ = ee.propose(None, target, (), ctx, k, True)
        n = int(k[row])
        assert tree.tokens[row, :n].tolist() == ref.tokens[row, :n].tolist()
        assert tree.valid[row].tolist() == [i < n for i in range(3)]


def test_evidence_updates(target):
    """Direct evidence goes to the layer that drafted (n_acc matches of min(n_acc + 1, d));
    the shadow token of the round-robin layer is the argmax of its early-exit logits."""
    d = drafters.make("del", target, k=3, exit_layers="1,2", decay=0.5, shadow_budget=1.0)
    assert d.shadow_every == 1
    B, H = 2, target.cfg.hidden_size
    ctx = _ctx(target)
    hidden = tuple(jnp.zeros((B, 12, H)) for _ in d.exit_layers)
    s = d.init(None, target, ctx.seq[:, :12], jnp.full((B,), 12), 32, Features(hidden=hidden))
    s = {**s, "layer": jnp.array([1, 0]), "length": jnp.array([3, 0]),
         "match": jnp.ones((B, 2)), "seen": jnp.ones((B, 2)) * 2}
    rng = np.random.default_rng(1)
    feats = Features(hidden=tuple(jnp.asarray(rng.standard_normal((B, 4, H)), jnp.float32)
                                  for _ in d.exit_layers))
    # committed: row 0 accepted 1 of 3 (new length 11 + 2), row 1 drafted nothing
    after = StepContext(**{**ctx.__dict__,
                           "target_cache": ctx.target_cache.with_lengths(jnp.array([13, 12])),
                           "seq": ctx.seq.at[:, 12].set(jnp.array([7, 9]))})
    s2 = d.update(None, s, after, jnp.array([1, 0]), None, jnp.zeros((B, 3), jnp.int32), feats)
    assert np.allclose(s2["match"], [[1, 0.5 + 1], [1, 1]])
    assert np.allclose(s2["seen"], [[2, 1 + 2], [2, 2]])
    # the token after each row's root: row 0 at position 12 (accepted draft), row 1 at 12
    assert s2["root_token"].tolist() == [int(after.seq[0, 12]), int(after.seq[1, 12])]
    assert s2["have_root"].tolist() == [True, True]
    # shadow at step 0: candidate 0 (layer 1); make row 0's target token its argmax
    want = np.asarray(jnp.argmax(target.final_logits(feats.hidden[0][:, 0]), -1))
    s2 = {**s2, "root_token": jnp.array([int(want[0]), int(want[1]) + 1])}
    s3 = d._shadow(target, s2)
    assert np.allclose(s3["match"][:, 0], [0.5 * 1 + 1, 0.5 * 1])
    assert np.allclose(s3["seen"][:, 0], [0.5 * 2 + 1, 0.5 * 2 + 1])
    assert np.allclose(s3["match"][:, 1], s2["match"][:, 1])


def test_greedy_equals_plain_decoding(target):
    ps = mixed_prompts(8, seed=1)
    ref = generate(target, ps, max_new_tokens=16).tokens
    # a confident prior keeps every row drafting (the random model accepts little), so the
    # per-row layers and lengths all run; the default prior (which backs off here) runs at
    # batch 1 and 3 in tests/test_extension_points.py's every-pair test (del-adaptive, -m long)
    d = drafters.make("del", target, k=3, prior=0.9, prior_weight=50.0, decay=1.0)
    for bs in (1, 3):
        res = generate(target, ps, max_new_tokens=16, drafter=d, batch_size=bs)
        assert res.tokens == ref, bs
        for toks, fw, acc in zip(res.tokens, res.target_forwards, res.extra["accepted"]):
            assert fw + acc == len(toks)
        used = [sum(res.extra[f"del_layer{x}"]) for x in d.exit_layers]
        assert sum(used) > 0 and sum(res.extra["accepted"]) > 0


@pytest.mark.long
def test_sampling_matches_target_distribution():
    """Chi-square of the first three sampled tokens against the exact target law (seed 3),
    with DEL drafting from layer 1 of the 2-layer sharp pair."""
    target, _ = sharp_tiny_pair()
    prompt = [1, 2, 3]
    want = three_token_law(target, prompt)
    n = 12000
    d = drafters.make("del", target, k=2, prior=0.95, prior_weight=1e6)
    res = generate(target, [prompt] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=3))
    assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_bad_options(target):
    for kw, msg in ((dict(exit_layers="0,2"), "exit_layers must be layers in \\[1, 3\\]"),
                    (dict(exit_layers="4"), "exit_layers must be layers"),
                    (dict(prior=1.5), "prior must be in"),
                    (dict(decay=0.0), "decay must be in"),
                    (dict(prior_weight=0), "prior_weight must be"),
                    (dict(shadow_budget=-1), "shadow_budget must be"),
                    (dict(cost="0,1"), "positive relative costs")):
        with pytest.raises(DrafterError, match=msg):
            drafters.make("del", target, **kw)
    with pytest.raises(DrafterError, match="does not take 'tree'"):
        methods.build("del", target, {"tree": "topk"})
    m = methods.build("del", target, {"exit_layers": "1,2", "policy": "fixed"})
    assert m.drafter.exit_layers == (1, 2) and len(m.drafter.cost) >= 4
    assert methods.describe(m.drafter, m.policy)["exit_layers"] == (1, 2)
