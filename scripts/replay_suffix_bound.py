"""The ceiling of copy-based drafting on the repeated-task workload of issue 24, from a journal
of ``scripts/bench_suffix.py``.

The suffix drafter can only draft text it has seen: the request's prompt, its output so far and
the earlier answers in its global cache. This replays the requests in the stream's order
against plain decoding's answers, charging each step the machine's verify cost of its block at
the engine's bucketed sizes (drafting and the loop's own work free, the prefill plain
decoding's own), with these drafts (``k`` tokens at most):

* ``outputs_rule``: the drafter's own chain (the majority continuation of the 32 most recent
  occurrences of the longest matched context) cut by its defaults (a token needs 10% of the
  candidates, at most the match length), charged for all it drafts: not a bound, a replay;
* ``outputs_vote``: the same chain cut where it stops being accepted (the length known);
* ``outputs_matched``: the continuation, among every occurrence of the longest matched
  context, that agrees longest with the answer, cut at the right length: the ceiling of any
  drafter of the longest matched context's continuations (chain or tree, whatever its vote
  or length rule; one that backs off to shorter contexts is bounded by ``outputs`` only);
* ``outputs``: the longest run of the answer found anywhere in the prompt, the output so far
  and the earlier answers (the source position chosen knowing the answer: the ceiling of any
  drafter that copies from those texts);
* ``everything``: the same with every earlier prompt as well.

An oracle takes the cheapest path through the answer (any accepted length up to each
position's reach; with bucketed block costs the longest draft is not always the cheapest).
Forwards count the prefill's, as the engine's do. Each request's figure is
``prefill + decode * cost / plain steps`` with plain decoding's
measured prefill and decode times, summed per part as the benchmark sums its wall times, beside
the measured methods of the same journal:

    python scripts/replay_suffix_bound.py --journal runs/suffix_workload_2 \\
        --out docs/results/suffix_workload_bound.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

PARTS = ("round1", "round2", "edit", "all")
# name -> (the texts drafted from, a matched context (else a copy from anywhere), the rule)
BOUNDS = {"outputs_rule": ("outputs", True, "drafter"),
          "outputs_vote": ("outputs", True, "vote"),
          "outputs_matched": ("outputs", True, "best"),
          "outputs": ("outputs", False, "best"),
          "everything": ("everything", False, "best")}
SEPARATOR = -1  # between documents: no copy runs across two texts


def longest_copy(text: np.ndarray, target: np.ndarray, k: int) -> int:
    """Length of the longest prefix of ``target`` (at most ``k`` tokens) that occurs as a run
    in ``text``."""
    k = min(k, len(target))
    if k == 0:
        return 0
    starts = np.flatnonzero(text == target[0])
    n = 0
    while starts.size:
        n += 1
        if n == k:
            return n
        starts = starts[starts + n < len(text)]
        starts = starts[text[starts + n] == target[n]]
    return n


def matched_continuations(text: np.ndarray, max_depth: int) -> tuple[np.ndarray, int]:
    """Where the suffix drafter's candidates start: the positions just after the earlier
    occurrences of the longest suffix of ``text`` (at most ``max_depth`` tokens) that occurs
    earlier with at least one token after it, and that suffix's length (0: no match)."""
    end = len(text)
    if end < 2:
        return np.zeros(0, np.int64), 0
    ends = np.flatnonzero(text[:end - 1] == text[end - 1]) + 1  # one past each occurrence
    depth = 0
    while ends.size and depth < max_depth:
        best, depth = ends, depth + 1
        if depth >= end or text[end - depth - 1] == SEPARATOR:  # contexts stop at a document
            break
        ends = ends[ends - depth - 1 >= 0]
        ends = ends[text[ends - depth - 1] == text[end - depth - 1]]
    return (best, depth) if depth else (np.zeros(0, np.int64), 0)


def vote(text: np.ndarray, starts: np.ndarray, k: int, candidates: int,
         support: list | None = None) -> np.ndarray:
    """The suffix drafter's chain from the continuations at ``starts`` (its ``candidates``
    most recent): at each depth the token most of the candidates still alive agree on (ties:
    the most recent), the others dropped; no length cut (the oracle's perfect length is).
    ``support`` (a list) receives each token's share of the candidates."""
    alive = np.sort(starts)[::-1][:candidates]  # most recent first
    root = max(1, alive.size)
    chain = []
    for j in range(k):
        alive = alive[alive + j < len(text)]
        toks = text[alive + j] if alive.size else np.zeros(0, np.int64)
        alive, toks = alive[toks != SEPARATOR], toks[toks != SEPARATOR]
        if not toks.size:
            break
        values, first, counts = np.unique(toks, return_index=True, return_counts=True)
        top = counts == counts.max()
        pick = values[top][np.argmin(first[top])]  # ties: the most recent occurrence
        chain.append(pick)
        alive = alive[toks == pick]
        if support is not None:
            support.append(alive.size / root)
    return np.asarray(chain, np.int64)


def draft_at(text: np.ndarray, truth: np.ndarray, k: int, max_depth: int | None, rule: str,
             candidates: int, cut: tuple[float, float]) -> tuple[int, int]:
    """``(accepted, drafted)`` at one position: ``text`` is all the drafter has seen,
    ``truth`` the answer's next tokens (at most ``k``); see :func:`oracle_cost` for the
    rules. An oracle drafts exactly what is accepted (``drafted == accepted``)."""
    if max_depth is None:
        n = longest_copy(text, truth, k)
        return n, n
    starts, match = matched_continuations(text, max_depth)
    if rule in ("vote", "drafter"):
        support: list[float] = []
        chain = vote(text, starts, len(truth), candidates, support)
        if rule == "drafter":  # the drafter's own cut: share, match length, k
            share, factor = cut
            d = 0
            while d < len(chain) and support[d] >= share:
                d += 1
            chain = chain[:min(d, int(np.ceil(factor * match)))]
        n = 0
        while n < len(chain) and chain[n] == truth[n]:
            n += 1
        return n, (len(chain) if rule == "drafter" else n)
    n = 0
    for j in range(len(truth)):  # the candidates that still agree after j tokens
        starts = starts[starts + j < len(text)]
        starts = starts[text[starts + j] == truth[j]]
        if not starts.size:
            break
        n = j + 1
    return n, n


def oracle_cost(sources: np.ndarray, prompt: list[int], output: list[int], k: int,
                block_cost, max_depth: int | None = None, rule: str = "best",
                candidates: int = 32, cut: tuple[float, float] = (0.1, 1.0)
                ) -> tuple[int, float]:
    """(target forwards, the prefill's included; relative cost of the steps after it) to
    produce ``output`` (``output[0]`` comes from the prefill), a step verifying ``d`` drafted
    tokens charged ``block_cost[d]``. The draft at each position:

    * ``max_depth`` None: the longest run of the answer found anywhere in ``sources``, the
      prompt or the output so far (the source chosen knowing the answer);
    * ``rule="best"``: of the continuations of every occurrence of the longest matched
      context (at most ``max_depth`` tokens; the suffix drafter's candidates), the one that
      agrees longest with the answer;
    * ``rule="vote"``: the suffix drafter's chain (the majority continuation of its
      ``candidates`` most recent occurrences);
    * ``rule="drafter"``: that chain cut as the drafter cuts it (``cut``: the smallest share
      of the candidates a token needs and the most tokens per matched token, its
      ``min_prob`` and ``factor``), charged for all it drafts: a replay, not an oracle.

    The oracles may draft any prefix of their draft, knowing how much will be accepted:
    every position's reach depends on the answer alone, so the cheapest path through the
    answer is found exactly (a dynamic programme over positions), not greedily (the curve's
    block buckets make the longest draft not always the cheapest)."""
    out = np.asarray(output, np.int64)
    n_out = len(out)

    def at(pos):
        text = np.concatenate([sources, [SEPARATOR], np.asarray(prompt, np.int64),
                               out[:pos]])
        return draft_at(text, out[pos:pos + k], k, max_depth, rule, candidates, cut)

    if rule == "drafter":  # the drafter's path
        pos, forwards, total = 1, 1, 0.0
        while pos < n_out:
            n, d = at(pos)
            total += float(block_cost[d])
            pos += min(n + 1, n_out - pos)
            forwards += 1
        return forwards, total
    best = np.full(n_out + 1, np.inf)  # cheapest cost from each position to the end
    steps = np.zeros(n_out + 1, np.int64)
    best[n_out] = 0.0
    for pos in range(n_out - 1, 0, -1):
        reach, _ = at(pos)
        for n in range(reach + 1):
            nxt = min(pos + n + 1, n_out)
            c = float(block_cost[n]) + best[nxt]
            if c < best[pos] or (c == best[pos] and steps[nxt] + 1 < steps[pos]):
                best[pos], steps[pos] = c, steps[nxt] + 1
    if n_out <= 1:
        return 1, 0.0
    return int(steps[1]) + 1, float(best[1])


def replay(records: list[dict], k: int, block_cost, max_depth: int = 24,
           cut: tuple[float, float] = (0.1, 1.0)) -> dict:
    """Per part: plain decoding's and each bound's summed wall time and forwards, and the
    measured methods' figures, from the journal's ``records``."""
    seen = {"outputs": [], "everything": []}
    rows = []
    for r in records:
        if "prompt_ids" not in r or "prefill_s" not in r["runs"]["ar"]:
            raise SystemExit("the journal has no prompt ids or prefill times (written before "
                             "2026-12-06): run scripts/bench_suffix.py again into a new "
                             "--journal")
        ar = r["runs"]["ar"]
        prompt, output = r["prompt_ids"], ar["tokens"]
        decode_s = ar["wall_s"] - ar["prefill_s"]
        plain_steps = max(1, len(output) - 1)
        row = {"part": r["part"], "ar_wall_s": ar["wall_s"], "new_tokens": len(output),
               "ar_forwards": ar["forwards"],
               "methods": {m: (x["wall_s"], x["forwards"]) for m, x in r["runs"].items()
                           if m != "ar"}}
        sources = {name: np.concatenate([np.append(np.asarray(d, np.int64), SEPARATOR)
                                         for d in docs]) if docs else np.zeros(0, np.int64)
                   for name, docs in seen.items()}
        for bound, (texts, matched, rule) in BOUNDS.items():
            fw, cost = oracle_cost(sources[texts], prompt, output, k, block_cost,
                                   max_depth if matched else None, rule, cut=cut)
            row[bound] = (ar["prefill_s"] + decode_s * cost / plain_steps, fw)
        rows.append(row)
        seen["outputs"].append(output)
        seen["everything"] += [prompt, output]
    report = {}
    for part in PARTS:
        sel = [x for x in rows if part == "all" or x["part"] == part]
        if not sel:
            continue
        ar_s = sum(x["ar_wall_s"] for x in sel)
        tokens = sum(x["new_tokens"] for x in sel)
        rep = {"requests": len(sel), "plain_tau": tokens / sum(x["ar_forwards"] for x in sel)}
        for name in BOUNDS:
            rep[f"bound_{name}_speedup"] = ar_s / sum(x[name][0] for x in sel)
            rep[f"bound_{name}_tau"] = tokens / sum(x[name][1] for x in sel)
        for m in sel[0]["methods"]:
            rep[f"{m}_speedup"] = ar_s / sum(x["methods"][m][0] for x in sel)
            rep[f"{m}_tau"] = tokens / sum(x["methods"][m][1] for x in sel)
        report[part] = rep
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--journal", required=True, help="the --journal of scripts/bench_suffix.py")
    ap.add_argument("--k", type=int, default=16, help="longest draft (the suffix drafter's k)")
    ap.add_argument("--max-depth", type=int, default=24,
                    help="longest context the suffix drafter matches (its max_depth)")
    ap.add_argument("--cut", default="0.1,1.0",
                    help="SHARE,FACTOR: the replayed drafter's cut (its min_prob and factor)")
    ap.add_argument("--cost", default=None,
                    help="verify-curve JSON; default: this machine's measured curve for the "
                         "journal's model at batch 1 (specjax.cost_curves, cached)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)

    path = Path(a.journal) / "records.jsonl"
    if not path.exists():
        print(f"error: {path} does not exist", file=sys.stderr)
        return 2
    lines = path.read_text().splitlines()
    header, records = json.loads(lines[0]), [json.loads(x) for x in lines[1:]]
    if not records:
        print(f"error: {path} holds no finished request", file=sys.stderr)
        return 2

    from specjax import cost_curves
    from specjax.models.loaders import load
    from specjax.policies.adaptive import bucketed_cost, load_cost_curve

    if a.cost:
        cost = load_cost_curve(a.cost)
    else:
        cost = cost_curves.measured_cost(load(header["model"]), a.k, 1)
    block_cost = np.asarray(bucketed_cost(tuple(cost), a.k))
    try:
        share, factor = (float(x) for x in a.cut.split(","))
    except ValueError:
        ap.error(f"--cut must be SHARE,FACTOR (two numbers), got {a.cut!r}")
    report = replay(records, a.k, block_cost, a.max_depth, (share, factor))
    cols = ["bound_" + b for b in BOUNDS] + [m for m in header["methods"] if m != "ar"]
    print("| part | requests | " + " | ".join(cols) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in cols) + " |")
    for part, rep in report.items():
        cells = [f"{rep[c + '_speedup']:.2f}x (tau {rep[c + '_tau']:.2f})" for c in cols]
        print(f"| {part} | {rep['requests']} | " + " | ".join(cells) + " |")
    if a.out:
        out = {"command": " ".join(["python"] + sys.argv), "journal": str(a.journal),
               "k": a.k, "max_depth": a.max_depth, "cut": [share, factor],
               "cost": [float(c) for c in cost],
               "header": header,
               "requests": len(records), "report": report}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
