"""Builds the SSSD datastore shipped for a model from a ``specjax train data`` corpus (issue 24).

The corpus is the target's own answers to varied prompts (self-distillation; the builder
refused every prompt that overlaps an evaluation set), so its n-grams are what the target
tends to say. Every record's prompt and answer are stored (``--answers-only`` keeps the answers
alone), bound to the model's tokenizer, and written where ``sssd`` looks for a shipped
datastore (``specjax/drafters/data/NAME.sssd.npz``).

    python scripts/build_sssd_datastore.py --corpus data/corpus_smollm2 \
        --out specjax/drafters/data/smollm2-135m.sssd.npz
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/corpus_smollm2")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", default="specjax/drafters/data/smollm2-135m.sssd.npz")
    ap.add_argument("--max-order", type=int, default=4)
    ap.add_argument("--slots", type=int, default=1 << 20)
    ap.add_argument("--answers-only", action="store_true")
    a = ap.parse_args()

    import numpy as np

    from specjax.drafters.base import target_ids
    from specjax.drafters.sssd import Datastore
    from specjax.models.loaders import load
    from specjax.tokenizer import tokenizer_sha256

    lm = load(a.model)
    t0 = time.perf_counter()
    ds = Datastore.from_corpus(a.corpus, answers_only=a.answers_only,
                               tokenizer_sha256=tokenizer_sha256(lm.tokenizer),
                               max_order=a.max_order, slots=a.slots, max_tokens=1 << 22)
    vocab, tok = target_ids(lm)
    ds.bind(vocab, tok, a.corpus)
    t1 = time.perf_counter()
    tables = ds.tables()
    t2 = time.perf_counter()
    filled = [int(np.sum(tables["count"][n] > 0)) for n in range(ds.max_order)]
    ds.save(a.out)
    print(f"{ds}: read in {t1 - t0:.1f}s, tables built in {t2 - t1:.1f}s; filled slots per "
          f"order {filled} of {ds.slots}; written to {a.out}")


if __name__ == "__main__":
    main()
