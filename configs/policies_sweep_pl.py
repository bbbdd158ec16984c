"""Issue 23's policy sweep with prompt lookup: every draft-length policy that applies to a
drafter without a draft distribution, on the same prompts, interleaved, against plain
decoding of the same batch size, at batch 1, 4 and 16 (`sweep_only`). The same 26 Spec-Bench
prompts as configs/policies_sweep_batched.py (two per category; a batch of B rows cycles
through them), 64 new tokens, greedy, float32, one static cache of 896 positions.

Fixed k = 2, 4, 8 and 16 are the reference (the best fixed k in hindsight per batch size);
the dynamic policies draft up to k = 16 (prompt lookup's default length) with their
defaults, the cost-aware ones pricing steps by this machine's measured verify curve.
`prompt_lookup` is the method's default, which is the `adaptive` row (k = 16). Not here:
`confidence` (it stops on the draft's top-1 probability, which prompt lookup has not: under
it prompt lookup drafts as fixed k does), `dsde` and `specdec++` (they read the draft
distribution: refused for prompt lookup), `batch_table` (it needs a profiling run of its
own).
Journaled: `specjax bench --config configs/policies_sweep_pl.py --time-limit MINUTES`,
rerun the same command to continue.

As run on 2026-12-01 (batch 1 and the first 5 of the 7 batches of 4), `adaptive`'s batch test
counted every row asked for a draft at its expected tokens; since then it weighs each row by
its chance of offering a draft (configs/policies_pl_offer_b4.py measures that at batch 4), so
the `prompt_lookup` row of the batches that remain runs the new rule; the other rows are
unchanged."""

from specjax.experiment import BenchConfig

DYNAMIC = ("heuristic", "gammatune", "gammatune+", "smartspec", "pearl")


def get_config() -> BenchConfig:
    fixed = {f"prompt_lookup@k{k}": {"k": k, "policy": "fixed"} for k in (2, 4, 8, 16)}
    dynamic = {f"prompt_lookup@{p}": {"k": 16, "policy": p} for p in DYNAMIC}
    return BenchConfig(
        methods=("ar", "prompt_lookup", *fixed, *dynamic),
        method_args={**fixed, **dynamic},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=2,
        max_new_tokens=64,
        batch_sizes=(1, 4, 16),
        sweep_only=True,
        repeats=1,
        cache_len=896,
        journal="docs/results/policies_sweep_pl.journal.jsonl",
        output="docs/results/bench_policies_sweep_pl.json",
        plot="docs/results/bench_policies_sweep_pl.png",
    )
