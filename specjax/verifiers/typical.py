"""Typical acceptance (Medusa, card C19): LOSSY.

A drafted token ``x`` below node ``u`` is accepted when the target finds it plausible enough:
``p_u(x) > min(threshold, alpha * exp(-H(p_u)))`` with ``H`` the entropy of the target's
distribution at ``u``. Accepts more than the exact rules when the target is unsure, but the
output is neither plain decoding's tokens nor its distribution: runs with it are reported as
lossy. After the accepted path, the next token is the target's argmax (greedy) or a sample
from its distribution.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.errors import VerifierError
from specjax.sampling import greedy_token
from specjax.verifiers.base import VERIFIERS, chain_path, target_probs
from specjax.verify import accepted_prefix


@VERIFIERS.register("typical", doc="LOSSY: Medusa's typical acceptance, p(x) > min(threshold, "
                    "alpha * exp(-entropy)); not identical to plain decoding")
@dataclasses.dataclass(frozen=True)
class TypicalVerifier:
    """Medusa's defaults: ``threshold = 0.09``, ``alpha = 0.3``."""

    threshold: float = 0.09
    alpha: float = 0.3
    name: str = dataclasses.field(default="typical", init=False)
    exact: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self):
        if not 0.0 < self.threshold <= 1.0:
            raise VerifierError(f"typical: threshold must be in (0, 1], got {self.threshold!r}")
        if not self.alpha > 0.0:
            raise VerifierError(f"typical: alpha must be > 0, got {self.alpha!r}")

    def check(self, greedy, chain):
        return None

    def target_output(self, logits, sampling, greedy):
        if greedy:  # the plain softmax: temperature does not apply to greedy decoding
            return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        return target_probs(logits, sampling)

    def _bar(self, p):
        ent = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.maximum(p, 1e-38)), 0.0), axis=-1)
        return jnp.minimum(self.threshold, self.alpha * jnp.exp(-ent))

    def _next(self, keys, p_last, greedy):
        if greedy:
            return greedy_token(p_last)
        logits = jnp.where(p_last > 0, jnp.log(jnp.maximum(p_last, 1e-38)), -jnp.inf)
        ks = jax.vmap(jax.random.wrap_key_data)(keys)
        return jax.vmap(jax.random.categorical)(ks, logits).astype(jnp.int32)

    def accept(self, keys, tree, valid, n_draft, out, *, depth, chain, greedy, rule):
        B, N = tree.tokens.shape
        bar = self._bar(out)  # [B, N + 1]
        rows = jnp.arange(B)[:, None]
        if chain:
            p_tok = jnp.take_along_axis(out[:, :N], tree.tokens[..., None], axis=-1)[..., 0]
            n_acc = accepted_prefix(p_tok > bar[:, :N], n_draft)
            p_last = jnp.take_along_axis(out, n_acc[:, None, None], axis=1)[:, 0]
            return n_acc, chain_path(n_acc, depth), self._next(keys, p_last, greedy)
        par = tree.parent + 1  # block index of each node's parent
        p_tok = out[rows, par, tree.tokens]
        ok = valid & (p_tok > jnp.take_along_axis(bar, par, axis=1))
        cur = jnp.full((B,), -1, jnp.int32)
        going = jnp.ones((B,), bool)
        path = []
        for _ in range(depth):
            cand = ok & (tree.parent == cur[:, None])
            has = jnp.any(cand, axis=1) & going
            j = jnp.argmax(cand, axis=1).astype(jnp.int32)
            cur = jnp.where(has, j, cur)
            going = has
            path.append(jnp.where(has, j, -1))
        path = jnp.stack(path, axis=1)
        n_acc = jnp.sum(path >= 0, axis=1).astype(jnp.int32)
        p_last = jnp.take_along_axis(out, (cur + 1)[:, None, None], axis=1)[:, 0]
        return n_acc, path, self._next(keys, p_last, greedy)
