"""Lossless speculative sampling of a chain (Leviathan et al. / Chen et al.): exact."""

from __future__ import annotations

import dataclasses

from specjax.errors import VerifierError
from specjax.verifiers.base import VERIFIERS, chain_path, target_probs
from specjax.verify import sampling_verify


@VERIFIERS.register("chain_sampling", doc="lossless speculative sampling of a drafted chain: "
                    "accept with min(1, p/q), resample the residual; exact when sampling")
@dataclasses.dataclass(frozen=True)
class ChainSamplingVerifier:
    name: str = dataclasses.field(default="chain_sampling", init=False)
    exact: bool = dataclasses.field(default=True, init=False)

    def check(self, greedy, chain):
        if greedy:
            raise VerifierError("verifier 'chain_sampling' samples: give a temperature > 0 "
                                "(greedy decoding uses 'greedy')")
        if not chain:
            raise VerifierError("verifier 'chain_sampling' verifies chains; this drafter "
                                "drafts trees: use 'tree_sampling'")

    def target_output(self, logits, sampling, greedy):
        return target_probs(logits, sampling)

    def accept(self, keys, tree, valid, n_draft, out, *, depth, chain, greedy, rule):
        q = None if rule == "det" else tree.q
        n_acc, nxt = sampling_verify(keys, tree.tokens, n_draft, out, q)
        return n_acc, chain_path(n_acc, depth), nxt
