"""The engine's extension points: declared target features, acceptance rules behind one
protocol, the policies' mid-draft stop hook, typed method options, one decode path with the
budget as an array, and greedy identity for every registered drafter x policy pair."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from spec_helpers import long_selected, make_target, mixed_prompts

from specjax import drafters, methods
from specjax.drafters.base import DRAFTERS
from specjax.engine import generate, make_loop
from specjax.errors import DrafterError, PolicyError, VerifierError
from specjax.features import FeatureSpec
from specjax.loop import prefill_jit, run_jit
from specjax.policies import POLICIES
from specjax.sampling import SamplingParams
from specjax.tree import TreeSpec
from specjax.verifiers import VERIFIERS, SamplingArrays


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(3, seed=11)


@pytest.fixture(scope="module")
def plain(target, prompts):
    """Plain decoding of each prompt alone (the reference of every identity test)."""
    return [generate(target, [p], max_new_tokens=10).tokens[0] for p in prompts]


# ----------------------------------------------------------------------------- features


@dataclasses.dataclass(frozen=True)
class FeatureProbe:
    """Drafts like ``inner`` and records, at each committed position, the target features the
    loop hands over (prefill: the prompt; each step: the root and the accepted nodes)."""

    inner: object
    features: FeatureSpec = FeatureSpec(layers=(0, -1), final_hidden=True, logits=True)
    name: str = "feature_probe"

    def __getattr__(self, item):  # max_k, tree, deterministic: the inner drafter's
        return getattr(self.inner, item)

    def params(self):
        return self.inner.params()

    def init(self, params, target, prompt_tokens, prompt_lens, cache_len, features):
        B, P = prompt_tokens.shape
        L = cache_len + 2

        def buf(a):
            return jnp.zeros((B, L) + a.shape[2:], a.dtype).at[:, :P].set(a)

        rec = features.map(buf)
        return rec, self.inner.init(params, target, prompt_tokens, prompt_lens, cache_len,
                                    features)

    def propose(self, params, target, state, ctx, k, greedy, stop=None):
        rec, inner = state
        tree, inner, cache = self.inner.propose(params, target, inner, ctx, k, greedy, stop)
        return tree, (rec, inner), cache

    def update(self, params, state, ctx, n_acc, tree, path, features):
        rec, inner = state
        B, M = features.final_hidden.shape[:2]
        i = jnp.arange(M)[None]
        start = ctx.target_cache.lengths - (n_acc + 1)  # the root's position
        L = rec.final_hidden.shape[1]
        pos = jnp.where(ctx.live[:, None] & (i <= n_acc[:, None]), start[:, None] + i, L)
        rows = jnp.arange(B)[:, None]
        rec = jax.tree.map(lambda r, f: r.at[rows, pos].set(f, mode="drop"), rec, features)
        inner = self.inner.update(params, inner, ctx, n_acc, tree, path, features)
        return rec, inner


@pytest.mark.parametrize("tree", [None, "dynamic:width=2,nodes=6"], ids=["chain", "tree"])
@pytest.mark.parametrize("batch", [1, pytest.param(3, marks=pytest.mark.long)])  # suite time
def test_drafter_gets_the_features_of_a_plain_forward(target, prompts, tree, batch):
    """At every committed position, the features handed to the drafter (from the prefill and
    the verify forwards) equal those of one plain forward over the row's committed tokens."""
    inner = drafters.make("early_exit", target, k=3, exit_layer=2, tree=tree)
    d = FeatureProbe(inner)
    loop = make_loop(target, drafter=d)
    _, params = nnx.split(target)
    ps = prompts[:batch]
    B, P, S = batch, 32, 64
    toks = np.zeros((B, P), np.int32)
    for i, p in enumerate(ps):
        toks[i, :len(p)] = p
    lens = np.array([len(p) for p in ps], np.int32)
    arrays = SamplingArrays(jnp.float32(1.0), jnp.int32(0), jnp.float32(1.0))
    st = prefill_jit(loop, params, None, toks, lens, jnp.full((B,), 12),
                     jnp.zeros((B, 2), jnp.uint32), arrays, cache_len=S)
    st = run_jit(loop, params, None, st, arrays)
    assert int(st.step) >= 3 and int(np.sum(st.metrics.accepted)) > 0  # drafts were accepted
    rec = st.draft_state[0]
    seq, seq_len = np.asarray(st.seq), np.asarray(st.seq_len)
    T = int(seq_len.max())
    o = target(jnp.asarray(seq[:, :T]), jnp.broadcast_to(jnp.arange(T)[None], (B, T)),
               target.init_cache(B, T), hidden_layers=(0, -1))
    want = {"hidden0": o.hidden[0], "hidden_last": o.hidden[1], "final": o.final_hidden,
            "logits": o.logits}
    got = {"hidden0": rec.hidden[0], "hidden_last": rec.hidden[1], "final": rec.final_hidden,
           "logits": rec.logits}
    for b in range(B):
        n = seq_len[b] - 1  # committed tokens (the pending one has no features yet)
        for key in want:
            np.testing.assert_allclose(np.asarray(got[key][b, :n]), np.asarray(want[key][b, :n]),
                                       atol=2e-5, rtol=2e-5, err_msg=f"row {b}, {key}")


def test_feature_spec_is_checked(target):
    d = FeatureProbe(drafters.make("early_exit", target, k=2, exit_layer=2),
                     features=FeatureSpec(layers=(7,)))
    with pytest.raises(DrafterError, match="layers \\[7\\].*4-layer target"):
        generate(target, [[1, 2, 3]], max_new_tokens=3, drafter=d)
    with pytest.raises(DrafterError, match="tuple of layer indices"):
        FeatureSpec(layers=[1])


# ----------------------------------------------------------------------------- verifiers


def test_verifier_registry_and_exactness(target, prompts, plain):
    assert {"greedy", "chain_sampling", "tree_sampling", "typical"} <= set(VERIFIERS.names())
    d = drafters.make("early_exit", target, k=3, exit_layer=2)
    for name in ("greedy", "exact", None):
        r = generate(target, prompts, max_new_tokens=10, drafter=d, verifier=name)
        assert r.tokens == plain and r.exact and r.extra["verifier"] == "greedy"
    # a lossy rule is reported as such, even where its tokens happen to match
    never = VERIFIERS.build("typical", {"threshold": "1.0", "alpha": "1e9"})  # accepts nothing
    r = generate(target, prompts, max_new_tokens=10, drafter=d, verifier=never)
    assert r.tokens == plain and not r.exact and r.extra["verifier"] == "typical"
    assert sum(r.extra["accepted"]) == 0
    always = VERIFIERS.build("typical", {"threshold": "1e-9"})  # accepts every draft
    r = generate(target, prompts, max_new_tokens=10, drafter=d, verifier=always)
    assert r.extra["accepted"] == r.extra["drafted"] and sum(r.extra["drafted"]) > 0
    with pytest.raises(VerifierError, match="needs greedy decoding"):
        generate(target, prompts, max_new_tokens=3, drafter=d, verifier="greedy",
                 sampling=SamplingParams(temperature=1.0))
    tree_d = drafters.make("early_exit", target, k=2, exit_layer=2, tree="topk:width=2")
    with pytest.raises(VerifierError, match="verifies chains.*tree_sampling"):
        generate(target, prompts, max_new_tokens=3, drafter=tree_d, verifier="chain_sampling",
                 sampling=SamplingParams(temperature=1.0))
    with pytest.raises(VerifierError, match="threshold must be in"):
        VERIFIERS.build("typical", {"threshold": "2"})


def test_lossy_rule_is_marked_in_the_bench_summary(target):
    from specjax.bench.report import format_table, summarize
    from specjax.bench.runner import Run

    d = drafters.make("early_exit", target, k=2, exit_layer=2)
    built = {"ar": methods.Method(None, None, None),
             "early_exit": methods.Method(d, POLICIES.build("fixed", max_k=2),
                                          VERIFIERS.build("typical", {}))}
    runs = [Run("ar", "c", 0, ["p"], 4, 1.0, 4, None, None, [[1, 2, 3, 4]], 1),
            Run("early_exit", "c", 0, ["p"], 4, 0.5, 2, [2, 2], [1, 1], [[1, 2, 3, 4]], 1)]
    s = summarize(runs, ["ar", "early_exit"], ["c"], {}, built, greedy=True)
    row = [r for r in s["rows"] if r["method"] == "early_exit" and r["category"] == "c"][0]
    assert row["exact"] is False and row["lossy_verifier"] == "typical"
    assert "identical_to_ar" not in row  # never claimed for a lossy rule
    assert row["config"]["verifier"] == "typical" and row["config"]["exact"] is False
    assert "lossy" in format_table(s)


# ----------------------------------------------------------------------------- mid-draft stop


@POLICIES.register("_test_stop_after_two", doc="test policy: rows 1, 3, .. stop after one "
                   "token, others after two")
@dataclasses.dataclass(frozen=True)
class StopAfter:
    max_k: int = dataclasses.field(metadata={"option": False})
    name: str = dataclasses.field(default="_test_stop_after_two", init=False)
    stops_mid_draft: bool = dataclasses.field(default=True, init=False)

    def init(self, batch):
        return jnp.zeros((batch,), jnp.int32)  # steps seen (state reaches the hook)

    def decide(self, state, ctx):
        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def stop(self, state, step):
        odd = jnp.arange(step.token.shape[0]) % 2 == 1
        assert step.probs.shape[-1] <= 64  # the draft distribution reaches the hook
        return jnp.where(odd, step.index >= 1, step.index >= 2) & (state >= 0)

    def update(self, state, k, n_draft, n_acc):
        return state + 1


@pytest.mark.parametrize("tree", [None, "topk:width=2"], ids=["chain", "tree"])
def test_policy_stops_a_draft_mid_draft(target, prompts, plain, tree):
    """The hook runs inside the compiled draft loop: row 0 and 2 draft two tokens per step,
    row 1 one, although k = 4; nothing recompiles per k and the output stays exact."""
    d = drafters.make("early_exit", target, k=4, exit_layer=2, tree=tree)
    r = generate(target, prompts, max_new_tokens=10, drafter=d, batch_size=3,
                 policy=POLICIES.build("_test_stop_after_two", max_k=4))
    assert r.tokens == plain
    for row, at in enumerate(r.extra["drafted_at"]):
        assert at[0] > 0 and at[2:] == [0, 0], (row, at)
        assert (at[1] == 0) == (row % 2 == 1), (row, at)


def test_confidence_policy(target, prompts, plain):
    d = drafters.make("draft_model", target, k=4)
    fixed = generate(target, prompts, max_new_tokens=10, drafter=d)
    r0 = generate(target, prompts, max_new_tokens=10, drafter=d,
                  policy=POLICIES.build("confidence", {"threshold": "0"}, max_k=4))
    assert r0.tokens == plain and r0.extra["drafted"] == fixed.extra["drafted"]
    r1 = generate(target, prompts, max_new_tokens=10, drafter=d,
                  policy=POLICIES.build("confidence", {"threshold": "1"}, max_k=4))
    assert r1.tokens == plain and sum(r1.extra["drafted"]) == 0
    # the tiny random draft model's top-1 probabilities lie around 0.020-0.026
    mid = generate(target, prompts, max_new_tokens=10, drafter=d,
                   policy=POLICIES.build("confidence", {"threshold": "0.022"}, max_k=4))
    assert mid.tokens == plain
    assert 0 < sum(mid.extra["drafted"]) < sum(fixed.extra["drafted"])
    with pytest.raises(PolicyError, match="threshold must be in \\[0, 1\\]"):
        POLICIES.build("confidence", {"threshold": "1.5"}, max_k=4)


# ----------------------------------------------------------------------------- identity


# every drafter under the fixed and adaptive policies; every policy under prompt lookup, a draft
# model and a head drafter (the pairs grow as products otherwise: the suite's time)
POLICY_DRAFTERS = ("prompt_lookup", "draft_model", "eagle")  # Hydra: under fixed/adaptive
# dsde reads the target-draft divergence and specdec++ the draft distribution: drafters with a
# draft distribution only (prompt lookup is refused: test_dsde_needs_a_draft_distribution,
# test_specdecpp.py::test_bad_heads_and_options)
# The default run checks every policy under the head drafter (the drafter the policies are
# built for: it has a draft distribution); the two other drafters' policy pairs run under -m long.
_DEFAULT_POLICY_DRAFTER = "eagle"
PAIRS = sorted({(d, p) for d in DRAFTERS.names() for p in ("fixed", "adaptive")} |
               {(d, p) for d in POLICY_DRAFTERS for p in POLICIES.names()
                if not p.startswith("_") and (d, p) not in (("prompt_lookup", "dsde"),
                                                            ("prompt_lookup", "specdec++"))})
# suite time: the head drafter's pairs with policies that only decide k before drafting and
# learn after verifying, as adaptive does (their rules: tests/test_policies.py by hand)
_HEAD_LONG = ("heuristic", "gammatune", "gammatune+", "pearl")
# suite time: under `adaptive` the default run keeps one drafter per family (POLICY_DRAFTERS:
# model-free, a separate model, a head); the other drafters' fixed and adaptive pairs run under
# -m long (their own files check greedy identity under their default policy,
# tests/test_idle_steps.py the heads under a policy that backs off)
PAIR_PARAMS = [pytest.param(d, p, id=f"{d}-{p}", marks=(
    () if (d == _DEFAULT_POLICY_DRAFTER and p not in _HEAD_LONG + ("fixed",))
    or (p == "adaptive" and d in POLICY_DRAFTERS) else pytest.mark.long))
    for d, p in PAIRS]
POLICY_ARGS = {"confidence": {"threshold": "0.022"},  # drafts some on the tiny random model
               "gammatune+": {"threshold": "0.022"},
               "smartspec": {"prior": "0.95", "per_row": "true"}}  # drafts, then backs off



@pytest.mark.parametrize("drafter,policy", PAIR_PARAMS)
def test_every_drafter_policy_pair_is_greedy_identical(target, prompts, plain, drafter,
                                                        policy, tmp_path, release_compiled,
                                                        request):
    """Every registered drafter and every registered policy (see PAIRS), batch 1 and 3 (mixed
    prompt lengths): token for token plain decoding (the head drafter's pairs with the other
    policies at batch 3 only unless -m selects long tests)."""
    args = {"policy": policy, **POLICY_ARGS.get(policy, {})}
    if policy == "batch_table":  # a profiled table: k 3 at batch 1, 1 from batch 2 on
        from specjax.policies.batch_table import FORMAT, table_key, write_table

        args["table"] = str(write_table(tmp_path / "t.json", {
            "format": FORMAT, "key": table_key(target), "entries": {"1": {"k": 3},
                                                                    "2": {"k": 1}}}))
    if drafter == "early_exit":
        args["exit_layer"] = "2"
    if drafter == "eagle":  # its chain default is one token: give the policies room to vary k
        args["k"] = "4"
    if policy == "specdec++":  # a random acceptance head for this drafter
        from specjax.heads import acceptance

        d0 = methods.build(drafter, target, {}).drafter
        cfg = acceptance.AcceptanceHeadConfig(hidden_dim=acceptance.hidden_dim_of(d0), width=8,
                                              blocks=1)
        args["acc_head"] = str(acceptance.save(
            tmp_path / "acc", cfg, acceptance.init_params(cfg, seed=1), trained_for={
                "drafter": {"name": drafter, "digest": acceptance.drafter_digest(d0)}}))
        args["threshold"] = "0.6"
    m = methods.build(drafter, target, args)
    assert (m.drafter.name, m.policy.name) == (drafter, policy)
    # batch 1 under -m long for the head drafter's policy pairs beyond fixed/adaptive (suite
    # time: twelve policies; the policies' per-row state is exercised by batch 3)
    full = long_selected(request)
    if full or policy in ("fixed", "adaptive") or drafter != _DEFAULT_POLICY_DRAFTER:
        one = generate(target, prompts[:1], max_new_tokens=10, drafter=m.drafter,
                       policy=m.policy, batch_size=1)
        assert one.tokens == plain[:1]
    three = generate(target, prompts, max_new_tokens=10, drafter=m.drafter, policy=m.policy,
                     batch_size=3)
    assert three.tokens == plain


def test_dsde_needs_a_draft_distribution(target, prompts):
    for name, args in (("prompt_lookup", {}), ("draft_model", {"tree": "topk:width=2"})):
        m = methods.build(name, target, {"policy": "dsde", **args})
        with pytest.raises(PolicyError, match="needs a chain drafter with a draft distribution"):
            generate(target, prompts[:1], max_new_tokens=4, drafter=m.drafter, policy=m.policy)


# ----------------------------------------------------------------------------- options


def test_typed_method_options(target):
    m = methods.build("early_exit", target, {"tree": "dynamic:width=2,nodes=5", "k": "3",
                                             "exit_layer": "2"})
    assert m.drafter.tree.describe() == "dynamic(width=2, depth=3, N=5)"
    m = methods.build("layer_skip", target, {"tree": "levels:2.2:iid", "skip_attn": "1-2"})
    assert (m.drafter.tree.sibling, m.drafter.skip_attn) == ("iid", (1, 2))
    # the spellings of recorded runs (configs/trees.py) still give the same tree
    old = methods.build("early_exit", target, {"tree": "dynamic", "tree_width": "3",
                                               "tree_nodes": "10"})
    new = methods.build("early_exit", target, {"tree": "dynamic:width=3,nodes=10"})
    assert old.drafter.tree == new.drafter.tree == TreeSpec.dynamic(3, 3, 10)
    old = methods.build("layer_skip", target, {"tree": "levels:2.2", "sibling": "iid"})
    assert old.drafter.tree.sibling == "iid"
    m = methods.build("prompt_lookup", target, {"policy": "confidence", "threshold": "0.3"})
    assert (m.policy.name, m.policy.threshold, m.policy.max_k) == ("confidence", 0.3, 16)
    m = methods.build("draft_model", target, {"verifier": "typical", "alpha": "0.5"})
    assert (m.verifier.name, m.verifier.alpha) == ("typical", 0.5)
    with pytest.raises(DrafterError, match="'early_exit' does not take 'banana'.*accepts:.*"
                       "exit_layer.*threshold|'early_exit' does not take 'banana'.*exit_layer"):
        methods.build("early_exit", target, {"banana": "1"})
    with pytest.raises(DrafterError, match="drafter 'prompt_lookup': k must be an integer, "
                       "got 'x'"):
        methods.build("prompt_lookup", target, {"k": "x"})
    with pytest.raises(DrafterError, match="decay= only applies to policy=adaptive"):
        methods.build("early_exit", target, {"decay": "0.5", "policy": "fixed"})
    with pytest.raises(DrafterError, match="threshold= only applies to policy=confidence or "
                       "policy=gammatune\\+ or policy=specdec\\+\\+ or verifier=typical"):
        methods.build("early_exit", target, {"threshold": "0.5"})
    with pytest.raises(DrafterError, match="unknown verifier 'fuzzy'; available: "
                       "chain_sampling, greedy"):
        methods.build("early_exit", target, {"verifier": "fuzzy"})
    with pytest.raises(DrafterError, match="tree=topk takes ':' options width, depth"):
        methods.build("early_exit", target, {"tree": "topk:nodes=3"})
    with pytest.raises(PolicyError, match="policy 'adaptive': decay must be a number"):
        methods.build("prompt_lookup", target, {"decay": "fast"})


def test_registry_describe_lists_every_option():
    table = methods.registry_table()
    names = {k: [e["name"] for e in v] for k, v in table.items()}
    assert set(names["drafters"]) == set(DRAFTERS.names())
    assert {"fixed", "adaptive", "confidence"} <= set(names["policies"])
    pl = next(e for e in table["drafters"] if e["name"] == "prompt_lookup")
    assert [(o["name"], o["type"], o["default"]) for o in pl["options"]] == [
        ("k", "int", 8), ("max_ngram", "int", 3), ("min_ngram", "int", 1)]
    ad = next(e for e in table["policies"] if e["name"] == "adaptive")
    assert "max_k" not in [o["name"] for o in ad["options"]]  # filled in from the drafter


def test_cli_methods_command(capsys):
    import json

    from specjax.cli import main

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in DRAFTERS.names() + ["adaptive", "confidence", "typical", "tree_sampling"]:
        assert f"  {name}: " in out
    assert "threshold (float, default 0.4)" in out
    # the chain defaults are listed too (a tree keeps the drafter's own)
    assert "    as a chain: policy=adaptive, idle_decay=0.995" in out
    assert "    as a chain above batch 1 without policy: policy=adaptive" in out
    assert out.count("    as a chain above batch 1 without policy: policy=adaptive, "
                     "min_gain=1.1") == 2  # the Medusa-1 and Hydra++ heads' margin
    assert ("    greedy at batch 1 without tree, k or policy: "
            "tree=dynamic:width=2,nodes=3,depth=3") in out
    assert ("    greedy at batch 1 without tree, k or policy: "
            "tree=fixed:0,1,0.0, policy=adaptive, idle_decay=0.995") in out
    assert ("    sampling at batch 1 without tree, k or policy: "
            "tree=fixed:0,1,0.0, policy=adaptive, idle_decay=0.995") in out
    assert out.count("    sampling at batch 1 without") == 1  # eagle's tree: greedy only
    assert main(["methods", "--json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["method_defaults"]["prompt_lookup"]["policy"] == "adaptive"
    assert js["chain_defaults"]["draft_model"] == {"policy": "adaptive", "idle_decay": 0.995}
    assert js["batched_chain_defaults"]["eagle"] == {"policy": "adaptive"}
    assert js["greedy_batch1_defaults"]["eagle"] == {"tree": "dynamic:width=2,nodes=3,depth=3"}
    assert js["greedy_batch1_defaults"]["medusa"] == {"tree": "fixed:0,1,0.0",
                                                      "policy": "adaptive", "idle_decay": 0.995}
    assert js["sampled_batch1_defaults"] == {"medusa": js["greedy_batch1_defaults"]["medusa"]}


# ----------------------------------------------------------------------------- one decode path


@pytest.mark.parametrize("method", ["ar", "prompt_lookup"])
def test_new_budget_does_not_recompile(target, method):
    """``max_new_tokens`` is an array in the loop: budgets that fit one cache length share
    both compiled programs (prompt of 20 tokens: cache 64 for budgets 4 and 30)."""
    from specjax import engine

    m = methods.build(method, target, {})
    p = mixed_prompts(1, seed=5)[0][:20] + [3] * (20 - len(mixed_prompts(1, seed=5)[0][:20]))
    kw = dict(drafter=m.drafter, policy=m.policy)
    a = generate(target, [p], max_new_tokens=4, **kw)
    n = len(engine.COMPILED._cache)
    b = generate(target, [p], max_new_tokens=30, **kw)
    assert len(engine.COMPILED._cache) == n and b.compile_s == 0.0
    assert len(a.tokens[0]) == 4 and len(b.tokens[0]) == 30
    assert b.tokens[0][:4] == a.tokens[0]


def test_plain_and_speculative_share_state_and_stopping(target):
    """One state type, one prefill and one stopping rule: plain decoding is the loop object
    with no drafter."""
    plain_loop = make_loop(target)
    spec_loop = make_loop(target, drafter=drafters.make("prompt_lookup", target, k=4))
    assert not plain_loop.speculative and plain_loop.K == 0
    assert spec_loop.speculative and spec_loop.K == 4
    assert hash(spec_loop) == hash(make_loop(target, drafter=spec_loop.drafter))
    r = generate(target, [[5, 6, 7]], max_new_tokens=6, eos_ids=(0,))
    assert r.extra == {"method": "ar", "exact": True, "numerics": "fast"}  # a bare Llama: fast
