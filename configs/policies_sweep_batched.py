"""Issue 23's policy sweep above batch 1, the shipped EAGLE-3 head: every registered
draft-length policy with the same drafter on the same prompts, interleaved, against plain
decoding of the same batch size, at batch 4 and 16 (`sweep_only`: the batch-1 rows of these
policies are configs/policies_spec_bench_eagle.py, earlier head, and
configs/policies_step_cost_b1.py, this head). Two questions per Spec-Bench category (26
prompts; a batch of B rows cycles through them, so batch 4 is 7 batches and batch 16 is 2),
64 new tokens, greedy, float32, one static cache of 896 positions.

Fixed k = 1..3 are the reference (the best fixed k in hindsight per batch size); the dynamic
policies draft up to k = 6 with their defaults, the cost-aware ones pricing steps by this
machine's measured verify curve and draft costs (measured on first use). `eagle` is the
method's default above batch 1 (`adaptive`, k = 3; a run whose costs say no draft can pay
decodes plainly). `batch_table` needs a profiling run of its own and is not here.
Journaled: `specjax bench --config configs/policies_sweep_batched.py --time-limit MINUTES`,
rerun the same command to continue."""

from specjax.experiment import BenchConfig

DYNAMIC = ("confidence", "adaptive", "specdec++", "heuristic", "dsde", "gammatune",
           "gammatune+", "smartspec", "pearl")


def get_config() -> BenchConfig:
    fixed = {f"eagle@k{k}": {"k": k, "policy": "fixed"} for k in (1, 2, 3)}
    dynamic = {f"eagle@{p}": {"k": 6, "policy": p} for p in DYNAMIC}
    return BenchConfig(
        methods=("ar", "eagle", *fixed, *dynamic),
        method_args={**fixed, **dynamic},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=2,
        max_new_tokens=64,
        batch_sizes=(4, 16),
        sweep_only=True,
        repeats=1,
        cache_len=896,
        journal="docs/results/policies_sweep_batched.journal.jsonl",
        output="docs/results/bench_policies_sweep_batched.json",
        plot="docs/results/bench_policies_sweep_batched.png",
    )
