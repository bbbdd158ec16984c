"""The batch_table policy and `specjax bench --batch-table` (issue 23): the goodput rule by
hand, the lookup, bad tables, and the whole path on a tiny GGUF model."""

import json

import numpy as np
import pytest

from specjax import methods
from specjax.cli import main
from specjax.config import tiny_config
from specjax.errors import PolicyError
from specjax.models.loaders import LoadedModel, load, random_model
from specjax.policies import POLICIES
from specjax.policies.batch_table import (
    FORMAT,
    goodput_curve,
    make_batch_table,
    table_key,
    write_table,
)


def test_goodput_and_table_by_hand():
    # K = 4, verify buckets 1, 2, 4, 5: k = 0..4 verifies T = 1, 2, 4, 4, 5
    cost = (1.0, 1.2, 1.4, 1.6, 2.0)
    # a k = 4 step measured at 2.4 plain steps: d = (2.4 - cost(5)) / 4 = 0.1
    g, d = goodput_curve([0.8, 0.6, 0.4, None], cost, 2.4)
    assert d == pytest.approx(0.1)
    want = [1 / 1.0, 1.8 / 1.3, 2.4 / 1.8, 2.8 / 1.9, 2.8 / 2.4]
    np.testing.assert_allclose(g, want)  # best: k = 3 (1.4737)
    rows = {1: {"acceptance_by_position": [0.8, 0.6, 0.4, 0.0], "tau": 2.4,
                "decode_speedup_vs_ar": 1.0},
            # at batch 8 verifying is dearer and the run slower: k = 0 wins
            8: {"acceptance_by_position": [0.3, 0.1, 0.0, 0.0], "tau": 1.4,
                "speedup_vs_ar": 0.5}}
    curves = {1: cost, 8: (1.0, 1.9, 2.8, 3.7, 4.6)}
    t = make_batch_table("m", rows, lambda K, B: curves[B], {"device": "x"})
    assert t["format"] == FORMAT and t["max_k"] == 4
    assert t["entries"]["1"]["k"] == 3 and t["entries"]["8"]["k"] == 0
    with pytest.raises(PolicyError, match="batch-2 row lacks"):
        make_batch_table("m", {2: {"tau": 1.0}}, lambda K, B: cost, {})


@pytest.fixture(scope="module")
def lm():
    cfg = tiny_config(vocab_size=64)
    return LoadedModel(random_model(cfg, seed=0), None, cfg, "random:tiny", "random")


def _table(path, lm, entries, **key):
    return write_table(path, {"format": FORMAT, "method": "prompt_lookup", "max_k": 4,
                              "key": {**table_key(lm), **key},
                              "entries": {str(b): {"k": k} for b, k in entries.items()}})


def test_policy_lookup_and_bad_tables(lm, tmp_path):
    f = _table(tmp_path / "t.json", lm, {1: 4, 4: 2, 16: 0})
    p = POLICIES.build("batch_table", {"table": str(f)}, max_k=4)
    assert [p.k_for(b) for b in (1, 3, 4, 15, 16, 64)] == [4, 4, 2, 2, 0, 0]
    assert np.asarray(p.init(5)).tolist() == [2] * 5
    m = methods.build("prompt_lookup", lm, {"k": "4", "policy": "batch_table",
                                            "table": str(f)})
    assert m.policy.entries == ((1, 4), (4, 2), (16, 0))
    with pytest.raises(PolicyError, match="needs table=FILE"):
        POLICIES.build("batch_table", {}, max_k=4)
    with pytest.raises(PolicyError, match="nope.json: batch table not found"):
        POLICIES.build("batch_table", {"table": str(tmp_path / "nope.json")}, max_k=4)
    with pytest.raises(PolicyError, match="k 4 for batch 1 exceeds the drafter's maximum k 3"):
        POLICIES.build("batch_table", {"table": str(f)}, max_k=3)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": FORMAT, "key": {}, "entries": {"1": {"kk": 2}}}))
    with pytest.raises(PolicyError, match="field 'entries' must map"):
        POLICIES.build("batch_table", {"table": str(bad)}, max_k=4)
    bad.write_text("[1, 2]")
    with pytest.raises(PolicyError, match="not a batch table"):
        POLICIES.build("batch_table", {"table": str(bad)}, max_k=4)
    other = _table(tmp_path / "o.json", lm, {1: 2}, device="a TPU somewhere")
    with pytest.raises(PolicyError, match=r"o.json: written for another device \(key.device"):
        methods.build("prompt_lookup", lm, {"k": "4", "policy": "batch_table",
                                            "table": str(other)})
    other = _table(tmp_path / "o2.json", lm, {1: 2}, config_sha256="0" * 16)
    with pytest.raises(PolicyError, match="written for another model"):
        methods.build("prompt_lookup", lm, {"k": "4", "policy": "batch_table",
                                            "table": str(other)})


def test_bench_writes_a_table_the_policy_reads(tmp_path, tiny_gguf):
    prompts = tmp_path / "q.jsonl"
    prompts.write_text("".join(json.dumps({"question_id": i, "category": c, "turns": [t]}) + "\n"
                               for i, (c, t) in enumerate([("qa", "hello world hello world"),
                                                           ("code", "abc abc abc abc")])))
    table = tmp_path / "table.json"
    argv = ["bench", "--model", str(tiny_gguf), "--methods", "ar,prompt_lookup",
            "--method-arg", "prompt_lookup.k=4", "--prompts", str(prompts),
            "--max-new-tokens", "8", "--repeats", "1", "--batch-sizes", "1,2",
            "--batch-table", str(table), "--output", str(tmp_path / "r.json"),
            "--numerics", "fast"]  # the exact forward is tested in test_numerics
    assert main(argv) == 2  # prompt lookup's default policy is adaptive: refused up front
    assert not table.exists()
    assert main(argv + ["--method-arg", "prompt_lookup.policy=fixed"]) == 0
    t = json.loads(table.read_text())
    assert set(t["entries"]) == {"1", "2"} and t["max_k"] == 4
    for e in t["entries"].values():
        assert 0 <= e["k"] <= 4 and len(e["goodput"]) == 5 and e["draft_cost"] >= 0
        assert e["k"] == int(np.argmax(e["goodput"]))
    res = json.loads((tmp_path / "r.json").read_text())
    assert res["batch_tables"] == {"prompt_lookup": str(table)}
    m = methods.build("prompt_lookup", load(tiny_gguf), {"k": "4", "policy": "batch_table",
                                                         "table": str(table)})
    assert m.policy.k_for(2) == t["entries"]["2"]["k"]


def test_batch_table_profiles_only_fixed_chains():
    """A batch table is profiled for drafters at a fixed maximum k: a cost-aware default
    policy, or a tree the method drafts by default (eagle, greedy at batch 1), is refused
    with the option that fixes it; a chain asked for by its length, or a tree asked for, is
    profiled."""
    from specjax.bench.main import _table_methods
    from specjax.bench.config import BenchConfig
    from specjax.errors import BenchError

    def names(args):
        return _table_methods(BenchConfig(methods=("ar", "eagle"), method_args=args),
                              ["ar", "eagle"])

    with pytest.raises(BenchError, match=r"profiles chains: run eagle with --method-arg "
                                         r"eagle\.k=K .*tree dynamic:width=2"):
        names({})
    assert names({"eagle": {"k": "3"}}) == ["eagle"]
    assert names({"eagle": {"tree": "levels:2.1"}}) == ["eagle"]
    with pytest.raises(BenchError, match="eagle.policy=fixed.*policy=adaptive"):
        names({"eagle": {"k": "3", "policy": "adaptive"}})
    cfg = BenchConfig(methods=("ar", "eagle"), temperature=0.7)  # sampling: the chain
    assert _table_methods(cfg, ["ar", "eagle"]) == ["eagle"]
