"""specjax.bench.identity: the plain-vs-speculative comparison of the exactness scripts."""

from spec_helpers import make_target, mixed_prompts

from specjax import methods
from specjax.bench.identity import compare_with_plain, first_divergence


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence([], [5]) == 0


def test_compare_with_plain_counts_identical_rows():
    target = make_target()
    prompts = mixed_prompts(3, seed=2)
    m = methods.build("prompt_lookup", target, {"k": "4", "policy": "fixed"})
    c = compare_with_plain(target, prompts, m.drafter, m.policy, batch_size=3,
                           max_new_tokens=8)
    assert (c["identical"], c["prompts"], c["first_divergence"]) == (3, 3, [])
    assert c["plain_s"] > 0 and c["spec_s"] > 0
