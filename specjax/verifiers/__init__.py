"""Acceptance rules behind one protocol, registered by name (see :mod:`.base`).

``exact`` (the default) picks the exact rule that fits the run: ``greedy`` for greedy
decoding, ``chain_sampling`` for a sampled chain, ``tree_sampling`` for a sampled tree.
"""

from specjax.verifiers import chain_sampling, greedy, tree_sampling, typical  # noqa: F401
from specjax.verifiers.base import VERIFIERS, SamplingArrays, Verifier, sampling_rule
from specjax.verifiers.chain_sampling import ChainSamplingVerifier
from specjax.verifiers.greedy import GreedyVerifier
from specjax.verifiers.tree_sampling import TreeSamplingVerifier
from specjax.verifiers.typical import TypicalVerifier

__all__ = ["VERIFIERS", "ChainSamplingVerifier", "GreedyVerifier", "SamplingArrays",
           "TreeSamplingVerifier", "TypicalVerifier", "Verifier", "exact_verifier",
           "resolve", "sampling_rule"]


def exact_verifier(greedy: bool, chain: bool):
    """The exact rule for a run: greedy, or lossless chain / tree sampling."""
    if greedy:
        return GreedyVerifier()
    return ChainSamplingVerifier() if chain else TreeSamplingVerifier()


def resolve(verifier, greedy: bool, chain: bool):
    """``None`` / ``"exact"`` -> :func:`exact_verifier`; a registered name -> that rule with
    its defaults; a verifier object as is. Checks that the rule can run here."""
    if verifier is None or verifier == "exact":
        v = exact_verifier(greedy, chain)
    elif isinstance(verifier, str):
        v = VERIFIERS.build(verifier, {})
    else:
        v = verifier
    v.check(greedy, chain)
    return v
