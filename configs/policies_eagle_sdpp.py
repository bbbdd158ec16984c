"""SpecDec++ against fixed k = 1 on the shipped EAGLE-3 head after the acceptance head's
margin feature stopped using a top-k over the draft vocabulary (its stop rule: 1.2 ms -> 0.10
ms per drafted token at batch 1, docs/results/policy_overhead.json). Built-in prompts, batch 1:
`specjax bench --config configs/policies_eagle_sdpp.py`."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "eagle@k1", "eagle@specdec++"),
        method_args={
            "eagle@k1": {"k": 1},
            "eagle@specdec++": {"k": 6, "policy": "specdec++", "threshold": 0.7},
        },
        prompts="builtin",
        max_new_tokens=64,
        repeats=1,
        output="docs/results/bench_policies_eagle_sdpp.json",
    )
