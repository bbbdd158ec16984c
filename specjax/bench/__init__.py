"""``specjax bench``: methods side by side on the same prompts, in one process, interleaved.

For every repeat, every batch of prompts and every method in turn (so machine drift hits all
methods alike) the batch is generated and timed; compilation is timed apart (ahead-of-time) and
never enters tokens/s. Per method and category the report holds tokens/s (median over repeats
and its min/max), the speedup over ``ar`` measured in the same run, tau (new tokens per target
forward), acceptance by draft position, compile time, and whether the greedy output is
identical to ``ar`` for every prompt.

Modules: :mod:`~specjax.bench.config` (:class:`BenchConfig`, the experiment),
:mod:`~specjax.bench.main` (:func:`run`: a config -> results), :mod:`~specjax.bench.runner`
(the interleaved runner), :mod:`~specjax.bench.prompts` (prompts, flag parsers),
:mod:`~specjax.bench.journal` (resumable runs), :mod:`~specjax.bench.report` (summaries and
the table), :mod:`~specjax.bench.plots` (figures), :mod:`~specjax.bench.peers` (Hugging Face
transformers on the same weights), :mod:`~specjax.bench.curve` (``--verify-curve``) and
:mod:`~specjax.bench.machine` (where and when a result ran). The names below are re-exported
from them; the package never imports :mod:`specjax.cli` (the CLI imports it).
"""

from specjax.bench.config import BenchConfig
from specjax.bench.curve import (
    _fill_curve,
    _JunkDrafter,
    verify_curve,
    verify_curve_in_loop,
)
from specjax.bench.journal import Journal, prompts_digest
from specjax.bench.machine import cpu_name, environment, machine_description, utc_now
from specjax.bench.main import run
from specjax.bench.peers import _peer_runner, dense_hf_model
from specjax.bench.plots import plot, plot_batch_sizes, plot_verify_curve
from specjax.bench.prompts import (
    BUILTIN,
    load_prompts,
    parse_batch_sizes,
    parse_bench_method_args,
    parse_positive_ints,
)
from specjax.bench.report import (
    decode_rates,
    format_table,
    per_repeat_rates,
    summarize,
    summarize_batch_sizes,
)
from specjax.bench.runner import Run, group_key, plan_groups, run_bench, sweep_batches
from specjax.errors import BenchError

__all__ = [
    "BUILTIN", "BenchConfig", "BenchError", "Journal", "Run", "cpu_name", "decode_rates",
    "dense_hf_model", "environment", "format_table", "group_key", "load_prompts",
    "machine_description", "parse_batch_sizes", "parse_bench_method_args",
    "parse_positive_ints", "per_repeat_rates", "plan_groups", "plot", "plot_batch_sizes",
    "plot_verify_curve", "prompts_digest", "run", "run_bench", "summarize",
    "summarize_batch_sizes", "sweep_batches", "utc_now", "verify_curve",
    "verify_curve_in_loop",
]
