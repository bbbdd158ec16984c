"""scripts/replay_suffix_bound.py: the copy oracle's runs and accounting by hand, agreement with
the prompt-lookup replay's (pure Python) oracle, and the per-part bound from a small journal."""

import numpy as np
import pytest
from script_helpers import load_script


@pytest.fixture(scope="module")
def rb():
    return load_script("replay_suffix_bound")


@pytest.fixture(scope="module")
def rp():
    return load_script("replay_prompt_lookup")


def test_longest_copy_by_hand(rb):
    text = np.array([1, 2, 3, 9, -1, 1, 2, 7], np.int64)
    assert rb.longest_copy(text, np.array([1, 2, 3, 4]), 8) == 3
    assert rb.longest_copy(text, np.array([1, 2, 3, 4]), 2) == 2  # at most k
    assert rb.longest_copy(text, np.array([2, 7]), 8) == 2  # a run at the text's end
    assert rb.longest_copy(text, np.array([9, 1]), 8) == 1  # not across the separator
    assert rb.longest_copy(text, np.array([5]), 8) == 0
    assert rb.longest_copy(text, np.array([], np.int64), 8) == 0


def test_oracle_matches_the_pure_python_oracle(rb, rp):
    rng = np.random.default_rng(0)
    block_cost = [0.0] * 17  # free verification: the forwards alone
    for _ in range(30):
        prompt = rng.integers(0, 4, 10).tolist()
        output = rng.integers(0, 4, 20).tolist()
        fw, total = rb.oracle_cost(np.zeros(0, np.int64), prompt, output, 5, block_cost)
        assert fw == rp.oracle_forwards(prompt, output, 5) + 1  # + the prefill's forward
        assert total == 0.0


def test_earlier_answers_are_a_source(rb):
    output = [7, 8, 9, 10, 11, 12]
    cost = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]
    # nothing to copy: the prefill's forward, then one per token, each a 1-token block
    assert rb.oracle_cost(np.zeros(0, np.int64), [1, 2], output, 6, cost) == (6, 5.0)
    # the same answer seen before: one forward gives the five tokens left, four of them
    # drafted (the fifth is the forward's own token; drafting it too would cost 3.5)
    seen = np.array(output, np.int64)
    assert rb.oracle_cost(seen, [1, 2], output, 6, cost) == (2, 3.0)


def test_replay_per_part(rb):
    def rec(part, prompt, tokens, wall, prefill, method_wall, forwards):
        return {"part": part, "prompt_ids": prompt,
                "runs": {"ar": {"tokens": tokens, "wall_s": wall, "prefill_s": prefill,
                                "forwards": len(tokens)},
                         "suffix": {"wall_s": method_wall, "forwards": forwards}}}

    answer = list(range(10, 19))  # 9 tokens: 8 plain steps after the prefill's
    records = [rec("round1", [1, 2, 3], answer, 1.0, 0.2, 0.8, 8),
               rec("round2", [4, 5], answer, 1.0, 0.2, 0.5, 3)]
    cost = np.array([1.0] + [2.0] * 16)
    rep = rb.replay(records, 16, cost)
    # round 1 copies nothing: plain decoding's time; round 2 copies its answer whole: one
    # 8-token draft at cost 2 of 8 plain steps' 0.8 s, so 0.2 + 0.8 * 2 / 8 = 0.4 s
    assert rep["round1"]["bound_outputs_speedup"] == pytest.approx(1.0)
    assert rep["round2"]["bound_outputs_speedup"] == pytest.approx(1.0 / 0.4)
    assert rep["round2"]["bound_everything_tau"] == pytest.approx(9 / 2)  # prefill + 1
    assert rep["round2"]["suffix_speedup"] == pytest.approx(2.0)
    assert rep["all"]["bound_outputs_speedup"] == pytest.approx(2.0 / 1.4)
    # a prompt copied from an earlier request counts for `everything` only
    records[1]["runs"]["ar"]["tokens"] = [1, 2, 3, 50]
    rep = rb.replay(records, 16, cost)
    assert rep["round2"]["bound_everything_tau"] > rep["round2"]["bound_outputs_tau"]
    assert rep["round2"]["bound_outputs_matched_tau"] <= rep["round2"]["bound_outputs_tau"]


def test_old_journal_refused(rb):
    with pytest.raises(SystemExit, match="no prompt ids"):
        rb.replay([{"part": "round1", "runs": {"ar": {"tokens": [1], "wall_s": 1.0}}}], 4,
                  [1.0] * 5)


def test_matched_continuations_by_hand(rb):
    text = np.array([5, 1, 2, 3, 1, 2, 4, -1, 9, 1, 2], np.int64)
    # the suffix [1, 2] occurs at 1 and 4 (continuations at 3 and 6); [9, 1, 2] nowhere earlier
    starts, depth = rb.matched_continuations(text, 24)
    assert depth == 2 and starts.tolist() == [3, 6]
    starts, depth = rb.matched_continuations(text, 1)  # the context cut at one token
    assert depth == 1 and starts.tolist() == [3, 6]
    starts, depth = rb.matched_continuations(np.array([3, 4, 5], np.int64), 24)
    assert depth == 0 and starts.size == 0
    # the suffix oracle picks the candidate that agrees longest: [1, 2] -> 4 ... (6), not 3
    output = [2, 4, -5]
    fw, _ = rb.oracle_cost(np.array([5, 1, 2, 3, 1, 2, 4], np.int64), [9, 1], output, 8,
                           [0.0] * 9, max_depth=24)
    assert fw == 2  # the prefill, then one forward: the draft [4] accepted, and the last token
    # the matched oracle never beats the copy-anywhere oracle
    rng = np.random.default_rng(3)
    for _ in range(20):
        src = rng.integers(0, 4, 30)
        prompt, out = rng.integers(0, 4, 6).tolist(), rng.integers(0, 4, 15).tolist()
        anywhere = rb.oracle_cost(src, prompt, out, 6, [0.0] * 7)[0]
        assert rb.oracle_cost(src, prompt, out, 6, [0.0] * 7, max_depth=24)[0] >= anywhere


def test_vote_by_hand(rb):
    # continuations at 0, 4, 8: [1, 2, 3], [1, 2, 9], [1, 5, -1 ...]: 1 by three votes, then 2
    # by two, then 3 and 9 tie: the most recent (9, at 6), then on from there
    text = np.array([1, 2, 3, 0, 1, 2, 9, 0, 1, 5, -1], np.int64)
    assert rb.vote(text, np.array([0, 4, 8]), 3, 32).tolist() == [1, 2, 9]
    assert rb.vote(text, np.array([0, 4, 8]), 9, 32).tolist() == [1, 2, 9, 0, 1, 5]
    assert rb.vote(text, np.array([0, 4, 8]), 5, 1).tolist() == [1, 5]  # the latest alone
    assert rb.vote(text, np.array([0, 4, 8]), 1, 32).tolist() == [1]
    assert rb.vote(text, np.zeros(0, np.int64), 5, 32).size == 0
    # the vote never beats the best candidate
    rng = np.random.default_rng(5)
    for _ in range(20):
        src = rng.integers(0, 3, 40)
        prompt, out = rng.integers(0, 3, 6).tolist(), rng.integers(0, 3, 15).tolist()
        best = rb.oracle_cost(src, prompt, out, 6, [0.0] * 7, max_depth=24)[0]
        assert rb.oracle_cost(src, prompt, out, 6, [0.0] * 7, max_depth=24, rule="vote")[0] \
            >= best


def test_the_drafters_cut_is_charged_for_what_it_drafts(rb):
    # an earlier answer [1, 2, 3, 4] and the request's [1, 2, 7, 8]: after [1] the vote drafts
    # [2, 3, 4] (cut at the one-token match: [2]); the answer goes on with 2, 7
    src = np.array([1, 2, 3, 4], np.int64)
    cost = [1.0, 1.25, 1.5, 1.75, 2.0]
    fw, total = rb.oracle_cost(src, [0], [1, 2, 7], 4, cost, max_depth=24, rule="drafter")
    assert (fw, total) == (2, 1.25)  # [2] drafted and accepted, 7 the bonus token
    fw, total = rb.oracle_cost(src, [0], [1, 2, 7, 5, 5], 4, cost, max_depth=24,
                               rule="drafter", cut=(0.1, 4.0))
    # [2, 3, 4] drafted, [2] accepted: charged for three; then nothing matches [.., 7], [5]
    assert (fw, total) == (4, 1.75 + 1.0 + 1.0)


def _cheapest_by_brute_force(rb, sources, prompt, output, k, cost, **kw):
    """Every path through the answer (any accepted length up to each position's reach)."""
    out = np.asarray(output, np.int64)

    def go(pos):
        if pos >= len(out):
            return 0.0
        text = np.concatenate([sources, [-1], np.asarray(prompt, np.int64), out[:pos]])
        reach, _ = rb.draft_at(text, out[pos:pos + k], k, kw.get("max_depth"),
                               kw.get("rule", "best"), 32, (0.1, 1.0))
        return min(cost[n] + go(pos + n + 1) for n in range(reach + 1))

    return go(1)


def test_oracles_find_the_cheapest_path_not_the_longest_drafts(rb):
    # a 2-token draft costs more than two 1-token drafts' worth: greedy longest drafts lose
    cost = [1.0, 1.1, 3.0, 3.0, 3.0]
    answer = [4, 5, 6, 7, 8, 9, 10]
    fw, total = rb.oracle_cost(np.array(answer, np.int64), [1], answer, 4, cost)
    assert total == pytest.approx(3 * 1.1) and fw == 4  # three steps of one drafted token
    rng = np.random.default_rng(7)
    for _ in range(15):
        src = rng.integers(0, 3, 25)
        prompt, out = rng.integers(0, 3, 5).tolist(), rng.integers(0, 3, 10).tolist()
        cost = np.sort(rng.uniform(1.0, 3.0, 5))
        for kw in ({}, {"max_depth": 24}, {"max_depth": 24, "rule": "vote"}):
            got = rb.oracle_cost(src, prompt, out, 4, cost, **kw)[1]
            assert got == pytest.approx(_cheapest_by_brute_force(rb, src, prompt, out, 4, cost,
                                                                 **kw))
