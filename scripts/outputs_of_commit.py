"""Token outputs of plain decoding and prompt lookup on the built-in prompts (batch 1 and 4),
for comparing two commits of specjax: run it once per commit with PYTHONPATH=WORKTREE."""
import json, sys
import specjax
from specjax.engine import generate
from specjax.methods import build
from specjax.data.builtin import BUILTIN
lm = specjax.load("smollm2-135m")
ids = [lm.tokenizer.encode_chat(p) for _, p in BUILTIN]
out = {}
for m in ("ar", "prompt_lookup"):
    b = build(m, lm, {})
    for bs in (1, 4):
        r = generate(lm.model, ids, max_new_tokens=128, eos_ids=lm.tokenizer.eos_ids,
                     batch_size=bs, drafter=b[0], policy=b[1])
        out[f"{m}@batch{bs}"] = r.tokens
json.dump(out, open(sys.argv[1], "w"))
print("done", {k: sum(map(len, v)) for k, v in out.items()})
