"""Token trees against chains and plain decoding, for the two self-speculative drafters."""

from specjax.experiment import BenchConfig


def get_config() -> BenchConfig:
    dynamic = {"tree": "dynamic", "tree_width": 3, "tree_nodes": 10}
    return BenchConfig(
        methods=("ar", "layer_skip", "layer_skip@topk", "layer_skip@dynamic", "early_exit",
                 "early_exit@dynamic"),
        method_args={
            "layer_skip@topk": {"tree": "topk", "tree_width": 2},
            "layer_skip@dynamic": dynamic,
            "early_exit@dynamic": dynamic,
        },
        prompts="builtin",
        max_new_tokens=64,
        repeats=2,
        output="docs/results/bench_trees.json",
        plot="docs/results/bench_trees.png",
    )
