"""Replays Token Recycling's drafting offline over a benchmark journal's answers: cold tables
(each question starts from junk) against a table carried from question to question (the
paper's global table, ``memory=keep``), without timing anything.

Greedy decoding commits plain decoding's tokens whatever is drafted, and the table's entry
after a committed token is the target's top ids at that position. So one forward of the
target over each question's prompt and answer (cached in ``--cache``) gives every entry the
drafter would record; the replay then drafts the static tree from the pending token each
step, accepts the longest root path whose tokens are the answer's next ones, records the
root and the accepted nodes (the latest occurrence wins) and moves on, question by question
in the journal's order. Printed per category: tokens per step (``1 + accepted``) with the
whole tree drafted every step and with its first level only (the depth the default policy
drafts most on a CPU), for

* ``cold``: the prompt's entries from its text (``prompt=text``), junk elsewhere;
* ``hot``: the table the earlier questions left, a prompt token's entry its successor in the
  prompt then the carried candidates (what ``memory=keep`` does);
* ``hot_nofill``: the carried table, the prompt's text left out (what the prompt fill buys);
* with ``--start FILE.npz`` (a table file, e.g. the shipped prior) also ``prior``: every
  question starts from that table instead of junk (``prior=FILE``; at batch 1 the same with
  any ``memory`` but ``keep``), and ``prior_hot``: carried from question to question from it
  (``memory=keep``);
* with ``--corpus DIR --learn W[,W...]`` (the corpus the prior was built from) also
  ``prior_learn=W``: every question starts from a table of the most frequent successors, as
  the prior, whose counts also hold the earlier questions' answers, each pair counted ``W``
  times (the prior learning from what was served, not built: docs/benchmarks_notes.md).

    python scripts/replay_token_recycling.py \\
        docs/results/spec_bench_token_recycling_tree3221.journal.jsonl \\
        --start specjax/drafters/data/smollm2-135m.token_recycling.npz

It replays the default policy's choices of depth no more than the rejected nodes' entries
(the drafter records committed positions only): tokens per step are the drafts' quality,
not a speedup.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from specjax.drafters.token_recycling import text_fill


def replay(order, tops, parents, ranks, depth, mode: str, cap: int | None, W: int, V: int,
           start=None):
    """``{question id: (category, steps, accepted, steps that accepted one or more)}``;
    ``start``: the table every question starts from (``prior*`` modes) instead of junk."""
    junk = np.arange(W, dtype=np.int32)
    hot = start if mode.startswith("prior") else None
    out = {}
    for pid, cat, ans in order:
        prompt, top = tops[pid]
        P = len(prompt)
        table = np.broadcast_to(junk, (V, W)).copy() if hot is None else hot.copy()
        if P > 1 and (hot is None or mode != "hot_nofill"):  # prompt=text
            succ = np.asarray(prompt[1:], np.int32)
            filled = (np.concatenate([succ[:, None], np.broadcast_to(junk[1:], (P - 1, W - 1))],
                                     axis=1) if hot is None else  # the drafter's own fill
                      np.asarray(text_fill(jnp.asarray(hot[prompt[:-1]]), jnp.asarray(succ))))
            for i in range(P - 1):  # the latest occurrence wins
                table[prompt[i]] = filled[i]
        n = len(ans)
        c = steps = acc = acc1 = 0
        while c < n - 1:
            toks = []
            for p, r in zip(parents, ranks):
                toks.append(int(table[ans[c] if p < 0 else toks[p], r]))
            cur, a = -1, 0
            while c + a + 1 < n:
                nxt = [i for i, (p, t) in enumerate(zip(parents, toks))
                       if p == cur and t == ans[c + a + 1] and (cap is None or depth[i] <= cap)]
                if not nxt:
                    break
                cur, a = nxt[0], a + 1
            for j in range(a + 1):
                table[ans[c + j]] = top[P + c + j]
            steps, acc, acc1 = steps + 1, acc + a, acc1 + (a > 0)
            c += a + 1
        if mode not in ("cold", "prior"):
            hot = table
        out[pid] = (cat, steps, acc, acc1)
    return out


def corpus_counts(corpus, vocab: int) -> dict:
    """``{token: {successor: count}}`` over the answers of a ``specjax train data`` corpus
    (the pairs ``successor_table`` counts)."""
    import json

    from specjax.drafters.sssd import _corpus_records

    corpus = Path(corpus)
    keys = []
    for shard in json.loads((corpus / "manifest.json").read_text())["shards"]:
        for rec in _corpus_records(corpus / shard):
            t = np.asarray(rec["tokens"], np.int64)
            k = np.asarray(rec["loss_mask"], bool)[1:]
            keys.append(t[:-1][k] * vocab + t[1:][k])
    uniq, cnt = np.unique(np.concatenate(keys), return_counts=True)
    counts: dict = {}
    for key, c in zip(uniq.tolist(), cnt.tolist()):
        counts.setdefault(key // vocab, {})[key % vocab] = float(c)
    return counts


def replay_learning(order, tops, parents, ranks, depth, cap, W: int, V: int, counts: dict,
                    weight: float):
    """``prior_learn``: each question replayed as ``prior`` from the table of ``counts``' most
    frequent successors (ties to the smaller id, junk past them), then its answer's pairs
    added to the counts ``weight`` times each."""
    junk = np.arange(W, dtype=np.int32)
    counts = {a: dict(d) for a, d in counts.items()}

    def row(a):
        r = junk.copy()
        best = sorted(counts.get(a, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:W]
        r[:len(best)] = [b for b, _ in best]
        return r

    table = np.broadcast_to(junk, (V, W)).copy()
    for a in counts:
        table[a] = row(a)
    out = {}
    for q in order:
        out.update(replay([q], tops, parents, ranks, depth, "prior", cap, W, V, table))
        ans = q[2]
        if not weight:
            continue
        for a, b in zip(ans[:-1], ans[1:]):
            counts.setdefault(a, {})[b] = counts.get(a, {}).get(b, 0.0) + weight
        for a in set(ans[:-1]):
            table[a] = row(a)
    return out


def _vocab(path) -> int:
    """The vocabulary size a table file says it has (``read_table`` checks the rest)."""
    import json

    try:
        with np.load(path, allow_pickle=False) as z:
            return int(json.loads(bytes(z["header"]).decode())["vocab_size"])
    except Exception as e:
        raise SystemExit(f"{path} is not a token_recycling table file ({type(e).__name__}: "
                         f"{e})") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("journal", help="a batch-1 benchmark journal with an 'ar' run per question")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tree", default="levels:3.2.2.1")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--cache", default="/tmp/replay_token_recycling.pkl",
                    help="the target's top ids per question, kept for later replays")
    ap.add_argument("--start", default=None,
                    help="a token_recycling table file (.npz): also replay 'prior' (every "
                         "question starts from it) and 'prior_hot' (carried on from it)")
    ap.add_argument("--corpus", default=None,
                    help="with --learn: the corpus the prior's counts come from")
    ap.add_argument("--learn", default=None,
                    help="comma-separated weights W: also replay 'prior_learn=W' (the prior's "
                         "counts plus each earlier answer's pairs W times)")
    a = ap.parse_args(argv)
    if bool(a.corpus) != bool(a.learn):
        raise SystemExit("--corpus and --learn go together")

    from specjax.bench.journal import read_journal
    from specjax.bench.prompts import load_prompts
    from specjax.tree import parse_tree, static_topology

    header, groups = read_journal(a.journal)
    items = {str(it["id"]): it for it in load_prompts(header["prompts"])}
    order = []
    for g in groups:
        r = next(r for r in g["runs"] if r["method"] == "ar")
        order += [(str(p), r["category"], t) for p, t in zip(r["prompt_ids"], r["tokens"])]
    cache = Path(a.cache)
    tops = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    todo = [o for o in order if o[0] not in tops or tops[o[0]][1].shape[1] < a.width]
    if todo:
        from tqdm import tqdm

        from specjax._runtime import load_for_run
        from specjax.drafters.token_recycling import teacher_top_ids

        lm = load_for_run(a.model, "float32")
        for n, (pid, _, ans) in enumerate(tqdm(todo, desc="top ids", unit="question")):
            prompt = lm.tokenizer.encode_chat(items[pid]["prompt"])
            tops[pid] = (prompt, teacher_top_ids(lm.model, prompt + ans, a.width))
            if n % 10 == 9 or n == len(todo) - 1:
                cache.write_bytes(pickle.dumps(tops))
    V = 1 + max(int(max(t[1].max(), max(t[0]))) for t in tops.values())
    V = max(V, max(max(ans, default=0) for _, _, ans in order) + 1)
    tree = parse_tree(a.tree, k=16)
    parents, ranks, depth = static_topology(tree, tree.depth)
    start, modes = None, ("cold", "hot", "hot_nofill")
    if a.start:
        from specjax.drafters.token_recycling import fit_width, read_table

        start = fit_width(read_table(a.start, _vocab(a.start), None)[1], a.width)
        if start.shape[0] < V:
            raise SystemExit(f"{a.start} is a table over {start.shape[0]} tokens; the journal "
                             f"holds ids up to {V - 1}")
        V, modes = start.shape[0], modes + ("prior", "prior_hot")
    counts = None
    if a.learn:
        V = max(V, _vocab(a.start) if a.start else V)
        counts = corpus_counts(a.corpus, V)
        modes = modes + tuple(f"prior_learn={float(w):g}" for w in a.learn.split(","))
    for mode in modes:
        for cap in (1, None):
            if mode.startswith("prior_learn="):
                res = replay_learning(order, tops, parents, ranks, depth, cap, a.width, V,
                                      counts, float(mode.split("=")[1]))
            else:
                res = replay(order, tops, parents, ranks, depth, mode, cap, a.width, V, start)
            by = {}
            for cat, s, acc, acc1 in res.values():
                by.setdefault(cat, np.zeros(3))[:] += (s, acc, acc1)
            tot = sum(by.values())
            print(f"{mode:14s} {'first level' if cap else 'whole tree':11s} tokens/step "
                  f"{1 + tot[1] / tot[0]:.3f}  steps that accept {tot[2] / tot[0]:.3f}  "
                  + " ".join(f"{c[:6]} {1 + b[1] / b[0]:.2f}" for c, b in sorted(by.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
