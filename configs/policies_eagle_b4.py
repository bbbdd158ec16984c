"""Draft-length policies on the shipped EAGLE-3 head at batch 4 (issue 23's batch axis), the
built-in prompts: plain decoding, fixed k = 1 (the default), 2 and 4, and SpecDec++ with the
shipped acceptance head. `specjax bench --config configs/policies_eagle_b4.py` (batch 1:
configs/policies_eagle.py)."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "eagle@k1", "eagle@k2", "eagle@k4", "eagle@specdec++"),
        method_args={
            "eagle@k1": {"k": 1, "policy": "fixed"},
            "eagle@k2": {"k": 2, "policy": "fixed"},
            "eagle@k4": {"k": 4, "policy": "fixed"},
            "eagle@specdec++": {"k": 6, "policy": "specdec++", "threshold": 0.7},
        },
        prompts="builtin",
        max_new_tokens=64,
        batch_size=4,
        repeats=1,
        output="docs/results/bench_policies_eagle_b4.json",
        plot="docs/results/bench_policies_eagle_b4.png",
    )
