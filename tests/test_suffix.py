"""Suffix decoding (issue 24): the in-loop search against a brute-force search over the same
text, the global cache (eviction, files, foreign and corrupt files), greedy identity (batch
1, 3 and 8, mixed lengths, empty and warm caches), a saved and reloaded cache reused, lossless
sampling, bad options."""

import numpy as np
import pytest

from spec_helpers import chi_square_check, make_target, mixed_prompts, sharp_tiny_pair, \
    three_token_law
from specjax import drafters, methods
from specjax.drafters.suffix import SuffixCache, latest_true, suffix_draft, \
    suffix_tree_draft
from specjax.engine import generate
from specjax.errors import DrafterError
from specjax.sampling import SamplingParams


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(8, seed=9)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return generate(target, prompts, max_new_tokens=14, batch_size=8).tokens


# ------------------------------------------------------------------------- brute force


def brute_candidates(cache_docs, row, K, max_depth, candidates, min_match):
    """By the definition: every end position of the cache documents and of the row's text
    before its last token, its match length with the row's suffix; the longest match, the
    most recent `candidates` ones at it (the latest first) as (text index, end), and the `K`
    tokens after each."""
    texts = [list(d) for d in cache_docs] + [list(row)]
    ends = []  # (global order, text index, end position)
    order = 0
    for ti, t in enumerate(texts):
        last = len(t) - 1 if ti < len(texts) - 1 else len(t) - 2
        for j in range(last + 1):
            n = 0
            while n < max_depth and j - n >= 0 and len(row) - 1 - n >= 0 and \
                    t[j - n] == row[len(row) - 1 - n]:
                n += 1
            ends.append((order, ti, j, n))
            order += 1
        order += 1  # the separator's slot
    best = max((e[3] for e in ends), default=0)
    if best < min_match:
        return best, [], []
    cands = sorted([e for e in ends if e[3] == best], key=lambda e: -e[0])[:candidates]
    return best, cands, [texts[ti][j + 1:j + 1 + K] for _, ti, j, _ in cands]


def brute_force(cache_docs, row, K, max_depth, candidates, min_match, min_prob, factor):
    """The chain draft by the definition: the candidates' most frequent continuation, token
    by token."""
    best, cands, conts = brute_candidates(cache_docs, row, K, max_depth, candidates,
                                          min_match)
    if not cands:
        return [], False
    alive = list(range(len(conts)))
    out, src = [], None
    for d in range(K):
        toks = [conts[i][d] for i in alive if d < len(conts[i])]
        if not toks:
            break
        counts = {}
        for i in alive:
            if d < len(conts[i]):
                counts[conts[i][d]] = counts.get(conts[i][d], 0) + 1
        top = max(counts.values())
        # ties: the most recent candidate's token
        chosen = next(conts[i][d] for i in alive if d < len(conts[i]) and
                      counts[conts[i][d]] == top)
        if d == 0:
            src = next(cands[i][1] for i in alive if conts[i][0] == chosen)
        if top < min_prob * len(cands):
            break
        out.append(chosen)
        alive = [i for i in alive if d < len(conts[i]) and conts[i][d] == chosen]
    cap = int(np.ceil(factor * best))
    out = out[:cap]
    return out, bool(out) and src < len(cache_docs)


def random_search(rng, V, capacity, docs):
    """A cache of fewer than `docs` random documents and 4 random rows (1-39 tokens, padded
    to 48) over a `V`-token vocabulary: `(cache, rows, seq, lens)`."""
    cache = SuffixCache(capacity)
    for _ in range(int(rng.integers(0, docs))):
        cache.add(rng.integers(0, V, int(rng.integers(1, 30))).tolist())
    rows = [rng.integers(0, V, int(rng.integers(1, 40))).tolist() for _ in range(4)]
    seq = np.zeros((4, 48), np.int32)
    for i, r in enumerate(rows):
        seq[i, :len(r)] = r
    return cache, rows, seq, np.array([len(r) for r in rows], np.int32)


@pytest.mark.parametrize("seed", range(6))
def test_search_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    V = 5  # a small vocabulary: many matches, ties and votes
    cache, rows, seq, lens = random_search(rng, V, capacity=120, docs=6)
    opts = dict(K=6, max_depth=int(rng.integers(1, 8)), candidates=int(rng.integers(1, 9)),
                min_match=int(rng.integers(1, 3)), min_prob=float(rng.choice([0.0, 0.25])),
                factor=float(rng.choice([0.5, 1.0, 3.0])))
    toks, n, glob, _ = suffix_draft(cache.array(), seq, lens, **opts)
    for i, r in enumerate(rows):
        want, want_glob = brute_force(cache.documents(), r, **opts)
        assert np.asarray(toks)[i, :int(n[i])].tolist() == want, (i, opts)
        assert bool(glob[i]) == want_glob


@pytest.mark.parametrize("density", [0.0, 0.002, 0.05, 0.5, 1.0])
def test_latest_true_by_blocks_equals_the_definition(density):
    """The blocked search (only the last M non-empty blocks are counted) against the
    definition, with blocks small enough that every shape takes it (and one that does not)."""
    rng = np.random.default_rng(int(density * 1000))
    for N, M, block in ((1000, 3, 8), (1003, 5, 16), (333, 1, 4), (40, 4, 8)):
        mask = rng.random((3, N)) < density
        got = np.asarray(latest_true(mask, M, block))
        for b in range(3):
            want = np.flatnonzero(mask[b])[::-1][:M].tolist()
            assert got[b].tolist() == want + [-1] * (M - len(want)), (N, M, block, b)


def brute_tree(cache_docs, row, K, max_depth, candidates, min_match, min_prob, factor, nodes):
    """The tree draft by the definition, every size paying (flat verify cost): the distinct
    continuation prefixes shared by at least `min_prob` of the candidates, no longer than
    ceil(factor * match), the `nodes` most shared (ties: shorter, then the more recent
    candidate), as token paths."""
    best, cands, conts = brute_candidates(cache_docs, row, K, max_depth, candidates,
                                          min_match)
    prefixes = {}  # path -> (count, latest candidate index)
    for i, c in enumerate(conts):
        for d in range(1, len(c) + 1):
            n, first = prefixes.get(tuple(c[:d]), (0, i))
            prefixes[tuple(c[:d])] = (n + 1, first)
    cap = int(np.ceil(factor * best))
    kept = [(-n, len(p), first, p) for p, (n, first) in prefixes.items()
            if n >= min_prob * len(cands) and len(p) <= cap]
    return {p for *_, p in sorted(kept)[:nodes]}


def tree_paths(tree, b):
    """The token paths of row `b`'s valid nodes; checks the breadth-first layout."""
    tok, par, dep, ok = (np.asarray(x)[b] for x in (tree.tokens, tree.parent, tree.depth,
                                                    tree.valid))
    n = int(ok.sum())
    assert ok[:n].all() and not ok[n:].any()  # valid nodes first
    assert (np.diff(dep[:n]) >= 0).all()  # breadth-first
    paths = []
    for i in range(n):
        assert par[i] < i and (dep[i] == 1) == (par[i] == -1)
        paths.append((paths[par[i]] if par[i] >= 0 else ()) + (int(tok[i]),))
        assert len(paths[i]) == dep[i]
    return paths


@pytest.mark.parametrize("seed", range(6))
def test_tree_equals_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    V = 4
    cache, rows, seq, lens = random_search(rng, V, capacity=160, docs=7)
    opts = dict(K=6, max_depth=int(rng.integers(1, 6)), candidates=int(rng.integers(1, 12)),
                min_match=int(rng.integers(1, 3)), min_prob=float(rng.choice([0.0, 0.25])),
                factor=float(rng.choice([0.5, 1.0, 3.0])))
    nodes = int(rng.integers(2, 7))
    flat = np.ones(nodes + 1, np.float32)
    tree, n, _, _ = suffix_tree_draft(cache.array(), seq, lens, **opts, nodes=nodes,
                                      step_cost=flat)
    for i, r in enumerate(rows):
        got = tree_paths(tree, i)
        assert len(got) == len(set(got)) == int(n[i])
        assert set(got) == brute_tree(cache.documents(), r, **opts, nodes=nodes), (i, opts)


def test_tree_size_is_priced():
    """With a steep verify curve only the likeliest nodes pay: 4 occurrences of the context,
    3 continuing with 7 and 1 with 8; a node costs 0.5 a step."""
    cache = SuffixCache(64)
    for cont in (7, 7, 7, 8):
        cache.add([1, 2, cont, 5])
    seq = np.array([[1, 2, 0, 0]], np.int32)
    lens = np.array([2], np.int32)
    opts = dict(K=3, max_depth=2, candidates=8, min_match=1, min_prob=0.0, factor=2.0,
                nodes=3)
    tree, n, glob, _ = suffix_tree_draft(cache.array(), seq, lens, **opts,
                                         step_cost=np.ones(4, np.float32))
    assert set(tree_paths(tree, 0)) == {(7,), (8,), (7, 5)} and bool(glob[0])
    # (1 + 0.75) / 1.5 beats (1 + 1.5) / 2.3 and (1 + 1.75) / 2.5: the first node alone
    steep = np.array([1.0, 1.5, 2.3, 2.5], np.float32)
    tree, n, _, _ = suffix_tree_draft(cache.array(), seq, lens, **opts, step_cost=steep)
    assert tree_paths(tree, 0) == [(7,)] and int(n[0]) == 1


# ------------------------------------------------------------------------- the cache


def test_cache_evicts_oldest_first():
    c = SuffixCache(10)
    c.add([1, 2, 3])
    c.add([4, 5])
    assert c.array().tolist() == [1, 2, 3, -1, 4, 5, -1, -1, -1, -1]
    c.add([6, 7, 8, 9])  # 4 + 1 slots: 7 + 5 > 10 -> [1, 2, 3] goes
    assert c.documents() == [[4, 5], [6, 7, 8, 9]] and c.evicted == 1
    c.add(list(range(20)))  # longer than the cache: its last 9 tokens, alone
    assert c.documents() == [list(range(11, 20))] and c.num_tokens == 9


def test_cache_file_round_trip_and_bad_files(tmp_path, target):
    c = SuffixCache(64, path=tmp_path / "c.npz")
    c.bind(64, "abc")
    c.add([1, 2, 3])
    c.add([5, 6])
    path = c.save()
    d = SuffixCache.load(path)
    assert d.documents() == [[1, 2, 3], [5, 6]] and d.capacity == 64
    assert d.vocab_size == 64 and d.tokenizer == "abc"
    with pytest.raises(DrafterError, match="another tokenizer"):
        d.bind(64, "xyz")
    with pytest.raises(DrafterError, match="vocabulary of 64, but the target's has 100"):
        d.bind(100, None)
    with pytest.raises(DrafterError, match="does not exist"):
        SuffixCache.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(DrafterError, match="junk.npz is not a readable cache"):
        SuffixCache.load(tmp_path / "junk.npz")
    import json

    def write(name, meta, tokens, lengths):
        np.savez(tmp_path / name, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 tokens=np.asarray(tokens, np.int32), lengths=np.asarray(lengths))
        return tmp_path / name

    ok = {"format": "specjax-suffix-cache", "version": 1, "capacity": 64, "vocab_size": 64}
    with pytest.raises(DrafterError, match="not a specjax suffix cache"):
        SuffixCache.load(write("a.npz", {**ok, "format": "other"}, [1], [1]))
    with pytest.raises(DrafterError, match="format version 99"):
        SuffixCache.load(write("b.npz", {**ok, "version": 99}, [1], [1]))
    with pytest.raises(DrafterError, match="corrupt: 3 tokens"):
        SuffixCache.load(write("c.npz", ok, [1, 2, 3], [2]))
    with pytest.raises(DrafterError, match="corrupt: token ids outside"):
        SuffixCache.load(write("d.npz", ok, [1, 70], [2]))
    # a cache file of another model, through the drafter's option
    foreign = write("e.npz", {**ok, "vocab_size": 1000}, [1], [1])
    with pytest.raises(DrafterError, match="e.npz holds token ids of a vocabulary of 1000"):
        drafters.make("suffix", target, cache=str(foreign))


def test_bad_options(target):
    with pytest.raises(DrafterError, match="capacity must be an integer in"):
        SuffixCache(1 << 30)
    with pytest.raises(DrafterError, match="min_match .* cannot exceed max_depth"):
        drafters.make("suffix", target, min_match=5, max_depth=3)
    with pytest.raises(DrafterError, match="min_prob must be in"):
        drafters.make("suffix", target, min_prob=1.5)
    with pytest.raises(DrafterError, match="factor must be > 0"):
        drafters.make("suffix", target, factor=0)
    with pytest.raises(DrafterError, match=r"nodes must be 0 \(a chain\) or an integer in "
                                           r"\[2, k = 4\], got 5"):
        drafters.make("suffix", target, k=4, nodes=5)


# ------------------------------------------------------------------------- decoding


def test_greedy_identity_and_learning(target, prompts, plain):
    cache = SuffixCache(2048)
    m = methods.build("suffix", target, {"cache": cache, "k": "6"})
    for B in (1, 3, 8):
        r = generate(target, prompts[:B] if B < 8 else prompts, max_new_tokens=14,
                     drafter=m.drafter, policy=m.policy, batch_size=B)
        assert r.tokens == plain[:B], B
    # every output so far joined the cache; asked again, the answers come from it: the match
    # (and with it the draft) grows with every accepted token
    assert len(cache) == 1 + 3 + 8
    r = generate(target, prompts, max_new_tokens=14, drafter=m.drafter, policy=m.policy,
                 batch_size=8)
    assert r.tokens == plain
    assert min(r.extra["suffix_global_hits"]) > 0
    assert sum(r.extra["accepted"]) >= 8 * 8, r.extra["accepted"]


def test_tree_greedy_identity(target, prompts, plain):
    cache = SuffixCache(2048)
    for t in plain[:5]:
        cache.add(t)
    d = drafters.make("suffix", target, cache=cache, k=6, nodes=5, learn=False)
    assert d.tree is not None and d.tree.num_nodes == 5
    for B in (1, 3, 8):
        r = generate(target, prompts[:B] if B < 8 else prompts, max_new_tokens=14,
                     drafter=d, batch_size=B)
        assert r.tokens == plain[:B], B
    assert sum(r.extra["accepted"]) >= 5 * 8, r.extra["accepted"]  # answers it has seen


def test_rows_ending_mid_step_and_no_learning(target, prompts, plain):
    cache = SuffixCache(2048)
    for t in plain:
        cache.add(t)
    d = drafters.make("suffix", target, cache=cache, k=8, learn=False)
    for n in (5, 11):
        r = generate(target, prompts, max_new_tokens=n, drafter=d, batch_size=8)
        assert r.tokens == [t[:n] for t in plain]
    assert len(cache) == 8  # learn=False: nothing added


def test_saved_cache_reused_gives_identical_outputs(tmp_path, target, prompts, plain):
    path = tmp_path / "suffix.npz"
    d = drafters.make("suffix", target, cache=str(path), k=6)
    first = generate(target, prompts[:4], max_new_tokens=14, drafter=d, batch_size=2)
    assert path.exists() and len(SuffixCache.load(path)) == 4  # saved after every batch
    again = drafters.make("suffix", target, cache=str(path), k=6, learn=False)
    r1 = generate(target, prompts[4:], max_new_tokens=14, drafter=again, batch_size=4)
    d2 = drafters.make("suffix", target, cache=SuffixCache.load(path), k=6, learn=False)
    r2 = generate(target, prompts[4:], max_new_tokens=14, drafter=d2, batch_size=4)
    assert first.tokens == plain[:4] and r1.tokens == r2.tokens == plain[4:]
    assert r1.extra["drafted"] == r2.extra["drafted"]
    assert r1.extra["suffix_hits"] == r2.extra["suffix_hits"]


@pytest.mark.parametrize("nodes", [0, 3])
def test_sampling_matches_the_target_distribution(nodes):
    target, _ = sharp_tiny_pair()
    want = three_token_law(target, [1, 2, 3])
    n = 5000
    cache = SuffixCache(256)
    # for the tree: after "3 t" (t not 0 or 4, which match longer) two continuations, so the
    # first drafting step's root has two children
    branches = [[3, t, (t + d) % 8] for d in (1, 3) for t in range(8)] if nodes else []
    for seq in [[1, 2, 3, 4, 5, 6], [3, 4, 4, 4], [2, 3, 0, 1, 2]] + branches:
        cache.add(seq)
    flat = {"cost": (1.0,) * 4} if nodes else {}  # every node pays
    d = drafters.make("suffix", target, k=3, cache=cache, learn=False, nodes=nodes, **flat)
    res = generate(target, [[1, 2, 3]] * n, max_new_tokens=5, batch_size=n, drafter=d,
                   sampling=SamplingParams(temperature=1.0, seed=8))
    assert sum(a[0] for a in res.extra["accepted_at"]) > 0.05 * n
    if nodes:  # most rows drafted two siblings at least once
        assert np.mean(np.asarray(res.extra["drafted"]) >= 2) > 0.5
    chi_square_check([t[:3] for t in res.tokens], want)


def test_snapshot_and_restore(target):
    """What `specjax bench` does when it times a freshly compiled batch twice: the second run
    must draft from the cache as it was before the first."""
    d = drafters.make("suffix", target, k=4)
    d.cache.add([1, 2, 3])
    snap = d.snapshot()
    d.observe([[0]], [[4, 5, 6]])
    assert len(d.cache) == 2
    d.restore(snap)
    assert d.cache.documents() == [[1, 2, 3]]
    assert np.asarray(d.params()).tolist()[:4] == [1, 2, 3, -1]
