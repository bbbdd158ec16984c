"""Draft-length policies side by side on the shipped EAGLE-3 head (issue 23), built-in prompts,
batch 1: fixed k = 1, 2, 4 (the best fixed k in hindsight is the reference), the confidence
stop, the cost-aware adaptive policy and SpecDec++ with the shipped acceptance head at two
thresholds. `specjax bench --config configs/policies_eagle.py`."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    return BenchConfig(
        methods=("ar", "eagle@k1", "eagle@k2", "eagle@k4", "eagle@confidence", "eagle@adaptive",
                 "eagle@specdec++", "eagle@specdec++h8"),
        method_args={
            "eagle@k1": {"k": 1},
            "eagle@k2": {"k": 2},
            "eagle@k4": {"k": 4},  # the drafter's own default, before issue 23's measurement
            "eagle@confidence": {"k": 6, "policy": "confidence"},
            "eagle@adaptive": {"k": 6, "policy": "adaptive"},
            "eagle@specdec++": {"k": 6, "policy": "specdec++", "threshold": 0.7},
            "eagle@specdec++h8": {"k": 6, "policy": "specdec++", "threshold": 0.8},
        },
        prompts="builtin",
        max_new_tokens=64,
        repeats=1,
        output="docs/results/bench_policies_eagle.json",
        plot="docs/results/bench_policies_eagle.png",
    )
