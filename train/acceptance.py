"""``specjax train acceptance``: the acceptance-prediction head of the ``specdec++`` policy
(SpecDec++, card C5), for one drafter of one target.

Two stages, both in ``--out DIR``:

1. **Collect** (resumable, ``collect-NNNNN.npz`` per chunk of prompts): the target decodes
   prompts with the drafter inside the project's own compiled loop, drafting ``k`` tokens every
   step under a recording policy that never cuts. For each drafted token the policy's stop hook
   sends the acceptance head's input (:func:`specjax.heads.acceptance.features`) to the host
   (``jax.experimental.io_callback``); after verification its update hook sends the accepted
   count. A token at draft position ``i`` is labelled accepted when ``i < n_acc``, rejected when
   ``i == n_acc``; later positions are left out (they are conditioned on a rejected token, which
   the policy never sees: it only asks for tokens whose predecessors it expects accepted). The
   labels are greedy verification's 0/1 events. Prompts come from the corpus's prompt pool
   (``pool.jsonl``) *past* the records already answered in the corpus (for a finished corpus:
   the same pool recipe's candidates that ``pool.jsonl`` does not hold), so that a drafter
   trained on the corpus is measured on prompts it never saw.
2. **Fit** (seconds): the head's MLP on those samples with Optax (AdamW, warm-up + cosine,
   global-norm clipping), loss the paper's weighted binary cross-entropy (rejections weighted
   ``w_reject``, normalised by the total weight), a held-out split for validation; the head goes
   to ``DIR/head`` (``--method-arg policy=specdec++ --method-arg acc_head=DIR/head``), metrics to
   ``DIR/metrics.jsonl``.

The fit stage is short enough (well under a minute on a CPU for 10^5 samples) that it keeps
no checkpoints: rerunning the command skips finished collection chunks and fits again.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from specjax import atomic
from specjax.errors import DataError, PolicyError

_SINKS: dict[int, "_Sink"] = {}
_SINK_IDS = itertools.count()
_LOCK = threading.Lock()


class _Sink:
    """Host side of a recording run: pairs each step's stop-hook features with the accepted
    counts the update hook sends after verification."""

    def __init__(self):
        self.pending: list[tuple[int, np.ndarray]] = []
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        self.pos: list[np.ndarray] = []

    def feat(self, index, x):
        self.pending.append((int(index), np.asarray(x, np.float32)))

    def step(self, n_draft, n_acc):
        n_draft, n_acc = np.asarray(n_draft), np.asarray(n_acc)
        for i, x in self.pending:
            rows = (i < n_draft) & (i <= n_acc)
            if rows.any():
                self.x.append(x[rows])
                self.y.append((i < n_acc[rows]).astype(np.float32))
                self.pos.append(np.full(int(rows.sum()), i, np.int32))
        self.pending = []

    def arrays(self):
        if not self.x:
            return (np.zeros((0, 0), np.float32), np.zeros((0,), np.float32),
                    np.zeros((0,), np.int32))
        return np.concatenate(self.x), np.concatenate(self.y), np.concatenate(self.pos)


@dataclasses.dataclass(frozen=True)
class RecordingPolicy:
    """Drafts ``max_k`` tokens every step and records, through host callbacks, the acceptance
    head's input for every drafted token and the accepted counts (see the module doc)."""

    max_k: int
    head: Any  # AcceptanceHeadConfig (frozen, hashable)
    sink: int
    name: str = "record_acceptance"
    stops_mid_draft: bool = True

    def init(self, batch: int):
        return ()

    def decide(self, state, ctx):
        import jax.numpy as jnp

        return jnp.full(ctx.seq_len.shape, self.max_k, jnp.int32)

    def stop(self, state, step):
        import jax.numpy as jnp
        from jax.experimental import io_callback

        from specjax.heads.acceptance import features

        x = features(step.index, step.token, step.probs, step.hidden, self.head)
        sink = _SINKS[self.sink]
        io_callback(sink.feat, None, step.index, x, ordered=True)
        return jnp.zeros(step.token.shape, bool)

    def update(self, state, k, n_draft, n_acc):
        from jax.experimental import io_callback

        io_callback(_SINKS[self.sink].step, None, n_draft, n_acc, ordered=True)
        return state


def record(lm, drafter, prompts: list[list[int]], head_cfg, *, max_new_tokens: int,
           batch_size: int, eos_ids=(), progress=None):
    """Decodes ``prompts`` greedily with ``drafter`` drafting ``drafter.max_k`` tokens every
    step and returns ``(x float32[N, F], accepted float32[N], position int32[N])``."""
    from specjax.engine import generate

    sid = next(_SINK_IDS)
    with _LOCK:
        _SINKS[sid] = _Sink()
    try:
        pol = RecordingPolicy(max_k=drafter.max_k, head=head_cfg, sink=sid)
        res = generate(lm.model, prompts, max_new_tokens=max_new_tokens, drafter=drafter,
                       policy=pol, batch_size=batch_size, eos_ids=eos_ids, progress=progress)
        x, y, pos = _SINKS[sid].arrays()
        return x, y, pos, res
    finally:
        with _LOCK:
            _SINKS.pop(sid, None)


# ----------------------------------------------------------------------------- fitting


def weighted_bce(logits, labels, w_reject: float):
    """SpecDec++'s loss: binary cross-entropy with rejections (label 0) weighted ``w_reject``
    and accepts 1, normalised by the total weight."""
    import jax
    import jax.numpy as jnp

    w = jnp.where(labels > 0.5, 1.0, w_reject)
    ll = labels * jax.nn.log_sigmoid(logits) + (1 - labels) * jax.nn.log_sigmoid(-logits)
    return -jnp.sum(w * ll) / jnp.sum(w)


def fit_head(x, y, head_cfg, *, epochs: int = 3, lr: float = 1e-3, batch: int = 512,
             w_reject: float = 6.0, val_fraction: float = 0.1, seed: int = 0,
             weight_decay: float = 0.01, log=None, progress: bool = True, val_mask=None):
    """Trains the acceptance head on ``(x, y)``; returns ``(params, summary)``.

    Validation: the samples where ``val_mask`` is True, else a random ``val_fraction``.
    ``summary`` has the validation loss (weighted as trained), accuracy, AUC, the mean predicted
    and observed acceptance, before and after training."""
    import jax
    import jax.numpy as jnp
    import optax

    from specjax.heads.acceptance import init_params, logit

    n = len(y)
    if n < 10:
        raise DataError(f"only {n} labelled draft tokens: too few to fit an acceptance head "
                        "(collect more prompts: --num-prompts)")
    rng = np.random.default_rng(seed)
    if val_mask is not None:
        val, tr = np.flatnonzero(val_mask), np.flatnonzero(~np.asarray(val_mask))
        if not len(val) or not len(tr):
            raise DataError("the validation mask leaves one side empty")
    else:
        perm = rng.permutation(n)
        n_val = max(1, int(round(n * val_fraction)))
        val, tr = perm[:n_val], perm[n_val:]
    n_val = len(val)
    steps_per_epoch = max(1, len(tr) // batch)
    total = steps_per_epoch * epochs
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, max(1, int(0.03 * total)), total,
                                               lr * 0.1)
    tx = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(sched, weight_decay=weight_decay))
    params = {k: jnp.asarray(v) for k, v in init_params(head_cfg, seed).items()}
    opt = tx.init(params)
    blocks = head_cfg.blocks

    def loss_fn(p, xb, yb):
        return weighted_bce(logit(p, xb, blocks), yb, w_reject)

    @jax.jit
    def step(p, o, xb, yb):
        loss, g = jax.value_and_grad(loss_fn)(p, xb, yb)
        upd, o = tx.update(g, o, p)
        return optax.apply_updates(p, upd), o, loss

    @jax.jit
    def evaluate(p, xb, yb):
        lg = logit(p, xb, blocks)
        return weighted_bce(lg, yb, w_reject), jax.nn.sigmoid(lg)

    xv, yv = jnp.asarray(x[val]), jnp.asarray(y[val])

    def val_metrics(p):
        loss, pr = evaluate(p, xv, yv)
        pr = np.asarray(pr)
        return {"val_loss": float(loss), "val_acc": float(np.mean((pr > 0.5) == (y[val] > 0.5))),
                "val_auc": auc(pr, y[val]), "val_pred_mean": float(pr.mean()),
                "val_true_mean": float(y[val].mean())}

    before = val_metrics(params)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, desc="fit acceptance head", unit="step", file=sys.stderr)
    t0 = time.perf_counter()
    s = 0
    for ep in range(epochs):
        order = tr[rng.permutation(len(tr))]
        for b in range(steps_per_epoch):
            idx = order[b * batch:(b + 1) * batch]
            params, opt, loss = step(params, opt, jnp.asarray(x[idx]), jnp.asarray(y[idx]))
            s += 1
            if bar is not None:
                bar.update(1)
                if s % 20 == 0:
                    bar.set_postfix(loss=f"{float(loss):.4f}")
        m = val_metrics(params)
        if log is not None:
            log.write(s, "val", m["val_loss"], m, time.perf_counter() - t0, epoch=ep + 1)
    if bar is not None:
        bar.close()
    after = val_metrics(params)
    out = {k: np.asarray(v) for k, v in params.items()}
    return out, {"samples": int(n), "train": int(len(tr)), "val": int(n_val), "steps": int(s),
                 "before": before, "after": after, "wall_s": round(time.perf_counter() - t0, 2)}


def auc(score, label) -> float:
    """Area under the ROC curve of ``score`` for binary ``label`` (ties averaged); NaN when
    one class is missing."""
    label = np.asarray(label) > 0.5
    n1, n0 = int(label.sum()), int((~label).sum())
    if not n1 or not n0:
        return float("nan")
    s = np.asarray(score, np.float64)
    uniq, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    r = (np.cumsum(counts) - (counts - 1) / 2.0)[inv]  # average rank of each tie group
    return float((r[label].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def calibration(params, head_cfg, x, y, pos) -> list[dict]:
    """Per draft position: samples, observed acceptance, mean prediction."""
    import jax
    import jax.numpy as jnp

    from specjax.heads.acceptance import logit

    pr = np.asarray(jax.nn.sigmoid(logit({k: jnp.asarray(v) for k, v in params.items()},
                                         jnp.asarray(x), head_cfg.blocks)))
    rows = []
    for i in sorted(set(pos.tolist())):
        m = pos == i
        rows.append({"position": int(i), "samples": int(m.sum()),
                     "accepted": round(float(y[m].mean()), 4),
                     "predicted": round(float(pr[m].mean()), 4)})
    return rows


# ----------------------------------------------------------------------------- command


def _parse_margs(items) -> dict[str, str]:
    out = {}
    for it in items or ():
        if "=" not in it:
            raise PolicyError(f"--method-arg wants KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def add_flags(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--out", required=True, help="output directory (collected samples, the "
                   "head in OUT/head, metrics.jsonl); rerun the same command to continue")
    p.add_argument("--method", default="eagle", help="the drafting method the head is for")
    p.add_argument("--method-arg", action="append", metavar="KEY=VALUE",
                   help="the method's options (e.g. head=DIR for another EAGLE head)")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--numerics", default="exact", choices=("exact", "fast"))
    p.add_argument("--data", default="data/corpus_smollm2",
                   help="a corpus directory: prompts from its pool past its answered records")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--chunk", type=int, default=32, help="prompts per collected file")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--k", type=int, default=6, help="tokens drafted every step while collecting "
                   "(the longest draft the head learns about)")
    p.add_argument("--time-limit", type=float, default=45.0,
                   help="minutes: stop starting new chunks after this long (then fit on what "
                   "is there)")
    p.add_argument("--hidden", action="store_true",
                   help="the head also reads the drafter's hidden state (off by default: on "
                   "the 14k-token sample of docs/training.md it overfits, see there)")
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--max-pos", type=int, default=8)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--w-reject", type=float, default=6.0,
                   help="weight of a rejection in the loss (SpecDec++'s 6; 1 gives calibrated "
                   "probabilities, see docs/training.md)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    return p


def pool_prompts(data: str | Path, tokenizer, n: int,
                 log=lambda *a: None) -> list[dict]:
    """``n`` prompts that the corpus in ``data`` has not answered: its pool (``pool.jsonl``)
    past the answered records first; when that runs out (a finished corpus answers its whole
    pool), candidates of the same pool recipe (seed, sources, the same overlap check against
    the evaluation sets its manifest names, the same prompt-length cap) that are not in
    ``pool.jsonl``, in the deterministic order of a pool twice the corpus's draw.

    Raises:
      DataError: not a corpus directory, a damaged manifest or pool, an evaluation set the
        overlap check needs that is missing, or fewer than ``n`` such prompts.
    """
    d = Path(data)
    mf, pf = d / "manifest.json", d / "pool.jsonl"
    for f in (mf, pf):
        if not f.is_file():
            raise DataError(f"{f}: missing: {d} is not a corpus directory (specjax train data)")
    try:
        manifest = json.loads(mf.read_text())
        done = int(manifest["num_records"])
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{mf}: cannot read num_records ({e})") from None
    out, seen = [], []
    with pf.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{pf}: line {i + 1} is not JSON ({e})") from None
            seen.append(rec["prompt"])
            if i < done or len(out) == n:
                continue
            out.append({"id": rec.get("id", str(i)),
                        "tokens": tokenizer.encode_chat(rec["prompt"])})
    if len(out) < n:
        log(f"{pf}: {len(out)} prompts past the corpus's {done} answered records; drawing "
            f"{n - len(out)} more from the pool's unselected candidates")
        out += _unselected_candidates(manifest, mf, seen, tokenizer, n - len(out))
    return out


def _unselected_candidates(manifest: dict, mf: Path, seen: list[str], tokenizer,
                           n: int) -> list[dict]:
    """``n`` prompts of the corpus's pool recipe that its ``pool.jsonl`` does not hold."""
    from specjax.train.pool import (build_pool, filter_overlaps, length_capped,
                                    load_eval_prompts, normalize)
    try:
        cfg, info = manifest["config"], manifest["pool"]
        seed, sources = int(cfg["seed"]), list(cfg["sources"])
        cap, chat = int(cfg["max_prompt_tokens"]), bool(cfg.get("chat", True))
        specs, want = list(info["checked_against"]), int(info["candidates"])
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"{mf}: cannot read the pool recipe ({e!r})") from None
    try:
        evals = load_eval_prompts(specs)
    except (OSError, DataError, ValueError) as e:
        raise DataError(f"{mf}: the corpus's pool is used up and more candidates need the "
                        f"overlap check against {specs}, which failed: {e}") from None
    taken = {normalize(p) for p in seen}
    encode = tokenizer.encode_chat if chat else tokenizer.encode
    # twice the corpus's draw, whatever n is: the same prompts for every --num-prompts
    cands = build_pool(seed, 2 * want, sources, log=lambda *a: None)
    kept, _ = filter_overlaps(cands, evals)
    capped, _ = length_capped(kept, encode, cap, n, skip=taken)
    out = [{"id": it.id, "tokens": toks if chat else tokenizer.encode_chat(it.prompt)}
           for it, toks in capped]
    if len(out) == n:
        return out
    raise DataError(f"{mf}: only {len(out)} prompts of the pool recipe are neither answered "
                    f"nor in pool.jsonl, --num-prompts asks for {n} more")


def main(args) -> int:
    from specjax import methods
    from specjax._runtime import load_for_run
    from specjax.heads import acceptance
    from specjax.train.metrics import MetricsLog

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, file=sys.stderr))
    lm = load_for_run(args.model, numerics=args.numerics, speculative=True)
    margs = {**_parse_margs(args.method_arg), "k": str(args.k), "policy": "fixed"}
    m = methods.build(args.method, lm, margs)
    drafter = m.drafter
    if drafter is None:
        raise PolicyError("--method ar drafts nothing: an acceptance head needs a drafter")
    # samples are recorded with every input (the drafter's hidden state included); the head
    # may use fewer (--hidden off: the statistics and the position only)
    rec_cfg = acceptance.AcceptanceHeadConfig(hidden_dim=acceptance.hidden_dim_of(drafter),
                                              width=1, blocks=0, max_pos=args.max_pos)
    head_cfg = acceptance.AcceptanceHeadConfig(
        hidden_dim=rec_cfg.hidden_dim if args.hidden else 0, width=args.width,
        blocks=args.blocks, max_pos=args.max_pos)
    key = {"method": args.method, "method_args": margs, "model": args.model,
           "numerics": args.numerics, "data": str(args.data), "max_new_tokens":
           args.max_new_tokens, "batch_size": args.batch_size, "max_pos": args.max_pos,
           "hidden_dim": rec_cfg.hidden_dim,
           "drafter_digest": acceptance.drafter_digest(drafter), "chunk": args.chunk}
    kf = out / "collect.json"
    if kf.is_file():
        old = json.loads(kf.read_text())
        diff = sorted(k for k in set(old) | set(key) if old.get(k) != key.get(k))
        if diff:
            raise PolicyError(f"{kf}: {out} holds samples collected with other settings "
                              f"({', '.join(diff)} differ): use another --out")
    else:
        atomic.write_text(kf, json.dumps(key, indent=2, default=str))
    prompts = pool_prompts(args.data, lm.tokenizer, args.num_prompts, log=say)
    t0 = time.perf_counter()
    n_chunks = (len(prompts) + args.chunk - 1) // args.chunk
    for c in range(n_chunks):
        f = out / f"collect-{c:05d}.npz"
        if f.is_file():
            continue
        if (time.perf_counter() - t0) / 60 > args.time_limit:
            say(f"time limit reached after {c} chunks: rerun the command to go on")
            break
        part = prompts[c * args.chunk:(c + 1) * args.chunk]
        tc = time.perf_counter()
        x, y, pos, res = record(lm, drafter, [p["tokens"] for p in part], rec_cfg,
                                max_new_tokens=args.max_new_tokens,
                                batch_size=args.batch_size, eos_ids=lm.tokenizer.eos_ids)
        with atomic.replacing(f) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, x=x.astype(np.float16), y=y, pos=pos,
                     new_tokens=np.int64(sum(len(t) for t in res.tokens)),
                     wall_s=np.float64(time.perf_counter() - tc))
        say(f"chunk {c + 1}/{n_chunks}: {len(y)} draft tokens labelled "
            f"({y.mean() if len(y) else 0:.2f} accepted), {time.perf_counter() - tc:.0f} s")
    files = sorted(out.glob("collect-*.npz"))
    if not files:
        raise DataError(f"{out}: no collected samples yet")
    parts = [np.load(f) for f in files]
    x = np.concatenate([p["x"] for p in parts]).astype(np.float32)
    if not head_cfg.hidden_dim:
        x = x[:, rec_cfg.hidden_dim:]
    y = np.concatenate([p["y"] for p in parts])
    pos = np.concatenate([p["pos"] for p in parts])
    # validation: the last chunk(s) of prompts (~10%), never tokens of a training prompt (a
    # random split of tokens puts neighbours of one text on both sides and flatters the head)
    chunk_of = np.concatenate([np.full(len(p["y"]), i) for i, p in enumerate(parts)])
    n_val = max(1, round(0.1 * len(parts))) if len(parts) > 1 else 0
    val_mask = chunk_of >= len(parts) - n_val if n_val else None
    log = MetricsLog(out / "metrics.jsonl")
    if log.path.exists():
        log.path.unlink()
    params, summary = fit_head(x, y, head_cfg, epochs=args.epochs, lr=args.lr,
                               w_reject=args.w_reject, seed=args.seed, log=log,
                               progress=not args.quiet, val_mask=val_mask)
    summary["calibration"] = calibration(params, head_cfg, x, y, pos)
    summary["chunks"] = len(files)
    summary["collect_wall_s"] = round(float(sum(float(p["wall_s"]) for p in parts)), 1)
    summary["new_tokens"] = int(sum(int(p["new_tokens"]) for p in parts))
    trained_for = {"target": acceptance.target_key(lm),
                   "drafter": {"name": drafter.name, "digest": key["drafter_digest"],
                               "method_args": margs}}
    acceptance.save(out / "head", head_cfg, params, trained_for=trained_for,
                    meta={"summary": summary, "labels": "greedy verification"})
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    a = summary["after"]
    say(f"acceptance head: {summary['samples']} samples, val loss "
        f"{summary['before']['val_loss']:.3f} -> {a['val_loss']:.3f}, val accuracy "
        f"{a['val_acc']:.3f}; written to {out / 'head'}")
    return 0
