"""STAND: the n-gram tables by hand, greedy identity (chains, trees, shared and per-row
tables, batch 1/3/8), lossless sampling by enumeration, tables carried across batches and
through a file, and bad options and files."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spec_helpers import (chi_square_check, make_target, mixed_prompts, sharp_tiny_pair,
                          three_token_law)
from specjax import drafters, methods
from specjax.drafters.stand import (StandMemory, _latest_per_key, empty_tables, lookup, merge,
                                    record, reversed_context, table_bytes)
from specjax.engine import generate
from specjax.errors import DrafterError
from specjax.features import FeatureSpec, from_output
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


# ----------------------------------------------------------------------------- tables


def test_merge_is_a_running_mean_over_the_union():
    old_ids = jnp.array([[5, 7, 0]])
    old_w = jnp.array([[0.6, 0.2, 0.0]])  # the third slot is empty
    new_ids = jnp.array([[7, 9, 5]])
    new_w = jnp.array([[0.6, 0.3, 0.1]])
    ids, w = merge(old_ids, old_w, new_ids, new_w, jnp.array([0.5]))
    # 5: 0.3 + 0.05, 7: 0.1 + 0.3, 9: 0.15 -> kept by weight, best first
    np.testing.assert_array_equal(ids[0], [7, 5, 9])
    np.testing.assert_allclose(w[0], [0.4, 0.35, 0.15], atol=1e-6)
    ids, w = merge(old_ids, old_w, new_ids, new_w, jnp.array([1.0]))  # a fresh entry
    np.testing.assert_array_equal(ids[0], [7, 9, 5])
    np.testing.assert_allclose(w[0], [0.6, 0.3, 0.1], atol=1e-6)


def test_latest_per_key():
    key = jnp.array([4, 2, 4, 9, 2, 4])
    valid = jnp.array([True, True, True, True, True, False])
    np.testing.assert_array_equal(_latest_per_key(key, valid),
                                  [False, False, True, True, True, False])


def test_reversed_context():
    seq = jnp.array([[10, 11, 12, 13]])
    rev = reversed_context(seq, jnp.array([[0, 2, 3]]), 3)
    np.testing.assert_array_equal(rev[0], [[10, -1, -1], [12, 11, 10], [13, 12, 11]])


def test_record_then_lookup_backs_off_to_the_longest_stored_context():
    t = empty_tables(1, 3, 64, 2)
    g = jnp.zeros((1,), jnp.int32)
    seq = jnp.array([[1, 2, 3, 1, 2]])
    rev = reversed_context(seq, jnp.arange(5)[None], 3)
    nxt = jnp.array([[[2, 8], [3, 8], [1, 8], [2, 8], [4, 8]]])  # what followed, + a runner-up
    probs = jnp.full((1, 5, 2), 0.1).at[:, :, 0].set(0.9)
    first = jnp.arange(5)[None] < 3
    t = record(t, g, rev, nxt, probs, first, window=4)  # positions 0..2, then 3..4
    t = record(t, g, rev, nxt, probs, ~first, window=4)

    def look(*ctx):
        ids, w, found = lookup(t, g, jnp.array([[list(ctx)]]))
        return bool(found[0, 0]), {i: round(x, 6) for i, x in zip(
            np.asarray(ids[0, 0]).tolist(), np.asarray(w[0, 0]).tolist()) if x > 0}

    assert look(2, 1, 3) == (True, {4: 0.9, 8: 0.1})  # "3 1 2" seen once (order 3)
    # "1 2" seen twice: the mean of {3: .9, 8: .1} and {4: .9, 8: .1}, its top 2 kept
    assert look(2, 1, 5) == (True, {3: 0.45, 4: 0.45})  # "5 1 2" unseen: backs off to order 2
    assert look(2, 7, 7) == (True, {3: 0.45, 4: 0.45})  # order 1: "2"
    assert look(1, 3, 2) == (True, {2: 0.9, 8: 0.1})
    assert look(7, -1, -1) == (False, {})  # never seen
    assert look(9, 9, 9) == (False, {})


def test_lookup_prefers_the_longest_order():
    t = empty_tables(1, 2, 32, 1)
    g = jnp.zeros((1,), jnp.int32)
    # "5 6 -> 7" and "4 6 -> 9": order 1 ("6") holds the later (mean), order 2 keeps each
    seq = jnp.array([[5, 6, 4, 6]])
    rev = reversed_context(seq, jnp.arange(4)[None], 2)
    ids = jnp.array([[[6], [7], [6], [9]]])
    t = record(t, g, rev, ids, jnp.ones((1, 4, 1)), jnp.ones((1, 4), bool), window=1)
    got, _, _ = lookup(t, g, jnp.array([[[6, 5], [6, 4], [6, 3]]]))
    assert got[0, :, 0].tolist() == [7, 9, 9]  # "3 6" unseen: backs off to "6" (latest: 9)


def test_top_probs_feature():
    class Out:
        logits = jnp.array([[[0.0, 2.0, 1.0, -1.0]]])
        hidden = ()
        final_hidden = None

    f = from_output(FeatureSpec(top_ids=2, top_probs=True), Out())
    p = jax.nn.softmax(Out.logits, axis=-1)
    np.testing.assert_array_equal(f.top_ids[0, 0], [1, 2])
    np.testing.assert_allclose(f.top_probs[0, 0], p[0, 0, jnp.array([1, 2])], rtol=1e-6)
    with pytest.raises(DrafterError, match="top_probs needs top_ids"):
        FeatureSpec(top_probs=True)


# ----------------------------------------------------------------------------- decoding


CHAIN, TREE, ROW = {}, {"tree": "levels:3.2.1", "k": 3}, {"share": "row", "k": 2}
LONG = pytest.mark.long  # suite time: one batch size per kind in the default run


@pytest.mark.parametrize("args,batch_size", [
    (CHAIN, 3), (TREE, 8), (ROW, 1),
    pytest.param(CHAIN, 1, marks=LONG), pytest.param(CHAIN, 8, marks=LONG),
    pytest.param(TREE, 1, marks=LONG), pytest.param(TREE, 3, marks=LONG),
    pytest.param(ROW, 3, marks=LONG), pytest.param(ROW, 8, marks=LONG)])
def test_greedy_identity(target, prompts, plain, args, batch_size):
    d = drafters.make("stand", target, buckets=1024, **args)
    res = generate(target, prompts, max_new_tokens=14, batch_size=batch_size, drafter=d)
    assert res.tokens == plain
    assert sum(res.extra["accepted"]) > 0  # the repetitive prompts do get drafts accepted


@LONG  # 9 s (suite time); the default run checks per-row tables at batch 1
def test_per_row_tables_do_not_depend_on_the_batch(target, prompts):
    d = drafters.make("stand", target, buckets=1024, share="row", k=3)
    a = generate(target, prompts, max_new_tokens=14, batch_size=8, drafter=d)
    b = generate(target, prompts, max_new_tokens=14, batch_size=1, drafter=d)
    assert a.extra["accepted"] == b.extra["accepted"]
    assert a.extra["drafted"] == b.extra["drafted"]


@pytest.mark.parametrize("args,temperature", [({"tree": "fixed:0,1,0.0"}, 1.0),
                                              ({"share": "row"}, 0.7),
                                              pytest.param({}, 1.0, marks=LONG)])
def test_sampling_matches_the_target_distribution(args, temperature):
    """5000 rows of one prompt: the first three tokens follow the target's exact law at the
    temperature (chi-square, 99.9%, seed 8). ``width=2`` keeps the draft's ``q`` (the stored
    top-2, renormalised, sharpened by ``1/T``) away from ``p``, so a wrong ratio would show (a
    q scaled by 0.7 fails this test by a chi-square 5x the bound)."""
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3], temperature)
    n = 5000
    d = drafters.make("stand", target, k=2, width=2, buckets=256, **args)
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=temperature, seed=8))
    assert sum(res.extra["drafted"]) > n
    assert sum(res.extra["accepted"]) > 0.2 * sum(res.extra["drafted"])
    chi_square_check([t[:3] for t in res.tokens], want)


@LONG  # 15 s (suite time)
def test_sampled_rows_share_the_table():
    """N samples of one question: with one table for the batch every row drafts from the
    others' text and gets more tokens accepted than with a table per row (same seed)."""
    target, _ = sharp_tiny_pair()
    kw = dict(max_new_tokens=12, batch_size=16, sampling=SamplingParams(temperature=0.7, seed=2))
    acc = {}
    for share in ("batch", "row"):
        d = drafters.make("stand", target, k=3, buckets=256, share=share)
        res = generate(target, [[1, 2, 3]] * 16, drafter=d, **kw)
        acc[share] = sum(res.extra["accepted"])
    assert acc["batch"] > 1.2 * acc["row"], acc


def test_memory_carries_tables_across_batches_and_files(target, prompts, plain, tmp_path):
    fresh = drafters.make("stand", target, buckets=1024, memory="none")
    cold = generate(target, prompts[:2], max_new_tokens=14, drafter=fresh)
    # the default (memory=call): carried between the batches of one call, fresh per call
    per_call = drafters.make("stand", target, buckets=1024)
    one = generate(target, prompts[:2], max_new_tokens=14, drafter=per_call)
    assert one.extra["accepted"] == cold.extra["accepted"]
    two = generate(target, prompts[:2] * 2, max_new_tokens=14, batch_size=2, drafter=per_call)
    assert two.tokens == plain[:2] * 2
    assert two.extra["accepted"][:2] == cold.extra["accepted"]  # fresh at the call's start
    assert sum(two.extra["accepted"][2:]) > sum(cold.extra["accepted"])  # the second batch
    kept = drafters.make("stand", target, buckets=1024, memory="keep")
    first = generate(target, prompts[:2], max_new_tokens=14, drafter=kept)
    assert first.extra["accepted"] == cold.extra["accepted"]  # nothing carried yet
    again = generate(target, prompts[:2], max_new_tokens=14, drafter=kept)
    assert again.tokens == plain[:2]
    assert sum(again.extra["accepted"]) > sum(first.extra["accepted"])
    # a file: saved after every batch, loaded on the next build: the same drafts as "keep"
    path = tmp_path / "stand.npz"
    d = drafters.make("stand", target, buckets=1024, memory=str(path))
    generate(target, prompts[:2], max_new_tokens=14, drafter=d)
    assert path.exists() and d.memory.batches == 1
    reloaded = drafters.make("stand", target, buckets=1024, memory=str(path))
    res = generate(target, prompts[:2], max_new_tokens=14, drafter=reloaded)
    assert res.tokens == plain[:2]
    assert res.extra["accepted"] == again.extra["accepted"]
    assert res.extra["drafted"] == again.extra["drafted"]


def test_bad_files(target, prompts, tmp_path):
    path = tmp_path / "t.npz"
    d = drafters.make("stand", target, buckets=1024, width=4, memory=str(path))
    generate(target, prompts[:1], max_new_tokens=4, drafter=d)
    with pytest.raises(DrafterError, match="another configuration: width 4 in the file, 8 here"):
        drafters.make("stand", target, buckets=1024, memory=str(path))
    with pytest.raises(DrafterError, match="another configuration: buckets"):
        drafters.make("stand", target, buckets=512, width=4, memory=str(path))
    mem = StandMemory.load(path, 3, 1024, 4, target.cfg.vocab_size, None)
    mem.tokenizer = "other"
    mem.save()
    with pytest.raises(DrafterError, match="another tokenizer"):
        StandMemory.load(path, 3, 1024, 4, target.cfg.vocab_size, "mine")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(DrafterError, match="not a readable STAND table file"):
        drafters.make("stand", target, memory=str(bad))
    other = tmp_path / "other.npz"
    np.savez(other, header=np.frombuffer(json.dumps({"format": "x"}).encode(), np.uint8),
             ctx=0, ids=0, w=0, count=0)
    with pytest.raises(DrafterError, match="is not a specjax-stand-tables file"):
        drafters.make("stand", target, memory=str(other))
    np.savez(other, header=np.frombuffer(json.dumps([1, 2]).encode(), np.uint8),
             ctx=0, ids=0, w=0, count=0)  # a header that is not an object (was a crash)
    with pytest.raises(DrafterError, match=r"not a specjax-stand-tables file .*found \[1, 2\]"):
        drafters.make("stand", target, memory=str(other))
    z = dict(np.load(path))
    z["ids"] = z["ids"][:, :, :10]
    with open(tmp_path / "cut.npz", "wb") as f:
        np.savez(f, **z)
    with pytest.raises(DrafterError, match="truncated or corrupt"):
        drafters.make("stand", target, buckets=1024, width=4, memory=str(tmp_path / "cut.npz"))
    z = dict(np.load(path))
    used = np.argwhere(z["count"] > 0)[0]
    z["ids"][tuple(used)] = z["ids"][tuple(used)][0]  # one token four times
    with open(tmp_path / "dup.npz", "wb") as f:
        np.savez(f, **z)
    with pytest.raises(DrafterError, match="holds a token twice"):
        drafters.make("stand", target, buckets=1024, width=4, memory=str(tmp_path / "dup.npz"))


def test_bad_options(target):
    with pytest.raises(DrafterError, match="order must be an integer >= 1"):
        drafters.make("stand", target, order=0)
    with pytest.raises(DrafterError, match="share must be 'batch' or 'row'"):
        drafters.make("stand", target, share="all")
    with pytest.raises(DrafterError, match="sibling rule must be 'wor'"):
        drafters.make("stand", target, tree="fixed:0,1:iid", k=1)
    with pytest.raises(DrafterError, match="chains or static trees"):
        drafters.make("stand", target, tree="topk:width=2", k=2)
    with pytest.raises(DrafterError, match="3 children, more than the 2 candidates"):
        drafters.make("stand", target, tree="levels:3.1", k=2, width=2)
    with pytest.raises(DrafterError, match=r"tables of \d+ MB .* over max_table_mb=1024"):
        drafters.make("stand", target, buckets=2 ** 26)
    with pytest.raises(DrafterError, match="needs share=batch"):
        drafters.make("stand", target, share="row", memory="keep")
    assert table_bytes(3, 65536, 8) == 3 * 65536 * 20 * 4
    m = methods.build("stand", target, {"k": "2", "order": "2"})
    assert m.drafter.max_k == 2 and m.drafter.order == 2


def test_update_after_an_eos_cut_block_records_the_committed_contexts(target):
    """A step that accepted 3 drafts whose second is EOS writes only 2 tokens: the root is
    found from the committed cache length (which grew by n_acc + 1), and nothing past the
    EOS is recorded."""
    from specjax.drafters.base import StepContext
    from specjax.features import Features

    d = drafters.make("stand", target, buckets=64, order=2, width=1, memory="none")
    r, x1, eos = 11, 12, 13
    seq = jnp.array([[3, 4, r, x1, eos, 0, 0, 0]])  # root r at 2; x1, EOS written; x3 not
    ctx = StepContext(seq=seq, seq_len=jnp.array([5]),
                      target_cache=target.init_cache(1, 8).with_lengths(jnp.array([6])),
                      keys=jnp.zeros((1, 2), jnp.uint32), live=jnp.array([True]),
                      temperature=jnp.float32(1), top_k=jnp.int32(0), top_p=jnp.float32(1))
    feats = Features(top_ids=jnp.array([[[21], [22], [23], [24]]]),
                     top_probs=jnp.ones((1, 4, 1)))
    state = empty_tables(1, 2, 64, 1)
    state = d.update(None, state, ctx, jnp.array([3]), None, jnp.zeros((1, 3), jnp.int32),
                     feats)
    g = jnp.zeros((1,), jnp.int32)
    ids, w, found = lookup(state, g, jnp.array([[[r, 4], [x1, r], [eos, x1], [0, eos]]]))
    assert found[0].tolist() == [True, True, True, False]
    assert ids[0, :3, 0].tolist() == [21, 22, 23]  # after r, after "r x1", after "x1 EOS"
