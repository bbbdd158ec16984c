"""The ``specjax`` command: ``generate``, ``info``, ``demo``, ``bench``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from specjax._runtime import load_for_run
from specjax.errors import CLIError  # noqa: F401  (re-exported)
from specjax.methods import METHODS

BUILTIN_PROMPTS = [
    {"id": "builtin-chat", "prompt": "Give me three tips for staying focused while studying."},
    {"id": "builtin-code", "prompt": "Write a Python function that checks whether a string is a "
                                     "palindrome, ignoring case and spaces."},
    {"id": "builtin-math", "prompt": "A train travels 120 km in 1.5 hours. What is its average "
                                     "speed in km/h? Explain briefly."},
    {"id": "builtin-summary", "prompt": "Summarize in two sentences: The city council met on "
                                        "Tuesday to discuss the new bike lanes. Residents "
                                        "praised the safety benefits but worried about parking. "
                                        "The council will vote next month."},
]


def read_prompts(path: str) -> list[dict]:
    """Prompts of a spec -> ``[{"id", "prompt"[, "category"]}]``.

    ``path`` is a JSONL file of ``{"id", "prompt"}`` or ``{"question_id", "turns": [...]}``
    lines (first turn), or any spec ``specjax.data.load_prompts`` reads (``builtin``,
    ``spec_bench:PATH``, ``mt_bench``, ``humaneval``, ``gsm8k:PATH``, ``sharegpt:PATH``, ...).
    """
    from specjax import data

    try:
        return [r.prompt_dict() for r in data.load_prompts(path)]
    except data.DataError as e:
        raise CLIError(str(e)) from None


def _load(args):
    """The model the flags name (:func:`specjax._runtime.load_for_run`), refused or warned
    about as the command needs: random weights serve ``info`` and ``bench --verify-curve``
    only; a quantized target decoded speculatively is not token-identical."""
    verify_curve = getattr(args, "verify_curve", False)
    listed = [m.strip().split("@")[0] for m in (getattr(args, "methods", "") or "").split(",")]
    speculative = not verify_curve and (
        getattr(args, "cmd", None) == "demo" or getattr(args, "method", "ar") != "ar"
        or any(m not in ("ar", "") for m in listed))
    return load_for_run(args.model, args.dtype, getattr(args, "quantize", "none"),
                        getattr(args, "attention_impl", "dense"),
                        decodes_text=not verify_curve and getattr(args, "cmd", None) != "info",
                        speculative=speculative, numerics=getattr(args, "numerics", "exact"),
                        exact_products=getattr(args, "exact_products", None))


def _encode(lm, items, chat: bool):
    tok = lm.tokenizer
    if tok is None:
        raise CLIError(f"{lm.source}: no tokenizer in this checkpoint; cannot encode text")
    return [tok.encode_chat(it["prompt"]) if chat else tok.encode(it["prompt"]) for it in items]


def cmd_generate(args) -> int:
    from tqdm import tqdm

    from specjax.engine import generate
    from specjax.mesh import make_mesh
    from specjax.sampling import SamplingParams

    from specjax import methods

    if args.method not in METHODS:
        raise CLIError(f"--method {args.method!r} is not available; choose from "
                       f"{', '.join(METHODS)}")
    method_args = methods.parse_method_args(args.method_arg)
    sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              seed=args.seed)
    if args.prompt is not None and args.prompts is not None:
        raise CLIError("give either --prompt or --prompts, not both")
    if args.prompt is not None:
        items = [{"id": 0, "prompt": args.prompt}]
    elif args.prompts is not None:
        items = read_prompts(args.prompts)
    else:
        items = BUILTIN_PROMPTS
    lm = _load(args)
    ids = _encode(lm, items, not args.no_chat_template)
    # the cache length the cost probes time: the one given, else the median prompt's
    from specjax.buckets import median_cache_length

    priced = args.cache_len or median_cache_length(map(len, ids), args.max_new_tokens)
    drafter, policy, verifier = methods.build(args.method, lm, method_args,
                                              batch=max(1, min(args.batch_size, len(ids))),
                                              cache_len=priced, greedy=sampling.greedy,
                                              temperature=sampling.temperature)
    bar = tqdm(total=len(ids), desc="generate", unit="prompt", file=sys.stderr,
               disable=args.quiet)
    res = generate(lm.model, ids, max_new_tokens=args.max_new_tokens, sampling=sampling,
                   eos_ids=lm.tokenizer.eos_ids, batch_size=args.batch_size,
                   cache_len=args.cache_len, progress=bar.update, drafter=drafter,
                   policy=policy, verifier=verifier,
                   mesh=make_mesh(args.mesh) if args.mesh else None)
    bar.close()
    from specjax.distributed import is_main

    if not is_main():  # a multi-host run: process 0 writes the output
        return 0
    out_fh = open(args.output, "w", encoding="utf-8") if args.output else None
    total_new, total_wall = 0, 0.0
    seen_walls = set()
    for i, it in enumerate(items):
        rec = {
            "id": it["id"],
            "prompt_ids": res.prompt_tokens[i],
            "output_ids": res.tokens[i],
            "text": lm.tokenizer.decode(res.tokens[i]),
            "new_tokens": len(res.tokens[i]),
            "target_forwards": res.target_forwards[i],
            "accepted_per_forward": len(res.tokens[i]) / max(res.target_forwards[i], 1),
            "wall_s": res.wall_s[i],
            "prefill_s": res.prefill_s[i],
            "stop_reason": res.stop_reason[i],
            "method": args.method,
        }
        if drafter is not None:
            drafted, accepted = res.extra["drafted"][i], res.extra["accepted"][i]
            rec.update({
                "drafted": drafted,
                "accepted": accepted,
                "acceptance_rate": accepted / drafted if drafted else None,
                "drafted_by_position": res.extra["drafted_at"][i],
                "accepted_by_position": res.extra["accepted_at"][i],
                "method_config": methods.describe(drafter, policy, verifier),
            })
        total_new += rec["new_tokens"]
        key = (i // (args.batch_size or len(items)))
        if key not in seen_walls:
            seen_walls.add(key)
            total_wall += res.wall_s[i]
        if out_fh:
            out_fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
        else:
            print(json.dumps(rec, ensure_ascii=False))
    if out_fh:
        out_fh.close()
    print(f"{len(items)} prompts, {total_new} new tokens in {total_wall:.2f}s "
          f"({total_new / max(total_wall, 1e-9):.1f} tokens/s; compile {res.compile_s:.1f}s "
          "not included)", file=sys.stderr)
    return 0


def cmd_info(args) -> int:
    lm = _load(args)
    cfg = lm.config
    tok = lm.tokenizer
    info = {
        "source": lm.source,
        "format": lm.format,
        **{k: v for k, v in lm.details.items() if v},
        "architecture": cfg.architecture,
        "parameters": cfg.num_params,
        "config": cfg.to_dict(),
    }
    if tok is not None:
        info["tokenizer"] = {
            "vocab_size": tok.vocab_size,
            "bos": [tok.bos_id, tok.bos_token],
            "eos_ids": list(tok.eos_ids),
            "eos_tokens": [tok.id_to_token(i) for i in tok.eos_ids],
            "add_bos": tok.add_bos,
            "chat_template": bool(tok.chat_template),
        }
    print(json.dumps(info, indent=2, default=str))
    return 0


def demo_methods(args, lm) -> list[str]:
    """The speculative methods ``specjax demo`` compares: ``--methods``, else the best
    model-free drafter (``sssd`` where a datastore ships for the model, else prompt lookup)
    plus every head drafter (eagle, hydra, medusa) with a trained head shipped for the
    model."""
    if args.methods:
        return [m.strip() for m in args.methods.split(",") if m.strip() and m.strip() != "ar"]
    from specjax.drafters.sssd import shipped_datastore
    from specjax.heads.shipped import find_shipped

    out = ["sssd" if shipped_datastore(lm) is not None else "prompt_lookup"]
    for kind in ("eagle", "hydra", "medusa"):
        if find_shipped(kind, lm.model, lm.tokenizer) is not None:
            out.append(kind)
        else:
            print(f"({kind}: no trained head ships for {lm.source}; not shown)",
                  file=sys.stderr)
    return out


def cmd_demo(args) -> int:
    """Decodes the built-in prompts with plain decoding and speculative methods side by
    side (interleaved per prompt); prints each method's speed and speedup."""
    from specjax import methods
    from specjax.buckets import cache_length
    from specjax.engine import generate

    lm = _load(args)
    ids = _encode(lm, BUILTIN_PROMPTS, True)
    names = demo_methods(args, lm)
    per_method: dict[str, dict] = {n: {} for n in names}
    for item in args.method_arg:  # METHOD.KEY=VALUE for one method, KEY=VALUE for all
        key = item.split("=", 1)[0]
        target = key.split(".", 1)[0] if "." in key else None
        if target is not None and target not in per_method:
            raise CLIError(f"--method-arg {item!r} names method {target!r}, which the demo "
                           f"does not run ({', '.join(names)})")
        for n in ([target] if target else names):
            per_method[n].update(methods.parse_method_args(
                [item.split(".", 1)[1] if target else item]))
    # one cache length for every prompt: one compiled decode loop per method, not one per
    # prompt bucket (the compile is most of the demo's time on a CPU)
    S = max(cache_length(len(p), args.max_new_tokens) for p in ids)
    built = {n: methods.build(n, lm, per_method[n], cache_len=S) for n in names}
    eos = lm.tokenizer.eos_ids
    runs = [("ar", (None, None, None))] + [(n, tuple(built[n])) for n in names]
    print("compiling ...", file=sys.stderr)
    compile_s = 0.0
    for _, (d, pol, ver) in runs:
        for p in ids:
            compile_s += generate(lm.model, [p], max_new_tokens=args.max_new_tokens,
                                  eos_ids=eos, drafter=d, policy=pol, verifier=ver,
                                  cache_len=S).compile_s
    tot = {n: [0, 0.0, 0, True] for n, _ in runs}  # tokens, seconds, forwards, identical
    for it, p in zip(BUILTIN_PROMPTS, ids):
        res = {}
        for n, (d, pol, ver) in runs:  # interleaved, so machine drift hits all alike
            res[n] = generate(lm.model, [p], max_new_tokens=args.max_new_tokens, eos_ids=eos,
                              drafter=d, policy=pol, verifier=ver, cache_len=S)
        a = res["ar"]
        print(f"\n### {it['id']}: {it['prompt']}\n{lm.tokenizer.decode(a.tokens[0])}")
        line = [f"[ar] {a.new_tokens[0] / a.wall_s[0]:.1f} tok/s"]
        for n, _ in runs:
            r = res[n]
            t = tot[n]
            t[0] += r.new_tokens[0]
            t[1] += r.wall_s[0]
            t[2] += r.target_forwards[0]
            if n == "ar":
                continue
            same = (f"LOSSY rule {r.extra['verifier']}" if not r.exact else
                    "identical" if r.tokens == a.tokens else "DIFFERS from ar")
            t[3] = t[3] and same == "identical"
            line.append(f"[{n}] {r.new_tokens[0] / r.wall_s[0]:.1f} tok/s, "
                        f"{r.new_tokens[0] / r.target_forwards[0]:.2f} tok/forward, "
                        f"{a.wall_s[0] / r.wall_s[0]:.2f}x ({same})")
        print(" | ".join(line))
    ar_tps = tot["ar"][0] / tot["ar"][1]
    print(f"\nsummary (greedy, {len(ids)} prompts, {args.max_new_tokens} new tokens; compile "
          f"{compile_s:.1f}s not included):")
    print(f"  {'method':<16}{'tokens/s':>10}{'speedup':>9}{'tok/forward':>13}  output")
    for n, _ in runs:
        tk, sec, fw, same = tot[n]
        desc = "" if n == "ar" else getattr(built[n].drafter, "description", "")
        tree = None if n == "ar" else getattr(built[n].drafter, "tree", None)
        if tree is not None:  # e.g. the EAGLE head's default tree at batch 1
            desc = f"{desc}, tree {tree.describe()}" if desc else f"tree {tree.describe()}"
        print(f"  {n:<16}{tk / sec:>10.1f}{tk / sec / ar_tps:>8.2f}x{tk / max(fw, 1):>13.2f}  "
              + ("plain decoding" if n == "ar" else
                 ("identical to ar" if same else "NOT identical") + (f"; {desc}" if desc
                                                                    else "")))
    return 0


def cmd_methods(args) -> int:
    """Lists every registered drafter, policy and verifier with its options and defaults."""
    from specjax.methods import (BATCHED_DEFAULTS, CHAIN_DEFAULTS, DEFAULTS,
                                 GREEDY_B1_DEFAULTS, HEAD_DRAFTERS, SAMPLED_B1_DEFAULTS,
                                 registry_table)

    table = registry_table()
    if args.json:
        print(json.dumps({**table, "method_defaults": DEFAULTS,
                          "chain_defaults": CHAIN_DEFAULTS,
                          "greedy_batch1_defaults": GREEDY_B1_DEFAULTS,
                          "sampled_batch1_defaults": SAMPLED_B1_DEFAULTS,
                          "batched_chain_defaults": BATCHED_DEFAULTS}, indent=2, default=repr))
        return 0
    print("A method is a drafter (--method NAME) plus a policy and a verifier, chosen with\n"
          "--method-arg policy=NAME / verifier=NAME; every other --method-arg key=value is an\n"
          "option of one of the three. 'ar' is plain decoding; verifier 'exact' (the default)\n"
          "picks greedy, chain_sampling or tree_sampling to fit the run.")
    for kind, entries in table.items():
        print(f"\n{kind}:")
        for e in entries:
            print(f"  {e['name']}: {e['doc']}")
            for label, table_ in (("method defaults", DEFAULTS),
                                  ("greedy at batch 1 without tree, k or policy",
                                   GREEDY_B1_DEFAULTS),
                                  ("sampling at batch 1 without tree, k or policy",
                                   SAMPLED_B1_DEFAULTS),
                                  ("as a chain", CHAIN_DEFAULTS),
                                  ("as a chain above batch 1 without policy", BATCHED_DEFAULTS)):
                defaults = table_.get(e["name"]) if kind == "drafters" else None
                if defaults:
                    print(f"    {label}: " + ", ".join(f"{k}={v}" for k, v in defaults.items())
                          + (", prior from the head file's measured acceptance, if recorded"
                             if table_ is BATCHED_DEFAULTS and e["name"] in HEAD_DRAFTERS
                             else ""))
            for o in e["options"]:
                d = "required" if o["required"] else f"default {_short(o['default'])}"
                line = f"    {o['name']} ({o['type']}, {d})"
                print(line + (f": {o['help']}" if o["help"] else ""))
    return 0


def _short(v) -> str:
    if isinstance(v, tuple) and len(v) > 6:
        return "(" + ", ".join(str(x) for x in v[:4]) + f", ... {len(v)} values)"
    return repr(v)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specjax", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)

    def model_args(sp):
        sp.add_argument("--model", default="smollm2-135m",
                        help="preset name, .gguf file or Hugging Face directory")
        sp.add_argument("--dtype", default="float32", help="compute dtype: float32 | bfloat16")
        sp.add_argument("--quantize", default="none",
                        help="none (default) | w8a8: int8 weights and activations in the linear "
                             "layers and LM head (faster on CPU; output close to, not equal to, "
                             "the float model's: +4.6%% perplexity on SmolLM2-135M)")
        sp.add_argument("--numerics", default="exact", choices=("exact", "fast"),
                        help="exact (default): invariant numerics, a token's logits do not "
                             "depend on how many tokens share its forward, so speculative "
                             "decoding returns exactly what plain decoding returns in every "
                             "dtype; fast: the platform's fastest kernels (docs/benchmarks.md "
                             "has the price of exactness)")
        sp.add_argument("--exact-products", default=None, choices=("xla", "pallas"),
                        help="with --numerics exact: xla (the default, or "
                             "$SPECJAX_EXACT_PRODUCTS): the platform's products padded to a "
                             "probed row class; pallas: the batch-invariant Pallas kernels "
                             "(for GPUs and TPUs: Triton or Mosaic TPU, or Mosaic GPU with "
                             "$SPECJAX_INVARIANT_KERNELS=mosaic_gpu; interpreted and slow on "
                             "a CPU)")
        sp.add_argument("--attention-impl", default="dense",
                        help="attention: dense (default) | xla | pallas | pallas_interpret | "
                             "pallas_mosaic_gpu | pallas_mosaic_tpu (the tree-attention op)")

    g = sub.add_parser("generate", help="generate continuations of prompts")
    model_args(g)
    g.add_argument("--prompt", help="one prompt text")
    g.add_argument("--prompts", help="JSONL file of {id, prompt} or {question_id, turns}, or a "
                   "prompt source: builtin | mt_bench | humaneval | KIND:PATH with KIND one of "
                   "spec_bench, mt_bench, humaneval, gsm8k, sharegpt, text")
    g.add_argument("--output", help="write JSONL results here (default: stdout)")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--batch-size", type=int, default=1)
    g.add_argument("--cache-len", type=int, default=None)
    g.add_argument("--mesh", default=None, metavar="data=N,model=M",
                   help="decode on a device mesh: the rows of each batch split over the data "
                   "axis, heads and MLP over the model axis (specjax.sharding); add "
                   "--distributed on every host of a multi-host run")
    g.add_argument("--no-chat-template", action="store_true")
    g.add_argument("--method", default="ar",
                   help=f"decoding method: {', '.join(METHODS)} (ar = plain decoding)")
    g.add_argument("--method-arg", action="append", default=[], metavar="KEY=VALUE")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.set_defaults(fn=cmd_generate)

    ms = sub.add_parser("methods", help="every registered drafter, policy and verifier with "
                        "its options and defaults")
    ms.add_argument("--json", action="store_true", help="print the registry as JSON")
    ms.set_defaults(fn=cmd_methods)

    i = sub.add_parser("info", help="architecture, parameter count and tokenizer facts")
    model_args(i)
    i.set_defaults(fn=cmd_info)

    d = sub.add_parser("demo", help="decode built-in prompts with the default model")
    model_args(d)
    d.add_argument("--max-new-tokens", type=int, default=128)
    d.add_argument("--methods", "--method", dest="methods", default=None,
                   help="comma-separated speculative methods to compare with plain decoding "
                   "(default: sssd where a datastore ships for the model, else prompt_lookup, "
                   "and every head drafter with a trained head shipped for the model)")
    d.add_argument("--method-arg", action="append", default=[],
                   metavar="[METHOD.]KEY=VALUE")
    d.set_defaults(fn=cmd_demo)
    b = sub.add_parser("bench", help="methods side by side on the same prompts (interleaved)")
    b.add_argument("--config", metavar="FILE.py",
                   help="an experiment config (configs/*.py: get_config() -> BenchConfig); "
                   "the other flags override its fields")
    model_args(b)
    b.add_argument("--methods", default="ar,prompt_lookup",
                   help=f"comma-separated, from: {', '.join(METHODS)} (ar is always included)")
    b.add_argument("--method-arg", action="append", default=[], metavar="METHOD.KEY=VALUE")
    b.add_argument("--prompts", default="builtin",
                   help="builtin | FILE.jsonl | mt_bench | humaneval | KIND:PATH with KIND one "
                   "of spec_bench, mt_bench, humaneval, gsm8k, sharegpt, text")
    b.add_argument("--categories", default=None, help="comma-separated subset")
    b.add_argument("--limit", type=int, default=None, help="at most N prompts per category")
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--batch-size", type=int, default=1)
    b.add_argument("--batch-sizes", default=None, metavar="B1,B2,...",
                   help="also run every method at each batch size over all prompts "
                   "(tokens/s vs batch size in the JSON and a third plot panel)")
    b.add_argument("--sweep-only", action="store_true",
                   help="with --batch-sizes: run only the batch-size sweep, not the "
                   "per-category rows at --batch-size (a policy sweep above batch 1 without "
                   "paying for the batch-1 rows again)")
    b.add_argument("--temperature", type=float, default=0.0)
    b.add_argument("--samples", type=int, default=1, metavar="N",
                   help="decode every prompt N times (N samples of one question, with "
                   "--temperature > 0): each prompt's N samples form one group, decoded "
                   "--batch-size rows at a time (1: one after another; N: all together)")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--peer", choices=["hf"], default=None,
                   help="also run Hugging Face transformers on the same weights")
    b.add_argument("--output", help="results JSON")
    b.add_argument("--plot", help="results PNG: speedup by method and category, acceptance by "
                   "draft position, and tokens/s by batch size with --batch-sizes (with "
                   "--verify-curve: the curve)")
    b.add_argument("--journal", metavar="FILE.jsonl",
                   help="record each finished prompt batch here and skip those already "
                   "recorded: a long run can stop and continue later (same settings)")
    b.add_argument("--time-limit", type=float, default=None, metavar="MINUTES",
                   help="stop starting new prompt batches after this long; the summary covers "
                   "what finished (categories are sampled round robin, so alike); 0 with "
                   "--journal: run nothing, report the journal")
    b.add_argument("--mesh", default=None, metavar="data=N,model=M",
                   help="decode every run on a device mesh (rows over the data axis, heads and "
                   "MLP over the model axis)")
    b.add_argument("--cache-len", type=int, default=None, metavar="N",
                   help="one static KV-cache length for every run (default: each prompt's "
                   "cache bucket + --max-new-tokens): every method then compiles one decode "
                   "loop per batch size instead of one per prompt-length bucket, at the cost "
                   "of attending over the longer cache; every prompt must fit with its "
                   "--max-new-tokens")
    b.add_argument("--policies", default=None, metavar="P1,P2,...",
                   help="policy axis: run every drafting method under each of these policies "
                   "(variants METHOD@POLICY, interleaved, against the same ar)")
    b.add_argument("--batch-table", metavar="FILE.json",
                   help="write the batch-size-to-k table of each drafting method (run with "
                   "policy=fixed at its maximum k) for the batch_table policy: the k "
                   "maximising expected tokens per step cost at each batch size (one method: "
                   "FILE; several: FILE with _METHOD before the suffix)")
    b.add_argument("--verify-curve", action="store_true",
                   help="instead: time one target forward over k tokens vs k = 1")
    b.add_argument("--curve-ks", default="1,2,4,8,16,32,64",
                   help="verify sizes k, increasing, starting at 1")
    b.add_argument("--curve-batches", default="1,4,16", help="batch sizes for the curve")
    b.add_argument("--curve-prefix", type=int, default=256,
                   help="committed tokens in the cache under the timed forward")
    b.add_argument("--in-loop", action="store_true",
                   help="with --verify-curve: time whole steps of the speculative loop whose "
                   "verify block holds k tokens (junk drafts, so one token per step) against "
                   "a step that drafts nothing, instead of a lone forward; give the ks of "
                   "the engine's verify buckets, e.g. --curve-ks 1,2,4,8,16,17 for k = 16")
    b.set_defaults(fn=cmd_bench)
    hd = sub.add_parser("head", help="convert EAGLE-3 heads between specjax's format and the "
                        "serving engines' layout (vLLM, SGLang, SpecForge); rewrite any head "
                        "in another dtype; measure or record a head's first-token acceptance")
    hsub = hd.add_subparsers(dest="head_cmd", required=True)
    hc = hsub.add_parser("convert", help="read a head (either format) and write it in the "
                         "other: specjax head convert SRC DST [--to engine|specjax]")
    model_args(hc)
    hc.add_argument("src", help="head directory (specjax format or engine layout)")
    hc.add_argument("dst", help="output directory")
    hc.add_argument("--to", choices=("engine", "specjax"), default=None,
                    help="output format (default: the other one)")
    hc.add_argument("--out-dtype", default="bfloat16",
                    choices=("float32", "bfloat16", "int8"),
                    help="tensor dtype written (default bfloat16; int8: the large matrices as "
                         "int8 rows with a float32 scale each, the rest bfloat16, specjax "
                         "format only)")
    hc.set_defaults(fn=cmd_head_convert)
    hr = hsub.add_parser("record-acceptance", help="count a head's first-token acceptance in "
                         "a `specjax bench` journal and record it in the head's config.json, "
                         "where `adaptive` starts from it above batch 1: specjax head "
                         "record-acceptance JOURNAL --method LABEL --head DIR")
    hr.add_argument("journal", help="a `specjax bench` journal (.journal.jsonl)")
    hr.add_argument("--method", required=True, metavar="LABEL",
                    help="the journal's method label whose chain drafts count (e.g. "
                         "medusa@chain); a label that drafted a tree is refused")
    hr.add_argument("--head", required=True, metavar="DIR",
                    help="the head directory the journal's method loaded (the journal's "
                         "description of it must name this directory)")
    hr.add_argument("--dry-run", action="store_true", help="print the record, write nothing")
    hr.set_defaults(fn=cmd_head_record_acceptance)
    hm = hsub.add_parser("measure-acceptance", help="measure a head's first-token acceptance "
                         "(one token drafted at every step over a prompt set) and record it in "
                         "the head's config.json, where `adaptive` starts from it above batch "
                         "1: specjax head measure-acceptance DIR [--temperatures 0,0.7]")
    model_args(hm)
    hm.add_argument("head", metavar="DIR", help="the head directory (an eagle, medusa or "
                    "hydra head trained for --model)")
    hm.add_argument("--prompts", default="builtin",
                    help="prompt spec, as for `specjax bench` (default: builtin)")
    hm.add_argument("--categories", default=None,
                    help="comma-separated categories of the prompts to use (default: all)")
    hm.add_argument("--limit", type=int, default=None, help="at most N prompts per category")
    hm.add_argument("--max-new-tokens", type=int, default=128)
    hm.add_argument("--temperatures", default="0",
                    help="comma-separated temperatures, one record each (0: greedy; "
                         "default 0)")
    hm.add_argument("--batch-size", type=int, default=4,
                    help="rows decoded together (default 4; with exact numerics, the "
                         "default, the counts are the same at any batch size)")
    hm.add_argument("--seed", type=int, default=0, help="sampling seed")
    hm.add_argument("--dry-run", action="store_true", help="print the records, write nothing")
    hm.add_argument("--no-progress", action="store_true", help="no progress bar")
    hm.set_defaults(fn=cmd_head_measure_acceptance)
    tr = sub.add_parser("train", help="train a drafter head (specjax train TASK --config "
                        "FILE.py), or build its corpus (specjax train data ...)",
                        description="specjax train TASK --config FILE.py [--out-dir DIR] "
                        "[--data DIR] [--max-steps-this-run N] [--time-limit MIN] "
                        "[--set FIELD=VALUE] [--init-from HEAD_DIR] [--no-plot] [--quiet]: trains "
                        "the registered task TASK (specjax.train.TASKS) as the config file "
                        "(get_config() -> TrainConfig) says, resuming from the newest "
                        "checkpoint in its out_dir; the flags override the config's fields. "
                        "specjax train acceptance ...: the specdec++ policy's acceptance head; "
                        "specjax train data ...: builds a training corpus (see specjax train "
                        "data --help); specjax train prompts ...: chat prompts written by "
                        "the target itself (Magpie), for --prompts-file of train data.")
    tr.add_argument("task", metavar="TASK", help="a registered training task, 'data', 'prompts' or "
                    "'acceptance'")
    tr.add_argument("train_argv", nargs=argparse.REMAINDER, metavar="...",
                    help="the task's flags (specjax train TASK --help)")
    tr.set_defaults(fn=cmd_train)
    return p


def cmd_head_convert(args) -> int:
    """``specjax head convert SRC DST``: loads the head against the target (every check of
    loading applies) and writes it in the other format (EAGLE-3), or again in specjax's own
    format in ``--out-dtype`` (Medusa and Hydra heads, which have no engine layout)."""
    from pathlib import Path

    from specjax.heads import hydra, medusa
    from specjax.heads.interop import export_eagle3, is_engine_layout
    from specjax.heads.io import load_eagle_head, save_eagle_head

    conf_f = Path(args.src) / "config.json"
    try:
        conf = json.loads(conf_f.read_text())
    except (OSError, ValueError) as e:
        raise CLIError(f"{conf_f}: not a readable head config ({e})") from None
    own = {medusa.FORMAT: (medusa.load_medusa_heads, medusa.save_medusa_heads),
           hydra.FORMAT: (hydra.load_hydra_heads, hydra.save_hydra_heads)}
    fmt = conf.get("format") if isinstance(conf, dict) else None
    if fmt in own:
        if args.to == "engine":
            raise CLIError(f"{conf_f}: {fmt} heads have no serving-engine layout (only "
                           f"EAGLE-3 heads do): use --to specjax to change their dtype")
        to = "specjax"
    else:
        to = args.to or ("specjax" if is_engine_layout(conf) else "engine")
    if to == "engine" and args.out_dtype == "int8":
        raise CLIError("--out-dtype int8 is specjax's own head format; the serving engines' "
                       "EAGLE-3 layout takes float32 or bfloat16 (add --to specjax)")
    lm = _load(args)
    meta = {**(conf.get("meta") or {}), "converted_from": str(args.src)}
    if fmt in own:
        load_fn, save_fn = own[fmt]
        cfg, _, state, draft_ids, desc = load_fn(args.src, lm.model, lm.tokenizer)
        out = save_fn(args.dst, cfg, state, draft_ids, tokenizer=lm.tokenizer, meta=meta,
                      dtype=args.out_dtype)
    else:
        cfg, _, state, draft_ids, desc = load_eagle_head(args.src, lm.model, lm.tokenizer)
        if to == "engine":
            out = export_eagle3(args.dst, cfg, state, draft_ids, dtype=args.out_dtype)
        else:
            out = save_eagle_head(args.dst, cfg, state, draft_ids, tokenizer=lm.tokenizer,
                                  meta=meta, dtype=args.out_dtype)
    print(f"{desc} -> {out} ({to} format, {args.out_dtype})")
    if conf.get("measured_acceptance"):
        print(f"note: {conf_f}'s measured acceptance is not carried over; measure the new "
              f"head and record it (specjax head record-acceptance)")
    return 0


def cmd_head_record_acceptance(args) -> int:
    """``specjax head record-acceptance JOURNAL --method LABEL --head DIR``: the first drafted
    tokens of LABEL's runs and how many were accepted, written into DIR/config.json at the
    journal's temperature (:mod:`specjax.heads.measured`)."""
    from pathlib import Path

    from specjax.bench.journal import first_token_counts
    from specjax.heads import measured

    head = Path(args.head)
    if not (head / "config.json").is_file():
        raise CLIError(f"{head}: not a head directory (no config.json)")
    rec, ran = first_token_counts(args.journal, args.method)
    measured.check_same_head(head, ran, f"{args.journal}: {args.method!r}")
    _write_record(head, rec, f"{args.method} at temperature {rec.temperature:g}, batch "
                  f"{rec.batch_size}", args.dry_run)
    return 0


def _write_record(head, rec, what: str, dry_run: bool) -> None:
    """Prints ``rec`` and writes it into ``head``'s config.json unless ``dry_run``, printing
    the record it replaces."""
    from specjax.heads import measured

    line = (f"{what}: first token accepted {rec.accepted} of {rec.drafted} ({rec.rate:.3f}) "
            f"over {rec.n_prompts} prompts of {rec.prompts or '?'}")
    if dry_run:
        print(line + " (not written: --dry-run)")
        return
    replaced = measured.record(head, rec)
    print(f"{line} -> {head / 'config.json'}")
    if replaced is not None:
        print(f"replaced the record at temperature {replaced.temperature:g}: accepted "
              f"{replaced.accepted} of {replaced.drafted} ({replaced.rate:.3f}) at batch "
              f"{replaced.batch_size}, from {replaced.source or '?'}")


def cmd_head_measure_acceptance(args) -> int:
    """``specjax head measure-acceptance DIR``: decodes the prompts with the head drafting
    one token at every step, at each of ``--temperatures``, and writes each count into
    DIR/config.json (:mod:`specjax.bench.acceptance`)."""
    import math
    from pathlib import Path

    from specjax.bench.acceptance import (check_settings, head_method, measure_first_token,
                                          refuse_shipped)
    from specjax.bench.prompts import load_prompts

    head = Path(args.head)
    if not (head / "config.json").is_file():
        raise CLIError(f"{head}: not a head directory (no config.json)")
    try:
        temps = [float(t) for t in args.temperatures.split(",") if t.strip()]
    except ValueError:
        raise CLIError(f"--temperatures: comma-separated numbers >= 0, got "
                       f"{args.temperatures!r}") from None
    if not temps or any(not (t >= 0 and math.isfinite(t)) for t in temps) or \
            len(set(temps)) < len(temps):
        raise CLIError(f"--temperatures: distinct finite numbers >= 0, got "
                       f"{args.temperatures!r}")
    # everything that can be checked before the model loads and minutes of decoding
    check_settings(temps[0], args.max_new_tokens, args.batch_size)
    refuse_shipped(head)
    head_method(head)
    cats = args.categories.split(",") if args.categories else None
    items = load_prompts(args.prompts, cats, args.limit)
    args.method = "head"  # decodes speculatively: _load warns as for any such method
    lm = _load(args)
    for t in temps:
        rec = measure_first_token(lm, head, items, prompts=args.prompts, temperature=t,
                                  max_new_tokens=args.max_new_tokens,
                                  batch_size=args.batch_size, seed=args.seed,
                                  progress=not args.no_progress)
        _write_record(head, rec, f"{rec.method} at temperature {t:g}", args.dry_run)
    return 0


def cmd_bench(args) -> int:
    """The flags -> a :class:`~specjax.bench.BenchConfig` -> :func:`specjax.bench.run`."""
    from specjax.bench import BenchConfig, run

    return run(BenchConfig.from_args(args), args.argv)


def _train_flags(prog: str) -> argparse.ArgumentParser:
    """The flags of ``specjax train TASK`` (parsed after TASK is known)."""
    tp = argparse.ArgumentParser(prog=prog, description="Trains a drafter head as the config "
                                 "file says; rerunning the same command resumes from the "
                                 "newest checkpoint in the run's out_dir.")
    tp.add_argument("--config", required=True, metavar="FILE.py",
                    help="training config: a Python file whose get_config() returns a "
                    "specjax.train.TrainConfig")
    tp.add_argument("--out-dir", metavar="DIR",
                    help="run directory (overrides the config's out_dir)")
    tp.add_argument("--data", metavar="DIR",
                    help="corpus directory (overrides the config's data)")
    tp.add_argument("--max-steps-this-run", type=int, default=None, metavar="N",
                    help="stop (with a checkpoint) after N steps in this process")
    tp.add_argument("--time-limit", type=float, default=None, metavar="MINUTES",
                    help="stop (with a checkpoint, and the head so far in OUT_DIR/head) after "
                    "this many minutes of training in this process")
    tp.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override one TrainConfig field (repeatable; VALUE read as JSON when "
                    "it parses, e.g. total_steps=1200 or lr=3e-4, else as a string)")
    tp.add_argument("--init-from", metavar="HEAD_DIR",
                    help="start from this trained head's parameters (overrides the config's "
                    "init_from; read only when the run has no checkpoint yet)")
    tp.add_argument("--no-plot", action="store_true", help="do not write curves.png")
    tp.add_argument("--quiet", action="store_true", help="no progress bar")
    return tp


def cmd_train(args) -> int:
    """``specjax train TASK --config FILE.py ...`` -> :func:`specjax.train.fit`;
    ``specjax train data ...`` -> :mod:`specjax.train.corpus`."""
    if args.task == "data":
        try:
            from specjax.train import corpus
        except ModuleNotFoundError as e:
            if e.name not in ("specjax.train.corpus", "specjax.train"):
                raise
            raise CLIError("`specjax train data` needs specjax.train.corpus, which this "
                           "installation lacks") from None
        dp = argparse.ArgumentParser(prog="specjax train data",
                                     description=(corpus.__doc__ or "").split("\n\n")[0])
        corpus.add_arguments(dp)
        rc = corpus.main(dp.parse_args(args.train_argv))
        return 0 if rc is None else int(rc)
    if args.task == "acceptance":  # the specdec++ policy's head: collects, then fits
        from specjax.train import acceptance

        ap = argparse.ArgumentParser(prog="specjax train acceptance",
                                     description=(acceptance.__doc__ or "").split("\n\n")[0])
        acceptance.add_flags(ap)
        return int(acceptance.main(ap.parse_args(args.train_argv)) or 0)
    if args.task == "prompts":  # chat prompts written by the target itself (Magpie)
        from specjax.train import magpie

        mp = argparse.ArgumentParser(prog="specjax train prompts",
                                     description=(magpie.__doc__ or "").split("\n\n")[0])
        magpie.add_arguments(mp)
        return int(magpie.main(mp.parse_args(args.train_argv)) or 0)

    from specjax.train import TASKS, fit, load_train_config, replace_from_flags

    names = TASKS.names()
    if args.task not in names:
        raise CLIError(f"unknown training task {args.task!r}; registered tasks: "
                       f"{', '.join(names) if names else '(none)'} (or 'data': build a "
                       "training corpus)")
    opts = _train_flags(f"specjax train {args.task}").parse_args(args.train_argv)
    cfg = load_train_config(opts.config)
    if cfg.task != args.task:
        raise CLIError(f"{opts.config}: a config for task {cfg.task!r}, not {args.task!r}")
    sets = {}
    for item in opts.set:
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise CLIError(f"--set wants FIELD=VALUE, got {item!r}")
        try:
            sets[key.strip()] = json.loads(raw)
        except ValueError:
            sets[key.strip()] = raw
    cfg = replace_from_flags(cfg, **sets)
    cfg = replace_from_flags(cfg, out_dir=opts.out_dir, data=opts.data,
                             max_steps_this_run=opts.max_steps_this_run,
                             time_limit_min=opts.time_limit,
                             init_from=opts.init_from,
                             plot=False if opts.no_plot else None)
    summary = fit(cfg, progress=not opts.quiet)
    print(json.dumps(summary, indent=2, default=str))
    return 0


def expand_config(argv: list[str], path: str) -> list[str]:
    """``bench --config FILE.py REST`` -> ``bench FLAGS-OF-THE-CONFIG REST``: the other flags
    on the command line win (``--method-arg`` adds to the config's). When ``--methods`` is
    given, the config's method arguments for methods no longer run are dropped."""
    import dataclasses

    from specjax.experiment import load_config

    cfg = load_config(path)
    rest, skip, methods = [], False, None
    for a in argv:
        flag = a.split("=", 1)[0]
        if skip:
            skip = False
        elif len(flag) > 2 and "--config".startswith(flag):  # --config, --conf, ...
            skip = "=" not in a
        else:
            rest.append(a)
    for j, a in enumerate(rest):
        if a == "--methods" and j + 1 < len(rest):
            methods = rest[j + 1]
        elif a.startswith("--methods="):
            methods = a.split("=", 1)[1]
    if methods is not None:
        keep = tuple(m.strip() for m in methods.split(",") if m.strip())
        cfg = dataclasses.replace(cfg, methods=keep or cfg.methods,
                                  method_args={m: v for m, v in cfg.method_args.items()
                                               if m in keep})
    i = rest.index("bench")
    return rest[:i + 1] + cfg.to_argv() + rest[i + 1:]


COMPILE_CACHE_ENV = "SPECJAX_COMPILE_CACHE"
COMPILE_CACHE_MAX_BYTES = 4 << 30


def use_compile_cache() -> str | None:
    """Turns on JAX's persistent compilation cache for ``demo`` and ``generate``: a compiled
    decode loop (minutes on a small CPU) is saved under ``cache_root()/jax-compilation-cache``
    and loaded, not compiled again, by the next run of the same program, flags and JAX version
    (the key holds all three, so a loaded program is the one a compile would give); programs
    that compile in under a second are not kept, and the directory is bounded to
    ``COMPILE_CACHE_MAX_BYTES`` (least recently used entries go first).
    ``SPECJAX_COMPILE_CACHE=off`` sets none, ``=DIR`` picks the directory; a cache JAX was
    already given (``JAX_COMPILATION_CACHE_DIR``) is used as it is, even with ``off``.
    ``bench`` does not call this: its compile times are measured. Returns the directory in
    use, or None."""
    import jax

    if jax.config.jax_compilation_cache_dir:
        return jax.config.jax_compilation_cache_dir
    setting = os.environ.get(COMPILE_CACHE_ENV, "").strip()
    if setting.lower() in ("0", "off", "no", "false"):
        return None
    from specjax.fingerprint import cache_root

    path = os.path.expanduser(setting) if setting else str(cache_root() / "jax-compilation-cache")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:  # a read-only home: decode without the cache, say so
        print(f"specjax: compilation cache off ({path}: {e.strerror})", file=sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    if jax.config.jax_compilation_cache_max_size < 0:  # JAX's default: unbounded
        jax.config.update("jax_compilation_cache_max_size", COMPILE_CACHE_MAX_BYTES)
    return path


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--distributed" in argv:  # a multi-host run (scripts/launch_multihost.sh): join first
        argv.remove("--distributed")
        from specjax.distributed import initialize
        from specjax.errors import SpecjaxError

        local = os.environ.get("SPECJAX_LOCAL_DEVICES")
        try:
            initialize(local_devices=int(local) if local else None)
        except SpecjaxError as e:
            print(f"specjax: error: {e}", file=sys.stderr)
            return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    from specjax.errors import SpecjaxError

    try:
        if getattr(args, "config", None):
            argv = expand_config(argv, args.config)
            args = parser.parse_args(argv)
        args.argv = argv  # the command line as run (a config expanded into its flags)
        if args.cmd in ("demo", "generate"):
            use_compile_cache()
        return args.fn(args)
    except SpecjaxError as e:
        print(f"specjax: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
