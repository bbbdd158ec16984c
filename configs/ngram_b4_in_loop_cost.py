"""`ngram` and prompt lookup at batch 4 priced by what their steps cost in the decode loop
against a plain step: the run of configs/ngram_b4.py (52 Spec-Bench questions, each
category's four as one batch of 4, 64 new tokens, float32, a 1,024-position cache) with both
given `cost=` by hand from two timings of this machine. The in-loop curve (`specjax bench
--verify-curve --in-loop --curve-ks 1,2,4,8,16,17 --curve-batches 4 --curve-prefix 896`,
docs/results/verify_curve_in_loop_b4_p896_2026-12-05.json) timed a loop step verifying 1, 2,
4, 8, 16 and 17 tokens per row at 69, 84, 117, 178, 326 and 408 ms; plain decoding's step was
57 ms in configs/ngram_b4.py's runs. A speculative step that drafts nothing still costs 1.21
plain steps (the verify path's own work), so a 2-token block costs 1.48 plain steps, where the
lone-forward curve that both price by by default (a 145-position cache, relative to a
one-token forward) says 1.20. The costs below are the in-loop ratios times 1.21, each block
size's price for every draft it holds. A diagnostic of whether the price is what loses at
batch 4 (`ngram`'s default ran at 0.90x there, prompt lookup's at 0.95x). Journaled:
`specjax bench --config configs/ngram_b4_in_loop_cost.py --time-limit MINUTES`, rerun the
same command to continue."""

import dataclasses
from pathlib import Path

from specjax.experiment import BenchConfig, load_config

# T = 1..17: the block sizes 2, 4, 8, 16, 17 timed; a shorter draft pays its block's price
CURVE = ",".join(["1", "1.48", "2.04", "2.04"] + ["3.12"] * 4 + ["5.72"] * 8 + ["7.16"])


def get_config() -> BenchConfig:
    return dataclasses.replace(
        load_config(Path(__file__).with_name("ngram_b4.py")),
        methods=("ar", "ngram@in_loop_cost", "prompt_lookup@in_loop_cost"),
        method_args={"ngram@in_loop_cost": {"cost": CURVE},
                     "prompt_lookup@in_loop_cost": {"cost": CURVE}},
        journal="docs/results/ngram_b4_in_loop_cost.journal.jsonl",
        output="docs/results/bench_ngram_b4_in_loop_cost.json",
        plot="docs/results/bench_ngram_b4_in_loop_cost.png",
    )
