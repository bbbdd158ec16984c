"""Static sizes the compiled programs are keyed on: cache buckets, prefill padding, verify
block buckets, the cost probes' cache lengths. Shared by the engine and by cost-aware policies
(no other import than specjax.errors)."""

from __future__ import annotations

import math
import statistics

from specjax.errors import PolicyError

# the cost probes' KV-cache length where the generation's is not known
PROBE_CACHE = 256


def bucket_length(n: int, minimum: int = 16) -> int:
    """Coarse prompt bucket that sizes the KV cache (so the decode loop, the expensive compile,
    is shared by every prompt in it): powers of two up to 256, then multiples of 256."""
    if n <= minimum:
        return minimum
    if n <= 256:
        return 1 << (n - 1).bit_length()
    return -(-n // 256) * 256


def cache_length(prompt_len: int, max_new_tokens: int) -> int:
    """Default static KV-cache length for a prompt of ``prompt_len`` tokens and
    ``max_new_tokens`` new ones: the prompt's :func:`bucket_length` plus the new tokens,
    rounded up to a multiple of 64. Prompts of equal cache length share one compiled decode loop
    (per method and batch size)."""
    return -(-(bucket_length(prompt_len) + max_new_tokens) // 64) * 64


def prefill_length(n: int, minimum: int = 16) -> int:
    """Padded prompt length of the prefill forward, finer than :func:`bucket_length` (padding
    costs prefill compute in proportion; a prefill program compiles quickly): powers of two up
    to 64, multiples of 16 up to 256, of 32 up to 512, then of 128. Never above
    ``bucket_length(n)``."""
    if n <= 64:
        p = max(minimum, 1 << (n - 1).bit_length())
    elif n <= 256:
        p = -(-n // 16) * 16
    elif n <= 512:
        p = -(-n // 32) * 32
    else:
        p = -(-n // 128) * 128
    return min(p, bucket_length(n, minimum))


def verify_buckets(K: int) -> tuple[int, ...]:
    """Block sizes the verify forward is compiled for: 1, 2, 4, ... and K + 1."""
    out, b = [], 1
    while b < K + 1:
        out.append(b)
        b *= 2
    out.append(K + 1)
    return tuple(out)


def verify_block(k: int, K: int) -> int:
    """The block a draft of ``k`` tokens is verified in (``k + 1`` tokens, rounded up to the
    next of :func:`verify_buckets` of ``K``)."""
    return next(b for b in verify_buckets(K) if b >= k + 1)


def probe_cache_length(cache_len: int | None) -> int:
    """The KV-cache length a cost probe times steps with for a generation whose cache holds
    ``cache_len`` positions: the nearest of 256, 512, 1,024, ... (in log scale; None: 256).
    A probe whose prompt and decoded tokens need more positions times a longer cache. A plain
    step reads the whole static cache, so the price of drafting moves with it: at batch 4 on
    the project's CPU the EAGLE-3 head's one-token step is 1.28 plain steps at 256 positions
    and 1.23 at 1,024, at batch 1 Medusa-1's three-token step 1.25 at 256 and 1.34 at
    2,048."""
    if cache_len is None:
        return PROBE_CACHE
    n = int(cache_len)
    if n < 1:
        raise PolicyError(f"a cache length must be >= 1, got {cache_len!r}")
    return PROBE_CACHE << max(0, round(math.log2(n / PROBE_CACHE)))


def median_cache_length(prompt_lens, max_new_tokens: int) -> int | None:
    """The cache length of the median prompt (the lower median) with ``max_new_tokens`` new
    tokens: what the cost probes time for a run whose prompts compile caches of their own
    (None for no prompts)."""
    lengths = [cache_length(n, max_new_tokens) for n in prompt_lens]
    return statistics.median_low(lengths) if lengths else None
