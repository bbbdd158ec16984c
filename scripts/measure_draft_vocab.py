"""How much of the target's output a draft vocabulary can draft, and how well a head drafts it.

A token outside a head's draft vocabulary can never be drafted, so the vocabulary's coverage of
the target's answers bounds every position's acceptance. This script measures, on the target's
own greedy answers to benchmark questions (the plain-decoding outputs a `specjax bench
--journal` recorded, so nothing is decoded again) and on a held-out tenth of a training corpus:

* the coverage of a head's draft vocabulary (``--head``) and of vocabularies of the given
  ``--sizes`` chosen from the corpus (:func:`specjax.train.tasks._target.draft_vocab_from_counts`,
  from the other nine tenths), overall and per category;
* with ``--teacher-forced``, the head's first-draft-position accuracy on those answers with
  the true prefix (what the training metric ``acc_0`` measures, but counting tokens outside
  the vocabulary as misses), per category, and the share of out-of-vocabulary tokens that
  occur in the prompt; ``--window W`` limits the head's attention to the last W positions
  (how far back it reads).

    python scripts/measure_draft_vocab.py --corpus data/corpus_smollm2 \\
        --journal docs/results/spec_bench_heads_gpu5.journal.jsonl \\
        --prompts spec_bench:../shared/data/spec_bench/question.jsonl \\
        --head specjax/heads/shipped/smollm2-135m-eagle3 --teacher-forced \\
        --out docs/results/draft_vocab_coverage.json

Benchmark questions are read only to measure; nothing here trains on them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def journal_answers(path: str) -> list[tuple[str, list[int], str]]:
    """``(category, answer tokens, prompt id)`` of every plain-decoding (``ar``) run."""
    out = []
    for line in Path(path).read_text().splitlines():
        rec = json.loads(line)
        for run in rec.get("runs", []):
            if run.get("method") == "ar":
                for pid, toks in zip(run["prompt_ids"], run["tokens"]):
                    out.append((run["category"], list(toks), str(pid)))
    if not out:
        sys.exit(f"{path}: no plain-decoding runs (method 'ar') in this journal")
    return out


def coverage(ids, toks: np.ndarray, vocab: int) -> float:
    inside = np.zeros(vocab, bool)
    inside[np.asarray(ids)] = True
    return float(inside[toks].mean()) if len(toks) else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="training corpus (comma-separated: several)")
    ap.add_argument("--journal", required=True, help="a `specjax bench --journal` file")
    ap.add_argument("--prompts", help="the journal's prompt spec (needed by --teacher-forced)")
    ap.add_argument("--head", help="an EAGLE head directory (its draft vocabulary)")
    ap.add_argument("--sizes", default="8192,12288,16384,24576,32768")
    ap.add_argument("--teacher-forced", action="store_true",
                    help="also the head's first-position accuracy on the answers (loads the model)")
    ap.add_argument("--window", type=int, default=None,
                    help="--teacher-forced with the head's attention limited to the last W "
                         "positions (how far back it reads)")
    ap.add_argument("--categories", default=None,
                    help="comma-separated categories only (default: all)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", help="results JSON")
    args = ap.parse_args(argv)

    from specjax.train.batches import Corpus
    from specjax.train.tasks._target import draft_vocab_from_counts

    answers = journal_answers(args.journal)
    if args.categories:
        answers = [a for a in answers if a[0] in args.categories.split(",")]
    cats = sorted({c for c, _, _ in answers})
    by_cat = {c: np.concatenate([np.asarray(t) for cc, t, _ in answers if cc == c]) for c in cats}
    allt = np.concatenate(list(by_cat.values()))
    recs = list(Corpus.open(args.corpus).iter_records())
    cut = int(len(recs) * 0.9)
    V = 1 + max(int(allt.max()), max(int(np.max(r["tokens"])) for r in recs))
    answer, prompt = np.zeros(V, np.int64), np.zeros(V, np.int64)
    for r in recs[:cut]:
        t, m = np.asarray(r["tokens"]), np.asarray(r["loss_mask"]).astype(bool)
        np.add.at(answer, t[m], 1)
        np.add.at(prompt, t[~m], 1)
    held = np.concatenate([np.asarray(r["tokens"])[np.asarray(r["loss_mask"]).astype(bool)]
                           for r in recs[cut:]])
    vocabs = {}
    head_ids = None
    if args.head:
        from safetensors.numpy import load_file

        head_ids = load_file(str(Path(args.head) / "model.safetensors"))["draft_ids"]
        vocabs[f"head ({len(head_ids)})"] = head_ids
    for size in [int(s) for s in args.sizes.split(",") if s]:
        vocabs[str(size)] = draft_vocab_from_counts(answer, size, fill=prompt)[0]
    result = {"corpus": args.corpus, "journal": args.journal, "answer_tokens": int(len(allt)),
              "held_out_answer_tokens": int(len(held)), "coverage": {}}
    print(f"{len(answers)} answers, {len(allt)} tokens; corpus {len(recs)} records "
          f"(vocabularies from {cut}, held-out answers {len(held)} tokens)")
    print(f"{'vocabulary':14s} {'held-out':>8s} {'bench':>6s}  "
          + " ".join(f"{c[:6]:>6s}" for c in cats))
    for name, ids in vocabs.items():
        row = {"held_out": coverage(ids, held, V), "bench": coverage(ids, allt, V),
               "by_category": {c: coverage(ids, by_cat[c], V) for c in cats}}
        result["coverage"][name] = row
        print(f"{name:14s} {row['held_out']:8.3f} {row['bench']:6.3f}  "
              + " ".join(f"{row['by_category'][c]:6.3f}" for c in cats))
    if args.teacher_forced:
        if not (args.head and args.prompts):
            sys.exit("--teacher-forced needs --head and --prompts")
        result["teacher_forced"] = teacher_forced(args, answers, head_ids)
        result["window"] = args.window
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def teacher_forced(args, answers, head_ids) -> dict:
    """Per category: answer tokens, share inside the vocabulary, the head's step-0 accuracy
    with the true prefix (all tokens; inside the vocabulary only) and the share of
    out-of-vocabulary tokens found in the prompt."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from specjax._runtime import load_for_run
    from specjax.bench.prompts import load_prompts
    from specjax.train.task import TASKS

    lm = load_for_run(args.model, "float32")
    items = {str(it["id"]): it for it in load_prompts(args.prompts)}
    task = TASKS.build("eagle3", {"ttt_steps": 1}, lm).warm_start(args.head)
    params, frozen = task.init_params(None), task.frozen()

    @jax.jit
    def first_draft(tokens):
        head = nnx.merge(task.head_graphdef, params["head"])
        logits = task.unrolled(head, task._target_pass(frozen, tokens), tokens, 1,
                               args.window)[0][0]
        return jnp.take(frozen["draft_ids"], jnp.argmax(logits, -1))

    inside = np.zeros(task.head_cfg.vocab_size, bool)
    inside[np.asarray(head_ids)] = True
    st = defaultdict(lambda: np.zeros(5))
    for cat, ans, pid in answers:
        prompt = lm.tokenizer.encode_chat(items[pid]["prompt"])
        seq = np.asarray(prompt + ans, np.int32)
        T = -(-len(seq) // 128) * 128  # buckets of 128: few compiles
        tok = np.zeros((1, T), np.int32)
        tok[0, :len(seq)] = seq
        pred = np.asarray(first_draft(jnp.asarray(tok)))[0]
        P, in_prompt = len(prompt), set(prompt)
        for j in range(1, len(ans)):  # position P + j - 2 drafts answer token j
            x, y = int(seq[P + j]), int(pred[P + j - 2])
            st[cat] += [1, inside[x], y == x, (y == x) and inside[x],
                        (not inside[x]) and x in in_prompt]
    out = {}
    print(f"\nteacher-forced first draft position, head {args.head}"
          + (f", attention window {args.window}" if args.window else ""))
    print(f"{'category':16s} {'tokens':>6s} {'inside':>6s} {'acc':>6s} {'acc|in':>6s} "
          f"{'oov in prompt':>13s}")
    for cat, s in sorted(st.items()) + [("ALL", sum(st.values()))]:
        n, nin = s[0], max(s[1], 1)
        out[cat] = {"tokens": int(n), "inside": s[1] / n, "acc": s[2] / n,
                    "acc_inside": s[3] / nin, "oov_in_prompt": s[4] / max(n - s[1], 1)}
        o = out[cat]
        print(f"{cat:16s} {int(n):6d} {o['inside']:6.3f} {o['acc']:6.3f} {o['acc_inside']:6.3f} "
              f"{o['oov_in_prompt']:13.3f}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
