"""Replays ``ngram``'s per-step choice offline, to weigh choice rules without timing them.

Greedy decoding commits the same tokens whatever is drafted, and every source's chain at an
output position depends only on the text before it (and on what the suffix cache and the
datastore had learnt before the question). So one recording run per question, with every
step idle (``min_gain`` so high that nothing is drafted), gives each source's chain at every
output position; a choice rule is then replayed over those chains in about a second:
which (source, length) it drafts at each step, how many tokens the text accepts, what every
source's estimate learns, and what the steps cost under a table of step costs in plain steps
(``--step-cost``, e.g. the costs fitted from a benchmark journal by
``scripts/step_costs_from_journal.py``; default: the mean of the fourth model-free run's
fits for ``ngram`` and prompt lookup).

Each recording is checked against a real run of the drafter on the question (same output;
its forwards, drafted and accepted tokens are printed above the replays: the default rule's
replay should give the same) and kept in ``--cache``, so other rules replay without running
the model. The drafter prices with the verify curve measured on this machine (cached; a new
machine measures its own, and the choices move with it): pass ``cost=`` in ``--method`` to
compare runs across machines. The rules:

* ``default``: the drafter's own (``ngram.py``'s ``plan``, with the curve the drafter was
  built with);
* ``cost=<curve>``: the same, priced by another verify curve (``fitted``: the step-cost table);
* ``prefer=<source>:<factor>``: a source's expected tokens scaled by ``factor`` in the choice;
* ``agree``: the length a chain's tokens are confirmed by another source's chain is drafted
  at the better of the two estimates (two sources that agree are rarely both wrong);
* ``first``: ``first_token=true`` (the first drafted position's acceptance apart);
* ``split=<f>``: where two sources' chains part, each one's chance past that point is
  scaled by ``f``;
* ``bylen[=w]``: each source's estimate kept apart by the length of the chain it offers
  (1, 2-3, 4-7, 8-15, 16: a short chain is a weak match), shrunk toward the source's
  pooled estimate with weight ``w`` (default ``prior_weight``); ``bylen:<source>:...``
  for the named sources only;
* ``tree2``: the chosen chain and a second source's chain where it parts from the first,
  verified as one tree (a bound on what two-branch trees could give: their cost is taken
  as a chain's of as many nodes);
* ``adaptive=<source>[+<source>...]``: that source alone under the ``adaptive`` policy's
  rule (its default for prompt lookup: one geometric estimate learnt from the drafted tokens
  only, ``k`` chosen before the lookup); with several, the first that offers a chain;
* ``set:<option>=<x>[;...]``: the default rule with other values of the drafter's numeric
  options (``prior``, ``prior_weight``, ``source_decay``, ``min_gain``);
* ``only=<source>``: that source alone under the same rule; ``without=<source>[+...]``:
  the others (the named sources still learn, as they would not: an upper bound);
* ``minlen=<source>:<n>[+...][&<rule>]``: that source's chains shorter than ``n`` are not
  offered nor learnt from (a minimum match), under ``<rule>`` (default: ``default``);
* ``meta=<sources>[:<decay>]``: each step ``ngram``'s choice or the ``adaptive`` rule's on
  those sources, whichever has had more committed tokens per step cost (decayed by
  ``decay``, default 0.9; the rule not followed is scored from the committed tokens: at
  least what it would have had accepted);
* ``oracle``: each step the (source, length) with the most actually accepted tokens per step
  cost, knowing the text (a bound, not a rule).

``--batch B`` replays the questions in consecutive groups of ``B`` as batches (each row
recorded alone, from what was learnt before its batch): every step one block for all rows,
as ``ngram`` chooses above batch 1 (``batch_choice``), costing ``--step-cost`` of that block
(pass the in-loop curve the drafter prices by, and the replay weighs only the estimates), with
the rules of ``replay_batch`` and, per rule, the accepted tokens the estimates promised for
the chosen drafts against those accepted (their optimism).

``--sources a,b,...`` replays the recording's named sources only (exact: each source's
estimate learns from its own chains alone), so recordings of a drafter with more sources
serve a drafter with fewer.

    python scripts/replay_ngram_choices.py --ids 161,163,165,167,169 \\
        --warm-journal docs/results/spec_bench_model_free_4.journal.jsonl
    python scripts/replay_ngram_choices.py --batch 4 --max-new-tokens 64 --ids 481,482,483,484 \\
        --warm-journal docs/results/ngram_b4_verify_in_place.journal.jsonl \\
        --step-cost 1:1,2:1.33,4:1.88,8:2.94,16:5.64,17:5.51 --rules default oracle lcb=1
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
from pathlib import Path

import numpy as np

# the fourth model-free run's fitted step costs (docs/results/step_costs_model_free_4_*),
# in plain steps, by verify block: ngram's and prompt lookup's fits, averaged
FITTED = {1: (0.991 + 0.974) / 2, 2: (1.113 + 1.102) / 2, 4: (1.240 + 1.405) / 2,
          8: (1.803 + 1.580) / 2, 16: (2.204 + 2.716) / 2}


def cost_at(points: dict[int, float], T: int) -> float:
    """The cost of a ``T``-token block from a table of block sizes: linear between the
    points, extrapolated from the last two past them."""
    xs = sorted(points)
    ys = [points[x] for x in xs]
    if T <= xs[-1]:
        return float(np.interp(T, xs, ys))
    return ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (T - xs[-1])


def step_cost_table(points: dict[int, float], K: int) -> np.ndarray:
    """``[K + 1]``: the cost of a step drafting ``k = 0..K`` tokens (the engine's verify
    block for it, :func:`cost_at`)."""
    from specjax.buckets import verify_block

    return np.array([cost_at(points, verify_block(k, K)) for k in range(K + 1)])


_ROWS: dict = {}  # what the recording drafter's callback saw, by seq_len (record)


def _rec(drafts, lens, seq_len):
    _ROWS[int(seq_len[0])] = (np.asarray(drafts[0]), np.asarray(lens[0]))


_RECORDING = None


def _recording_class():
    """``ngram``'s drafter that reports every source's chain each step (one class for the
    run, so the decode loop compiles once per cache size, not once per question)."""
    global _RECORDING
    if _RECORDING is None:
        import jax

        from specjax.drafters.ngram import NgramDrafter

        class Recording(NgramDrafter):
            def plan(self, params, target, state, ctx, k, greedy):
                n, st = super().plan(params, target, state, ctx, k, greedy)
                jax.debug.callback(_rec, st["drafts"], st["lens"], ctx.seq_len)
                return n, st

        _RECORDING = Recording
    return _RECORDING


def record(d, lm, prompt, max_new, eos, cache_len=None):
    """Every source's chain and length at every output position of a run with no drafting:
    ``(drafts [T, S, K], lens [T, S], output tokens)``, row ``t`` at ``seq_len = P + 1 + t``."""
    import jax

    from specjax.engine import generate

    _ROWS.clear()
    fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(d)}
    fields["min_gain"] = 0.99999  # no chain is ever trusted: every step is idle
    r = generate(lm.model, [prompt], max_new_tokens=max_new, eos_ids=eos,
                 drafter=_recording_class()(**fields), cache_len=cache_len)
    jax.effects_barrier()
    P = len(prompt)
    out = r.tokens[0]
    T = len(out) - 1  # positions with a pending token and a budget left
    missing = [P + 1 + t for t in range(T) if P + 1 + t not in _ROWS]
    if missing:
        raise SystemExit(f"recording lacks positions {missing[:5]}")
    drafts = np.stack([_ROWS[P + 1 + t][0] for t in range(T)])
    lens = np.stack([_ROWS[P + 1 + t][1] for t in range(T)])
    return drafts, lens, out


def agreed(chain, n, text):
    """Leading tokens of ``chain[:n]`` equal to ``text``."""
    m = 0
    while m < n and m < len(text) and chain[m] == text[m]:
        m += 1
    return m


def learn(d, counts, chains, lens, committed) -> list[tuple[int, int]]:
    """Every source's decayed counts after a step, in place (``ngram.agreement``): ``counts``
    the row's ``(acc, trials, acc1, trials1)``, each ``[S]``, against its ``chains [S, K]``
    (``lens [S]`` valid) and the ``committed`` tokens. Returns each source's ``(accepted,
    known)``."""
    acc, trials, acc1, trials1 = counts
    out = []
    for s in range(len(lens)):
        known = min(lens[s], len(committed))
        a = agreed(chains[s], known, committed)
        acc[s] = d.source_decay * acc[s] + a
        trials[s] = d.source_decay * trials[s] + a + (a < known)
        acc1[s] = d.source_decay * acc1[s] + min(a, 1)
        trials1[s] = d.source_decay * trials1[s] + min(a + (a < known), 1)
        out.append((a, known))
    return out


def branch(chains, cut, reach, src, n, verify_cost, text, K):
    """``tree2``: the chosen chain ``(src, n)`` with the other source's chain that adds the
    most expected tokens per verify cost where it parts from it (at most ``K`` nodes in all;
    a chain that agrees to where it parts is accepted past it only if the chosen one is wrong
    there: ``(1 - h)`` times its own chance, ``h`` the chosen chain's chance at that
    position given the ones before). Returns ``(src, nodes, accepted)``."""
    r1 = np.concatenate([[1.0], reach[src]])
    best = ((1 + r1[1:n + 1].sum()) / verify_cost[n], n, None)
    for s2 in range(len(chains)):
        if s2 == src:
            continue
        for n2 in range(1, cut[s2] + 1):
            j = agreed(chains[src], min(n, n2), chains[s2]) if n else 0
            if n2 <= j or n <= j or n + n2 - j > K:
                continue
            h = r1[j + 1] / r1[j]
            r2 = np.concatenate([[1.0], reach[s2]])
            e = 1 + r1[1:n + 1].sum() + (1 - h) * r2[j + 1:n2 + 1].sum()
            v = e / verify_cost[n + n2 - j]
            if v > best[0]:
                best = (v, n + n2 - j, (s2, n2))
    _, nodes, other = best
    m = agreed(chains[src], n, text)
    if other is not None:
        m = max(m, agreed(chains[other[0]], other[1], text))
    return src, nodes, m


def replay(d, drafts, lens, out, rule: str, verify_cost, step_cost):
    """One question under ``rule``: ``(steps, drafted, accepted, cost in plain steps,
    chosen per source)``."""
    import jax.numpy as jnp

    from specjax.drafters.dynamic_exit import tpl_choice
    from specjax.drafters.ngram import reach_chance, reach_length

    if rule.startswith("minlen="):  # chains shorter than n not offered (nor learnt from)
        head, _, rule = rule.partition("&")
        lens = lens.copy()
        for part in head[7:].split("+"):
            src, n = part.split(":")
            col = lens[:, d.names.index(src)]
            col[col < int(n)] = 0
        rule = rule or "default"
    if rule.startswith("set:"):  # the default rule with other options of the drafter
        opts = dict(kv.split("=") for kv in rule[4:].split(";"))
        d = dataclasses.replace(d, **{k: float(v) for k, v in opts.items()})
    T, S, K = drafts.shape
    acc = np.zeros(S)
    trials = np.zeros(S)
    NB = 5  # offered-length classes: 1, 2-3, 4-7, 8-15, 16+
    acc_b = np.zeros((S, NB))
    trials_b = np.zeros((S, NB))
    acc1 = np.zeros(S)  # the first drafted position's counts (ngram's first_token)
    trials1 = np.zeros(S)
    names = list(d.names)
    scale = np.ones(S)
    if rule.startswith("prefer="):
        src, f = rule.split("=", 1)[1].split(":")
        scale[names.index(src)] = float(f)
    vc = jnp.asarray(verify_cost, jnp.float32)
    t, steps, drafted, accepted, cost = 0, 0, 0, 0, 0.0
    pol = [0.0, 0.0]  # the adaptive policy's decayed accepted / rejected counts
    chosen = np.zeros((S, 3), int)  # steps, drafted, accepted

    def adaptive_pick(names_, pol_, L):
        order = [names.index(x) for x in names_.split("+")]  # the first with a chain
        src_ = next((x for x in order if L[x] > 0), order[0])
        a_ = min((pol_[0] + 1) / (pol_[0] + pol_[1] + 2), 0.999)
        tokens = (1 - a_ ** (np.arange(K + 1) + 1)) / (1 - a_)
        gain_k = tokens / np.asarray(verify_cost)
        k = int(np.argmax(gain_k)) if gain_k.max() > 1.0 else 0
        return src_, min(k, int(L[src_]))

    # meta=<sources>[:<decay>]: each step ngram's choice or the adaptive rule's on those
    # sources, whichever has had more committed tokens per step cost (the other one's
    # counted from the committed tokens: at least what it would have had accepted)
    meta = rule.startswith("meta=")
    if meta:
        meta_src, _, md = rule[5:].partition(":")
        meta_decay = float(md or 0.9)
        pol_cf = [0.0, 0.0]
        score = np.zeros((2, 2))  # (ngram, adaptive) x (tokens, cost), decayed
    while t < T:
        text = out[1 + t:]  # the tokens the chain at this position predicts
        L = lens[t]
        if rule.startswith("adaptive="):  # one source under the adaptive policy's rule
            src, n = adaptive_pick(rule[9:], pol, L)
        elif rule == "oracle":
            best = (1.0 / step_cost[0], 0, 0)
            for s in range(S):
                m = agreed(drafts[t, s], L[s], text)
                for n in range(1, L[s] + 1):
                    v = (1 + min(m, n)) / step_cost[n]
                    if v > best[0]:
                        best = (v, s, n)
            _, src, n = best
        else:
            alpha = (acc + d.prior * d.prior_weight) / (trials + d.prior_weight)
            if rule.startswith("bylen"):  # the class of the chain's offered length
                b = np.minimum(np.log2(np.maximum(L, 1)).astype(int), NB - 1)
                w = float(rule.split("=")[1]) if "=" in rule else d.prior_weight
                rows = np.arange(S)
                by = (acc_b[rows, b] + alpha * w) / (trials_b[rows, b] + w)
                only = rule.split("=")[0].split(":")[1:]  # bylen:suffix:sssd=2
                alpha = np.where([not only or nm in only for nm in names], by, alpha)
            first = None
            if rule == "first":
                pw = d.prior * d.prior_weight
                first = jnp.asarray((acc1 + pw) / (trials1 + d.prior_weight), jnp.float32)
                alpha = (acc - acc1 + pw) / (trials - trials1 + d.prior_weight)
            reach = np.array(reach_chance(jnp.asarray(alpha, jnp.float32), K, first))  # [S, K]
            if rule.startswith(("only=", "without=")):
                named = np.array([nm in rule.split("=")[1].split("+") for nm in names])
                L = np.where(named if rule.startswith("only=") else ~named, L, 0)
            for s in range(S):
                for o in range(S):
                    if o == s or not rule.startswith(("agree", "split=")):
                        continue
                    same = agreed(drafts[t, s], min(L[s], L[o]), drafts[t, o])
                    if rule == "agree":  # a shared prefix: the better estimate of the two
                        reach[s, :same] = np.maximum(reach[s, :same], reach[o, :same])
                    elif same < min(L[s], L[o]):  # they part: at most one goes on right
                        reach[s, same:] *= float(rule[6:])
            cut = np.minimum(L, np.asarray(reach_length(jnp.asarray(reach), d.min_gain)))
            reach = reach * scale[:, None]
            src, n, _ = tpl_choice(jnp.asarray(alpha[None], jnp.float32),
                                   jnp.zeros((S,), jnp.float32), vc,
                                   jnp.asarray(cut[None], jnp.int32),
                                   reach=jnp.asarray(reach[None], jnp.float32))
            src, n = int(src[0]), int(n[0])
        if meta:
            alt = adaptive_pick(meta_src, pol_cf, L)
            rate = (score[:, 0] + 1.0) / (score[:, 1] + 1.0)
            use = int(rate[1] > rate[0])
            picks = [(src, n), alt]
            src, n = picks[use]
            mm = agreed(drafts[t, src], n, text) if n else 0
            done = text[:mm + 1]
            for r, (s_r, n_r) in enumerate(picks):
                a_r = agreed(drafts[t, s_r], min(n_r, len(done)), done) if n_r else 0
                score[r] = meta_decay * score[r] + (1 + a_r, step_cost[n_r])
                if r == 1:
                    pol_cf = [0.9 * pol_cf[0] + a_r, 0.9 * pol_cf[1] + (a_r < min(n_r, len(done)))]
        m = agreed(drafts[t, src], n, text) if n else 0
        if rule.startswith("tree2"):  # a second chain branching off the chosen one
            src, n, m = branch(drafts[t], cut, reach, src, n, verify_cost, text, K)
        steps += 1
        drafted += n
        accepted += m
        cost += step_cost[n]
        chosen[src] += (n > 0, n, m)
        pol = [0.9 * pol[0] + m, 0.9 * pol[1] + (m < n)]
        committed = text[:m + 1]
        seen = learn(d, (acc, trials, acc1, trials1), drafts[t], lens[t], committed)
        for s, (a, known) in enumerate(seen):
            if lens[t][s] > 0:
                b = min(int(np.log2(lens[t][s])), NB - 1)
                acc_b[s, b] = d.source_decay * acc_b[s, b] + a
                trials_b[s, b] = d.source_decay * trials_b[s, b] + a + (a < known)
        t += m + 1
    return steps, drafted, accepted, cost, chosen


def replay_batch(d, recs, rule: str, verify_cost, step_cost):
    """A batch of questions (``recs``: one ``(drafts, lens, out)`` per row) under ``rule``,
    every step choosing as ``ngram`` does above batch 1 (:func:`batch_choice`: one block for
    all rows, as long as the longest draft) and costing ``step_cost`` of that block.
    Returns ``(steps, drafted, accepted, cost, expected)``: steps of the batch, tokens drafted
    and accepted over the rows, the steps' cost in plain steps, and the accepted tokens the
    estimates promised for the drafts chosen (against ``accepted``: their optimism).

    A rule is one or more of these joined by ``+`` (the drafter's own objective,
    ``batch_value``, and ``scale=batch_trust`` unless given): ``default``; ``rows``: the
    expected tokens of all live rows (``batch_value=rows``); ``set:<option>=<x>[;...]``;
    ``first`` (``first_token``); ``lcb=<z>``: each source's per-token estimate lowered by
    ``z`` standard errors of its counts (the best of several noisy estimates is chosen, so
    it is optimistic); ``scale=<f>``: every chance scaled by ``f``; ``lag[=<m>]``: only the
    rows with the most tokens left to write (within ``m``) weigh in the block's length (a
    static batch ends with its last row: tokens won by a row ahead shorten nothing), the
    others draft within it for free; ``lagmin``: the block's value is the expected advance of
    the slowest of those rows, ``1 + sum_i prod_rows reach``; ``fluid``: the block whose
    rates (expected tokens per step) would finish the batch soonest, ``min_rows tokens /
    left`` per cost (rows tied for the most left do not block drafting, as with ``lagmin``);
    ``soft[=<p>]``: the rows' expected tokens weighted by ``(left / most left) ** p``
    (``p = 0``: ``rows``; large: the rows with the most left); ``budget=<n>``: the rows'
    tokens left as the engine knows them, ``n`` less what each
    wrote (default: from the recording, which foresees an early end of sequence);
    ``oracle``: each step the block
    and the rows' sources with the most actually accepted tokens per step cost (a bound on
    the per-step rule, not on the batch)."""
    import jax.numpy as jnp

    from specjax.drafters.ngram import batch_choice, reach_chance, reach_length

    opt = {}
    for part in rule.split("+"):
        if part.startswith("set:"):
            kv = dict(x.split("=") for x in part[4:].split(";"))
            d = dataclasses.replace(d, **{k: float(v) for k, v in kv.items()})
        else:
            key, _, val = part.partition("=")
            opt[key] = val
    if not {"rows", "lag", "lagmin", "fluid", "soft", "oracle"} & set(opt):  # its own
        opt["fluid" if d.batch_value == "finish" else "rows"] = ""
    opt.setdefault("scale", str(d.batch_trust))
    B = len(recs)
    S, K = recs[0][0].shape[1:]
    T = np.array([r[0].shape[0] for r in recs])
    t = np.zeros(B, int)
    acc, trials = np.zeros((B, S)), np.zeros((B, S))
    acc1, trials1 = np.zeros((B, S)), np.zeros((B, S))
    steps, drafted, accepted, cost, expected = 0, 0, 0, 0.0, 0.0
    vc = jnp.asarray(verify_cost, jnp.float32)
    i_k = np.arange(1, K + 1)
    while (t < T).any():
        live = t < T
        tt = np.minimum(t, T - 1)
        drafts = np.stack([recs[b][0][tt[b]] for b in range(B)])  # [B, S, K]
        L = np.stack([recs[b][1][tt[b]] for b in range(B)])  # [B, S]
        texts = [recs[b][2][1 + tt[b]:] for b in range(B)]
        pw = d.prior * d.prior_weight
        alpha = (acc + pw) / (trials + d.prior_weight)
        first = None
        if "first" in opt:
            first = jnp.asarray((acc1 + pw) / (trials1 + d.prior_weight), jnp.float32)
            alpha = (acc - acc1 + pw) / (trials - trials1 + d.prior_weight)
        if "lcb" in opt:
            se = np.sqrt(alpha * (1 - alpha) / (trials + d.prior_weight))
            alpha = np.clip(alpha - float(opt["lcb"]) * se, 1e-3, None)
        reach = np.array(reach_chance(jnp.asarray(alpha, jnp.float32), K, first))
        if "scale" in opt:
            reach = reach * float(opt["scale"])
        cut = np.minimum(L, np.asarray(reach_length(jnp.asarray(reach), d.min_gain)))
        gained = np.where(i_k <= cut[..., None], reach, 0.0)  # [B, S, K]
        tokens = 1.0 + np.concatenate([np.zeros((B, S, 1)), np.cumsum(gained, -1)], -1)
        # tokens left: known from the recording, or (budget=<n>) as the engine knows them,
        # the budget less what was written (a row's end of sequence is not foreseen)
        left = np.where(live, (int(opt["budget"]) if "budget" in opt else T) - t, -1)
        slow = live & (left >= left.max() - int(opt.get("lag") or opt.get("lagmin") or 0))
        if "oracle" in opt:  # the best block and sources knowing the text
            m_all = np.array([[agreed(drafts[b, s], L[b, s], texts[b]) for s in range(S)]
                              for b in range(B)])
            best = None
            for n_blk in range(K + 1):
                got = np.minimum(m_all, n_blk).max(axis=1) * live
                v = (live.sum() + got.sum()) / step_cost[n_blk]
                if best is None or v > best[0]:
                    best = (v, n_blk)
            n_blk = best[1]
            src = np.argmax(np.minimum(m_all, n_blk), axis=1)
            n = np.where(live, np.minimum(L[np.arange(B), src], n_blk), 0)
            n = np.where(np.minimum(m_all, n_blk).max(axis=1) > 0, n, 0)
        else:
            if "soft" in opt:  # the rows' expected tokens weighted by (left / most left)^p
                w = np.where(live, (np.maximum(left, 0) / max(left.max(), 1))
                             ** float(opt["soft"] or 1), 0.0)
                val = (w[:, None] * np.max(tokens, axis=1)).sum(0) / np.asarray(verify_cost)
                blk = int(np.argmax(val))
            elif "fluid" in opt:  # the row that would finish last at each block's rates
                _, n = batch_choice(jnp.asarray(reach, jnp.float32), jnp.asarray(cut), vc,
                                    jnp.asarray(live), jnp.asarray(left))
                blk = int(np.max(np.asarray(n)))
            elif "lagmin" in opt:  # the slowest rows' expected least advance per cost
                best_src = np.argmax(tokens, axis=1)  # [B, K + 1]: each row's source by L
                val = []
                for n_blk in range(K + 1):
                    r = gained[np.arange(B), best_src[:, n_blk]][slow, :n_blk]  # [b', L]
                    val.append((1.0 + np.prod(r, axis=0).sum()) / float(verify_cost[n_blk]))
                blk = int(np.argmax(val))
            else:
                _, n = batch_choice(jnp.asarray(reach, jnp.float32), jnp.asarray(cut), vc,
                                    jnp.asarray(slow if "lag" in opt else live))
                blk = int(np.max(np.asarray(n)))
            # every live row drafts its best source within the block (a row not weighed in
            # rides along: a longer draft than its own best costs nothing more)
            src = np.argmax(tokens[:, :, blk], axis=1)
            n = np.where(live, np.minimum(cut[np.arange(B), src], blk), 0)
        block = int(n.max())
        steps += 1
        cost += step_cost[block]
        for b in range(B):
            if not live[b]:
                continue
            m = agreed(drafts[b, src[b]], n[b], texts[b]) if n[b] else 0
            drafted += n[b]
            accepted += m
            expected += float(reach[b, src[b], :n[b]].sum())
            committed = texts[b][:m + 1]
            learn(d, (acc[b], trials[b], acc1[b], trials1[b]), drafts[b], L[b], committed)
            t[b] += m + 1
    return steps, drafted, accepted, cost, expected


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", default="161,163,165,167,169")
    ap.add_argument("--prompts", default="spec_bench:../shared/data/spec_bench/question.jsonl")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--method", default="ngram", help="the ngram spec, name[:k=v,...]")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--warm-journal", default=None)
    ap.add_argument("--rules", nargs="+", default=[
        "default", "cost=fitted", "only=prompt_lookup", "adaptive=prompt_lookup",
        "adaptive=suffix", "adaptive=prompt_lookup+suffix", "prefer=prompt_lookup:1.3",
        "first", "set:min_gain=0.5", "set:min_gain=0.2", "set:prior=0.3", "set:source_decay=0.8",
        "set:prior_weight=4", "agree", "split=0.5", "bylen", "bylen:suffix", "tree2",
        "oracle"])
    ap.add_argument("--sources", default=None,
                    help="replay these of the recording's sources only, 'a,b,...' (exact: "
                         "each source's estimate learns from its own chains alone)")
    ap.add_argument("--step-cost", default=None,
                    help="step costs in plain steps by verify block, 'T:c,T:c,...' "
                         "(default: the fourth model-free run's fits)")
    ap.add_argument("--batch", type=int, default=1,
                    help="replay the questions in consecutive groups of this many as batches "
                         "(the choice ngram makes above batch 1; rules: replay_batch's)")
    ap.add_argument("--cache-len", type=int, default=None,
                    help="one static cache length for every question (one compile for all; "
                         "default: each prompt's own, as generate sizes it)")
    ap.add_argument("--cache", default="/tmp/replay_ngram",
                    help="recordings kept here, one file per question and drafter")
    a = ap.parse_args()

    from specjax import methods
    from specjax.bench.journal import warm_snapshots
    from specjax.bench.prompts import load_prompts
    from specjax.buckets import verify_block
    from specjax.engine import generate
    from specjax.models.loaders import load
    from specjax.policies.adaptive import bucketed_cost

    lm = load(a.model)
    byid = {str(it["id"]): it for it in load_prompts(a.prompts)}
    ids = a.ids.split(",")
    name, args = methods.parse_method_spec(a.method)
    d, _, _ = methods.build(name, lm, args, batch=a.batch, cache_len=a.cache_len)
    if not hasattr(d, "names"):
        raise SystemExit(f"{a.method}: not an ngram drafter")
    K = d.max_k
    points = FITTED if a.step_cost is None else {
        int(x.split(":")[0]): float(x.split(":")[1]) for x in a.step_cost.split(",")}
    step_cost = step_cost_table(points, K)
    fitted_curve = tuple(cost_at(points, T) for T in range(1, K + 2))
    prompts = {i: lm.tokenizer.encode_chat(byid[i]["prompt"]) for i in ids}
    first = d.snapshot()
    warm = (warm_snapshots(d, a.warm_journal, byid, lm.tokenizer.encode_chat, ids)
            if a.warm_journal else {})
    if a.batch > 1:  # a batch's rows all start from what was learnt before the batch
        for g in range(0, len(ids), a.batch):
            for i in ids[g:g + a.batch]:
                if ids[g] in warm:
                    warm[i] = warm[ids[g]]
    eos = lm.tokenizer.eos_ids
    print(f"step cost by drafted k: {np.round(step_cost, 3).tolist()}")
    print(f"verify blocks: {[verify_block(k, K) for k in range(K + 1)]}")
    totals = {}  # (category, rule) -> steps, drafted, accepted, cost
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha1((f"{a.model} {d.description} {a.max_new_tokens} {a.warm_journal}"
                        + (f" batch {a.batch}" if a.batch > 1 else "")).encode()
                       ).hexdigest()[:12]
    rd = d  # the drafter the rules replay
    if a.sources:
        keep = [d.names.index(x) for x in a.sources.split(",")]
        rd = dataclasses.replace(d, names=tuple(d.names[j] for j in keep),
                                 sources=tuple(d.sources[j] for j in keep))
    recs = {}  # id -> recording, for --batch
    for i in ids:
        f = cache / f"{tag}_{i}.npz"
        if not f.exists():
            start = warm.get(i, first)  # what the drafter knew before the question
            d.restore(start)
            drafts, lens, out = record(d, lm, prompts[i], a.max_new_tokens, eos, a.cache_len)
            d.restore(start)  # the recording's answer unlearnt
            real = generate(lm.model, [prompts[i]], max_new_tokens=a.max_new_tokens,
                            eos_ids=eos, drafter=d, cache_len=a.cache_len)
            d.restore(start)
            if real.tokens[0] != out:
                raise SystemExit(f"question {i}: the recording's output differs from the run's")
            ex = real.extra or {}
            np.savez(f, drafts=drafts, lens=lens, out=np.asarray(out),
                     real=np.array([real.target_forwards[0] - 1, ex["drafted"][0],
                                    ex["accepted"][0]]))
        z = np.load(f)
        drafts, lens, out, real = z["drafts"], z["lens"], z["out"].tolist(), z["real"]
        if a.sources:  # the drafter with fewer sources, on the same recording
            drafts, lens = drafts[:, keep], lens[:, keep]
        cat = byid[i]["category"]
        print(f"question {i} ({cat}): real run steps {real[0]} (+ prefill), "
              f"drafted {real[1]}, accepted {real[2]}")
        if a.batch > 1:  # replayed below, with the rest of its batch
            recs[i] = (drafts, lens, out)
            continue
        for rule in a.rules:
            vc = bucketed_cost(d.cost, K)
            if rule.startswith("cost="):
                c = rule[5:]
                curve = fitted_curve if c == "fitted" else tuple(
                    float(x) for x in c.split(";"))
                vc = bucketed_cost(curve, K)
            steps, dr, ac, cost, chosen = replay(rd, drafts, lens, out, rule, vc, step_cost)
            for key in ((cat, rule), ("all", rule)):
                totals.setdefault(key, np.zeros(4))
                totals[key] += (steps, dr, ac, cost)
            print(f"  {rule:28s} steps {steps:4d} drafted {dr:4d} accepted {ac:4d} "
                  f"cost {cost:7.1f}   by source (steps/drafted/accepted): " + ", ".join(
                      f"{nm} {'/'.join(map(str, c))}" for nm, c in zip(rd.names, chosen.tolist())))
    promised = {}  # (category, rule) -> accepted tokens the estimates promised (--batch)
    batch_plain = {}  # category -> plain decoding's steps of its batches (--batch)
    for g in range(0, len(ids) if a.batch > 1 else 0, a.batch):
        group = ids[g:g + a.batch]
        cat = byid[group[0]]["category"]
        plain = max(len(recs[i][2]) - 1 for i in group)  # the batch's plain decode steps
        print(f"batch {','.join(group)} ({cat}): plain steps {plain}")
        for rule in a.rules:
            vc = bucketed_cost(d.cost, K)
            steps, dr, ac, cost, exp = replay_batch(rd, [recs[i] for i in group], rule, vc,
                                                    step_cost)
            for key in ((cat, rule), ("all", rule)):
                totals.setdefault(key, np.zeros(4))
                totals[key] += (steps, dr, ac, cost)
                promised[key] = promised.get(key, 0.0) + exp
            print(f"  {rule:28s} steps {steps:4d} drafted {dr:4d} accepted {ac:4d} "
                  f"(promised {exp:6.1f}) cost {cost:7.1f}  {plain / cost:.3f}x")
        for key in (cat, "all"):
            batch_plain[key] = batch_plain.get(key, 0) + plain
    print("totals (cost in plain steps; the ratio: plain steps / cost, decode only):")
    for cat in dict.fromkeys(c for c, _ in totals):
        base = totals[cat, a.rules[0]]
        plain = batch_plain.get(cat, base[0] + base[2])  # tokens = steps + accepted
        print(f"{cat}:")
        for rule in a.rules:
            steps, dr, ac, cost = totals[cat, rule]
            print(f"  {rule:28s} steps {int(steps):5d} drafted {int(dr):5d} "
                  f"accepted {int(ac):5d} cost {cost:8.1f}  {plain / cost:.3f}x"
                  + (f"  promised / accepted {promised[cat, rule] / max(ac, 1):.2f}"
                     if (cat, rule) in promised else ""))

if __name__ == "__main__":
    main()
