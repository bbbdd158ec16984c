"""Shared pieces of the speculative-decoding tests: the tiny target, prompts, the exact law of
three sampled tokens with a chi-square check, and the cache invariant."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.config import tiny_config
from specjax.models.loaders import random_model

CFG = tiny_config(vocab_size=64, num_layers=4)


def make_target():
    return random_model(CFG, seed=21)


def mixed_prompts(n, seed=0):
    """Prompts of 1..29 tokens; every other one repetitive so prompt lookup finds matches."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        length = int(rng.integers(1, 30))
        p = rng.integers(0, CFG.vocab_size, length).tolist()
        if i % 2:
            p = (p[:4] * 10)[:length + 8]
        out.append(p)
    return out


def sharp_tiny_pair():
    """(target, draft): 8-token vocabulary; the target's logits scaled up for sharper laws."""
    cfg = tiny_config(vocab_size=8, num_layers=2, hidden_size=32, intermediate_size=64,
                      num_heads=2, num_kv_heads=1)
    from specjax.models.weights import model_from_tensors, model_to_tensors

    t = model_to_tensors(random_model(cfg, seed=5))
    t = {k: v * (8.0 if "embed" in k or "lm_head" in k else 1.0) for k, v in t.items()}
    return model_from_tensors(cfg, t, source="test"), random_model(cfg, seed=6)


def noisy_copy(model, scale, seed=7):
    """The model with Gaussian noise (``scale`` times each tensor's std) on every weight."""
    from specjax.models.weights import model_from_tensors, model_to_tensors

    rng = np.random.default_rng(seed)
    t = {k: v + scale * v.std() * rng.standard_normal(v.shape).astype(np.float32)
         for k, v in model_to_tensors(model).items()}
    return model_from_tensors(model.cfg, t, source="noisy copy")


def three_token_law(target, prompt, temperature=1.0):
    """Exact p(x1) p(x2|x1) p(x3|x1,x2) over the 512 cells of an 8-token vocabulary (at
    ``temperature``)."""
    grid = np.array(list(itertools.product(range(8), repeat=3)))
    P = len(prompt)
    seqs = jnp.asarray(np.concatenate([np.tile(prompt, (512, 1)), grid], axis=1))
    T = P + 3
    o = target(seqs, jnp.broadcast_to(jnp.arange(T)[None], (512, T)), target.init_cache(512, T))
    pr = np.asarray(jax.nn.softmax(o.logits / temperature, axis=-1), np.float64)
    r = np.arange(512)
    want = pr[:, P - 1, :][r, grid[:, 0]] * pr[r, P, grid[:, 1]] * pr[r, P + 1, grid[:, 2]]
    assert abs(want.sum() - 1) < 1e-5
    return want


def chi_square_check(tokens, want):
    """Chi-square of sampled 3-token prefixes against ``want`` (cells with expected count < 5
    pooled); fails above the 99.9% quantile of chi-square(dof) (Wilson-Hilferty)."""
    n = len(tokens)
    counts = np.bincount([a * 64 + b * 8 + c for a, b, c in tokens], minlength=512)
    exp = want * n
    big = exp >= 5
    obs_b, exp_b = counts[big], exp[big]
    if (~big).any():
        obs_b = np.append(obs_b, counts[~big].sum())
        exp_b = np.append(exp_b, exp[~big].sum())
    chi2 = float(((obs_b - exp_b) ** 2 / exp_b).sum())
    dof = len(obs_b) - 1
    z = 3.09
    crit = dof * (1 - 2 / (9 * dof) + z * np.sqrt(2 / (9 * dof))) ** 3
    assert chi2 < crit, (chi2, crit, dof)


@nnx.jit
def full_cache(model, seq):
    B, T = seq.shape
    return model(seq, jnp.broadcast_to(jnp.arange(T)[None], (B, T)),
                 model.init_cache(B, T)).cache


def _check_rows(cache, ref, limits, what):
    for b, n in enumerate(limits):
        for layer in range(len(cache.k)):
            for name in ("k", "v"):
                got = np.asarray(getattr(cache, name)[layer][b, :, :n])
                want = np.asarray(getattr(ref, name)[layer][b, :, :n])
                np.testing.assert_allclose(got, want, atol=2e-5,
                                           err_msg=f"{what}: row {b}, layer {layer}, {name}")


def check_cache_after_every_step(target, d, budgets, seed=3):
    """Runs the speculative loop one step at a time (``max_steps``) for each budget and, after
    every committed step, checks every row's committed target cache against one causal forward
    over the row's whole sequence (entries before ``n`` do not depend on later tokens). A
    drafter that keeps its own KV cache (draft_model) is checked the same way against the draft
    model, over the entries its next proposal relies on (all but the newest committed one)."""
    from specjax.cache import KVCache
    from specjax.engine import make_loop
    from specjax.loop import prefill_jit, run_jit
    from specjax.verifiers import SamplingArrays

    loop = make_loop(target, drafter=d)
    _, params = nnx.split(target)
    arrays = SamplingArrays(jnp.float32(1.0), jnp.int32(0), jnp.float32(1.0))
    draft_model = nnx.merge(d.graphdef, d.params()) if hasattr(d, "graphdef") else None
    ps = mixed_prompts(3, seed=seed)
    B, P, S = 3, 32, 96
    toks = np.zeros((B, P), np.int32)
    for i, p in enumerate(ps):
        toks[i, :len(p)] = p
    lens = np.array([len(p) for p in ps], np.int32)
    steps_seen = 0
    for budget in budgets:
        st = prefill_jit(loop, params, d.params(), toks, lens, jnp.full((B,), budget),
                         jnp.zeros((B, 2), jnp.uint32), arrays, cache_len=S)
        first = True
        while first or not bool(np.asarray(st.done).all()):
            step = int(st.step)
            if not first:
                st = run_jit(loop, params, d.params(), st, arrays, jnp.int32(step + 1))
                assert int(st.step) == step + 1
                steps_seen += 1
            first = False  # the prefill's cache is checked too (budget 1 takes no step)
            seq, seq_len = np.asarray(st.seq), np.asarray(st.seq_len)
            cl = np.asarray(st.cache.lengths)
            assert (cl == seq_len - 1).all()
            what = f"budget {budget}, after step {int(st.step)}"
            _check_rows(st.cache, full_cache(target, jnp.asarray(seq[:, :S])), cl, what)
            if isinstance(st.draft_state, KVCache) and draft_model is not None:
                _check_rows(st.draft_state, full_cache(draft_model, jnp.asarray(seq[:, :S])),
                            np.maximum(cl - 1, 0), "draft cache, " + what)
    assert steps_seen >= len(budgets) + 1  # some budget took more than one step


@dataclasses.dataclass(frozen=True)
class IdlePolicy:
    """A test policy with idle steps: every row drafts ``max_k`` when its step count is a
    multiple of ``every`` (7: so six steps in a row draft nothing in the whole batch: the
    loop's idle path, with the EAGLE drafter's pending buffer filling up), and row 1 also on
    multiples of ``row1`` (5: steps where some rows draft and others do not)."""

    max_k: int
    every: int = 7
    row1: int = 5
    name: str = "idle-test"
    stops_mid_draft: bool = False

    def init(self, batch):
        return jnp.zeros((batch,), jnp.int32)

    def decide(self, state, ctx):
        row = jnp.arange(state.shape[0])
        go = (state % self.every == 0) | ((row == 1) & (state % self.row1 == 0))
        return jnp.where(go, self.max_k, 0).astype(jnp.int32)

    def update(self, state, k, n_draft, n_acc):
        return state + 1


def long_selected(request) -> bool:
    """Whether the run selects the ``long`` checks (``-m long``, ``-m "long or ..."``); the
    default ``-m 'not long'`` does not."""
    expr = request.config.getoption("-m") or ""
    return "long" in expr.replace("not long", "")
