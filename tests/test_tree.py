"""Token trees: topology checks, tree verification logits, greedy equivalence for every builder,
lossless multi-draft sampling (exact enumeration and a chi-square test), cache invariants."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import drafters
from specjax.drafters.base import DrafterError, StepContext
from specjax.engine import generate
from specjax.tree import (
    DraftTree,
    TreeError,
    TreeSpec,
    ancestor_mask,
    check_tree,
    parse_tree,
    tree_positions,
)
from specjax.verify import greedy_tree_verify, sibling_step
from spec_helpers import make_target, mixed_prompts

@pytest.fixture(scope="module")
def target():
    return make_target()


# ----------------------------------------------------------------------------- topology


def test_topologies_and_parsing():
    t = TreeSpec.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    assert t.parents == (-1, -1, 0, 0, 1, 2) and t.depth == 3 and t.num_nodes == 6
    assert t.width == 2 and not t.is_chain
    t = TreeSpec.from_level_widths([4, 6, 2])
    assert t.parents == (-1, -1, -1, -1, 0, 0, 1, 1, 2, 3, 4, 5)
    assert parse_tree("levels:4.6.2") == t
    assert parse_tree("fixed:0,1,0.0,0.1,1.0,0.0.0").parents == (-1, -1, 0, 0, 1, 2)
    assert parse_tree("chain", k=5) == TreeSpec.chain(5)
    assert parse_tree("topk", k=3).num_nodes == 12
    assert parse_tree("dynamic", k=3).num_nodes == 16
    assert TreeSpec.from_choices([[0], [0, 0]]).is_chain


@pytest.mark.parametrize("choices, msg", [
    ([[0], [0, 0, 0]], "no parent choice"),
    ([[0], [2]], "skips sibling rank 1"),
    ([[0], [0]], "duplicate"),
    ([], "at least one"),
    ([[]], "root itself"),
])
def test_bad_choices(choices, msg):
    with pytest.raises(TreeError, match=msg):
        TreeSpec.from_choices(choices)


def test_bad_topologies_and_options(target):
    with pytest.raises(TreeError, match="parent must be -1 .* or an earlier node"):
        TreeSpec.fixed([-1, 2, 0])
    with pytest.raises(TreeError, match="breadth-first"):
        TreeSpec.fixed([-1, 0, -1])
    with pytest.raises(TreeError, match="unknown tree 'bush'"):
        parse_tree("bush")
    with pytest.raises(TreeError, match="nodes must be in \\[1, 20\\]"):
        TreeSpec.dynamic(4, 2, 21)
    with pytest.raises(TreeError, match="width must be an integer >= 1"):
        TreeSpec.topk(0, 3)
    with pytest.raises(DrafterError, match="fixed:<choices> wants"):
        drafters.make("early_exit", target, tree="fixed:a.b")
    with pytest.raises(TreeError, match="sibling must be"):
        TreeSpec.fixed([-1], sibling="some")
    bad = DraftTree(tokens=jnp.zeros((1, 3), jnp.int32), parent=jnp.array([[-1, 0, 0]]),
                    depth=jnp.array([[1, 2, 3]]), valid=jnp.ones((1, 3), bool))
    with pytest.raises(TreeError, match="depth 3, expected 2"):
        check_tree(bad)


def test_ancestor_mask_and_positions():
    parent = jnp.array([[-1, -1, 0, 0, 1, 2]])
    m = np.asarray(ancestor_mask(parent, 3))[0].astype(int)
    # block index = node + 1; row of node 5 (block 6): root, node 0, node 2, itself
    assert m[6].tolist() == [1, 1, 0, 1, 0, 0, 1]
    assert m[0].tolist() == [1, 0, 0, 0, 0, 0, 0]
    chain = np.asarray(ancestor_mask(jnp.array([[-1, 0, 1]]), 3))[0]
    np.testing.assert_array_equal(chain, np.tril(np.ones((4, 4), bool)))
    pos = tree_positions(jnp.array([[1, 1, 2, 2, 2, 3]]), jnp.array([10]))
    assert pos[0].tolist() == [10, 11, 11, 12, 12, 12, 13]


# ----------------------------------------------------------------------------- tree forward


def random_tree(rng, N, V):
    parent = [-1]
    for i in range(1, N):
        parent.append(int(rng.integers(-1, i)))
    # breadth-first order: sort nodes by depth (stable), remap parents
    depth = [0] * N
    for i, p in enumerate(parent):
        depth[i] = 1 if p < 0 else depth[p] + 1
    order = sorted(range(N), key=lambda i: depth[i])
    new = {o: i for i, o in enumerate(order)}
    parent = [-1 if parent[o] < 0 else new[parent[o]] for o in order]
    depth = [depth[o] for o in order]
    return parent, depth, rng.integers(0, V, N).tolist()


@pytest.mark.parametrize("impl", ["dense", "xla", "pallas_interpret"])
def test_tree_verify_logits_equal_plain_decoding_of_each_path(target, impl):
    """Invariant 2: one forward over a random tree gives, at every node, the logits a plain
    forward over that node's path gives; rows have different prefix lengths. Run with each
    attention implementation (the dense masked softmax, and the tree-attention op's XLA
    reference and Pallas kernel)."""
    rng = np.random.default_rng(0)
    B, N, S = 3, 9, 64
    prompts = [rng.integers(0, 64, n).tolist() for n in (5, 11, 1)]
    trees = [random_tree(rng, N, 64) for _ in range(B)]
    parent = jnp.asarray([t[0] for t in trees], jnp.int32)
    depth = jnp.asarray([t[1] for t in trees], jnp.int32)
    toks = jnp.asarray([t[2] for t in trees], jnp.int32)
    tree = DraftTree(tokens=toks, parent=parent, depth=depth, valid=jnp.ones((B, N), bool))
    check_tree(tree)
    # prefill all but the last prompt token (the pending root)
    P = max(len(p) for p in prompts)
    pt = np.zeros((B, P), np.int32)
    for b, p in enumerate(prompts):
        pt[b, :len(p)] = p
    lens = jnp.asarray([len(p) - 1 for p in prompts], jnp.int32)
    cache = target.init_cache(B, S)
    cache = target(jnp.asarray(pt), jnp.broadcast_to(jnp.arange(P)[None], (B, P)), cache
                   ).cache.with_lengths(lens)
    # poison the scratch past each row's length with the largest finite bfloat16 (a cache holds
    # no NaN or inf, specjax.cache.write_block): a wrong read shows up as inf or NaN
    poison = jnp.arange(S)[None, None, :, None] >= lens[:, None, None, None]  # [B, KVH, S, Dh]
    big = float(jnp.finfo(jnp.bfloat16).max)  # exact in float32, TF32 and bf16
    cache = cache.__class__(k=tuple(jnp.where(poison, big, a) for a in cache.k),
                            v=tuple(jnp.where(poison, -big, a) for a in cache.v),
                            lengths=cache.lengths)
    root = jnp.asarray([p[-1] for p in prompts], jnp.int32)
    block = jnp.concatenate([root[:, None], toks], axis=1)
    target.set_attention_impl(impl)
    try:
        out = target(block, tree_positions(depth, lens), cache,
                     attn_mask=ancestor_mask(parent, N))
    finally:
        target.set_attention_impl("dense")
    got = np.asarray(out.logits)
    assert np.isfinite(got).all()
    # reference: every node's path decoded plainly (one right-padded causal batch)
    paths, where = [], []
    for b in range(B):
        par = trees[b][0]
        for i in range(-1, N):
            path, j = [], i
            while j >= 0:
                path.append(trees[b][2][j])
                j = par[j]
            paths.append(prompts[b] + path[::-1])
            where.append((b, i + 1))
    T = max(len(p) for p in paths)
    seqs = np.zeros((len(paths), T), np.int32)
    for r, p in enumerate(paths):
        seqs[r, :len(p)] = p
    ref = target(jnp.asarray(seqs), jnp.broadcast_to(jnp.arange(T)[None], seqs.shape),
                 target.init_cache(len(paths), T)).logits
    for r, (b, i) in enumerate(where):
        np.testing.assert_allclose(got[b, i], np.asarray(ref[r, len(paths[r]) - 1]),
                                   atol=1e-4, rtol=1e-4)


def test_greedy_tree_verify_rule():
    # root children 0 (tok 5), 1 (tok 7); node 0 children 2 (tok 1), 3 (tok 2); node 3 -> 4 (tok 9)
    tokens = jnp.array([[5, 7, 1, 2, 9]])
    parent = jnp.array([[-1, -1, 0, 0, 3]])
    valid = jnp.ones((1, 5), bool)
    am = jnp.array([[5, 2, 0, 2, 0, 4]])  # argmax at block entries root, nodes 0..4
    n, path, nxt = greedy_tree_verify(tokens, parent, valid, am, 3)
    assert n.tolist() == [2] and path[0].tolist() == [0, 3, -1] and nxt.tolist() == [0]
    am = jnp.array([[7, 3, 0, 2, 0, 4]])
    n, path, nxt = greedy_tree_verify(tokens, parent, valid, am, 3)
    assert n.tolist() == [1] and path[0].tolist() == [1, -1, -1] and nxt.tolist() == [0]
    n, path, nxt = greedy_tree_verify(tokens, parent, valid.at[0, 1].set(False), am, 3)
    assert n.tolist() == [0] and nxt.tolist() == [7]


# ----------------------------------------------------------------------------- greedy = plain

BUILDERS = [  # the top-k tree runs under -m long (suite time: the draft model covers top-k
    # trees by default in test_speculative's step-by-step cache check, draft_model-topk-noisy)
    pytest.param("early_exit", dict(k=3, exit_layer=2, tree="topk"), marks=pytest.mark.long),
    ("early_exit", dict(k=3, exit_layer=1, tree="dynamic")),
    # a fixed tree: by default in the sampling tests of test_speculative (exact law) and
    # test_token_recycling; greedy identity here under -m long (suite time)
    pytest.param("draft_model", dict(k=3, layers=2, tree="fixed:0,1,0.0,0.1,1.0,0.0.0"),
                 marks=pytest.mark.long),
    ("layer_skip", dict(k=2, tree="levels:3.4")),
]


@pytest.mark.parametrize("name, kw", BUILDERS, ids=[
    f"{b.values[0]}-{b.values[1]['tree']}" if hasattr(b, "values") else f"{b[0]}-{b[1]['tree']}"
    for b in BUILDERS])
def test_greedy_tree_decoding_equals_plain(target, name, kw):
    ps = mixed_prompts(4, seed=1)
    ref = generate(target, ps, max_new_tokens=14).tokens
    d = drafters.make(name, target, **kw)
    assert d.tree is not None and d.tree.kind != "chain"
    for bs in (1, 4):
        res = generate(target, ps, max_new_tokens=14, drafter=d, batch_size=bs)
        assert res.tokens == ref, f"batch size {bs}"
        for toks, fw, acc in zip(res.tokens, res.target_forwards, res.extra["accepted"]):
            assert fw + acc == len(toks)


def test_tree_decoding_with_tree_attention_op(target):
    """The engine with the model's attention through the tree-attention op (drafting writes
    levels into scratch windows, verification uses the ancestor mask) stays exact."""
    ps = mixed_prompts(3, seed=4)
    ref = generate(target, ps, max_new_tokens=10).tokens
    target.set_attention_impl("xla")
    try:
        d = drafters.make("early_exit", target, k=3, exit_layer=2, tree="dynamic:nodes=8")
        assert generate(target, ps, max_new_tokens=10, drafter=d, batch_size=3).tokens == ref
    finally:
        target.set_attention_impl("dense")
    with pytest.raises(ValueError, match="unknown attention_impl 'flash'"):
        target.set_attention_impl("flash")


def test_tree_with_perfect_drafter_accepts_full_depth(target):
    """A draft model equal to the target must have its best branch accepted to full depth
    every step: this fails if the draft cache is not committed along the accepted path."""
    ps = [mixed_prompts(2, seed=5)[1]]
    d = drafters.make("draft_model", target, k=3, draft_model=target,
                      tree="fixed:0,1,0.0,1.0,0.0.0,1.0.0")
    res = generate(target, ps, max_new_tokens=21, drafter=d)
    assert res.tokens == generate(target, ps, max_new_tokens=21).tokens
    assert res.target_forwards[0] == 1 + 20 // 4  # prefill, then 4 tokens per forward


def test_dynamic_tree_is_ancestor_closed(target):
    """The EAGLE-2 rerank keeps whole paths: check the drafted tree's structure directly."""
    d = drafters.make("early_exit", target, k=4, exit_layer=2, tree="dynamic:")
    ps = mixed_prompts(3, seed=7)
    B, S = 3, 64
    toks = np.zeros((B, 32), np.int32)
    for i, p in enumerate(ps):
        toks[i, :len(p)] = p
    lens = jnp.asarray([len(p) for p in ps], jnp.int32)
    cache = target.init_cache(B, S)
    cache = target(jnp.asarray(toks), jnp.broadcast_to(jnp.arange(32)[None], (B, 32)), cache
                   ).cache.with_lengths(lens - 1)
    seq = jnp.zeros((B, S), jnp.int32).at[:, :32].set(jnp.asarray(toks))
    ctx = StepContext(seq=seq, seq_len=lens, target_cache=cache,
                      keys=jnp.zeros((B, 2), jnp.uint32), live=jnp.ones((B,), bool),
                      temperature=jnp.float32(1), top_k=jnp.int32(0), top_p=jnp.float32(1))
    k = jnp.asarray([4, 2, 3], jnp.int32)
    tree, _, _ = d.propose(None, target, (), ctx, k, True)
    check_tree(tree)
    depth, valid = np.asarray(tree.depth), np.asarray(tree.valid)
    assert tree.num_nodes == 16
    for b in range(B):  # every row's depth limit is respected
        assert valid[b].any() and depth[b][valid[b]].max() <= int(k[b])
        assert (depth[b][~valid[b]] > int(k[b])).all()
    assert depth[1][valid[1]].max() == 2 and valid[1].all()  # 20 candidates within depth 2


# ----------------------------------------------------------------------------- lossless


def _dist(rng, shape):
    x = rng.gamma(0.6, size=shape)
    return x / x.sum(-1, keepdims=True)


@pytest.mark.parametrize("rule", ["wor", "iid", "det"])
def test_multi_draft_rule_exact_by_enumeration(rule):
    """Tree: root -> siblings a, b (drawn from q0 with or without replacement, or fixed
    candidates); a -> c (drawn from q(.|a)). Summing over every draw and accept/reject outcome
    (acceptance probabilities and residuals from specjax.verify.sibling_step, the function the
    verifier uses) gives the law of the first two emitted tokens: it must be p(x1) p(x2|x1)."""
    V = 5
    rng = np.random.default_rng(3)
    p1, p2 = _dist(rng, (V,)), _dist(rng, (V, V))
    q0, q1 = _dist(rng, (V,)), _dist(rng, (V, V))
    p1[2] = 0.0
    p1 /= p1.sum()  # some target mass exactly zero

    def step(r, qv, x):
        acc, rej, nq, ok = sibling_step(jnp.asarray(r[None], jnp.float32),
                                        None if qv is None else jnp.asarray(qv[None],
                                                                            jnp.float32),
                                        jnp.asarray([x]), rule)
        return (float(acc[0]), np.asarray(rej[0], np.float64),
                None if nq is None else np.asarray(nq[0], np.float64))

    want = p1[:, None] * p2
    got = np.zeros((V, V))
    if rule == "det":
        draws = [((1, 3, 4), 1.0)]  # fixed candidates a=1, b=3, c=4
    else:
        draws = []
        for a, b, c in itertools.product(range(V), repeat=3):
            if rule == "wor":
                if a == b or q0[a] == 1:
                    continue
                pr = q0[a] * q0[b] / (1 - q0[a]) * q1[a, c]
            else:
                pr = q0[a] * q0[b] * q1[a, c]
            if pr > 0:
                draws.append(((a, b, c), pr))
    for (a, b, c), pr in draws:
        qa = None if rule == "det" else q0
        acc_a, r1, qb = step(p1, qa, a)
        if rule == "iid":
            qb = q0
        # accept a: at node a try c
        acc_c, r_c, _ = step(p2[a], None if rule == "det" else q1[a], c)
        got[a, c] += pr * acc_a * acc_c  # emits a, c
        got[a] += pr * acc_a * (1 - acc_c) * r_c  # emits a, then y ~ residual
        # reject a: try b
        acc_b, r2, _ = step(r1, qb, b)
        got[b] += pr * (1 - acc_a) * acc_b * p2[b]  # b is a leaf: bonus from p(.|b)
        got += pr * (1 - acc_a) * (1 - acc_b) * r2[:, None] * p2  # y ~ r2, then target
    np.testing.assert_allclose(got, want, atol=1e-6)
