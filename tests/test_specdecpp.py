"""SpecDec++ (the ``specdec++`` policy and ``specjax train acceptance``): the stop rule by hand,
the carry threaded through every drafter kind, the recorded labels against the engine's own
acceptance counts, the weighted BCE by hand, fitting, greedy identity and bad heads."""

import json

import jax.numpy as jnp
import numpy as np
import pytest
from spec_helpers import make_target, mixed_prompts, noisy_copy

from specjax import drafters, methods
from specjax.drafters._chain import call_stop
from specjax.engine import generate
from specjax.errors import PolicyError
from specjax.heads import acceptance
from specjax.policies import POLICIES
from specjax.policies.base import DraftStep
from specjax.train.acceptance import fit_head, record, weighted_bce


class _LM:
    def __init__(self, model):
        self.model = model
        self.tokenizer = None


@pytest.fixture(scope="module")
def target():
    return make_target()


@pytest.fixture(scope="module")
def prompts():
    return mixed_prompts(3, seed=11)


@pytest.fixture(scope="module")
def plain(target, prompts):
    return [generate(target, [p], max_new_tokens=12).tokens[0] for p in prompts]


def position_head(path, drafter, lm, probs_by_pos, max_pos=8):
    """A head whose prediction depends on the draft position only: p_i = probs_by_pos[i]."""
    cfg = acceptance.AcceptanceHeadConfig(hidden_dim=acceptance.hidden_dim_of(drafter),
                                          width=max_pos, blocks=0, max_pos=max_pos)
    p = acceptance.init_params(cfg)
    p["w_in"][:] = 0
    p["w_in"][cfg.in_dim - max_pos:, :] = np.eye(max_pos)
    pr = np.asarray(probs_by_pos + [probs_by_pos[-1]] * (max_pos - len(probs_by_pos)))
    p["w_out"][:] = np.log(pr / (1 - pr))
    return acceptance.save(path, cfg, p, trained_for={
        "target": acceptance.target_key(lm),
        "drafter": {"name": drafter.name, "digest": acceptance.drafter_digest(drafter)}})


def _run_rule(policy, n, B=1):
    """Feeds positions 0..n-1 through the stop rule as a chain does; returns the draft length."""
    carry = jnp.zeros((B,), jnp.float32)
    probs = jnp.full((B, 4), 0.25)
    for i in range(n):
        cut, carry, last = call_stop(
            lambda st: policy.stop((), st),
            DraftStep(index=jnp.int32(i), token=jnp.zeros((B,), jnp.int32), probs=probs,
                      hidden=None, carry=carry))
        if bool(cut[0]):
            return i
        if bool(last[0]):  # kept, and no further draft forward
            return i + 1
    return n


def test_stop_rule_by_hand(target, tmp_path):
    lm = _LM(target)
    d = drafters.make("draft_model", target, k=8, layers=1)
    head = position_head(tmp_path / "h", d, lm, [0.9, 0.8, 0.5, 0.9])
    # running product: 0.9, 0.72, 0.36, 0.324 -> 1 - c: 0.1, 0.28, 0.64, 0.676
    mk = lambda **kw: POLICIES.build("specdec++", {"acc_head": str(head), **kw}, max_k=8)  # noqa
    assert _run_rule(mk(threshold=0.5), 8) == 3  # token 2 crossed: kept, token 3 dropped
    assert _run_rule(mk(threshold=0.5, keep_crossing=False), 8) == 2
    assert _run_rule(mk(threshold=0.25), 8) == 2
    assert _run_rule(mk(threshold=0.05), 8) == 1  # never below one token (k_min = 1)
    assert _run_rule(mk(threshold=0.05, k_min=4), 8) == 4
    # positions past the list repeat 0.9: 1 - c is 0.676 after token 3, 0.708 after token 4
    assert _run_rule(mk(threshold=0.69), 8) == 5
    assert _run_rule(mk(threshold=0.99), 8) == 8


@pytest.mark.parametrize("name,kw", [
    pytest.param("draft_model", dict(k=6, layers=1), marks=pytest.mark.long),
    pytest.param("eagle", dict(k=6), marks=pytest.mark.long),  # suite time: the tree runs
    ("eagle", dict(k=6, tree="dynamic:width=2,nodes=8")),
    pytest.param("medusa", dict(k=4), marks=pytest.mark.long),
], ids=["draft_model", "eagle", "eagle-tree", "medusa"])
def test_carry_reaches_every_drafter(target, prompts, plain, tmp_path, name, kw):
    """Every step drafts exactly the length the rule gives (3 with these predictions): the
    carry is threaded through the chain, tree and head drafters; outputs stay plain decoding
    (batch 3, mixed prompt lengths; batch 1 and a random head: test_extension_points)."""
    lm = _LM(target)
    d = drafters.make(name, target, **kw)
    head = position_head(tmp_path / "h", d, lm, [0.9, 0.8, 0.5, 0.9])
    pol = POLICIES.build("specdec++", {"acc_head": str(head), "threshold": 0.5}, max_k=d.max_k)
    res = generate(target, prompts, max_new_tokens=12, drafter=d, policy=pol, batch_size=3)
    assert res.tokens == plain
    # per draft position, the steps that drafted it: nothing past position 2
    for row in res.extra["drafted_at"]:
        assert row[2] > 0 and not any(row[3:]), row


def test_recorded_labels_match_the_engine(target, prompts):
    """Every step labels its accepted tokens 1 and its first rejection 0: the labels' sum is
    the accepted count the engine reports, the zeros are the steps with a rejection."""
    d = drafters.make("draft_model", target, k=4, draft_model=noisy_copy(target, 0.3))
    cfg = acceptance.AcceptanceHeadConfig(hidden_dim=0, width=8, blocks=1)
    x, y, pos, res = record(_LM(target), d, prompts, cfg, max_new_tokens=16, batch_size=3)
    assert x.shape == (len(y), cfg.in_dim) and len(pos) == len(y)
    acc = sum(res.extra["accepted"])
    assert 0 < acc < sum(res.extra["drafted"])  # some accepted, some rejected
    assert int(y.sum()) == acc
    acc_at = np.sum(res.extra["accepted_at"], axis=0)
    for i in range(4):  # accepted at position i: the steps that accepted it
        assert int(y[pos == i].sum()) == acc_at[i]
    # every drafting step labels its first position
    assert int((pos == 0).sum()) == np.sum(res.extra["drafted_at"], axis=0)[0]
    assert (pos >= 0).all() and (pos < 4).all()
    # the position one-hot in the features is the recorded position
    np.testing.assert_array_equal(np.argmax(x[:, -cfg.max_pos:], axis=1), pos)


def test_weighted_bce_by_hand():
    lg = jnp.asarray([2.0, -1.0, 0.5])
    lab = jnp.asarray([1.0, 0.0, 0.0])
    s = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    want = -(1 * np.log(s(2.0)) + 6 * np.log(1 - s(-1.0)) + 6 * np.log(1 - s(0.5))) / 13
    assert float(weighted_bce(lg, lab, 6.0)) == pytest.approx(want, rel=1e-5)


def test_fit_learns_a_separable_rule():
    rng = np.random.default_rng(0)
    cfg = acceptance.AcceptanceHeadConfig(hidden_dim=0, width=16, blocks=1)
    x = rng.normal(size=(2000, cfg.in_dim)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.float32)
    params, summary = fit_head(x, y, cfg, epochs=8, lr=3e-3, batch=128, w_reject=1.0,
                               progress=False)
    assert summary["after"]["val_loss"] < 0.5 * summary["before"]["val_loss"]
    assert summary["after"]["val_acc"] > 0.9


def test_bad_heads_and_options(target, tmp_path):
    lm = _LM(target)
    with pytest.raises(PolicyError, match="needs acc_head=DIR"):
        POLICIES.build("specdec++", {}, max_k=4)
    with pytest.raises(PolicyError, match="not found"):
        POLICIES.build("specdec++", {"acc_head": str(tmp_path / "nope")}, max_k=4)
    d = drafters.make("draft_model", target, k=4, layers=1)
    head = position_head(tmp_path / "h", d, lm, [0.9])
    for bad in ({"threshold": "1.5"}, {"threshold": "0"}, {"k_min": "-1"}):
        with pytest.raises(PolicyError):
            POLICIES.build("specdec++", {"acc_head": str(head), **bad}, max_k=4)
    # a head trained for another drafter: refused when the method is built
    with pytest.raises(PolicyError, match="trained for drafter 'draft_model', not 'eagle'"):
        methods.build("eagle", target, {"policy": "specdec++", "acc_head": str(head)})
    with pytest.raises(PolicyError, match="another draft_model drafter"):
        methods.build("draft_model", target, {"policy": "specdec++", "acc_head": str(head),
                                              "layers": "2"})
    with pytest.raises(PolicyError, match="drafts deterministic copies"):
        methods.build("prompt_lookup", target, {"policy": "specdec++", "acc_head": str(head)})
    conf = json.loads((head / "config.json").read_text())
    conf["trained_for"]["target"]["vocab_size"] = 999
    bad_t = tmp_path / "bad_t"
    bad_t.mkdir()
    (bad_t / "config.json").write_text(json.dumps(conf))
    (bad_t / "model.safetensors").write_bytes((head / "model.safetensors").read_bytes())
    with pytest.raises(PolicyError, match="another target"):
        methods.build("draft_model", target, {"policy": "specdec++", "acc_head": str(bad_t),
                                              "layers": "1"})
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "config.json").write_text((head / "config.json").read_text())
    (trunc / "model.safetensors").write_bytes((head / "model.safetensors").read_bytes()[:40])
    with pytest.raises(PolicyError, match="corrupt or truncated"):
        POLICIES.build("specdec++", {"acc_head": str(trunc)}, max_k=4)


class _StubTokenizer:
    eos_ids = ()

    def encode_chat(self, text):
        return [ord(c) % 64 for c in text][:20]


def test_train_acceptance_command_end_to_end(target, tmp_path, monkeypatch):
    """`specjax train acceptance` on the tiny model: chunks collected and resumed, settings
    checked, the head written and accepted by the policy for that drafter."""
    import argparse

    import specjax._runtime
    import specjax.tokenizer
    from specjax.train import acceptance as tacc

    data = tmp_path / "corpus"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"num_records": 1}))
    (data / "pool.jsonl").write_text("".join(
        json.dumps({"id": str(i), "prompt": f"prompt number {i} " * (i + 1)}) + "\n"
        for i in range(6)))
    lm = _LM(target)
    lm.tokenizer = _StubTokenizer()
    monkeypatch.setattr(specjax._runtime, "load_for_run", lambda *a, **k: lm)
    monkeypatch.setattr(specjax.tokenizer, "tokenizer_sha256", lambda tok: "stub")
    out = tmp_path / "out"

    def run(*extra):
        ap = tacc.add_flags(argparse.ArgumentParser())
        return tacc.main(ap.parse_args([
            "--out", str(out), "--method", "draft_model", "--method-arg", "layers=1",
            "--data", str(data), "--num-prompts", "4", "--chunk", "2", "--k", "3",
            "--max-new-tokens", "8", "--batch-size", "2", "--epochs", "2", "--quiet",
            *extra]))

    assert run() == 0
    files = sorted(out.glob("collect-*.npz"))
    assert [f.name for f in files] == ["collect-00000.npz", "collect-00001.npz"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] > 0 and summary["chunks"] == 2
    stamp = [f.stat().st_mtime_ns for f in files]
    assert run() == 0  # rerun: collection skipped, the head fitted again
    assert [f.stat().st_mtime_ns for f in files] == stamp
    with pytest.raises(PolicyError, match="other settings.*max_new_tokens"):
        run("--max-new-tokens", "9")
    m = methods.build("draft_model", target, {"layers": "1", "policy": "specdec++",
                                              "acc_head": str(out / "head")})
    assert m.policy.name == "specdec++"


def test_default_acc_head_is_the_one_shipped_for_this_drafter(target, tmp_path, monkeypatch):
    """Without acc_head, `specdec++` takes the shipped acceptance head trained for this very
    drafter (the policy's defaults_for_drafter hook, called by methods.build); a shipped head
    for another drafter is not taken; the drafter's digest is computed once per object."""
    from specjax.heads import shipped

    lm = _LM(target)
    d = drafters.make("draft_model", target, k=4, layers=1)
    other = drafters.make("draft_model", target, k=4, layers=2)
    monkeypatch.setattr(shipped, "ROOT", tmp_path)
    position_head(tmp_path / "for-other", other, lm, [0.9])
    with pytest.raises(PolicyError, match="needs acc_head=DIR"):
        methods.build("draft_model", target, {"policy": "specdec++", "layers": "1"})
    head = position_head(tmp_path / "for-this", d, lm, [0.9])
    m = methods.build("draft_model", target, {"policy": "specdec++", "layers": "1"})
    assert m.policy.acc_head == str(head)
    calls = []
    real = acceptance._digest
    monkeypatch.setattr(acceptance, "_digest", lambda dr: calls.append(dr) or real(dr))
    fresh = drafters.make("draft_model", target, k=4, layers=1)
    assert acceptance.drafter_digest(fresh) == acceptance.drafter_digest(fresh) == \
        acceptance.drafter_digest(d)
    assert len(calls) == 1  # `d`'s digest was cached when its head was written


def test_a_head_for_the_float_eagle_serves_its_w8a8_products(target, tmp_path, monkeypatch):
    """An EAGLE head whose products run in int8 (quantize=w8a8, the CPU default) is the same
    trained head for an acceptance head: the same digest, so the shipped acceptance head is
    found for it (it was not, 2026-11-28 to 11-29: `specdec++` on the default EAGLE-3 head
    on a CPU said that none ships); another head's still is not."""
    from specjax.heads import shipped

    lm = _LM(target)
    f = drafters.make("eagle", target, k=4, draft_vocab=48, quantize="none")
    q = drafters.make("eagle", target, k=4, draft_vocab=48, quantize="w8a8")
    other = drafters.make("eagle", target, k=4, draft_vocab=48, quantize="w8a8", seed=1)
    assert q.identity_digest is not None and f.identity_digest is None  # int8 products
    assert acceptance.drafter_digest(q) == acceptance.drafter_digest(f)
    assert acceptance.drafter_digest(other) != acceptance.drafter_digest(f)
    monkeypatch.setattr(shipped, "ROOT", tmp_path)
    head = position_head(tmp_path / "for-float", f, lm, [0.9])
    m = methods.build("eagle", target, {"policy": "specdec++", "quantize": "w8a8",
                                        "draft_vocab": "48"})
    assert m.policy.acc_head == str(head)
    with pytest.raises(PolicyError, match="needs acc_head=DIR"):
        methods.build("eagle", target, {"policy": "specdec++", "quantize": "w8a8",
                                        "draft_vocab": "48", "seed": "1"})


def test_pool_prompts_go_past_a_finished_corpus(tmp_path):
    """A corpus that answered its whole pool still yields prompts for acceptance heads: the
    same pool recipe's candidates that pool.jsonl does not hold, overlap-checked and
    length-capped as the corpus's were; a missing evaluation set and too small a pool are
    errors that say so."""
    from specjax.errors import DataError
    from specjax.train.acceptance import pool_prompts
    from specjax.train.pool import build_pool, normalize

    items = build_pool(0, 40, ["topics"], log=lambda *a: None)
    data = tmp_path / "corpus"
    data.mkdir()
    manifest = {"num_records": 12, "config": {"seed": 0, "sources": ["topics"],
                                              "max_prompt_tokens": 30, "chat": True},
                "pool": {"candidates": 40, "checked_against": ["builtin"]}}
    (data / "manifest.json").write_text(json.dumps(manifest))
    (data / "pool.jsonl").write_text("".join(
        json.dumps({"id": it.id, "prompt": it.prompt}) + "\n" for it in items[:12]))
    tok = _StubTokenizer()
    got = pool_prompts(data, tok, 5)
    answered = {normalize(it.prompt) for it in items[:12]}
    fresh = [it for it in build_pool(0, 80, ["topics"], log=lambda *a: None)
             if normalize(it.prompt) not in answered]
    assert [g["tokens"] for g in got] == [tok.encode_chat(it.prompt) for it in fresh[:5]]
    # a pool that is not used up is read first
    manifest["num_records"] = 10
    (data / "manifest.json").write_text(json.dumps(manifest))
    got = pool_prompts(data, tok, 3)
    assert [g["id"] for g in got[:2]] == [it.id for it in items[10:12]]
    assert got[2]["tokens"] == tok.encode_chat(fresh[0].prompt)
    manifest["config"]["max_prompt_tokens"] = 1  # every candidate too long
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="only 0 prompts.*asks for 1 more"):
        pool_prompts(data, tok, 3)
    manifest["pool"]["checked_against"] = [f"jsonl:{tmp_path / 'gone.jsonl'}"]
    (data / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="overlap check"):
        pool_prompts(data, tok, 5)


@pytest.mark.parametrize("conf", [{"format": "specjax-eagle-1"}, ["not", "a", "dict"]])
def test_a_file_of_another_format_is_named_in_the_error(tmp_path, conf):
    from specjax.errors import CheckpointError

    (tmp_path / "config.json").write_text(json.dumps(conf))
    (tmp_path / "model.safetensors").write_bytes(b"")
    got = repr(conf["format"]) if isinstance(conf, dict) else "None"
    with pytest.raises(CheckpointError, match=rf"config.json: format {got} is not "
                       rf"'{acceptance.FORMAT}': not an acceptance head"):
        acceptance.load(tmp_path)
