"""Issue 23's policy sweep with the draft model: every draft-length policy that applies to a
drafter with a draft distribution, on the same prompts, interleaved, against plain decoding
of the same batch size, at batch 1, 4 and 16 (`sweep_only`). The same 26 Spec-Bench prompts
as configs/policies_sweep_batched.py and configs/policies_sweep_pl.py (two per category; a
batch of B rows cycles through them), 64 new tokens, greedy, float32, one static cache of 896
positions.

The drafter is `draft_model`'s default stand-in (the target's first layers as a separate
model: no draft model trained for SmolLM2-135M ships, so its drafts are weak and the sweep
asks which policies back off). Fixed k = 1, 2 and 3 are the reference (the best fixed k in
hindsight per batch size); the dynamic policies draft up to k = 4 with their defaults, the
cost-aware ones pricing steps by this machine's measured curves. `draft_model` is the
method's default (`adaptive`, k up to 3, `idle_decay` 0.995). Not here: `specdec++` (no
acceptance head is trained for this drafter: refused), `batch_table` (it needs a profiling
run of its own), `del` (early exit only).
Journaled: `specjax bench --config configs/policies_sweep_draft_model.py --time-limit
MINUTES`, rerun the same command to continue."""

from specjax.experiment import BenchConfig

DYNAMIC = ("adaptive", "confidence", "heuristic", "dsde", "gammatune", "gammatune+",
           "smartspec", "pearl")


def get_config() -> BenchConfig:
    fixed = {f"draft_model@k{k}": {"k": k, "policy": "fixed"} for k in (1, 2, 3)}
    dynamic = {f"draft_model@{p}": {"k": 4, "policy": p} for p in DYNAMIC}
    return BenchConfig(
        methods=("ar", "draft_model", *fixed, *dynamic),
        method_args={**fixed, **dynamic},
        prompts="spec_bench:../shared/data/spec_bench/question.jsonl",
        limit=2,
        max_new_tokens=64,
        batch_sizes=(1, 4, 16),
        sweep_only=True,
        repeats=1,
        cache_len=896,
        journal="docs/results/policies_sweep_draft_model.journal.jsonl",
        output="docs/results/bench_policies_sweep_draft_model.json",
        plot="docs/results/bench_policies_sweep_draft_model.png",
    )
