"""scripts/replay_prompt_lookup.py: its lookup mirrors the engine's drafter, and its replay
accounting (forwards, costs, the oracle ceiling) is right on sequences worked out by hand."""

import numpy as np
import pytest
from script_helpers import load_script


@pytest.fixture(scope="module")
def rp():
    return load_script("replay_prompt_lookup")


def test_continuations_by_hand(rp):
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 1, 2]
    # no earlier [7, 1, 2]; [1, 2] at 4 (most recent) then at 0
    assert rp.continuations(seq, 3, 3, 2, count=2) == [(3, 7, 1), (3, 9, 1)]
    assert rp.continuations(seq, 3, 3, 2) == [(3, 7, 1)]
    assert rp.continuations(seq, 3, 3, 3) == []
    assert rp.continuations([5, 5], 4, 3, 1) == [(5,)]  # the window ends before the last token
    assert rp.continuations([5], 4, 3, 1) == []


def test_continuations_match_the_engine_drafter(rp):
    import jax.numpy as jnp

    from specjax.drafters.prompt_lookup import ngram_lookup

    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(2, 40))
        seq = rng.integers(0, 4, n).tolist()
        k, hi = int(rng.integers(1, 6)), int(rng.integers(1, 4))
        lo = int(rng.integers(1, hi + 1))
        buf = jnp.asarray([seq + [0] * (48 - n)], jnp.int32)
        tokens, avail = ngram_lookup(buf, jnp.asarray([n], jnp.int32), k, hi, lo)
        ours = rp.continuations(seq, k, hi, lo)
        engine = tuple(int(t) for t in np.asarray(tokens[0])[:int(avail[0])])
        assert (ours[0] if ours else ()) == engine, (seq, k, hi, lo)


def test_replay_accounting(rp):
    cost = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0]
    prompt = [1, 2, 3, 4, 5, 6]
    # the output copies the prompt: after its first token (from the prefill) one forward with
    # a 6-token draft (the continuation of the unigram [1]: 2..6 and the pending 1) accepts
    # all that is left
    fw, total = rp.replay(prompt, [1, 2, 3, 4, 5, 6],
                          lambda s: rp.continuations(s, 8, 3, 1), cost)
    assert (fw, total) == (1, cost[6])
    # nothing to copy: one token per forward, at the one-token cost
    fw, total = rp.replay([7, 8], [1, 2, 3], lambda s: rp.continuations(s, 8, 3, 1), cost)
    assert (fw, total) == (2, 2.0)
    assert rp.tree_nodes([(1, 2), (1, 3), (4,)]) == 4
    with pytest.raises(ValueError, match="past the cost curve"):
        rp.replay(prompt, [1, 2, 3, 4, 5, 6], lambda s: [tuple(range(20))], cost)


def test_oracle_is_a_ceiling(rp):
    rng = np.random.default_rng(1)
    cost = [1.0] * 10
    for _ in range(20):
        prompt = rng.integers(0, 3, 12).tolist()
        output = rng.integers(0, 3, 15).tolist()
        oracle = rp.oracle_forwards(prompt, output, 4)
        for lo in (1, 2):
            fw, _ = rp.replay(prompt, output, lambda s, lo=lo: rp.continuations(s, 4, 3, lo),
                              cost)
            assert oracle <= fw


def test_replay_with_the_engine_policy(rp):
    from specjax.policies.adaptive import AdaptivePolicy

    policy = AdaptivePolicy(4, cost=(1.0, 1.1, 1.2, 1.3, 1.4))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
    fw, total = rp.replay_policy(prompt, prompt + prompt[:6], policy)
    # the first token comes from the prefill; every forward yields >= 1 token, and copying
    # the prompt back lets the policy draft, so fewer forwards than tokens
    assert 1 <= fw < len(prompt) + 5 and total >= fw
    res = rp.analyse([(prompt, prompt + prompt[:6])], [1.0 + 0.1 * i for i in range(17)],
                     policy=policy)
    assert res["tokens"] == len(prompt) + 5
    assert res["oracle"]["k"] == 8
    for name in ("chain n2-3 k8", "chain n1-3 k8", "chain n2-3 k4", "tree n2-3 k8 C2"):
        assert res["oracle"]["tau"] >= res["strategies"][name]["tau"] > 1.0


def test_hindsight_takes_the_chain_steps_at_the_accepted_cost(rp):
    cost = [1.0 + 0.25 * i for i in range(17)]
    # copy of the prompt: the bigram [1, 2] matches at 0, the continuation 3..6 is accepted
    # in one forward and charged as a 4-token draft, not a 16-token one
    fw, total = rp.hindsight([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 9], cost)
    assert (fw, total) == (2, cost[4] + cost[0])
    rng = np.random.default_rng(2)
    for _ in range(30):
        prompt = rng.integers(0, 3, 12).tolist()
        output = rng.integers(0, 3, 20).tolist()
        h_fw, h_cost = rp.hindsight(prompt, output, cost, k=16)
        c_fw, c_cost = rp.replay(prompt, output, lambda s: rp.continuations(s, 16, 3, 2), cost)
        assert h_fw == c_fw and h_cost <= c_cost
        assert rp.oracle_forwards(prompt, output, 16) <= h_fw


def test_replay_policy_clips_k_to_the_budget(rp):
    import jax.numpy as jnp

    class Fixed8:
        """Always asks for 8 tokens; block cost = drafted count."""
        name, max_k = "fixed8", 8

        def _bucketed_cost(self):
            return [float(i) for i in range(9)]

        def init(self, b):
            return ()

        def decide(self, state, ctx):
            return jnp.asarray([8], jnp.int32)

        def update(self, state, k, nd, na):
            return state

    prompt = [5, 6, 0, 1, 2, 3, 4, 5, 6]
    out = [0, 1, 2, 3, 4, 5, 6]  # 7 tokens, all but the first drafted from the prompt
    # unclipped: the suffix [6, 0] continues with 7 tokens (1..6 and the pending 0), all
    # drafted; clipped to the 7-token budget, k <= 7 - 1 - 1 = 5 is drafted
    assert rp.replay_policy(prompt, out, Fixed8()) == (1, 7.0)
    assert rp.replay_policy(prompt, out, Fixed8(), max_new=7) == (1, 5.0)


def test_costed_oracle_by_hand_and_as_a_ceiling(rp):
    cost = [1.0 + 0.25 * i for i in range(17)]
    # after the prefill's 1, the run 2, 3 occurs at prompt position 1 (accepted, then the
    # correction 7), then 1, 2, 3 (accepted, then the correction 9); each step is charged
    # at the accepted length, not at k
    prompt, output = [1, 2, 3, 4], [1, 2, 3, 7, 1, 2, 3, 9]
    assert rp.best_copy(prompt + [1], [2, 3, 7], 16) == (2, 3)
    assert rp.best_copy([4, 4], [5], 16) == ()
    fw, total = rp.oracle(prompt, output, 16, block_cost=cost)
    assert (fw, total) == (2, cost[2] + cost[3])
    assert rp.oracle(prompt, output, 16) == (2, 0.0)  # free verification
    assert rp.oracle_forwards(prompt, output, 2) == 3  # at most 2 copied per step
    rng = np.random.default_rng(3)
    for _ in range(30):  # no lookup strategy, with hindsight length, beats the costed oracle
        prompt = rng.integers(0, 3, 12).tolist()
        output = rng.integers(0, 3, 20).tolist()
        o_fw, o_cost = rp.oracle(prompt, output, 16, block_cost=cost)
        for lo in (1, 2):
            h_fw, h_cost = rp.replay(
                prompt, output, lambda s, lo=lo: rp.continuations(s, 16, 3, lo), cost,
                charge=lambda cands, n: cost[n])
            assert o_fw <= h_fw and o_cost <= h_cost + 1e-9


def test_end_to_end_conversion(rp):
    # 1 s prefill + 4 s decode; the decode phase 2x faster: 5 s against 3 s
    assert rp.end_to_end(2.0, 1.0, 4.0) == pytest.approx(5.0 / 3.0)
    assert rp.end_to_end(1.0, 1.0, 4.0) == pytest.approx(1.0)
    assert rp.end_to_end(3.0, 0.0, 6.0) == pytest.approx(3.0)


def test_replay_policy_charges_the_given_costs_and_decides_with_its_own(rp):
    from specjax.policies.adaptive import AdaptivePolicy

    policy = AdaptivePolicy(4, cost=(1.0, 1.1, 1.2, 1.3, 1.4))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9]
    output = prompt + prompt[:6]
    fw, total = rp.replay_policy(prompt, output, policy)
    doubled = [2 * float(c) for c in policy._bucketed_cost()]
    fw2, total2 = rp.replay_policy(prompt, output, policy, block_cost=doubled)
    assert fw2 == fw and total2 == pytest.approx(2 * total)  # same decisions, other charges


@pytest.mark.parametrize("flag", ["--cost", "--policy-cost"])
def test_bad_cost_curve_is_a_clear_error_before_any_work(rp, flag, tmp_path, capsys):
    bad = tmp_path / "curve.json"
    bad.write_text('{"ks": [1, 2]}')
    # the model name is never loaded: the curve is checked first
    assert rp.main([flag, str(bad), "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "curve.json" in err and "not a verify-curve JSON" in err
    assert rp.main([flag, str(tmp_path / "missing.json"), "--model", "no-such-model"]) == 2
    assert "verify-curve file not found" in capsys.readouterr().err
