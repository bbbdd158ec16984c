"""Acceptance-prediction heads (SpecDec++, card C5): a small MLP that reads what a drafter
knows when it drafts a token and predicts the probability that the target accepts it, given
that every earlier draft token of the step was accepted.

Inputs (:func:`features`), one vector per drafted token:

* the drafter's hidden state that produced the draft distribution (``DraftStep.hidden``: an
  EAGLE head's output feature, which is built from the target's own features), RMS-normalised,
  when the head was trained with one (``hidden_dim > 0``);
* three statistics of the draft distribution: the log-probability of the drafted token, the
  entropy and the margin between the two most likely tokens;
* the draft position, one-hot (positions past ``max_pos - 1`` share the last slot).

Network: ``x = W_in f + b_in``, then ``blocks`` residual blocks ``x + SiLU(W x + b)`` (the
paper's ResBlocks), then ``logit = w_out . x + b_out``; ``p = sigmoid(logit)``.

A head directory holds ``config.json`` (``format: specjax-acceptance-1``, the config, what it
was trained for: the target's shapes and tokenizer, the drafter's name and parameter digest,
and training figures under ``meta``) and ``model.safetensors``. :func:`load` checks both and
names the file and the problem; :func:`check_drafter` and :func:`check_target` refuse a head
trained for another drafter or target.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import weakref
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.errors import CheckpointError

FORMAT = "specjax-acceptance-1"
N_STATS = 3


@dataclasses.dataclass(frozen=True)
class AcceptanceHeadConfig:
    """Shapes of an acceptance head.

    Attributes:
      hidden_dim: size of the drafter hidden state it reads (0: none; statistics only).
      width: the MLP's width.
      blocks: residual blocks.
      max_pos: draft positions with their own one-hot slot.
    """

    hidden_dim: int
    width: int = 256
    blocks: int = 2
    max_pos: int = 8

    def __post_init__(self):
        for f in ("hidden_dim", "width", "blocks", "max_pos"):
            v = getattr(self, f)
            lo = 0 if f in ("hidden_dim", "blocks") else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise CheckpointError(f"acceptance head: {f} must be an integer >= {lo}, "
                                      f"got {v!r}")

    @property
    def in_dim(self) -> int:
        return self.hidden_dim + N_STATS + self.max_pos

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def features(index, token, probs, hidden, cfg: AcceptanceHeadConfig):
    """``float32[B, cfg.in_dim]``: the head's input for one drafted token of every row.

    ``index``: ``int32[]`` draft position; ``token``: ``int32[B]``; ``probs``: ``[B, V]`` the
    draft distribution it was drawn from; ``hidden``: ``[B, D]`` or None."""
    p = probs.astype(jnp.float32)
    B = p.shape[0]
    logp = jnp.log(jnp.clip(p, 1e-30, 1.0))
    tok_lp = jnp.take_along_axis(logp, token[:, None].astype(jnp.int32), axis=1)[:, 0]
    ent = -jnp.sum(jnp.where(p > 0, p * logp, 0.0), axis=-1)
    # top-1 minus top-2 by two reductions (a lax.top_k over the vocabulary cost ~1 ms per
    # call at batch 1 on the CPU, as much as the rest of the stop rule ten times over)
    i1 = jnp.argmax(p, axis=-1)
    p1 = jnp.max(p, axis=-1)
    p2 = jnp.max(jnp.where(jnp.arange(p.shape[-1])[None] == i1[:, None], -1.0, p), axis=-1)
    stats = jnp.stack([jnp.maximum(tok_lp, -30.0) / 10.0, ent / 5.0, p1 - p2], axis=-1)
    pos = jax.nn.one_hot(jnp.minimum(index, cfg.max_pos - 1), cfg.max_pos, dtype=jnp.float32)
    parts = []
    if cfg.hidden_dim:
        if hidden is None:
            raise CheckpointError(
                f"this acceptance head reads the drafter's hidden state (hidden_dim="
                f"{cfg.hidden_dim}), but the drafter exposes none at its draft steps: train a "
                "head for this drafter (specjax train acceptance)")
        if hidden.shape[-1] != cfg.hidden_dim:
            raise CheckpointError(
                f"this acceptance head reads a hidden state of size {cfg.hidden_dim}, the "
                f"drafter's is {hidden.shape[-1]}: it was trained for another drafter")
        h = hidden.astype(jnp.float32)
        h = h * jax.lax.rsqrt(jnp.mean(h * h, axis=-1, keepdims=True) + 1e-6)
        parts.append(h)
    parts += [stats, jnp.broadcast_to(pos[None], (B, cfg.max_pos))]
    return jnp.concatenate(parts, axis=-1)


def init_params(cfg: AcceptanceHeadConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random parameters (scaled normal; the output bias at 0: p = 0.5)."""
    rng = np.random.default_rng(seed)
    W = cfg.width
    out = {"w_in": rng.normal(0, 1 / np.sqrt(cfg.in_dim), (cfg.in_dim, W)).astype(np.float32),
           "b_in": np.zeros((W,), np.float32)}
    for i in range(cfg.blocks):
        out[f"w_{i}"] = rng.normal(0, 0.5 / np.sqrt(W), (W, W)).astype(np.float32)
        out[f"b_{i}"] = np.zeros((W,), np.float32)
    out["w_out"] = rng.normal(0, 1 / np.sqrt(W), (W,)).astype(np.float32)
    out["b_out"] = np.zeros((), np.float32)
    return out


def logit(params, x, blocks: int):
    """The head's acceptance logit for inputs ``x[..., in_dim]``."""
    h = x @ params["w_in"] + params["b_in"]
    for i in range(blocks):
        h = h + jax.nn.silu(h @ params[f"w_{i}"] + params[f"b_{i}"])
    return h @ params["w_out"] + params["b_out"]


def hidden_dim_of(drafter) -> int:
    """Size of the hidden state ``drafter`` hands its stop hook (0: none)."""
    return int(getattr(drafter, "stop_hidden_size", 0) or 0)


_DIGESTS: dict[int, tuple[Any, str]] = {}  # id(drafter) -> (weak reference, digest)


def drafter_digest(drafter) -> str:
    """What identifies a drafter for an acceptance head: its name and a digest of its
    parameters (not its options such as ``k``) (every leaf's path, shape, dtype and up to
    256 of its values, so that hashing a large draft model stays cheap); a drafter with an
    ``identity_digest`` (an EAGLE head whose products run in int8) gives that of its
    parameters as trained, before quantization. Computed once per
    drafter object (building a method asks twice: the shipped head's lookup, its check)."""
    hit = _DIGESTS.get(id(drafter))
    if hit is not None and hit[0]() is drafter:
        return hit[1]
    digest = _digest(drafter)
    for key in [k for k, (ref, _) in _DIGESTS.items() if ref() is None]:
        del _DIGESTS[key]  # drafters gone (their ids may be reused)
    try:
        _DIGESTS[id(drafter)] = (weakref.ref(drafter), digest)
    except TypeError:  # not weak-referenceable: no cache
        pass
    return digest


def _digest(drafter) -> str:
    # a drafter whose products run quantized (EAGLE's w8a8 on a CPU) carries the digest of the
    # weights it was trained with, so one head serves both precisions
    given = getattr(drafter, "identity_digest", None)
    return given if given is not None else params_digest(drafter.name, drafter.params())


def params_digest(name: str, tree) -> str:
    """The digest :func:`drafter_digest` gives a drafter called ``name`` with parameters
    ``tree``."""
    h = hashlib.sha256(str(name).encode())
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.asarray(leaf)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str((a.shape, str(a.dtype))).encode())
        flat = a.reshape(-1)
        step = max(1, flat.size // 256)
        h.update(np.ascontiguousarray(flat[::step][:256]).astype(np.float32).tobytes())
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class AcceptanceHead:
    """A loaded head: its config, parameters (numpy) and what it was trained for."""

    path: str
    cfg: AcceptanceHeadConfig
    params: dict[str, np.ndarray]
    trained_for: dict[str, Any]
    meta: dict[str, Any]

    def predict(self, index, token, probs, hidden):
        """``float32[B]``: predicted acceptance probability of each row's drafted token."""
        x = features(index, token, probs, hidden, self.cfg)
        p = {k: jnp.asarray(v) for k, v in self.params.items()}
        return jax.nn.sigmoid(logit(p, x, self.cfg.blocks))


def save(path: str | Path, cfg: AcceptanceHeadConfig, params, *, trained_for: dict,
         meta: dict | None = None) -> Path:
    """Writes ``path/config.json`` and ``path/model.safetensors``."""
    from safetensors.numpy import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    tensors = {k: np.asarray(v, np.float32) for k, v in params.items()}
    save_file(tensors, str(p / "model.safetensors"))
    conf = {"format": FORMAT, "head": cfg.to_dict(), "trained_for": trained_for,
            "meta": meta or {}}
    (p / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    return p


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime: float) -> AcceptanceHead:
    p = Path(path)
    conf_f, weights_f = p / "config.json", p / "model.safetensors"
    for f in (conf_f, weights_f):
        if not f.is_file():
            raise CheckpointError(f"{f}: missing: {p} is not an acceptance-head directory "
                                  "(train one with `specjax train acceptance`)")
    try:
        conf = json.loads(conf_f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{conf_f}: cannot read ({e})") from None
    if not isinstance(conf, dict) or conf.get("format") != FORMAT:
        got = conf.get("format") if isinstance(conf, dict) else None
        raise CheckpointError(f"{conf_f}: format {got!r} is not {FORMAT!r}: not an acceptance "
                              "head")
    try:
        cfg = AcceptanceHeadConfig(**conf["head"])
    except (KeyError, TypeError) as e:
        raise CheckpointError(f"{conf_f}: bad 'head' entry ({e})") from None
    try:
        from safetensors.numpy import load_file

        params = load_file(str(weights_f))
    except Exception as e:  # noqa: BLE001 - safetensors raises several kinds
        raise CheckpointError(f"{weights_f}: cannot read the weights ({type(e).__name__}: "
                              f"{e}); the file is corrupt or truncated") from None
    want = {k: v.shape for k, v in init_params(cfg).items()}
    for k, shape in want.items():
        if k not in params:
            raise CheckpointError(f"{weights_f}: tensor {k!r} is missing")
        if tuple(params[k].shape) != tuple(shape):
            raise CheckpointError(f"{weights_f}: tensor {k!r} has shape "
                                  f"{tuple(params[k].shape)}, the config says {tuple(shape)}")
        if not np.isfinite(params[k]).all():
            raise CheckpointError(f"{weights_f}: tensor {k!r} holds NaN or inf")
    extra = sorted(set(params) - set(want))
    if extra:
        raise CheckpointError(f"{weights_f}: unexpected tensors {extra}")
    return AcceptanceHead(path=str(p), cfg=cfg, params={k: params[k] for k in want},
                          trained_for=dict(conf.get("trained_for") or {}),
                          meta=dict(conf.get("meta") or {}))


def load(path: str | Path) -> AcceptanceHead:
    """Reads and checks an acceptance-head directory (cached per path and modification time).

    Raises:
      CheckpointError: naming the file: missing files, another format, bad config, corrupt
        weights, wrong tensor shapes, NaN/inf.
    """
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p}: acceptance head directory not found")
    mt = max((f.stat().st_mtime for f in p.iterdir() if f.is_file()), default=0.0)
    return _load_cached(str(p.resolve()), mt)


def target_key(lm) -> dict[str, Any]:
    """The target's fields an acceptance head records and checks."""
    from specjax.tokenizer import tokenizer_sha256

    cfg = getattr(lm, "model", lm).cfg
    tok = getattr(lm, "tokenizer", None)
    return {"num_layers": cfg.num_layers, "hidden_size": cfg.hidden_size,
            "vocab_size": cfg.vocab_size,
            "tokenizer_sha256": tokenizer_sha256(tok) if tok is not None else None}


def check_target(head: AcceptanceHead, lm) -> None:
    want = head.trained_for.get("target") or {}
    have = target_key(lm)
    for f, v in have.items():
        if f in want and want[f] is not None and v is not None and want[f] != v:
            raise CheckpointError(f"{head.path}: acceptance head trained for another target "
                                  f"(target.{f} is {want[f]!r}, this model has {v!r})")


def check_drafter(head: AcceptanceHead, drafter) -> None:
    want = head.trained_for.get("drafter") or {}
    if want.get("name") not in (None, drafter.name):
        raise CheckpointError(f"{head.path}: acceptance head trained for drafter "
                              f"{want.get('name')!r}, not {drafter.name!r}")
    if want.get("digest") and want["digest"] != drafter_digest(drafter):
        raise CheckpointError(
            f"{head.path}: acceptance head trained for another {drafter.name} drafter (its "
            f"parameters differ: another head or draft model); train one for this drafter "
            "with `specjax train acceptance`")
