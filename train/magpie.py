"""Prompts written by the target itself (the Magpie recipe: Xu et al., 2024).

A chat model given its chat template up to the start of a user turn, and nothing else, writes
a plausible user message: sampling that many times gives a varied pool of chat prompts in the
model's own notion of what users ask (questions, requests for advice, code, plans, stories),
which is what a drafter meets at inference and what the offline pool (:mod:`specjax.train.pool`:
docstrings, code, man pages, seed topics) lacks. ``specjax train prompts`` writes them as
``pool.jsonl``-style lines; ``specjax train data --prompts-file FILE`` answers them::

    specjax train prompts --out data/prompts_magpie.jsonl --num-prompts 8192 --batch-size 256
    specjax train data --out data/corpus_magpie --prompts-file data/prompts_magpie.jsonl \\
        --num-prompts 8192 --exclude spec_bench:question.jsonl ...

Each chunk of ``chunk_size`` rows is sampled with its own seed (``seed``, chunk index) and the
file is rewritten atomically after each chunk, with the state beside it in ``FILE.meta.json``:
a time-limited run stops between chunks, and the same command continues. A message is kept
when the model ended it (an end-of-turn token inside ``max_new_tokens``), it has at least
``min_words`` words, holds no chat-template marker, and is no duplicate (after
:func:`specjax.train.pool.normalize`) of one already kept. Overlap with evaluation sets is
checked where the prompts are used (``specjax train data --exclude``), like every pool.

The system prompts (:data:`SYSTEMS`) steer the kind of request: ``chat`` is the template's
own default, the others name a kind of task in the system turn; each chunk draws its rows'
systems by :data:`SYSTEM_WEIGHTS`, and the kept line's ``task`` names the system used.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np

from specjax import atomic
from specjax.errors import ConfigError, DataError, SpecjaxError
from specjax.train.pool import PoolItem, normalize

# None: the template's own default system turn
SYSTEMS: dict[str, str | None] = {
    "chat": None,
    "writing": "You are a helpful assistant. Users ask you to write things: stories, essays, "
               "emails, poems, speeches, blog posts.",
    "roleplay": "You are a helpful assistant. Users ask you to play a character or imagine a "
                "situation and respond in it.",
    "reasoning": "You are a helpful assistant. Users ask you logic puzzles, riddles and "
                 "questions that need step-by-step reasoning.",
    "math": "You are a helpful assistant. Users ask you math questions and word problems.",
    "coding": "You are a helpful assistant. Users ask you to write, explain or fix code.",
    "extraction": "You are a helpful assistant. Users give you a text and ask you to extract "
                  "or reformat information from it.",
    "stem": "You are a helpful assistant. Users ask you questions about science, technology "
            "and engineering.",
    "humanities": "You are a helpful assistant. Users ask you about history, philosophy, art, "
                  "economics and society.",
    "translation": "You are a helpful assistant. Users ask you to translate sentences between "
                   "languages.",
    "summarization": "You are a helpful assistant. Users paste a long text and ask you to "
                     "summarize it.",
    "qa": "You are a helpful assistant. Users ask you short factual questions.",
}
SYSTEM_WEIGHTS: dict[str, float] = {
    "chat": 0.25, "writing": 0.08, "roleplay": 0.06, "reasoning": 0.07, "math": 0.07,
    "coding": 0.08, "extraction": 0.06, "stem": 0.07, "humanities": 0.07, "translation": 0.06,
    "summarization": 0.06, "qa": 0.07,
}
META_SUFFIX = ".meta.json"
FORMAT = "specjax-magpie-1"
_RESUME_FREE = ("out", "time_limit_min", "batch_size")
_MARKERS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def _log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


@dataclasses.dataclass(frozen=True)
class MagpieConfig:
    """What prompts to write (every field but ``out``, ``batch_size`` and ``time_limit_min``
    is fixed once a file has been started).

    Attributes:
      out: the JSONL file written (``FILE.meta.json`` beside it holds the state).
      model: preset, GGUF file or Hugging Face directory of the chat model.
      num_prompts: prompts wanted (kept ones).
      seed: with the chunk index, seeds each chunk's sampling and its systems.
      chunk_size: rows sampled per chunk (the unit of checkpointing).
      batch_size: rows decoded together (a chunk's rows are independent of it: each row's
        randomness is fixed by the chunk's seed and the row).
      max_new_tokens: a message longer than this is dropped (never cut).
      temperature, top_p: sampling.
      min_words: shorter messages are dropped.
      systems: names of :data:`SYSTEMS` to draw from (by :data:`SYSTEM_WEIGHTS`).
      time_limit_min: stop starting chunks after this many minutes (None: no limit).
      dtype: compute dtype of the model.
    """

    out: str
    model: str = "smollm2-135m"
    num_prompts: int = 1024
    seed: int = 0
    chunk_size: int = 512
    batch_size: int = 64
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 0.95
    min_words: int = 4
    systems: tuple[str, ...] = tuple(SYSTEMS)
    time_limit_min: float | None = None
    dtype: str = "float32"

    def __post_init__(self):
        object.__setattr__(self, "out", str(self.out))
        object.__setattr__(self, "systems", tuple(self.systems))
        for name in ("num_prompts", "chunk_size", "batch_size", "max_new_tokens", "min_words"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"MagpieConfig.{name} must be an integer >= 1, got {v!r}")
        t = self.temperature
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ConfigError(f"MagpieConfig.temperature must be > 0 (greedy would write the "
                              f"same message every time), got {t!r}")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ConfigError(f"MagpieConfig.top_p must be in (0, 1], got {self.top_p!r}")
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad or not self.systems:
            raise ConfigError(f"MagpieConfig.systems: unknown or empty {bad or '()'}; known: "
                              f"{', '.join(SYSTEMS)}")
        tl = self.time_limit_min
        if tl is not None and (not isinstance(tl, (int, float)) or tl < 0):
            raise ConfigError(f"MagpieConfig.time_limit_min must be >= 0 minutes or None, "
                              f"got {tl!r}")

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["systems"] = list(self.systems)
        return d


def user_turn_prefix(tokenizer, system: str | None) -> list[int]:
    """The chat template's tokens up to where a user message's text begins.

    Raises:
      ConfigError: the tokenizer has no chat template, or its template does not place the
        user's text after a fixed prefix (the recipe needs one).
    """
    if not tokenizer.chat_template:
        raise ConfigError("the model's tokenizer has no chat template: it writes no user turns")
    mark = "\x00MAGPIE\x00"
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": mark}]
    text = tokenizer.apply_chat_template(msgs)
    if text.count(mark) != 1:
        raise ConfigError("the chat template does not hold the user's text once; cannot "
                          "prompt for a user turn")
    return tokenizer.encode(text[:text.index(mark)], add_bos=False)


def _end_of_turn_ids(tokenizer) -> tuple[int, ...]:
    ids = set(tokenizer.eos_ids)
    for m in _MARKERS:
        enc = tokenizer.encode(m, add_bos=False)
        if len(enc) == 1:
            ids.add(enc[0])
    return tuple(sorted(ids))


def clean_message(text: str, min_words: int) -> tuple[str | None, str]:
    """``(message, "kept")`` or ``(None, reason)`` for one decoded user turn."""
    for m in _MARKERS:
        if text.endswith(m):
            text = text[: -len(m)]
    text = text.strip()
    if any(m in text for m in _MARKERS):
        return None, "marker"
    if len(text.split()) < min_words:
        return None, "short"
    return text, "kept"


def _chunk_systems(config: MagpieConfig, chunk: int) -> list[str]:
    rng = np.random.default_rng([config.seed, chunk, 1])
    w = np.array([SYSTEM_WEIGHTS[s] for s in config.systems], np.float64)
    return [config.systems[i] for i in rng.choice(len(w), size=config.chunk_size, p=w / w.sum())]


def _read_state(config: MagpieConfig) -> tuple[list[PoolItem], dict]:
    out = Path(config.out)
    meta_path = Path(str(out) + META_SUFFIX)
    if not meta_path.exists():
        if out.exists():
            raise DataError(f"{out}: exists without its {meta_path.name}; not a file this "
                            "command started (give a new --out, or remove it)")
        return [], {"format": FORMAT, "config": config.to_dict(), "chunks_done": 0,
                    "rows": 0, "dropped": {}, "wall_s": 0.0}
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{meta_path}: unreadable ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{meta_path}: not a {FORMAT} state file")
    old = {k: v for k, v in meta.get("config", {}).items() if k not in _RESUME_FREE}
    new = {k: v for k, v in config.to_dict().items() if k not in _RESUME_FREE}
    diff = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        what = "; ".join(f"{k}: started with {old.get(k)!r}, now {new.get(k)!r}" for k in diff)
        raise ConfigError(f"{out}: started with other settings ({what}); rerun with the same "
                          "settings to continue, or give a new --out")
    try:
        lines = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{out}: cannot read ({e})") from None
    items = [PoolItem.from_json(line, f"{out}:{n}") for n, line in enumerate(lines, 1)
             if line.strip()]
    if len(items) != meta.get("kept", len(items)):
        raise DataError(f"{out}: holds {len(items)} prompts, {meta_path.name} says "
                        f"{meta.get('kept')} (edited by hand?); give a new --out")
    return items, meta


def _write_state(config: MagpieConfig, items: list[PoolItem], meta: dict) -> None:
    out = Path(config.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_bytes(out, "".join(it.to_json() + "\n" for it in items).encode("utf-8"),
                       fsync=True)
    meta["kept"] = len(items)
    atomic.write_bytes(Path(str(out) + META_SUFFIX),
                       (json.dumps(meta, indent=2) + "\n").encode("utf-8"), fsync=True)


def write_prompts(config: MagpieConfig, lm=None, progress: bool = True, *,
                  max_chunks: int | None = None,
                  log: Callable[[str], None] = _log_stderr) -> dict:
    """Writes (or continues) the prompt file ``config`` describes; returns its state.

    Raises:
      ConfigError: a rerun with other settings, a model without a chat template.
      DataError: an unreadable or hand-edited file or state.
    """
    from specjax.engine import generate
    from specjax.sampling import SamplingParams

    t_start = time.perf_counter()
    items, meta = _read_state(config)
    seen = {normalize(it.prompt) for it in items}
    if len(items) >= config.num_prompts:
        log(f"{config.out}: complete ({len(items)} prompts); nothing to do")
        return meta
    if lm is None:
        from specjax._runtime import load_for_run

        lm = load_for_run(config.model, config.dtype, "none", "dense", decodes_text=True,
                          speculative=False, numerics="fast")
    tok = lm.tokenizer
    if tok is None:
        raise ConfigError(f"{config.model}: the model has no tokenizer")
    prefixes = {s: user_turn_prefix(tok, SYSTEMS[s]) for s in config.systems}
    stop_ids = _end_of_turn_ids(tok)
    dropped = Counter(meta.get("dropped", {}))
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=config.num_prompts, initial=len(items), desc="prompts", unit="prompt",
                   file=sys.stderr)
    built = 0
    try:
        while len(items) < config.num_prompts:
            elapsed = (time.perf_counter() - t_start) / 60
            if built and ((max_chunks is not None and built >= max_chunks)
                          or (config.time_limit_min is not None
                              and elapsed >= config.time_limit_min)):
                log(f"stopped after {built} chunk(s) in this run; run the same command again "
                    "to continue")
                break
            c = meta["chunks_done"]
            t0 = time.perf_counter()
            systems = _chunk_systems(config, c)
            order = sorted(range(config.chunk_size), key=lambda i: (len(prefixes[systems[i]]), i))
            res = generate(lm.model, [prefixes[systems[i]] for i in order],
                           max_new_tokens=config.max_new_tokens,
                           sampling=SamplingParams(temperature=float(config.temperature),
                                                   top_p=float(config.top_p),
                                                   seed=(config.seed * 1_000_003 + c) % 2 ** 31),
                           eos_ids=stop_ids, batch_size=config.batch_size)
            new = []
            for j, i in enumerate(order):
                if res.stop_reason[j] != "eos":
                    dropped["cut"] += 1
                    continue
                text, why = clean_message(tok.decode(list(res.tokens[j])), config.min_words)
                if text is None:
                    dropped[why] += 1
                    continue
                key = normalize(text)
                if key in seen:
                    dropped["duplicate"] += 1
                    continue
                seen.add(key)
                new.append((i, PoolItem(f"magpie:{c}:{i}", "magpie", systems[i], text)))
            new.sort()
            room = config.num_prompts - len(items)
            items.extend(it for _, it in new[:room])
            meta["chunks_done"] = c + 1
            meta["rows"] = meta.get("rows", 0) + config.chunk_size
            meta["dropped"] = dict(sorted(dropped.items()))
            meta["wall_s"] = round(meta.get("wall_s", 0.0) + time.perf_counter() - t0, 3)
            meta["tasks"] = dict(sorted(Counter(it.task for it in items).items()))
            _write_state(config, items, meta)
            built += 1
            if bar is not None:
                bar.update(min(len(new), room))
    finally:
        if bar is not None:
            bar.close()
    log(f"{config.out}: {len(items)} of {config.num_prompts} prompts from {meta['rows']} rows "
        f"(dropped: {meta['dropped'] or 'none'})")
    return meta


def read_prompt_file(path: str | Path) -> list[PoolItem]:
    """The prompts of a file :func:`write_prompts` wrote (or any JSONL of ``id``, ``source``,
    ``task``, ``prompt`` objects), in file order.

    Raises:
      DataError: a missing or unreadable file, a line that is not such an object, repeated
        ids, an empty file.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: cannot read the prompt file ({e})") from None
    items = [PoolItem.from_json(line, f"{p}:{n}") for n, line in enumerate(lines, 1)
             if line.strip()]
    if not items:
        raise DataError(f"{p}: the prompt file holds no prompts")
    ids = Counter(it.id for it in items)
    rep = [i for i, n in ids.items() if n > 1]
    if rep:
        raise DataError(f"{p}: prompt ids must be unique; repeated: {rep[:3]}")
    return items


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``specjax train prompts``."""
    parser.add_argument("--out", required=True, help="JSONL file to write (rerun to continue)")
    parser.add_argument("--model", default="smollm2-135m",
                        help="chat model: preset name, .gguf file or Hugging Face directory")
    parser.add_argument("--dtype", default="float32", help="float32 | bfloat16")
    parser.add_argument("--num-prompts", type=int, default=1024, help="prompts wanted")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--chunk-size", type=int, default=512,
                        help="rows sampled per chunk (the unit of checkpointing)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows decoded together")
    parser.add_argument("--max-new-tokens", type=int, default=128,
                        help="longer messages are dropped")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--min-words", type=int, default=4, help="shorter messages are dropped")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated system prompts to draw from ({','.join(SYSTEMS)})")
    parser.add_argument("--time-limit", type=float, default=45.0, metavar="MINUTES",
                        help="stop starting chunks after this long; rerun to continue")
    parser.add_argument("--max-chunks", type=int, default=None,
                        help="sample at most this many chunks in this run")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    """``specjax train prompts``: 0 on success (finished or stopped at the time limit), 2 on
    an error."""
    try:
        if args.max_chunks is not None and args.max_chunks < 1:
            raise ConfigError(f"--max-chunks must be >= 1, got {args.max_chunks}")
        config = MagpieConfig(
            out=args.out, model=args.model, num_prompts=args.num_prompts, seed=args.seed,
            chunk_size=args.chunk_size, batch_size=args.batch_size,
            max_new_tokens=args.max_new_tokens, temperature=args.temperature,
            top_p=args.top_p, min_words=args.min_words,
            systems=tuple(s.strip() for s in args.systems.split(",") if s.strip()),
            time_limit_min=args.time_limit, dtype=args.dtype)
        meta = write_prompts(config, progress=not args.quiet, max_chunks=args.max_chunks)
    except SpecjaxError as e:
        print(f"specjax: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({k: meta.get(k) for k in ("kept", "rows", "chunks_done", "dropped",
                                                "wall_s")}))
    return 0


__all__ = ["MagpieConfig", "SYSTEMS", "SYSTEM_WEIGHTS", "add_arguments", "clean_message",
           "main", "read_prompt_file", "user_turn_prefix", "write_prompts"]
