"""The training loop: :func:`fit` trains a task's head on a corpus, with checkpoints, resume,
metrics and plots.

The task (:mod:`specjax.train.task`) owns the parameters and the loss; everything else is
here. One jitted, pure train step::

    (params, opt_state, frozen, batch, rng) -> (params, opt_state, loss, metrics)

with ``params`` and ``opt_state`` donated, runs once per micro-batch; gradient accumulation
is ``optax.MultiSteps`` (``grad_accum`` micro-batches per optimizer step), so a *step* is one
optimizer update. Checkpoints are only taken at step boundaries.

Determinism (the resume guarantee): every random choice derives from ``config.seed``:
parameter init from ``fold_in(key(seed), 0)``; the key of micro-batch ``m`` of step ``s``
is ``fold_in(fold_in(train_key, s), m)`` with ``train_key = fold_in(key(seed), 1)`` (saved
with the checkpoint); the split and the shuffle of every epoch hash ``(seed, index)``
(:mod:`specjax.train.batches`). A checkpoint holds the parameters, the optimizer state, the
key and the data position, so a run stopped at step ``n`` (``max_steps_this_run``, SIGINT,
SIGTERM) and resumed by rerunning the same command ends bit-identical to a run that never
stopped.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.errors import ConfigError, DataError
from specjax.train.batches import BatchIterator, Corpus, eval_batches, tokenizer_sha256
from specjax.train.checkpoint import Checkpointer, StopOnSignal
from specjax.train.config import RESUMABLE_CHANGES, TrainConfig
from specjax.distributed import is_main
from specjax.train.metrics import MetricsLog, plot_curves
from specjax.train.task import TASKS

# fold_in constants of the run's root key
_INIT_STREAM, _TRAIN_STREAM, _EVAL_STREAM = 0, 1, 2


def make_optimizer(config: TrainConfig) -> tuple[optax.GradientTransformation, Callable]:
    """The run's optimizer and its learning-rate schedule (a function of the step).

    Clip by global norm (unless ``clip_norm == 0``), then AdamW under a warmup + cosine
    schedule (0 -> ``lr`` over ``warmup_steps``, cosine to ``lr * end_lr_ratio`` at
    ``total_steps``); wrapped in ``optax.MultiSteps`` when ``grad_accum > 1`` (the schedule
    then counts optimizer updates, not micro-batches).
    """
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.lr, warmup_steps=config.warmup_steps,
        decay_steps=max(config.total_steps, config.warmup_steps + 1),
        end_value=config.lr * config.end_lr_ratio)
    parts = [optax.clip_by_global_norm(config.clip_norm)] if config.clip_norm > 0 else []
    parts.append(optax.adamw(schedule, b1=config.b1, b2=config.b2,
                             weight_decay=config.weight_decay))
    tx = optax.chain(*parts)
    if config.grad_accum > 1:
        tx = optax.MultiSteps(tx, every_k_schedule=config.grad_accum).gradient_transformation()
    return tx, schedule


def make_train_step(task, tx: optax.GradientTransformation) -> Callable:
    """The jitted train step over one micro-batch (``params``, ``opt_state`` donated).

    Returns:
      ``step(params, opt_state, frozen, batch, rng) -> (params, opt_state, loss, metrics)``,
      ``batch`` as :class:`~specjax.train.batches.BatchIterator` yields it (``tokens int32[B,
      T]``, ``loss_mask int32[B, T]``, ``lengths int32[B]``).
    """
    def step(params, opt_state, frozen, batch, rng):
        (loss, metrics), grads = jax.value_and_grad(task.loss, has_aux=True)(
            params, frozen, batch, rng)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, loss, metrics

    return jax.jit(step, donate_argnums=(0, 1))


def make_eval_step(task) -> Callable:
    """The jitted loss of one batch: ``(params, frozen, batch, rng) -> (loss, metrics)``."""
    return jax.jit(task.loss)


def train_placement(config: TrainConfig):
    """The :class:`specjax.mesh.Placement` of a run on a mesh (None on one device): examples
    over ``data``, the head's, the frozen target's and the optimizer's weights by the sharding
    table (split over ``model`` where it applies).

    Raises:
      ConfigError: a bad mesh, or one that needs more devices than are visible (naming both).
    """
    if config.mesh is None:
        return None
    from specjax.mesh import Placement, check_mesh, make_mesh

    mesh = make_mesh(config.mesh)
    try:
        check_mesh(mesh)
    except ConfigError as e:
        raise ConfigError(f"TrainConfig.mesh {config.mesh!r}: {e}") from None
    return Placement(mesh)


def _cfg_of(lm):
    return getattr(getattr(lm, "model", lm), "cfg")


def _load_model(config: TrainConfig):
    from specjax._runtime import load_for_run

    # the frozen target's pass in a train step compares with nothing: fast numerics
    return load_for_run(config.model, config.compute_dtype, decodes_text=False,
                        numerics="fast")


def _mean(rows: list[tuple[Any, dict]]) -> tuple[float, dict[str, float]]:
    """Mean loss and metrics over ``rows`` of ``(loss, metrics)`` device scalars."""
    host = jax.device_get(rows)
    loss = float(np.mean([r[0] for r in host]))
    keys = sorted({k for _, m in host for k in m})
    return loss, {k: float(np.mean([m[k] for _, m in host if k in m])) for k in keys}


def _own(tree):
    """Copies of the arrays of ``tree`` (a donated tree must not alias anything else, such as
    a target weight the task initialized a head from)."""
    return jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), tree)


class _Say:
    def __init__(self, bar, enabled: bool):
        self.bar, self.enabled = bar, enabled

    def __call__(self, msg: str, always: bool = False) -> None:
        if not (self.enabled or always):
            return
        if self.bar is not None and not self.bar.disable:
            self.bar.write(msg, file=sys.stderr)
        else:
            print(msg, file=sys.stderr, flush=True)


def fit(config: TrainConfig, task=None, lm=None, progress: bool = True, *,
        on_step: Callable[[int], None] | None = None) -> dict:
    """Trains ``config.task`` on ``config.data``, resuming from ``config.out_dir`` if it
    holds a checkpoint.

    Args:
      config: the run.
      task: an already built task (default: ``TASKS.build(config.task, config.task_args,
        lm)``).
      lm: the loaded target model (:class:`specjax.models.LoadedModel`; default: loaded from
        ``config.model`` in ``config.compute_dtype``).
      progress: show a progress bar and status messages on stderr.
      on_step: called with the step number after every completed step (tests, monitoring).

    Returns:
      A summary: ``step`` (reached), ``steps_this_run``, ``finished`` (``total_steps``
      reached), ``stopped`` (``None``, ``"max_steps_this_run"``, ``"time_limit"`` or the
      signal's name),
      ``resumed_from``, ``train_loss``/``train_metrics`` and ``val_loss``/``val_metrics``
      (latest logged), ``tokens_per_s``, ``truncated_records``, and the paths ``out_dir``,
      ``checkpoint``, ``metrics``, ``curves``, ``head``.

    Raises:
      ConfigError: the checkpoint in ``out_dir`` was written with another config (the
        message names the fields), or an unknown task.
      CheckpointError: a damaged checkpoint (names its directory).
      DataError: a missing or bad corpus, one encoded with another tokenizer, or one that
        changed since the checkpoint resumed from.
    """
    from tqdm import tqdm

    if not isinstance(config, TrainConfig):
        raise ConfigError(f"fit() needs a TrainConfig, got {type(config).__name__}")
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = _Say(None, progress)
    if lm is None:
        lm = _load_model(config)
    tok_sha = tokenizer_sha256(lm.tokenizer) if lm.tokenizer is not None else None
    if tok_sha is None:
        say(f"warning: {lm.source} has no tokenizer: the corpus's tokenizer is not checked",
            always=True)
    corpus = Corpus.open(config.data, tok_sha)
    if corpus.manifest.get("complete") is False:
        say(f"warning: {corpus.path} is not complete yet (its build stopped early): training on "
            f"its {len(corpus)} records; a run resumed after the corpus grows is refused",
            always=True)
    train_idx, val_idx = corpus.split(config.val_fraction, config.seed)
    if task is None:
        args = dict(config.task_args)
        if "corpus" in TASKS.option_names(config.task) and args.get("corpus") is None:
            args["corpus"] = config.data  # e.g. EAGLE's draft vocabulary: the corpus's tokens
        task = TASKS.build(config.task, args, lm)

    ckpt_dir = out / "checkpoints"
    if config.init_from is not None and not _has_checkpoint(ckpt_dir):
        warm = getattr(task, "warm_start", None)
        if warm is None:
            raise ConfigError(f"task {config.task!r} cannot start from a trained head "
                              "(init_from): it has no warm_start()")
        task = warm(config.init_from)
        note = getattr(task, "start_note", "")
        say(f"starting from the head in {config.init_from}" + (f": {note}" if note else ""))

    root = jax.random.key(config.seed)
    train_key = jax.random.fold_in(root, _TRAIN_STREAM)
    eval_key = jax.random.fold_in(root, _EVAL_STREAM)
    params = _own(task.init_params(jax.random.fold_in(root, _INIT_STREAM)))
    frozen = task.frozen()
    tx, schedule = make_optimizer(config)
    opt_state = tx.init(params)
    place = train_placement(config)
    if place is not None:  # placed by the table: a resumed run restores onto this mesh
        params, opt_state, frozen = place.weights((params, opt_state, frozen), _cfg_of(lm))
        say(f"training on the mesh {dict(place.mesh.shape)} (examples over 'data', weights "
            f"by the sharding table)")

    ckpt = Checkpointer(ckpt_dir, config.keep_checkpoints)
    try:
        step, position, elapsed0, resumed_from = 0, None, 0.0, None
        latest = ckpt.latest_step()
        if latest is not None:
            rng = jax.random.key_data(train_key)
            state, meta = _resume(ckpt, latest, config, corpus.fingerprint(), {
                "params": params, "opt_state": opt_state,
                "rng": rng if place is None else place.replicate(rng)})
            params, opt_state = state["params"], state["opt_state"]
            train_key = jax.random.wrap_key_data(state["rng"])
            step, position = int(meta["step"]), meta.get("data_position")
            elapsed0, resumed_from = float(meta.get("elapsed", 0.0)), step

        log = MetricsLog(out / "metrics.jsonl")
        log.truncate_after(step)
        bar = tqdm(total=config.total_steps, initial=step, desc=f"train {config.task}",
                   unit="step", file=sys.stderr, disable=not progress, dynamic_ncols=True)
        say.bar = bar
        if resumed_from is not None:
            say(f"resuming from step {step} ({ckpt.step_dir(step)})")
        data = BatchIterator(corpus, train_idx, config.batch_size, config.seq_len, config.seed,
                             vocab_size=lm.config.vocab_size, position=position,
                             report=lambda m: say(m, always=True))
        val = eval_batches(corpus, val_idx, config.batch_size, config.seq_len, config.eval_batches)
        if place is not None:
            val = [place.rows(b) for b in val]
        train_step = make_train_step(task, tx)
        eval_step = make_eval_step(task)

        stop_at = config.total_steps if config.max_steps_this_run is None else min(
            config.total_steps, step + config.max_steps_this_run)
        t_run = time.perf_counter()
        summary: dict[str, Any] = {"task": config.task, "resumed_from": resumed_from,
                                   "train_loss": None, "train_metrics": {}, "val_loss": None,
                                   "val_metrics": {}, "tokens_per_s": None}
        curves = out / "curves.png" if config.plot else None
        plotted = [False]

        def elapsed() -> float:
            return elapsed0 + time.perf_counter() - t_run

        def evaluate() -> None:
            if not val:
                return
            rows = [eval_step(params, frozen, b, eval_key) for b in val]
            loss, metrics = _mean(rows)
            log.write(step, "val", loss, metrics, elapsed())
            summary["val_loss"], summary["val_metrics"] = loss, metrics

        def save() -> Path:
            path = ckpt.save(step, {"params": params, "opt_state": opt_state,
                                    "rng": jax.random.key_data(train_key)},
                             {"data_position": data.position, "config": config.to_dict(),
                          "corpus": corpus.fingerprint(),
                              "elapsed": elapsed(), "task": config.task})
            if curves is not None:
                plotted[0] = _plot(log.path, curves, config, say) or plotted[0]
            return path

        window: list = []
        window_tokens, window_t = 0, time.perf_counter()
        start_step, stopped = step, None
        with StopOnSignal() as stop, bar:
            while step < stop_at:
                for micro in range(config.grad_accum):
                    batch = next(data)
                    window_tokens += int(batch["lengths"].sum())
                    if place is not None:
                        batch = place.rows(batch)
                    rng = jax.random.fold_in(jax.random.fold_in(train_key, step), micro)
                    params, opt_state, loss, metrics = train_step(params, opt_state, frozen,
                                                                  batch, rng)
                    window.append((loss, metrics))
                step += 1
                bar.update(1)
                if on_step is not None:
                    on_step(step)
                if step % config.log_every == 0 or step == stop_at:
                    loss, metrics = _mean(window)  # waits for the device
                    now = time.perf_counter()
                    tps = window_tokens / max(now - window_t, 1e-9)
                    lr = float(schedule(step - 1))
                    log.write(step, "train", loss, metrics, elapsed(), lr=lr, tokens_per_s=tps)
                    bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tps:.0f}", lr=f"{lr:.2e}")
                    summary.update(train_loss=loss, train_metrics=metrics, tokens_per_s=tps)
                    window, window_tokens, window_t = [], 0, now
                if step % config.eval_every == 0 or step == config.total_steps:
                    evaluate()
                if stop.requested:
                    stopped = signal.Signals(stop.signum).name
                    break
                if (config.time_limit_min is not None and step < stop_at
                        and time.perf_counter() - t_run >= 60 * config.time_limit_min):
                    stopped = "time_limit"
                    break
                if step % config.save_every == 0 and step < stop_at:
                    save()
            ckpt_path = save() if step > start_step else ckpt.step_dir(step)

        finished = step >= config.total_steps
        head = out / "head"
        partial = not finished and step > start_step  # a chunk's head: try it before the end
        if partial or (finished and (step > start_step or not head.exists())):
            meta = {"task": config.task, "finished": finished, "task_args": dict(config.task_args),
                    "target_model": config.model, "target_source": lm.source,
                    "target_config": json.loads(json.dumps(lm.config.to_dict(), default=str)),
                    "tokenizer_sha256": tok_sha, "step": step, "val_loss": summary["val_loss"],
                    "val_metrics": summary["val_metrics"], "train_config": config.to_dict()}
            if jax.process_count() > 1:  # gathered on every process (a collective) ...
                from specjax.distributed import to_host

                params = jax.tree_util.tree_map(jnp.asarray, to_host(params))
            if is_main():  # ... written by one
                task.save_head(params, head, meta)
        if curves is not None and not plotted[0] and is_main():
            plotted[0] = _plot(log.path, curves, config, say)
        if not finished:
            reason = stopped or "max_steps_this_run"
            say(f"stopped at step {step} of {config.total_steps} ({reason}); checkpoint saved in "
                f"{ckpt_path}" + (f", the head so far in {head}" if partial else "")
                + ". Rerun the same command to resume.", always=stopped is not None)
        else:
            say(f"done: step {step} of {config.total_steps}; head saved in {head} (for the "
                f"batched defaults' prior: specjax head measure-acceptance "
                f"{shlex.quote(str(head))} --model {shlex.quote(str(config.model))})")
        summary.update(
            step=step, total_steps=config.total_steps, steps_this_run=step - start_step,
            finished=finished,
            stopped=stopped if (stopped or finished) else "max_steps_this_run",
            truncated_records=data.truncated, out_dir=str(out), checkpoint=str(ckpt_path),
            metrics=str(log.path), curves=str(curves) if plotted[0] else None,
            head=str(head) if (finished or partial) else None,
            split={"train": int(train_idx.size), "val": int(val_idx.size)})
        return summary
    finally:
        ckpt.close()


def _has_checkpoint(path: Path) -> bool:
    return path.is_dir() and any(p.name.isdigit() for p in path.iterdir())


def _resume(ckpt: Checkpointer, step: int, config: TrainConfig, corpus: dict,
            template: dict) -> tuple[dict, dict]:
    """Restores checkpoint ``step`` onto ``template`` after checking that it was written
    with ``config`` (up to :data:`RESUMABLE_CHANGES`) on the same corpus (``corpus``: its
    :meth:`~specjax.train.batches.Corpus.fingerprint`).

    Raises:
      ConfigError: naming the fields that differ, with their saved and current values.
      DataError: the corpus changed since the checkpoint (the data order would differ).
      CheckpointError: a damaged checkpoint or another parameter structure.
    """
    meta = ckpt.read_meta(step)
    saved = meta.get("config") or {}
    diffs = config.differences(saved)
    if diffs:
        now = config.to_dict()
        detail = "; ".join(f"{k}: {saved.get(k, '<absent>')!r} -> {now.get(k)!r}"
                           for k in diffs)
        raise ConfigError(
            f"{ckpt.step_dir(step)}: this run's config differs from the one its checkpoints "
            f"were written with ({detail}). Resuming needs the same config (only "
            f"{', '.join(RESUMABLE_CHANGES)} may change); use another out_dir for another "
            "recipe")
    saved_corpus = meta.get("corpus")
    if saved_corpus is not None and saved_corpus != corpus:
        raise DataError(
            f"{config.data}: the corpus changed since the checkpoint {ckpt.step_dir(step)} "
            f"was written ({saved_corpus.get('num_records')} records in "
            f"{len(saved_corpus.get('shards', []))} shards then, {corpus['num_records']} in "
            f"{len(corpus['shards'])} now): resuming would not see the same batches; use "
            "another out_dir to train on the new corpus")
    return ckpt.restore(step, template)


def _plot(metrics_path: Path, curves: Path, config: TrainConfig, say: _Say) -> bool:
    try:
        return plot_curves(metrics_path, curves, title=f"{config.task} on {config.model}"
                           ) is not None
    except ImportError:
        say("warning: matplotlib is not installed: no curves.png (pip install matplotlib, or "
            "set plot=False)", always=True)
        return False
