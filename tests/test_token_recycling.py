"""Token Recycling (issue 24): the table against a brute-force recomputation, greedy identity
(chains and trees, batch 1, 3 and 8, mixed lengths, rows ending mid-step), lossless sampling,
and bad options."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from spec_helpers import (chi_square_check, make_target, mixed_prompts, sharp_tiny_pair,
                          three_token_law)
from specjax import drafters, methods
from specjax.engine import generate
from specjax.errors import DrafterError
from specjax.features import FeatureSpec
from specjax.drafters.token_recycling import record
from specjax.tree import static_topology
from specjax.sampling import SamplingParams


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(8, seed=4)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return generate(target, prompts, max_new_tokens=14, batch_size=8).tokens


def padded(prompts):
    """``(tokens int32[B, P], lengths int32[B])``: the prompts zero-padded to the longest."""
    toks = np.zeros((len(prompts), max(len(p) for p in prompts)), np.int32)
    for i, p in enumerate(prompts):
        toks[i, :len(p)] = p
    return toks, np.array([len(p) for p in prompts], np.int32)


def test_record_keeps_the_latest_occurrence():
    table = jnp.zeros((2, 6, 2), jnp.int32)
    tokens = jnp.asarray([[3, 1, 3, 5], [2, 2, 0, 4]])
    top = jnp.arange(16, dtype=jnp.int32).reshape(2, 4, 2) + 1
    valid = jnp.asarray([[True, True, True, True], [True, True, True, False]])
    t = np.asarray(record(table, tokens, top, valid))
    # row 0: token 3 at 0 and 2 -> entry 2 wins; row 1: token 2 at 0 and 1 -> entry 1; token 4
    # is not valid, never written
    assert t[0, 3].tolist() == [5, 6] and t[0, 1].tolist() == [3, 4] and t[0, 5].tolist() == [7, 8]
    assert t[1, 2].tolist() == [11, 12] and t[1, 0].tolist() == [13, 14]
    assert t[1, 4].tolist() == [0, 0] and t[0, 0].tolist() == [0, 0]


def test_topology():
    # levels:2.1 -> nodes 0, 1 under the root, node 2 under node 0
    from specjax.tree import parse_tree

    assert static_topology(parse_tree("levels:2.1", k=2), 2) == (
        (-1, -1, 0), (0, 1, 0), (1, 1, 2))
    assert static_topology(None, 3) == ((-1, 0, 1), (0, 0, 0), (1, 2, 3))


def test_table_is_the_targets_top_ids(target, prompts):
    """After the prefill, table[b, t] = the target's top ids after the latest occurrence of t
    in row b's prompt (brute force from a plain forward)."""
    d = drafters.make("token_recycling", target, width=3)
    assert d.features == FeatureSpec(top_ids=3)
    toks, lens = padded(prompts[:3])
    P = toks.shape[1]
    pos = jnp.broadcast_to(jnp.arange(P)[None], (3, P))
    o = target(jnp.asarray(toks), pos, target.init_cache(3, P))
    from specjax.features import from_output

    table = np.asarray(d.init(None, target, jnp.asarray(toks), jnp.asarray(lens), 64,
                              from_output(d.features, o)))
    logits = np.asarray(o.logits)
    for b in range(3):
        latest = {}
        for t in range(lens[b]):
            latest[toks[b, t]] = t
        for tok in range(target.cfg.vocab_size):
            if tok in latest:
                want = np.argsort(-logits[b, latest[tok]], kind="stable")[:3]
                assert table[b, tok].tolist() == want.tolist()
            else:
                assert table[b, tok].tolist() == [0, 1, 2]


def test_from_text_table_is_the_texts_successors(target, prompts):
    """``from_text``: table[b, t] = the token after the latest occurrence of t in row b's
    prompt (not its last token), no features asked of the target; after decoding, the
    successors along the committed output too."""
    from specjax.drafters.token_recycling import TokenRecyclingDrafter

    V = target.cfg.vocab_size
    d = TokenRecyclingDrafter(max_k=4, width=1, vocab_size=V, from_text=True)
    assert d.features == FeatureSpec()
    toks, lens = padded(prompts[:3])
    table = np.asarray(d.init(None, target, jnp.asarray(toks), jnp.asarray(lens), 64, None))
    for b in range(3):
        want = {}
        for t in range(lens[b] - 1):
            want[toks[b, t]] = toks[b, t + 1]
        for tok in range(V):
            assert table[b, tok, 0] == want.get(tok, 0), (b, tok)
    # a step: row 0 committed its root 4 (the prefill's token) and two nodes, 5 and 6, and
    # 7 is pending; row 1's step accepted 2 then EOS 3 (the cut: seq ends there, the cache
    # grew by 3 all the same); row 2 is finished (nothing recorded)
    import types

    from specjax.drafters.base import StepContext

    seq = jnp.asarray([[1, 2, 3, 4, 5, 6, 7], [8, 9, 1, 2, 3, 0, 0], [1, 5, 0, 0, 0, 0, 0]])
    ctx = StepContext(seq=seq, seq_len=jnp.asarray([7, 5, 2]),
                      target_cache=types.SimpleNamespace(lengths=jnp.asarray([6, 5, 4])),
                      keys=None, live=jnp.asarray([True, True, False]), temperature=None,
                      top_k=None, top_p=None)
    before = d.init(None, target, jnp.asarray([[1, 2, 3], [8, 9, 0], [1, 0, 0]]),
                    jnp.asarray([3, 2, 1]), 64, None)
    after = np.asarray(d.update(None, before, ctx, jnp.asarray([2, 2, 0]), None,
                                jnp.zeros((3, 3), jnp.int32), None))[..., 0]
    want = [{1: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7}, {8: 9, 9: 1, 1: 2, 2: 3}, {}]
    for b in range(3):
        assert {t: int(after[b, t]) for t in range(V) if after[b, t] != 0} == want[b], b
    with pytest.raises(DrafterError, match="from_text keeps one successor per token"):
        TokenRecyclingDrafter(max_k=4, width=2, vocab_size=V, from_text=True)


def test_prompt_text_fills_the_prompt_from_its_text(target, prompts):
    """``prompt=text``: the prefill asks for no features (so it computes the LM head at the
    last position alone); table[b, t] = [the token after the latest occurrence of t in row
    b's prompt, then the junk columns]; the verify passes still record the top ids."""
    from specjax.drafters.base import drafter_prefill_features

    d = drafters.make("token_recycling", target, width=3, prompt="text")
    assert d.features == FeatureSpec(top_ids=3)
    assert drafter_prefill_features(d) == FeatureSpec()
    assert drafter_prefill_features(drafters.make("token_recycling", target, width=3)) == \
        FeatureSpec(top_ids=3)
    toks, lens = padded(prompts[:3])
    table = np.asarray(d.init(None, target, jnp.asarray(toks), jnp.asarray(lens), 64, None))
    for b in range(3):
        want = {int(toks[b, t]): int(toks[b, t + 1]) for t in range(lens[b] - 1)}
        for tok in range(target.cfg.vocab_size):
            assert table[b, tok].tolist() == [want.get(tok, 0), 1, 2], (b, tok)
    with pytest.raises(DrafterError, match="prompt must be one of"):
        drafters.make("token_recycling", target, prompt="logits")


@pytest.mark.parametrize("args", [
    # the default tree drafted whole every step (the default policy's choices depend on this
    # machine's cost curve; test_default_backs_off pins them with given curves)
    pytest.param({"policy": "fixed"}, id="default-tree"),
    pytest.param({"prompt": "top_ids", "policy": "fixed"}, id="prompt-top-ids"),
    pytest.param({"record": "tree", "memory": "call", "policy": "fixed"}, id="record-tree"),
    pytest.param({"k": "3", "tree": "chain", "policy": "fixed"}, id="chain-3",
                 marks=pytest.mark.long),  # suite time
    pytest.param({"tree": "fixed:0,1,2,0.0,0.1,1.0,0.0.0", "k": "3", "policy": "fixed"},
                 id="fixed-tree",
                 marks=pytest.mark.long)])  # suite time: the default tree runs
def test_greedy_identity(target, prompts, plain, args):
    m = methods.build("token_recycling", target, args)
    for B in (1, 3, 8):
        r = generate(target, prompts[:B] if B < 8 else prompts, max_new_tokens=14,
                     drafter=m.drafter, policy=m.policy, batch_size=B)
        assert r.tokens == plain[:B], (args, B)
    # the recycled candidates are accepted at all (the tiny model repeats itself)
    assert sum(r.extra["accepted"]) > 0


def test_tree_step_cost_prices_each_depth_by_its_nodes():
    """A policy's ``k`` cuts a static tree at depth ``k``: the step that drafts the first
    ``d`` levels of ``levels:4.3.2.1`` (4, 7, 9, 10 nodes) costs the curve at the block
    the engine runs for those nodes (blocks of 1, 2, 4, 8, 11 tokens), over a plain step."""
    from specjax.policies.adaptive import tree_step_cost
    from specjax.tree import parse_tree

    curve = tuple(1.0 + 0.1 * t for t in range(12))  # cost(T) = 0.9 + 0.1 T
    got = tree_step_cost(curve, parse_tree("levels:4.3.2.1", k=4))
    # 4 nodes: a block of 8 (cost 1.7); 7: 8; 9 and 10: 11 (2.0)
    assert got == pytest.approx((1.0, 1.7, 1.7, 2.0, 2.0))
    # a drafting overhead and a cost per node are added to the steps that draft
    assert tree_step_cost(curve, parse_tree("levels:4.3.2.1", k=4), 0.01, 0.1) == \
        pytest.approx((1.0, 1.84, 1.87, 2.19, 2.2))
    # a model-based drafter runs one draft step per level: its draft cost counts per depth
    assert tree_step_cost(curve, parse_tree("levels:4.3.2.1", k=4), 0.01, 0.1,
                          per_node=False) == pytest.approx((1.0, 1.81, 1.82, 2.13, 2.14))
    # the default tree levels:3.2.2.1 (3, 5, 7, 8 nodes): its first level fits a block of 4
    assert tree_step_cost(curve, parse_tree("levels:3.2.2.1", k=4)) == \
        pytest.approx((1.0, 1.3, 1.7, 1.7, 1.8))
    # a 2-node chain: blocks of 2 and 3 (its last bucket is its whole tree)
    assert tree_step_cost(curve, parse_tree("levels:1.1", k=2)) == pytest.approx((1.0, 1.1, 1.2))


def test_default_backs_off_where_the_tree_does_not_pay(target, prompts, plain):
    """The default (``adaptive``, each depth priced by its nodes): under a curve where no
    depth pays the run decodes plainly; under a flat one it drafts the whole tree; both
    give plain decoding's tokens, and a run that mixes idle steps (``skip``, which records
    the committed token) with drafting steps too."""
    m = methods.build("token_recycling", target, {})
    assert m.policy.name == "adaptive" and len(m.policy.step_cost) == m.drafter.max_k + 1
    dear = ",".join(["1"] + ["4"] * 15)
    m = methods.build("token_recycling", target, {"cost": dear})
    assert m.policy.step_cost == (1.0, 4.0, 4.0, 4.0, 4.0)
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain and sum(r.extra["drafted"]) == 0
    flat = ",".join(["1"] * 16)
    m = methods.build("token_recycling", target, {"cost": flat})
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain and sum(r.extra["accepted"]) > 0
    # a curve where the first level (3 nodes, a 4-token block) pays only while drafts are
    # accepted: rows stop and probe again, idle steps between
    mixed = ",".join(["1", "1.05", "1.1", "1.3"] + ["3"] * 12)
    for B in (1, 3):
        m = methods.build("token_recycling", target, {"cost": mixed, "idle_decay": "0.8"})
        r = generate(target, prompts[:B], max_new_tokens=14, drafter=m.drafter,
                     policy=m.policy, batch_size=B)
        assert r.tokens == plain[:B], B
        assert sum(r.extra["drafted"]) > 0 and sum(r.extra["idle_steps"]) > 0, B


def test_skip_records_the_committed_token(target):
    """An idle step's ``skip``: table[root] = the idle forward's top ids at the root (the
    target's table), or root -> the new token (``from_text``)."""
    import types

    from specjax.drafters.base import StepContext
    from specjax.drafters.token_recycling import TokenRecyclingDrafter
    from specjax.features import Features

    V = target.cfg.vocab_size
    seq = jnp.asarray([[1, 2, 3, 4, 9], [5, 6, 7, 8, 0]])
    ctx = StepContext(seq=seq, seq_len=jnp.asarray([5, 4]),
                      target_cache=types.SimpleNamespace(lengths=jnp.asarray([4, 3])),
                      keys=None, live=jnp.asarray([True, True]), temperature=None,
                      top_k=None, top_p=None)
    d = TokenRecyclingDrafter(max_k=3, width=2, vocab_size=V)
    table = jnp.zeros((2, V, 2), jnp.int32)
    top = jnp.asarray([[[11, 12]], [[13, 14]]], jnp.int32)  # the root's top ids
    got = np.asarray(d.skip(None, target, table, ctx, Features(top_ids=top)))
    # roots: row 0's token at position 3 (4), row 1's at 2 (7)
    assert got[0, 4].tolist() == [11, 12] and got[1, 7].tolist() == [13, 14]
    assert int(np.count_nonzero(got)) == 4
    t = TokenRecyclingDrafter(max_k=3, width=1, vocab_size=V, from_text=True)
    got = np.asarray(t.skip(None, target, jnp.zeros((2, V, 1), jnp.int32), ctx, None))[..., 0]
    # the pair into the root and the root -> the new pending token
    assert {k: int(got[0, k]) for k in range(V) if got[0, k]} == {3: 4, 4: 9}
    assert {k: int(got[1, k]) for k in range(V) if got[1, k]} == {6: 7, 7: 8}


def test_record_tree_recycles_the_rejected_nodes(target):
    """``record="tree"``: a verify pass records every verified node's top ids, the root's and
    the accepted nodes' last (they win over a rejected node holding the same token);
    ``record="path"`` the root and the accepted nodes only."""
    import types

    from specjax.drafters.base import StepContext
    from specjax.drafters.token_recycling import TokenRecyclingDrafter
    from specjax.features import Features
    from specjax.tree import DraftTree, parse_tree

    V = target.cfg.vocab_size
    # the root 4 (position 3) and node 0 (5) accepted, 9 pending; node 1 (6) and node 2 (4,
    # under node 0) rejected
    ctx = StepContext(seq=jnp.asarray([[1, 2, 3, 4, 5, 9]]), seq_len=jnp.asarray([6]),
                      target_cache=types.SimpleNamespace(lengths=jnp.asarray([5])),
                      keys=None, live=jnp.asarray([True]), temperature=None, top_k=None,
                      top_p=None)
    tree = DraftTree(tokens=jnp.asarray([[5, 6, 4]]), parent=jnp.asarray([[-1, -1, 0]]),
                     depth=jnp.asarray([[1, 1, 2]]), valid=jnp.asarray([[True, True, True]]))
    path = jnp.asarray([[0, -1]])
    feats = jnp.asarray([[[11, 12], [13, 14], [15, 16], [17, 18]]], jnp.int32)  # per block slot
    along = Features(top_ids=jnp.asarray([[[11, 12], [13, 14], [0, 0]]], jnp.int32))
    table = jnp.zeros((1, V, 2), jnp.int32)
    got = {}
    for rec in ("path", "tree"):
        d = TokenRecyclingDrafter(max_k=2, width=2, vocab_size=V,
                                  tree=parse_tree("levels:2.1", k=2), record=rec)
        assert d.tree_features is (rec == "tree")
        out = np.asarray(d.update(None, table, ctx, jnp.asarray([1]), tree, path, along,
                                  tree_features=Features(top_ids=feats) if d.tree_features
                                  else None))[0]
        got[rec] = {t: out[t].tolist() for t in range(V) if out[t].any()}
    assert got["path"] == {4: [11, 12], 5: [13, 14]}
    assert got["tree"] == {4: [11, 12], 5: [13, 14], 6: [15, 16]}
    with pytest.raises(DrafterError, match="record must be one of"):
        drafters.make("token_recycling", target, record="all")


def test_rows_ending_mid_step(target, prompts, plain):
    m = methods.build("token_recycling", target, {})
    for B, n in ((8, 5), (8, 11)):
        r = generate(target, prompts, max_new_tokens=n, drafter=m.drafter, batch_size=B)
        assert r.tokens == [t[:n] for t in plain]


@pytest.mark.parametrize("tree", ["chain", "fixed:0,1,0.0"])
def test_sampling_matches_the_target_distribution(tree):
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3])
    n = 5000
    d = drafters.make("token_recycling", target, k=2, width=2, tree=tree)
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=8))
    assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_default_tree(target):
    """The default tree is ``levels:3.2.2.1`` cut at ``k`` (one node per level past the
    fourth) and clipped to the table's width."""
    from specjax.tree import parse_tree

    def parents(**kw):
        return drafters.make("token_recycling", target, **kw).tree.parents

    assert parents() == parse_tree("levels:3.2.2.1", k=4).parents
    assert parents(k=2) == parse_tree("levels:3.2", k=2).parents
    assert parents(k=6) == parse_tree("levels:3.2.2.1.1.1", k=6).parents
    assert parents(width=2) == parse_tree("levels:2.2.2.1", k=4).parents


def test_text_fill_and_merge_rows():
    """A hot prompt entry: the successor, then the carried candidates without it; a batch's
    tables merge into one, each entry from the first row that changed it."""
    from specjax.drafters.token_recycling import merge_rows, text_fill

    rows = jnp.asarray([[5, 6, 7], [5, 6, 7], [1, 2, 3]], jnp.int32)
    got = np.asarray(text_fill(rows, jnp.asarray([6, 9, 3], jnp.int32)))
    assert got.tolist() == [[6, 5, 7], [9, 5, 6], [3, 1, 2]]
    start = jnp.zeros((4, 2), jnp.int32)
    tables = np.zeros((3, 4, 2), np.int32)
    tables[0, 1] = [1, 1]
    tables[1, 1] = [2, 2]
    tables[1, 2] = [3, 3]
    tables[2, 3] = [4, 4]
    got = np.asarray(merge_rows(start, jnp.asarray(tables)))
    assert got.tolist() == [[0, 0], [1, 1], [3, 3], [4, 4]]


def test_hot_start_carries_the_table(target, prompts, plain):
    """``memory=keep``: the table one call leaves (rows merged) is where the next call's rows
    start (a prompt token's entry: its successor, then the carried candidates), outputs stay
    plain decoding's; ``relearn`` rebuilds the same table from the prompts and outputs;
    ``memory=call`` forgets it at the next call; the bench's snapshot / restore round-trips."""
    from specjax.features import Features

    m = methods.build("token_recycling", target, {"policy": "fixed", "memory": "keep"})
    d = m.drafter
    assert d.learns_across_calls() and d.describe_extra() == {"memory": "keep"}
    assert methods.describe(d, m.policy)["memory"] == "keep"
    assert "memory" not in methods.describe(*methods.build("token_recycling", target, {})[:2])
    r = generate(target, prompts[:3], max_new_tokens=14, drafter=d, policy=m.policy,
                 batch_size=3)
    assert r.tokens == plain[:3]
    carried = d.memory.table.copy()
    assert d.memory.batches == 1 and carried.shape == (target.cfg.vocab_size, 8)
    # the same table from the prompts and outputs (teacher-forced top ids)
    fresh = drafters.make("token_recycling", target, memory="keep", prompt="text")
    fresh.relearn(prompts[:3], r.tokens)
    assert fresh.memory.batches == 1
    assert np.mean(fresh.memory.table == carried) > 0.999
    assert (fresh.memory.table[:, 0] == carried[:, 0]).all()
    # the next batch starts from it
    toks, lens = padded(prompts[3:5])
    table = np.asarray(d.init(d.params(), target, jnp.asarray(toks), jnp.asarray(lens), 64,
                              Features()))
    for b in range(2):
        succ = {int(toks[b, t]): int(toks[b, t + 1]) for t in range(lens[b] - 1)}
        for tok in range(target.cfg.vocab_size):
            want = carried[tok].tolist()
            if tok in succ:
                rest = [x for x in want if x != succ[tok]]
                want = ([succ[tok]] + rest)[:8]
            assert table[b, tok].tolist() == want, (b, tok)
    snap = d.snapshot()
    r2 = generate(target, prompts[3:], max_new_tokens=14, drafter=d, policy=m.policy,
                  batch_size=2)  # three batches, the last padded
    assert r2.tokens == plain[3:] and d.memory.batches == 4
    d.restore(snap)
    assert (d.memory.table == carried).all() and d.memory.batches == 1
    c = methods.build("token_recycling", target, {"policy": "fixed", "memory": "call"})
    assert not c.drafter.learns_across_calls() and c.drafter.describe_extra() == {}
    r3 = generate(target, prompts, max_new_tokens=14, drafter=c.drafter, policy=c.policy,
                  batch_size=3)
    assert r3.tokens == plain and c.drafter.memory.batches == 3
    c.drafter.begin_call()
    assert c.drafter.memory.table is None and c.drafter.memory.batches == 0


def test_hot_start_file(target, prompts, plain, tmp_path):
    """``memory=FILE.npz``: saved after every batch, loaded by the next build (the same
    table, the same outputs); another width, a corrupt file, a file that is not a table
    and a path without ``.npz`` are refused, naming the file."""
    path = tmp_path / "tr.npz"
    m = methods.build("token_recycling", target, {"policy": "fixed", "memory": str(path)})
    assert m.drafter.describe_extra() == {"memory": "file"}
    r = generate(target, prompts[:4], max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=2)
    assert r.tokens == plain[:4] and path.exists()
    again = methods.build("token_recycling", target, {"policy": "fixed", "memory": str(path)})
    assert (again.drafter.memory.table == m.drafter.memory.table).all()
    assert again.drafter.memory.batches == 2
    outs = []
    for d in (m, again):
        snap = d.drafter.snapshot()
        outs.append(generate(target, prompts[4:], max_new_tokens=14, drafter=d.drafter,
                             policy=d.policy, batch_size=4))
        d.drafter.restore(snap)
    assert outs[0].tokens == outs[1].tokens == plain[4:]
    assert outs[0].extra["accepted"] == outs[1].extra["accepted"]
    with pytest.raises(DrafterError, match="tr.npz was written for another configuration: "
                                           "width 8 in the file, 4 here"):
        drafters.make("token_recycling", target, width=4, memory=str(path))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DrafterError, match="bad.npz is not a readable table file"):
        drafters.make("token_recycling", target, memory=str(bad))
    import json

    V = target.cfg.vocab_size
    header = np.frombuffer(json.dumps({"format": "specjax-recycling-table", "version": 1,
                                       "width": 8, "vocab_size": V}).encode(), np.uint8)
    np.savez(bad, header=header, table=np.full((V, 8), V, np.int32))
    with pytest.raises(DrafterError, match="bad.npz: token ids outside"):
        drafters.make("token_recycling", target, memory=str(bad))
    np.savez(bad, header=header, table=np.zeros((V, 7), np.int32))
    with pytest.raises(DrafterError, match="truncated or corrupt"):
        drafters.make("token_recycling", target, memory=str(bad))
    np.savez(bad, header=np.frombuffer(b'{"format": "specjax-stand-tables"}', np.uint8),
             table=np.zeros((V, 8), np.int32))
    with pytest.raises(DrafterError, match="not a specjax-recycling-table file"):
        drafters.make("token_recycling", target, memory=str(bad))
    with pytest.raises(DrafterError, match="memory must be none, call, keep, auto or a file path"):
        drafters.make("token_recycling", target, memory="sometimes")


def test_bad_options(target):
    with pytest.raises(DrafterError, match="width must be an integer >= 1"):
        drafters.make("token_recycling", target, width=0)
    assert drafters.make("token_recycling", target, width=2).tree.parents == (-1, -1, 0, 1, 2, 3, 4)
    with pytest.raises(DrafterError, match="3 children, more than the table's width 2"):
        drafters.make("token_recycling", target, width=2, tree="levels:3.1", k=2)
    with pytest.raises(DrafterError, match="static trees"):
        drafters.make("token_recycling", target, tree="dynamic:width=2,nodes=4", k=2)
    with pytest.raises(DrafterError, match="top_ids must be an integer >= 0"):
        FeatureSpec(top_ids=-1)


def test_successor_table():
    """Each token's most frequent successors where the successor is kept (ties to the
    smaller id), junk past its distinct successors; ids outside the vocabulary refused."""
    from specjax.drafters.token_recycling import successor_table

    docs = [([1, 2, 3, 1, 2, 4], [1] * 6), ([1, 3, 5, 3], [0, 1, 0, 1]),
            ([4, 5, 4, 5, 4, 1, 4, 0, 4, 2], [1] * 10)]
    # kept pairs: 1->2 x2, 2->3, 3->1, 2->4 (doc 1); 1->3, 5->3 (doc 2: 3->5 is not kept);
    # 4->5 x2, 5->4 x2, 4->1, 1->4, 4->0, 0->4, 4->2 (doc 3)
    t = successor_table(docs, 6, 3)
    assert t.dtype == np.int32 and t.shape == (6, 3)
    assert t[1].tolist() == [2, 3, 4]  # the most frequent first, then ties by id
    assert t[5].tolist() == [4, 3, 2]  # 4 (twice) before 3 (once); junk in the last column
    assert t[3].tolist() == [1, 1, 2]  # the pair 3->5 was not kept
    assert t[4].tolist() == [5, 0, 1]  # four successors, the width keeps three
    assert t[2].tolist() == [3, 4, 2] and t[0].tolist() == [4, 1, 2]
    assert (successor_table([], 6, 3) == np.arange(3)).all()
    with pytest.raises(DrafterError, match=r"token ids outside \[0, 6\)"):
        successor_table([([0, 6], [1, 1])], 6, 3)
    with pytest.raises(DrafterError, match="document 0 has 3 tokens but 2 keep flags"):
        successor_table([([0, 1, 2], [1, 1])], 6, 3)


def test_prior_table(target, prompts, plain, tmp_path):
    """``prior=FILE.npz``: every row starts from the file's table (greedy: the same tokens,
    more accepted than from junk); ``memory=call`` starts each call from it again; another
    width is cut or padded with junk; a bad prior is refused naming it. A target without a
    shipped table (the tiny one has no tokenizer) starts from junk under ``shipped``."""
    from specjax.drafters.token_recycling import FORMAT, VERSION, successor_table, write_table

    V = target.cfg.vocab_size
    table = successor_table([(p + o, [0] * len(p) + [1] * len(o)) for p, o in zip(prompts, plain)],
                            V, 8)
    path = tmp_path / "prior.npz"
    header = {"format": FORMAT, "version": VERSION, "width": 8, "vocab_size": V,
              "tokenizer": None}
    write_table(path, header, table, compressed=True)
    runs = {}
    for name, prior in (("prior", str(path)), ("cold", "shipped")):
        m = methods.build("token_recycling", target, {"policy": "fixed", "prior": prior})
        assert m.drafter.describe_extra() == ({"prior": str(path)} if name == "prior" else {})
        runs[name] = generate(target, prompts, max_new_tokens=14, drafter=m.drafter,
                              policy=m.policy, batch_size=4)
        assert runs[name].tokens == plain
    assert sum(runs["prior"].extra["accepted"]) > sum(runs["cold"].extra["accepted"])
    assert (m.drafter.prior is None) and (m.drafter.prior_name is None)
    c = methods.build("token_recycling", target, {"policy": "fixed", "prior": str(path),
                                                  "memory": "call"})
    assert generate(target, prompts, max_new_tokens=14, drafter=c.drafter, policy=c.policy,
                    batch_size=4).tokens == plain
    seen = np.zeros(V, bool)
    for p, o in zip(prompts, plain):
        seen[p + o] = True
    carried = c.drafter.memory.table  # from the prior: the tokens no row saw keep its entries
    assert (carried[~seen] == table[~seen]).all() and (carried[seen] != table[seen]).any()
    d = drafters.make("token_recycling", target, prior=str(path), memory="call")
    assert (np.asarray(d.params()) == table).all()
    d.memory.table = np.zeros_like(table)  # a carried table, forgotten at the next call
    d.begin_call()
    assert (np.asarray(d.params()) == table).all()
    # one memory shared by a drafter with the prior and one without: while nothing is
    # carried each starts from its own (the prior, junk); a carried table is the start of both
    shared = d.memory
    junk = dataclasses.replace(d, prior=None, prior_name=None)
    assert junk.memory is shared and (np.asarray(d.params()) == table).all()
    assert (np.asarray(junk.params()) == np.arange(8)).all()
    shared.table = np.ones_like(table)
    assert (np.asarray(d.params()) == 1).all() and (np.asarray(junk.params()) == 1).all()
    shared.table = None
    assert (drafters.make("token_recycling", target, prior=str(path), width=4,
                          tree="levels:2.1").prior == table[:, :4]).all()
    wide = drafters.make("token_recycling", target, prior=str(path), width=12).prior
    assert (wide[:, :8] == table).all() and (wide[:, 8:] == np.arange(8, 12)).all()
    assert drafters.make("token_recycling", target, prior="none").params() is None
    # memory=auto (the method's default): none from a prior, call from junk
    assert drafters.make("token_recycling", target, prior=str(path), memory="auto").memory is None
    assert drafters.make("token_recycling", target, memory="auto").memory.per_call
    assert methods.build("token_recycling", target, {}).drafter.memory.per_call
    with pytest.raises(DrafterError, match="prior must be shipped, none or a file path"):
        drafters.make("token_recycling", target, prior="table.txt")
    with pytest.raises(DrafterError, match="prior .*missing.npz does not exist"):
        drafters.make("token_recycling", target, prior=str(tmp_path / "missing.npz"))
    write_table(path, dict(header, vocab_size=V + 1), np.zeros((V + 1, 8), np.int32))
    with pytest.raises(DrafterError, match="prior.npz was written for another configuration: "
                                           f"vocab_size {V + 1} in the file, {V} here"):
        drafters.make("token_recycling", target, prior=str(path))


@pytest.mark.real_model
def test_shipped_prior_for_smollm2(smollm2):
    """SmolLM2 finds the table shipped for it (bound to its vocabulary and tokenizer): most
    frequent successors in its own answers, the first column its greedy choice."""
    d = drafters.make("token_recycling", smollm2)
    assert d.prior_name == "shipped:smollm2-135m.token_recycling.npz"
    assert d.prior.shape == (smollm2.model.cfg.vocab_size, 8)
    filled = np.any(d.prior != np.arange(8), axis=1)
    assert filled.sum() > 10_000
    tok = smollm2.tokenizer
    ids = tok.encode_chat("Name the capital of France.")
    out = generate(smollm2.model, [ids], max_new_tokens=32, batch_size=1,
                   eos_ids=tok.eos_ids).tokens[0]
    # the prior's entries for the answer's tokens: many hold the greedy successor (junk none)
    hits = sum(int(b in d.prior[a]) for a, b in zip(out[:-1], out[1:]))
    assert hits >= (len(out) - 1) // 3, (out, hits)


def test_replay_of_a_prior_that_learns_from_answers():
    """scripts/replay_token_recycling.py's ``prior_learn``: the answers counted into the
    prior's successor counts (weight W) draft the next question's repeat; weight 0 is the
    plain ``prior`` replay from the same counts' table."""
    from script_helpers import load_script

    from specjax.drafters.token_recycling import successor_table
    from specjax.tree import parse_tree, static_topology

    rp = load_script("replay_token_recycling")
    V, W = 20, 4
    parents, ranks, depth = static_topology(parse_tree("levels:3.2.2.1", k=16), 4)
    junk_top = lambda n: np.tile(np.array([19, 18, 17, 16], np.int32), (n, 1))  # noqa: E731
    order = [("a", "x", [5, 6, 7, 8, 9]), ("b", "x", [5, 6, 7, 8])]
    tops = {pid: ([1, 2], junk_top(2 + len(ans))) for pid, _, ans in order}
    docs = [([3, 4, 3, 4, 11], [True] * 5)]
    counts = {3: {4: 2.0}, 4: {3: 1.0, 11: 1.0}}
    table = successor_table(docs, V, W)
    for cap in (1, None):
        assert rp.replay_learning(order, tops, parents, ranks, depth, cap, W, V, counts,
                                  0.0) == rp.replay(order, tops, parents, ranks, depth, "prior",
                                                    cap, W, V, table)
    cold = rp.replay_learning(order, tops, parents, ranks, depth, None, W, V, counts, 0.0)
    learnt = rp.replay_learning(order, tops, parents, ranks, depth, None, W, V, counts, 1.0)
    assert cold["b"][2] == 0 and learnt["b"] == ("x", 1, 3, 1)  # 5 -> 6 -> 7 -> 8 in a step
    assert learnt["a"] == cold["a"]  # the first question learns only after it


def test_shipped_file_lookup(tmp_path):
    """The shipped-data lookup shared by token_recycling and sssd: the file built for the
    vocabulary and tokenizer, another model's skipped, an unreadable one skipped with a
    warning naming it (not silently), nothing without a tokenizer digest."""
    import json

    from specjax.drafters._documents import shipped_file

    def write(name, vocab, tok):
        np.savez(tmp_path / name, header=np.frombuffer(json.dumps(
            {"vocab_size": vocab, "tokenizer": tok}).encode(), np.uint8))

    write("a.token_recycling.npz", 96, "other")
    write("c.token_recycling.npz", 96, "abc")
    (tmp_path / "b.token_recycling.npz").write_bytes(b"not a zip file")
    with pytest.warns(UserWarning, match="b.token_recycling.npz cannot be read"):
        got = shipped_file(tmp_path, ".token_recycling.npz", "header", 96, "abc", "table")
    assert got == tmp_path / "c.token_recycling.npz"
    with pytest.warns(UserWarning):
        assert shipped_file(tmp_path, ".token_recycling.npz", "header", 97, "abc",
                            "table") is None
    assert shipped_file(tmp_path, ".token_recycling.npz", "header", 96, None, "table") is None
    assert shipped_file(tmp_path / "missing", ".npz", "header", 96, "abc", "table") is None
