"""The speedup intervals of `specjax bench` (specjax.bench.intervals): a paired bootstrap over
prompt batches, checked on hand-made runs whose answer is known."""

import numpy as np
import pytest

from specjax.bench.intervals import speedup_interval, speedup_point
from specjax.bench.report import format_table, summarize
from specjax.bench.runner import Run


def run(method, pid, wall, tokens=100, repeat=0, prefill=None, category="c"):
    return Run(method=method, category=category, repeat=repeat, prompt_ids=[pid],
               new_tokens=tokens, wall_s=wall, forwards=tokens, drafted_at=None,
               accepted_at=None, tokens=[[1] * tokens], prefill_s=prefill)


def test_constant_ratio_gives_a_point_interval_however_long_the_prompts():
    # plain decoding's time varies 20x between prompts; the method is 1.25x faster on each:
    # paired, every draw says 1.25 (an unpaired draw would spread widely)
    walls = [1.0, 20.0, 3.0, 7.5, 12.0]
    ar = [run("ar", str(i), w) for i, w in enumerate(walls)]
    m = [run("m", str(i), w / 1.25) for i, w in enumerate(walls)]
    lo, hi = speedup_interval(m, ar)
    assert lo == pytest.approx(1.25) and hi == pytest.approx(1.25)


def test_interval_holds_the_point_estimate_and_narrows_with_more_prompts():
    rng = np.random.default_rng(1)

    def make(n):
        ar, m = [], []
        for i in range(n):
            w = float(rng.uniform(5, 10))
            ar.append(run("ar", str(i), w))
            m.append(run("m", str(i), w / float(rng.normal(1.1, 0.1))))
        return m, ar

    def point(m, ar):
        return (sum(r.new_tokens for r in m) / sum(r.wall_s for r in m)) / (
            sum(r.new_tokens for r in ar) / sum(r.wall_s for r in ar))

    m, ar = make(10)
    lo, hi = speedup_interval(m, ar)
    assert speedup_point(m, ar) == pytest.approx(point(m, ar))
    assert lo < point(m, ar) < hi
    assert speedup_interval(m, ar, seed=3) == speedup_interval(m, ar, seed=3)  # seeded
    m2, ar2 = make(200)
    lo2, hi2 = speedup_interval(m2, ar2)
    assert hi2 - lo2 < (hi - lo) / 2
    assert lo2 < point(m2, ar2) < hi2 and 1.05 < lo2 and hi2 < 1.15


def test_repeats_pool_per_prompt_and_only_shared_prompts_count():
    ar = [run("ar", str(i), 10.0, repeat=k) for i in range(3) for k in range(2)]
    # each prompt: one slow and one fast repeat, 20 s in all against plain decoding's 20 s
    m = [run("m", str(i), w, repeat=k) for i in range(3) for k, w in enumerate((15.0, 5.0))]
    m.append(run("m", "only-method", 1.0))  # not run by ar: left out, not a crash
    assert speedup_interval(m, ar) == pytest.approx((1.0, 1.0))


def test_too_few_prompt_batches_or_no_prefill_time_give_none():
    ar = [run("ar", str(i), 10.0) for i in range(2)]
    m = [run("m", str(i), 5.0) for i in range(2)]
    assert speedup_interval(m, ar) is None
    ar = [run("ar", str(i), 10.0, prefill=1.0) for i in range(4)]
    m = [run("m", str(i), 5.0, prefill=1.0) for i in range(3)] + [run("m", "3", 5.0)]
    assert speedup_interval(m, ar) is not None
    assert speedup_interval(m, ar, decode=True) is None  # a run without its prefill time
    assert speedup_point(m, ar, decode=True) is None
    assert speedup_point(m, [run("ar", "elsewhere", 1.0)]) is None  # no prompt in common


def test_decode_interval_uses_the_time_after_the_prefill():
    # the same decode phase (9 s), the method's prefill 4 s dearer: total 0.69x, decode 1.0x
    ar = [run("ar", str(i), 10.0, prefill=1.0) for i in range(4)]
    m = [run("m", str(i), 14.5, prefill=5.5) for i in range(4)]
    lo, hi = speedup_interval(m, ar, decode=True)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)
    lo, hi = speedup_interval(m, ar)
    assert hi == pytest.approx(10.0 / 14.5)


@pytest.mark.parametrize("kw", [{"level": 1.0}, {"level": 0.0}, {"resamples": 0}])
def test_bad_arguments_are_errors(kw):
    ar = [run("ar", str(i), 10.0) for i in range(4)]
    with pytest.raises(ValueError):
        speedup_interval(ar, ar, **kw)


def test_summary_rows_and_table_carry_the_interval():
    runs = []
    for cat in ("a", "b"):
        for i in range(4):
            runs.append(run("ar", f"{cat}{i}", 10.0, category=cat))
            runs.append(run("m", f"{cat}{i}", 8.0 if cat == "a" else 10.0 + i, category=cat))
    s = summarize(runs, ["ar", "m"], ["a", "b"], {}, {}, greedy=True)
    rows = {(r["category"], r["method"]): r for r in s["rows"]}
    assert rows["a", "ar"]["speedup_ci"] is None
    assert rows["a", "m"]["speedup_ci"] == pytest.approx([1.25, 1.25])
    lo, hi = rows["b", "m"]["speedup_ci"]
    assert lo < rows["b", "m"]["speedup_vs_ar"] < hi < 1.0
    assert rows["ALL", "m"]["speedup_ci"][0] < 1.25  # the slow category pulls it down
    table = format_table(s)
    assert "speedup 95%" in table.splitlines()[0]
    assert "1.25-1.25" in table


def test_intervals_script_pairs_methods_against_a_chosen_base(tmp_path, capsys):
    import dataclasses
    import importlib.util
    import json
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "speedup_intervals", Path(__file__).parents[1] / "scripts" / "speedup_intervals.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    runs = []
    for i in range(4):  # "tree" is 1.1x "chain" on every prompt, "chain" 1.5x plain decoding
        runs += [run("ar", str(i), 15.0 + i), run("chain", str(i), (15.0 + i) / 1.5),
                 run("tree", str(i), (15.0 + i) / 1.65)]
    journal = tmp_path / "j.journal.jsonl"
    journal.write_text(json.dumps({"header": {"model": "m", "batch_size": 1}}) + "\n" + json.dumps(
        {"sweep": False, "runs": [dataclasses.asdict(r) for r in runs]}) + "\n")
    out = tmp_path / "rows.json"
    assert script.main([str(journal), "--base", "chain", "--json", str(out)]) == 0
    rows = {r["method"]: r for r in json.loads(out.read_text())["rows"]
            if r["category"] == "ALL"}
    assert set(rows) == {"ar", "tree"}
    assert rows["tree"]["speedup"] == pytest.approx(1.1)
    assert rows["tree"]["speedup_ci"] == pytest.approx([1.1, 1.1])
    assert rows["ar"]["speedup"] == pytest.approx(1 / 1.5)
    assert "against chain" in capsys.readouterr().out
    assert script.main([str(journal), "--base", "nope"]) == 1
    assert "no runs of the base method 'nope'" in capsys.readouterr().err
