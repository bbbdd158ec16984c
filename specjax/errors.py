"""Every error specjax raises on bad input, in one module (no import of anything else).

Each names the problem (and the file, key or value at fault) in its message. All derive from
:class:`SpecjaxError`, a ``ValueError``, so a caller can catch one type; the CLI prints them
as ``specjax: error: ...`` and exits with status 2.
"""

from __future__ import annotations


class SpecjaxError(ValueError):
    """Base class of specjax's input errors."""


class ConfigError(SpecjaxError):
    """A model or experiment configuration that cannot work."""


class CheckpointError(SpecjaxError):
    """A checkpoint file that cannot be loaded: names the file and the problem."""


class TokenizerError(SpecjaxError):
    """A tokenizer that cannot be built from the given checkpoint."""


class SamplingError(SpecjaxError):
    """Invalid sampling parameters."""


class TreeError(SpecjaxError):
    """An invalid tree topology or tree option."""


class GenerationError(SpecjaxError):
    """Bad input to :func:`specjax.generate` (empty prompt, prompt longer than the cache, ...)."""


class DrafterError(SpecjaxError):
    """A decoding method that cannot work: a drafter, policy or verifier configuration (bad k,
    exit layer, skip set, vocabulary, unknown key or value)."""


class PolicyError(DrafterError):
    """A speculation-length policy configuration that cannot work."""


class VerifierError(DrafterError, GenerationError):
    """An acceptance rule that is unknown or cannot run with the given drafter/sampling (an
    argument of :func:`specjax.generate` as much as a method option, hence both bases)."""


class DataError(SpecjaxError):
    """A data file that cannot be read: the message names the file (and line, where known)."""


class BenchError(SpecjaxError):
    """A benchmark request that cannot run (bad flag value, unknown method, ...)."""


class CLIError(SpecjaxError):
    """A command-line request that cannot run."""
