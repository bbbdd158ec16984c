"""Greedy verification: accept while the draft equals the target's argmax (exact)."""

from __future__ import annotations

import dataclasses

from specjax.errors import VerifierError
from specjax.sampling import greedy_token
from specjax.verifiers.base import VERIFIERS, chain_path
from specjax.verify import greedy_tree_verify, greedy_verify


@VERIFIERS.register("greedy", doc="accept while the draft equals the target's argmax; exact "
                    "for greedy decoding (chains and trees)")
@dataclasses.dataclass(frozen=True)
class GreedyVerifier:
    name: str = dataclasses.field(default="greedy", init=False)
    exact: bool = dataclasses.field(default=True, init=False)

    def check(self, greedy, chain):
        if not greedy:
            raise VerifierError("verifier 'greedy' needs greedy decoding (temperature 0); "
                                "use 'exact', 'chain_sampling' or 'tree_sampling' to sample")

    def target_output(self, logits, sampling, greedy):
        return greedy_token(logits)

    def accept(self, keys, tree, valid, n_draft, out, *, depth, chain, greedy, rule):
        if chain:
            n_acc, nxt = greedy_verify(tree.tokens, n_draft, out)
            return n_acc, chain_path(n_acc, depth), nxt
        return greedy_tree_verify(tree.tokens, tree.parent, valid, out, depth)
