"""Lossless multi-draft speculative sampling on a tree (exact).

Three sibling rules, chosen by how the drafter drew its candidates
(:func:`specjax.verifiers.base.sampling_rule`): ``iid`` (SpecInfer), ``wor`` (without
replacement: Sequoia / recursive rejection sampling) and ``det`` (deterministic candidates,
such as a top-k expansion). See :func:`specjax.verify.sampling_tree_verify`.
"""

from __future__ import annotations

import dataclasses

from specjax.errors import VerifierError
from specjax.verifiers.base import VERIFIERS, target_probs
from specjax.verify import sampling_tree_verify


@VERIFIERS.register("tree_sampling", doc="lossless multi-draft sampling over a tree (sibling "
                    "rule iid, wor or det from the drafter); exact when sampling")
@dataclasses.dataclass(frozen=True)
class TreeSamplingVerifier:
    name: str = dataclasses.field(default="tree_sampling", init=False)
    exact: bool = dataclasses.field(default=True, init=False)

    def check(self, greedy, chain):
        if greedy:
            raise VerifierError("verifier 'tree_sampling' samples: give a temperature > 0 "
                                "(greedy decoding uses 'greedy')")

    def target_output(self, logits, sampling, greedy):
        return target_probs(logits, sampling)

    def accept(self, keys, tree, valid, n_draft, out, *, depth, chain, greedy, rule):
        return sampling_tree_verify(keys, tree.tokens, tree.parent, tree.depth, valid, out,
                                    tree.q, depth, rule)
