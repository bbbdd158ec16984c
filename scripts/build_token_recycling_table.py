"""Builds the table ``token_recycling`` starts from for a model (``prior=shipped``, issue 24)
out of a ``specjax train data`` corpus.

The corpus is the target's own greedy answers to varied prompts (self-distillation; the
builder refused every prompt that overlaps an evaluation set, Spec-Bench included). Greedy
decoding picks the target's top token, so in an answer each token's successor is the target's
first choice after it in that context; the table keeps, per token, its ``--width`` most
frequent successors over all the answers (the answers only: a prompt's successors are not the
target's choices). A row of a batch then starts from it instead of from junk and overwrites
an entry as soon as the target proposes candidates after that token (the paper's rule). It
is written, compressed, where the drafter looks for a shipped table
(``specjax/drafters/data/NAME.token_recycling.npz``), bound to the vocabulary and the
tokenizer.

    python scripts/build_token_recycling_table.py --corpus data/corpus_smollm2 \\
        --out specjax/drafters/data/smollm2-135m.token_recycling.npz
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="data/corpus_smollm2")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--out", default="specjax/drafters/data/smollm2-135m.token_recycling.npz")
    ap.add_argument("--width", type=int, default=16,
                    help="successors kept per token (a drafter of a smaller width uses the first)")
    a = ap.parse_args(argv)

    import numpy as np
    from tqdm import tqdm

    from specjax.drafters.base import target_ids
    from specjax.drafters.sssd import _corpus_records
    from specjax.drafters.token_recycling import FORMAT, VERSION, successor_table, write_table
    from specjax.errors import DrafterError
    from specjax.models.loaders import load
    from specjax.tokenizer import tokenizer_sha256

    lm = load(a.model)
    vocab, tok = target_ids(lm)
    corpus = Path(a.corpus)
    manifest = json.loads((corpus / "manifest.json").read_text())
    if manifest.get("tokenizer_sha256") != tokenizer_sha256(lm.tokenizer):
        raise DrafterError(f"corpus {corpus} was written with another tokenizer than "
                           f"{a.model}'s")
    t0 = time.perf_counter()
    docs = [(rec["tokens"], rec["loss_mask"])
            for shard in tqdm(manifest["shards"], desc="corpus", unit="shard")
            for rec in _corpus_records(corpus / shard)]
    table = successor_table(docs, vocab, a.width)
    filled = int(np.sum(np.any(table != np.arange(a.width, dtype=np.int32), axis=1)))
    pairs = sum(int(np.sum(np.asarray(m[1:], bool))) for _, m in docs)
    header = {"format": FORMAT, "version": VERSION, "width": a.width, "vocab_size": vocab,
              "tokenizer": tok, "batches": 0,
              "source": f"corpus {corpus.name}: {len(docs)} answers of {a.model}, "
                        f"{pairs} successor pairs, the {a.width} most frequent per token",
              "tokens_with_entries": filled}
    write_table(a.out, header, table, compressed=True)
    Path(a.out).chmod(0o644)  # package data: readable by all (the temporary file was 0600)
    print(f"{len(docs)} records, {pairs} pairs, {filled} tokens with an entry, built in "
          f"{time.perf_counter() - t0:.1f}s; written to {a.out} "
          f"({Path(a.out).stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
