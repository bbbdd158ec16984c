"""Offline replay of prompt-lookup drafting against plain decoding's greedy outputs.

Decodes each prompt once with plain greedy decoding, then replays drafting strategies over the
outputs without running the model again: at every step the strategy proposes tokens from the
prompt and the text so far, the replay accepts the longest prefix that equals what plain
decoding produced next, plus one token (what greedy verification does), and charges the
verify forward its relative cost from a verify-cost curve (``cost(drafted + 1)``, as the
adaptive policy does). Reported per category:

* ``tau``: tokens per target forward; ``per_cost``: tokens per unit of verify cost, i.e. the
  speedup over plain decoding if drafting itself were free and the curve exact;
* strategies: single chains of the most recent match of the longest n-gram (n from
  ``max_ngram`` down to ``min_ngram``) with a fixed draft length k, as the engine's
  ``prompt_lookup`` drafter proposes them; ``C`` distinct continuations of several match
  positions verified as one token tree (multi-candidate lookup);
* the engine's default: the adaptive draft-length policy (k up to 16, n-grams 2-3) replayed
  with its own code, costs at the engine's bucketed verify block sizes;
* ``hindsight``: the engine's lookup (n-grams 2-3, at most 16 tokens) with the draft length
  chosen knowing the answer: every step drafts exactly the tokens that will be accepted
  (nothing when the first would be rejected): what a perfect per-step choice of draft length
  gives with that drafter and cost curve, the reference for any better policy (not a strict
  bound: a shorter draft changes later lookups);
* ``oracle``: the longest run of the output that occurs anywhere in the prompt and the text so
  far (the ceiling of any copy-based drafter that picks the best source position, at most k
  tokens, verification free); ``oracle copy, perfect length``: the same copies charged at the
  engine's bucketed verify costs, each step drafting exactly what is accepted (the ceiling
  of any copy-based drafter under any draft-length policy, for that cost curve).

A second table turns the reference strategies' figures into end-to-end speedups with the
prefill and decode times of the plain decoding run (timed on its second run per prompt):
``(prefill + decode) / (prefill + decode / speedup)``. These are upper bounds of what the
engine can reach: they charge no drafting and no loop overhead.

This is what told us which prompt-lookup ideas can pay before building them in the engine:

    python scripts/replay_prompt_lookup.py --categories summarization code_editing chat \\
        --output out/replay.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
from collections.abc import Sequence


def continuations(seq: Sequence[int], k: int, max_ngram: int, min_ngram: int,
                  count: int = 1) -> list[tuple[int, ...]]:
    """Up to ``count`` distinct continuations (at most ``k`` tokens each) of earlier matches of
    the suffix of ``seq``: longest n first, most recent match first; the match window must end
    before the last token (so a continuation exists), as in the engine's ``ngram_lookup``."""
    out: list[tuple[int, ...]] = []
    n_seq = len(seq)
    for n in range(max_ngram, min_ngram - 1, -1):
        if n_seq < n + 1:
            continue
        suffix = list(seq[n_seq - n:])
        for j in range(n_seq - n - 1, -1, -1):
            if list(seq[j:j + n]) == suffix:
                cont = tuple(seq[j + n:j + n + k])
                if cont and cont not in out:
                    out.append(cont)
                    if len(out) >= count:
                        return out
    return out


def tree_nodes(cands: list[tuple[int, ...]]) -> int:
    """Nodes of the token trie of ``cands`` (shared prefixes verified once)."""
    return len({c[:i] for c in cands for i in range(1, len(c) + 1)})


def accepted(cand: Sequence[int], target: Sequence[int]) -> int:
    n = 0
    while n < len(cand) and n < len(target) and cand[n] == target[n]:
        n += 1
    return n


def replay(prompt: Sequence[int], output: Sequence[int], propose, cost: Sequence[float],
           charge=None):
    """(forwards, total relative cost) to produce ``output[1:]`` (``output[0]`` comes from the
    prefill) when ``propose(seq)`` gives the candidate continuations of each step. A step
    costs ``cost[nodes]`` for its ``nodes``-token trie, or ``charge(cands, accepted)`` when
    given."""
    seq = list(prompt) + list(output[:1])
    pos, forwards, total = 1, 0, 0.0
    while pos < len(output):
        cands = propose(seq)
        best = max((accepted(c, output[pos:]) for c in cands), default=0)
        if charge is None:
            nodes = tree_nodes(cands)
            if nodes + 1 > len(cost):
                raise ValueError(f"a {nodes + 1}-token verify block is past the cost curve "
                                 f"({len(cost)} entries)")
            total += cost[nodes]
        else:
            total += charge(cands, best)
        step = min(best + 1, len(output) - pos)
        seq += output[pos:pos + step]
        pos += step
        forwards += 1
    return forwards, total


def hindsight(prompt: Sequence[int], output: Sequence[int], cost: Sequence[float],
              k: int = 16, max_ngram: int = 3, min_ngram: int = 2,
              block_cost: Sequence[float] | None = None):
    """(forwards, total relative cost) when each step drafts exactly the accepted part of the
    lookup's continuation (at most ``k`` tokens): a perfect per-step choice of draft length
    for that drafter. It takes the same steps as a fixed-``k`` chain, at the cost of only the
    accepted tokens. ``block_cost[d]`` is the cost of a ``d``-token draft (default ``cost[d]``;
    pass the engine's bucketed costs to charge its verify block sizes)."""
    block_cost = list(cost if block_cost is None else block_cost)
    return replay(prompt, output, lambda seq: continuations(seq, k, max_ngram, min_ngram), cost,
                  charge=lambda cands, n_acc: block_cost[n_acc])


def best_copy(seq: Sequence[int], target: Sequence[int], k: int) -> tuple[int, ...]:
    """The longest prefix of ``target`` (at most ``k`` tokens) that occurs as a run anywhere in
    ``seq`` (the most recent such run; empty when not even one token does)."""
    best: tuple[int, ...] = ()
    for j in range(len(seq) - 1, -1, -1):
        n = accepted(seq[j:j + k], target[:k])
        if n > len(best):
            best = tuple(target[:n])
            if n == min(k, len(target)):
                break
    return best


def oracle(prompt: Sequence[int], output: Sequence[int], k: int,
           block_cost: Sequence[float] | None = None):
    """(forwards, total relative cost) when each step copies the longest possible run (at
    most ``k``) from anywhere in the prompt and the text so far, drafting exactly the tokens
    that will be accepted: the ceiling of any copy-based drafter with any draft-length policy
    (both source and length chosen knowing the answer). ``block_cost[d]`` charges a
    ``d``-token draft (default: nothing, i.e. free verification; only forwards count)."""
    def propose(seq):
        c = best_copy(seq, output[len(seq) - len(prompt):], k)
        return [c] if c else []

    charge = (lambda cands, n_acc: 0.0) if block_cost is None else (
        lambda cands, n_acc: float(block_cost[n_acc]))
    return replay(prompt, output, propose, (), charge=charge)


def oracle_forwards(prompt: Sequence[int], output: Sequence[int], k: int) -> int:
    """Forwards of :func:`oracle` (free verification)."""
    return oracle(prompt, output, k)[0]


def end_to_end(speedup: float, prefill_s: float, decode_s: float) -> float:
    """The end-to-end speedup over plain decoding that a decode-phase speedup ``speedup``
    gives when plain decoding spends ``prefill_s`` in prefill and ``decode_s`` after it (the
    prefill is the same for both)."""
    return (prefill_s + decode_s) / (prefill_s + decode_s / speedup)


STRATEGIES = {  # name -> (k, min_ngram, max_ngram, candidates)
    "chain n2-3 k4": (4, 2, 3, 1),
    "chain n2-3 k8": (8, 2, 3, 1),
    "chain n2-3 k16": (16, 2, 3, 1),
    "chain n1-3 k4": (4, 1, 3, 1),
    "chain n1-3 k8": (8, 1, 3, 1),
    "chain n2-5 k8": (8, 2, 5, 1),
    "tree n2-3 k8 C2": (8, 2, 3, 2),
    "tree n2-3 k4 C3": (4, 2, 3, 3),
}


def replay_policy(prompt: Sequence[int], output: Sequence[int], policy, max_ngram: int = 3,
                  min_ngram: int = 2, max_new: int | None = None,
                  block_cost: Sequence[float] | None = None):
    """(forwards, total relative cost) with the engine's own draft-length ``policy`` (e.g.
    :class:`specjax.policies.adaptive.AdaptivePolicy`, batch 1) deciding k at every step, the
    drafter proposing ``min(k, available)`` tokens, and the verify block charged at the
    engine's bucketed block size: ``block_cost[d]`` for a ``d``-token draft (default: the
    policy's own curve, ``policy._bucketed_cost``). With ``max_new`` (the token budget of the
    run that produced ``output``), k is clipped to the budget left after the step's own
    token, as the engine clips it."""
    import jax.numpy as jnp

    bucketed = [float(c) for c in (policy._bucketed_cost() if block_cost is None
                                   else block_cost)]
    state = policy.init(1)
    seq = list(prompt) + list(output[:1])
    pos, forwards, total = 1, 0, 0.0
    while pos < len(output):
        k = int(policy.decide(state, None)[0])
        if max_new is not None:
            k = max(0, min(k, max_new - pos - 1))
        cands = continuations(seq, k, max_ngram, min_ngram) if k else []
        draft = cands[0] if cands else ()
        n_acc = accepted(draft, output[pos:])
        step = min(n_acc + 1, len(output) - pos)
        seq += output[pos:pos + step]
        pos += step
        forwards += 1
        total += bucketed[len(draft)]
        state = policy.update(state, jnp.asarray([k]), jnp.asarray([len(draft)]),
                              jnp.asarray([n_acc]))
    return forwards, total


def analyse(pairs: list[tuple[list[int], list[int]]], cost: Sequence[float],
            oracle_k: int = 8, policy=None, max_new: int | None = None) -> dict:
    """Per-strategy tau and tokens per cost over ``(prompt, output)`` pairs, plus the oracle
    and, given ``policy``, the engine's default prompt lookup (that policy, k <= its max_k,
    clipped to the ``max_new`` budget) and its hindsight reference (the same drafter and bucketed
    costs, each step drafting exactly what is accepted). Every strategy is charged from
    ``cost`` (at the engine's bucketed block sizes where the engine is replayed); the policy
    decides with its own curve."""
    tokens = sum(max(0, len(o) - 1) for _, o in pairs)
    res = {"tokens": tokens, "strategies": {}}

    def add(name, runs):
        res["strategies"][name] = {"tau": tokens / max(sum(r[0] for r in runs), 1),
                                   "per_cost": tokens / max(sum(r[1] for r in runs), 1e-9)}

    if policy is not None:
        bucketed = [float(c) for c in
                    dataclasses.replace(policy, cost=tuple(cost))._bucketed_cost()]
        add(f"engine default ({policy.name}, k<={policy.max_k}, n2-3)",
            [replay_policy(p, o, policy, max_new=max_new, block_cost=bucketed)
             for p, o in pairs])
        add(f"hindsight k<={policy.max_k}, n2-3",
            [hindsight(p, o, cost, policy.max_k, block_cost=bucketed) for p, o in pairs])
        add(f"oracle copy, perfect length, k<={policy.max_k}",
            [oracle(p, o, policy.max_k, block_cost=bucketed) for p, o in pairs])
    for name, (k, lo, hi, c) in STRATEGIES.items():
        def propose(seq, k=k, lo=lo, hi=hi, c=c):
            return continuations(seq, k, hi, lo, c)

        runs = [replay(p, o, propose, cost) for p, o in pairs]
        fw = sum(r[0] for r in runs)
        total = sum(r[1] for r in runs)
        res["strategies"][name] = {"tau": tokens / max(fw, 1), "per_cost": tokens / max(total,
                                                                                        1e-9)}
    fw = sum(oracle_forwards(p, o, oracle_k) for p, o in pairs)
    res["oracle"] = {"k": oracle_k, "tau": tokens / max(fw, 1)}
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--prompts", default="builtin")
    p.add_argument("--categories", nargs="*", default=None)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--cost", default=None,
                   help="verify-curve JSON (specjax bench --verify-curve) that every "
                        "strategy is charged from; default: the adaptive policy's built-in "
                        "curve for the model")
    p.add_argument("--policy-cost", default=None,
                   help="verify-curve JSON the replayed policy decides with; default: its "
                        "built-in curve, as the engine runs it")
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)

    from tqdm import tqdm

    from specjax.data import load_prompts
    from specjax.engine import generate
    from specjax.models.loaders import load
    from specjax.methods import build
    from specjax.drafters.base import DrafterError
    from specjax.policies.adaptive import default_cost, load_cost_curve

    try:  # before the model and the decoding, so a wrong path fails at once
        given_cost = load_cost_curve(args.cost) if args.cost else None
        policy_cost = load_cost_curve(args.policy_cost) if args.policy_cost else None
    except DrafterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lm = load(args.model)
    if lm.tokenizer is None:
        print(f"error: {args.model!r} has no tokenizer", file=sys.stderr)
        return 2
    cost = given_cost if given_cost is not None else default_cost(lm)
    records = [r for r in load_prompts(args.prompts)
               if args.categories is None or r.category in args.categories]
    if not records:
        print(f"error: no prompts in {args.prompts!r} for categories {args.categories}",
              file=sys.stderr)
        return 2
    by_cat: dict[str, list[tuple[list[int], list[int]]]] = {}
    times: dict[str, list[float]] = {}  # category -> [prefill s, decode s] of plain decoding
    for r in tqdm(records, desc="plain decoding", file=sys.stderr):
        ids = lm.tokenizer.encode_chat(r.prompt)
        for _ in range(2):  # the second run is timed (the first may compile)
            res = generate(lm.model, [ids], max_new_tokens=args.max_new_tokens,
                           eos_ids=lm.tokenizer.eos_ids)
        cat = r.category or "-"
        by_cat.setdefault(cat, []).append((ids, [int(t) for t in res.tokens[0]]))
        t = times.setdefault(cat, [0.0, 0.0])
        t[0] += res.prefill_s[0]
        t[1] += res.wall_s[0] - res.prefill_s[0]
    _, policy, _ = build("prompt_lookup", lm, {})  # the engine's default policy
    if policy_cost is not None:
        policy = dataclasses.replace(policy, cost=policy_cost)
    report = {cat: analyse(pairs, cost, policy=policy, max_new=args.max_new_tokens)
              for cat, pairs in by_cat.items()}
    for cat, r in report.items():  # what each decode-phase figure gives end to end
        pre, dec = times[cat]
        r["plain_prefill_s"], r["plain_decode_s"] = pre, dec
        for st in r["strategies"].values():
            st["end_to_end"] = end_to_end(st["per_cost"], pre, dec)
    names = list(next(iter(report.values()))["strategies"])
    print("| category | oracle tau (k=8) | " + " | ".join(names) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in names) + " |")
    for cat, r in report.items():
        cells = [f"{r['strategies'][n]['per_cost']:.2f} ({r['strategies'][n]['tau']:.2f})"
                 for n in names]
        print(f"| {cat} | {r['oracle']['tau']:.2f} | " + " | ".join(cells) + " |")
    print("(cells: tokens per unit of verify cost (tau))")
    ref = [n for n in names if not n.startswith("chain") and not n.startswith("tree")]
    print("\n| category | plain decoding's prefill share | " + " | ".join(
        f"{n}: end to end" for n in ref) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in ref) + " |")
    for cat, r in report.items():
        share = r["plain_prefill_s"] / max(r["plain_prefill_s"] + r["plain_decode_s"], 1e-9)
        print(f"| {cat} | {share:.0%} | " + " | ".join(
            f"{r['strategies'][n]['end_to_end']:.2f}" for n in ref) + " |")
    if args.output:
        from pathlib import Path

        path = Path(args.output)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"command": "python " + " ".join(
            [sys.argv[0]] + (sys.argv[1:] if argv is None else argv)),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "model": args.model, "max_new_tokens": args.max_new_tokens,
            "cost": list(cost), "cost_source": args.cost or "built-in (adaptive policy default)",
            "policy_cost_source": args.policy_cost or "built-in",
            "categories": report}, indent=2) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
