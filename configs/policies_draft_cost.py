"""Issue 23: the cost-aware policies with the drafter's own cost counted, at batch 1 and 4.

`adaptive` and `smartspec` weigh expected tokens against the step's cost: the verify block
(the measured verify-cost curve) plus `k` draft steps at `draft_cost` each, measured in the
decode loop on this machine at the running batch size and cached (specjax.draft_costs). On the
project's 2-core CPU the shipped EAGLE-3 head's draft step is a few percent of a plain step at
batch 1 but about a third of one at batch 4, where no fixed k pays
(configs/policies_spec_bench_eagle.py: k = 1 0.92x, k = 3 0.66x): a policy that counts it
should back off to plain decoding there and still draft at batch 1. Against fixed k = 1 and
k = 3 (the eagle default) and plain decoding of the same batch size; one question per
Spec-Bench category (13 prompts), 64 new tokens, greedy, float32, one static cache of 896
positions. Journaled: `specjax bench --config configs/policies_draft_cost.py --time-limit
MINUTES`, rerun the same command to continue.

As run, the cost-aware policies priced steps by draft-cost format 3; a rerun measures the
current model (configs/README.md, "Cost models of the policy configs")."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    args = {"eagle@k1": {"k": 1, "policy": "fixed"}, "eagle@k3": {"k": 3, "policy": "fixed"},
            "eagle@adaptive": {"k": 6, "policy": "adaptive"},
            "eagle@smartspec": {"k": 6, "policy": "smartspec"}}
    return BenchConfig(
        methods=("ar", *args),
        method_args=args,
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=1,
        max_new_tokens=64,
        batch_sizes=(1, 4),
        repeats=1,
        cache_len=896,
        journal="docs/results/policies_draft_cost.journal.jsonl",
        output="docs/results/bench_policies_draft_cost.json",
        plot="docs/results/bench_policies_draft_cost.png",
    )
