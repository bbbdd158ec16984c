"""Plain decoding: reference equality, batching, sampling, stopping and bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.config import tiny_config
from specjax.engine import GenerationError, bucket_length, generate
from specjax.models.loaders import random_model
from specjax.sampling import SamplingError, SamplingParams, process_logits

CFG = tiny_config(vocab_size=96, num_layers=2)


@pytest.fixture(scope="module")
def model():
    return random_model(CFG, seed=11)


def naive_greedy(model, prompt, n, eos=()):
    """Recomputes the whole sequence every step with a fresh cache (causal, so the fixed-size
    right padding cannot influence earlier positions): no incremental cache, no loop tricks."""
    L = len(prompt) + n
    from flax import nnx

    @nnx.jit
    def last_logits(m, toks, t):
        o = m(toks, jnp.arange(L)[None], m.init_cache(1, L))
        return o.logits[0, t - 1]

    seq = list(prompt)
    out = []
    for _ in range(n):
        toks = jnp.asarray([seq + [0] * (L - len(seq))], jnp.int32)
        t = int(jnp.argmax(last_logits(model, toks, len(seq))))
        out.append(t)
        seq.append(t)
        if t in eos:
            break
    return out


def prompts_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, CFG.vocab_size, n).tolist() for n in lengths]


def test_greedy_equals_naive_recompute(model):
    ps = prompts_of([5, 17])
    res = generate(model, ps, max_new_tokens=12)
    for p, got in zip(ps, res.tokens):
        assert got == naive_greedy(model, p, 12)
    assert res.target_forwards == [12, 12]
    assert res.stop_reason == ["max_new_tokens"] * 2


def test_batched_mixed_lengths_equal_batch_one(model):
    ps = prompts_of([3, 9, 20, 1, 33, 7], seed=1)
    single = [generate(model, [p], max_new_tokens=10).tokens[0] for p in ps]
    for bs in (2, 4, 6):
        batched = generate(model, ps, max_new_tokens=10, batch_size=bs).tokens
        assert batched == single, f"batch size {bs}"


def test_eos_stops_row_and_is_kept(model):
    p = prompts_of([6], seed=2)[0]
    free = generate(model, [p], max_new_tokens=12).tokens[0]
    eos = free[4]
    first = free.index(eos)
    res = generate(model, [p, prompts_of([9], seed=3)[0]], max_new_tokens=12, eos_ids=[eos])
    assert res.tokens[0] == free[: first + 1]
    assert res.stop_reason[0] == "eos"


def test_cache_full_stops(model):
    p = prompts_of([10], seed=4)[0]
    res = generate(model, [p], max_new_tokens=50, cache_len=16)
    # 10 prompt tokens + 6 fed-back tokens fill the cache; the 7th new token needs no slot
    assert len(res.tokens[0]) == 7
    assert res.stop_reason[0] == "cache_full"
    assert res.tokens[0] == naive_greedy(model, p, 7)


def test_sampling_is_seeded_and_batch_independent(model):
    ps = prompts_of([4, 8, 12], seed=5)
    sp = SamplingParams(temperature=1.0, seed=123)
    a = generate(model, ps, max_new_tokens=16, sampling=sp, batch_size=3).tokens
    b = generate(model, ps, max_new_tokens=16, sampling=sp, batch_size=3).tokens
    c = generate(model, ps, max_new_tokens=16, sampling=sp, batch_size=1).tokens
    d = generate(model, ps, max_new_tokens=16,
                 sampling=SamplingParams(temperature=1.0, seed=124)).tokens
    assert a == b == c
    assert a != d


def test_sampled_first_token_follows_the_distribution(model):
    """Many seeds, one prompt: the empirical first-token frequencies match softmax(logits/T)."""
    p = prompts_of([5], seed=6)[0]
    T = 1.5
    o = model(jnp.asarray([p]), jnp.arange(5)[None], model.init_cache(1, 5))
    probs = np.asarray(jax.nn.softmax(o.logits[0, -1] / T))
    n = 3000
    res = generate(model, [p] * n, max_new_tokens=1, batch_size=n,
                   sampling=SamplingParams(temperature=T, seed=0))
    counts = np.bincount([t[0] for t in res.tokens], minlength=CFG.vocab_size)
    # chi-square over tokens with expected count >= 5, others pooled
    exp = probs * n
    big = exp >= 5
    obs_b, exp_b = counts[big], exp[big]
    if (~big).any():
        obs_b = np.append(obs_b, counts[~big].sum())
        exp_b = np.append(exp_b, exp[~big].sum())
    chi2 = ((obs_b - exp_b) ** 2 / exp_b).sum()
    dof = len(obs_b) - 1
    # 99.9% quantile of chi-square is below dof + 4.5*sqrt(2*dof) + 10 for these dof
    assert chi2 < dof + 4.5 * np.sqrt(2 * dof) + 10, (chi2, dof)


def test_top_k_top_p_masks():
    logits = jnp.log(jnp.array([[0.4, 0.3, 0.15, 0.1, 0.05]]))
    keep = lambda lp: np.isfinite(np.asarray(lp[0]))  # noqa: E731
    assert keep(process_logits(logits, 1.0, 2, 1.0)).tolist() == [1, 1, 0, 0, 0]
    # top-p 0.7: 0.4 + 0.3 reaches 0.7 -> two tokens; 0.71 needs the third
    assert keep(process_logits(logits, 1.0, 0, 0.7)).tolist() == [1, 1, 0, 0, 0]
    assert keep(process_logits(logits, 1.0, 0, 0.71)).tolist() == [1, 1, 1, 0, 0]
    assert keep(process_logits(logits, 1.0, 0, 1.0)).all()
    # top-k then top-p on the renormalised survivors: k=3 -> (0.47, 0.35, 0.18)
    assert keep(process_logits(logits, 1.0, 3, 0.8)).tolist() == [1, 1, 0, 0, 0]
    lp = process_logits(logits, 1.0, 2, 1.0)
    np.testing.assert_allclose(np.exp(np.asarray(lp[0, :2])), [0.4 / 0.7, 0.3 / 0.7], rtol=1e-6)
    # temperature: log-probs of softmax(logits / T)
    lp = process_logits(logits, 2.0, 0, 1.0)
    np.testing.assert_allclose(np.asarray(lp), np.asarray(jax.nn.log_softmax(logits / 2.0)),
                               rtol=1e-6)


def test_top_k_sampling_never_leaves_the_top_k(model):
    ps = prompts_of([5], seed=7)
    sp = SamplingParams(temperature=1.0, top_k=3, seed=1)
    res = generate(model, ps * 64, max_new_tokens=1, batch_size=64, sampling=sp)
    o = model(jnp.asarray(ps), jnp.arange(5)[None], model.init_cache(1, 5))
    top3 = set(np.argsort(-np.asarray(o.logits[0, -1]))[:3].tolist())
    got = {t[0] for t in res.tokens}
    assert got <= top3 and len(got) > 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-1.0), "temperature"),
    (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=-2), "top_k"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
])
def test_invalid_sampling_parameters(kwargs, match):
    with pytest.raises(SamplingError, match=match):
        SamplingParams(**kwargs)


def test_bad_inputs(model):
    with pytest.raises(GenerationError, match="prompt 1 is empty"):
        generate(model, [[1, 2], []], max_new_tokens=4)
    with pytest.raises(GenerationError,
                       match=r"prompt 0 has 40 tokens, longer than the cache \(32\)"):
        generate(model, [list(range(40))], max_new_tokens=4, cache_len=32)
    with pytest.raises(GenerationError, match="outside the vocabulary"):
        generate(model, [[1, 2, 500]], max_new_tokens=4)
    with pytest.raises(GenerationError, match="max_new_tokens"):
        generate(model, [[1, 2]], max_new_tokens=0)
    with pytest.raises(GenerationError, match="not text"):
        generate(model, "hello", max_new_tokens=3)
    with pytest.raises(GenerationError, match="context length"):
        generate(model, [[1] * 1100], max_new_tokens=3)
    for bs in (0, -2, 1.5, True):  # 0 is not "all prompts" (that is None)
        with pytest.raises(GenerationError, match="batch_size must be an integer >= 1"):
            generate(model, [[1, 2]], max_new_tokens=3, batch_size=bs)


def test_prompt_buckets_limit_recompiles(model):
    from specjax import engine

    assert [bucket_length(n) for n in (1, 16, 17, 100, 256, 257, 600)] == [
        16, 16, 32, 128, 256, 512, 768]
    # the default cache: the bucket + the new tokens, rounded up to 64 (the demo gives every
    # prompt the largest of these so that all share one decode loop)
    assert [engine.cache_length(n, m) for n, m in ((20, 4), (40, 128), (67, 128), (300, 1))] == [
        64, 192, 256, 576]
    generate(model, prompts_of([20]), max_new_tokens=4)
    n = len(engine.COMPILED._cache)
    r = generate(model, prompts_of([25]), max_new_tokens=4)  # same bucket (32)
    assert len(engine.COMPILED._cache) == n and r.compile_s == 0.0


def test_prefill_padding_is_finer_than_the_cache_bucket(model):
    """Prompts of 70 and 100 tokens share a cache bucket (128), hence the decode loop, but are
    prefilled at 80 and 112 tokens: one new prefill program, no new loop, same tokens as alone."""
    from specjax import engine

    assert [engine.prefill_length(n) for n in (1, 17, 64, 65, 70, 100, 129, 257, 513, 600)] == [
        16, 32, 64, 80, 80, 112, 144, 288, 640, 640]
    for n in (1, 40, 65, 200, 300, 1000, 1025):
        assert engine.prefill_length(n) >= n
        assert engine.prefill_length(n) <= bucket_length(n)
    p70, p100 = prompts_of([70, 100])
    r100 = generate(model, [p100], max_new_tokens=4)
    keys = set(engine.COMPILED._cache)
    r70 = generate(model, [p70], max_new_tokens=4)
    new = set(engine.COMPILED._cache) - keys
    assert [key[0] for key in new] == [id(engine._prefill_jit)]
    # the 70-token prompt decodes the same in a batch padded to the 100-token prompt's length
    both = generate(model, [p70, p100], max_new_tokens=4)
    assert both.tokens[0] == r70.tokens[0] and both.tokens[1] == r100.tokens[0]


def test_compiled_program_cache_is_bounded(monkeypatch):
    """The engine keeps at most max_entries compiled programs (XLA:CPU executables hold memory
    mappings; a long process ran out of them): past that the least recently used quarter goes,
    a used program stays, and a dropped one compiles again."""
    from specjax.engine import _Compiled
    compiles = []

    class Fn:
        def lower(self, loop, *args, **statics):
            compiles.append(args[0].shape)
            return self

        def compile(self):
            return object()

    fn, c = Fn(), _Compiled(max_entries=4)
    shapes = [jnp.zeros((n,)) for n in range(1, 8)]
    first = {}
    for x in shapes[:4]:
        first[x.shape], dt = c.get(fn, None, (x,), {})
    assert len(compiles) == 4 and c.evicted == 0
    assert c.get(fn, None, (shapes[0],), {}) == (first[(1,)], 0.0)  # a hit: now most recent
    # full: the older half of 4 goes (3/4 kept, less room for the new one)
    c.get(fn, None, (shapes[4],), {})
    assert c.evicted == 2 and len(c._cache) == 3
    assert c.get(fn, None, (shapes[0],), {})[0] is first[(1,)]  # kept: it was used
    n = len(compiles)
    c.get(fn, None, (shapes[1],), {})  # dropped: compiled again
    assert len(compiles) == n + 1
    with pytest.raises(GenerationError, match="at least one compiled program"):
        _Compiled(max_entries=0)
    monkeypatch.setenv("SPECJAX_MAX_COMPILED", "lots")
    with pytest.raises(GenerationError, match="SPECJAX_MAX_COMPILED must be an integer"):
        _Compiled()


def test_greedy_token_is_argmax():
    """``sampling.greedy_token`` picks what ``jnp.argmax`` picks: the first maximum, ties and
    infinities included, and a row's first NaN; float32 and bfloat16, any leading shape."""
    import jax.numpy as jnp
    import numpy as np

    from specjax.sampling import greedy_token

    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 3, 257)).astype(np.float32)
    x[0, 0, [5, 9, 200]] = 9.0  # ties: the first
    x[1, 1, :] = -np.inf  # every entry -inf: index 0
    x[2, 2, [7, 100]] = np.inf
    x[3, 0, [11, 30]] = np.nan  # the first NaN, even before a larger entry
    x[3, 0, 2] = 50.0
    x[4] = np.round(x[4] * 2) / 2  # many ties
    x[5, 1, [3, 40]] = [np.inf, np.nan]  # a NaN after a +inf: the NaN
    for dt in (jnp.float32, jnp.bfloat16):
        a = jnp.asarray(x, dt)
        for shape in ((6, 3, 257), (18, 257), (257,)):
            b = a.reshape(shape) if shape != (257,) else a[0, 0]
            want = jnp.argmax(b, axis=-1).astype(jnp.int32)
            for f in (greedy_token, jax.jit(greedy_token)):  # eager and compiled
                got = f(b)
                assert got.dtype == jnp.int32
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert int(greedy_token(jnp.asarray(x[3, 0]))) == 11
    assert int(greedy_token(jnp.asarray(x[5, 1]))) == 40
