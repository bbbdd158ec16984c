"""SSSD (issue 24): the datastore's in-loop drafts against a brute-force n-gram count over the
same documents, hash collisions, the flat-latency budget on a hand-computed curve, files
(round trip, foreign, corrupt), greedy identity (batch 1, 3 and 8, mixed lengths, rows ending
mid step), a saved datastore reused, lossless sampling, bad options."""

import collections
import json

import jax.numpy as jnp
import numpy as np
import pytest

from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law
from specjax import drafters, methods
from specjax.drafters.sssd import Datastore, build_tables, context_hash, datastore_draft, \
    flat_budget, order_hashes
from specjax.engine import generate
from specjax.errors import DrafterError
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


# ------------------------------------------------------------------------- brute force


def brute_force(docs, row, K, max_order, min_order, min_prob):
    """The datastore chain of ``row`` by counting n-grams in Python."""
    counts = [collections.defaultdict(collections.Counter) for _ in range(max_order + 1)]
    for d in docs:
        for n in range(1, max_order + 1):
            for j in range(n, len(d)):
                counts[n][tuple(d[j - n:j])][d[j]] += 1
    text, out, prob = list(row), [], 1.0
    for _ in range(K):
        hit = None
        for n in range(min(max_order, len(text)), 0, -1):
            c = counts[n].get(tuple(text[-n:]))
            if c:
                best = max(c.items(), key=lambda kv: (kv[1], -kv[0]))
                hit = (n, best[0], best[1] / sum(c.values()))
                break
        if hit is None or hit[0] < min_order:
            break
        prob *= hit[2]
        if prob < min_prob:
            break
        out.append(hit[1])
        text.append(hit[1])
    return out


def no_collisions(docs, max_order, slots):
    t = build_tables(docs, max_order, slots)
    for n in range(1, max_order + 1):
        ctxs = {tuple(d[j - n:j]) for d in docs for j in range(n, len(d))}
        if int(np.sum(t["count"][n - 1] > 0)) != len(ctxs):
            return False
    return True


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_datastore_draft_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    # a small vocabulary and repeated phrases, so contexts recur with several continuations
    phrases = [list(rng.integers(0, 6, rng.integers(3, 7))) for _ in range(5)]
    docs = [sum((phrases[i] for i in rng.integers(0, 5, 6)), []) for _ in range(6)]
    max_order, K, slots = 3, 6, 1 << 20
    assert no_collisions(docs, max_order, slots)
    ds = Datastore(max_order=max_order, slots=slots)
    ds.extend(docs)
    tables = {k: jnp.asarray(v) for k, v in ds.tables().items()}
    rows = [list(rng.integers(0, 6, rng.integers(1, 9))) for _ in range(12)]
    L = 16
    seq = np.zeros((len(rows), L), np.int32)
    for i, r in enumerate(rows):
        seq[i, :len(r)] = r
    seq_len = jnp.asarray([len(r) for r in rows], jnp.int32)
    for min_order, min_prob in ((1, 0.0), (2, 0.3)):
        toks, length, order = datastore_draft(tables, jnp.asarray(seq), seq_len, K, max_order,
                                              min_order, min_prob)
        for i, r in enumerate(rows):
            want = brute_force(docs, r, K, max_order, min_order, min_prob)
            got = np.asarray(toks[i, :int(length[i])]).tolist()
            assert got == want, (i, r, min_order, min_prob)
            assert (int(order[i]) > 0) == bool(want)


def test_order_hashes_are_each_orders_context_hash():
    window = np.random.default_rng(4).integers(0, 50000, (7, 5)).astype(np.int32)
    h1, h2 = order_hashes(jnp.asarray(window))
    for n in range(1, 6):
        a1, a2 = context_hash(window[:, 5 - n:], np)
        assert np.array_equal(a1, np.asarray(h1[:, n - 1]))
        assert np.array_equal(a2, np.asarray(h2[:, n - 1]))


def test_hashes_agree_and_collisions_keep_the_more_frequent_context():
    ctx = np.random.default_rng(3).integers(0, 50000, (40, 4)).astype(np.int32)
    for a, b in zip(context_hash(ctx, np), context_hash(jnp.asarray(ctx), jnp)):
        assert np.array_equal(a, np.asarray(b))
    # two slots for many unigram contexts: each slot keeps the context seen most often
    docs = [[1, 2] * 5 + [3, 4, 5, 6, 7, 8]]
    t = build_tables(docs, 1, 2)
    assert sorted(t["total"][0][t["count"][0] > 0].tolist())[-1] == 5  # "1" (or "2") seen 5x
    ds = Datastore(max_order=1, slots=2)
    ds.add(docs[0])
    hits = [ds.lookup([c]) for c in range(1, 9)]
    assert sum(h is not None for h in hits) <= 2
    assert ds.lookup([1]) in (None, (2, 5, 5))


def test_flat_budget_on_a_hand_computed_curve():
    cost = [1.0, 1.1, 1.2, 1.3, 1.5, 1.75, 2.2, 2.6]  # T = 1..8, then +0.4 per token
    caps = flat_budget(cost, 0.5, 6, max_batch=4)
    # the verify blocks for K = 6: 1, 2, 4, 7 (k tokens: the block >= k + 1)
    # B=1: <= 1.5: k = 3 (block 4, 1.3); k = 4 would be block 7 (2.2), not T = 5's 1.5
    # B=2: <= 1.65: k = 1 (2 x 2 = 4 tokens, 1.3); k = 2: 2 x 4 = 8 (2.6)
    # B=3: <= 1.8: k = 1 (3 x 2 = 6, 1.75); B=4: <= 1.95: 4 x 2 = 8 (2.6) -> k = 0
    assert caps == (3, 1, 1, 0)
    assert flat_budget(cost, 100.0, 6, max_batch=1) == (6,)


# ------------------------------------------------------------------------- files, options


def test_file_round_trip_and_bad_files(tmp_path, target):
    ds = Datastore(max_order=3, slots=64, path=tmp_path / "d.npz")
    ds.bind(64, "abc")
    ds.add([1, 2, 3])
    ds.add([5, 6])
    path = ds.save()
    d = Datastore.load(path)
    assert (d.max_order, d.slots, d.num_tokens, len(d)) == (3, 64, 5, 2)
    assert d.lookup([1, 2]) == (3, 1, 1)
    with pytest.raises(DrafterError, match="another tokenizer"):
        d.bind(64, "xyz")
    with pytest.raises(DrafterError, match="vocabulary of 64, but the target's has 100"):
        d.bind(100, None)
    with pytest.raises(DrafterError, match="does not exist"):
        Datastore.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DrafterError, match="junk.npz is not a readable datastore"):
        Datastore.load(tmp_path / "junk.npz")

    def write(name, meta, tokens, lengths):
        np.savez(tmp_path / name, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 tokens=np.asarray(tokens, np.int32), lengths=np.asarray(lengths))
        return tmp_path / name

    ok = {"format": "specjax-sssd-datastore", "version": 1, "max_order": 2, "slots": 64,
          "vocab_size": 64}
    with pytest.raises(DrafterError, match="not a specjax sssd datastore"):
        Datastore.load(write("a.npz", {**ok, "format": "specjax-suffix-cache"}, [1], [1]))
    with pytest.raises(DrafterError, match="format version 99"):
        Datastore.load(write("b.npz", {**ok, "version": 99}, [1], [1]))
    with pytest.raises(DrafterError, match="corrupt: 3 tokens"):
        Datastore.load(write("c.npz", ok, [1, 2, 3], [2]))
    with pytest.raises(DrafterError, match="corrupt: token ids outside"):
        Datastore.load(write("d.npz", ok, [1, 70], [2]))
    foreign = write("e.npz", {**ok, "vocab_size": 1000}, [1], [1])
    with pytest.raises(DrafterError, match="e.npz holds token ids of a vocabulary of 1000"):
        drafters.make("sssd", target, datastore=str(foreign))


def test_bad_options(target):
    with pytest.raises(DrafterError, match="slots must be a power of two"):
        Datastore(slots=1000)
    with pytest.raises(DrafterError, match="max_order must be an integer in"):
        Datastore(max_order=0)
    with pytest.raises(DrafterError, match="min_order .* cannot exceed max_order"):
        drafters.make("sssd", target, min_order=5, max_order=3)
    with pytest.raises(DrafterError, match="min_prob must be in"):
        drafters.make("sssd", target, min_prob=1.5)
    with pytest.raises(DrafterError, match="budget_tol must be >= 0"):
        drafters.make("sssd", target, budget_tol=-1)
    with pytest.raises(DrafterError, match="not a specjax corpus"):
        Datastore.from_corpus("/")  # a directory without a manifest
    ds = Datastore(max_order=2)
    with pytest.raises(DrafterError, match="exceeds the datastore's max_order"):
        drafters.make("sssd", target, datastore=ds, min_order=3)


# ------------------------------------------------------------------------- decoding


def test_greedy_identity_batch_sizes_and_learning(target, prompts, plain):
    ds = Datastore(max_order=3, slots=1 << 12)
    m = methods.build("sssd", target, {"datastore": ds, "k": "4", "max_depth": "6",
                                       "budget_tol": "inf"})
    for B in (1, 3, 8):
        r = generate(target, prompts[:B] if B < 8 else prompts, max_new_tokens=14,
                     drafter=m.drafter, policy=m.policy, batch_size=B)
        assert r.tokens == plain[:B], B
    assert len(ds) == 1 + 3 + 8  # every output joined the datastore
    # asked again, the answers are in the datastore: long drafts, all accepted
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain
    assert min(r.extra["sssd_datastore"]) + min(r.extra["sssd_own"]) > 0
    assert sum(r.extra["accepted"]) >= 8 * 6, r.extra["accepted"]


def test_budget_and_rows_ending_mid_step(target, prompts, plain):
    ds = Datastore(max_order=3, slots=1 << 12)
    ds.extend(plain)
    d = drafters.make("sssd", target, datastore=ds, k=6, learn=False, budget_tol=0.5,
                      max_depth=6)
    assert d.cap(1) >= d.cap(8) and d.cap(64) == d.cap(1000)
    for n in (5, 11):
        r = generate(target, prompts, max_new_tokens=n, drafter=d, batch_size=8)
        assert r.tokens == [t[:n] for t in plain]
        assert sum(r.extra["accepted"]) > 0  # the datastore holds these very answers
    assert len(ds) == 8  # learn=False: nothing added
    # the budget caps every row's draft at batch 8
    r = generate(target, prompts, max_new_tokens=14, drafter=d, batch_size=8)
    assert all(sum(1 for x in row if x) <= d.cap(8) for row in r.extra["drafted_at"])


@pytest.mark.long  # suite time (29 s); the suffix cache's file round trip runs by default
def test_saved_datastore_reused_gives_identical_outputs(tmp_path, target, prompts, plain):
    path = tmp_path / "ds.npz"
    d = drafters.make("sssd", target, datastore=str(path), k=4, max_order=3, slots=1 << 12,
                      budget_tol="inf", max_depth=6)
    first = generate(target, prompts[:4], max_new_tokens=14, drafter=d, batch_size=2)
    assert path.exists() and len(Datastore.load(path)) == 4  # saved after every batch
    again = drafters.make("sssd", target, datastore=str(path), k=4, learn=False,
                          budget_tol="inf", max_depth=6)
    r1 = generate(target, prompts[4:], max_new_tokens=14, drafter=again, batch_size=4)
    d2 = drafters.make("sssd", target, datastore=Datastore.load(path), k=4, learn=False,
                       budget_tol="inf", max_depth=6)
    r2 = generate(target, prompts[4:], max_new_tokens=14, drafter=d2, batch_size=4)
    assert first.tokens == plain[:4] and r1.tokens == r2.tokens == plain[4:]
    assert r1.extra["drafted"] == r2.extra["drafted"]


def test_sampling_matches_the_target_distribution():
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3])
    n = 5000
    ds = Datastore(max_order=2, slots=256)
    ds.extend(([1, 2, 3, 4, 5, 6], [3, 4, 4, 4], [2, 3, 0, 1, 2], [3, 4, 5]))
    d = drafters.make("sssd", target, k=3, datastore=ds, learn=False, min_order=1,
                      min_prob=0.0, budget_tol="inf")
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=8))
    assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n
    chi_square_check([t[:3] for t in res.tokens], want)


def test_snapshot_and_restore(target):
    d = drafters.make("sssd", target, k=4, datastore="empty", slots=64)
    d.datastore.add([1, 2, 3])
    snap = d.snapshot()
    d.observe([[0]], [[4, 5, 6]])
    assert len(d.datastore) == 2
    d.restore(snap)
    assert d.datastore.num_tokens == 3 and d.datastore.lookup([1, 2]) == (3, 1, 1)


def test_device_tables_copied_once_per_build():
    """The drafter's params are the tables' device copy, made once per build: the same arrays
    while the documents are unchanged, a new copy (equal to the rebuilt tables) after an
    add or a restore."""
    ds = Datastore(max_order=2, slots=64)
    ds.add([1, 2, 3, 1, 2, 4])
    first = ds.device_tables()
    assert ds.device_tables() is first
    for k, v in ds.tables().items():
        np.testing.assert_array_equal(np.asarray(first[k]), v)
    snap = ds.snapshot()
    ds.add([1, 2, 4])  # (1, 2) -> 4 now the more frequent
    second = ds.device_tables()
    assert second is not first and ds.lookup([1, 2]) == (4, 2, 3)
    for k, v in ds.tables().items():
        np.testing.assert_array_equal(np.asarray(second[k]), v)
    ds.restore(snap)
    third = ds.device_tables()
    assert third is not second
    np.testing.assert_array_equal(np.asarray(third["next"]), np.asarray(first["next"]))


@pytest.mark.parametrize("seed", [0, 1])
def test_tables_updated_in_place_of_a_build(seed):
    """Documents added and evicted are counted into built tables (:func:`update_tables`),
    deciding again only the slots they touch: the tables equal a build of the documents from
    scratch after every change, with slots shared by many contexts (64 slots, a vocabulary of
    6) and ties; the datastore takes that path for changes under a quarter of its tokens."""
    from specjax.drafters.sssd import _build, update_tables

    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, 6, rng.integers(1, 40)).astype(np.int32) for _ in range(30)]
    tables, pairs = _build(docs[:20], 3, 64)
    live = list(docs[:20])
    for step in range(8):  # add two, evict the oldest one
        added = docs[20 + step:21 + step] + [rng.integers(0, 6, 9).astype(np.int32)]
        removed = live[:1]
        before = {k: v.copy() for k, v in tables.items()}
        tables, pairs = update_tables(tables, pairs, added, removed, 64)
        live = live[1:] + added
        want = build_tables(live, 3, 64)
        for k in want:
            np.testing.assert_array_equal(tables[k], want[k], err_msg=f"{k} at step {step}")
        assert any((before[k] != tables[k]).any() for k in want)  # something changed
    # through the datastore: small changes update, evictions too, lookups see them
    ds = Datastore(max_order=3, slots=64, max_tokens=400)
    ds.extend(docs[:20])
    first = ds.tables()
    ds.add([5, 5, 5, 1])
    assert ds._added and ds.tables() is not first and not ds._added
    want = build_tables(list(ds._docs), 3, 64)
    for k in want:
        np.testing.assert_array_equal(ds.tables()[k], want[k])
    for d in docs[20:]:
        ds.add(d)
    assert ds.evicted > 0
    want = build_tables(list(ds._docs), 3, 64)
    for k in want:
        np.testing.assert_array_equal(ds.tables()[k], want[k])


def test_datastore_from_a_corpus(tmp_path):
    from specjax.train.corpus import _write_shard, encode_record
    from specjax.train.pool import PoolItem

    item = PoolItem(source="test", task="answer", id="x", prompt="p")
    _write_shard(tmp_path / "shard-00000.array_record",
                 [encode_record(item, [1, 2], [3, 4, 5]), encode_record(item, [6], [7, 8])])
    (tmp_path / "manifest.json").write_text(json.dumps({
        "shards": ["shard-00000.array_record"], "tokenizer_sha256": "a" * 64}))
    ds = Datastore.from_corpus(tmp_path, max_order=2, slots=64)
    assert (len(ds), ds.num_tokens) == (2, 8) and ds.lookup([1, 2]) == (3, 1, 1)
    ans = Datastore.from_corpus(tmp_path, answers_only=True, max_order=2, slots=64)
    assert ans.num_tokens == 5 and ans.lookup([1, 2]) is None
    with pytest.raises(DrafterError, match="written with another tokenizer"):
        Datastore.from_corpus(tmp_path, tokenizer_sha256="b" * 64)
