"""Where does a verify block stop matching one-token decoding? (issue 22, exact numerics)

``tests/numerics_checks.py`` says *whether* a verify forward over ``k`` tokens gives the
logits of decoding them one at a time; this script says *where* the first difference appears
on the running backend: for each token of the block, per layer, the keys and values the
forward writes to the cache, the residual stream after the block, the final normed hidden
state and the logits. It runs the same forward three ways: the whole model, attention only
(every MLP skipped) and MLPs only (every attention skipped), so a difference can be pinned to
a sublayer. Same tiny random model and prompt as the test of the same shape.

    python scripts/numerics_where.py --precision bfloat16 --batch 1 --heads 4,4 --k 2

Prints one line per (variant, token, quantity) that differs, with the largest absolute
difference, then a summary line; exits 1 when anything differs. (2026-11-27 on an H200: the
bfloat16 batch-1 verify block of k = 2 differed from decoding, batch 3 and 8 did not. On an
H100, 2026-11-28, this script placed it in every layer's keys, values and residual stream,
in the MLP-only and attention-only variants alike, and compiling with
``xla_allow_excess_precision`` off made every quantity identical: XLA had kept bfloat16
intermediates in float32 inside fusions that differ between the two shapes. Exact programs
are now compiled with it off; ``--xla-defaults`` shows the difference again.)
"""

from __future__ import annotations

import argparse
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from specjax.config import tiny_config
from specjax.models.loaders import random_model
from specjax.models.numerics import EXACT_COMPILER_OPTIONS
from specjax.models.quant import quantize


def exact_model(precision: str, layers: int, heads: tuple[int, int], seed: int = 1):
    cfg = tiny_config(vocab_size=96, num_layers=layers, num_heads=heads[0],
                      num_kv_heads=heads[1])
    model = random_model(cfg, seed=seed,
                         dtype=jnp.bfloat16 if precision == "bfloat16" else jnp.float32)
    if precision == "w8a8":
        model = quantize(model)
    model.set_numerics("exact")
    return model


def _fwd(model, tokens, positions, cache, skip_attn=(), skip_mlp=(), hidden_layers=()):
    graphdef, state = nnx.split(model)
    return _fwd_compiled(graphdef, state, tokens, positions, cache, skip_attn, skip_mlp,
                         hidden_layers)


def _compiled(graphdef, state, tokens, positions, cache, skip_attn, skip_mlp, hidden_layers):
    return nnx.merge(graphdef, state)(tokens, positions, cache, skip_attn=skip_attn,
                                      skip_mlp=skip_mlp, hidden_layers=hidden_layers)


_STATIC = dict(static_argnums=(0, 5, 6, 7))
# --xla-defaults compiles without the exact numerics' options (to see what they change)
_fwd_compiled = jax.jit(_compiled, compiler_options=EXACT_COMPILER_OPTIONS, **_STATIC)


def _record(out, slots, n_layers, attn_on):
    """Per token ``i``: the quantities of the forward at cache slot ``slots[:, i]``."""
    B, T = slots.shape
    kv = ({f"{n}[{l}]": np.asarray(buf[l]) for n, buf in (("k", out.cache.k), ("v", out.cache.v))
           for l in range(n_layers)} if attn_on else {})
    rec = []
    for i in range(T):
        s = slots[:, i]
        q = {name: a[np.arange(B), :, s].astype(np.float32)  # cache [B, KVH, S, Dh]
             for name, a in kv.items()}
        for l, h in enumerate(out.hidden):
            q[f"hidden[{l}]"] = np.asarray(h[:, i]).astype(np.float32)
        q["final_hidden"] = np.asarray(out.final_hidden[:, i]).astype(np.float32)
        q["logits"] = np.asarray(out.logits[:, i])
        rec.append(q)
    return rec


def compare(precision: str, batch: int, heads: tuple[int, int], k: int, layers: int,
            variant: str) -> list[dict]:
    model = exact_model(precision, layers, heads)
    all_layers = tuple(range(layers))
    skip_attn = all_layers if variant == "mlp_only" else ()
    skip_mlp = all_layers if variant == "attention_only" else ()
    kw = dict(skip_attn=skip_attn, skip_mlp=skip_mlp, hidden_layers=all_layers)
    rng = np.random.default_rng(batch)  # the test's prompt and tokens
    seq = rng.integers(0, 96, (batch, 48))
    lens = [int(x) for x in rng.integers(3, 14, batch)]
    P = max(lens)
    toks = np.zeros((batch, P), np.int32)
    for b in range(batch):
        toks[b, :lens[b]] = seq[b, :lens[b]]
    cache = model.init_cache(batch, 64)
    pre = _fwd(model, jnp.asarray(toks), jnp.broadcast_to(jnp.arange(P)[None], (batch, P)),
               cache, **kw)
    cache0 = pre.cache.with_lengths(jnp.asarray(lens, jnp.int32))
    L = np.asarray(lens)
    idx = L[:, None] + np.arange(k)[None]
    block = jnp.asarray(np.take_along_axis(seq, idx, 1), jnp.int32)
    got = _record(_fwd(model, block, jnp.asarray(idx, jnp.int32), cache0, **kw), idx, layers,
                  not skip_attn)
    ref, c = [], cache0
    for i in range(k):
        o = _fwd(model, block[:, i:i + 1], jnp.asarray(idx[:, i:i + 1], jnp.int32), c, **kw)
        ref += _record(o, idx[:, i:i + 1], layers, not skip_attn)
        c = o.cache.advance(jnp.ones((batch,), jnp.int32))
    diffs = []
    for i in range(k):
        for name, want in ref[i].items():
            have = got[i][name]
            if not np.array_equal(have, want):
                d = np.abs(have.astype(np.float64) - want.astype(np.float64))
                diffs.append({"variant": variant, "token": i, "quantity": name,
                              "max_abs_diff": float(np.nanmax(d)),
                              "rows": [int(b) for b in np.nonzero(
                                  d.reshape(batch, -1).max(1) > 0)[0]]})
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", default="bfloat16", choices=["float32", "bfloat16", "w8a8"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--heads", default="4,4", help="query heads,key/value heads")
    ap.add_argument("--k", type=int, default=2, help="tokens in the verify block")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--variants", default="full,attention_only,mlp_only")
    ap.add_argument("--json", help="write the differences here as JSON")
    ap.add_argument("--xla-defaults", action="store_true",
                    help="compile with XLA's default options, not the exact numerics' "
                         "(xla_allow_excess_precision on: the H100 difference of 2026-11-28)")
    a = ap.parse_args(argv)
    global _fwd_compiled
    if a.xla_defaults:
        _fwd_compiled = jax.jit(_compiled, **_STATIC)
    heads = tuple(int(x) for x in a.heads.split(","))
    if len(heads) != 2 or heads[0] % heads[1]:
        ap.error(f"--heads {a.heads!r}: two numbers, query heads a multiple of key/value heads")
    if a.k < 1:
        ap.error("--k must be at least 1")
    out = []
    for v in a.variants.split(","):
        if v not in ("full", "attention_only", "mlp_only"):
            ap.error(f"unknown variant {v!r}")
        d = compare(a.precision, a.batch, heads, a.k, a.layers, v)
        for x in d:
            print(f"{v:<15} token {x['token']}  {x['quantity']:<14} max |diff| "
                  f"{x['max_abs_diff']:.3g}  rows {x['rows']}")
        print(f"{v:<15} {'identical' if not d else f'{len(d)} quantities differ'}")
        out += d
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "differences": out}, f, indent=1)
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main())
