"""``specjax train data``: a self-distillation corpus for draft heads.

Prompts come from the offline pool (:mod:`specjax.train.pool`), checked against evaluation
sets; the target answers them with the project's batched engine (:func:`specjax.generate`);
each prompt and its answer become one ArrayRecord record::

    {"tokens": prompt_ids + answer_ids, "loss_mask": [0] * len(prompt) + [1] * len(answer),
     "source": ..., "task": ..., "id": ...}                 # json.dumps(...).encode()

The output directory holds ``manifest.json`` (format ``specjax-corpus-1``: config, tokenizer
hash, counts, refusals, timings), ``pool.jsonl`` (the selected prompts, in order) and
``shard-NNNNN.array_record`` files of ``shard_size`` prompts each. Shards are written to a
temporary file and renamed, then added to the manifest, so an interrupted or time-limited run
continues where it stopped when the same command is run again::

    cfg = CorpusConfig(out_dir="corpus", num_prompts=4096, exclude=("spec_bench:q.jsonl",))
    manifest = build_corpus(cfg)            # rerun the same call to continue
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from specjax import atomic
from specjax.errors import ConfigError, DataError, SpecjaxError
from specjax.tokenizer import tokenizer_sha256
from specjax.train.pool import (
    ALL_SOURCES,
    SOURCES,
    PoolItem,
    build_pool,
    eval_fingerprint,
    filter_overlaps,
    length_capped,
    load_eval_prompts,
    pool_stats,
)

FORMAT = "specjax-corpus-1"
MANIFEST = "manifest.json"
POOL = "pool.jsonl"
# checked against every corpus: the project's own prompts, which the benchmark reports on
ALWAYS_EXCLUDED = ("builtin",)
# config fields a rerun may change without starting over
_RESUME_FREE = ("out_dir", "time_limit_min")
# greedy answers do not depend on how many prompts are decoded together (up to the last bits
# of a reduction order), so a greedy corpus may continue at another batch size (a GPU takes
# far more prompts at once than the CPU that started the corpus)
_RESUME_FREE_GREEDY = ("batch_size",)
# candidates drawn from the pool per prompt wanted (overlaps and long prompts are dropped)
_OVERSAMPLE = 1.5


def _log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
    """What corpus to build (every field but ``out_dir`` and ``time_limit_min`` is fixed once
    a build has started in ``out_dir``).

    Attributes:
      out_dir: the output directory (created).
      model: preset, GGUF file or Hugging Face directory of the target.
      num_prompts: prompts wanted (fewer when the pool runs out; the manifest says so).
      seed: fixes the pool and, when sampling, the answers.
      max_new_tokens: answer budget per prompt.
      batch_size: prompts decoded together.
      temperature: 0 = greedy answers; > 0 samples (seeded per shard).
      shard_size: prompts per shard (the unit of checkpointing).
      exclude: evaluation prompt sets (``specjax.data.load_prompts`` specs) no prompt may
        overlap; the built-in prompts are always checked too.
      strict: raise on the first overlap instead of dropping the prompt.
      time_limit_min: stop starting new shards after this many minutes (None: no limit). A
        run always finishes at least one shard.
      chat: apply the checkpoint's chat template to the prompts.
      max_prompt_tokens: longer prompts are dropped (and counted), never truncated.
      sources: pool sources (:data:`specjax.train.pool.SOURCES`).
      prompts_file: take the candidate prompts from this JSONL file (``id``, ``source``,
        ``task``, ``prompt`` per line, in the order given, e.g. written by ``specjax train
        prompts``) instead of the pool's sources; the overlap check and the length cap apply
        the same way.
      dtype: compute dtype of the target (``float32`` | ``bfloat16``).
      quantize: ``none`` | ``w8a8``.
    """

    out_dir: str
    model: str = "smollm2-135m"
    num_prompts: int = 1024
    seed: int = 0
    max_new_tokens: int = 256
    batch_size: int = 8
    temperature: float = 0.0
    shard_size: int = 256
    exclude: tuple[str, ...] = ()
    strict: bool = False
    time_limit_min: float | None = None
    chat: bool = True
    max_prompt_tokens: int = 384
    sources: tuple[str, ...] = SOURCES
    prompts_file: str | None = None
    dtype: str = "float32"
    quantize: str = "none"

    def __post_init__(self):
        object.__setattr__(self, "out_dir", str(self.out_dir))
        object.__setattr__(self, "exclude", tuple(self.exclude))
        object.__setattr__(self, "sources", tuple(self.sources))
        for name in ("num_prompts", "max_new_tokens", "batch_size", "shard_size",
                     "max_prompt_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"CorpusConfig.{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigError(f"CorpusConfig.seed must be an integer, got {self.seed!r}")
        t = self.temperature
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ConfigError(f"CorpusConfig.temperature must be a finite number >= 0, got {t!r}")
        tl = self.time_limit_min
        if tl is not None and (not isinstance(tl, (int, float)) or tl < 0):
            raise ConfigError(f"CorpusConfig.time_limit_min must be >= 0 minutes or None, "
                              f"got {tl!r}")
        bad = [s for s in self.sources if s not in ALL_SOURCES]
        if bad or not self.sources:
            raise ConfigError(f"CorpusConfig.sources: unknown or empty {bad or '()'}; known: "
                              f"{', '.join(ALL_SOURCES)}")
        if not self.out_dir:
            raise ConfigError("CorpusConfig.out_dir must name a directory")

    def to_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


def shard_name(index: int) -> str:
    return f"shard-{index:05d}.array_record"


def encode_record(item: PoolItem, prompt_ids: list[int], answer_ids: list[int]) -> bytes:
    """One corpus record (JSON bytes): the loss mask covers exactly the answer tokens."""
    return json.dumps({
        "tokens": [int(t) for t in prompt_ids] + [int(t) for t in answer_ids],
        "loss_mask": [0] * len(prompt_ids) + [1] * len(answer_ids),
        "source": item.source,
        "task": item.task,
        "id": item.id,
    }).encode()


def read_shard(path: str | Path) -> list[dict]:
    """Every record of one shard, decoded (for checks and tools; trainers stream them)."""
    from array_record.python.array_record_module import ArrayRecordReader

    reader = ArrayRecordReader(str(path))
    try:
        return [json.loads(b) for b in reader.read_all()]
    finally:
        reader.close()


# ----------------------------------------------------------------------------- files

def _atomic_write(path: Path, data: bytes) -> None:
    atomic.write_bytes(path, data, fsync=True)


def _write_manifest(out: Path, manifest: dict) -> None:
    _atomic_write(out / MANIFEST, (json.dumps(manifest, indent=2) + "\n").encode())


def _read_manifest(path: Path) -> dict:
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: unreadable corpus manifest ({e})") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} manifest (format "
                        f"{m.get('format') if isinstance(m, dict) else None!r})")
    return m


def _read_pool(path: Path, expect_sha: str) -> list[PoolItem]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read the corpus's prompt list ({e.strerror or e})"
                        ) from None
    if hashlib.sha256(raw).hexdigest() != expect_sha:
        raise DataError(f"{path}: changed since the build started (sha256 differs from "
                        f"{MANIFEST}'s pool_sha256); start again in a new directory")
    text = raw.decode("utf-8")
    return [PoolItem.from_json(line, f"{path}:{n}")
            for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _check_resumable(path: Path, manifest: dict, config: CorpusConfig) -> None:
    free = _RESUME_FREE
    if config.temperature == 0 and manifest.get("config", {}).get("temperature") == 0:
        free += _RESUME_FREE_GREEDY
    if config.prompts_file is not None and manifest.get("config", {}).get("prompts_file"):
        # the prompts taken from the file are in pool.jsonl (checked by its sha256): the file
        # may have moved (a corpus built on another machine continues here)
        free += ("prompts_file",)
    old = {k: v for k, v in manifest.get("config", {}).items() if k not in free}
    new = {k: v for k, v in config.to_dict().items() if k not in free}
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        what = "; ".join(f"{k}: built with {old.get(k)!r}, now {new.get(k)!r}" for k in diff)
        raise ConfigError(f"{path}: this corpus was started with other settings ({what}); "
                          "rerun with the same settings to continue it, or give a new output "
                          "directory")


# ----------------------------------------------------------------------------- building

def _encoder(tokenizer, chat: bool) -> Callable[[str], list[int]]:
    if chat:
        if not tokenizer.chat_template:
            raise ConfigError("CorpusConfig.chat: the model's tokenizer has no chat template; "
                              "build with chat=False (--no-chat-template)")
        return tokenizer.encode_chat
    return tokenizer.encode


def _select_prompts(config: CorpusConfig, encode, index_specs: tuple[str, ...],
                    log: Callable[[str], None]) -> tuple[list[PoolItem], dict, dict]:
    """The pool, overlap-checked and length-capped: (selected items, refusals by reason, the
    pool report)."""
    evals = load_eval_prompts(index_specs)
    if not config.exclude:
        log("warning: no evaluation set given (--exclude SPEC): the pool was checked against "
            "the built-in prompts only; Spec-Bench, MT-Bench and HumanEval were NOT checked")
    if config.prompts_file is not None:
        from specjax.train.magpie import read_prompt_file

        cands = read_prompt_file(config.prompts_file)
        log(f"{len(cands)} candidate prompts from {config.prompts_file}")
    else:
        want = math.ceil(config.num_prompts * _OVERSAMPLE) + 64
        cands = build_pool(config.seed, want, config.sources, log=log)
    kept, report = filter_overlaps(cands, evals, strict=config.strict)
    refused = {k: report[k] for k in ("exact", "contained", "near_duplicate")}
    log(f"overlap check against {', '.join(index_specs)} ({len(evals)} eval prompts): "
        f"refused {sum(refused.values())} of {len(cands)} "
        f"({', '.join(f'{k} {v}' for k, v in refused.items())})")
    capped, too_long = length_capped(kept, encode, config.max_prompt_tokens, config.num_prompts)
    selected = [it for it, _ in capped]
    if too_long:
        log(f"dropped {too_long} prompts longer than {config.max_prompt_tokens} tokens")
    if len(selected) < config.num_prompts:
        log(f"warning: the pool gave {len(selected)} usable prompts, fewer than the "
            f"{config.num_prompts} asked for")
    info = {
        "candidates": len(cands),
        "after_overlap_check": len(kept),
        "selected": len(selected),
        "checked_against": list(index_specs),
        "eval_prompts": len(evals),
        "exclude_sha256": eval_fingerprint(evals),
        "refused_examples": report["examples"],
        **pool_stats(selected),
    }
    return selected, {**refused, "too_long": too_long}, info


def _machine() -> str:
    from specjax.bench.machine import machine_description

    try:
        import jax

        return f"{machine_description()}; {jax.devices()[0]}"
    except Exception:  # the description is informative only
        return machine_description()


def _utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _totals(manifest: dict) -> None:
    stats = [manifest["shard_stats"][s] for s in manifest["shards"]]
    manifest["num_records"] = sum(s["records"] for s in stats)
    manifest["num_tokens"] = sum(s["tokens"] for s in stats)
    manifest["num_answer_tokens"] = sum(s["answer_tokens"] for s in stats)
    manifest["num_prompt_tokens"] = sum(s["prompt_tokens"] for s in stats)
    wall = sum(s["wall_s"] for s in stats)
    decode = sum(s["decode_s"] for s in stats)
    manifest["wall_s"] = round(wall, 3)
    manifest["decode_s"] = round(decode, 3)
    manifest["tokens_per_s"] = round(manifest["num_answer_tokens"] / wall, 2) if wall else None
    manifest["decode_tokens_per_s"] = (round(manifest["num_answer_tokens"] / decode, 2)
                                       if decode else None)
    stops = Counter()
    for s in stats:
        stops.update(s["stop_reasons"])
    manifest["stop_reasons"] = dict(sorted(stops.items()))
    manifest["complete"] = len(manifest["shards"]) == manifest["num_shards"]


def _write_shard(path: Path, records: list[bytes]) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter

    with atomic.replacing(path) as tmp:
        writer = ArrayRecordWriter(str(tmp), "group_size:1")
        try:
            for r in records:
                writer.write(r)
        finally:
            writer.close()


def _generate_shard(lm, items: list[PoolItem], encode, config: CorpusConfig, index: int,
                    bar) -> tuple[list[bytes], dict]:
    from specjax.engine import generate
    from specjax.sampling import SamplingParams

    t0 = time.perf_counter()
    prompts = [encode(it.prompt) for it in items]
    for it, p in zip(items, prompts):  # the pool was capped with this very encoder
        if len(p) > config.max_prompt_tokens:
            raise DataError(f"{POOL}: prompt {it.id} encodes to {len(p)} tokens, over "
                            f"max_prompt_tokens={config.max_prompt_tokens}")
    order = sorted(range(len(items)), key=lambda i: len(prompts[i]))  # stable: deterministic
    sampling = SamplingParams(temperature=float(config.temperature),
                              seed=(config.seed * 1_000_003 + index) % (2 ** 31))
    res = generate(lm.model, [prompts[i] for i in order], max_new_tokens=config.max_new_tokens,
                   sampling=sampling, eos_ids=lm.tokenizer.eos_ids, batch_size=config.batch_size,
                   progress=bar.update if bar is not None else None)
    answers: list[list[int]] = [[] for _ in items]
    stops = Counter()
    for j, i in enumerate(order):
        answers[i] = res.tokens[j]
        stops[res.stop_reason[j]] += 1
    # one wall time per batch (every prompt of a batch carries the batch's time)
    decode_s = sum(res.wall_s[j] for j in range(0, len(order), config.batch_size))
    records = [encode_record(it, p, a) for it, p, a in zip(items, prompts, answers)]
    n_ans = sum(len(a) for a in answers)
    n_prompt = sum(len(p) for p in prompts)
    stats = {
        "records": len(items),
        "tokens": n_ans + n_prompt,
        "answer_tokens": n_ans,
        "prompt_tokens": n_prompt,
        "decode_s": round(decode_s, 3),
        "compile_s": round(res.compile_s, 3),
        "wall_s": round(time.perf_counter() - t0, 3),
        "stop_reasons": dict(sorted(stops.items())),
    }
    return records, stats


def build_corpus(config: CorpusConfig, lm=None, progress: bool = True, *,
                 max_shards: int | None = None, attention_impl: str = "dense",
                 log: Callable[[str], None] = _log_stderr) -> dict:
    """Builds (or continues) the corpus ``config`` describes; returns its manifest.

    A first run builds the pool, checks it against ``config.exclude`` (and the built-in
    prompts), drops prompts over ``max_prompt_tokens``, writes ``pool.jsonl`` and the
    manifest, then one shard after another. A rerun in the same directory checks that the
    settings, the tokenizer, the prompt list and the evaluation sets are unchanged, skips the
    finished shards and continues.

    Args:
      config: the corpus.
      lm: the loaded target (:class:`specjax.models.LoadedModel`); None loads
        ``config.model`` (only when a shard is left to build).
      progress: show a tqdm bar (prompts, answer tokens/s) on stderr.
      max_shards: build at most this many shards in this call (then stop, resumable); 0
        chooses and writes the pool only (the shards can then be built on another machine
        by the same command).
      attention_impl: attention implementation when loading the model.
      log: where progress notes and warnings go (stderr).

    Returns:
      The manifest (also in ``out_dir/manifest.json``); ``complete`` says whether every
      shard is built.

    Raises:
      ConfigError: a rerun with other settings or another tokenizer, or settings that cannot
        work (prompt + answer longer than the model's context, no chat template).
      DataError: an overlap under ``strict`` (naming both prompts), an unreadable eval set,
        or a changed ``pool.jsonl`` / evaluation set on a rerun.
    """
    t_start = time.perf_counter()
    out = Path(config.out_dir)
    mpath = out / MANIFEST
    manifest = _read_manifest(mpath) if mpath.exists() else None
    if manifest is not None:
        _check_resumable(mpath, manifest, config)
        if manifest.get("complete"):
            log(f"{out}: complete ({manifest['num_records']} records, "
                f"{manifest['num_tokens']} tokens); nothing to do")
            return manifest
    if lm is None:
        from specjax._runtime import load_for_run

        # plain decoding that is compared with nothing (and as the corpus began): fast
        lm = load_for_run(config.model, config.dtype, config.quantize, attention_impl,
                          decodes_text=True, speculative=False, numerics="fast")
    tok = lm.tokenizer
    if tok is None:
        raise ConfigError(f"{config.model}: the model has no tokenizer; a corpus needs text")
    ctx = lm.config.max_position_embeddings
    if config.max_prompt_tokens + config.max_new_tokens > ctx:
        raise ConfigError(f"CorpusConfig: max_prompt_tokens ({config.max_prompt_tokens}) + "
                          f"max_new_tokens ({config.max_new_tokens}) exceed the model's "
                          f"context of {ctx} tokens")
    encode = _encoder(tok, config.chat)
    tok_sha = tokenizer_sha256(tok)
    specs = tuple(dict.fromkeys(ALWAYS_EXCLUDED + config.exclude))
    if manifest is None:
        out.mkdir(parents=True, exist_ok=True)
        pool, refused, info = _select_prompts(config, encode, specs, log)
        if not pool:
            raise DataError(f"{out}: no usable prompt left in the pool (see the notes above)")
        pool_bytes = "".join(it.to_json() + "\n" for it in pool).encode("utf-8")
        _atomic_write(out / POOL, pool_bytes)
        manifest = {
            "format": FORMAT,
            "created": _utc(),
            "model": config.model,
            "model_source": lm.source,
            "model_format": lm.format,
            "tokenizer_sha256": tok_sha,
            "seed": config.seed,
            "config": config.to_dict(),
            "pool": info,
            "pool_sha256": hashlib.sha256(pool_bytes).hexdigest(),
            "refused": refused,
            "num_prompts": len(pool),
            "num_shards": math.ceil(len(pool) / config.shard_size),
            "shards": [],
            "shard_stats": {},
            "machine": _machine(),
        }
        _totals(manifest)
        _write_manifest(out, manifest)
    else:
        if manifest.get("tokenizer_sha256") != tok_sha:
            raise ConfigError(f"{mpath}: the corpus was started with another tokenizer "
                              f"(sha256 {manifest.get('tokenizer_sha256')}, now {tok_sha}); "
                              "use the same model, or a new output directory")
        evals = load_eval_prompts(specs)
        if eval_fingerprint(evals) != manifest["pool"]["exclude_sha256"]:
            raise DataError(f"{mpath}: the evaluation sets {list(specs)} changed since the "
                            "pool was checked against them; start again in a new directory")
        pool = _read_pool(out / POOL, manifest["pool_sha256"])
        log(f"{out}: resuming: {len(manifest['shards'])} of {manifest['num_shards']} shards "
            "done")
    done = set(manifest["shards"])
    todo = [s for s in range(manifest["num_shards"]) if shard_name(s) not in done]
    for f in out.glob("*.tmp"):  # left by an interrupted write
        f.unlink()
    bar = None
    if progress:
        from tqdm import tqdm

        left = sum(len(pool[s * config.shard_size:(s + 1) * config.shard_size]) for s in todo)
        bar = tqdm(total=left, desc="corpus", unit="prompt", file=sys.stderr)
    built, stopped = 0, False
    try:
        for s in todo:
            elapsed_min = (time.perf_counter() - t_start) / 60
            if (max_shards is not None and built >= max_shards) or (
                    built and config.time_limit_min is not None
                    and elapsed_min >= config.time_limit_min):
                stopped = True
                break
            items = pool[s * config.shard_size:(s + 1) * config.shard_size]
            records, stats = _generate_shard(lm, items, encode, config, s, bar)
            _write_shard(out / shard_name(s), records)
            manifest["shard_stats"][shard_name(s)] = stats
            manifest["shards"] = sorted(set(manifest["shards"]) | {shard_name(s)})
            manifest["updated"] = _utc()
            _totals(manifest)
            _write_manifest(out, manifest)
            built += 1
            if bar is not None:
                bar.set_postfix_str(f"{manifest['decode_tokens_per_s'] or 0:.1f} tok/s")
    finally:
        if bar is not None:
            bar.close()
    log(f"{out}: {len(manifest['shards'])} of {manifest['num_shards']} shards, "
        f"{manifest['num_records']} records, {manifest['num_tokens']} tokens "
        f"({manifest['num_answer_tokens']} answer tokens), {manifest['tokens_per_s']} "
        f"answer tokens/s overall, {manifest['decode_tokens_per_s']} while decoding")
    if stopped:
        log(f"stopped after {built} shard(s) in this run (time limit or max_shards); run the "
            "same command again to continue")
    return manifest


# ----------------------------------------------------------------------------- command line

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the flags of ``specjax train data`` to ``parser`` (the model flags included)."""
    parser.add_argument("--out", required=True, help="output directory (rerun to continue)")
    parser.add_argument("--model", default="smollm2-135m",
                        help="target: preset name, .gguf file or Hugging Face directory")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16")
    parser.add_argument("--quantize", default="none", help="none | w8a8")
    parser.add_argument("--attention-impl", default="dense", help="attention implementation")
    parser.add_argument("--num-prompts", type=int, default=1024, help="prompts wanted")
    parser.add_argument("--seed", type=int, default=0, help="pool (and sampling) seed")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="answer budget")
    parser.add_argument("--batch-size", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--shard-size", type=int, default=256, help="prompts per shard")
    parser.add_argument("--max-prompt-tokens", type=int, default=384,
                        help="longer prompts are dropped (counted), never truncated")
    parser.add_argument("--sources", default=",".join(SOURCES),
                        help=f"comma-separated pool sources (default: {','.join(SOURCES)}; "
                             f"also: {','.join(s for s in ALL_SOURCES if s not in SOURCES)})")
    parser.add_argument("--prompts-file", default=None, metavar="FILE.jsonl",
                        help="candidate prompts from this JSONL file (id, source, task, prompt; "
                             "e.g. from `specjax train prompts`) instead of --sources")
    parser.add_argument("--exclude", action="append", default=[], metavar="SPEC",
                        help="evaluation prompt set no training prompt may overlap "
                             "(repeatable): spec_bench:PATH, mt_bench, humaneval, ...")
    parser.add_argument("--strict", action="store_true",
                        help="fail on the first overlapping prompt instead of dropping it")
    parser.add_argument("--time-limit", type=float, default=45.0, metavar="MINUTES",
                        help="stop starting new shards after this long (default 45; 0: one "
                             "shard per run); rerun the same command to continue")
    parser.add_argument("--max-shards", type=int, default=None,
                        help="build at most this many shards in this run (0: only choose and "
                             "write the pool, e.g. to build the shards on a GPU machine)")
    parser.add_argument("--no-chat-template", action="store_true",
                        help="raw prompts, without the chat template")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def config_from_args(args: argparse.Namespace) -> CorpusConfig:
    """The :class:`CorpusConfig` the flags of :func:`add_arguments` describe."""
    return CorpusConfig(
        out_dir=args.out, model=args.model, num_prompts=args.num_prompts, seed=args.seed,
        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
        temperature=args.temperature, shard_size=args.shard_size,
        exclude=tuple(args.exclude), strict=args.strict,
        time_limit_min=args.time_limit, chat=not args.no_chat_template,
        max_prompt_tokens=args.max_prompt_tokens,
        sources=tuple(s.strip() for s in args.sources.split(",") if s.strip()),
        prompts_file=args.prompts_file, dtype=args.dtype, quantize=args.quantize)


def main(args: argparse.Namespace) -> int:
    """``specjax train data``: builds or continues the corpus; 0 on success (finished or
    stopped at the time limit: the manifest's ``complete`` says which), 2 on an error."""
    try:
        if args.max_shards is not None and args.max_shards < 0:
            raise ConfigError(f"--max-shards must be >= 0, got {args.max_shards}")
        config = config_from_args(args)
        m = build_corpus(config, progress=not args.quiet, max_shards=args.max_shards,
                         attention_impl=args.attention_impl)
    except SpecjaxError as e:
        print(f"specjax: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: m.get(k) for k in (
        "num_prompts", "num_shards", "num_records", "num_tokens", "num_answer_tokens",
        "refused", "tokens_per_s", "complete")}))
    return 0


__all__ = ["FORMAT", "CorpusConfig", "add_arguments", "build_corpus", "config_from_args",
           "encode_record", "main", "read_shard", "shard_name", "tokenizer_sha256"]
